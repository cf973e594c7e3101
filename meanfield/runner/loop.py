"""The loop of a run: the stepper, the compile note, and :func:`integrate` over the ladder of
temperatures (frames, observations, checkpoints, the stop request)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from meanfield import config as _config
from meanfield import data as _data
from meanfield.progress import progress_bar
from meanfield.store import RunWriter
from solvers.langevin import SolverState, convex_start, initial_state, simulate
from solvers.stepper import Stepper


def _stage_stationary(y):
    """``stage_done`` of ``steps_per_tau = "auto"``: the stationarity verdict of the stage so
    far from the solver state's observations (``analysis.stationarity.verdict``, with the
    risk and the regulariser as the report's verdict has them)."""
    import numpy as np

    from analysis.stationarity import stage_observables, verdict
    from analysis.time_average import predictor_from_residuals

    def done(state) -> bool:
        R = np.asarray(state.stage_residuals)
        return verdict(np.asarray(state.stage_steps, dtype=np.int64),
                       predictor_from_residuals(R, y), np.asarray(state.stage_eta_h),
                       F_previous=predictor_from_residuals(state.stage_previous, y),
                       observables=stage_observables(R, state.stage_regulariser)).stationary
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
        stage_done = _stage_stationary(dataset.y)
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
