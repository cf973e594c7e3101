"""The [LWTM26] study: GD on few ReLU neurons against the minimum-norm solution (THEORY §10).

For each cell ``(n, d)`` of a grid and each trial, draw a Gaussian data set
(:mod:`meanfield.highdim.design`), run GD (:mod:`solvers.highdim_gd`) to its limit ``W_∞``, solve the
minimum-norm comparator ``W*`` (:mod:`analysis.minnorm`) and record the gap ``‖W_∞ − W*‖_F``,
the relative gap ``‖W_∞ − W*‖_F / ‖W*‖_F``, whether each neuron's pattern froze at
``1[a_j y > 0]``, the fit residuals and the distance to the closed-form limit. :func:`summarize`
turns the trials into per-cell means with 95 % intervals and fits log-log slopes in ``d`` and ``n``.

Trial ``k`` of cell ``(n, d)`` uses the seed key ``(seed, n, d, k)`` for the data and
``(seed, n, d, k, 1)`` for a random initialisation, so results do not depend on the grid order.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats
from tqdm import tqdm

from analysis.minnorm import closed_form_limit, frozen_limit, minnorm
from meanfield.errors import InputError
from meanfield.highdim.design import LABELS, NORMALIZE, GaussianDesign
from solvers.highdim_gd import INITS, default_signs, gd, initial_weights, step_size

_SOURCE = "command line"


@dataclass(frozen=True)
class StudyParams:
    """Parameters of a study (the options of ``meanfield highdim``).

    Attributes
    ----------
    neurons : int
        ``m``; output signs ``(+1, −1, +1, …)``.
    ns, ds : tuple of int
        Sample sizes and dimensions; every cell needs ``d >= n``.
    trials : int
        Trials per cell.
    c : float
        Step constant, ``η = c / tr Σ``, ``0 < c < 2``.
    init : str
        One of :data:`solvers.highdim_gd.INITS`.
    eps : float
        Scale of the non-zero initialisations.
    a : float
        Spectrum exponent (0: isotropic).
    normalize : str
        ``"trace"`` or ``"top"`` (:class:`meanfield.highdim.design.GaussianDesign`).
    labels : str
        ``"sign"`` or ``"uniform"``.
    tol, max_steps :
        GD stopping rule (:func:`solvers.highdim_gd.gd`).
    seed : int
        Base seed.

    Raises
    ------
    InputError
        Any invalid value, naming the command-line option.
    """

    neurons: int = 1
    ns: tuple = (20,)
    ds: tuple = (200, 400, 800, 1600, 3200, 6400, 12800)
    trials: int = 10
    c: float = 0.5
    init: str = "zero"
    eps: float = 1e-3
    a: float = 0.0
    normalize: str = "trace"
    labels: str = "sign"
    tol: float = 1e-12
    max_steps: int = 100_000
    seed: int = 0

    def __post_init__(self):

        def posint(v, opt):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InputError(_SOURCE, opt, f"must be a positive integer, got {v!r}")

        def finite(v, opt):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(_SOURCE, opt, f"must be a finite number, got {v!r}")

        posint(self.neurons, "--neurons")
        posint(self.trials, "--trials")
        posint(self.max_steps, "--max-steps")
        for opt, vals in (("--n", self.ns), ("--d", self.ds)):
            if not vals:
                raise InputError(_SOURCE, opt, "needs at least one value")
            for v in vals:
                posint(v, opt)
            if len(set(vals)) != len(vals):
                raise InputError(_SOURCE, opt, f"repeated values in {list(vals)}")
        if max(self.ns) > min(self.ds):
            raise InputError(_SOURCE, "--d", f"every d must be >= every n (got n up to "
                                             f"{max(self.ns)}, d from {min(self.ds)})")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) \
                or self.seed < 0:
            raise InputError(_SOURCE, "--seed",
                             f"must be a non-negative integer, got {self.seed!r}")
        for opt, v in (("--c", self.c), ("--eps", self.eps), ("--spectrum-a", self.a),
                       ("--tol", self.tol)):
            finite(v, opt)
        if not 0 < self.c < 2:
            raise InputError(_SOURCE, "--c", f"must lie in (0, 2), got {self.c!r}")
        if self.eps <= 0:
            raise InputError(_SOURCE, "--eps", f"must be positive, got {self.eps!r}")
        if self.a < 0:
            raise InputError(_SOURCE, "--spectrum-a", f"must be >= 0, got {self.a!r}")
        if self.tol < 0:
            raise InputError(_SOURCE, "--tol", f"must be >= 0, got {self.tol!r}")
        for opt, v, allowed in (("--init", self.init, INITS), ("--labels", self.labels, LABELS),
                                ("--normalize", self.normalize, NORMALIZE)):
            if v not in allowed:
                raise InputError(_SOURCE, opt, f"must be one of {', '.join(allowed)}, got {v!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ns"], d["ds"] = list(self.ns), list(self.ds)
        return d

    @property
    def cells(self) -> list:
        """Grid cells ``(n, d)``, ``n`` outer."""
        return [(n, d) for n in self.ns for d in self.ds]


#: Per-trial scalar records (name -> description), in the order of the HDF5 file.
TRIAL_FIELDS = {
    "gap": "‖W_∞ − W*‖_F",
    "rel_gap": "‖W_∞ − W*‖_F / ‖W*‖_F",
    "wstar_norm": "‖W*‖_F",
    "w_norm": "‖W_∞‖_F",
    "closed_form_residual": "‖W_∞ − W_cf‖_F (zero init: THEORY §10 formula; other inits: the "
                            "frozen-pattern limit from the last change; NaN if not frozen)",
    "fit_residual_pos": "max_{y_i>0} |f(x_i) − y_i|",
    "fit_residual_neg": "max_{y_i<0} |f(x_i) − y_i| (≈ max|y₋| for one neuron: negatives are "
                        "predicted 0)",
    "unfit_pos": "number of positives with |f(x_i) − y_i| > 1e-6",
    "qp_kkt": "largest KKT residual of the min-norm QPs",
    "qp_interpolation": "max |f*(x_i) − y_i| of W* over the examples it should fit",
    "n_steps": "GD steps",
    "converged": "GD stopping rule fired (1) or max_steps reached (0)",
    "last_change": "step of the last pattern change",
    "n_changes": "number of pattern changes after step 0",
}


def run_trial(p: StudyParams, n: int, d: int, k: int) -> dict:
    """One trial: data, GD, min-norm QP and the comparisons.

    Returns
    -------
    dict
        The :data:`TRIAL_FIELDS` scalars and arrays ``frozen`` (m,) bool, ``pattern`` (m, n) bool,
        ``y`` (n,), ``alpha``, ``beta``, ``alpha_star`` (m, n) (``W* = alpha_star @ X``), and the
        cell constants ``eta``, ``trace``.
    """
    design = GaussianDesign(d, p.a, p.normalize)
    ds = design.sample(n, seed=(p.seed, n, d, k), labels=p.labels)
    X, y = ds.X, ds.y
    signs = default_signs(p.neurons)
    eta = step_size(p.c, design.trace)
    W0 = initial_weights(p.init, X, signs, eps=p.eps, seed=(p.seed, n, d, k, 1))
    res = gd(X, y, eta=eta, signs=signs, W0=W0, tol=p.tol, max_steps=p.max_steps)
    star = minnorm(X, y, signs)
    target = signs[:, None] * y[None, :] > 0
    frozen = np.all(res.pattern == target, axis=1)
    if p.init == "zero":
        W_cf = closed_form_limit(X, y, eta, signs)
    elif frozen.all():
        W_cf = frozen_limit(X, y, res.W_last_change, signs)
    else:
        W_cf = None
    gap = float(np.linalg.norm(res.W - star.W))
    wstar = float(np.linalg.norm(star.W))
    f = res.predict()
    pos, neg = y > 0, y < 0
    # W* = Σ over its sign's QP: w*_j = X^T alpha_{a_j} / k_{a_j}
    alpha_star = np.stack([star.qp[s].alpha / np.sum(signs == s) for s in signs])
    return {
        "gap": gap,
        "rel_gap": gap / wstar if wstar > 0 else math.nan,
        "wstar_norm": wstar,
        "w_norm": float(np.linalg.norm(res.W)),
        "closed_form_residual": float(np.linalg.norm(res.W - W_cf)) if W_cf is not None
        else math.nan,
        "fit_residual_pos": float(np.max(np.abs(f - y)[pos], initial=0.0)),
        "fit_residual_neg": float(np.max(np.abs(f - y)[neg], initial=0.0)),
        "unfit_pos": int(np.sum(np.abs(f - y)[pos] > 1e-6)),
        "qp_kkt": star.kkt_max,
        "qp_interpolation": star.interpolation_residual,
        "n_steps": res.n_steps,
        "converged": int(res.converged),
        "last_change": res.last_change,
        "n_changes": int(res.change_steps.size - 1),
        "frozen": frozen,
        "pattern": res.pattern,
        "y": y,
        "alpha": res.alpha,
        "beta": res.beta,
        "alpha_star": alpha_star,
        "eta": eta,
        "trace": design.trace,
    }


def run_study(p: StudyParams, progress=None) -> list:
    """All trials of all cells.

    Parameters
    ----------
    p : StudyParams
    progress : bool or None
        tqdm bar over trials on stderr (``None``: only on a terminal).

    Returns
    -------
    list of dict
        One per cell: ``n``, ``d``, ``eta``, ``trace`` and the per-trial arrays stacked over trials
        (scalars to (T,), ``frozen`` to (T, m), ``pattern`` to (T, m, n), …).
    """
    cells = []
    with tqdm(total=len(p.cells) * p.trials, desc="highdim", unit="trial", file=sys.stderr,
              disable=None if progress is None else not progress) as bar:
        for n, d in p.cells:
            bar.set_postfix(n=n, d=d)
            rows = []
            for k in range(p.trials):
                rows.append(run_trial(p, n, d, k))
                bar.update(1)
            cell = {"n": n, "d": d, "eta": rows[0]["eta"], "trace": rows[0]["trace"]}
            for key in rows[0]:
                if key not in ("eta", "trace"):
                    cell[key] = np.array([r[key] for r in rows])
            cells.append(cell)
    return cells


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


def summarize(p: StudyParams, cells: list) -> dict:
    """The ``--json`` document: per-cell statistics and log-log slopes (module docstring)."""
    rows = []
    for c in cells:
        cf = c["closed_form_residual"]
        rows.append({
            "n": c["n"], "d": c["d"], "trials": int(c["gap"].size), "eta": c["eta"],
            "gap": mean_ci(c["gap"]),
            "rel_gap": mean_ci(c["rel_gap"]),
            "wstar_norm": mean_ci(c["wstar_norm"]),
            "frozen_fraction": [float(f) for f in c["frozen"].mean(axis=0)],
            "frozen_from_step1_fraction": float(np.mean(c["frozen"].all(axis=1)
                                                        & (c["last_change"] <= 1))),
            "fit_residual_pos_max": float(c["fit_residual_pos"].max()),
            "fit_residual_neg_max": float(c["fit_residual_neg"].max()),
            "unfit_positives_mean": float(c["unfit_pos"].mean()),
            "closed_form_residual_max": float(np.nanmax(cf)) if np.isfinite(cf).any() else None,
            "closed_form_residual_median": float(np.nanmedian(cf)) if np.isfinite(cf).any()
            else None,
            "closed_form_defined": int(np.isfinite(cf).sum()),
            "qp_kkt_max": float(c["qp_kkt"].max()),
            "qp_interpolation_max": float(c["qp_interpolation"].max()),
            "converged_fraction": float(c["converged"].mean()),
            "steps_mean": float(c["n_steps"].mean()),
            "last_change_max": int(c["last_change"].max()),
        })
    slopes = {key: loglog_fit([c[key] for c in cells], [c["d"] for c in cells],
                              [c["n"] for c in cells], seed=p.seed)
              for key in ("gap", "rel_gap")}
    return {"params": p.to_dict(), "cells": rows, "slopes": slopes}
