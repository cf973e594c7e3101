"""Time averages of a run's stored observables."""

from __future__ import annotations

import math

import numpy as np

from analysis.protocols import RunLike

#: Fewest samples of a series whose integrated autocorrelation time :func:`integrated_time`
#: estimates; below it the time is taken as 1 (uncorrelated samples), which understates the
#: MCSE of a correlated series, so that an MCSE from fewer observations is no estimate
#: (``analysis.references.gibbs_allowance``: "too few observations"). The stationarity
#: verdict asks the same of the second half of a stage (docs/theory.md §2.5).
MIN_TAU_SAMPLES = 8


def integrated_time(x):
    """Integrated autocorrelation time, in samples (``>= 1``), of a 1-D series: Sokal's
    automatic window ``c = 5`` (``emcee.autocorr.integrated_time``). A constant series, or one
    of fewer than :data:`MIN_TAU_SAMPLES` samples, gives 1; never below 1 (antithetic series
    are not credited with more samples than they have). A 2-D ``x`` (M, n) gives the times of
    its columns, (n,)."""
    from emcee.autocorr import integrated_time as _it
    x = np.asarray(x, dtype=float)
    if x.ndim == 2:
        return np.array([integrated_time(x[:, j]) for j in range(x.shape[1])])
    if x.size < MIN_TAU_SAMPLES or not np.ptp(x) > 0:
        return 1.0
    with np.errstate(all="ignore"):
        t = float(_it(x, c=5, tol=0, quiet=True)[0])
    return max(1.0, t) if math.isfinite(t) else float(x.size)


def mean_and_mcse(F):
    """Column means of a series ``F`` (M, n), their Monte Carlo standard errors
    ``sqrt(var · τ_int / M)`` and the integrated autocorrelation times ``τ_int`` (n,)."""
    F = np.asarray(F, dtype=float)
    M = F.shape[0]
    tau = integrated_time(F)
    var = F.var(axis=0, ddof=1) if M > 1 else np.zeros(F.shape[1])
    return F.mean(axis=0), np.sqrt(var * tau / max(M, 1)), tau


def predictor_from_residuals(R, y) -> np.ndarray:
    """The predictor on the training points, ``f_j = y_j + n R_j``, from scaled residuals
    ``R_j = (f(x_j) − y_j)/n`` (what a run stores and a solver state keeps, docs/format.md).

    The one place the ``1/n`` scaling of the stored residuals is undone.

    Parameters
    ----------
    R : array_like of shape (..., n)
        Scaled residuals, one row per observation.
    y : array_like of shape (n,)
        The training targets.

    Returns
    -------
    ndarray of shape (..., n)

    Raises
    ------
    ValueError
        ``R``'s last axis is not of length ``n``.
    """
    y = np.asarray(y, dtype=float)
    R = np.asarray(R, dtype=float)
    if R.size == 0:                     # no observation yet
        return R.reshape(0, y.shape[0])
    if R.shape[-1:] != y.shape:
        raise ValueError(f"residuals of shape {R.shape}, expected (..., {y.shape[0]})")
    return R * y.shape[0] + y


def stored_predictor(run: RunLike, name: str = "residuals") -> np.ndarray:
    """The predictor on the training points (M, n) at every observation of a run, from its
    stored scaled-residual observable ``name`` (``"residuals"`` or ``"residuals_previous"``;
    :func:`predictor_from_residuals`).

    Raises
    ------
    KeyError
        The run has no observable ``name``.
    """
    return predictor_from_residuals(run.observables[name]["value"], run.y)


def predictor_series(run: RunLike, stage: int, window: float = 0.5) -> np.ndarray:
    """The stored predictor on the training points (M, n) over the last ``window`` fraction
    of stage ``stage``.

    Raises
    ------
    ValueError
        No observation in that part of the stage.
    """
    return predictor_from_residuals(_window(run, "residuals", stage, window), run.y)


def pooled(means, stderrs):
    """The mean of ``K`` independent chains' means of equally many observations and its
    standard error, ``sqrt(Σ_k se_k²) / K`` (arrays of shape (K, ...))."""
    means, stderrs = np.asarray(means, dtype=float), np.asarray(stderrs, dtype=float)
    return means.mean(axis=0), np.sqrt(np.sum(stderrs ** 2, axis=0)) / means.shape[0]


def chains_of(run: RunLike) -> list:
    """The chains of a run (:meth:`meanfield.store.Run.chains`; the run itself for an object
    without chains)."""
    chains = getattr(run, "chains", None)
    return list(chains()) if callable(chains) else [run]


def time_average_predictor(run: RunLike, stage: int, window: float = 0.5):
    """Time-averaged predictor on the training points over the last ``window`` fraction of
    stage ``stage`` of a :class:`meanfield.store.Run`, from its stored residuals, pooled over
    its independent chains (``dynamics.chains``, :func:`pooled`).

    Returns
    -------
    mean : ndarray (n,)
    stderr : ndarray (n,)
        Monte Carlo standard error from the integrated autocorrelation time of each chain
        (:func:`mean_and_mcse`, docs/theory.md §2.5), combined over the chains.

    Raises
    ------
    ValueError
        No observations of the stage in the window.
    """
    m, se, _, _ = pooled_predictor(run, stage, window)
    return m, se


def pooled_predictor(run: RunLike, stage: int, window: float = 0.5):
    """:func:`time_average_predictor` with the effective sample size it rests on.

    Returns
    -------
    mean, stderr : ndarray (n,)
        As :func:`time_average_predictor`.
    ess : float
        The smallest over the chains of ``M / max_j τ_j`` (observations over the longest
        integrated autocorrelation time of a training point).
    M : int
        Observations per chain in the window.

    Raises
    ------
    ValueError
        No observations of the stage in the window.
    """
    per = [(F, *mean_and_mcse(F)) for F in (predictor_series(c, stage, window)
                                            for c in chains_of(run))]
    m, se = pooled([p[1] for p in per], [p[2] for p in per])
    ess = min(len(p[0]) / float(np.max(p[3])) for p in per)
    return m, se, ess, len(per[0][0])


def time_average_observable(run: RunLike, name: str, stage: int, window: float = 0.5):
    """Time average of the observable ``name`` (e.g. ``"risk"``) over the last ``window``
    fraction of stage ``stage``, and its Monte Carlo standard error (:func:`mean_and_mcse`),
    pooled over the run's chains (:func:`pooled`).

    Raises
    ------
    ValueError
        No observation in the window.
    """
    per = [mean_and_mcse(np.asarray(_window(c, name, stage, window), dtype=float)
                         .reshape(-1, 1))[:2] for c in chains_of(run)]
    m, se = pooled([p[0] for p in per], [p[1] for p in per])
    return float(m[0]), float(se[0])


def _window(run: RunLike, name: str, stage: int, window: float) -> np.ndarray:
    """Rows of observable ``name`` in the last ``window`` fraction of stage ``stage``."""
    obs = run.observables
    steps = obs[name]["step"]
    lo, hi = run.schedule.last_part(stage, window)
    sel = (steps > lo) & (steps <= hi)
    if not np.any(sel):
        where = (f"the run file ends at step {int(np.max(steps))}, before them"
                 if len(steps) else "the run file has no observations yet")
        raise ValueError(
            f"no observations in the last {100 * window:g}% of stage {stage} (tau="
            f"{run.taus[stage]:g}, steps {lo + 1}-{hi})"
            + (f": {where} (interrupted or still running; analyze it when the stage is done)"
               if not len(steps) or np.max(steps) < hi else ""))
    return np.asarray(obs[name]["value"])[sel]
