"""Time averages of a run's stored observables."""

from __future__ import annotations

import math

import numpy as np


def time_average_predictor(run, stage: int, window: float = 0.5):
    """Time-averaged predictor on the training points over the last ``window`` fraction of
    stage ``stage`` of a :class:`meanfield.store.Run`, from its stored residuals.

    Returns
    -------
    mean : ndarray (n,)
    stderr : ndarray (n,)   naive standard error (ignores autocorrelation)
    """
    obs = run.observables
    taus = np.asarray(run.config["dynamics"]["taus"], dtype=float)
    T = int(run.config["dynamics"]["steps_per_tau"])
    steps = obs["residuals"]["step"]
    lo = stage * T + int(math.floor((1 - window) * T))
    hi = (stage + 1) * T
    sel = (steps > lo) & (steps <= hi)
    if not np.any(sel):
        raise ValueError(f"no observations in stage {stage} (tau={taus[stage]:g})")
    F = obs["residuals"]["value"][sel] * run.n + run.y[None, :]
    return F.mean(axis=0), F.std(axis=0, ddof=1) / np.sqrt(max(1, F.shape[0] - 1))
