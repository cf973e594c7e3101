"""Time averages of a run's stored observables."""

from __future__ import annotations

import math

import numpy as np


def integrated_time(x):
    """Integrated autocorrelation time, in samples (``>= 1``), of a 1-D series: Sokal's
    automatic window ``c = 5`` (``emcee.autocorr.integrated_time``). A constant series, or one
    of fewer than 8 samples, gives 1; never below 1 (antithetic series are not credited with
    more samples than they have). A 2-D ``x`` (M, n) gives the times of its columns, (n,)."""
    from emcee.autocorr import integrated_time as _it
    x = np.asarray(x, dtype=float)
    if x.ndim == 2:
        return np.array([integrated_time(x[:, j]) for j in range(x.shape[1])])
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
    tau = integrated_time(F)
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
    stderr : ndarray (n,)
        Monte Carlo standard error from the integrated autocorrelation time
        (:func:`mean_and_mcse`, docs/theory.md §2.5).

    Raises
    ------
    ValueError
        No observations of the stage in the window.
    """
    F = predictor_series(run, stage, window)
    m, se, _ = mean_and_mcse(F)
    return m, se


def time_average_observable(run, name: str, stage: int, window: float = 0.5):
    """Time average of the observable ``name`` (e.g. ``"risk"``) over the last ``window``
    fraction of stage ``stage``, and its Monte Carlo standard error (:func:`mean_and_mcse`).

    Raises
    ------
    ValueError
        No observation in the window.
    """
    v = np.asarray(_window(run, name, stage, window), dtype=float).reshape(-1, 1)
    m, se, _ = mean_and_mcse(v)
    return float(m[0]), float(se[0])


def _window(run, name, stage, window):
    """Rows of observable ``name`` in the last ``window`` fraction of stage ``stage``."""
    obs = run.observables
    steps = obs[name]["step"]
    lo, hi = run.schedule.last_part(stage, window)
    sel = (steps > lo) & (steps <= hi)
    if not np.any(sel):
        raise ValueError(f"no observations in stage {stage} (tau={run.taus[stage]:g})")
    return np.asarray(obs[name]["value"])[sel]
