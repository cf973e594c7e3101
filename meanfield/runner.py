"""The main job: load a config, build the data set, integrate the ladder, write the run file.

This is the Python API behind ``meanfield run``. Files of a run with output ``RUN.h5``
(``docs/format.md``, "File protocol")::

    RUN.h5        the finished run; only ever created by an atomic rename of RUN.h5.part
    RUN.h5.part   the run file being written (readable at any moment, committed rows only)
    RUN.h5.ckpt   the last checkpoint (atomically replaced every output.checkpoint_every steps
                  and on SIGINT/SIGTERM/SIGHUP)

A run killed at any moment (even by SIGKILL) leaves ``RUN.h5.part`` and usually
``RUN.h5.ckpt``; ``resume=True`` continues from the checkpoint and ends bitwise identical to an
uninterrupted run. An existing ``RUN.h5`` is not touched until a new run completes.
"""

from __future__ import annotations

import numbers
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numba

from meanfield import atomic
from meanfield import checkpoint as _ckpt
from meanfield import config as _config
from meanfield import data as _data
from meanfield import io_failures as _io_failures
from meanfield import ownership as _ownership
from meanfield.errors import (
    CheckpointError,
    ConfigError,
    DivergenceError,
    InputError,
    Interrupted,
    RunFileError,
    RunMismatch,
)
from meanfield.progress import progress_bar
from meanfield.store import RunWriter, open_run, writer_alive
from solvers.langevin import SolverState, convex_start, initial_state, simulate
from solvers.stepper import Stepper


def default_output(cfg) -> str:
    """Default run-file name: ``run-<config hash>.h5`` in the current directory."""
    return f"run-{cfg.hash()}.h5"


@dataclass(frozen=True)
class RunPaths:
    """The files of one run: ``final`` (RUN.h5), ``part`` (RUN.h5.part), ``ckpt``
    (RUN.h5.ckpt); scratch files are ``RUN.h5.part.tmp`` and ``RUN.h5.ckpt.tmp``."""

    final: Path
    part: Path
    ckpt: Path

    @classmethod
    def of(cls, output) -> RunPaths:
        out = Path(output)
        return cls(out, out.with_name(out.name + ".part"), out.with_name(out.name + ".ckpt"))

    @property
    def creating(self) -> Path:
        """Where the empty run file is laid out before it becomes ``part``."""
        return self.part.with_name(self.part.name + ".tmp")


def _check_output_dir(path: Path) -> None:
    parent = path.absolute().parent
    if not parent.exists():
        raise InputError(str(path), "", f"output directory {parent} does not exist")
    if not parent.is_dir():
        raise InputError(str(path), "", f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(str(path), "", f"output directory {parent} is not writable")
    if path.is_dir():
        raise InputError(str(path), "", "is a directory, expected a run file name")


def _physics_table(d: dict) -> dict:
    """The part of a canonical config dict that ``physics_hash`` covers, flattened to
    ``{"table.key": value}``."""
    out = {}
    for table in ("model", "dynamics", "output"):
        for key, value in d.get(table, {}).items():
            if (table, key) != ("output", "checkpoint_every"):
                out[f"{table}.{key}"] = value
    return out


def _stored_physics(stored) -> tuple[str, dict]:
    """``(physics_hash, physics fields)`` of the config that wrote the run file ``stored``
    (a :class:`meanfield.store.Run`), recomputed from its ``config_json`` so that files written
    before the data path left the physics hash compare by the same rule; the stored attribute
    when that config no longer validates."""
    try:
        theirs = _config.from_canonical_json(stored.config_json, str(stored.path))
    except ConfigError:
        return stored.physics_hash, _physics_table(stored.config)
    return theirs.physics_hash(), _physics_table(theirs.as_dict())


def _data_source(cfg) -> tuple[str, str]:
    """``(file, field)`` naming where the data of ``cfg`` come from, for messages."""
    from meanfield.schema import FileData
    if isinstance(cfg.data, FileData):
        return str(cfg.data.path), ""
    return cfg.source, "data"


def check_same_run(cfg, dataset, stored, path, hint: str = "resume with the same config and "
                   "data, or pass --overwrite to start over") -> None:
    """Refuse unless the run file ``stored`` was written by this run: the same physics
    (:meth:`meanfield.config.RunConfig.physics_hash`) on the same data values.

    The data are compared with the ``/data/X`` and ``/data/y`` stored in the file, bit for
    bit, which also covers files written before ``data_hash`` was stored. Paths play no part:
    a run folder that moved (config, data and run files together) still matches.

    Parameters
    ----------
    cfg : RunConfig
    dataset : meanfield.data.Dataset
        The data of ``cfg`` as loaded now.
    stored : meanfield.store.Run
        The existing run file (``RUN.h5.part`` or ``RUN.h5``).
    path : path-like
        Its path, for messages.
    hint : str
        What to do instead, appended to the message (none when empty).

    Raises
    ------
    meanfield.errors.RunMismatch
        Another physics (naming the config and the first field that differs) or other data
        (naming the data file and the first value that differs).
    """
    theirs, fields = _stored_physics(stored)
    mine = cfg.physics_hash()
    if theirs != mine:
        ours = _physics_table(cfg.as_dict())
        diff = next((f"{k} {fields.get(k)!r} -> {ours.get(k)!r}"
                     for k in sorted(set(ours) | set(fields)) if ours.get(k) != fields.get(k)),
                    "")
        raise RunMismatch(cfg.source, "", f"differs from the config that wrote {path} (physics "
                                          f"hash {mine} != {theirs}"
                                          + (f"; {diff}" if diff else "") + ")"
                          + (f"; {hint}" if hint else ""))
    why = _data.values_differ(dataset.X, dataset.y, stored.X, stored.y)
    if why is not None:
        src, fld = _data_source(cfg)
        raise RunMismatch(src, fld, f"data values differ from those stored in {path}: {why}"
                                    + (f"; {hint}" if hint else ""))


def _check_checkpoint(cfg, dataset, meta: dict, stored, ckpt: Path, part: Path) -> None:
    """Refuse a checkpoint that does not belong to the run file ``stored`` (already checked
    against ``cfg`` and ``dataset``): its physics hash is neither that of ``cfg`` nor the one
    the run file stores (files and checkpoints written before the data path left the hash),
    or its data hash (absent in older checkpoints) is not that of ``dataset``."""
    ph = meta.get("physics_hash", "")
    if ph not in (cfg.physics_hash(), stored.physics_hash):
        raise RunMismatch(str(ckpt), "", f"does not belong to {part} (physics hash {ph}, "
                                         f"expected {cfg.physics_hash()}); pass --overwrite to "
                                         "start over")
    dh = meta.get("data_hash") or ""
    if dh and dh != dataset.hash():
        src, _ = _data_source(cfg)
        raise RunMismatch(str(ckpt), "", f"was written on other data (data hash {dh}, "
                                         f"{dataset.hash()} for {src} now); pass --overwrite "
                                         "to start over")


def _through_symlink(out: Path, overwrite: bool, resume: bool) -> Path:
    """The file a symlinked output names: the run is written there and the link is kept. A
    link to nothing is followed only with ``overwrite`` (or ``resume`` of an interrupted run
    at its target).

    Raises
    ------
    InputError
        ``out`` is a dangling link and neither applies.
    """
    if not out.is_symlink():
        return out
    target = Path(os.path.realpath(out))
    if not target.exists():
        at = RunPaths.of(target)
        if not (overwrite or (resume and (at.part.exists() or at.ckpt.exists()))):
            raise InputError(str(out), "-o", f"is a symbolic link to {target}, which does not "
                                             "exist; pass --overwrite to write the run there "
                                             "(the link is kept), or remove the link")
    return target


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (symlinks resolved; hard links too)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_not_an_input(cfg, out: Path) -> None:
    """Refuse an output that is one of the run's inputs: the config file or the data file
    (any of the files the run writes: ``RUN.h5``, ``.part``, ``.ckpt`` and their scratch).

    Raises
    ------
    InputError
        Naming the output and which input it is.
    """
    from meanfield.schema import FileData
    inputs = []
    if not cfg.source.startswith("<") and Path(cfg.source).is_file():
        inputs.append(("the config", Path(cfg.source)))
    if isinstance(cfg.data, FileData):
        inputs.append(("the data file (data.path)", Path(cfg.data.path)))
    paths = RunPaths.of(out)
    written = (paths.final, paths.part, paths.ckpt, paths.creating,
               paths.ckpt.with_name(paths.ckpt.name + ".tmp"))
    for what, src in inputs:
        for p in written:
            if _same_file(p, src):
                who = "is" if p == paths.final else f"writes {p.name}, which is"
                raise InputError(str(out), "-o", f"{who} {what} of this run ({src}); a run "
                                                 "never writes over its inputs: choose another "
                                                 "output")


def _refuse_if_locked(part: Path) -> None:
    """Refuse to touch a ``.part`` that a running writer holds open (its writer lock, or an
    HDF5 file lock outside SWMR mode)."""
    if writer_alive(part):
        raise InputError(str(part), "", "locked: another process is writing this run "
                                        "(never run two 'meanfield run' with one output)")
    try:
        open_run(part)
    except RunFileError as exc:
        if exc.reason.startswith("not a readable HDF5 file (locked"):
            raise InputError(str(part), "", "locked: another process is writing this run "
                                            "(never run two 'meanfield run' with one output)") \
                from None


def _plan(paths: RunPaths, cfg, dataset, overwrite: bool, resume: bool) -> str:
    """Decide what to do: ``"fresh"``, ``"resume"``, ``"finalize"`` or ``"done"``.

    Raises
    ------
    InputError
        The output is in the way, or belongs to another config.
    """
    if paths.part.exists():
        _refuse_if_locked(paths.part)
    if overwrite:
        return "fresh"
    if not resume:
        if paths.final.exists():
            raise InputError(str(paths.final), "", "output exists; pass --overwrite to replace "
                                                   "it (or --resume to check it is complete)")
        for p in (paths.part, paths.ckpt):
            if p.exists():
                raise InputError(str(p), "", "an interrupted run of this output exists; pass "
                                             "--resume to continue it or --overwrite to start over")
        return "fresh"
    if paths.ckpt.exists():
        if not paths.part.exists():
            raise CheckpointError(str(paths.ckpt), "", f"its run file {paths.part.name} is "
                                                       "missing; pass --overwrite to start over")
        return "resume"
    if paths.part.exists():
        # no checkpoint: killed before the first one, or finished but not yet renamed
        try:
            part = open_run(paths.part)
        except RunFileError as exc:
            # RUN.h5.part only ever appears complete (it is laid out under another name), so
            # an unreadable one is not an interrupted run of ours: leave it alone
            raise RunFileError(str(paths.part), "", f"{exc.reason}; cannot resume from it; "
                                                    "pass --overwrite to start over") from None
        check_same_run(cfg, dataset, part, paths.part)
        return "finalize" if part.complete else "fresh"
    if paths.final.exists():
        done = open_run(paths.final)
        check_same_run(cfg, dataset, done, paths.final,
                       "run it with the same config and data, or pass --overwrite to replace it")
        if not done.complete:
            raise RunFileError(str(paths.final), "complete", "false and no checkpoint to "
                                                             "resume from; pass --overwrite")
        return "done"
    return "fresh"


class _StopRequest:
    """SIGINT/SIGTERM/SIGHUP handlers (main thread only) that ask the solver to stop at the next
    observation boundary; a second signal aborts at once (``KeyboardInterrupt``). A signal the
    process ignores (SIGHUP under ``nohup``) stays ignored."""

    def __init__(self, log):
        self.requested = False
        self._log = log
        self._old = {}

    def __call__(self) -> bool:
        return self.requested

    def _handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self._log(f"{signal.Signals(signum).name}: writing a checkpoint at the next observation "
                  "boundary (signal again to abort)")

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
                if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
                    self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}


class _Writing:
    """Turn an ``OSError`` (full disk, file-size limit, permissions) while writing ``path``
    into an :class:`InputError` naming it."""

    def __init__(self, path, hint=""):
        self.path, self.hint = path, hint

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if typ is None or isinstance(exc, InputError):
            return False
        if not (issubclass(typ, OSError)
                or (issubclass(typ, RuntimeError) and "write failed" in str(exc))):
            return False
        # h5py reports HDF5 I/O failures as RuntimeError("... error message = 'REASON' ...");
        # a failing numba cache or another file is named as itself, not as the run file
        what, reason = _io_failures.describe(exc, self.path)
        if what.startswith(str(self.path)):        # RUN.h5.part.tmp and the like
            what = str(self.path)
        hint = self.hint if what == str(self.path) else ""
        raise InputError(what, "", f"cannot write ({reason}){hint}") from None


def _finalize(paths: RunPaths) -> None:
    """Make the finished ``.part`` durable, drop the checkpoint, rename into place."""
    with _Writing(paths.final):
        atomic.fsync_path(paths.part)
        if paths.ckpt.exists():
            paths.ckpt.unlink()
        os.replace(paths.part, paths.final)
        atomic.fsync_path(paths.final.absolute().parent)


#: The guard skips data sets with more points than this (the convex reference enumerates
#: the dichotomies).
GUARD_MAX_N = 64
#: ... nor data sets with more activation patterns than this (Cover's bound
#: ``2 Σ_{k≤d} C(n−1, k)``): the convex reference costs seconds per hundred patterns
#: (measured: 3.5 s at n = 8, d = 50; 83 s at n = 12, d = 50 with 4096 patterns).
GUARD_MAX_PATTERNS = 512
_GUARD_CACHE: dict = {}


def _pattern_bound(n: int, d: int) -> int:
    """Cover's bound on the activation patterns of ``n`` lifted points in ``R^(d+1)``."""
    import math
    return 2 * sum(math.comb(n - 1, k) for k in range(min(d, n - 1) + 1)) if n else 0


def _stability_guard(cfg, dataset, log) -> None:
    """One-line warning when ``eta`` is above the stability limit of the data mode predicted
    by the exact references (``solvers.stability.reference_limits``; relu, ``n ≤
    GUARD_MAX_N`` and at most ``GUARD_MAX_PATTERNS`` activation patterns, else one note that
    the check is skipped; not for ``"mala"``, exact at any step). The run itself stops at the
    first observation with ``η h ≥ 2``."""
    if cfg.model.activation != "relu" or dataset.n > GUARD_MAX_N \
            or cfg.dynamics.integrator == "mala":       # exact at any step
        return
    patterns = _pattern_bound(dataset.n, dataset.d)
    if patterns > GUARD_MAX_PATTERNS:
        log(f"note: eta is not checked against the exact references before the run (up to "
            f"{patterns} activation patterns at n={dataset.n}, d={dataset.d}; the check "
            f"handles {GUARD_MAX_PATTERNS}); the run stops if its step becomes unstable")
        return
    from solvers.stability import STABILITY_LIMIT, reference_limits
    eta = float(cfg.dynamics.eta)
    key = (dataset.X.tobytes(), dataset.y.tobytes(), dataset.X.shape, cfg.dynamics.lam,
           tuple(cfg.taus), eta)
    if key not in _GUARD_CACHE:
        try:
            _GUARD_CACHE[key] = reference_limits(dataset.X, dataset.y,
                                                 float(cfg.dynamics.lam), cfg.taus, eta=eta)
        except Exception:      # noqa: BLE001 - a failed estimate must not stop the run
            _GUARD_CACHE[key] = []
    limits = _GUARD_CACHE[key]
    if not limits:
        return
    name, tau, mode = max(limits, key=lambda t: t[2].curvature)
    if mode.eta_lambda_max(eta) >= STABILITY_LIMIT:
        at = "the tau -> 0 convex reference" if name == "convex" else \
            f"the Gibbs reference at tau={tau:g}"
        log(f"warning: eta={eta:g} is above the stability limit of the data mode (eta*h = "
            f"{mode.eta_lambda_max(eta):.3g} >= {STABILITY_LIMIT:g} at {at}); the largest "
            f"stable eta is {mode.largest_stable_eta():.3g}: the run will stop when its step "
            "becomes unstable")


def _stage_stationary(n):
    """``stage_done`` of ``steps_per_tau = "auto"``: the stationarity verdict of the stage so
    far from the solver state's observations (``analysis.stationarity.verdict``)."""
    import numpy as np

    from analysis.stationarity import verdict

    def done(state) -> bool:
        return verdict(np.asarray(state.stage_steps, dtype=np.int64),
                       np.asarray(state.stage_residuals) * n, np.asarray(state.stage_eta_h),
                       F_previous=np.asarray(state.stage_previous) * n).stationary
    return done


def make_stepper(cfg: _config.RunConfig, dataset: _data.Dataset) -> Stepper:
    """The particle stepper of ``cfg`` on ``dataset`` (:class:`solvers.stepper.Stepper`)."""
    mod, dyn = cfg.model, cfg.dynamics
    return Stepper(dataset.X, dataset.y, mod.n_particles, lam=dyn.lam, eta=dyn.eta,
                   activation=mod.activation, sharpness=mod.sharpness, cap=mod.cap,
                   batch_size=dyn.batch_size, seed=dyn.seed, integrator=dyn.integrator,
                   jumps=dyn.jumps)


#: Seconds of kernel preparation after which ``run`` says it is compiling.
COMPILE_NOTE_AFTER = 3.0


#: The line ``run`` prints while it compiles.
COMPILE_NOTE = ("run: compiling the numba kernels, once per installation for every input "
                "dimension (about {minutes} min on an idle 2-core machine, longer on a busy one)")
#: Minutes the first compile takes on an idle 2-core machine: measured 103 s (186 s of CPU), the
#: kernels of this run alongside the four other kinds (benchmarks/README.md, "Compile time and
#: input dimension").
COMPILE_MINUTES = "2"


def _warm_up(stepper: Stepper, state: SolverState, progress) -> None:
    """Compile the kernels (or load them from numba's cache) before the progress clock starts,
    so that the first progress line's rate is the stepping rate (it read "about 100 h left" on
    a first run); a first compile also compiles the kernels of the other input dimensions
    (:meth:`solvers.stepper.Stepper.prepare`). Preparing works on a copy of the particles and
    leaves the run unchanged. When it takes longer than :data:`COMPILE_NOTE_AFTER` seconds and
    progress is shown, one line on stderr says why nothing moves yet and for how long."""
    import sys
    note = None
    if progress is not False:
        def say():
            sys.stderr.write(COMPILE_NOTE.format(minutes=COMPILE_MINUTES) + "\n")
            sys.stderr.flush()
        note = threading.Timer(COMPILE_NOTE_AFTER, say)
        note.daemon = True
        note.start()
    try:
        stepper.prepare(state.theta.copy(), int(state.step))
    finally:
        if note is not None:
            note.cancel()


def integrate(cfg: _config.RunConfig, dataset: _data.Dataset, writer: RunWriter | None = None,
              state: SolverState | None = None, progress: bool | None = None,
              on_checkpoint: Callable[[SolverState], None] | None = None,
              should_stop: Callable[[], bool] | None = None,
              stage_done: Callable[[SolverState], bool] | None = None) -> SolverState:
    """Drive the solver loop (:func:`solvers.langevin.simulate`) over the ladder of ``cfg``.

    The loop yields at every observation boundary; here its observations and snapshot frames
    go to the run file, checkpoints are taken, stop requests are polled and the progress bar
    moves.

    Parameters
    ----------
    cfg : RunConfig
        The run's config.
    dataset : meanfield.data.Dataset
        Its data set.
    writer : RunWriter, optional
        Receives every observation and snapshot frame (row counters of the state follow it).
    state : SolverState, optional
        Resume from this state instead of a fresh initialisation.
    progress : bool or None
        Progress on stderr (:func:`meanfield.progress.progress_bar`): ``None`` or ``True``, a
        bar on a terminal and a plain line every 10 s otherwise; ``False``, nothing.
    on_checkpoint : callable(SolverState), optional
        Called every ``output.checkpoint_every`` steps (at observation boundaries).
    should_stop : callable() -> bool, optional
        Polled at observation boundaries; when it returns true, ``on_checkpoint`` is called and
        the function returns the current state.
    stage_done : callable(SolverState) -> bool, optional
        ``steps_per_tau = "auto"``: whether a stage may end at a chunk end
        (:func:`solvers.langevin.simulate`); by default its stationarity verdict.

    Returns
    -------
    SolverState
        The final state (``stage < n_stages`` when stopped early).

    Raises
    ------
    DivergenceError
        From the solver: NaN/Inf or runaway particles; :class:`solvers.errors.UnstableStepError` when the
        step is unstable on the data mode (after that observation is written).
    """
    schedule = cfg.schedule
    if state is None and cfg.model.init == "convex":
        state = SolverState(theta=convex_start(dataset.X, dataset.y, cfg.n_particles,
                                               cfg.dynamics.lam, schedule.taus[0],
                                               cfg.dynamics.seed))
    elif state is None:
        state = initial_state(cfg.n_particles, dataset.d, cfg.model.init_scale,
                              cfg.dynamics.seed)
    ckpt_every = cfg.output.checkpoint_every
    last_ckpt = prev = state.step
    if stage_done is None and schedule.auto:
        stage_done = _stage_stationary(dataset.n)
    stepper = make_stepper(cfg, dataset)
    _warm_up(stepper, state, progress)
    loop = simulate(stepper, schedule, state, init_scale=cfg.model.init_scale,
                    stage_done=stage_done)
    with progress_bar(schedule.total_steps, "run", "step", enabled=progress,
                      initial=state.step) as bar:
        stage_seen = None
        bar.upper_bound = schedule.auto          # plain lines: "at most ... left"
        for state, obs, snapshot in loop:
            if schedule.auto and obs.stage != stage_seen:
                # a stage began: the earlier ones are done, this and the later ones may use
                # their whole budget (the total counted the budget of every stage)
                stage_seen = obs.stage
                left = schedule.n_stages - obs.stage
                _retotal(bar, prev + left * int(schedule.max_steps_per_tau))
            if writer is not None:
                writer.append_observations([obs])
                state.n_observations += 1
                if snapshot:
                    writer.append_frame(state.theta, obs.step, obs.time, obs.tau, obs.stage,
                                        obs.step_in_stage)
                    state.n_frames += 1
            bar.update(obs.step - prev)
            bar.set_postfix(tau=f"{obs.tau:.1e}", risk=f"{obs.risk:.3e}", refresh=False)
            prev = obs.step
            stop = should_stop is not None and should_stop()
            if on_checkpoint is not None and (stop or state.step - last_ckpt >= ckpt_every):
                on_checkpoint(state)
                last_ckpt = state.step
            if stop:
                break
        else:
            if schedule.auto:
                _retotal(bar, bar.n)     # the last stage ended on its verdict: 100 %
    return state


def _retotal(bar, total: int) -> None:
    """Set the progress bar's total (auto stage lengths end early) and redraw it."""
    bar.total = int(total)
    refresh = getattr(bar, "refresh", None)
    if refresh is not None:
        refresh()


def _resume_command(cfg, out: Path) -> str:
    src = "" if cfg.source.startswith("<") else f"{cfg.source} "
    return f"meanfield run {src}-o {out} --resume"


def run(cfg: _config.RunConfig | str | os.PathLike | None, output: str | os.PathLike | None = None,
        *, overwrite: bool = False, resume: bool = False, progress: bool | None = None,
        threads: int | None = None, log: Callable[[str], None] | None = None,
        outcome: dict | None = None) -> Path:
    """Integrate the temperature ladder of ``cfg`` and write the run file.

    Parameters
    ----------
    cfg : RunConfig or path-like or None
        A validated config, a TOML path, or ``None`` for the embedded default.
    output : path-like, optional
        Run file to write (default :func:`default_output`). A symbolic link is written
        through: the run's files go next to the file it points to, and the link stays.
    overwrite : bool
        Start over even if the output or an interrupted run of it exists. An existing output
        stays in place until the new run completes.
    resume : bool
        Continue an interrupted run from its checkpoint (bitwise identical to never stopping);
        finish a run that was complete but not yet renamed; do nothing if the output is
        already complete; start from the beginning if there is nothing to resume.
    progress : bool or None
        Progress on stderr: ``None`` or ``True``, a bar on a terminal and a plain line every
        10 s otherwise; ``False``, nothing.
    threads : int, optional
        numba threads for the kernels.
    log : callable(str), optional
        Receives one-line status messages (resuming, signals).
    outcome : dict, optional
        Receives ``"plan"``: ``"fresh"``, ``"resume"``, ``"finalize"`` or ``"done"`` (nothing
        was written because the output was already complete).

    Returns
    -------
    pathlib.Path
        The finished run file.

    Raises
    ------
    InputError
        Invalid config or data; output in the way without ``overwrite``/``resume``; an
        output that is the config or the data file; a dangling symlink as output without
        ``overwrite``; unwritable directory; a write failure (full disk).
    meanfield.errors.RunMismatch
        A resume (or the "already complete" check) under another physics or on other data
        values than those stored in the run file (``docs/format.md``, "Run identity").
    meanfield.ownership.OutputBusy
        Another process is writing the same output (nothing was read or written).
    meanfield.errors.Interrupted
        SIGINT/SIGTERM/SIGHUP: a checkpoint was written, the run can be resumed.
    meanfield.errors.DivergenceError
        The dynamics produced NaN/Inf/overflow; ``RUN.h5.part`` (frames so far) and the last
        good checkpoint are kept.
    """
    log = log or (lambda msg: None)
    if overwrite and resume:
        raise InputError(str(output or "<output>"), "", "--overwrite and --resume exclude "
                                                        "each other")
    if cfg is None:
        cfg = _config.embedded_default()
    elif not isinstance(cfg, _config.RunConfig):
        cfg = _config.load(cfg)
    dataset = _data.from_config(cfg)
    _config.check_against_data(cfg, dataset.n, dataset.d)
    out = Path(output) if output is not None else Path(default_output(cfg))
    out = _through_symlink(out, overwrite, resume)
    _check_not_an_input(cfg, out)
    _check_output_dir(out)
    if threads is not None:
        limit = int(numba.config.NUMBA_NUM_THREADS)
        if isinstance(threads, bool) or not (isinstance(threads, numbers.Integral)
                                             and 1 <= threads <= limit):
            raise InputError("--threads", "", f"must be in [1, {limit}] (NUMBA_NUM_THREADS of "
                                              f"this process), got {threads!r}")
    with _ownership.claim(out, "-o"):
        return _run_owned(cfg, dataset, out, overwrite=overwrite, resume=resume,
                          progress=progress, threads=threads, log=log, outcome=outcome)


def _run_owned(cfg, dataset, out, *, overwrite, resume, progress, threads, log, outcome):
    """:func:`run` once the output is owned by this process."""
    paths = RunPaths.of(out)
    # Idle OpenMP workers of the kernels spin by default. When cores are shared (other jobs,
    # several runs at once) a step then waits for a descheduled spinning thread: measured 7x
    # slower on a busy 2-core machine. Sleeping workers instead cost one thread wake-up per
    # parallel pass. An explicit setting in the environment wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    plan = _plan(paths, cfg, dataset, overwrite, resume)
    if outcome is not None:
        outcome["plan"] = plan
    if plan == "done":
        log(f"{out} is already complete")
        return out
    if plan == "finalize":
        _finalize(paths)
        return out

    _stability_guard(cfg, dataset, log)
    state = None
    if plan == "resume":
        state, meta = _ckpt.load(paths.ckpt, SolverState)
        stored = open_run(paths.part)
        check_same_run(cfg, dataset, stored, paths.part)
        _check_checkpoint(cfg, dataset, meta, stored, paths.ckpt, paths.part)
        want = (cfg.n_particles, dataset.d + 2)
        if getattr(state.theta, "shape", None) != want:
            raise CheckpointError(str(paths.ckpt), "theta", f"shape {state.theta.shape}, "
                                                            f"expected {want}")
        writer = RunWriter(paths.part, mode="a")
        try:
            writer.truncate(state.n_frames, state.n_observations)
        except BaseException:
            writer.close()
            raise
        log(f"resuming {paths.part} from step {state.step}")
    else:
        if resume:
            log(f"nothing to resume for {out}: starting from the beginning")
        with _Writing(paths.part):
            for p in (paths.ckpt, paths.part, paths.creating):
                if p.exists():
                    p.unlink()
        # Build the empty layout under another name: RUN.h5.part appears complete or not at all.
        writer = None
        try:
            with _Writing(paths.part), atomic.replacing(paths.part, scratch=paths.creating):
                writer = RunWriter(paths.creating, cfg, dataset, mode="w",
                                   capacity=cfg.schedule.row_counts())
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        writer.path = paths.part
    if threads:
        numba.set_num_threads(int(threads))

    hint = "; free space and continue with --resume"

    def save_checkpoint(st):
        with _Writing(paths.part, hint):
            writer.commit()                   # the buffered rows the checkpoint counts
        kept = ("; the previous checkpoint is kept" if paths.ckpt.exists() else
                "; there was no earlier checkpoint, so the run cannot be resumed: free space "
                "and run it again")
        with _Writing(paths.ckpt, kept):
            atomic.fsync_path(paths.part)     # rows the checkpoint counts are on disk first
            _ckpt.save(paths.ckpt, st, physics_hash=cfg.physics_hash(),
                       config_hash=cfg.hash(), data_hash=dataset.hash())

    try:
        with _Writing(paths.part, hint), writer, _StopRequest(log) as stop:
            state = integrate(cfg, dataset, writer=writer, state=state, progress=progress,
                              on_checkpoint=save_checkpoint, should_stop=stop)
            if state.stage < cfg.schedule.n_stages:
                raise Interrupted(state.step, str(paths.ckpt),
                                  f"interrupted at step {state.step}; checkpoint "
                                  f"{paths.ckpt} written; continue with: "
                                  f"{_resume_command(cfg, out)}")
            writer.mark_complete()
    except DivergenceError as exc:
        kept = f"frames so far kept in {paths.part}" + (
            f", last good checkpoint {paths.ckpt}" if paths.ckpt.exists() else "")
        raise type(exc)(exc.step, exc.tau, f"{exc} ({kept})") from None
    except Exception:
        # bad input, the environment (a library that fails, out of memory): nothing resumable
        # was written, so no RUN.h5.part is left to block the next run
        if not paths.ckpt.exists() and paths.part.exists():
            paths.part.unlink()
        raise
    _finalize(paths)
    return out
