"""The field's faults: what the environment and odd paths do to a command, one test per case.
Each case ends in one line with its exit code (2 bad input, 1 the environment), or changes
nothing at all, and leaves no file behind.

Cases: closed or broken standard streams; no home folder; numba settings that cannot work; no
thread to start (``ulimit -u``); configs nested too deeply or holding huge integers; a wall clock
that steps back; a data file that is a link into a content store; a report folder that is a
link; control characters in a file name; a folder as ``data.path``.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA, tiny_toml
from support import assert_identical, leftovers, the_line

from meanfield import cli

REPO = Path(__file__).resolve().parents[2]
TINY = tiny_toml({"dynamics.steps_per_tau": 100, "output.snapshots_per_tau": 2})


def cli_proc(args, cwd, env=None, **kw):
    """``python -m meanfield ARGS`` in a subprocess on one numba thread."""
    e = dict(os.environ, NUMBA_NUM_THREADS="1")
    e.update(env or {})
    kw.setdefault("capture_output", True)
    return subprocess.run([sys.executable, "-m", "meanfield", *map(str, args)], cwd=cwd,
                          env=e, text=True, timeout=300, **kw)


def in_process(capsys, argv, want):
    code = cli.main([str(a) for a in argv])
    return the_line(capsys.readouterr().err, code, want)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tiny config and its run file, written with ordinary standard streams."""
    d = tmp_path_factory.mktemp("reference")
    cfg = d / "tiny.toml"
    cfg.write_text(TINY)
    r = cli_proc(["run", cfg, "-o", d / "ref.h5", "--quiet"], d)
    assert r.returncode == 0, r.stderr
    return cfg, d / "ref.h5"


# ------------------------------------------------------------------ 1. the standard streams

def _closing(*fds):
    def pre():
        for fd in fds:
            os.close(fd)
    return pre


@pytest.mark.parametrize("closed", [(1,), (2,), (0, 1, 2)], ids=["stdout", "stderr", "all"])
def test_closed_standard_streams_change_neither_exit_code_nor_files(reference, tmp_path, closed):
    """``meanfield run >&-`` was a traceback and exit 1; ``2>&-`` exit 1 in silence, the lock
    file having taken descriptor 2. Now: exit 0, the same run file, nothing else written."""
    cfg, ref = reference
    out = tmp_path / "run.h5"
    r = cli_proc(["run", cfg, "-o", out, "--quiet"], tmp_path, capture_output=False,
                 stdout=subprocess.PIPE if 1 not in closed else None,
                 stderr=subprocess.PIPE if 2 not in closed else None,
                 preexec_fn=_closing(*closed))
    assert r.returncode == 0, r.stderr
    assert_identical(ref, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.h5"]


def test_a_broken_stderr_does_not_change_the_run(reference, tmp_path):
    """stderr a pipe whose reader has gone (EPIPE): the run ends as usual, exit 0, and its
    path is still printed on stdout."""
    cfg, ref = reference
    out = tmp_path / "run.h5"
    rd, wr = os.pipe()
    os.close(rd)
    try:
        r = cli_proc(["run", cfg, "-o", out, "--quiet"], tmp_path, capture_output=False,
                     stdout=subprocess.PIPE, stderr=wr)
    finally:
        os.close(wr)
    assert (r.returncode, r.stdout.strip()) == (0, str(out))
    assert_identical(ref, out)
    assert leftovers(out) == []


# ------------------------------------------------------------------------ 2. no home folder

@pytest.fixture
def homeless(monkeypatch, tmp_path):
    """No ``HOME`` and no passwd entry (a container's user); the temporary folder in
    ``tmp_path``."""
    import pwd
    import tempfile

    from analysis import refcache

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    for var in ("HOME", "MEANFIELD_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setitem(refcache._state, "fallback", None)
    (tmp_path / "tmp").mkdir()
    return tmp_path / "tmp"


def test_no_home_folder_puts_the_reference_cache_in_the_temporary_folder(homeless):
    from analysis import refcache
    with pytest.warns(refcache.CacheLocationWarning, match="no home folder"):
        folder = refcache.cache_dir()
    assert folder == homeless / f"meanfield-cache-{os.getuid()}" / "references"
    assert refcache.cache_dir() == folder            # said once
    assert (os.stat(folder.parent).st_mode & 0o777) == 0o700


def test_analyze_without_a_home_folder_is_a_note_not_a_traceback(reference, homeless, tmp_path,
                                                                 capsys, one_thread):
    """The exact W2 between snapshots goes through the reference cache."""
    _, run = reference
    code = cli.main(["analyze", str(run), "-o", str(tmp_path / "rep"), "--quiet",
                     "--no-figures", "--no-references", "--no-sensitivity"])
    err = capsys.readouterr().err
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if ln.startswith("meanfield: note:")]
    assert len(notes) == 1 and "no home folder" in notes[0], err
    assert "Traceback" not in err
    assert (tmp_path / "rep" / "report.md").exists()
    assert list((homeless / f"meanfield-cache-{os.getuid()}" / "references").iterdir())


# ------------------------------------------------------------------------- 3. numba settings

@pytest.mark.parametrize("value", ["0", "x", "", "-2"])
def test_numba_num_threads_that_numba_cannot_use_is_one_line_exit_2(reference, monkeypatch,
                                                                      capsys, value):
    _, run = reference
    monkeypatch.setenv("NUMBA_NUM_THREADS", value)
    line = in_process(capsys, ["inspect", run], 2)
    assert line.startswith(f"meanfield: error: environment variable NUMBA_NUM_THREADS="
                           f"{value!r}: must be a whole number >= 1"), line


def test_numba_num_threads_0_no_longer_breaks_inspect(reference, tmp_path):
    """In a process of its own: numba reads the variable when it is imported."""
    _, run = reference
    r = cli_proc(["inspect", run], tmp_path, env={"NUMBA_NUM_THREADS": "0"})
    assert "NUMBA_NUM_THREADS='0'" in the_line(r.stderr, r.returncode, 2)


def _tbb_loads() -> bool:
    try:
        import numba.np.ufunc.tbbpool  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(_tbb_loads(), reason="TBB is installed here")
@pytest.mark.parametrize("layer", ["tbb", "safe", "nonsense"])
def test_a_threading_layer_that_does_not_load_is_refused_before_any_file(tmp_path, monkeypatch,
                                                                        capsys, layer):
    """``NUMBA_THREADING_LAYER=tbb`` without TBB was a traceback from the first parallel kernel
    and left ``RUN.h5.part`` behind."""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    monkeypatch.setenv("NUMBA_THREADING_LAYER", layer)
    monkeypatch.chdir(tmp_path)
    line = in_process(capsys, ["run", cfg, "-o", tmp_path / "run.h5", "--quiet"], 2)
    assert f"NUMBA_THREADING_LAYER={layer!r}" in line, line
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.toml"]


# ---------------------------------------------------------------- 4. no thread can be started

class _NoThreads:
    """Stands for :mod:`threading` where no thread can be started."""

    class Thread:
        def __init__(self, *a, **kw):
            pass

        def start(self):
            raise RuntimeError("can't start new thread")


@pytest.mark.parametrize("how", ["SIGINT", "RuntimeError"])
def test_no_thread_to_start_names_the_limit_not_an_interrupt(monkeypatch, capsys, how):
    """Under ``ulimit -u``, OpenBLAS cannot start its threads while NumPy loads and raises
    SIGINT on itself: that was reported as 'interrupted', exit 130."""
    import meanfield.cli.inspect as inspect_cmd
    from meanfield import environment

    def starved(args):
        if how == "SIGINT":
            signal.raise_signal(signal.SIGINT)
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(inspect_cmd, "main", starved)
    monkeypatch.setattr(environment, "threading", _NoThreads)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2, 2))
    line = in_process(capsys, ["inspect", "x.h5"], 1)
    assert line == ("meanfield: error: cannot start a thread: the limit on this user's processes "
                    "and threads is reached (ulimit -u = 2); raise it (e.g. ulimit -u 4096) or "
                    "end some of them")


def test_a_ctrl_c_with_threads_to_spare_is_still_an_interrupt(monkeypatch, capsys):
    import meanfield.cli.inspect as inspect_cmd

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(inspect_cmd, "main", interrupted)
    assert in_process(capsys, ["inspect", "x.h5"], 130) == "meanfield: interrupted"


@pytest.mark.skipif(os.geteuid() == 0, reason="RLIMIT_NPROC does not bind root")
def test_ulimit_u_is_named(reference, tmp_path):
    """The real thing: ``ulimit -u 1`` in the child (OpenBLAS prints lines of its own)."""
    cfg, _ = reference

    def pre():
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    r = cli_proc(["run", cfg, "-o", tmp_path / "run.h5", "--quiet"], tmp_path, preexec_fn=pre)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("meanfield: error: cannot start a thread") and "ulimit -u" in last
    assert "interrupted" not in r.stderr


# --------------------------------------------------------- 5. nesting and integers without end

DEEP = "a = " + "[" * 10000 + "\n"
HUGE = TINY.replace("seed = 3", "seed = " + "9" * 5000)


@pytest.mark.parametrize("command", ["run", "dichotomies", "sweep"])
@pytest.mark.parametrize("text, reason", [(DEEP, "nested too deeply"),
                                          (HUGE, "holds an integer of more than 4300 digits")],
                         ids=["deep", "huge-int"])
def test_unbounded_toml_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys, command,
                                                    text, reason):
    """Was a 3000-line RecursionError, or Python's int-string limit as a traceback."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    monkeypatch.chdir(tmp_path)
    line = in_process(capsys, [command, cfg], 2)
    assert line.startswith(f"meanfield: error: {cfg}: {reason}"), line
    assert [p.name for p in tmp_path.iterdir()] == ["bad.toml"]


@pytest.mark.parametrize("change, field", [
    ({"dynamics.lam": 10 ** 400}, "dynamics.lam"),
    ({"dynamics.taus": [10 ** 400]}, "dynamics.taus[0]"),
    ({"data": {"kind": "inline", "X": [[1, 2], [3, 10 ** 400]], "y": [1, 2]}}, "data.X[1]"),
    ({"data": {"kind": "inline", "X": [[1, 2], [3, 4]], "y": [1, -10 ** 400]}}, "data.y[1]"),
], ids=["lam", "taus", "inline-X", "inline-y"])
def test_an_integer_beyond_the_float_range_names_its_field(tmp_path, capsys, change, field):
    """Within the digit limit but beyond a float: was ``OverflowError`` as a traceback."""
    cfg = tmp_path / "big.toml"
    cfg.write_text(tiny_toml(change))
    line = in_process(capsys, ["dichotomies", cfg], 2)
    assert line.startswith(f"meanfield: error: {cfg}: {field}: "), line


def test_deep_nesting_below_the_recursion_limit_is_bounded_too(tmp_path, capsys):
    from meanfield.config import MAX_DEPTH
    cfg = tmp_path / "d.toml"
    cfg.write_text(TINY.replace("taus = [0.01, 0.001]",
                                "taus = " + "[" * 200 + "1" + "]" * 200))
    line = in_process(capsys, ["run", cfg], 2)
    assert f"at most {MAX_DEPTH}" in line, line


# ------------------------------------------------------------------- 6. a monotonic clock

def test_a_wall_clock_stepping_back_gives_no_negative_duration(tmp_path, monkeypatch, capsys,
                                                               one_thread):
    """``run`` printed ``wrote RUN in -3580.9 s`` when the clock stepped back an hour."""
    real = time.time
    calls = {"n": 0}

    def stepping_back():
        calls["n"] += 1
        return real() - 3600.0 * (calls["n"] > 1)
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    monkeypatch.setattr(time, "time", stepping_back)
    code = cli.main(["run", str(cfg), "-o", str(tmp_path / "run.h5"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    seconds = float(re.search(r"wrote .* in (\S+) s", err).group(1))
    assert 0 <= seconds < 600, err


def test_no_duration_is_taken_from_the_wall_clock():
    """``time.time()`` is a timestamp; a difference of two is no duration."""
    import importlib
    bad = []
    for pkg in ("meanfield", "analysis", "solvers"):
        root = Path(importlib.import_module(pkg).__file__).parent
        for path in sorted(root.rglob("*.py")):
            for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"time\.time\(\)\s*-|-\s*time\.time\(\)", text):
                    bad.append(f"{path.relative_to(root.parent)}:{i}: {text.strip()}")
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------- 7. a link into a content store

def test_a_data_file_linked_into_a_content_store_is_read_by_its_own_name(tmp_path, capsys):
    """git-annex, DataLad, DVC: ``plane8.csv -> .git/annex/objects/.../SHA256E-s...``, a target
    without ``.csv``. Was refused ('columns are chosen by name only in a .csv file')."""
    from meanfield import config
    store = tmp_path / ".git" / "annex" / "objects"
    store.mkdir(parents=True)
    blob = store / "SHA256E-s312--0b5c2e"
    blob.write_bytes((DATA / "plane8.csv").read_bytes())
    (tmp_path / "plane8.csv").symlink_to(blob)
    cfg = tmp_path / "c.toml"
    cfg.write_text(tiny_toml({"data": {"kind": "file", "path": "plane8.csv", "target": "y"}}))
    assert config.load(cfg).data.path == str(tmp_path.resolve() / "plane8.csv")
    code = cli.main(["dichotomies", str(cfg), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert '"n": 8' in out


def test_a_link_that_keeps_the_suffix_resolves_as_before(tmp_path):
    """The config's hash (which holds the resolved path) stays what it was."""
    from meanfield import config
    (tmp_path / "a.csv").symlink_to(DATA / "plane8.csv")
    cfg = tmp_path / "c.toml"
    cfg.write_text(tiny_toml({"data": {"kind": "file", "path": "a.csv", "target": "y"}}))
    assert config.load(cfg).data.path == str((DATA / "plane8.csv").resolve())


# ----------------------------------------------------------------- 8. a report folder link

def test_analyze_writes_through_a_link_to_a_folder(reference, tmp_path, capsys, one_thread):
    """``analyze RUN -o LINK`` replaced the link by a folder and left the old report where
    the link pointed; now the link stays and the folder it points to holds the new report."""
    _, run = reference
    real = tmp_path / "real"
    real.mkdir()
    (real / "report.md").write_text("stale")
    link = tmp_path / "LINK"
    link.symlink_to(real)
    code = cli.main(["analyze", str(run), "-o", str(link), "--quiet", "--no-figures",
                     "--no-references", "--no-sensitivity", "--no-w2"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert (real / "report.md").read_text() != "stale"
    assert (real / "report.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LINK", "real"]


# ------------------------------------------------------------ 9. control characters in names

FORGED = "x\nmeanfield: error: all is well\r.toml"


def test_a_newline_in_a_file_name_cannot_split_the_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = in_process(capsys, ["run", FORGED], 2)
    assert line == ("meanfield: error: x\\nmeanfield: error: all is well\\r.toml: no such file")


def test_a_newline_in_a_data_path_cannot_split_the_error(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(tiny_toml({"data": {"kind": "file", "path": "a\nb\x1b[2J.csv"}}))
    line = in_process(capsys, ["dichotomies", cfg], 2)
    assert "a\\nb\\x1b[2J.csv" in line, line


def test_a_newline_in_a_usage_error_cannot_split_it(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "a.toml", "b\nmeanfield: error: forged"])
    the_line(capsys.readouterr().err, exc.value.code, 2)


def test_one_line_escapes_every_line_break():
    from meanfield.errors import one_line
    text = "a\nb\rc\x0bd\x0ce\x1cf\x1dg\x1eh\x85i\u2028j\u2029k\x00l\x7fm"
    assert len((one_line(text) + "\n").splitlines()) == 1
    assert one_line("plain é name.toml") == "plain é name.toml"


# ------------------------------------------------------------------ 10. a folder as data.path

@pytest.mark.parametrize("target", ["y", None])
def test_a_folder_as_data_path_is_a_data_path_error(tmp_path, capsys, target):
    """With ``data.target`` it was reported as a ``data.target`` error (no .csv suffix)."""
    (tmp_path / "folder").mkdir()
    cfg = tmp_path / "c.toml"
    table = {"kind": "file", "path": "folder"}
    if target:
        table["target"] = target
    cfg.write_text(tiny_toml({"data": table}))
    line = in_process(capsys, ["run", cfg, "-o", tmp_path / "r.h5"], 2)
    assert line == (f"meanfield: error: {cfg}: data.path: folder is a folder, expected a data "
                    "file (.csv, .npy or .npz)")
