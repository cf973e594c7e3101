"""Stationarity verdict of one temperature stage, from its observations (docs/theory.md §2.5).

Pure functions on arrays: the observed predictor ``F`` (M, n) on the training points at steps
``steps`` (M,) of one stage, optionally the stability number ``η h`` at the same steps and the
rays of the stage's snapshots. Only the second half of the stage enters the statistics (the
first half is burn-in after the temperature change).

- **Monte Carlo standard error** of the time-averaged predictor, per training point:
  ``MCSE_j = sqrt(var_j · τ_j / M)`` with ``τ_j`` the integrated autocorrelation time (in
  observations) from Sokal's automatic window (``emcee.autocorr.integrated_time``, ``c = 5``);
  ``M/τ_j`` is the effective sample size.
- **Drift**: the second half split into an early and a late window (equal halves);
  ``drift_z = max_j |mean_late − mean_early| / sqrt(MCSE_early² + MCSE_late²)``.
- **Parity** (the period-2 oscillation of an unstable step): with the predictor ``F'`` observed
  one step before each observation, ``P_t = (−1)^t (F_t − F'_t)`` has mean 0 at stationarity
  and ``2δ`` under an oscillation ``±δ``; ``parity_z = max_j |mean P_j| / MCSE(P_j)``. Without
  ``F'``, observations at even against odd steps, as the drift test (``nan`` when one parity
  is missing).
- **Stability**: the largest ``η h`` observed in the stage (``solvers.stability``); the step is
  unstable at ``η h ≥ 2``.
- **Ray weights**: the weight of the particles in each activation cell and sign (the rays of a
  cell summed, no clustering threshold; the cells that one ray straddles at a data point on
  its kink joined, docs/theory.md §6.6) at consecutive snapshots of the second half; the
  largest change relative to the total ``Σ|c|``.
- **R̂ and ESS** (:mod:`analysis.convergence`, ArviZ): rank-normalised split-R̂ below
  ``RHAT_MAX`` and bulk and tail ESS of at least ``ESS_PER_CHAIN_MIN`` per chain on every
  reported observable (``f(x_j)``, and the risk and regulariser where given). With one chain,
  R̂ within it (the weaker test). This replaces the earlier floor of 20 effective samples.

With ``K`` independent chains (``F`` of shape (K, M, n)) the drift and parity tests run on each
chain at level ``alpha / K`` and report the worst; the standard error is that of the pooled mean.

A stage is *stationary* when none of the tests fails; each failure adds one line to
``reasons``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from analysis import convergence as _convergence
from analysis import time_average as _time_average
from analysis.protocols import RunLike
from analysis.ray_linkage import cell_classes
from analysis.snapshots import coldest
from analysis.ternary import PatternTolerance
from analysis.time_average import stored_predictor

#: Family-wise false-alarm level of the drift and parity tests (Bonferroni over the ``n``
#: training points and the two tests).
ALPHA = 0.01
#: Fewest bulk and tail effective samples per chain, and the largest R̂
#: (:mod:`analysis.convergence`).
MIN_ESS = _convergence.ESS_PER_CHAIN_MIN
RHAT_MAX = _convergence.RHAT_MAX
#: Largest admissible relative change of a ray weight between snapshots.
RAY_DRIFT_MAX = 0.1
#: Stability limit of ``η h`` (``solvers.stability.STABILITY_LIMIT``).
ETA_H_LIMIT = 2.0


@dataclass
class Verdict:
    """The stationarity verdict of one stage (JSON: :meth:`to_dict`).

    Attributes
    ----------
    stationary : bool
    mcse : float
        Largest Monte Carlo standard error of the time-averaged predictor ``f(x_j)`` over the
        second half (units of ``y``).
    drift_z, parity_z : float
        Largest standardised early/late and even/odd differences (``nan``: not testable).
    eta_lambda_max : float
        Largest ``η h`` observed in the stage (``nan``: not recorded).
    ray_drift : float
        Largest relative ray-weight change between snapshots (``nan``: fewer than two
        snapshots with rays).
    ess : float
        Smallest effective sample size over the training points (second half), from the
        integrated autocorrelation time of the MCSE (per chain).
    z_crit : float
        Threshold of the drift and parity tests.
    reasons : list of str
        Why the stage is not stationary (empty when it is).
    acceptance, jump_acceptance, cell_exchange, radial_acceptance, exchange_acceptance : float
        ``integrator = "mala"`` (:func:`run_verdicts` only): the Langevin and jump
        acceptance rates, the mass moved between activation patterns per unit of time, the
        radial and the exchange acceptance rates, averaged over the second half (``nan`` for
        the other integrators or without such moves).
    rhat, ess_bulk, ess_tail : float
        ArviZ's largest rank-normalised split-R̂ and smallest bulk and tail ESS (all chains
        together) over the observables (:mod:`analysis.convergence`).
    rhat_worst, ess_worst : str
        The observables where they were attained (``"f(x_3)"``, ``"risk"``, ...; ``j``
        counts the training points from 0).
    n_chains : int
    rhat_test : str
        ``"between chains"`` or, with one chain, the weaker test within it.
    """

    stationary: bool
    mcse: float
    drift_z: float
    parity_z: float
    eta_lambda_max: float
    ray_drift: float
    ess: float
    z_crit: float
    reasons: list = field(default_factory=list)
    acceptance: float = math.nan
    jump_acceptance: float = math.nan
    cell_exchange: float = math.nan
    radial_acceptance: float = math.nan
    exchange_acceptance: float = math.nan
    rhat: float = math.nan
    ess_bulk: float = math.nan
    ess_tail: float = math.nan
    rhat_worst: str = ""
    ess_worst: str = ""
    n_chains: int = 1
    rhat_test: str = ""

    def to_dict(self) -> dict:
        """Plain JSON types; ``nan`` becomes ``None``."""
        out = {}
        for k, v in asdict(self).items():
            out[k] = None if isinstance(v, float) and not math.isfinite(v) else v
        return out


def integrated_time(F) -> np.ndarray:
    """Integrated autocorrelation time, in observations, of each column of ``F`` (M, n) or of
    a series (M,): :func:`analysis.time_average.integrated_time` per column, shape (n,)."""
    F = np.asarray(F, dtype=float)
    return _time_average.integrated_time(F[:, None] if F.ndim == 1 else F)


def mcse(F) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo standard error of the column means of ``F`` (M, n) and the effective
    sample sizes: ``(sqrt(var · τ / M), M / τ)``, each of shape (n,)
    (:func:`analysis.time_average.mean_and_mcse`; ``nan`` standard errors from one sample)."""
    F = np.asarray(F, dtype=float)
    M = F.shape[0]
    _, se, tau = _time_average.mean_and_mcse(F)
    return (se if M > 1 else np.full(F.shape[1], np.nan)), M / tau


def _z(A, B) -> tuple[float, float]:
    """Largest standardised difference of column means of ``B`` and ``A``, and the smallest
    effective sample size of the two."""
    if len(A) < 2 or len(B) < 2:
        return math.nan, 0.0
    sa, ea = mcse(A)
    sb, eb = mcse(B)
    den = np.sqrt(sa ** 2 + sb ** 2)
    diff = np.abs(B.mean(axis=0) - A.mean(axis=0))
    z = np.where(den > 0, diff / np.where(den > 0, den, 1.0), np.where(diff > 0, np.inf, 0.0))
    return float(np.max(z)), float(min(np.min(ea), np.min(eb)))


def z_critical(n: int, alpha: float = ALPHA, ess: float = math.inf) -> float:
    """Two-sided threshold of the drift and parity tests: Bonferroni over ``n`` points and
    both tests at family-wise level ``alpha``; Student's ``t`` with ``ess − 1`` degrees of
    freedom when the standard errors rest on ``ess`` effective samples (normal for
    ``ess = inf``)."""
    q = alpha / (4 * max(1, n))
    if not math.isfinite(ess):
        return float(norm.isf(q))
    return float(student_t.isf(q, max(1.0, ess - 1.0)))


def ray_drift(snapshots, X) -> float:
    """Largest relative change of a ray weight between consecutive snapshots, with the rays
    summed per activation cell and the cells that one ray straddles joined.

    The classes are those of the pooled particles of all snapshots
    (:func:`analysis.ray_linkage.cell_classes`, the tolerances of :mod:`analysis.ternary`):
    a ray whose kink passes through a data point has particles on both sides of the point's
    cell boundary, and its mass moving between the two sides is not a change of its weight
    (docs/theory.md §2.5, §6.6). Pooling gives every snapshot the same classes.

    Parameters
    ----------
    snapshots : list of ndarray (N, d+2)
        Particles of the stage's snapshots in time order.
    X : ndarray (n, d)

    Returns
    -------
    float
        ``max_class |Δc| / Σ|c|`` over consecutive pairs; ``nan`` with fewer than two.
    """
    if len(snapshots) < 2:
        return math.nan
    snaps = [np.asarray(t, dtype=float) for t in snapshots]
    key = cell_classes(np.vstack(snaps), np.asarray(X, dtype=float), PatternTolerance())
    ends = np.cumsum([0] + [len(t) for t in snaps])
    size = int(key.max()) + 1
    ws = [np.bincount(key[ends[i]:ends[i + 1]], minlength=size,
                      weights=t[:, 0] * np.linalg.norm(t[:, 1:], axis=1) / len(t))
          for i, t in enumerate(snaps)]
    worst = math.nan
    for c0, c1 in itertools.pairwise(ws):
        total = max(np.abs(c0).sum(), np.abs(c1).sum())
        if total <= 0:
            continue
        rel = float(np.max(np.abs(c0 - c1)) / total)
        worst = rel if not worst >= rel else worst
    return worst


def _chain_tests(H, hs, Hp):
    """Standard errors, effective sample sizes, drift and parity statistics of one chain's
    second half ``H`` (M', n) at steps ``hs``; ``Hp`` the predictor one step earlier or
    ``None``. Returns ``(se, ess, drift_z, drift_ess, parity_z)``."""
    se, ess = mcse(H)
    k = len(H) // 2
    dz, dess = _z(H[:k], H[k:])
    if Hp is not None:
        P = np.where(hs % 2 == 0, 1.0, -1.0)[:, None] * (H - Hp)
        pse, _ = mcse(P)
        pm = np.abs(P.mean(axis=0))
        pz = float(np.max(np.where(pse > 0, pm / np.where(pse > 0, pse, 1.0),
                                   np.where(pm > 0, np.inf, 0.0))))
    else:
        even, odd = hs % 2 == 0, hs % 2 == 1
        pz = _z(H[even], H[odd])[0] if even.sum() >= 2 and odd.sum() >= 2 else math.nan
    return se, ess, dz, dess, pz


def verdict(steps, F, eta_h=None, snapshots=None, X=None, F_previous=None, *,
            observables=None, alpha: float = ALPHA, min_ess: float = MIN_ESS,
            rhat_max: float = RHAT_MAX, ray_drift_max: float = RAY_DRIFT_MAX) -> Verdict:
    """Stationarity verdict of one stage.

    Parameters
    ----------
    steps : array-like of int, shape (M,)
        Global steps of the stage's observations, increasing (the same for every chain).
    F : array-like, shape (M, n) or (K, M, n)
        Predictor on the training points at those steps, of one chain or of ``K``
        independent chains.
    eta_h : array-like, shape (M,) or (K, M), optional
        Stability number ``η h`` at those steps (``solvers.stability``).
    snapshots : list of ndarray (N, d+2), optional
        Particles of the stage's snapshots in its second half (:func:`ray_drift`); with
        ``K`` chains, a list of ``K`` such lists (the largest drift of a chain counts).
    X : ndarray (n, d), optional
        Training inputs (needed with ``snapshots``).
    F_previous : array-like, shape of ``F``, optional
        Predictor one step before each observation (the parity test).
    observables : mapping of str to array-like of shape (M,) or (K, M), optional
        Further reported quantities for the R̂/ESS test (``"risk"``, ``"regulariser"``);
        the predictor's columns enter as ``"f(x_j)"`` always.
    alpha, min_ess, rhat_max, ray_drift_max : float
        Thresholds (module constants by default; ``min_ess`` is per chain).

    Returns
    -------
    Verdict

    Raises
    ------
    ValueError
        ``F``, ``F_previous`` or an observable not of the shapes above.
    """
    steps = np.asarray(steps, dtype=np.int64)
    F = np.asarray(F, dtype=float)
    if F.ndim == 1:
        F = F[:, None]
    if F.ndim == 2:
        F = F[None]
    if F.ndim != 3 or F.shape[1] != len(steps):
        raise ValueError(f"F: expected shape (M, n) or (K, M, n) with M = {len(steps)} steps, "
                         f"got {F.shape}")
    K, M, n = F.shape
    zc = z_critical(n, alpha / K)
    reasons = []
    eh = math.nan
    if eta_h is not None and np.size(eta_h):
        eh_arr = np.asarray(eta_h, dtype=float)
        eh = float(np.nanmax(eh_arr)) if np.any(np.isfinite(eh_arr)) else math.nan
        if eh >= ETA_H_LIMIT:
            reasons.append(f"unstable step: eta*h = {eh:.3g} >= {ETA_H_LIMIT:g} (period-2 "
                           "oscillation)")
    H = F[:, M // 2:]
    hs = steps[M // 2:]
    if H.shape[1] < 8:
        reasons.append(f"too few observations ({M}) for a verdict")
        return Verdict(False, math.nan, math.nan, math.nan, eh, math.nan, 0.0, zc, reasons,
                       n_chains=K)
    Hp = (None if F_previous is None else
          np.asarray(F_previous, dtype=float).reshape(F.shape)[:, M // 2:])
    per = [_chain_tests(H[c], hs, None if Hp is None else Hp[c]) for c in range(K)]
    se = np.sqrt(sum(p[0] ** 2 for p in per)) / K          # of the pooled mean
    ess = min(float(np.min(p[1])) for p in per)
    dz = max(p[2] for p in per)
    dess = min(p[3] for p in per)
    pzs = [p[4] for p in per if math.isfinite(p[4])]
    pz = max(pzs) if pzs else math.nan
    zc = z_critical(n, alpha / K, max(dess, 2.0))
    series = {f"f(x_{j})": H[:, :, j] for j in range(n)}
    for name, v in (observables or {}).items():
        v = np.asarray(v, dtype=float).reshape(K, M)
        series[name] = v[:, M // 2:]
    cv = _convergence.assess(series, rhat_max=rhat_max, ess_per_chain_min=min_ess)
    reasons.extend(cv.reasons)
    if dz > zc:
        reasons.append(f"drift: late and early windows differ by {dz:.3g} standard errors "
                       f"(> {zc:.3g})")
    if pz > zc:
        reasons.append(f"parity: even and odd steps differ by {pz:.3g} standard errors "
                       f"(> {zc:.3g}; period-2 oscillation)")
    rd = _ray_drift_of_chains(snapshots, X)
    if rd > ray_drift_max:
        reasons.append(f"ray weights drift by {rd:.3g} of the total between snapshots "
                       f"(> {ray_drift_max:g})")
    return Verdict(not reasons, float(np.max(se)), dz, pz, eh, rd, ess, zc, reasons,
                   rhat=cv.rhat, ess_bulk=cv.ess_bulk, ess_tail=cv.ess_tail,
                   rhat_worst=cv.rhat_worst, ess_worst=cv.ess_worst, n_chains=K,
                   rhat_test=cv.test)


def _ray_drift_of_chains(snapshots, X) -> float:
    """:func:`ray_drift` of one chain's snapshots, or the largest of several chains' (a list
    of lists); ``nan`` when no chain has two snapshots."""
    if snapshots is None or not len(snapshots):
        return math.nan
    per = snapshots if isinstance(snapshots[0], (list, tuple)) else [snapshots]
    drifts = [ray_drift(s, X) for s in per if len(s) > 1]
    drifts = [v for v in drifts if math.isfinite(v)]
    return max(drifts) if drifts else math.nan


def stage_observables(residuals, regulariser) -> dict:
    """The scalar observables of the R̂/ESS test besides ``f(x_j)``: ``{"risk", "regulariser"}``
    from the scaled residuals ``(f(x_j) − y_j)/n`` (..., M, n) and the regulariser (..., M) of
    the observations (the risk as ``solvers.langevin`` records it, ``(1/n) Σ_j (n R_j)²``)."""
    R = np.asarray(residuals, dtype=float)
    n = R.shape[-1]
    return {"risk": np.sum((n * R) ** 2, axis=-1) / n,
            "regulariser": np.asarray(regulariser, dtype=float)}


#: The ``"mala"`` observables a verdict carries (means over the second half of the stage).
MOVE_OBSERVABLES = ("acceptance", "jump_acceptance", "cell_exchange", "radial_acceptance",
                    "exchange_acceptance")


def run_verdicts(run: RunLike, **kw) -> list[Verdict]:
    """:func:`verdict` of every stage of a run file.

    Uses the predictor ``y + n R`` from the ``residuals`` observable
    (:func:`analysis.time_average.stored_predictor`), the risk and the regulariser
    (:func:`stage_observables`), ``residuals_previous`` and ``eta_lambda_max``
    when the file has them, and the snapshot frames of the stage's second half; the
    observations and frames of a stage are those the run file places in it
    (``run.stage_observations(s)``, ``run.stage_frames(s)`` of :class:`meanfield.store.Run`),
    never told by temperature. A run of several chains (``dynamics.chains``) is judged on
    all of them together: split-R̂ between chains, ESS per chain, the drift and parity tests
    of every chain, the largest ray drift. ``kw`` go to :func:`verdict`.

    Returns
    -------
    list of Verdict
        One per ladder stage (a stage without observations: not stationary, "not reached").
    """
    chains = _time_average.chains_of(run)
    obs = run.observables
    n = run.n
    steps_all = np.asarray(obs["residuals"]["step"])

    def stacked(get):
        return np.asarray([get(c) for c in chains], dtype=float)        # (K, M, ...)
    R_all = stacked(lambda c: c.observables["residuals"]["value"])
    F_all = stacked(stored_predictor)
    reg_all = stacked(lambda c: c.observables["regulariser"]["value"])
    Fp_all = (stacked(lambda c: stored_predictor(c, "residuals_previous"))
              if "residuals_previous" in obs else None)
    eh_all = (stacked(lambda c: c.observables["eta_lambda_max"]["value"])
              if "eta_lambda_max" in obs else None)
    frame_step = np.asarray(run.frame_step)
    sch = run.schedule
    budget = int(sch.max_steps_per_tau)
    out = []
    for s in range(sch.n_stages):
        sel = run.stage_observations(s)
        if not np.any(sel):
            out.append(Verdict(False, math.nan, math.nan, math.nan, math.nan, math.nan, 0.0,
                               z_critical(n), ["stage not reached"], n_chains=len(chains)))
            continue
        steps = steps_all[sel]
        mid = steps[len(steps) // 2]
        frames = [int(k) for k in run.stage_frames(s) if frame_step[k] >= mid]
        snaps = ([[c.frame(k) for k in frames] for c in chains] if len(frames) > 1
                 else None)
        v = verdict(steps, F_all[:, sel], None if eh_all is None else eh_all[:, sel],
                    snaps, run.X, None if Fp_all is None else Fp_all[:, sel],
                    observables=stage_observables(R_all[:, sel], reg_all[:, sel]), **kw)
        for name in MOVE_OBSERVABLES:
            if name in obs:
                vals = stacked(lambda c, key=name: c.observables[key]["value"])[:, sel]
                vals = vals[:, len(steps) // 2:]
                if np.any(np.isfinite(vals)):
                    setattr(v, name, float(np.nanmean(vals)))
        if sch.auto and not v.stationary and run.steps_run(s) >= budget:
            v.reasons.append(f"budget spent: max_steps_per_tau = {budget} steps run")
        out.append(v)
    return out


#: What a report shows instead of a result measured at a stage that is not stationary.
NOT_STATIONARY = "not stationary"
#: Theorem 6 on no rays at all: nothing is checked.
VACUOUS = "vacuous"
_THEOREM6_CLAIMS = ("distinct", "antichain", "at_most_two_per_binary")


def theorem6_status(checks: dict | None, n_rays: int, stationary) -> dict | None:
    """The [LJM26] Theorem 6 block of a report for one stage.

    ``status`` is ``"not stationary"`` (stage judged not stationary: the claims are replaced by
    that string, the measured checks kept under ``measured``), ``"vacuous"`` (no rays: every
    claim is ``"vacuous"``, never true) or ``"checked"`` (the checks as measured).
    """
    if checks is None:
        return None
    out = dict(checks)
    if stationary is False:
        out = {k: v for k, v in checks.items() if k not in _THEOREM6_CLAIMS}
        out.update({k: NOT_STATIONARY for k in _THEOREM6_CLAIMS if k in checks})
        out["measured"] = {k: checks[k] for k in _THEOREM6_CLAIMS if k in checks}
        out["status"] = NOT_STATIONARY
    elif n_rays == 0:
        out.update({k: VACUOUS for k in _THEOREM6_CLAIMS if k in checks})
        out["status"] = VACUOUS
    else:
        out["status"] = "checked"
    return out


#: Ladder-row keys of :func:`annotate_report` and the :class:`Verdict` fields they copy.
CONVERGENCE_COLUMNS = {"rhat": "rhat", "ess_bulk": "ess_bulk", "ess_tail": "ess_tail",
                       "rhat_worst": "rhat_worst", "ess_worst": "ess_worst",
                       "n_chains": "n_chains"}


def stage_verdict(verdicts: list, stage: int) -> tuple[bool | None, dict | None]:
    """``(stationary, verdict document)`` of ladder stage ``stage`` from :func:`run_verdicts`
    (``verdicts[s]`` is the verdict of stage ``s``): ``(None, None)`` when the run file has no
    observations of the stage."""
    v = verdicts[stage] if 0 <= stage < len(verdicts) else None
    if v is None or v.reasons == ["stage not reached"]:
        return None, None
    return bool(v.stationary), v.to_dict()


def annotate_report(rep: dict, verdicts: list) -> dict:
    """Put the stage verdicts into a report document (``meanfield analyze --json``), in place.

    ``verdicts[s]`` is the verdict of stage ``s``; a row or snapshot takes that of its
    ``stage`` (:func:`stage_verdict`). Every ``ladder`` row has ``stationary`` (true, false, or
    null when the run file has no observations of the stage) and ``stationarity``
    (:meth:`Verdict.to_dict`), as :class:`analysis.run_analysis.LadderRow` carries them, and
    gains its R̂/ESS columns (:data:`CONVERGENCE_COLUMNS`: ``rhat``, ``ess_bulk``,
    ``ess_tail``, ``rhat_worst``, ``ess_worst``, ``n_chains``); its ``J`` and ``K`` stay the
    measured integers. Every snapshot gains ``stationary``; the ``theorem6`` block of the
    coldest snapshot and of every snapshot goes through :func:`theorem6_status`.
    """
    for row in rep.get("ladder", []):
        st, doc = stage_verdict(verdicts, row["stage"])
        row["stationary"], row["stationarity"] = st, doc
        for k in CONVERGENCE_COLUMNS:
            row[k] = None if doc is None else doc[CONVERGENCE_COLUMNS[k]]
    for snap in rep.get("snapshots", []):
        st, _ = stage_verdict(verdicts, snap["stage"])
        snap["stationary"] = st
        snap["theorem6"] = theorem6_status(snap.get("theorem6"), snap.get("n_rays", 0), st)
    snaps = rep.get("snapshots", [])
    if rep.get("theorem6") is not None and snaps:
        last = coldest(snaps)
        rep["theorem6"] = theorem6_status(rep["theorem6"], last.get("n_rays", 0),
                                          last["stationary"])
    return rep
