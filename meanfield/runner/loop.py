"""The loop of a run: the stepper, the compile note, and :func:`integrate` over the ladder of
temperatures (frames, observations, checkpoints, the stop request)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from meanfield import config as _config
from meanfield import data as _data
from meanfield.progress import progress_bar
from meanfield.store import RunWriter
from solvers.langevin import SolverState, chain_seed, convex_start, initial_state, simulate
from solvers.stepper import Stepper


def _stage_stationary(y, X=None, writer: RunWriter | None = None):
    """``stage_done`` of ``steps_per_tau = "auto"``: the stationarity verdict of the stage so
    far, of all chains together, from the solver states' observations
    (``analysis.stationarity.verdict``, with the risk and the regulariser as the report's
    verdict has them) and, given the run's ``writer`` and inputs ``X``, the ray drift between
    the stage's snapshot frames in its second half (the frames committed so far and the
    particles now, which are the frame of this chunk end): the very verdict ``analyze`` and
    ``inspect`` make of the stage once it has ended."""
    import numpy as np

    from analysis.stationarity import stage_observables, verdict
    from analysis.time_average import predictor_from_residuals

    def done(states) -> bool:
        states = states if isinstance(states, (list, tuple)) else [states]
        R = np.asarray([st.stage_residuals for st in states])                  # (K, M, n)
        Rp = np.asarray([st.stage_previous for st in states])
        reg = np.asarray([st.stage_regulariser for st in states])              # (K, M)
        steps = np.asarray(states[0].stage_steps, dtype=np.int64)
        snaps = None
        if writer is not None and X is not None and len(steps):
            stored = writer.stage_frames(states[0].stage, int(steps[len(steps) // 2]))
            if stored is not None:
                snaps = [got + [st.theta.copy()] for got, st in zip(stored, states)]
        return verdict(steps, predictor_from_residuals(R, y),
                       np.asarray([st.stage_eta_h for st in states]),
                       snaps, X, F_previous=predictor_from_residuals(Rp, y),
                       observables=stage_observables(R, reg)).stationary
    return done


def make_stepper(cfg: _config.RunConfig, dataset: _data.Dataset, chain: int = 0) -> Stepper:
    """The particle stepper of chain ``chain`` of ``cfg`` on ``dataset``
    (:class:`solvers.stepper.Stepper`; its seed :func:`solvers.langevin.chain_seed`)."""
    mod, dyn = cfg.model, cfg.dynamics
    return Stepper(dataset.X, dataset.y, mod.n_particles, lam=dyn.lam, eta=dyn.eta,
                   activation=mod.activation, sharpness=mod.sharpness, cap=mod.cap,
                   batch_size=dyn.batch_size, seed=chain_seed(dyn.seed, chain),
                   integrator=dyn.integrator, jumps=dyn.jumps, radial=dyn.radial,
                   fine=dyn.fine, exchange=dyn.exchange)


#: The note of ``model.init = "convex"`` when the convex solution has no ray (docs/cli.md).
NO_RAY_NOTE = ("note: model.init = \"convex\": the tau -> 0 convex solution has no ray (f = 0 "
               "is optimal at lam = {lam:g}), so the particles start from the free law "
               "N(0, (tau/lam) I) at tau = {tau:g}, the data-free Gibbs law of one particle")


def initial_states(cfg: _config.RunConfig, dataset: _data.Dataset,
                   log: Callable[[str], None] | None = None) -> list[SolverState]:
    """The fresh state of every chain of ``cfg`` (``dynamics.chains``) at step 0: particles
    from ``model.init`` keyed by :func:`solvers.langevin.chain_seed` (chain 0 with ``seed``
    itself, as a run of one chain). With ``model.init = "convex"`` and a convex solution
    without a ray, the free law ``N(0, (τ₁/λ) I)`` (:func:`solvers.langevin.convex_start`),
    and :data:`NO_RAY_NOTE` to ``log``."""
    out, solution = [], None
    if cfg.model.init == "convex":          # solved once: the chains differ in their spread
        from solvers.convex import convex
        solution = convex(dataset.X, dataset.y, cfg.dynamics.lam)
        if len(solution.weights) == 0 and log is not None:
            log(NO_RAY_NOTE.format(lam=cfg.dynamics.lam, tau=cfg.schedule.taus[0]))
    for k in range(cfg.dynamics.chains):
        seed = chain_seed(cfg.dynamics.seed, k)
        if solution is not None:
            out.append(SolverState(theta=convex_start(dataset.X, dataset.y, cfg.n_particles,
                                                      cfg.dynamics.lam, cfg.schedule.taus[0],
                                                      seed, solution=solution)))
        else:
            out.append(initial_state(cfg.n_particles, dataset.d, cfg.model.init_scale, seed))
    return out


#: Seconds of kernel preparation after which ``run`` says it is compiling.
COMPILE_NOTE_AFTER = 3.0


#: Seconds between the lines that say the compile goes on (after :data:`COMPILE_NOTE`).
COMPILE_HEARTBEAT = 30.0
#: The line ``run`` prints while it compiles: what, and why now.
COMPILE_NOTE = ("run: compiling {what} (numba; once per installation, the first time a run "
                "needs it; about {seconds} s on an idle 2-core machine)")
#: Seconds the first compile of one kernel variant takes on an idle 2-core machine, by
#: integrator: measured 10.1-11.2 s for the exact sampler and 45 s for Euler-Maruyama, d = 2
#: (``Stepper.prepare``; benchmarks/README.md, "Compile time and input dimension").
COMPILE_SECONDS = {"mala": 15, "em": 50, "lm": 50}


def _warm_up(stepper: Stepper, state: SolverState, progress) -> None:
    """Compile the kernels (or load them from numba's cache) before the progress clock starts,
    so that the first progress line's rate is the stepping rate (it read "about 100 h left" on
    a first run). Only the run's own kernel variant is compiled here; after a first compile
    the other input dimensions' compile in the background once the ladder is done
    (:meth:`solvers.stepper.Stepper.compile_others`). Preparing works on a copy of the particles and
    leaves the run unchanged. When it takes longer than :data:`COMPILE_NOTE_AFTER` seconds and
    progress is shown, one line on stderr says why nothing moves yet and for how long, and a
    line every :data:`COMPILE_HEARTBEAT` seconds after it gives the time so far."""
    import sys
    import time
    done = threading.Event()
    note = None
    if progress is not False:
        t0 = time.monotonic()

        def say():
            if done.wait(COMPILE_NOTE_AFTER):
                return
            what = getattr(stepper, "kernel_name", "the kernels")
            seconds = COMPILE_SECONDS.get(getattr(stepper, "integrator", "em"), 50)
            sys.stderr.write(COMPILE_NOTE.format(what=what, seconds=seconds) + "\n")
            sys.stderr.flush()
            while not done.wait(COMPILE_HEARTBEAT):       # a line now and then: not stuck
                sys.stderr.write(f"run: still compiling, {time.monotonic() - t0:.0f} s so "
                                 "far\n")
                sys.stderr.flush()
        note = threading.Thread(target=say, daemon=True)
        note.start()
    try:
        stepper.prepare(state.theta.copy(), int(state.step))
    finally:
        done.set()
        if note is not None:
            note.join()


def integrate(cfg: _config.RunConfig, dataset: _data.Dataset, writer: RunWriter | None = None,
              state: SolverState | list[SolverState] | None = None,
              progress: bool | None = None,
              on_checkpoint: Callable | None = None,
              should_stop: Callable[[], bool] | None = None,
              stage_done: Callable | None = None,
              log: Callable[[str], None] | None = None) -> SolverState | list[SolverState]:
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
    state : SolverState or list of SolverState, optional
        Resume from this state (one per chain of ``dynamics.chains``) instead of a fresh
        initialisation (:func:`initial_states`).
    progress : bool or None
        Progress on stderr (:func:`meanfield.progress.progress_bar`): ``None`` or ``True``, a
        bar on a terminal and a plain line every 10 s otherwise; ``False``, nothing.
    on_checkpoint : callable, optional
        Called every ``output.checkpoint_every`` steps (at observation boundaries) with the
        state, or the list of states with several chains.
    should_stop : callable() -> bool, optional
        Polled at observation boundaries; when it returns true, ``on_checkpoint`` is called and
        the function returns the current state.
    stage_done : callable -> bool, optional
        ``steps_per_tau = "auto"``: whether a stage may end at a chunk end, given the state
        or the list of states (:func:`solvers.langevin.simulate`); by default the
        stationarity verdict of all chains together.
    log : callable(str), optional
        Receives the one-line notes of a fresh start (:func:`initial_states`).

    Returns
    -------
    SolverState or list of SolverState
        The final state (``stage < n_stages`` when stopped early); with several chains, the
        list of their states (they share ``step`` and ``stage``).

    Raises
    ------
    DivergenceError
        From the solver: NaN/Inf or runaway particles; :class:`solvers.errors.UnstableStepError` when the
        step is unstable on the data mode (after that observation is written).
    """
    schedule = cfg.schedule
    K = cfg.dynamics.chains
    states = (initial_states(cfg, dataset, log) if state is None else
              list(state) if isinstance(state, (list, tuple)) else [state])
    if len(states) != K:
        raise ValueError(f"{len(states)} states for dynamics.chains = {K}")
    lead = states[0]
    ckpt_every = cfg.output.checkpoint_every
    last_ckpt = prev = lead.step
    if stage_done is None and schedule.auto:
        stage_done = _stage_stationary(dataset.y, dataset.X, writer)
    steppers = [make_stepper(cfg, dataset, k) for k in range(K)]
    _warm_up(steppers[0], lead, progress)
    state = lead if K == 1 else states
    loop = simulate(steppers[0] if K == 1 else steppers, schedule, state,
                    init_scale=cfg.model.init_scale, stage_done=stage_done)
    seen = {"step": lead.step, "checked": True}    # the last boundary whose stop was polled
    if hasattr(should_stop, "where"):               # the note of a stop request says where
        should_stop.where = lambda: _stop_point(schedule, lead, seen,
                                                steppers[0].spec.step_unit)
    with progress_bar(schedule.total_steps, "run", steppers[0].spec.step_unit, enabled=progress,
                      initial=lead.step) as bar:
        stage_seen = None
        bar.upper_bound = schedule.auto          # plain lines: "at most ... left"
        for state, obs, snapshot in loop:
            rows = [obs] if K == 1 else obs
            head = rows[0]
            seen.update(step=head.step, checked=False)
            if schedule.auto and head.stage != stage_seen:
                # a stage began: the earlier ones are done, this and the later ones may use
                # their whole budget (the total counted the budget of every stage)
                stage_seen = head.stage
                _retotal(bar, schedule.planned_total(head.stage, prev))
            if writer is not None:
                writer.append_observations([obs])
                for st in states:
                    st.n_observations += 1
                if snapshot:
                    writer.append_frame(lead.theta if K == 1 else [st.theta for st in states],
                                        head.step, head.time, head.tau, head.stage,
                                        head.step_in_stage)
                    for st in states:
                        st.n_frames += 1
            bar.update(head.step - prev)
            bar.set_postfix(tau=f"{head.tau:.1e}", risk=f"{head.risk:.3e}", refresh=False)
            prev = head.step
            stop = should_stop is not None and should_stop()
            seen["checked"] = True
            if on_checkpoint is not None and (stop or lead.step - last_ckpt >= ckpt_every):
                on_checkpoint(state)
                last_ckpt = lead.step
            if stop:
                break
        else:
            if schedule.auto:
                _retotal(bar, bar.n)     # the last stage ended on its verdict: 100 %
    # the ladder is done: a first compile's other input dimensions now compile in the
    # background (while the run stepped, even at nice 19, they slowed it by a third)
    getattr(steppers[0], "compile_others", lambda: None)()
    return state


def _stop_point(schedule, lead, seen: dict, unit: str):
    """Where a stop request made now takes effect: ``(last boundary, stop step, unit,
    observe_every)``, global steps; ``None`` when the ladder is done (nothing is left to stop).

    The request is polled at each boundary the loop yields. A boundary that the solver reached
    but whose poll has not run yet (the chunk just ended) is where the run stops; otherwise it
    stops at the end of the chunk being computed, the next boundary."""
    every = int(schedule.observe_every)
    if lead.step > seen["step"]:            # the chunk ended; its boundary is polled next
        return seen["step"], lead.step, unit, every
    if not seen["checked"]:                 # at a boundary, being polled now
        return lead.step, lead.step, unit, every
    if lead.stage >= schedule.n_stages:
        return None
    sch = schedule.with_lengths(lead.stage_lengths) if schedule.auto else schedule
    target = sch.next_boundary(lead.stage, lead.step_in_stage)
    return lead.step, lead.step + target - lead.step_in_stage, unit, every


def _retotal(bar, total: int) -> None:
    """Set the progress bar's total (auto stage lengths end early) and redraw it."""
    bar.total = int(total)
    refresh = getattr(bar, "refresh", None)
    if refresh is not None:
        refresh()
