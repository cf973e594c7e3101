"""Mean-field Langevin particle solver over a temperature ladder (THEORY §2).

``N`` interacting particles ``θ_i = (a_i, w_i, b_i)`` follow the Euler–Maruyama scheme

    θ_i ← θ_i − η ∇_θ Ψ(θ_i; ρ̂_N) + sqrt(2 η τ) ξ_i,

whose stationary law approximates the Gibbs measure ``ρ* ∝ exp(−Ψ/τ)`` of the free energy
``F_τ(ρ) = ½R(ρ) + (λ/2)∫|θ|²dρ + τ∫ρ log ρ`` up to ``O(η)``. The temperatures of a
:class:`solvers.schedule.Schedule` run from hot to cold; each stage starts from the last
particles of the previous one.

:func:`simulate` is the loop alone: it advances the particles from one observation boundary
to the next and yields the state and an :class:`Observation` there. What happens with them
(the run file, checkpoints, signals, a progress bar) is the caller's business
(``meanfield.runner``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from solvers.errors import DivergenceError, UnstableStepError
from solvers.observation import Observation
from solvers.schedule import Schedule
from solvers.stability import STABILITY_LIMIT, data_mode
from solvers.stepper import Stepper


@dataclass
class SolverState:
    """Everything the next step depends on (what a checkpoint stores).

    Attributes
    ----------
    theta : ndarray of shape (N, d+2)
        Particles, rows ``(a, w_1..w_d, b)``.
    step : int
        Global step counter (keys the noise stream).
    stage : int
        Index into the temperature ladder.
    step_in_stage : int
        Steps already done at the current temperature.
    stage_residuals : list of ndarray (n,)
        Residuals observed so far in this stage (for the stationarity statistic).
    stage_previous : list of ndarray (n,)
        Residuals one step before each of those observations (parity test).
    stage_eta_h : list of float
        ``η h`` at each of those observations.
    stage_steps : list of float
        Their global steps.
    stage_regulariser : list of float
        The regulariser at each of those observations (``steps_per_tau = "auto"`` decides
        from these five).
    stage_lengths : list of int
        ``steps_per_tau = "auto"``: the lengths of the stages finished so far
        (:meth:`solvers.schedule.Schedule.with_lengths`).
    n_frames, n_observations : int
        Rows committed to the run file when this state was taken.
    """

    theta: np.ndarray
    step: int = 0
    stage: int = 0
    step_in_stage: int = 0
    stage_residuals: list = field(default_factory=list)
    stage_previous: list = field(default_factory=list)
    stage_eta_h: list = field(default_factory=list)
    stage_steps: list = field(default_factory=list)
    stage_regulariser: list = field(default_factory=list)
    stage_lengths: list = field(default_factory=list)
    n_frames: int = 0
    n_observations: int = 0


def initial_particles(n_particles: int, d: int, init_scale: float, seed: int) -> np.ndarray:
    """i.i.d. ``N(0, init_scale² I_{d+2})`` particles, shape (N, d+2), from ``default_rng``
    seeded with ``(seed, 0x5EED)`` (independent of the noise stream)."""
    rng = np.random.default_rng([seed, 0x5EED])
    return init_scale * rng.standard_normal((n_particles, d + 2))


def initial_state(n_particles: int, d: int, init_scale: float, seed: int) -> SolverState:
    """A fresh :class:`SolverState` at step 0 with :func:`initial_particles`."""
    return SolverState(theta=initial_particles(n_particles, d, init_scale, seed))


def convex_start(X, y, n_particles: int, lam: float, tau: float, seed: int,
                 solution=None) -> np.ndarray:
    """Particles on the rays of the convex ``τ → 0`` solution (``solvers.convex``) with their
    weights and an ``N(0, τ/λ)`` spread at the first temperature ``tau``
    (:func:`solvers.warmstart.convex_particles`), shape (N, d+2). ``solution``: that
    solution when already solved (the chains of a run share it; only the spread differs).
    A solution without a ray (``f = 0`` optimal) gives the spread alone, the free law
    ``N(0, (τ/λ) I)`` (:func:`solvers.warmstart.free_particles`)."""
    from solvers.convex import convex
    from solvers.warmstart import convex_particles, free_particles
    sol = convex(X, y, lam) if solution is None else solution
    if len(sol.weights) == 0:
        d = np.shape(X)[1] if np.ndim(X) == 2 else 1
        return free_particles(n_particles, d + 2, tau=tau, lam=lam, seed=seed)
    return convex_particles(sol.directions, sol.weights, n_particles, tau=tau, lam=lam,
                            seed=seed)


#: A run stops as diverged when the mean squared particle norm exceeds this multiple of
#: :func:`second_moment_scale`.
RUNAWAY_FACTOR = 1e6


def second_moment_scale(lam: float, init_scale: float, taus, y, d: int) -> float:
    """Scale of the mean squared particle norm ``(1/N) Σ|θ_i|²`` a healthy run stays near.

    ``(d+2)(init_scale² + max τ/λ) + mean(y²)/λ``: the initial value, the Ornstein–Uhlenbeck
    second moment of the noise (THEORY §2), and the zero-temperature bound
    ``∫|θ|² = 2‖μ‖_TV ≤ mean(y²)/λ`` (balanced neurons; the convex objective of THEORY §4 at
    ``μ = 0``). A run far above it has left the regime the step size can integrate.
    """
    lam = float(lam)
    return float((d + 2) * (float(init_scale) ** 2 + max(taus) / lam)
                 + np.mean(np.asarray(y, float) ** 2) / lam)


def stationarity(resid_history: list, prefix: list | None = None) -> float:
    """Drift of the time-averaged residuals over the last window, in units of ``f``.

    With the second half of the stage's observations split into two equal windows,
    returns ``n · max_j |mean_2(R_j) − mean_1(R_j)|``; ``nan`` with fewer than 4 observations.
    Near stationarity it is of the order of the thermal fluctuation of ``f``.

    The windows' means come from the running sums ``[0, R_0, R_0 + R_1, …]`` of the history:
    ``prefix``, when given, holds them from earlier calls and is extended here to
    ``len(resid_history) + 1`` entries, so that a call costs ``O(n)``, not ``O(m n)`` (a run
    observes every few steps for millions of steps); without it they are summed afresh.
    """
    m = len(resid_history)
    prefix = [] if prefix is None else prefix
    if not prefix:
        prefix.append(np.zeros(len(resid_history[0]) if m else 0))
    for r in resid_history[len(prefix) - 1:]:
        prefix.append(prefix[-1] + np.asarray(r, dtype=float))
    if m < 4:
        return float("nan")
    h = m // 2
    k = (m - h) // 2
    # k (mean_2 − mean_1) = (S_m − S_{m−k}) − (S_{h+k} − S_h)
    gap = prefix[m] - prefix[m - k]
    gap -= prefix[h + k]
    gap += prefix[h]
    return len(resid_history[0]) * float(np.abs(gap).max()) / k


def move_rates(counts, n_particles: int, nsteps: int, eta: float) -> dict:
    """The ``"mala"`` observables of one observation interval from the move counters
    (``Stepper.counts``, order ``solvers._mala.COUNTS``) of its ``nsteps`` passes.

    Returns
    -------
    dict
        ``acceptance``, ``jump_acceptance`` and ``radial_acceptance`` (shares of the
        Langevin, jump and radial moves accepted, ``nan`` without such moves) and
        ``cell_exchange`` (accepted jumps that changed the particle's activation pattern per
        particle and unit of time ``nsteps · η``; ``nan`` without jump moves) and
        ``exchange_acceptance`` (share of the exchange moves accepted, ``nan`` without them).
    """
    moves, acc, jumps, jacc, jcell, radial, racc, xmoves, xacc = (int(c) for c in counts)
    return {"acceptance": acc / moves if moves else math.nan,
            "jump_acceptance": jacc / jumps if jumps else math.nan,
            "cell_exchange": (jcell / (n_particles * nsteps * eta) if jumps and nsteps
                              else math.nan),
            "radial_acceptance": racc / radial if radial else math.nan,
            "exchange_acceptance": xacc / xmoves if xmoves else math.nan}


def chain_seed(seed: int, chain: int) -> int:
    """The seed of chain ``chain`` of a run of seed ``seed`` (``dynamics.chains``).

    Chain 0 is ``seed`` itself, so that a run of one chain is the run it was before chains
    existed. Chain ``k >= 1`` gets the first 63 bits of NumPy's ``SeedSequence([seed, k])``:
    its noise, minibatches and initial particles are then independent streams of the
    counter-based generator (``solvers._rng``), and no two chains of one run share a seed.

    Returns
    -------
    int
        ``0 <= seed < 2**63``.
    """
    if chain == 0:
        return int(seed)
    word = np.random.SeedSequence([int(seed), int(chain)]).generate_state(1, np.uint64)[0]
    return int(word >> np.uint64(1))


def _parallel_chains(steppers) -> int:
    """How many chains may step at once in threads of this process: those of an integrator
    that is sequential over particles (``"mala"``; its kernel releases the GIL) when numba's
    threading layer is thread-safe, at most ``numba.get_num_threads()``; 1 otherwise (the
    kernels of ``"em"`` and ``"lm"`` already use every thread within one system)."""
    if len(steppers) < 2 or steppers[0].spec.parallel:
        return 1
    import numba
    try:
        layer = numba.threading_layer()
    except ValueError:            # no parallel kernel ran yet: the layer is not chosen
        return 1
    if layer not in ("omp", "tbb"):
        return 1
    return max(1, min(len(steppers), int(numba.get_num_threads())))


def _advance(stepper, theta, tau, step0, nsteps):
    """``nsteps`` steps of one chain from global step ``step0``, the last one separately so
    that the residuals of both parities are seen: ``(code, R_prev)`` (one call where the
    kernel keeps them, :attr:`Stepper.keeps_previous`)."""
    stepper.reset_counts()
    if stepper.keeps_previous and nsteps >= 1:
        code = stepper.advance(theta, tau, step0, nsteps)
        return code, stepper.R_prev.copy()
    code = stepper.advance(theta, tau, step0, nsteps - 1)
    R_prev = stepper.R.copy()
    if code == 0:
        code = stepper.advance(theta, tau, step0 + nsteps - 1, 1)
    return code, R_prev


def simulate(stepper, schedule: Schedule, state, *, init_scale: float,
             stage_done: Callable | None = None) -> Iterator[tuple]:
    """Integrate the ladder of ``schedule`` from ``state``, boundary by boundary.

    Parameters
    ----------
    stepper : Stepper or sequence of Stepper
        The particle stepper (data, ``λ``, ``η``, activation, minibatches, noise key); a
        sequence of ``K`` steppers (one per chain, each with its own seed,
        :func:`chain_seed`) for ``K`` independent particle systems stepped together.
    schedule : Schedule
        The temperature ladder and its observation boundaries.
    state : SolverState or sequence of SolverState
        Where to start (one per stepper): a fresh :func:`initial_state`, or one restored
        from a checkpoint. Updated in place (``theta`` too) and yielded at every boundary.
        The chains share the step counter and the ladder position.
    init_scale : float
        Scale of the initial particles (enters the divergence bound of
        :func:`second_moment_scale`).
    stage_done : callable, optional
        ``steps_per_tau = "auto"`` only: asked where :meth:`Schedule.may_end` allows whether
        the stage may end, with the state (one stepper) or the list of states (a sequence),
        e.g. its stationarity verdict from ``stage_steps``, ``stage_residuals``,
        ``stage_previous``, ``stage_eta_h``, ``stage_regulariser``; a pure function of the
        states, so a resumed run decides the same, and one decision for all chains. The
        lengths decided go to every ``state.stage_lengths``.

    Returns
    -------
    iterator of (state, observation, bool)
        A generator; the loop ends when the last stage is done. Closing it early (a stop
        request) leaves the states at the last boundary reached. With a sequence of
        steppers, ``state`` and ``observation`` are lists (one per chain).

    Yields
    ------
    state : SolverState or list of SolverState
        The state after the boundary; when the boundary ends a stage, ``stage`` already
        points to the next one.
    observation : Observation or list of Observation
        The observables at the boundary.
    snapshot : bool
        Whether the boundary is a snapshot step (the caller may store ``state.theta``).

    Raises
    ------
    DivergenceError
        NaN/Inf in the residuals or particles, or a mean squared norm beyond
        ``RUNAWAY_FACTOR`` times :func:`second_moment_scale` (names the step, ``τ``, the
        chain when there are several, and a likely cause).
    UnstableStepError
        Full batch and ``η h ≥ 2`` at an observation (``solvers.stability``): the step is
        linearly unstable on the data mode. Raised after that observation is yielded. Never
        for ``"mala"``.

    Notes
    -----
    Chains never exchange anything: each one's trajectory is the same whatever the number of
    chains or threads. Chains of ``"mala"`` step in parallel threads
    (:func:`_parallel_chains`).
    """
    one = isinstance(stepper, Stepper)
    steppers = [stepper] if one else list(stepper)
    states = [state] if one else list(state)
    if len(states) != len(steppers) or not steppers:
        raise ValueError(f"{len(steppers)} steppers for {len(states)} states")
    decide = None
    if stage_done is not None:
        decide = (lambda sts: stage_done(sts[0])) if one else stage_done
    loop = _simulate(steppers, schedule, states, init_scale=init_scale, stage_done=decide)
    for sts, obs, snapshot in loop:
        yield (sts[0], obs[0], snapshot) if one else (sts, obs, snapshot)


def _simulate(steppers, schedule, states, *, init_scale, stage_done):
    """:func:`simulate` over lists of steppers and states."""
    for st in states:
        st.theta = np.ascontiguousarray(st.theta, dtype=np.float64)
    lead = steppers[0]
    d, eta, lam = lead.d, lead.eta, lead.lam
    runaway = RUNAWAY_FACTOR * second_moment_scale(lam, init_scale, schedule.taus, lead.y, d)
    full_batch = lead.batch_size == 0
    mala = lead.integrator == "mala"
    K = len(steppers)
    if schedule.auto:
        schedule = schedule.with_lengths(states[0].stage_lengths)
    workers = _parallel_chains(steppers)
    pool = None
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(max_workers=workers)
    try:
        lead_state = states[0]
        while lead_state.stage < schedule.n_stages:
            stage = lead_state.stage
            tau = schedule.taus[stage]
            target = schedule.next_boundary(stage, lead_state.step_in_stage)
            nsteps = target - lead_state.step_in_stage
            step0 = lead_state.step
            jobs = [(s, st.theta, tau, step0, nsteps) for s, st in zip(steppers, states)]
            done_steps = (list(pool.map(lambda a: _advance(*a), jobs)) if pool is not None
                          else [_advance(*a) for a in jobs])
            observations, modes = [], []
            for k, (stp, st, (code, R_prev)) in enumerate(zip(steppers, states, done_steps)):
                obs, mode = _observe(stp, st, code, R_prev, tau, step0, nsteps, target,
                                     runaway=runaway, mala=mala,
                                     chain=(k if K > 1 else None))
                observations.append(obs)
                modes.append(mode)
            snapshot = target in schedule.snapshots(stage)
            done = lead_state.step_in_stage >= schedule.stage_length(stage)
            if not done and stage_done is not None and schedule.may_end(
                    stage, lead_state.step_in_stage):
                done = bool(stage_done(states))
            if done:
                if schedule.auto:
                    schedule = schedule.with_length(stage, lead_state.step_in_stage)
                for st in states:
                    _next_stage(st, schedule.auto)
            yield states, observations, snapshot
            if not mala and full_batch:
                for obs, mode in zip(observations, modes):
                    if obs.eta_lambda_max >= STABILITY_LIMIT:
                        raise UnstableStepError(
                            obs.step, tau,
                            f"unstable step: eta={eta:g} is above the stability limit "
                            f"{mode.largest_stable_eta():.4g} of the data mode (eta*h = "
                            f"{obs.eta_lambda_max:.3g} >= {STABILITY_LIMIT:g}) at tau={tau:g}, "
                            f"step {obs.step}; the predictor oscillates with period 2")
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


def _next_stage(state, auto: bool) -> None:
    """Move ``state`` to the start of the next stage (its stage history emptied)."""
    if auto:
        state.stage_lengths.append(state.step_in_stage)
    state.stage += 1
    state.step_in_stage = 0
    state.stage_residuals = []
    state.stage_previous = []
    state.stage_eta_h = []
    state.stage_steps = []
    state.stage_regulariser = []


def _prefix(state) -> list:
    """The running sums of ``state.stage_residuals`` (:func:`stationarity`), kept on the state
    but not a field of it (a checkpoint does not store them; a resumed run rebuilds them from
    the stored residuals, the same additions in the same order)."""
    cache = state.__dict__.get("_stage_prefix")
    if cache is None or cache[0] is not state.stage_residuals:
        cache = (state.stage_residuals, [])
        state.__dict__["_stage_prefix"] = cache
    return cache[1]


def _in_chain(chain) -> str:
    return "" if chain is None else f" in chain {chain}"


def _observe(stepper, state, code, R_prev, tau, step0, nsteps, target, *, runaway, mala,
             chain):
    """Check one chain after ``nsteps`` steps from ``step0``, record the boundary in its
    state and return ``(Observation, data mode or None)``."""
    theta = state.theta
    n, eta, lam = stepper.n, stepper.eta, stepper.lam
    state.step = step0 + nsteps
    state.step_in_stage = target
    # the sum of squares comes from the stepper's last layout conversion: finite iff every
    # particle is and no square overflowed (code 0)
    msq = stepper.sum_sq / stepper.n_particles if code == 0 else math.nan
    if not math.isfinite(msq):                                  # NaN, Inf or overflow
        raise DivergenceError(
            state.step, tau,
            f"dynamics diverged (NaN/Inf/overflow){_in_chain(chain)} between steps "
            f"{step0} and {state.step} at tau={tau:g}; the step size "
            f"eta={eta:g} is likely too large for this data scale (try eta/2) "
            f"or init_scale too big")
    if msq > runaway:
        raise DivergenceError(
            state.step, tau,
            f"dynamics ran away{_in_chain(chain)} by step {state.step} at tau={tau:g}: "
            f"mean |theta|^2 = "
            f"{msq:.3g} is over {RUNAWAY_FACTOR:.0e} times its expected scale; the step "
            f"size eta={eta:g} is likely too large for this data scale (try eta/2)")
    R = stepper.R.copy()
    mode = None
    if mala:      # exact at any step: no data-mode stability limit, no parity effect
        eta_h = math.nan
        rates = move_rates(stepper.counts, stepper.n_particles, nsteps, eta)
    else:
        mode = data_mode(theta, stepper.X, R, lam, stepper.activation, stepper.sharpness,
                         stepper.cap)
        eta_h = mode.eta_lambda_max(eta)
        rates = {}
    state.stage_residuals.append(R)
    state.stage_previous.append(R_prev)
    state.stage_eta_h.append(eta_h)
    state.stage_steps.append(float(state.step))
    state.stage_regulariser.append(0.5 * lam * msq)
    obs = Observation(step=state.step, time=state.step * eta, stage=state.stage,
                      step_in_stage=state.step_in_stage, tau=tau,
                      risk=n * float(R @ R), regulariser=0.5 * lam * msq,
                      mean_sq_norm=msq,
                      stationarity=stationarity(state.stage_residuals, _prefix(state)),
                      residuals=R, residuals_previous=R_prev, eta_lambda_max=eta_h,
                      **rates)
    return obs, mode
