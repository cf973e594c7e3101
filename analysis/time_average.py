"""Time averages of a run's stored observables."""

from __future__ import annotations

import math

import numpy as np


def integrated_time(x) -> float:
    """Integrated autocorrelation time, in samples (``>= 1``), of a 1-D series: Sokal's
    automatic window ``c = 5`` (``emcee.autocorr.integrated_time``). A constant series gives 1."""
    from emcee.autocorr import integrated_time as _it
    x = np.asarray(x, dtype=float)
    if x.size < 8 or not np.ptp(x) > 0:
        return 1.0
    with np.errstate(all="ignore"):
        t = float(_it(x, c=5, tol=0, quiet=True)[0])
    return max(1.0, t) if math.isfinite(t) else float(x.size)


def mean_and_mcse(F):
    """Column means of a series ``F`` (M, n), their Monte Carlo standard errors
    ``sqrt(var · τ_int / M)`` and the integrated autocorrelation times ``τ_int`` (n,)."""
    F = np.asarray(F, dtype=float)
    M = F.shape[0]
    tau = np.array([integrated_time(F[:, j]) for j in range(F.shape[1])])
    var = F.var(axis=0, ddof=1) if M > 1 else np.zeros(F.shape[1])
    return F.mean(axis=0), np.sqrt(var * tau / max(M, 1)), tau


def predictor_series(run, stage: int, window: float = 0.5):
    """The stored predictor on the training points (M, n) over the last ``window`` fraction
    of stage ``stage``.

    Raises
    ------
    ValueError
        No observation in that part of the stage.
    """
    return _window(run, "residuals", stage, window) * run.n + run.y[None, :]


def time_average_predictor(run, stage: int, window: float = 0.5):
    """Time-averaged predictor on the training points over the last ``window`` fraction of
    stage ``stage`` of a :class:`meanfield.store.Run`, from its stored residuals.

    Returns
    -------
    mean : ndarray (n,)
    stderr : ndarray (n,)   naive standard error (ignores autocorrelation)
    """
    F = predictor_series(run, stage, window)
    return F.mean(axis=0), F.std(axis=0, ddof=1) / np.sqrt(max(1, F.shape[0] - 1))


def time_average_observable(run, name: str, stage: int, window: float = 0.5):
    """Time average of the observable ``name`` (e.g. ``"risk"``) over the last ``window``
    fraction of stage ``stage``, and its naive standard error (ignores autocorrelation).

    Raises
    ------
    ValueError
        No observation in the window.
    """
    v = _window(run, name, stage, window)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(max(1, v.shape[0] - 1)))


def _window(run, name, stage, window):
    """Rows of observable ``name`` in the last ``window`` fraction of stage ``stage``."""
    obs = run.observables
    steps = obs[name]["step"]
    lo, hi = run.schedule.last_part(stage, window)
    sel = (steps > lo) & (steps <= hi)
    if not np.any(sel):
        raise ValueError(f"no observations in stage {stage} (tau={run.taus[stage]:g})")
    return np.asarray(obs[name]["value"])[sel]
