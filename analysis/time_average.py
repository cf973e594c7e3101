"""Time averages of a run's stored observables."""

from __future__ import annotations

import numpy as np


def time_average_predictor(run, stage: int, window: float = 0.5):
    """Time-averaged predictor on the training points over the last ``window`` fraction of
    stage ``stage`` of a :class:`meanfield.store.Run`, from its stored residuals.

    Returns
    -------
    mean : ndarray (n,)
    stderr : ndarray (n,)   naive standard error (ignores autocorrelation)
    """
    F = _window(run, "residuals", stage, window) * run.n + run.y[None, :]
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
