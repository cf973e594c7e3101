"""Time averages of a run's stored observables."""

from __future__ import annotations

import math

import numpy as np

from analysis.stationarity import mcse, stage_bounds


def time_average_predictor(run, stage: int, window: float = 0.5):
    """Time-averaged predictor on the training points over the last ``window`` fraction of
    stage ``stage`` of a :class:`meanfield.store.Run`, from its stored residuals.

    Returns
    -------
    mean : ndarray (n,)
    stderr : ndarray (n,)
        Monte Carlo standard error from the integrated autocorrelation time
        (:func:`analysis.stationarity.mcse`, docs/theory.md §2).

    Raises
    ------
    ValueError
        No observations of the stage in the window.
    """
    obs = run.observables
    taus = np.asarray(run.config["dynamics"]["taus"], dtype=float)
    steps = obs["residuals"]["step"]
    start, end = stage_bounds(run, stage)
    lo = start + int(math.floor((1 - window) * (end - start)))
    sel = (steps > lo) & (steps <= end)
    if not np.any(sel):
        raise ValueError(f"no observations in stage {stage} (tau={taus[stage]:g})")
    F = obs["residuals"]["value"][sel] * run.n + run.y[None, :]
    return F.mean(axis=0), mcse(F)[0]
