"""Statistics of the high-dimensional GD study ([LWTM26], THEORY §10): means with Student-t
intervals, and log-log slopes of a gap against ``d`` and ``n`` with bootstrap intervals."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def mean_ci(x) -> dict:
    """Mean and 95 % Student-t interval of the finite entries of ``x`` (``None`` when undefined)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"mean": None, "ci95": [None, None], "count": 0}
    m = float(x.mean())
    if x.size < 2:
        return {"mean": m, "ci95": [None, None], "count": 1}
    h = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return {"mean": m, "ci95": [m - h, m + h], "count": int(x.size)}


def _loglog_design(ds, ns):
    names, cols = [], [np.ones(len(ds))]
    for name, var in (("d", ds), ("n", ns)):
        var = np.asarray(var, dtype=np.float64)
        if np.unique(var).size > 1:
            names.append(name)
            cols.append(np.log(var))
    return names, np.column_stack(cols)


def loglog_fit(samples, ds, ns, seed=0, n_resamples=2000) -> dict:
    """Fit ``log mean_k = b_0 + b_d log d_k + b_n log n_k`` over grid cells ``k``.

    The point estimate is least squares on the logarithms of the cell means; the 95 % interval is
    a percentile bootstrap (:func:`scipy.stats.bootstrap`) resampling the trials within each cell.
    Fitting the means, not single trials, keeps a trial with an exact-zero gap (e.g. all labels
    positive, where GD's limit *is* the minimum-norm solution) from dominating the fit. A regressor
    is dropped when its variable takes a single value; non-finite trial values are left out.

    Parameters
    ----------
    samples : list of array_like
        Per-cell trial values (cell ``k`` at ``ds[k]``, ``ns[k]``).
    ds, ns : sequence of int
    seed : int
        Seed of the bootstrap.
    n_resamples : int

    Returns
    -------
    dict
        ``{"d": {"slope", "ci95"}, "n": {...}, "intercept", "cells"}`` for the regressors present;
        ``ci95`` is ``[None, None]`` when a cell has fewer than two trials; ``{}`` when the cells
        do not determine the slopes.
    """
    keep = [(np.asarray(v, dtype=np.float64), d, n) for v, d, n in zip(samples, ds, ns)]
    keep = [(v[np.isfinite(v)], d, n) for v, d, n in keep]
    keep = [(v, d, n) for v, d, n in keep if v.size and v.mean() > 0]
    if not keep:
        return {}
    vals, dd, nn = zip(*keep)
    names, A = _loglog_design(dd, nn)
    if not names or len(vals) < A.shape[1]:
        return {}
    pinv = np.linalg.pinv(A)

    def coef(*cells, axis=-1):
        means = np.stack([np.mean(c, axis=axis) for c in cells], axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(means) @ pinv.T

    est = coef(*vals)
    out = {"cells": len(vals), "intercept": float(est[0])}
    ci = None
    if min(v.size for v in vals) >= 2:
        res = stats.bootstrap(vals, lambda *c, axis=-1: coef(*c, axis=axis)[..., 1:].T,
                              vectorized=True, paired=False, n_resamples=n_resamples,
                              confidence_level=0.95, method="percentile",
                              random_state=np.random.default_rng(seed))
        ci = np.atleast_1d(res.confidence_interval.low), np.atleast_1d(res.confidence_interval.high)
    for i, name in enumerate(names):
        out[name] = {"slope": float(est[i + 1]),
                     "ci95": [float(ci[0][i]), float(ci[1][i])] if ci else [None, None]}
    return out
