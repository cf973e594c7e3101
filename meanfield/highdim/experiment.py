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
from tqdm import tqdm

from analysis.minnorm import closed_form_limit, frozen_limit, minnorm
from analysis.slopes import loglog_fit, mean_ci
from meanfield.errors import InputError
from meanfield.highdim.design import LABELS, NORMALIZE, GaussianDesign
from solvers.highdim_gd import INITS, default_signs, gd, initial_weights, step_size

_SOURCE = "command line"


#: Largest count an option takes (sample sizes, dimensions).
MAX_COUNT = 10**8
#: Largest data set of one trial, n*d values (float64).
MAX_VALUES = 10**8
#: Steepest covariance spectrum: lambda_k ~ k^-a must stay above the smallest float.
MAX_SPECTRUM_A = 100.0


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

        def posint(v, opt, maximum=MAX_COUNT, why="the largest count the kernels take"):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InputError(_SOURCE, opt, f"must be a positive integer, got {v!r}")
            if v > maximum:
                raise InputError(_SOURCE, opt, f"must be <= {maximum} ({why}), got {v!r}")

        def finite(v, opt):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(_SOURCE, opt, f"must be a finite number, got {v!r}")

        posint(self.neurons, "--neurons", 10**4, "neurons held per trial")
        posint(self.trials, "--trials", 10**6, "trials per cell")
        posint(self.max_steps, "--max-steps", 2**31 - 1, "the GD step counter")
        for opt, vals in (("--n", self.ns), ("--d", self.ds)):
            if not vals:
                raise InputError(_SOURCE, opt, "needs at least one value")
            for v in vals:
                posint(v, opt)
            if len(set(vals)) != len(vals):
                raise InputError(_SOURCE, opt, f"repeated values in {list(vals)}")
        if max(self.ns) * max(self.ds) > MAX_VALUES:
            raise InputError(_SOURCE, "--d", f"n*d = {max(self.ns) * max(self.ds)} exceeds "
                                             f"{MAX_VALUES} values (the data must fit in memory)")
        if max(self.ns) > min(self.ds):
            raise InputError(_SOURCE, "--d", f"every d must be >= every n (got n up to "
                                             f"{max(self.ns)}, d from {min(self.ds)})")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) \
                or not 0 <= self.seed < 2**63:
            raise InputError(_SOURCE, "--seed",
                             f"must be an integer in [0, 2**63), got {self.seed!r}")
        for opt, v in (("--c", self.c), ("--eps", self.eps), ("--spectrum-a", self.a),
                       ("--tol", self.tol)):
            finite(v, opt)
        if not 0 < self.c < 2:
            raise InputError(_SOURCE, "--c", f"must lie in (0, 2), got {self.c!r}")
        if self.eps <= 0:
            raise InputError(_SOURCE, "--eps", f"must be positive, got {self.eps!r}")
        if not 0 <= self.a <= MAX_SPECTRUM_A:
            raise InputError(_SOURCE, "--spectrum-a", f"must be in [0, {MAX_SPECTRUM_A:g}] "
                                                      "(steeper spectra underflow), got "
                                                      f"{self.a!r}")
        if not 0 <= self.tol < 1:
            raise InputError(_SOURCE, "--tol", f"must be in [0, 1), got {self.tol!r}")
        if self.eps > 1e15:
            raise InputError(_SOURCE, "--eps", f"must be <= 1e+15 (larger starts overflow), "
                                               f"got {self.eps!r}")
        for opt, v, allowed in (("--init", self.init, INITS), ("--labels", self.labels, LABELS),
                                ("--normalize", self.normalize, NORMALIZE)):
            if v not in allowed:
                raise InputError(_SOURCE, opt, f"must be one of {', '.join(allowed)}, got {v!r}")
        if self.init == "disconnected" and self.neurons > 2:
            # examples assigned to no neuron stay unfit, so the gap to the global minimum-norm
            # interpolant and its slope would not measure the implicit bias
            raise InputError(_SOURCE, "--init", "disconnected needs --neurons <= 2: with more "
                                                "neurons, examples assigned to no neuron stay "
                                                "unfit and the gap to the minimum-norm "
                                                "interpolant is meaningless")

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


def converged_trials(cell) -> np.ndarray:
    """Boolean mask (T,) of the trials of a cell whose GD reached its limit (``tol``) within
    ``max_steps``; only those have a gap to the minimum-norm solution."""
    return np.asarray(cell["converged"]).astype(bool)


def summarize(p: StudyParams, cells: list) -> dict:
    """The ``--json`` document: per-cell statistics and log-log slopes (module docstring).

    Gaps, relative gaps and the slopes use the converged trials only (an unconverged GD is
    not at its limit, its gap says nothing about the limit). A cell is flagged
    ``"in_fit": false`` when none of its trials converged; it is then left out of the fits
    and its gap statistics are empty. ``"converged_cells"`` counts the cells in the fits.
    """
    rows = []
    for c in cells:
        cf = c["closed_form_residual"]
        ok = converged_trials(c)
        rows.append({
            "n": c["n"], "d": c["d"], "trials": int(c["gap"].size), "eta": c["eta"],
            "converged_trials": int(ok.sum()), "in_fit": bool(ok.any()),
            "gap": mean_ci(c["gap"][ok]),
            "rel_gap": mean_ci(c["rel_gap"][ok]),
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
    fit = [c for c in cells if converged_trials(c).any()]
    slopes = {key: loglog_fit([c[key][converged_trials(c)] for c in fit], [c["d"] for c in fit],
                              [c["n"] for c in fit], seed=p.seed)
              for key in ("gap", "rel_gap")}
    return {"params": p.to_dict(), "cells": rows, "slopes": slopes,
            "converged_cells": len(fit),
            "excluded_cells": [{"n": c["n"], "d": c["d"]} for c in cells
                               if not converged_trials(c).any()]}
