"""One study job, as executed on a worker (or in-process for serial studies).

:func:`run_job` never raises for a failing job: it returns a plain dict with the error, so that
nothing but builtins crosses process boundaries and one bad job cannot stop the others.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from pathlib import Path

from meanfield import config as _config
from meanfield import errors, runner
from meanfield.errors import RunFileError
from meanfield.store import open_run


def run_file_complete(path) -> bool:
    """Whether ``path`` is a readable run file that reached the end of its ladder."""
    if not Path(path).exists():
        return False
    try:
        return bool(open_run(path).complete)
    except RunFileError:
        return False


def changed_inputs(path, cfg, datasets: dict | None = None) -> str | None:
    """Why the complete run file ``path`` is no longer the result of ``cfg``, or ``None``.

    A run file is the result of its config's physics (``physics_hash``) on its data's values
    (compared with the stored ``/data/X`` and ``/data/y``, :func:`meanfield.runner.
    check_same_run`); editing the data file after the run makes it stale, moving the study
    does not.

    Parameters
    ----------
    path : path-like
        The job's run file.
    cfg : meanfield.config.RunConfig
        The job's config.
    datasets : dict, optional
        A cache of loaded data sets, keyed by the canonical ``[data]`` table (a study's jobs
        mostly share one).

    Returns
    -------
    str or None
        One line (the refusal a resume would give, or why the data cannot be loaded now);
        ``None`` when ``path`` matches, is missing, unreadable or incomplete (then it is not
        done anyway).
    """
    import json

    from meanfield import data as _data
    try:
        run = open_run(path)
    except RunFileError:
        return None
    if not run.complete:
        return None
    key = json.dumps(cfg.as_dict()["data"], sort_keys=True)
    cache = {} if datasets is None else datasets
    try:
        if key not in cache:
            cache[key] = _data.from_config(cfg)
        runner.check_same_run(cfg, cache[key], run, Path(path).name, hint="")
    except errors.InputError as exc:
        return exc.line()
    return None


def run_resumable(cfg, output, threads=None, outcome: dict | None = None):
    """Run ``cfg`` into ``output``, continuing from the checkpoint a killed attempt left behind
    (``meanfield.runner.run(..., resume=True)``: starts fresh when there is nothing to resume,
    does nothing when ``output`` is already complete). A run file or checkpoint written from
    other inputs (the data file was edited since, :class:`meanfield.errors.RunMismatch`) is
    replaced by a new run.

    Parameters
    ----------
    cfg : meanfield.config.RunConfig
    output : path-like
        The run file to produce.
    threads : int, optional
        numba threads for the kernels.
    outcome : dict, optional
        Receives ``"plan"`` (:func:`meanfield.runner.run`) and, when the old files were
        replaced, ``"rerun"``: the line saying why.

    Returns
    -------
    pathlib.Path
        The run file written.
    """
    outcome = {} if outcome is None else outcome
    try:
        return runner.run(cfg, output, resume=True, progress=False, threads=threads,
                          outcome=outcome)
    except errors.RunMismatch as exc:
        outcome["rerun"] = exc.line()
        return runner.run(cfg, output, overwrite=True, progress=False, threads=threads,
                          outcome=outcome)


def _is_stop_request(exc) -> bool:
    """Whether ``exc`` is the main job's answer to SIGINT/SIGTERM (checkpoint written, then
    :class:`meanfield.errors.Interrupted`): it must stop the study, not count as a failed job."""
    return isinstance(exc, errors.Interrupted)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        return os.cpu_count() or 1


def thread_budget(threads=None):
    """Numba threads for a job: ``threads`` if given; ``None`` (numba's default, which honours
    ``NUMBA_NUM_THREADS``) when that variable is set; inside a Dask worker, the cores this
    process may use divided by the worker's task slots; otherwise ``None``."""
    if threads:
        return int(threads)
    if os.environ.get("NUMBA_NUM_THREADS"):
        return None
    try:  # deferred on purpose: the optional `distributed` extra
        from distributed import get_worker
        slots = int(get_worker().state.nthreads)
    except (ImportError, ValueError, AttributeError):
        return None
    return max(1, _usable_cores() // max(1, slots))


def _capped(threads, host):
    """``threads`` capped at the numba thread pool this process was started with
    (``NUMBA_NUM_THREADS``, fixed at numba's import), and a note saying so, or ``None``."""
    if not threads:
        return threads, None
    import numba
    limit = int(numba.config.NUMBA_NUM_THREADS)
    if threads <= limit:
        return threads, None
    return limit, (f"{threads} numba threads per job asked, but the worker on {host} allows "
                   f"{limit} (its NUMBA_NUM_THREADS); its jobs ran with {limit}")


def _announce(topic, msg) -> None:
    """Tell the driver (through the scheduler's event log) that the job started."""
    if not topic:
        return
    try:  # deferred on purpose: the optional `distributed` extra
        from distributed import get_worker
        get_worker().log_event(topic, msg)
    except (ImportError, ValueError):
        pass


def run_job(config_json: str, output: str, *, job_id: str = "", threads=None,
            topic: str | None = None) -> dict:
    """Run one job of a study.

    Every exception of the job is caught and returned as a failure, except an interruption
    (SIGINT/SIGTERM in the main thread, see :func:`_is_stop_request`), which propagates.

    Parameters
    ----------
    config_json : str
        The job's canonical config (:meth:`meanfield.config.RunConfig.canonical_json`).
    output : str
        The run file to produce (absolute path).
    job_id : str
        The job's id (its config hash), echoed in the result and in the start event.
    threads : int, optional
        numba threads; see :func:`thread_budget`.
    topic : str, optional
        Dask event topic on which to announce the start (``{"id", "event": "start", "host",
        "pid", "time"}``).

    Returns
    -------
    dict
        ``{"id", "status": "done" | "failed", "skipped", "error", "traceback", "host", "pid",
        "threads", "wall_s"}``; ``skipped`` is true when the run file was already complete;
        ``threads`` is numba's thread count in the worker after the job. A failed job has
        ``retryable`` (false when it fails the same way on every attempt: bad config or
        data); ``note`` says when the thread count was capped at the worker's
        ``NUMBA_NUM_THREADS``.
    """
    started = time.monotonic()    # wall_s: a duration, immune to a step of the wall clock
    info = {"id": job_id, "host": socket.gethostname(), "pid": os.getpid()}
    _announce(topic, {**info, "event": "start", "time": time.time()})   # a timestamp
    result = {**info, "status": "done", "skipped": False, "error": None, "traceback": None}
    try:
        cfg = _config.from_canonical_json(config_json, source=f"<job {job_id}>")
        if run_file_complete(output) and changed_inputs(output, cfg) is None:
            result["skipped"] = True
        else:
            budget, note = _capped(thread_budget(threads), info["host"])
            if note:
                result["note"] = note
            outcome = {}
            try:
                run_resumable(cfg, output, threads=budget, outcome=outcome)
            finally:
                if "rerun" in outcome:
                    result["rerun"] = outcome["rerun"]
    except Exception as exc:  # noqa: BLE001 - every failure is recorded, none stops the study
        if _is_stop_request(exc):
            raise
        from meanfield.errors import InputError
        from meanfield.ownership import OutputBusy
        line = exc.line() if hasattr(exc, "line") else str(exc)
        result.update(status="failed", error=f"{type(exc).__name__}: {line}",
                      traceback=traceback.format_exc(),
                      # bad config or data fails the same way again; a busy output may not
                      retryable=isinstance(exc, OutputBusy) or not isinstance(exc, InputError))
    numba = sys.modules.get("numba")
    result["threads"] = int(numba.get_num_threads()) if numba is not None else None
    result["wall_s"] = time.monotonic() - started
    return result
