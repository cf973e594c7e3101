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

The package, one module per concern: :mod:`~meanfield.runner.files` (the file protocol),
:mod:`~meanfield.runner.identity` (is a stored run this config's), :mod:`~meanfield.runner.signals`
(the stop request), :mod:`~meanfield.runner.guard` (the stability warning before the first step)
and :mod:`~meanfield.runner.loop` (:func:`integrate`); :func:`run` ties them together.
"""

from __future__ import annotations

import contextlib
import numbers
import os
from collections.abc import Callable
from pathlib import Path

import numba

from meanfield import atomic
from meanfield import checkpoint as _ckpt
from meanfield import config as _config
from meanfield import data as _data
from meanfield import ownership as _ownership
from meanfield.errors import (
    CheckpointError,
    DivergenceError,
    InputError,
    Interrupted,
)
from meanfield.runner.files import (
    RunPaths,
    _check_not_an_input,
    _check_output_dir,
    _finalize,
    _make_output_dir,
    _plan,
    _through_symlink,
    _Writing,
    default_output,
)
from meanfield.runner.guard import _stability_guard
from meanfield.runner.identity import _check_checkpoint, check_same_run
from meanfield.runner.loop import integrate, make_stepper
from meanfield.runner.signals import _StopRequest
from meanfield.store import RunWriter, open_run
from solvers.integrators import integrator_named
from solvers.langevin import SolverState

__all__ = [
    "RunPaths", "check_same_run", "default_output", "integrate", "make_stepper", "run"
]


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
        Run file to write (default :func:`default_output`). Missing folders above it are
        created (after every check of the input). A symbolic link is written through: the
        run's files go next to the file it points to, and the link stays.
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
        Receives one-line status messages (resuming, signals) and warnings (a ladder that
        runs cold to hot without ``model.init = "convex"``,
        :func:`meanfield.config.ladder_order_warning`; ``eta`` above the stability limit).
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
        ``overwrite``; an unwritable directory, or a missing one that cannot be created (a
        file on the way, an unwritable folder above it); a write failure (full disk).
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
    _make_output_dir(out)
    with _ownership.claim(out, "-o"):
        return _run_owned(cfg, dataset, out, overwrite=overwrite, resume=resume,
                          progress=progress, threads=threads, log=log, outcome=outcome)


def _nothing_to_resume(paths: RunPaths) -> str:
    """The note of ``--resume`` that starts a new run: which files it looked for (a script
    requeued on a cluster passes ``--resume`` on every start, so the first start is fresh)."""
    if paths.part.exists():            # killed before its first checkpoint
        return (f"note: nothing to resume: {paths.part} has no checkpoint {paths.ckpt.name} "
                f"(stopped before the first one); starting a new run")
    return (f"note: nothing to resume: no interrupted run of {paths.final} ({paths.part.name} "
            f"and {paths.ckpt.name} not found); starting a new run")


def _remove_scratch(paths: RunPaths) -> None:
    """Remove the scratch files a killed writer of this output left (``RUN.h5.part.tmp``, the
    copy or layout being made; ``RUN.h5.ckpt.tmp``, a checkpoint being written): the output is
    owned by this process now, so no live process writes them, and on a full disk they hold
    the space the resume needs."""
    for p in (paths.creating, paths.ckpt.with_name(paths.ckpt.name + ".tmp")):
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            p.unlink()


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
    if plan in ("resume", "finalize"):
        _remove_scratch(paths)
    if plan == "finalize":
        _finalize(paths)
        return out

    order = _config.ladder_order_warning(cfg)
    if order:
        log(f"warning: {order}")
    _stability_guard(cfg, dataset, log)
    state = None
    if plan == "resume":
        states, meta = _ckpt.load_chains(paths.ckpt, SolverState)
        stored = open_run(paths.part)
        check_same_run(cfg, dataset, stored, paths.part)
        _check_checkpoint(cfg, dataset, meta, stored, paths.ckpt, paths.part)
        if len(states) != cfg.dynamics.chains:
            raise CheckpointError(str(paths.ckpt), "meta.chains",
                                  f"holds {len(states)} chains, the config has "
                                  f"dynamics.chains = {cfg.dynamics.chains}")
        want = (cfg.n_particles, dataset.d + 2)
        for k, st in enumerate(states):
            if getattr(st.theta, "shape", None) != want:
                where = "theta" if k == 0 else f"chain{k}.theta"
                raise CheckpointError(str(paths.ckpt), where, f"shape {st.theta.shape}, "
                                                              f"expected {want}")
        state = states[0] if len(states) == 1 else states
        writer = RunWriter(paths.part, mode="a")
        try:
            writer.truncate(states[0].n_frames, states[0].n_observations)
        except BaseException:
            writer.close()
            raise
        unit = integrator_named(cfg.dynamics.integrator).step_unit     # "pass": mala
        log(f"resuming {paths.part} from {unit} {states[0].step}")
    else:
        if resume:
            log(_nothing_to_resume(paths))
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
                              on_checkpoint=save_checkpoint, should_stop=stop, log=log)
            lead = state[0] if isinstance(state, list) else state
            if lead.stage < cfg.schedule.n_stages:
                raise Interrupted(lead.step, str(paths.ckpt),
                                  f"interrupted at "
                                  f"{integrator_named(cfg.dynamics.integrator).step_unit} "
                                  f"{lead.step}; checkpoint "
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
