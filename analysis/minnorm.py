"""Minimum-norm comparators and the closed-form GD limit of THEORY §10 ([LWTM26]).

For one ReLU neuron without bias, the minimum-ℓ2-norm interpolator of the positives that keeps the
negatives inactive is the convex QP

    w* = argmin ½‖w‖²   s.t.   X₊ w = y₊,   X₋ w ≤ 0,

with ``I₊ = {y > 0}``, ``I₋ = {y < 0}``. Two neurons ``(+1, −1)``: the same QP per neuron, the
second one with the roles of ``I₊, I₋`` swapped and targets ``|y₋|``; the pair interpolates every
example. ``m`` neurons with signs ``a_j`` (``k_±`` of each sign): by convexity and symmetry the
minimiser of ``Σ_j ‖w_j‖²`` under the same pattern constraints splits each sign's solution evenly,
``w_j = w*_{a_j} / k_{a_j}``.

Every QP is solved in its ``n``-dimensional form ``w = Xᵀα`` (the minimiser lies in the row space
of ``X``), so nothing of size ``d × d`` is formed: with ``K = X Xᵀ``,

    α* = argmin ½ αᵀKα   s.t.   K_E α = t_E,   K_I α ≤ 0,

and, when ``K`` is invertible, the primal multipliers are ``ν = α_E``, ``μ = −α_I`` (stationarity
``w = X_Eᵀν − X_Iᵀμ``). Solver: Clarabel through ``qpsolvers``; the KKT residuals of the primal
problem are reported with the solver's own multipliers, and an active-set polish (one equality-
constrained solve on the detected active set) is kept when it lowers them.

Closed-form GD limit (THEORY §10): once the pattern of neuron ``j`` is frozen at
``S_j = {a_j y > 0}``, GD is linear least squares on ``S_j`` and leaves the component of ``w_j``
orthogonal to the row space of ``X_{S_j}`` unchanged. For one neuron from the zero start
(``w_1 = η Xᵀy``):

    w_∞ = X₊ᵀ(X₊X₊ᵀ)⁻¹y₊ + η(I − P₊)X₋ᵀy₋.

For two neurons ``(+1, −1)`` (derived here): ``w_{2,1} = −η Xᵀy`` and the second neuron fits
``|y₋|`` on ``I₋``, so ``w_{2,∞} = X₋ᵀ(X₋X₋ᵀ)⁻¹|y₋| − η(I − P₋)X₊ᵀy₊`` — the one-neuron formula
applied to ``(X, −y)``; ``w_{1,∞}`` is the one-neuron limit itself. :func:`frozen_limit` gives the
general case (any start of the final phase, ``k`` neurons of a sign sharing the fit).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike
from qpsolvers import Problem, solve_problem
from scipy.sparse import csc_matrix

from solvers.errors import DataError
from solvers.inputs import check_xy

_SOURCE = "min-norm"

#: Clarabel settings, tried in turn until one reports success: tighter than its defaults first
#: (1e-12 can stall on ill-conditioned ``K`` with "insufficient progress"), then the defaults. The
#: active-set polish takes the result to machine precision when the active set is identified.
CLARABEL_SETTINGS = (dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10, max_iter=200),
                     dict())


def _check_xy(X, y):
    X, y = check_xy(X, y, _SOURCE)
    if np.any(y == 0):
        raise DataError(_SOURCE, "y", "labels must be non-zero (their sign defines I₊, I₋)")
    return X, y


def _signs(signs) -> np.ndarray:
    a = np.atleast_1d(np.asarray(signs, dtype=np.float64))
    if a.ndim != 1 or a.size == 0 or not np.all(np.abs(a) == 1):
        raise DataError(_SOURCE, "signs", f"must be a non-empty list of +1/-1, got {signs!r}")
    return a


def _gram_solve(XS: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``(X_S X_Sᵀ)⁻¹ rhs`` by Cholesky; DataError when the rows of ``X_S`` are dependent."""
    try:
        return scipy.linalg.cho_solve(scipy.linalg.cho_factor(XS @ XS.T), rhs)
    except np.linalg.LinAlgError:
        raise DataError(_SOURCE, "X", "rows are linearly dependent (need d >= n, general "
                                      "position)") from None


@dataclass
class PatternQP:
    """Solution of ``min ½‖w‖² s.t. X_E w = t_E, X_I w ≤ 0`` (``E`` the equality set).

    Attributes
    ----------
    w : ndarray (d,)
        Minimiser.
    alpha : ndarray (n,)
        ``w = Xᵀ α``.
    nu : ndarray (|E|,)
        Multipliers of the equalities (``w = X_Eᵀν − X_Iᵀμ``).
    mu : ndarray (|I|,)
        Multipliers of the inequalities, ``μ >= 0`` at the optimum.
    eq : ndarray (n,) of bool
        The equality set ``E`` (its complement is ``I``).
    kkt : dict of float
        Absolute residuals: ``primal_eq = max|X_E w − t_E|``, ``primal_ineq = max(X_I w)₊``,
        ``dual = max(−μ)₊``, ``complementarity = max|μ_i (X_I w)_i|``,
        ``stationarity = ‖w − X_Eᵀν + X_Iᵀμ‖₂``.
    polished : bool
        Whether the active-set polish replaced the interior-point solution.
    """

    w: np.ndarray
    alpha: np.ndarray
    nu: np.ndarray
    mu: np.ndarray
    eq: np.ndarray
    kkt: dict
    polished: bool

    @property
    def kkt_max(self) -> float:
        """The largest KKT residual."""
        return max(self.kkt.values())


def _kkt(X, t, eq, w, nu, mu) -> dict:
    XE, XI = X[eq], X[~eq]
    gE = XE @ w - t[eq]
    gI = XI @ w
    stat = w - XE.T @ nu + XI.T @ mu
    return {"primal_eq": float(np.max(np.abs(gE), initial=0.0)),
            "primal_ineq": float(np.max(gI, initial=0.0)),
            "dual": float(np.max(-mu, initial=0.0)),
            "complementarity": float(np.max(np.abs(mu * gI), initial=0.0)),
            "stationarity": float(np.linalg.norm(stat))}


def _polish(X, t, eq, mu, w) -> tuple | None:
    """Equality-constrained solve on ``E ∪ A`` with ``A`` the detected active inequalities."""
    XI = X[~eq]
    scale = max(1.0, float(np.max(np.abs(mu), initial=0.0)))
    act = (mu > 1e-7 * scale) | (XI @ w > -1e-9 * max(1.0, float(np.abs(t).max(initial=1.0))))
    idx_I = np.flatnonzero(~eq)
    J = np.concatenate([np.flatnonzero(eq), idx_I[act]])
    if J.size == 0:
        return np.zeros(X.shape[1]), np.zeros(0), np.zeros(int((~eq).sum()))
    rhs = np.concatenate([t[eq], np.zeros(int(act.sum()))])
    lam = _gram_solve(X[J], rhs)                 # w = X_Jᵀ lam
    w2 = X[J].T @ lam
    nE = int(eq.sum())
    mu2 = np.zeros(idx_I.size)
    mu2[act] = -lam[nE:]
    return w2, lam[:nE], mu2


def minnorm_pattern(X, t, eq, polish: bool = True) -> PatternQP:
    """Solve ``min ½‖w‖² s.t. X_E w = t_E, X_I w ≤ 0`` in the dual form ``w = Xᵀα``.

    Parameters
    ----------
    X : array_like (n, d)
        Inputs with linearly independent rows (``d >= n``).
    t : array_like (n,)
        Targets; only ``t_E`` is used.
    eq : array_like (n,) of bool
        The equality set ``E``; ``I`` is its complement.
    polish : bool
        Try the active-set polish and keep it when it lowers the largest KKT residual.

    Returns
    -------
    PatternQP

    Raises
    ------
    DataError
        Bad shapes or values, dependent rows of ``X``.
    RuntimeError
        The QP solver reports failure.
    """
    X = np.asarray(X, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    eq = np.asarray(eq, dtype=bool)
    n, d = X.shape
    if t.shape != (n,) or eq.shape != (n,):
        raise DataError(_SOURCE, "t", f"targets and equality mask must have shape ({n},)")
    K = X @ X.T
    if d < n or np.linalg.matrix_rank(K) < n:
        raise DataError(_SOURCE, "X", f"rows are linearly dependent (n={n}, d={d}); the "
                                      "dual form needs d >= n and rows in general position")
    s = float(np.trace(K)) / n                   # variables α' = s α, P = K/s ≈ I for d ≫ n
    Ks = K / s
    nE = int(eq.sum())
    if nE == 0:                                   # only w·x ≤ 0 constraints: w = 0 is optimal
        w, nu, mu = np.zeros(d), np.zeros(0), np.zeros(n)
        return PatternQP(w, np.zeros(n), nu, mu, eq, _kkt(X, t, eq, w, nu, mu), False)
    prob = Problem(P=csc_matrix(Ks), q=np.zeros(n),
                   G=csc_matrix(Ks[~eq]) if nE < n else None,
                   h=np.zeros(n - nE) if nE < n else None,
                   A=csc_matrix(Ks[eq]), b=t[eq])
    for settings in CLARABEL_SETTINGS:
        with warnings.catch_warnings():           # a stalled attempt is retried, not reported
            warnings.simplefilter("ignore", UserWarning)
            sol = solve_problem(prob, solver="clarabel", **settings)
        if sol.found and sol.x is not None:
            break
    else:
        raise RuntimeError(f"min-norm QP: Clarabel found no solution (n={n}, d={d}, "
                           f"cond(K)={np.linalg.cond(K):.1e})")
    alpha = sol.x / s
    w = X.T @ alpha
    nu = -np.asarray(sol.y, dtype=np.float64) / s
    mu = (np.asarray(sol.z, dtype=np.float64) / s) if nE < n else np.zeros(0)
    kkt = _kkt(X, t, eq, w, nu, mu)
    res = PatternQP(w, alpha, nu, mu, eq, kkt, False)
    if not polish:
        return res
    w2, nu2, mu2 = _polish(X, t, eq, mu, w)
    kkt2 = _kkt(X, t, eq, w2, nu2, mu2)
    if max(kkt2.values()) < res.kkt_max:
        alpha2 = np.linalg.solve(K, X @ w2)
        res = PatternQP(w2, alpha2, nu2, mu2, eq, kkt2, True)
    return res


@dataclass
class MinNorm:
    """Pattern-constrained minimum-norm solution for signs ``a`` (module docstring).

    Attributes
    ----------
    W : ndarray (m, d)
        ``w*_j = w*_{a_j} / k_{a_j}``.
    signs : ndarray (m,)
    qp : dict
        ``{+1: PatternQP, −1: PatternQP}`` for the signs present.
    interpolation_residual : float
        ``max_i |f*(x_i) − y_i|`` over the examples some neuron is meant to fit (``a_j y_i > 0``
        for some ``j``): the positives for one sign, every example for both signs.
    inactive_violation : float
        ``max (a_j X w*_j)`` over examples outside neuron ``j``'s set, clipped at 0 (0 when the
        negatives are predicted exactly 0).
    """

    W: np.ndarray
    signs: np.ndarray
    qp: dict
    interpolation_residual: float
    inactive_violation: float

    @property
    def kkt_max(self) -> float:
        return max(q.kkt_max for q in self.qp.values())


def minnorm(X: ArrayLike, y: ArrayLike, signs: ArrayLike = (1.0,)) -> MinNorm:
    """Minimum-norm comparator ``w*`` of THEORY §10 for output signs ``a``.

    ``m = 1``: ``argmin ‖w‖ s.t. X₊w = y₊, X₋w ≤ 0``; ``m = 2`` (``+1, −1``): that and
    ``argmin ‖w‖ s.t. X₋w = |y₋|, X₊w ≤ 0``; ``m > 2``: each sign's solution shared evenly.

    Parameters
    ----------
    X : array_like (n, d)
    y : array_like (n,)
        Non-zero targets.
    signs : array_like (m,)
        Output signs ``a_j = ±1``.

    Returns
    -------
    MinNorm

    Raises
    ------
    DataError
        Bad shapes or values, zero labels, dependent rows.
    """
    X, y = _check_xy(X, y)
    a = _signs(signs)
    qp = {}
    W = np.zeros((a.size, X.shape[1]))
    for s in (1.0, -1.0):
        k = int(np.sum(a == s))
        if k:
            qp[s] = minnorm_pattern(X, s * y, s * y > 0)
            W[a == s] = qp[s].w / k
    B = W @ X.T
    f = a @ np.maximum(B, 0.0)
    meant = np.any(a[:, None] * y[None, :] > 0, axis=0)
    interp = float(np.max(np.abs(f - y)[meant], initial=0.0))
    outside = a[:, None] * y[None, :] < 0
    viol = float(np.max(np.where(outside, B, -np.inf), initial=0.0))
    return MinNorm(W, a, qp, interp, max(viol, 0.0))


def zero_start(X, y, eta: float, signs=(1.0,)) -> np.ndarray:
    """GD's first iterate from ``W_0 = 0`` with ``σ'(0) = 1``: ``w_{1,j} = a_j η Xᵀy``, (m, d)."""
    X, y = _check_xy(X, y)
    a = _signs(signs)
    return a[:, None] * (eta * (X.T @ y))[None, :]


def frozen_limit(X, y, W_start, signs=(1.0,)) -> np.ndarray:
    """Limit of GD whose pattern is frozen at ``S_j = {a_j y > 0}`` from the iterate ``W_start``.

    On the frozen pattern the ``k`` neurons of sign ``s`` jointly fit ``|y|`` on ``S`` and move by a
    common increment in the row space of ``X_S``:

        w_{j,∞} = w_{j,start} + X_Sᵀ (X_S X_Sᵀ)⁻¹ (|y_S| − X_S Σ_{l: a_l = s} w_{l,start}) / k,

    which for ``k = 1`` is ``X_Sᵀ(X_SX_Sᵀ)⁻¹|y_S| + (I − P_S) w_start``. Assumes GD converges on
    the frozen pattern (``0 < c < 2/k`` suffices for ``d ≫ n``).

    Parameters
    ----------
    X : array_like (n, d)
    y : array_like (n,)
    W_start : array_like (m, d)
        Iterate from which the pattern stays at ``S_j``.
    signs : array_like (m,)

    Returns
    -------
    ndarray (m, d)
    """
    X, y = _check_xy(X, y)
    a = _signs(signs)
    W_start = np.asarray(W_start, dtype=np.float64)
    if W_start.shape != (a.size, X.shape[1]):
        raise DataError(_SOURCE, "W_start", f"must have shape {(a.size, X.shape[1])}")
    W = W_start.copy()
    for s in (1.0, -1.0):
        sel = a == s
        k = int(sel.sum())
        S = s * y > 0
        if k == 0 or not S.any():
            continue
        XS = X[S]
        lam = _gram_solve(XS, np.abs(y[S]) - XS @ W_start[sel].sum(axis=0))
        W[sel] += (XS.T @ lam) / k
    return W


def closed_form_limit(X: ArrayLike, y: ArrayLike, eta: float,
                      signs: ArrayLike = (1.0,)) -> np.ndarray:
    """THEORY §10's closed-form GD limit from the zero start ([LWTM26]).

    ``m = 1``: ``w_∞ = X₊ᵀ(X₊X₊ᵀ)⁻¹y₊ + η(I − P₊)X₋ᵀy₋``; ``m = 2``: that and the same for
    ``(X, −y)``; in general :func:`frozen_limit` from :func:`zero_start`. Valid when the pattern is
    ``1[a_j y > 0]`` from step 1 on.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    y : ndarray of shape (n,)
    eta : float
        GD step size.
    signs : array-like of shape (m,)
        Output signs ``a_j = ±1``.

    Returns
    -------
    ndarray of shape (m, d)
        The limit weights ``W_∞``.

    Raises
    ------
    InputError
        Bad shapes, non-finite values or zero labels.
    """
    return frozen_limit(X, y, zero_start(X, y, eta, signs), signs)
