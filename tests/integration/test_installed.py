"""What a user installs is what is tested: the wheel holds every module of the source tree, the
suite and its subprocesses import the installed packages, and every command of the installed
console script runs from a folder outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import DATA, PACKAGES, REPO, foreign_modules, installed_roots, tiny_toml


def source_modules(root: Path) -> set[str]:
    """``pkg/sub/mod.py`` of every Python file of :data:`PACKAGES` under ``root``."""
    out = set()
    for pkg in PACKAGES:
        for f in (root / pkg).rglob("*.py"):
            if "__pycache__" not in f.parts:
                out.add(f.relative_to(root).as_posix())
    return out


def test_the_wheel_holds_every_module_of_the_source_tree(tmp_path):
    """Built from a copy of the checkout (nothing written into it); a package folder without
    ``__init__.py`` is left out by ``packages = find:`` and fails here."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    in_wheel = {n for n in zipfile.ZipFile(wheel).namelist()
                if n.endswith(".py") and n.split("/")[0] in PACKAGES}
    want = source_modules(src)
    no_init = sorted({str(Path(m).parent) for m in want}
                     - {str(Path(m).parent) for m in want if m.endswith("/__init__.py")})
    assert not no_init, f"package folders without __init__.py: {no_init}"
    assert in_wheel == want, {"missing from the wheel": sorted(want - in_wheel),
                              "only in the wheel": sorted(in_wheel - want)}


def test_the_suite_imports_the_installed_packages():
    import analysis
    import meanfield
    import meanfield.highdim  # noqa: F401  (a sub-package a wheel once lacked)
    import solvers
    assert all(m.__file__ for m in (meanfield, solvers, analysis))
    assert foreign_modules(dict(sys.modules)) == []


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH needs Python 3.11")
def test_a_subprocess_started_in_the_checkout_imports_the_installed_packages():
    """``python -m`` and ``-c`` put the current folder first on ``sys.path``; the suite's
    subprocesses run with ``PYTHONSAFEPATH=1`` so the checkout does not shadow the install."""
    code = ("import json, sys, meanfield, solvers, analysis, meanfield.highdim, meanfield.cli; "
            "print(json.dumps({n: m.__file__ for n, m in sys.modules.items() "
            "if n.split('.')[0] in ('meanfield', 'solvers', 'analysis') "
            "and getattr(m, '__file__', None)}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    files = {n: Path(f).resolve() for n, f in json.loads(out.stdout).items()}
    roots = installed_roots()
    assert files and all(any(f.is_relative_to(r) for r in roots) for f in files.values()), files


def _console(tmp_path, *args, timeout=600):
    exe = Path(sys.executable).with_name("meanfield")
    assert exe.exists(), f"the console script is not installed beside {sys.executable}"
    return subprocess.run([str(exe), *map(str, args)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout,
                          env=dict(os.environ, NUMBA_NUM_THREADS="1"))


@pytest.mark.slow
def test_every_command_of_the_installed_console_script_runs_outside_the_checkout(tmp_path):
    """A smoke run of each command as the README gives it, from an empty folder."""
    assert not tmp_path.resolve().is_relative_to(REPO)
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(tiny_toml({"data": {"kind": "file", "path": str(DATA / "plane8.csv"),
                                       "target": "y"},
                              "model.n_particles": 100, "dynamics.steps_per_tau": 400,
                              "dynamics.taus": [1e-2, 1e-3]}))
    steps = [
        ("--version",),
        ("run", cfg, "-o", "tiny.h5", "--quiet", "--threads", "1"),
        ("inspect", "tiny.h5"),
        ("inspect", "tiny.h5", "--json"),
        ("analyze", "tiny.h5", "-o", "rep", "--no-w2", "--no-references", "--no-figures",
         "--quiet"),
        ("dichotomies", DATA / "plane8.csv", "--target", "y", "--json"),
        ("reference", "convex", cfg, "--json"),
        ("reference", "gibbs", cfg, "--tau", "1e-2", "--json"),
        ("highdim", "--neurons", "2", "--n", "20", "--d", "200,800,3200", "--json",
         "-o", "hd"),
        ("sweep", "study.toml", "-o", "study", "--workers", "1", "--quiet"),
        ("analyze", "study", "--no-w2", "--no-figures", "--quiet"),
    ]
    (tmp_path / "study.toml").write_text(
        '[data]\nkind = "gaussian"\nn = 6\nd = 2\n[model]\nn_particles = 50\n'
        '[dynamics]\ntaus = [1e-2]\nsteps_per_tau = 200\n[output]\nobserve_every = 50\n'
        '[sweep]\n"dynamics.seed" = [0, 1]\n')
    for args in steps:
        out = _console(tmp_path, *args)
        assert out.returncode == 0, (args, out.stderr[-2000:])
        assert "Traceback" not in out.stderr, (args, out.stderr[-2000:])
    assert (tmp_path / "rep" / "report.json").exists()
    assert json.loads(_console(tmp_path, "dichotomies", DATA / "plane8.csv", "--target", "y",
                               "--json").stdout)["P"] == 58
    assert list((tmp_path / "hd").glob("*.h5"))
    assert len(list((tmp_path / "study").rglob("*.h5"))) == 2
    # the README's Python example on this run: to_xarray() of the run file
    code = "import meanfield; print(dict(meanfield.open_run('tiny.h5').to_xarray().sizes))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "'time'" in out.stdout, out.stderr


@pytest.mark.slow
def test_the_readme_default_run_gives_an_xarray(tmp_path):
    """The README's first command's output (the embedded default: auto-length stages) read
    with ``open_run(...).to_xarray()``, shortened to two small stages."""
    from meanfield import config
    cfg = config.embedded_default()
    assert cfg.dynamics.steps_per_tau == "auto"
    text = (REPO / "data" / "plane8.toml").read_text()
    assert 'steps_per_tau = "auto"' in text
    short = tiny_toml({"data": {"kind": "file", "path": str(DATA / "plane8.csv"),
                                "target": "y"},
                       "model.n_particles": 200, "dynamics.steps_per_tau": "auto",
                       "dynamics.max_steps_per_tau": 800, "dynamics.taus": [1e-2, 1e-3]})
    (tmp_path / "default.toml").write_text(short)
    out = _console(tmp_path, "run", "default.toml", "-o", "default.h5", "--quiet",
                   "--threads", "1")
    assert out.returncode == 0, out.stderr
    code = ("import meanfield; ds = meanfield.open_run('default.h5').to_xarray(); "
            "print(sorted(set(ds.stage.values.tolist())), ds.attrs['steps_per_tau'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[0,", "1]", "auto"]
