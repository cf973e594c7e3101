"""Bad-input corpus: every case runs the command line and must exit with code 2, print ONE line
on stderr naming the file, the field and the reason (no traceback), print nothing on stdout, and
leave every existing file untouched (bytes and mtime).

Two kinds of cases:

* ``tests/bad_inputs/*.toml``: configs whose first line reads
  ``# expect: [@FILE] [FIELD] | REASON`` (``@FILE``: the file the message must name when it is
  not the config itself, e.g. a data file it points to; ``-``: no field); add a file to add a case.
* the builders below, for cases that need binary files, permissions, a file-size limit or
  existing run files and checkpoints.

Where the command line runs:

* in-process (most cases): ``meanfield.cli.main(argv)``, the function behind the console script
  and ``python -m meanfield``, from the case's folder; its return value or ``SystemExit`` is
  mapped to an exit code as ``sys.exit`` maps it, and stdout and stderr are captured at the
  file-descriptor level (what the HDF5 C library prints counts too). What a command says does
  not depend on the process, and an interpreter with numpy, scipy and h5py costs about a second
  per case. :func:`cli_here` puts back what a command may change in the process (signal
  handlers, ``warnings``, ``os.environ``, the standard streams, logging, the umask) and fails a
  case that leaves an HDF5 file, or a file under its folder, open after finalizers ran, which
  the exit of a process would hide.
* in a subprocess (``python -m meanfield``): the cases that need a process of their own, i.e.
  the unreadable and unwritable files (the privilege to bypass permissions is dropped in the
  child only), the file-size limit (``RLIMIT_FSIZE``) and a run file locked by another process;
  and :data:`SUBPROCESS_CASES`, a few representative ones (a config, a usage error,
  ``inspect``, ``analyze``), so that the real entry path stays covered.

All cases fail before any numba compilation, so the corpus stays fast.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_toml

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "bad_inputs"

#: The tiny config of ``conftest`` with 200 steps per temperature and checkpoints every 100.
GOOD = {"model.n_particles": None, "data.seed": None, "dynamics.seed": None,
        "dynamics.steps_per_tau": 200, "output.snapshots_per_tau": 2,
        "output.checkpoint_every": 100}


# ----------------------------------------------------------------------------- helpers

def cli(args, cwd, preexec_fn=None, timeout=120):
    """``python -m meanfield ARGS`` in a subprocess, from this checkout."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "meanfield", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, preexec_fn=preexec_fn,
                          timeout=timeout)


def _exit_status(code) -> tuple[int, str]:
    """The exit status and the stderr text of ``sys.exit(code)`` at the top of a script."""
    if code is None:
        return 0, ""
    if isinstance(code, int):
        return code, ""
    return 1, f"{code}\n"


def _open_fds_under(folder: Path) -> set[str]:
    """The file descriptors of this process open on a file under ``folder``."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(folder):
                out.add(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
    return out


def _open_hdf5_files() -> int:
    if "h5py" not in sys.modules:
        return 0
    from h5py import h5f
    return h5f.get_obj_count(h5f.OBJ_ALL, h5f.OBJ_FILE)


def _signal_handlers() -> dict:
    out = {}
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            out[sig] = signal.getsignal(sig)
    return out


@contextlib.contextmanager
def _process_state_kept():
    """Put back what a command may change in the process: signal handlers, ``warnings``,
    ``os.environ``, the standard streams, the root logger, the umask, a recorded signal."""
    from meanfield import interrupts
    environ, handlers = dict(os.environ), _signal_handlers()
    streams = sys.stdin, sys.stdout, sys.stderr
    root = logging.getLogger()
    root_handlers, root_level = root.handlers[:], root.level
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        with warnings.catch_warnings():                     # showwarning and the filters
            yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        for sig, h in handlers.items():
            if h is not None and signal.getsignal(sig) is not h:
                signal.signal(sig, h)
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        os.environ.update(environ)
        root.handlers[:] = root_handlers
        root.setLevel(root_level)
        os.umask(umask)
        interrupts.clear()


@pytest.fixture
def cli_here(capfd, monkeypatch):
    """``run(args, cwd)``: the command line in this process (see the module docstring), as a
    ``CompletedProcess`` with the exit code and what went to fd 1 and fd 2."""
    from meanfield.cli import main

    def run(args, cwd):
        cwd = Path(cwd).resolve()
        monkeypatch.chdir(cwd)
        capfd.readouterr()                                  # what came before is not the case's
        fds, h5 = _open_fds_under(cwd), _open_hdf5_files()
        with _process_state_kept():
            try:
                code, text = _exit_status(main([str(a) for a in args]))
            except SystemExit as exc:                       # argparse: --help, usage errors
                code, text = _exit_status(exc.code)
            except Exception:                               # the interpreter would print it
                code, text = 1, traceback.format_exc()
            if _open_fds_under(cwd) - fds or _open_hdf5_files() != h5:
                gc.collect()                # what only a finalizer closes is closed at exit
            sys.stderr.write(text)
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = capfd.readouterr()
        leaked = sorted(_open_fds_under(cwd) - fds)
        assert not leaked, f"files left open: {leaked}\n{err}"
        assert _open_hdf5_files() == h5, f"an HDF5 file left open\n{err}"
        return subprocess.CompletedProcess(args, code, out, err)
    return run


def snapshot(root: Path) -> dict:
    """Name -> (mode, size, mtime_ns, sha256) of everything under ``root``."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[p.relative_to(root).as_posix()] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


def assert_one_line_error(proc, needles):
    """Exit 2, stdout empty, exactly one stderr line containing every needle, no traceback."""
    err = proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\n{err}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("meanfield"), err
    assert "error" in lines[0], err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert proc.stdout == ""


def good_config(tmp: Path, name="good.toml", N=2000, lam=0.05):
    from meanfield import config
    p = tmp / name
    p.write_text(tiny_toml({**GOOD, "model.n_particles": N, "dynamics.lam": lam}))
    return p, config.load(p)


#: complete -> bytes of the run file of the default config of :func:`make_run_file`.
_DEFAULT_RUN_FILES: dict[bool, bytes] = {}


def make_run_file(path: Path, cfg=None, complete=True):
    """A small valid run file written through the store (no solver); that of the default
    config is written once per session and copied."""
    if cfg is None and complete in _DEFAULT_RUN_FILES:
        path.write_bytes(_DEFAULT_RUN_FILES[complete])
        return path
    default = cfg is None
    _write_run_file(path, cfg, complete)
    if default:
        _DEFAULT_RUN_FILES[complete] = path.read_bytes()
    return path


def _write_run_file(path: Path, cfg, complete):
    from meanfield import config, data
    from meanfield.store import RunWriter
    from solvers.observation import Observation
    if cfg is None:
        cfg = config.from_dict({"data": {"kind": "gaussian", "n": 4, "d": 2},
                                "model": {"n_particles": 8},
                                "dynamics": {"taus": [0.01], "steps_per_tau": 20},
                                "output": {"observe_every": 5, "snapshots_per_tau": 2}})
    ds = data.from_config(cfg)
    N, n = cfg.n_particles, ds.n
    with RunWriter(path, cfg, ds, capacity=(2, 4)) as w:
        for k in range(4):
            w.append_observations([Observation(step=5 * (k + 1), time=0.25 * (k + 1), stage=0,
                                               step_in_stage=5 * (k + 1), tau=0.01,
                                               risk=1.0, regulariser=0.1, mean_sq_norm=2.0,
                                               stationarity=np.nan, residuals=np.zeros(n),
                                               residuals_previous=np.zeros(n),
                                               eta_lambda_max=0.5)])
        for k in range(2):
            w.append_frame(np.full((N, ds.d + 2), float(k)), 10 * (k + 1), 0.5 * (k + 1), 0.01,
                           0, 10 * (k + 1))
        if complete:
            w.mark_complete()


def make_interrupted(out: Path, cfg):
    """``out.part`` and ``out.ckpt`` of ``cfg`` as a killed run would leave them."""
    from meanfield import checkpoint, data
    from solvers.langevin import SolverState
    ds = data.from_config(cfg)
    make_run_file(out.with_name(out.name + ".part"), cfg, complete=False)
    st = SolverState(theta=np.zeros((cfg.n_particles, ds.d + 2)), step=10, stage=0,
                     step_in_stage=10, stage_residuals=[np.zeros(ds.n)], n_frames=1,
                     n_observations=2)
    checkpoint.save(out.with_name(out.name + ".ckpt"), st, physics_hash=cfg.physics_hash(),
                    config_hash=cfg.hash())


def _set_attr(path, where, key, value):
    import h5py
    with h5py.File(path, "r+") as f:
        f[where].attrs[key] = value


@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory):
    """A ``preexec_fn`` under which file permissions apply (drops root's DAC override)."""
    pre = None
    if os.geteuid() == 0:
        prctl = ctypes.CDLL(None, use_errno=True).prctl

        def pre():
            for cap in (1, 2):      # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
                if prctl(24, cap, 0, 0, 0) != 0:      # PR_CAPBSET_DROP
                    os._exit(97)
    probe = tmp_path_factory.mktemp("probe") / "secret"
    probe.write_text("x")
    probe.chmod(0)
    r = subprocess.run([sys.executable, "-c", f"open({str(probe)!r}).read()"],
                       preexec_fn=pre, capture_output=True)
    if r.returncode != 1:
        pytest.skip("cannot drop the privilege to read unreadable files here")
    return pre


# ----------------------------------------------------------------------------- TOML corpus

def _expectation(path: Path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect:"), path
    left, reason = (s.strip() for s in first[len("# expect:"):].split("|", 1))
    names = [t[1:] for t in left.split() if t.startswith("@")]
    field = " ".join(t for t in left.split() if not t.startswith("@"))
    needles = [names[0] if names else path.name, reason]
    if field and field != "-":
        needles.append(f": {field}: ")
    return needles


TOML_CASES = sorted(CORPUS.glob("*.toml"))


@pytest.mark.parametrize("path", TOML_CASES, ids=[p.stem for p in TOML_CASES])
def test_config_corpus(path, tmp_path, cli_here):
    out = make_run_file(tmp_path / "out.h5")
    before, before_corpus = snapshot(tmp_path), snapshot(CORPUS)
    run = cli if path.stem in SUBPROCESS_CASES else cli_here
    proc = run(["run", path, "-o", out, "--overwrite"], cwd=tmp_path)
    assert_one_line_error(proc, _expectation(path))
    assert snapshot(tmp_path) == before
    assert snapshot(CORPUS) == before_corpus


def test_corpus_has_enough_cases():
    assert len(TOML_CASES) + len(CASES) >= 30


#: Cases that need no process of their own but run through ``python -m meanfield`` all the
#: same, so that the real entry path stays covered: a config, a usage error (the exit code
#: argparse raises), ``inspect`` and ``analyze`` (the cases that need a process of their own
#: cover a data file, the output folder and the run file's reservation).
SUBPROCESS_CASES = {"lam_negative", "resume_and_overwrite", "inspect_truncated",
                    "analyze_newer_schema"}


def test_the_subprocess_cases_exist():
    assert SUBPROCESS_CASES <= {p.stem for p in TOML_CASES} | set(CASES)


# ----------------------------------------------------------------------------- built cases

CASES = {}


def case(fn=None, *, unprivileged=False):
    """Register a builder ``fn(tmp) -> (argv, needles)``."""
    def deco(f):
        CASES[f.__name__] = (f, unprivileged)
        return f
    return deco(fn) if fn is not None else deco


def _data_config(tmp, data_name):
    cfg = tmp / "cfg.toml"
    cfg.write_text(f'[data]\nkind = "file"\npath = "{data_name}"\n')
    return ["run", cfg, "-o", make_run_file(tmp / "out.h5"), "--overwrite"]


@case
def npy_pickled(tmp):
    with open(tmp / "pickled.npy", "wb") as fh:     # NumPy's writer pickles object arrays
        np.lib.format.write_array(fh, np.array([{"x": 1}, None], dtype=object))
    return _data_config(tmp, "pickled.npy"), ["pickled.npy", "pickled objects, which are refused"]


@case
def npz_pickled(tmp):
    np.savez(tmp / "pickled.npz", X=np.array([[1, 2], "a"], dtype=object), y=np.ones(2))
    return _data_config(tmp, "pickled.npz"), ["pickled.npz", "pickled objects"]


@case
def npz_dimension_mismatch(tmp):
    np.savez(tmp / "bad.npz", X=np.ones((5, 2)), y=np.ones(4))
    return _data_config(tmp, "bad.npz"), ["bad.npz", ": y: ", "X has 5 rows, y has 4"]


@case
def npz_missing_y(tmp):
    np.savez(tmp / "bad.npz", X=np.ones((5, 2)))
    return _data_config(tmp, "bad.npz"), ["bad.npz", ": y: ", "array missing"]


@case
def npz_nan(tmp):
    X = np.ones((3, 2))
    X[2, 0] = np.nan
    np.savez(tmp / "nan.npz", X=X, y=np.ones(3))
    return _data_config(tmp, "nan.npz"), ["nan.npz", ": X: ", "NaN or Inf in row 2"]


@case
def npy_one_dimensional(tmp):
    np.save(tmp / "vec.npy", np.ones(7))
    return _data_config(tmp, "vec.npy"), ["vec.npy", "expected a 2-D array"]


@case
def npy_empty(tmp):
    np.save(tmp / "empty.npy", np.zeros((0, 3)))
    return _data_config(tmp, "empty.npy"), ["empty.npy", "empty data set"]


@case
def npy_garbage(tmp):
    (tmp / "junk.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    return _data_config(tmp, "junk.npy"), ["junk.npy", "cannot read"]


@case
def config_missing(tmp):
    return ["run", tmp / "nope.toml", "-o", tmp / "out.h5"], ["nope.toml", "no such file"]


@case
def config_is_directory(tmp):
    (tmp / "cfg.toml").mkdir()
    return ["run", tmp / "cfg.toml", "-o", tmp / "out.h5"], ["cfg.toml", "is a directory"]


@case
def config_binary(tmp):
    (tmp / "bin.toml").write_bytes(b"\xff\xfe\x00\x01[data]")
    return ["run", tmp / "bin.toml", "-o", tmp / "out.h5"], ["bin.toml", "not a UTF-8"]


@case(unprivileged=True)
def config_unreadable(tmp):
    p, _ = good_config(tmp, "secret.toml")
    p.chmod(0)
    return ["run", p, "-o", tmp / "out.h5"], ["secret.toml", "Permission denied"]


@case(unprivileged=True)
def data_unreadable(tmp):
    (tmp / "secret.csv").write_text("0,1,2\n1,2,3\n")
    (tmp / "secret.csv").chmod(0)
    return _data_config(tmp, "secret.csv"), ["secret.csv", "permission denied"]


@case(unprivileged=True)
def output_dir_missing_in_an_unwritable_folder(tmp):
    # a missing output folder is created, but not in a folder the user cannot write
    p, _ = good_config(tmp)
    (tmp / "ro").mkdir()
    (tmp / "ro").chmod(0o555)
    return (["run", p, "-o", tmp / "ro" / "new" / "dir" / "out.h5"],
            ["out.h5", "cannot create the output directory", "ro is not writable"])


@case
def output_dir_missing_under_a_file(tmp):
    p, _ = good_config(tmp)
    (tmp / "afile").write_text("x")
    return (["run", p, "-o", tmp / "afile" / "new" / "out.h5"],
            ["out.h5", "afile is not a directory"])


@case
def output_dir_missing_and_a_bad_config(tmp):
    # the missing folders are made only once every input is checked: none is left behind
    (tmp / "bad.toml").write_text('[data]\nkind = "gaussian"\n[model]\nn_particles = 0\n')
    return (["run", tmp / "bad.toml", "-o", tmp / "new" / "dir" / "out.h5"],
            ["bad.toml", "n_particles"])


@case(unprivileged=True)
def output_dir_not_writable(tmp):
    p, _ = good_config(tmp)
    (tmp / "ro").mkdir()
    make_run_file(tmp / "ro" / "out.h5")
    (tmp / "ro").chmod(0o555)
    return (["run", p, "-o", tmp / "ro" / "out.h5", "--overwrite"],
            ["out.h5", "is not writable"])


@case
def output_parent_is_a_file(tmp):
    p, _ = good_config(tmp)
    (tmp / "afile").write_text("x")
    return ["run", p, "-o", tmp / "afile" / "out.h5"], ["out.h5", "afile is not a directory"]


@case
def output_is_a_directory(tmp):
    p, _ = good_config(tmp)
    (tmp / "out.h5").mkdir()
    return ["run", p, "-o", tmp / "out.h5", "--overwrite"], ["out.h5", "is a directory"]


@case
def output_exists(tmp):
    p, _ = good_config(tmp)
    make_run_file(tmp / "out.h5")
    return ["run", p, "-o", tmp / "out.h5"], ["out.h5", "output exists", "--overwrite"]


@case
def interrupted_run_in_the_way(tmp):
    p, cfg = good_config(tmp)
    make_interrupted(tmp / "out.h5", cfg)
    return ["run", p, "-o", tmp / "out.h5"], ["out.h5.part", "interrupted run", "--resume"]


@case
def resume_and_overwrite(tmp):
    p, _ = good_config(tmp)
    return (["run", p, "-o", tmp / "out.h5", "--resume", "--overwrite"],
            ["--overwrite", "not allowed with argument --resume"])


@case
def resume_with_other_config(tmp):
    _, cfg = good_config(tmp, "a.toml")
    other, _ = good_config(tmp, "b.toml", lam=0.07)
    make_interrupted(tmp / "out.h5", cfg)
    return ["run", other, "-o", tmp / "out.h5", "--resume"], ["b.toml", "physics hash"]


@case
def resume_damaged_checkpoint(tmp):
    p, cfg = good_config(tmp)
    make_interrupted(tmp / "out.h5", cfg)
    ck = tmp / "out.h5.ckpt"
    ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    return ["run", p, "-o", tmp / "out.h5", "--resume"], ["out.h5.ckpt", "damaged checkpoint"]


@case
def resume_foreign_checkpoint(tmp):
    p, cfg = good_config(tmp)
    make_interrupted(tmp / "out.h5", cfg)
    with open(tmp / "out.h5.ckpt", "wb") as fh:
        np.savez(fh, theta=np.zeros((3, 4)))
    return (["run", p, "-o", tmp / "out.h5", "--resume"],
            ["out.h5.ckpt", ": meta: ", "not a meanfield checkpoint"])


@case
def resume_checkpoint_without_run_file(tmp):
    p, cfg = good_config(tmp)
    make_interrupted(tmp / "out.h5", cfg)
    (tmp / "out.h5.part").unlink()
    return ["run", p, "-o", tmp / "out.h5", "--resume"], ["out.h5.ckpt", "out.h5.part is missing"]


@case
def resume_truncated_run_file(tmp):
    p, cfg = good_config(tmp)
    make_interrupted(tmp / "out.h5", cfg)
    part = tmp / "out.h5.part"
    part.write_bytes(part.read_bytes()[:3000])
    return ["run", p, "-o", tmp / "out.h5", "--resume"], ["out.h5.part", "not a readable HDF5"]


@case
def resume_incomplete_output(tmp):
    p, cfg = good_config(tmp)
    make_run_file(tmp / "out.h5", cfg, complete=False)
    return ["run", p, "-o", tmp / "out.h5", "--resume"], ["out.h5", ": complete: ", "no checkpoint"]


@case
def resume_output_of_other_config(tmp):
    _, cfg = good_config(tmp, "a.toml")
    other, _ = good_config(tmp, "b.toml", lam=0.07)
    make_run_file(tmp / "out.h5", cfg)
    return ["run", other, "-o", tmp / "out.h5", "--resume"], ["b.toml", "physics hash"]


@case
def full_disk(tmp):
    """A file-size limit (RLIMIT_FSIZE) below the run file's size: the space reservation fails
    with EFBIG before HDF5 writes anything; the existing output stays."""
    p, _ = good_config(tmp, N=2000)
    make_run_file(tmp / "out.h5")
    return (["run", p, "-o", tmp / "out.h5", "--overwrite"],
            ["out.h5.part", "cannot write", "File too large", "needs about"])


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # write() then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))


def _inspect_case(tmp, make, name="run.h5", command="inspect"):
    path = tmp / name
    make(path)
    return [command, path]


def _truncated(path):
    make_run_file(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _foreign(path):
    import h5py
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=np.zeros((3, 4)))


def _newer_schema(path):
    make_run_file(path)
    _set_attr(path, "parameters", "schema_version", 99)


@case
def inspect_missing(tmp):
    return ["inspect", tmp / "none.h5"], ["none.h5", "no such file"]


@case
def inspect_empty_file(tmp):
    (tmp / "empty.h5").write_bytes(b"")
    return ["inspect", tmp / "empty.h5"], ["empty.h5", "not a readable HDF5 file (no HDF5 "
                                           "signature: empty"]


@case
def inspect_text_file(tmp):
    (tmp / "notes.h5").write_text("these are not the frames you are looking for\n")
    return ["inspect", tmp / "notes.h5"], ["notes.h5", "not a readable HDF5 file (no HDF5 "
                                           "signature: empty, cut before its header, or not "
                                           "HDF5 at all)"]


@case
def inspect_truncated(tmp):
    return _inspect_case(tmp, _truncated), ["run.h5", "not a readable HDF5 file (truncated: "]


@case
def inspect_foreign_hdf5(tmp):
    return _inspect_case(tmp, _foreign), ["run.h5", "not a meanfield run file"]


@case
def inspect_other_h5md(tmp):
    def make(path):
        import h5py
        with h5py.File(path, "w") as f:
            f.create_group("h5md").attrs["version"] = [1, 1]
            f.create_group("parameters").attrs["temperature"] = 1.0
    return _inspect_case(tmp, make), ["run.h5", ": parameters.schema_version: ", "missing"]


@case
def inspect_newer_schema(tmp):
    return (_inspect_case(tmp, _newer_schema),
            ["run.h5", ": parameters.schema_version: ", "version 99 is newer", "upgrade"])


@case
def inspect_schema_not_integer(tmp):
    def make(path):
        make_run_file(path)
        _set_attr(path, "parameters", "schema_version", "one")
    return _inspect_case(tmp, make), ["run.h5", ": parameters.schema_version: ", "not an integer"]


@case
def inspect_counter_beyond_rows(tmp):
    """An interrupted write that left the commit counter ahead of the rows."""
    def make(path):
        make_run_file(path)
        _set_attr(path, "/", "n_frames", 7)
    return _inspect_case(tmp, make), ["run.h5", ": n_frames: ", "damaged run file"]


@case
def inspect_missing_dataset(tmp):
    def make(path):
        import h5py
        make_run_file(path)
        with h5py.File(path, "r+") as f:
            del f["observables/risk"]
    return _inspect_case(tmp, make), ["run.h5", "damaged or incomplete run file"]


@case
def inspect_directory(tmp):
    (tmp / "dir.h5").mkdir()
    return ["inspect", tmp / "dir.h5"], ["dir.h5", "is a directory"]


@case
def inspect_checkpoint(tmp):
    _, cfg = good_config(tmp)
    make_interrupted(tmp / "out.h5", cfg)
    return ["inspect", tmp / "out.h5.ckpt"], ["out.h5.ckpt", "is the checkpoint of an interrupted "
                                              "run", f"inspect its run file {tmp / 'out.h5.part'}",
                                              "--resume"]


@case
def analyze_missing(tmp):
    return ["analyze", tmp / "none.h5", "-o", tmp / "rep"], ["none.h5", "no such file"]


@case
def analyze_a_folder_that_is_no_study(tmp):
    (tmp / "runs").mkdir()
    return (["analyze", tmp / "runs", "-o", tmp / "rep"],
            ["runs", "is a directory, expected a run file (.h5) or a study directory of "
                     "'meanfield sweep' (this one has no manifest.json)"])


@case
def analyze_a_study_with_a_broken_manifest(tmp):
    (tmp / "study").mkdir()
    (tmp / "study" / "manifest.json").write_text("{not json")
    return (["analyze", tmp / "study", "-o", tmp / "rep"],
            ["manifest.json", "unreadable manifest"])


@case
def analyze_truncated(tmp):
    return (_inspect_case(tmp, _truncated, command="analyze") + ["-o", tmp / "rep"],
            ["run.h5", "not a readable HDF5 file (truncated: ", "bytes HDF5 recorded"])


@case
def analyze_foreign_hdf5(tmp):
    return (_inspect_case(tmp, _foreign, command="analyze") + ["-o", tmp / "rep"],
            ["run.h5", "not a meanfield run file"])


@case
def analyze_newer_schema(tmp):
    return (_inspect_case(tmp, _newer_schema, command="analyze") + ["-o", tmp / "rep"],
            ["run.h5", "version 99 is newer"])


def _no_frames(path):
    """A run file as a run killed before its first frame leaves it: created, nothing
    committed (no observation, no snapshot), no writer."""
    from meanfield import config, data
    from meanfield.store import RunWriter
    cfg = config.from_dict({"data": {"kind": "gaussian", "n": 4, "d": 2},
                            "model": {"n_particles": 8},
                            "dynamics": {"taus": [0.01], "steps_per_tau": 20},
                            "output": {"observe_every": 5, "snapshots_per_tau": 2}})
    RunWriter(path, cfg, data.from_config(cfg), capacity=(2, 4)).close()


#: What ``analyze`` says of a run file with no frame, and ``inspect`` with it.
NO_FRAMES = ("holds no frames yet: the run was stopped before its first frame; to continue it, "
             "run the same 'meanfield run' command again with --resume")


@case
def analyze_no_frames_yet(tmp):
    return (_inspect_case(tmp, _no_frames, name="run.h5.part", command="analyze"),
            [f"{tmp / 'run.h5.part'}: {NO_FRAMES}"])


def test_inspect_says_what_analyze_refuses_a_file_without_frames_with(tmp_path, cli_here):
    path = tmp_path / "run.h5.part"
    _no_frames(path)
    refused = cli_here(["analyze", path], cwd=tmp_path)
    assert_one_line_error(refused, [NO_FRAMES])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.h5.part"]   # no report folder
    proc = cli_here(["inspect", path], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index("frames        0")
    assert lines[at + 1] == f"  {path} {NO_FRAMES}"
    assert refused.stderr.strip().endswith(lines[at + 1].split(f"{path} ", 1)[1])


def test_a_file_with_frames_is_not_said_to_have_none(tmp_path, cli_here):
    path = make_run_file(tmp_path / "run.h5", complete=False)
    proc = cli_here(["inspect", path], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "no frames" not in proc.stdout and "frames        2" in proc.stdout


@pytest.mark.parametrize("name", sorted(CASES))
def test_built_case(name, tmp_path, request, cli_here):
    build, needs_unprivileged = CASES[name]
    preexec = request.getfixturevalue("unprivileged") if needs_unprivileged else None
    if name == "full_disk":
        preexec = _limit_file_size
    argv, needles = build(tmp_path)
    before = snapshot(tmp_path)
    try:
        if preexec is None and name not in SUBPROCESS_CASES:
            proc = cli_here(argv, cwd=tmp_path)
        else:                   # a process of its own: dropped privileges, a file-size limit
            proc = cli(argv, cwd=tmp_path, preexec_fn=preexec)
        assert_one_line_error(proc, needles)
        assert snapshot(tmp_path) == before
    finally:
        for p in [tmp_path, *tmp_path.rglob("*")]:      # let pytest clean up
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() else 0o644)


def test_inspect_reads_a_good_file(tmp_path, cli_here):
    """The positive control of the inspect cases: the unmodified file is accepted."""
    path = make_run_file(tmp_path / "run.h5")
    proc = cli_here(["inspect", path, "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["complete"] is True and len(doc["frames"]) == 2


@pytest.mark.parametrize("flag", ["--resume", "--overwrite"])
def test_run_refuses_a_run_file_another_process_is_writing(tmp_path, flag):
    import h5py
    p, cfg = good_config(tmp_path)
    make_interrupted(tmp_path / "out.h5", cfg)
    # an exclusive HDF5 lock, as a writer; the command runs in another process, which the lock
    # excludes (this one shares the open file)
    with h5py.File(tmp_path / "out.h5.part", "r+"):
        before = snapshot(tmp_path)
        proc = cli(["run", p, "-o", tmp_path / "out.h5", flag], cwd=tmp_path)
        assert_one_line_error(proc, ["out.h5.part", "locked: another process is writing"])
        assert snapshot(tmp_path) == before
