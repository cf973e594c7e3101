"""Driving a study: skip finished jobs, execute the rest on Dask (or serially), keep the
manifest and a progress bar up to date, and summarise.

Execution backends:

* **local cluster** (default): a :class:`distributed.LocalCluster` of ``workers`` worker
  processes, started with ``spawn`` (never ``fork``: numba's OpenMP layer aborts forked
  children), one task slot each, listening on 127.0.0.1 only, no
  dashboard. Each job gets ``cores // workers`` numba threads; BLAS/OpenMP threads are 1.
* **existing cluster**: ``scheduler="tcp://host:port"`` (``dask scheduler``, dask-jobqueue's
  ``SLURMCluster``, ...), or a ready ``distributed.Client``.
* **serial**: the jobs one after another in this process (no Dask needed).

The driver alone writes the manifest; workers only write their job's run file.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from meanfield.errors import InputError, MissingDependencyError, StudyError
from meanfield.progress import progress_bar
from meanfield.sweep import manifest as _manifest
from meanfield.sweep.job import _usable_cores, changed_inputs, run_file_complete, run_job

INSTALL_HINT = ("Dask distributed is not installed: from the meanfield checkout, pip install "
                "'.[distributed]'; or run the jobs one after another with --serial "
                "(serial=True from Python)")


class DaskConfigError(StudyError):
    """The Dask configuration in effect (a YAML file of ``DASK_CONFIG`` or of
    ``~/.config/dask``, a ``DASK_*`` environment variable) is malformed or holds a value Dask
    refuses: bad input, exit code 2. The line names the file or the setting."""


class ClusterError(RuntimeError):
    """Dask distributed failed under the study: the scheduler went away, the local cluster
    could not start, a resource limit (open files, processes) was reached. The study stops;
    :attr:`line` says what happened and the state the manifest keeps (exit code 1)."""

    def __init__(self, line: str):
        self.line = line
        super().__init__(line)


def _yaml_problem(message: str) -> str:
    """The problem of a malformed YAML file in Dask's message: its unindented lines (context
    and problem) and the first position."""
    import re
    body = message.split("original error message:", 1)[-1]
    said = [ln.strip() for ln in body.splitlines() if ln.strip() and not ln[:1].isspace()]
    at = re.search(r"line (\d+), column (\d+)", body)
    where = f" (line {at[1]}, column {at[2]})" if at else ""
    return ("; ".join(said) or body.strip().splitlines()[0]) + where


def require_distributed():
    """Import and return :mod:`distributed`.

    Raises
    ------
    MissingDependencyError
        When the ``distributed`` extra is not installed (the message says how to install it).
    DaskConfigError
        When Dask cannot read its configuration (a malformed YAML file, naming it).
    """
    import re
    try:  # deferred on purpose: the optional `distributed` extra
        import distributed
    except ImportError:
        raise MissingDependencyError(INSTALL_HINT) from None
    except (ValueError, TypeError, AttributeError) as exc:   # dask reads its config on import
        msg = str(exc)
        m = re.search(r"config file at '([^']*)' is malformed", msg)
        if m is None:
            raise DaskConfigError("Dask configuration", "", f"Dask does not load "
                                  f"({type(exc).__name__}: {_first_line(msg)}); "
                                  f"{_config_sources()}") from None
        reason = ("the top level must be a mapping" if "must have a dict" in msg
                  else _yaml_problem(msg))
        raise DaskConfigError(m[1], "", f"malformed Dask config file: {reason}; fix it, or "
                                        f"move it out of {_config_sources(short=True)}") \
            from None
    return distributed


def _first_line(text: str, limit: int = 240) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _config_sources(short: bool = False) -> str:
    """Where Dask reads its configuration from here: ``DASK_CONFIG`` (or its default
    folders) and the ``DASK_*`` variables set."""
    where = os.environ.get("DASK_CONFIG")
    folders = f"DASK_CONFIG={where}" if where else "~/.config/dask and /etc/dask"
    if short:
        return folders
    env = sorted(k for k in os.environ if k.startswith("DASK_") and k != "DASK_CONFIG")
    more = f" and the variables {', '.join(env[:4])}{' ...' if len(env) > 4 else ''}" \
        if env else ""
    return f"check the Dask configuration ({folders}{more})"


@dataclass
class Summary:
    """Outcome of :func:`run_study`.

    Attributes
    ----------
    directory : pathlib.Path
    n_jobs : int
    done : int                 jobs whose run file is complete now
    ran : list of str          ids of jobs executed by this call and finished
    skipped : list of str      ids of jobs already complete before this call
    rerun : dict               id -> why, for jobs whose complete (or interrupted) run file
                               was not the result of their inputs any more (the data file
                               was edited since) and which this call ran again
    failed : dict              id -> error line, for jobs that failed in this call
    permanent : set            ids of failed jobs that fail the same way on every attempt
                               (bad config or data): a rerun cannot finish them
    notes : list of str        one line each, e.g. a thread count capped on the workers
    wall_s : float
    interrupted : bool
    """

    directory: Path
    n_jobs: int
    done: int = 0
    ran: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    failed: dict = field(default_factory=dict)
    wall_s: float = 0.0
    interrupted: bool = False
    permanent: set = field(default_factory=set)
    notes: list = field(default_factory=list)
    rerun: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """All jobs complete."""
        return self.done == self.n_jobs

    def __str__(self) -> str:
        head = (f"study {self.directory}: {self.done}/{self.n_jobs} jobs done "
                f"({len(self.ran)} run now, {len(self.skipped)} already done), "
                f"{len(self.failed)} failed, {self.wall_s:.1f} s"
                + (" (interrupted)" if self.interrupted else ""))
        lines = [head] + [f"  note: {n}" for n in self.notes]
        if self.rerun:
            jid, why = next(iter(self.rerun.items()))
            more = f" (and {len(self.rerun) - 1} more)" if len(self.rerun) > 1 else ""
            lines.append(f"  {len(self.rerun)} of them run again: their inputs changed since "
                         f"their run files were written ({why}{more})")
        for jid, err in self.failed.items():
            lines.append(f"  failed {jid}: {err}")
        if self.interrupted or set(self.failed) - self.permanent:
            lines.append("  rerun the same command to retry the unfinished jobs")
        elif self.failed:
            lines.append("  a rerun fails the same way: fix the study file or data first")
        return "\n".join(lines)


class _Lock:
    """An exclusive, non-blocking lock on the study directory (one driver at a time), the
    ``.sweep.lock`` file inside it (:func:`meanfield.ownership.claim`)."""

    def __init__(self, directory: Path):
        self.path = directory / ".sweep.lock"
        self._claim = None

    def __enter__(self):
        from meanfield import ownership
        self._claim = ownership.claim(self.path.parent, lock=self.path)
        try:
            self._claim.__enter__()
        except ownership.OutputBusy as exc:
            raise StudyError(str(self.path.parent), "", "another sweep is driving this study "
                                                        f"directory ({exc.reason})") from None
        return self

    def __exit__(self, *exc):
        return self._claim.__exit__(*exc)


class _Tracker:
    """Keeps the manifest, the progress bar and the summary in step with job events."""

    def __init__(self, man: _manifest.Manifest, summary: Summary, progress):
        self.man = man
        self.summary = summary
        c = man.counts()
        self.finished: set = set()  # jobs with a result in this call
        self.bar = progress_bar(summary.n_jobs, "study", "job", enabled=progress,
                                initial=c["done"])
        self._post()

    def _post(self, refresh: bool = True):
        c = self.man.counts()
        self.bar.set_postfix({"done": c["done"], "running": c["running"],
                              "failed": c["failed"]}, refresh=refresh)

    def start(self, jid, host=None, pid=None, t=None):
        entry = self.man.job(jid)
        if jid in self.finished:
            return  # the start event arrived after the result
        self.man.set(jid, status="running", worker={"host": host, "pid": pid},
                     started=t or time.time(), attempts=int(entry.get("attempts") or 0) + 1)
        self.man.save()
        self._post()

    def finish(self, jid, result: dict):
        if result.get("note") and result["note"] not in self.summary.notes:
            self.summary.notes.append(result["note"])
        if result.get("rerun"):
            self.summary.rerun.setdefault(jid, result["rerun"])
        entry = self.man.job(jid)
        if entry["status"] != "running":  # no start event seen (e.g. serial or lost event)
            self.man.set(jid, attempts=int(entry.get("attempts") or 0) + 1,
                         worker={"host": result.get("host"), "pid": result.get("pid")})
        if result.get("status") == "done":
            self.man.set(jid, status="done", error=None, finished=time.time(),
                         wall_s=result.get("wall_s"), threads=result.get("threads"))
            (self.summary.skipped if result.get("skipped") else self.summary.ran).append(jid)
        else:
            if result.get("retryable") is False:
                self.summary.permanent.add(jid)
            self.fail(jid, result.get("error") or "unknown error", result.get("wall_s"))
            return
        self.finished.add(jid)
        self.man.save()
        # the states first, then the count: the line the update draws (a plain progress line
        # or a bar redrawn) shows both as they are now, never "3/3 ... running=1"
        self._post(refresh=False)
        self.bar.update(1)

    def fail(self, jid, error: str, wall_s=None):
        self.man.set(jid, status="failed", error=error, finished=time.time(), wall_s=wall_s)
        self.finished.add(jid)
        self.summary.failed[jid] = error
        self.man.save()
        self._post()

    def close(self, directory=None):
        for j in self.man.doc["jobs"]:
            if j["status"] == "running":  # interrupted: done if its file made it, else pending
                done = directory is not None and run_file_complete(directory / j["run_file"])
                self.man.set(j["id"], status="done" if done else "pending")
        self.man.save(force=True)
        self.bar.close()


def _reconcile(spec, directory: Path, man: _manifest.Manifest, stale: dict | None = None):
    """Set each job's status from its run file: complete and still the result of the job's
    config and data -> done, otherwise pending (a job that failed before keeps the error of
    its last attempt until it runs again). Returns the jobs to run; ``stale`` receives
    id -> why for the complete run files whose inputs changed
    (:func:`meanfield.sweep.job.changed_inputs`)."""
    todo = []
    datasets: dict = {}
    for job in spec.jobs:
        path = directory / job.run_file
        why = changed_inputs(path, job.config, datasets) if run_file_complete(path) else None
        if why is None and run_file_complete(path):
            man.set(job.id, status="done", error=None)
            continue
        if why is not None and stale is not None:
            stale[job.id] = why
        man.set(job.id, status="pending")
        todo.append(job)
    return todo


def _serial(todo, directory, tracker, threads):
    for job in todo:
        tracker.start(job.id, os.uname().nodename, os.getpid())
        tracker.man.save(force=True)  # no polling loop here flushes a throttled save later
        res = run_job(job.config.canonical_json(), str(directory / job.run_file),
                      job_id=job.id, threads=threads)
        tracker.finish(job.id, res)


def _worker_env(threads: int) -> dict:
    return {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "NUMBA_NUM_THREADS": str(threads)}


#: Seconds the driver waits for the workers of its local cluster to silence their loggers
#: after an interrupt (:func:`_silence_workers`) before it closes the cluster regardless.
SILENCE_TIMEOUT_S = 5.0


def silence_distributed() -> dict:
    """Raise every logger of Dask distributed in this process (``distributed`` and each
    ``distributed.*``, whatever level Dask's config gave it) above ``CRITICAL``; the loggers
    of this project and of the rest stay as they are. Used only while a cluster shuts down
    after an interrupt, whose cancelled tasks and killed workers distributed reports as
    warnings the user has no use for (the interrupt's own line says what happened).

    Returns
    -------
    dict
        ``{name: old level}``, for :func:`restore_levels`.
    """
    import logging
    names = {"distributed", *(n for n in logging.root.manager.loggerDict
                              if n.startswith("distributed."))}
    old = {}
    for name in sorted(names):
        log = logging.getLogger(name)
        old[name] = log.level
        log.setLevel(logging.CRITICAL + 1)
    return old


def restore_levels(old: dict) -> None:
    """Put back the logger levels that :func:`silence_distributed` returned."""
    import logging
    for name, level in old.items():
        logging.getLogger(name).setLevel(level)


def _silence_workers(client) -> None:
    """:func:`silence_distributed` in every worker of ``client`` (they log to the terminal of
    the driver), waiting at most :data:`SILENCE_TIMEOUT_S`; a worker that does not answer is
    closed all the same."""
    import threading
    t = threading.Thread(target=lambda: client.run(silence_distributed, on_error="ignore"),
                         daemon=True)
    t.start()
    t.join(SILENCE_TIMEOUT_S)


#: Seconds a worker of the local cluster is given to stop by itself once the study is
#: interrupted, before its nanny terminates it (Dask's own close waits 4 s for a worker busy
#: in a job; the job's checkpoint is what a rerun resumes from either way).
STOP_TIMEOUT_S = 0.5


def _stop_workers(cluster) -> None:
    """Stop the worker processes of the local ``cluster`` at once: each nanny closes, asking
    its worker to stop and terminating it after ``0.8 *`` :data:`STOP_TIMEOUT_S` seconds (a
    closing nanny starts no new worker). Closing the cluster then finds them stopped
    (otherwise a SIGTERM took 5 s to end a sweep whose workers were busy). Failures are
    ignored: closing the cluster follows in any case."""
    import asyncio

    async def stop():
        nannies = [w for w in cluster.workers.values() if hasattr(w, "kill")]
        await asyncio.gather(*(w.close(timeout=STOP_TIMEOUT_S, reason="meanfield-interrupted")
                               for w in nannies), return_exceptions=True)
    with contextlib.suppress(Exception):
        cluster.sync(stop)


def dask_setup(worker) -> None:
    """Dask preload of the workers of the local cluster (:func:`_client` names this module in
    ``distributed.worker.preload``). Ctrl-C at a terminal reaches the workers too, which then
    shut down on their own and report the tasks they cancel; here SIGINT first silences the
    worker's distributed loggers (:func:`silence_distributed`) and then does what it did (a
    ``KeyboardInterrupt``). A SIGINT that is ignored, or at its default, is left alone."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        return

    def quiet(signum, frame):
        silence_distributed()
        previous(signum, frame)
    signal.signal(signal.SIGINT, quiet)


#: The Dask settings of the HTTP routes of the local cluster's scheduler and workers: none.
_NO_HTTP = ("distributed.scheduler.http.routes", "distributed.worker.http.routes")
#: The Dask settings :func:`_client` gives the local cluster (never a user's bad setting).
_OURS = ("distributed.worker.multiprocessing-method", "distributed.nanny.pre-spawn-environ",
         "distributed.scheduler.worker-saturation", "distributed.worker.preload", *_NO_HTTP)


def _clusters() -> set:
    """The Dask clusters of this process (whose exit closes them)."""
    from distributed.deploy.spec import SpecCluster
    return set(SpecCluster._instances)


def _abandon(before: set) -> None:
    """Close the clusters made since ``before`` (a local cluster whose start was interrupted
    or failed: ``LocalCluster`` raised, so nothing else holds it), quietly and briefly, and
    drop them from distributed's list of clusters to close at exit (whose attempt, on a
    cluster half started, prints "Exception ignored in atexit callback" and a traceback). Its
    worker processes end with this process in any case."""
    from distributed.deploy.spec import SpecCluster
    for cluster in _clusters() - before:
        _stop_workers(cluster)
        with contextlib.suppress(Exception):
            cluster.close(timeout=2)
        SpecCluster._instances.discard(cluster)


class _StartFailure(Exception):
    """The cluster (or the client of ``--scheduler``) did not start; ``exc`` is why."""

    def __init__(self, exc):
        self.exc = exc
        super().__init__(str(exc))


def _chain(exc):
    """``exc`` and the exceptions it was raised from or while handling, outermost first."""
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = getattr(exc, "exc", None) if isinstance(exc, _StartFailure) else \
            (exc.__cause__ or exc.__context__)
    return seen


def _resource_limit(exc) -> str | None:
    """The resource limit behind ``exc`` (too many open files, no process or thread can be
    started, out of memory), named with its value and how to raise it; ``None`` otherwise."""
    import errno
    for e in _chain(exc):
        text = str(e)
        code = getattr(e, "errno", None)
        if code == errno.ENFILE:
            return ("too many open files in the system (ENFILE, the kernel's fs.file-max): "
                    "close some or raise that limit")
        if code == errno.EMFILE or "Too many open files" in text:
            limit = ""
            try:
                import resource
                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                if soft != resource.RLIM_INFINITY:
                    limit = f" is {soft}"
            except (ImportError, OSError, ValueError):
                pass
            return (f"too many open files: the limit on open file descriptors of this process"
                    f"{limit} (ulimit -n); Dask's workers and connections need more: raise it "
                    "(e.g. ulimit -n 4096)")
        if "can't start new thread" in text or (code == errno.EAGAIN and "fork" in text):
            from meanfield.environment import thread_limit
            return thread_limit() or ("cannot start a process or thread: the limit on this "
                                      "user's processes and threads (ulimit -u) is reached")
        if isinstance(e, MemoryError) or code == errno.ENOMEM:
            return ("out of memory (ulimit -v, the machine's memory, or a Dask memory setting "
                    f"out of range; {_config_sources()})")
    return None


def _flat(tree, prefix: str = "") -> dict:
    out = {}
    for k, v in (tree or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _bad_setting(message: str):
    """``(source, key, value)`` of the Dask setting whose value ``message`` quotes: a setting
    that differs from Dask's defaults (a ``DASK_*`` variable, or a config file); ``None``."""
    try:
        import dask
    except Exception:                    # noqa: BLE001 - no Dask, no setting to name
        return None
    defaults: dict = {}
    for tree in dask.config.defaults:
        defaults.update(_flat(tree))
    for key, value in _flat(dask.config.config).items():
        text = str(value)
        if key in _OURS or len(text) < 2 or defaults.get(key, object()) == value:
            continue
        if text not in message:
            continue
        want = key.replace("_", "-").lower()
        for var in os.environ:
            if var.startswith("DASK_") and \
                    var[5:].lower().replace("__", ".").replace("_", "-") == want:
                return var, key, value
        return f"Dask configuration ({_config_sources(short=True)})", key, value
    return None


def _connection_lost(exc) -> bool:
    """Whether ``exc`` says the client lost its scheduler (futures cancelled for
    ``scheduler-connection-lost``, a closed comm)."""
    chain = _chain(exc)
    return (any("scheduler-connection-lost" in str(e) for e in chain)
            or any(type(e).__name__ in ("CommClosedError", "StreamClosedError") for e in chain))


def _failure(exc, scheduler=None):
    """The exception that says, in one line, why Dask failed under a study: a
    :class:`DaskConfigError` naming a setting Dask refused, else a :class:`ClusterError`
    naming the resource limit, the lost scheduler or what Dask raised."""
    start = isinstance(exc, _StartFailure)
    inner = exc.exc if start else exc
    chain = _chain(inner)
    deepest = chain[-1]
    why = f"{type(deepest).__name__}: {_first_line(deepest)}"
    limit = _resource_limit(inner)
    if limit is not None:
        where = "the local Dask cluster did not start" if start else "Dask failed"
        return ClusterError(f"{where}: {limit}")
    bad = _bad_setting("\n".join(str(e) for e in chain))
    if bad is not None:
        source, key, value = bad
        said = next((e for e in reversed(chain) if str(value) in str(e)
                     and len(str(e)) > len(str(value)) + 4), deepest)
        text = _first_line(said).strip("'\"")
        text = text.split(". ")[0] if str(value) in text.split(". ")[0] else text
        return DaskConfigError(source, key, f"{value!r} is refused by Dask "
                                            f"({type(said).__name__}: {text}); fix or unset "
                                            "this setting")
    if _connection_lost(inner):
        at = f" at {scheduler}" if scheduler else ""
        return ClusterError(f"lost the connection to the Dask scheduler{at} (it stopped, or "
                            f"cannot be reached any more)")
    if start:
        what = (f"cannot connect to the Dask scheduler at {scheduler}" if scheduler else
                "the local Dask cluster did not start")
        return ClusterError(f"{what} ({why}); {_config_sources()}")
    return ClusterError(f"Dask distributed failed while the jobs ran ({why})")


def state_line(man: _manifest.Manifest, running=(),
               then: str = "rerun the same command to continue") -> str:
    """The state a study is left in, as the end of a one-line error: the manifest's counts,
    and the jobs that were running when it stopped (pending again now)."""
    c = man.counts()
    line = (f"the study's state is saved in {_manifest.manifest_path(man.directory)}: "
            f"{c['done']} done, {c['pending']} pending, {c['failed']} failed")
    running = list(running)
    if running:
        ids = ", ".join(running[:3]) + (f" and {len(running) - 3} more" if len(running) > 3
                                         else "")
        line += (f" ({len(running)} of the pending were running when it stopped: {ids}; a "
                 "worker that is still alive may finish them)")
    return f"{line}; {then}"


@contextlib.contextmanager
def _client(workers, scheduler, client, n_todo, threads=None):
    """Yield ``(client, threads per job)``; creates and closes what it started. On a local
    cluster the numba pool of each worker is sized to ``threads`` (default ``cores // K``)."""
    distributed = require_distributed()
    if client is not None:
        yield client, None
        return
    if scheduler:
        try:
            c = distributed.Client(scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            if _resource_limit(exc) is not None:
                raise _StartFailure(exc) from exc
            raise StudyError("--scheduler", scheduler, f"cannot connect ({exc})") from None
        except Exception as exc:          # noqa: BLE001 - a bad Dask setting, named later
            raise _StartFailure(exc) from exc
        quiet: dict = {}
        try:
            yield c, None
        except BaseException as exc:      # the scheduler went away, Ctrl-C: one line says it
            if isinstance(exc, KeyboardInterrupt) or _connection_lost(exc):
                quiet = silence_distributed()
            raise
        finally:
            try:
                c.close()
            finally:
                restore_levels(quiet)
        return
    import dask  # deferred on purpose: the optional `distributed` extra (checked above)
    cores = _usable_cores()
    k = int(workers) if workers else max(1, min(cores, n_todo))
    threads = int(threads) if threads else max(1, cores // k)
    env = _worker_env(threads)
    pre = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    pre.update({k_: v for k_, v in env.items() if k_ != "NUMBA_NUM_THREADS"})
    # spawn: never fork a process whose numba OpenMP pool may have started; saturation 1.0:
    # a worker holds only the job it runs, the rest wait on the scheduler (a killed worker
    # takes no queued job down with it, and idle workers pick up the next job).
    preload = dask.config.get("distributed.worker.preload", []) or []
    preload = [preload] if isinstance(preload, str) else list(preload)
    # the workers' loggers go quiet when Ctrl-C reaches them (:func:`dask_setup`)
    # No dashboard and no HTTP endpoint: the scheduler's HTTP server (which Dask starts even
    # without a dashboard, by default on port 8787, warning "Port 8787 is already in use"
    # when another cluster has it) serves no route and listens on a free port of 127.0.0.1.
    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn",
                          "distributed.nanny.pre-spawn-environ": pre,
                          "distributed.scheduler.worker-saturation": 1.0,
                          "distributed.worker.preload": [*preload, __name__],
                          **{key: [] for key in _NO_HTTP}}):
        # A cluster that cannot start (too few file descriptors, a bad Dask setting) is one
        # line (:func:`_failure`); distributed's loggers would print a traceback per worker.
        quiet = silence_distributed()
        before = _clusters()
        try:
            cluster = distributed.LocalCluster(
                n_workers=k, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=None, env=env,
                scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"})
        except Exception as exc:          # noqa: BLE001 - named by _failure
            _abandon(before)
            restore_levels(quiet)
            raise _StartFailure(exc) from exc
        except BaseException:             # Ctrl-C, Terminated while the workers start
            _abandon(before)
            restore_levels(quiet)
            raise
        restore_levels(quiet)
        quiet = {}
        try:
            c = distributed.Client(cluster)
            try:
                yield c, threads
            except KeyboardInterrupt:   # Ctrl-C, Terminated: the shutdown says nothing more
                quiet = silence_distributed()
                _silence_workers(c)
                _stop_workers(cluster)
                raise
            finally:
                c.close()
        finally:
            try:
                cluster.close()
            finally:
                restore_levels(quiet)


def _dask(todo, directory, tracker, workers, scheduler, client, threads):
    distributed = require_distributed()
    with _client(workers, scheduler, client, len(todo), threads) as (c, budget):
        threads = threads or budget
        topic = f"meanfield-sweep-{uuid.uuid4().hex[:8]}"
        events: queue.SimpleQueue = queue.SimpleQueue()
        c.subscribe_topic(topic, events.put)
        futures = {}
        try:
            for job in todo:
                f = c.submit(run_job, job.config.canonical_json(), str(directory / job.run_file),
                             job_id=job.id, threads=threads, topic=topic, pure=False,
                             key=f"meanfield-job-{job.id}-{topic[-8:]}", priority=-job.index)
                futures[f] = job.id
            pending = set(futures)
            while pending:
                try:
                    res = distributed.wait(pending, timeout=0.1, return_when="FIRST_COMPLETED")
                    finished, pending = res.done, res.not_done
                except (TimeoutError, distributed.TimeoutError):
                    finished = set()
                while True:
                    try:
                        _, msg = events.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(msg, dict) and msg.get("event") == "start":
                        tracker.start(msg["id"], msg.get("host"), msg.get("pid"), msg.get("time"))
                for f in finished:
                    jid = futures[f]
                    if f.status == "finished":
                        tracker.finish(jid, f.result())
                    else:
                        exc = f.exception()
                        name = type(exc).__name__
                        why = ("a worker died while running this job"
                               if name == "KilledWorker" else "the job did not complete")
                        tracker.fail(jid, f"{name}: {why} ({exc})")
                tracker.man.save()
        finally:
            for f in futures:
                if not f.done():
                    f.cancel()
            with contextlib.suppress(Exception):
                c.unsubscribe_topic(topic)


def _make_study_dir(directory: Path) -> None:
    """Create the study directory, or refuse in one line before any job runs."""
    from meanfield.ownership import check_writable_dir
    if directory.exists() and not directory.is_dir():
        raise StudyError(str(directory), "-o", "is a file, expected a study directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StudyError(str(directory), "-o", f"cannot create the study directory "
                                               f"({exc.strerror or exc})") from None
    check_writable_dir(directory, directory, "-o")


def _is_main_test(node) -> bool:
    import ast
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Eq)):
        return False
    sides = [node.left, node.comparators[0]]
    return (any(isinstance(n, ast.Name) and n.id == "__name__" for n in sides)
            and any(isinstance(n, ast.Constant) and n.value == "__main__" for n in sides))


def unguarded_call_line(main_module=None):
    """The line of the running script that led here if it is not under
    ``if __name__ == "__main__":``, else ``None``.

    Local workers are spawned processes that import the script again; a study started from
    its top level would start again in every worker. Returns ``(script, line)`` or ``None``
    (no script, e.g. an interactive session, or a package's ``__main__.py``, which spawned
    processes do not run again).
    """
    import ast
    main = main_module or sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or os.path.basename(path) == "__main__.py":
        return None
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>"
                                     and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.body and \
                node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
            return None
    return path, line


def _check_main_guard() -> None:
    """Refuse, in one line, a local-cluster study started from a script's top level."""
    hint = ('put the code that runs the study under \'if __name__ == "__main__":\' (local '
            'workers are spawned processes that import the script again)')
    if getattr(sys.modules.get("__main__"), "__name__", "") == "__mp_main__":
        raise StudyError("<worker process>", "Study.run", f"called while importing the script; {hint}")
    where = unguarded_call_line()
    if where is not None:
        raise StudyError(where[0], f"line {where[1]}", f"starts a study at the top level of "
                                                       f"the script; {hint}")


def run_study(spec, directory, *, workers=None, scheduler=None, client=None, serial=False,
              threads=None, progress=None) -> Summary:
    """Run the jobs of a study that are not complete yet.

    Parameters
    ----------
    spec : meanfield.sweep.spec.StudySpec
        The expanded study.
    directory : path-like
        Study directory (created if missing): run files ``run-<hash>.h5`` and ``manifest.json``.
    workers : int, optional
        Worker processes of the local cluster (default: ``min(cores, jobs to run)``).
    scheduler : str, optional
        Address of an existing Dask scheduler to use instead of a local cluster.
    client : distributed.Client, optional
        A ready client to use instead of a local cluster.
    serial : bool
        Run the jobs one after another in this process (no Dask).
    threads : int, optional
        numba threads per job (default: ``cores // workers`` on a local cluster; see
        :func:`meanfield.sweep.job.thread_budget` otherwise).
    progress : bool or None
        Progress bar over jobs (``None``: only on a terminal).

    Returns
    -------
    Summary

    Raises
    ------
    StudyError
        Another driver holds the study directory, or the scheduler cannot be reached.
    DaskConfigError
        A Dask setting (a ``DASK_*`` variable, a config file) that Dask refuses: one line
        naming it, and the study's state (a :class:`StudyError`).
    ClusterError
        Dask failed under the study (the scheduler went away, the local cluster did not
        start, a resource limit such as ``ulimit -n``): one line, :attr:`ClusterError.line`,
        saying what and the state the manifest keeps; the running jobs are pending again.
    MissingDependencyError
        Dask distributed is needed (not ``serial``) but not installed.
    KeyboardInterrupt
        After marking running jobs pending again and saving the manifest.
    """
    t0 = time.monotonic()         # a duration: immune to a step of the wall clock
    directory = Path(directory)
    if not serial and scheduler is None and client is None:
        _check_main_guard()
    _make_study_dir(directory)
    directory = directory.resolve()
    if not serial:
        require_distributed()
    with _Lock(directory):
        previous = None
        if _manifest.manifest_path(directory).exists():
            with contextlib.suppress(StudyError):
                previous = _manifest.read(directory)
        man = _manifest.Manifest.for_study(spec, directory, previous)
        summary = Summary(directory=directory, n_jobs=len(spec.jobs))
        todo = _reconcile(spec, directory, man, summary.rerun)
        todo_ids = {j.id for j in todo}
        summary.skipped = [j.id for j in spec.jobs if j.id not in todo_ids]
        man.save(force=True)
        if todo:
            tracker = _Tracker(man, summary, progress)
            failure, cause, running = None, None, []
            try:
                if serial:
                    _serial(todo, directory, tracker, threads)
                else:
                    _dask(todo, directory, tracker, workers, scheduler, client, threads)
            except KeyboardInterrupt:
                summary.interrupted = True
                # the signal is being handled here: the manifest saved on the way out (the
                # running jobs pending again) must be written, not refused as a commit made
                # after a swallowed signal (meanfield.interrupts.raise_pending)
                from meanfield import interrupts
                interrupts.clear()
                raise
            except (InputError, MissingDependencyError):
                raise
            except Exception as exc:      # noqa: BLE001 - Dask failed under the study
                if serial:
                    raise
                running = [j["id"] for j in man.doc["jobs"] if j["status"] == "running"]
                failure, cause = _failure(exc, scheduler), exc
            finally:
                tracker.close(directory)
                summary.done = man.counts()["done"]
                summary.wall_s = time.monotonic() - t0
            if failure is not None:
                if isinstance(failure, DaskConfigError):
                    state = state_line(man, running, "then rerun the same command")
                    raise DaskConfigError(failure.source, failure.field,
                                          f"{failure.reason}; {state}") from cause
                raise ClusterError(f"{failure.line}; {state_line(man, running)}") from cause
        summary.done = man.counts()["done"]
        summary.wall_s = time.monotonic() - t0
    return summary
