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

from meanfield.errors import MissingDependencyError, StudyError
from meanfield.progress import progress_bar
from meanfield.sweep import manifest as _manifest
from meanfield.sweep.job import _usable_cores, changed_inputs, run_file_complete, run_job

INSTALL_HINT = ("Dask distributed is not installed: from the meanfield checkout, pip install "
                "'.[distributed]'; or run the jobs one after another with --serial "
                "(serial=True from Python)")


def require_distributed():
    """Import and return :mod:`distributed`.

    Raises
    ------
    MissingDependencyError
        When the ``distributed`` extra is not installed (the message says how to install it).
    """
    try:  # deferred on purpose: the optional `distributed` extra
        import distributed
    except ImportError:
        raise MissingDependencyError(INSTALL_HINT) from None
    return distributed


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

    def _post(self):
        c = self.man.counts()
        self.bar.set_postfix({"done": c["done"], "running": c["running"],
                              "failed": c["failed"]}, refresh=True)

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
            self.bar.update(1)
        else:
            if result.get("retryable") is False:
                self.summary.permanent.add(jid)
            self.fail(jid, result.get("error") or "unknown error", result.get("wall_s"))
            return
        self.finished.add(jid)
        self.man.save()
        self._post()

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
            raise StudyError("--scheduler", scheduler, f"cannot connect ({exc})") from None
        try:
            yield c, None
        finally:
            c.close()
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
    with dask.config.set({"distributed.worker.multiprocessing-method": "spawn",
                          "distributed.nanny.pre-spawn-environ": pre,
                          "distributed.scheduler.worker-saturation": 1.0,
                          "distributed.worker.preload": [*preload, __name__]}):
        cluster = distributed.LocalCluster(n_workers=k, threads_per_worker=1, processes=True,
                                           host="127.0.0.1", dashboard_address=None, env=env)
        quiet: dict = {}
        try:
            c = distributed.Client(cluster)
            try:
                yield c, threads
            except KeyboardInterrupt:   # Ctrl-C, Terminated: the shutdown says nothing more
                quiet = silence_distributed()
                _silence_workers(c)
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
            try:
                if serial:
                    _serial(todo, directory, tracker, threads)
                else:
                    _dask(todo, directory, tracker, workers, scheduler, client, threads)
            except KeyboardInterrupt:
                summary.interrupted = True
                raise
            finally:
                tracker.close(directory)
                summary.done = man.counts()["done"]
                summary.wall_s = time.monotonic() - t0
        summary.done = man.counts()["done"]
        summary.wall_s = time.monotonic() - t0
    return summary
