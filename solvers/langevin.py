"""Mean-field Langevin particle solver over a temperature ladder (THEORY §2).

``N`` interacting particles ``θ_i = (a_i, w_i, b_i)`` follow the Euler–Maruyama scheme

    θ_i ← θ_i − η ∇_θ Ψ(θ_i; ρ̂_N) + sqrt(2 η τ) ξ_i,

whose stationary law approximates the Gibbs measure ``ρ* ∝ exp(−Ψ/τ)`` of the free energy
``F_τ(ρ) = ½R(ρ) + (λ/2)∫|θ|²dρ + τ∫ρ log ρ`` up to ``O(η)``. The temperatures ``taus`` run from
hot to cold; each stage starts from the last particles of the previous one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from solvers.errors import DivergenceError, UnstableStepError
from solvers.stability import STABILITY_LIMIT, data_mode
from solvers.stepper import from_config as _stepper_from_config


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
        Their global steps (``steps_per_tau = "auto"`` decides from these four).
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
    n_frames: int = 0
    n_observations: int = 0


def initial_particles(n_particles: int, d: int, init_scale: float, seed: int) -> np.ndarray:
    """i.i.d. ``N(0, init_scale² I_{d+2})`` particles, shape (N, d+2), from ``default_rng``
    seeded with ``(seed, 0x5EED)`` (independent of the noise stream)."""
    rng = np.random.default_rng([seed, 0x5EED])
    return init_scale * rng.standard_normal((n_particles, d + 2))


def snapshot_steps(steps_per_tau: int, snapshots_per_tau: int) -> list[int]:
    """Steps within a stage (1-based counts) after which a snapshot frame is written: evenly
    spaced over the second half of the stage, the last at its end."""
    S = snapshots_per_tau
    if S == 1:
        return [steps_per_tau]
    half = steps_per_tau // 2
    return sorted({half + int(round((steps_per_tau - half) * (s + 1) / S)) for s in range(S)})


#: ``steps_per_tau = "auto"``: a stage is cut into this many chunks of
#: ``max_steps_per_tau // AUTO_CHUNKS`` steps (the last takes the remainder).
AUTO_CHUNKS = 8


def stage_plan(cfg) -> tuple[int, list[int], bool]:
    """``(T, snapshot steps, auto)``: the longest stage, the steps within a stage (1-based
    counts) after which a frame is written, and whether stages end early when stationary.

    Fixed ``steps_per_tau``: ``T`` steps, snapshots by :func:`snapshot_steps`.
    ``steps_per_tau = "auto"``: ``T = max_steps_per_tau`` cut into :data:`AUTO_CHUNKS` chunks;
    a frame at the end of every chunk; from the second chunk on, the stage ends at a chunk end
    as soon as ``simulate``'s ``stage_done`` says so (the runner asks the stationarity
    verdict).
    """
    dyn = cfg.dynamics
    if dyn["steps_per_tau"] == "auto":
        T = int(dyn["max_steps_per_tau"])
        c = T // AUTO_CHUNKS
        return T, [c * k for k in range(1, AUTO_CHUNKS)] + [T], True
    T = int(dyn["steps_per_tau"])
    return T, snapshot_steps(T, int(cfg.output["snapshots_per_tau"])), False


def row_counts(cfg) -> tuple[int, int]:
    """Rows :func:`simulate` writes at most for ``cfg``: ``(n_frames, n_observations)``.

    Per temperature an observation is written at every multiple of ``observe_every``, at every
    snapshot step and at the end of the stage; frames at the snapshot steps (:func:`stage_plan`).
    The run file allocates these rows up front (``meanfield.store.RunWriter``); with
    ``steps_per_tau = "auto"`` a stage that ends early leaves its rows unused.
    """
    T, snaps, _ = stage_plan(cfg)
    every = int(cfg.output["observe_every"])
    extra = len({s for s in snaps + [T] if s % every})
    n_taus = len(cfg.taus)
    return len(snaps) * n_taus, (T // every + extra) * n_taus


#: A run stops as diverged when the mean squared particle norm exceeds this multiple of
#: :func:`second_moment_scale`.
RUNAWAY_FACTOR = 1e6


def second_moment_scale(cfg, y, d) -> float:
    """Scale of the mean squared particle norm ``(1/N) Σ|θ_i|²`` a healthy run stays near.

    ``(d+2)(init_scale² + max τ/λ) + mean(y²)/λ``: the initial value, the Ornstein–Uhlenbeck
    second moment of the noise (THEORY §2), and the zero-temperature bound
    ``∫|θ|² = 2‖μ‖_TV ≤ mean(y²)/λ`` (balanced neurons; the convex objective of THEORY §4 at
    ``μ = 0``). A run far above it has left the regime the step size can integrate.
    """
    lam = float(cfg.dynamics["lam"])
    return float((d + 2) * (float(cfg.model["init_scale"]) ** 2 + max(cfg.taus) / lam)
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


def simulate(cfg: Any, dataset: Any, writer: Any = None, state: SolverState | None = None,
             progress: bool | None = None,
             on_checkpoint: Callable[[SolverState], None] | None = None,
             should_stop: Callable[[], bool] | None = None,
             stage_done: Callable[[SolverState], bool] | None = None) -> SolverState:
    """Run the temperature ladder of ``cfg`` on ``dataset``.

    Parameters
    ----------
    cfg : meanfield.config.RunConfig
    dataset : meanfield.data.Dataset
    writer : meanfield.store.RunWriter, optional
        Receives observations every ``observe_every`` steps and snapshot frames.
    state : SolverState, optional
        Resume from this state instead of a fresh initialisation.
    progress : bool or None
        Show a tqdm bar (``None``: only on a terminal).
    on_checkpoint : callable(SolverState), optional
        Called every ``output.checkpoint_every`` steps (at observation boundaries).
    should_stop : callable() -> bool, optional
        Polled at observation boundaries; when it returns true, ``on_checkpoint`` is called and
        the function returns the current state.
    stage_done : callable(SolverState) -> bool, optional
        ``steps_per_tau = "auto"`` only: asked at every chunk end from the second on whether
        the stage may end (e.g. its stationarity verdict from ``stage_steps``,
        ``stage_residuals``, ``stage_previous``, ``stage_eta_h``); a pure function of the
        state, so a resumed run decides the same.

    Returns
    -------
    SolverState
        The final state.

    Raises
    ------
    DivergenceError
        NaN/Inf in the residuals or particles (names the step, τ and a likely cause).
    UnstableStepError
        Full batch and ``η h ≥ 2`` at an observation (``solvers.stability``): the step is
        linearly unstable on the data mode. The observation is written first.
    """
    X = np.ascontiguousarray(dataset.X, dtype=np.float64)
    y = np.ascontiguousarray(dataset.y, dtype=np.float64)
    n, d = X.shape
    N = cfg.n_particles
    dyn, out, mod = cfg.dynamics, cfg.output, cfg.model
    lam, eta, seed = dyn["lam"], dyn["eta"], int(dyn["seed"])
    taus = cfg.taus
    T, snaps, auto = stage_plan(cfg)
    obs_every = int(out["observe_every"])
    ckpt_every = int(out.get("checkpoint_every", 0)) or None

    if state is None:
        state = SolverState(theta=initial_particles(N, d, mod["init_scale"], seed))
    theta = np.ascontiguousarray(state.theta, dtype=np.float64)
    state.theta = theta
    stepper = _stepper_from_config(cfg, X, y)
    total = T * len(taus)
    disable = {True: False, False: True, None: None}[progress]
    bar = tqdm(total=total, initial=state.stage * T + state.step_in_stage, unit="step",
               disable=disable, dynamic_ncols=True, mininterval=0.5)
    last_ckpt = state.step
    runaway = RUNAWAY_FACTOR * second_moment_scale(cfg, y, d)
    full_batch = int(dyn.get("batch_size", 0)) == 0
    try:
        while state.stage < len(taus):
            tau = taus[state.stage]
            # next boundary: observation or snapshot
            nxt_obs = (state.step_in_stage // obs_every + 1) * obs_every
            nxt_snap = min((s for s in snaps if s > state.step_in_stage), default=T)
            target = min(nxt_obs, nxt_snap, T)
            nsteps = target - state.step_in_stage
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
            state.stage_residuals.append(R)
            state.stage_previous.append(R_prev)
            state.stage_steps.append(float(state.step))
            mode = data_mode(theta, X, R, lam, mod["activation"],
                             float(mod.get("sharpness", 10.0)), float(mod.get("cap", 3.0)))
            eta_h = mode.eta_lambda_max(eta)
            state.stage_eta_h.append(eta_h)
            row = {"step": state.step, "time": state.step * eta, "tau": tau,
                   "risk": float(np.sum((n * R) ** 2) / n), "regulariser": 0.5 * lam * msq,
                   "mean_sq_norm": msq, "stationarity": stationarity(state.stage_residuals),
                   "residuals": R, "residuals_previous": R_prev, "eta_lambda_max": eta_h}
            if writer is not None:
                writer.append_observations([row])
                state.n_observations += 1
                if target in snaps:
                    writer.append_frame(theta, state.step, state.step * eta, tau)
                    state.n_frames += 1
            if eta_h >= STABILITY_LIMIT and full_batch:
                raise UnstableStepError(
                    state.step, tau,
                    f"unstable step: eta={eta:g} is above the stability limit "
                    f"{mode.largest_stable_eta():.4g} of the data mode (eta*h = {eta_h:.3g} >= "
                    f"{STABILITY_LIMIT:g}) at tau={tau:g}, step {state.step}; the predictor "
                    "oscillates with period 2")
            bar.update(nsteps)
            bar.set_postfix(tau=f"{tau:.1e}", risk=f"{row['risk']:.3e}", refresh=False)
            done = state.step_in_stage >= T
            if auto and not done and target in snaps and target >= snaps[1] and \
                    stage_done is not None:
                done = bool(stage_done(state))
            if done:
                bar.update(T - state.step_in_stage)
                state.stage += 1
                state.step_in_stage = 0
                state.stage_residuals = []
                state.stage_previous = []
                state.stage_eta_h = []
                state.stage_steps = []
            stop = should_stop is not None and should_stop()
            if on_checkpoint is not None and (stop or (ckpt_every and
                                                       state.step - last_ckpt >= ckpt_every)):
                on_checkpoint(state)
                last_ckpt = state.step
            if stop:
                return state
    finally:
        bar.close()
    return state
