"""Two ladders of one problem combined temperature by temperature.

- :func:`compare_ladders`: a run from the hot side (``model.init = "random"``, τ decreasing)
  and a run from the cold side (``model.init = "convex"``, τ increasing) approach the
  stationary measure of each temperature from opposite directions; where both are stationary
  their time-averaged predictors agree to within their Monte Carlo errors, and a difference of
  many standard errors shows that at least one of them is not (or that their biases differ:
  other η, N or integrator).
- :func:`extrapolate_ladders`: two Euler–Maruyama runs that differ only in the step η give the
  step bias of each and, by Richardson extrapolation to η → 0, a predictor free of it
  (THEORY §2.3).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


class _Row:
    """A per-temperature result that serialises to JSON: arrays as lists, ``inf``/``nan`` as
    ``None``."""

    def to_dict(self) -> dict:
        out = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
               for k, v in asdict(self).items()}
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in out.items()}


@dataclass
class LadderDifference(_Row):
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



def _same_tau(ta, tb, rtol):
    return abs(ta - tb) <= rtol * max(abs(ta), abs(tb))


def _partners(a, b, rtol):
    """``[(row of a, row of b or None)]``: the ``k``-th visit of a temperature in ``a`` (its
    ``k``-th row at that temperature) paired with the ``k``-th visit of it in ``b``, so a ladder
    that visits a temperature twice (a reheating study) pairs its stages in order."""
    out = []
    for ia, row_a in enumerate(a):
        visit = sum(_same_tau(row_a[0], r[0], rtol) for r in a[:ia])
        same = [r for r in b if _same_tau(row_a[0], r[0], rtol)]
        out.append((row_a, same[visit] if visit < len(same) else None))
    return out


def unmatched(a, b, rtol: float = 1e-9) -> list[float]:
    """The temperatures of the stages of ladder ``a`` with no partner in ``b`` (rows as in
    :func:`compare_ladders`: the temperature first; a temperature ``a`` visits more often than
    ``b`` is listed once per visit left over)."""
    return [float(ra[0]) for ra, rb in _partners(list(a), list(b), rtol) if rb is None]


def _matched(a, b, rtol):
    """``(ia, ib, tau, (ma, sa), (mb, sb))`` for every stage of ``a`` whose temperature ``b``
    visits as often (:func:`_partners`); the stages ``ia``, ``ib`` are the rows' fourth entries
    where given, else their positions."""
    a, b = list(a), list(b)
    pos_b = {id(r): i for i, r in enumerate(b)}
    for ia, (row_a, row_b) in enumerate(_partners(a, b, rtol)):
        if row_b is None:
            continue
        ta, ma, sa = row_a[:3]
        mb, sb = row_b[1:3]
        ia = row_a[3] if len(row_a) > 3 else ia
        ib = row_b[3] if len(row_b) > 3 else pos_b[id(row_b)]
        ma, mb = np.asarray(ma, float), np.asarray(mb, float)
        if ma.shape != mb.shape:
            raise ValueError(f"predictors on {ma.size} and {mb.size} points: not the "
                             "same data")
        yield (ia, ib, float(ta), (ma, np.asarray(sa, float)), (mb, np.asarray(sb, float)))


def z_scores(diff, den):
    """``|diff| / den`` per point, ``inf`` where ``den = 0`` and ``diff ≠ 0`` (0 where both
    are)."""
    diff = np.abs(diff)
    return np.where(den > 0, diff / np.where(den > 0, den, 1.0),
                    np.where(diff > 0, np.inf, 0.0))


def compare_ladders(a, b, rtol: float = 1e-9) -> list[LadderDifference]:
    """Match the stages of two ladders by temperature and difference their predictors (the
    ``k``-th stage at a temperature in ``a`` with the ``k``-th at it in ``b``).

    Parameters
    ----------
    a, b : sequence of (tau, mean (n,), mcse (n,)) or (tau, mean, mcse, stage)
        Per stage of each run: its temperature, the time-averaged predictor on the training
        points, its Monte Carlo standard error and (optionally) the stage's index in its
        ladder (default: the position in the sequence).
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
    out = []
    for ia, ib, tau, (ma, sa), (mb, sb) in _matched(a, b, rtol):
        diff = np.abs(ma - mb)
        z = z_scores(diff, np.sqrt(sa ** 2 + sb ** 2))
        out.append(LadderDifference(tau, ia, ib, float(diff.max()), float(z.max()),
                                    float(sa.max()), float(sb.max())))
    return out


@dataclass
class Extrapolation(_Row):
    """Richardson extrapolation to ``η → 0`` of two runs at one temperature (THEORY §2.3).

    Attributes
    ----------
    tau : float
    stage_fine, stage_coarse : int
        The stage of each run at that temperature.
    ratio : float
        ``r = η_coarse / η_fine > 1``.
    mean : ndarray of shape (n,)
        ``(r f̄_fine − f̄_coarse)/(r − 1)``: the predictor on the training points with the
        step bias linear in ``η`` removed (units of ``y``).
    mcse : ndarray of shape (n,)
        Its Monte Carlo standard error, ``sqrt(r² MCSE_fine² + MCSE_coarse²)/(r − 1)``.
    step_bias : ndarray of shape (n,)
        The fine run's estimated step bias, ``f̄_fine − mean = (f̄_coarse − f̄_fine)/(r − 1)``.
    step_bias_z : float
        ``max_j |f̄_coarse − f̄_fine| / sqrt(MCSE_fine² + MCSE_coarse²)``: whether the step
        bias is resolved (a few or more) or lost in the Monte Carlo error.
    """

    tau: float
    stage_fine: int
    stage_coarse: int
    ratio: float
    mean: np.ndarray
    mcse: np.ndarray
    step_bias: np.ndarray
    step_bias_z: float



def extrapolate_ladders(fine, coarse, ratio: float, rtol: float = 1e-9) -> list[Extrapolation]:
    """Richardson extrapolation in the step of two ladders run at ``η`` and ``r η``.

    For Euler–Maruyama the time average of an observable under the chain's invariant law is
    ``⟨φ⟩ + A η + o(η)`` (D. Talay, L. Tubaro, *Expansion of the global error for numerical
    schemes solving stochastic differential equations*, Stoch. Anal. Appl. 8 (1990) 483–509,
    and D. Talay, *Second-order discretization schemes of stochastic differential systems for
    the computation of the invariant law*, Stochastics 29 (1990) 13–36, for smooth
    coefficients; on the ReLU network the linear term is measured, THEORY §2.3). The
    combination ``(r f̄_η − f̄_{rη})/(r − 1)`` cancels ``A η``. The two runs must share
    everything else (data, ``λ``, ``N``, integrator, temperatures); the MCSE assumes they are
    independent (different seeds).

    Parameters
    ----------
    fine, coarse : sequence of (tau, mean (n,), mcse (n,)) or (tau, mean, mcse, stage)
        Per stage of the run at the smaller step ``η`` and of the run at ``r η`` (as in
        :func:`compare_ladders`).
    ratio : float
        ``r = η_coarse / η_fine``, > 1.
    rtol : float
        Temperatures within this relative tolerance are the same.

    Returns
    -------
    list of Extrapolation
        One per temperature present in both, in the order of ``fine``.

    Raises
    ------
    ValueError
        ``ratio`` is not a finite number > 1, or the predictors have different lengths.
    """
    r = float(ratio)
    if not (math.isfinite(r) and r > 1):
        raise ValueError(f"the ratio of the steps must be a finite number > 1, got {ratio!r}")
    out = []
    for i_f, i_c, tau, (mf, sf), (mc, sc) in _matched(fine, coarse, rtol):
        mean = (r * mf - mc) / (r - 1)
        mcse = np.sqrt((r * sf) ** 2 + sc ** 2) / (r - 1)
        z = z_scores(mc - mf, np.sqrt(sf ** 2 + sc ** 2))
        out.append(Extrapolation(tau, i_f, i_c, r, mean, mcse, (mc - mf) / (r - 1),
                                 float(z.max())))
    return out
