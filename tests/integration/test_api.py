"""The package roots: exported verbs resolve, are documented, and importing stays light."""

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import analysis
import meanfield
import solvers

ROOTS = (meanfield, solvers, analysis)
EXPORTED = [(p, n) for p in ROOTS for n in p.__all__ if n != "__version__"]


@pytest.mark.parametrize("pkg,name", EXPORTED, ids=[f"{p.__name__}.{n}" for p, n in EXPORTED])
def test_exported_names_are_documented(pkg, name):
    obj = getattr(pkg, name)
    doc = inspect.getdoc(obj) or ""
    assert len(doc.splitlines()[0]) > 10, f"{pkg.__name__}.{name} has no summary line"
    if inspect.isfunction(obj):
        params = [p for p in inspect.signature(obj).parameters.values()
                  if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        sections = ["Returns", "Raises"] + (["Parameters"] if params else [])
        missing = [s for s in sections if f"{s}\n---" not in doc]
        assert not missing, f"{pkg.__name__}.{name}: docstring lacks {missing}"


def test_dir_lists_exports_and_unknown_name_raises():
    for pkg in ROOTS:
        assert set(pkg.__all__) <= set(dir(pkg))
        with pytest.raises(AttributeError):
            getattr(pkg, "no_such_verb")


def test_import_of_roots_is_light():
    code = ("import sys, meanfield, solvers, analysis; "
            "print(sorted(m for m in ('numba', 'ot', 'h5py', 'matplotlib', 'scipy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.strip() == "[]"


def test_example_script_help():
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "examples" / "low_temperature_study.py"),
                          "--help"], capture_output=True, text=True, check=True)
    assert "--threads" in out.stdout and "lowtemp-study" in out.stdout


def test_analyze_study_dir_prints_and_writes(tmp_path, monkeypatch, capsys):
    """``meanfield analyze STUDY_DIR`` without --json (the summary path) runs to the end."""
    import meanfield.sweep.summary as S
    from meanfield import cli
    (tmp_path / "study").mkdir()
    monkeypatch.setattr(S, "is_study_dir", lambda p: True)
    monkeypatch.setattr(S, "analyze_study", lambda d, w2=True: {"stub": True})
    monkeypatch.setattr(S, "format_markdown", lambda r: "STUDY TABLE")
    written = []
    monkeypatch.setattr(S, "write_report", lambda r, o, figures=True: written.append(o))
    assert cli.main(["analyze", str(tmp_path / "study"), "--no-figures"]) == 0
    out, err = capsys.readouterr()
    assert "STUDY TABLE" in out and "report in" in err
    # written into a temporary sibling folder that then became the report folder
    final = Path(str((tmp_path / "study").resolve()) + "-report")
    assert len(written) == 1 and written[0].parent == final.parent
    assert written[0].name.startswith(".study-report.") and not written[0].exists()
    assert final.is_dir()


