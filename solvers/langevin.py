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


def convex_start(X, y, n_particles: int, lam: float, tau: float, seed: int) -> np.ndarray:
    """Particles on the rays of the convex ``τ → 0`` solution (``solvers.convex``) with their
    weights and an ``N(0, τ/λ)`` spread at the first temperature ``tau``
    (:func:`solvers.warmstart.convex_particles`), shape (N, d+2)."""
    from solvers.convex import convex
    from solvers.warmstart import convex_particles
    sol = convex(X, y, lam)
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


def stationarity(resid_history: list) -> float:
    """Drift of the time-averaged residuals over the last window, in units of ``f``.

    With the second half of the stage's observations split into two equal windows,
    returns ``n · max_j |mean_2(R_j) − mean_1(R_j)|``; ``nan`` with fewer than 4 observations.
    Near stationarity it is of the order of the thermal fluctuation of ``f``.
    """
    m = len(resid_history)
    if m < 4:
        return float("nan")
    H = np.asarray(resid_history[m // 2:])
    k = H.shape[0] // 2
    n = H.shape[1]
    return float(n * np.max(np.abs(H[-k:].mean(axis=0) - H[:k].mean(axis=0))))


def move_rates(counts, n_particles: int, nsteps: int, eta: float) -> dict:
    """The ``"mala"`` observables of one observation interval from the move counters
    (``Stepper.counts``, order ``solvers._mala.COUNTS``) of its ``nsteps`` passes.

    Returns
    -------
    dict
        ``acceptance`` and ``jump_acceptance`` (shares of the Langevin and jump moves
        accepted, ``nan`` without such moves) and ``cell_exchange`` (accepted jumps that
        changed the particle's activation pattern per particle and unit of time
        ``nsteps · η``; ``nan`` without jump moves).
    """
    moves, acc, jumps, jacc, jcell = (int(c) for c in counts)
    return {"acceptance": acc / moves if moves else math.nan,
            "jump_acceptance": jacc / jumps if jumps else math.nan,
            "cell_exchange": (jcell / (n_particles * nsteps * eta) if jumps and nsteps
                              else math.nan)}


def simulate(stepper: Stepper, schedule: Schedule, state: SolverState, *,
             init_scale: float,
             stage_done: Callable[[SolverState], bool] | None = None,
             ) -> Iterator[tuple[SolverState, Observation, bool]]:
    """Integrate the ladder of ``schedule`` from ``state``, boundary by boundary.

    Parameters
    ----------
    stepper : Stepper
        The particle stepper (data, ``λ``, ``η``, activation, minibatches, noise key).
    schedule : Schedule
        The temperature ladder and its observation boundaries.
    state : SolverState
        Where to start: a fresh :func:`initial_state`, or one restored from a checkpoint.
        Updated in place (``theta`` too) and yielded at every boundary.
    init_scale : float
        Scale of the initial particles (enters the divergence bound of
        :func:`second_moment_scale`).
    stage_done : callable(SolverState) -> bool, optional
        ``steps_per_tau = "auto"`` only: asked where :meth:`Schedule.may_end` allows whether
        the stage may end (e.g. its stationarity verdict from ``stage_steps``,
        ``stage_residuals``, ``stage_previous``, ``stage_eta_h``, ``stage_regulariser``); a pure function of the
        state, so a resumed run decides the same. The lengths decided go to
        ``state.stage_lengths``.

    Returns
    -------
    iterator of (SolverState, Observation, bool)
        A generator; the loop ends when the last stage is done. Closing it early (a stop
        request) leaves ``state`` at the last boundary reached.

    Yields
    ------
    state : SolverState
        The state after the boundary; when the boundary ends a stage, ``stage`` already
        points to the next one.
    observation : Observation
        The observables at the boundary.
    snapshot : bool
        Whether the boundary is a snapshot step (the caller may store ``state.theta``).

    Raises
    ------
    DivergenceError
        NaN/Inf in the residuals or particles, or a mean squared norm beyond
        ``RUNAWAY_FACTOR`` times :func:`second_moment_scale` (names the step, ``τ`` and a
        likely cause).
    UnstableStepError
        Full batch and ``η h ≥ 2`` at an observation (``solvers.stability``): the step is
        linearly unstable on the data mode. Raised after that observation is yielded. Never
        for ``"mala"``.
    """
    theta = np.ascontiguousarray(state.theta, dtype=np.float64)
    state.theta = theta
    n, d, eta, lam = stepper.n, stepper.d, stepper.eta, stepper.lam
    runaway = RUNAWAY_FACTOR * second_moment_scale(lam, init_scale, schedule.taus, stepper.y, d)
    full_batch = stepper.batch_size == 0
    mala = stepper.integrator == "mala"
    if schedule.auto:
        schedule = schedule.with_lengths(state.stage_lengths)
    while state.stage < schedule.n_stages:
        tau = schedule.taus[state.stage]
        target = schedule.next_boundary(state.stage, state.step_in_stage)
        nsteps = target - state.step_in_stage
        stepper.reset_counts()
        # the last step separately: the residuals of both parities are observed
        code = stepper.advance(theta, tau, state.step, nsteps - 1)
        R_prev = stepper.R.copy()
        if code == 0:
            code = stepper.advance(theta, tau, state.step + nsteps - 1, 1)
        state.step += nsteps
        state.step_in_stage = target
        msq = float(np.mean(np.einsum("ij,ij->i", theta, theta))) if code == 0 else math.nan
        if not (math.isfinite(msq) and np.all(np.isfinite(theta))):  # NaN, Inf or overflow
            raise DivergenceError(
                state.step, tau,
                f"dynamics diverged (NaN/Inf/overflow) between steps "
                f"{state.step - nsteps} and {state.step} at tau={tau:g}; the step size "
                f"eta={eta:g} is likely too large for this data scale (try eta/2) "
                f"or init_scale too big")
        if msq > runaway:
            raise DivergenceError(
                state.step, tau,
                f"dynamics ran away by step {state.step} at tau={tau:g}: mean |theta|^2 = "
                f"{msq:.3g} is over {RUNAWAY_FACTOR:.0e} times its expected scale; the step "
                f"size eta={eta:g} is likely too large for this data scale (try eta/2)")
        R = stepper.R.copy()
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
                          risk=float(np.sum((n * R) ** 2) / n), regulariser=0.5 * lam * msq,
                          mean_sq_norm=msq, stationarity=stationarity(state.stage_residuals),
                          residuals=R, residuals_previous=R_prev, eta_lambda_max=eta_h,
                          **rates)
        snapshot = target in schedule.snapshots(state.stage)
        done = state.step_in_stage >= schedule.stage_length(state.stage)
        if not done and stage_done is not None and \
                schedule.may_end(state.stage, state.step_in_stage):
            done = bool(stage_done(state))
        if done:
            if schedule.auto:
                schedule = schedule.with_length(state.stage, state.step_in_stage)
                state.stage_lengths.append(state.step_in_stage)
            state.stage += 1
            state.step_in_stage = 0
            state.stage_residuals = []
            state.stage_previous = []
            state.stage_eta_h = []
            state.stage_steps = []
            state.stage_regulariser = []
        yield state, obs, snapshot
        if not mala and eta_h >= STABILITY_LIMIT and full_batch:
            raise UnstableStepError(
                obs.step, tau,
                f"unstable step: eta={eta:g} is above the stability limit "
                f"{mode.largest_stable_eta():.4g} of the data mode (eta*h = {eta_h:.3g} >= "
                f"{STABILITY_LIMIT:g}) at tau={tau:g}, step {obs.step}; the predictor "
                "oscillates with period 2")
