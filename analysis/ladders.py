"""Two ladders of one problem compared temperature by temperature.

A run from the hot side (``model.init = "random"``, τ decreasing) and a run from the cold side
(``model.init = "convex"``, τ increasing) approach the stationary measure of each temperature
from opposite directions; where both are stationary their time-averaged predictors agree to
within their Monte Carlo errors, and a difference of many standard errors shows that at least
one of them is not (or that their biases differ: other η, N or integrator).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class LadderDifference:
    """Difference of the time-averaged predictors of two runs at one temperature.

    Attributes
    ----------
    tau : float
    stage_a, stage_b : int
        The stage of each run at that temperature.
    max_abs_diff : float
        ``max_j |f̄_A(x_j) − f̄_B(x_j)|`` over the training points (units of ``y``).
    z : float
        ``max_j |f̄_A − f̄_B| / sqrt(MCSE_A² + MCSE_B²)``: the largest difference in standard
        errors (``inf`` when both errors are 0 and the predictors differ).
    mcse_a, mcse_b : float
        Largest MCSE of each run's time average.
    """

    tau: float
    stage_a: int
    stage_b: int
    max_abs_diff: float
    z: float
    mcse_a: float
    mcse_b: float

    def to_dict(self) -> dict:
        out = asdict(self)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in out.items()}


def compare_ladders(a, b, rtol: float = 1e-9) -> list[LadderDifference]:
    """Match the stages of two ladders by temperature and difference their predictors.

    Parameters
    ----------
    a, b : sequence of (tau, mean (n,), mcse (n,))
        Per stage of each run: its temperature, the time-averaged predictor on the training
        points and its Monte Carlo standard error.
    rtol : float
        Temperatures within this relative tolerance are the same.

    Returns
    -------
    list of LadderDifference
        One per temperature present in both, in the order of ``a``.

    Raises
    ------
    ValueError
        The predictors have different lengths (not the same training set).
    """
    import numpy as np
    out = []
    for ia, (ta, ma, sa) in enumerate(a):
        for ib, (tb, mb, sb) in enumerate(b):
            if abs(ta - tb) <= rtol * max(abs(ta), abs(tb)):
                ma, mb = np.asarray(ma, float), np.asarray(mb, float)
                sa, sb = np.asarray(sa, float), np.asarray(sb, float)
                if ma.shape != mb.shape:
                    raise ValueError(f"predictors on {ma.size} and {mb.size} points: not the "
                                     "same data")
                diff = np.abs(ma - mb)
                den = np.sqrt(sa ** 2 + sb ** 2)
                z = np.where(den > 0, diff / np.where(den > 0, den, 1.0),
                             np.where(diff > 0, np.inf, 0.0))
                out.append(LadderDifference(float(ta), ia, ib, float(diff.max()),
                                            float(z.max()), float(sa.max()), float(sb.max())))
                break
    return out
