"""The main job: load a config, build the data set, integrate the ladder, write the run file.

This is the Python API behind ``meanfield run``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from meanfield import config as _config
from meanfield import data as _data
from meanfield.errors import InputError
from meanfield.store import RunWriter


def default_output(cfg) -> str:
    """Default run-file name: ``run-<config hash>.h5`` in the current directory."""
    return f"run-{cfg.hash()}.h5"


def _check_output_dir(path: Path) -> None:
    parent = path.resolve().parent
    if not parent.exists():
        raise InputError(str(path), "", f"output directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(str(path), "", f"output directory {parent} is not writable")


def run(cfg, output=None, *, overwrite=False, progress=None, threads=None):
    """Integrate the temperature ladder of ``cfg`` and write the run file.

    Parameters
    ----------
    cfg : RunConfig or path-like or None
        A validated config, a TOML path, or ``None`` for the embedded default.
    output : path-like, optional
        Run file to write (default :func:`default_output`).
    overwrite : bool
        Replace an existing run file. The old file stays in place until the new run completes.
    progress : bool or None
        Progress bar (``None``: only on a terminal).
    threads : int, optional
        numba threads for the kernels.

    Returns
    -------
    pathlib.Path
        The run file written.

    Raises
    ------
    InputError
        Invalid config or data, existing output without ``overwrite``, unwritable directory.
    meanfield.errors.DivergenceError
        The dynamics produced NaN/Inf.
    """
    from solvers.langevin import simulate

    if cfg is None:
        cfg = _config.embedded_default()
    elif not isinstance(cfg, _config.RunConfig):
        cfg = _config.load(cfg)
    dataset = _data.from_config(cfg)
    out = Path(output) if output is not None else Path(default_output(cfg))
    if out.exists() and not overwrite:
        raise InputError(str(out), "", "output exists; pass --overwrite to replace it")
    _check_output_dir(out)
    # Idle OpenMP workers of the kernels spin by default. When cores are shared (other jobs,
    # several runs at once) a step then waits for a descheduled spinning thread: measured 7x
    # slower on a busy 2-core machine. Sleeping workers instead cost one thread wake-up per
    # parallel pass. An explicit setting in the environment wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if threads:
        import numba
        numba.set_num_threads(int(threads))
    # Write next to the target and move into place at the end: an existing good file is never
    # replaced by a half-written one.
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".part", dir=out.resolve().parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with RunWriter(tmp, cfg, dataset, mode="w") as w:
            simulate(cfg, dataset, writer=w, progress=progress)
            w.mark_complete()
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return out
