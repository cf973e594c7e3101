"""Linear stability of the Euler–Maruyama step on the data mode (docs/theory.md §2.4).

The drift of the particle system is ``−∇_Θ (N F)`` with ``F = ½R + (λ/2N) Σ_i |θ_i|²``, so one
Euler step is the map ``Θ ↦ Θ − η ∇(NF)(Θ) + noise`` whose Jacobian is ``I − η H``, ``H`` the
Hessian of ``NF`` over all ``N (d+2)`` particle coordinates. It splits into

- the Gauss–Newton part ``(1/(nN)) Σ_j g_j g_jᵀ`` with ``g_j = (∇_θ[a σ(u·x̃_j)])_{i=1..N}``,
  whose non-zero eigenvalues are those of ``K/n``, ``K`` the Gauss–Newton kernel of the
  particle measure
  ``K_jk = (1/N) Σ_i [σ(u_i·x̃_j) σ(u_i·x̃_k) + a_i² σ'(u_i·x̃_j) σ'(u_i·x̃_k) x̃_j·x̃_k]``;
- weight decay ``λ I``;
- the residual curvature, block diagonal: ``Σ_j R_j ∇²_θ[a σ(u·x̃_j)]`` for each particle.

The step is stable on a mode of ``H`` with eigenvalue ``h`` iff ``|1 − ηh| < 1``, i.e.
``η h < 2``; the data mode is the top one, ``h ≈ λmax(K)/n + c`` where ``c`` is the Rayleigh
quotient of the last two parts on the top Gauss–Newton eigenvector (first-order perturbation,
exact to ``O(λ² n/λmax(K))``). At a ``τ → 0`` stationary point (balanced rays,
``a g = −λ u``) ``0 ≤ c ≤ λ``. Beyond ``η h = 2`` the predictor alternates between two mirror
states every step.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from solvers.reference_methods import QUADRATURE_MAX_D

#: Euler is stable on a linear mode of curvature ``h`` iff ``η h`` is below this.
STABILITY_LIMIT = 2.0


@dataclass(frozen=True)
class DataMode:
    """Top curvature of the particle system's drift (see the module docstring).

    Attributes
    ----------
    lambda_max_K : float
        Largest eigenvalue of the Gauss–Newton kernel ``K`` (n, n).
    curvature : float
        ``h = λmax(K)/n + c``: the Rayleigh quotient of the full Hessian ``H`` on the top
        Gauss–Newton eigenvector (inverse time).
    correction : float
        ``c`` (weight decay plus residual curvature), of order ``λ``.
    """

    lambda_max_K: float
    curvature: float
    correction: float

    def eta_lambda_max(self, eta: float) -> float:
        """The dimensionless stability number ``η h``; the step is unstable above 2."""
        return float(eta) * self.curvature

    def largest_stable_eta(self) -> float:
        """``2 / h``: the largest step for which this mode is stable."""
        return STABILITY_LIMIT / self.curvature if self.curvature > 0 else float("inf")


#: Data sets with at most this many points form ``K`` (n, n) and decompose it densely
#: (``n = 4096``: 128 MiB); larger ones find its top eigenpair by Lanczos iteration on
#: products with the factors of ``K``, never forming it (``n = 10⁵`` would need 75 GiB).
DENSE_MAX = 4096
#: Bytes of the factors ``S, P, Q`` (3 n N doubles) kept between the Lanczos products; above,
#: they are recomputed in blocks of rows for each product (slower, memory O(N · rows)).
FACTOR_BUDGET = 1 << 30
#: Systems with ``N n² <=`` this form ``K`` by loops in one compiled call
#: (``solvers._curvature.small_data_mode``), where the Python calls of the BLAS path would cost
#: more than the arithmetic; the two agree to round-off.
SMALL_MAX = 1 << 16
#: Rows of ``X`` per block of the factors.
BLOCK_ROWS = 4096


@functools.lru_cache(maxsize=16)
def _activation(activation, sharpness, cap):
    """The kernels' code and constants of an activation, computed once (not to be
    modified)."""
    from solvers import _activations
    from solvers.limits import ACT_CODES
    kind = ACT_CODES[activation]
    p = _activations.activation_params(kind, sharpness, cap)
    return kind, p


def data_mode(theta, X, R, lam, activation="relu", sharpness=10.0, cap=3.0, *,
              dense_max=None, factor_budget=None, block_rows=None) -> DataMode:
    """Top curvature of the Euler step's drift at particles ``theta``.

    Parameters
    ----------
    theta : ndarray of shape (N, d+2)
        Particles, rows ``(a, w_1..w_d, b)``.
    X : ndarray of shape (n, d)
    R : ndarray of shape (n,)
        Scaled residuals ``(f_N(x_j) − y_j)/n`` of these particles (e.g. ``Stepper.R``).
    lam : float
        Weight decay ``λ``.
    activation, sharpness, cap
        As in :class:`solvers.stepper.Stepper`. The residual curvature includes only the
        ``σ'`` cross term of ``∇²[a σ(u·x̃)]`` (exact for relu; the ``a σ''`` term of smooth
        activations is left out).
    dense_max, factor_budget, block_rows : int, optional
        Defaults :data:`DENSE_MAX`, :data:`FACTOR_BUDGET` (bytes), :data:`BLOCK_ROWS`.

    Returns
    -------
    DataMode

    Raises
    ------
    scipy.sparse.linalg.ArpackNoConvergence
        ``n > dense_max`` and the Lanczos iteration found no eigenvalue at all (not seen:
        the top eigenvalue of ``K`` is well separated).

    Notes
    -----
    ``n ≤ dense_max``: cost ``O(N n (d + n) + n³)``, memory ``O(n (n + N))``: the factors of
    ``K`` (numba, ``solvers._curvature``) and their products (BLAS), one symmetric
    eigendecomposition of size ``n``, one more pass over the particles for the correction;
    for ``N n² <=`` :data:`SMALL_MAX` all of it in one compiled call, ``K`` formed by loops.
    ``n > dense_max``: ``K`` is never formed; ARPACK's Lanczos iteration
    (``scipy.sparse.linalg.eigsh``, fixed start vector, so deterministic) multiplies by
    ``K = (S Sᵀ + Σ_c D_c Q Qᵀ D_c)/N``, ``D_c = diag(x̃_{·c})``, at ``O(N n d)`` a product;
    memory ``O(n N)`` for the factors within ``factor_budget``, ``O(N · block_rows + n)`` beyond.
    The two paths agree to round-off (tests/solvers/test_stability.py).
    """
    from solvers import _curvature
    kind, p = _activation(activation, sharpness, cap)
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    R = np.ascontiguousarray(R, dtype=np.float64)
    N, n = theta.shape[0], X.shape[0]
    T = np.ascontiguousarray(theta.T)
    if n > (DENSE_MAX if dense_max is None else dense_max):
        return _data_mode_lanczos(
            T, X, R, lam, kind, p,
            FACTOR_BUDGET if factor_budget is None else factor_budget,
            BLOCK_ROWS if block_rows is None else block_rows)
    if N * n * n <= SMALL_MAX:
        kappa, q = _curvature.small_data_mode(T, X, R, kind, p)
        return _mode(float(kappa), float(q), N, n, lam)
    S, P, Q = np.empty((n, N)), np.empty((n, N)), np.empty((n, N))
    _curvature.gauss_newton_factors(T, X, kind, p, S, P, Q)
    K = (S @ S.T + (Q @ Q.T) * (X @ X.T + 1.0)) / N
    vals, vecs = np.linalg.eigh(K)
    kappa, e = float(vals[-1]), np.ascontiguousarray(vecs[:, -1])
    if not kappa > 0:
        return _mode(kappa, 0.0, N, n, lam)
    return _mode(kappa, _curvature.residual_curvature(T, X, e, R, S, P), N, n, lam)


def _mode(kappa, q, N, n, lam) -> DataMode:
    """The data mode from ``κ`` (top eigenvalue of ``K``) and ``q`` (the residual term
    ``Σ_i 2 α_i a_i (β_i·h_i)`` on its eigenvector): ``v = (α_i, a_i β_i)`` has ``|v|² = N κ``
    (see the module docstring), so the correction is ``λ + q/(N κ)``; ``κ <= 0`` gives
    curvature and correction ``λ``."""
    if not kappa > 0:
        return DataMode(max(kappa, 0.0), float(lam), float(lam))
    corr = float(lam) + q / (N * kappa)
    return DataMode(kappa, kappa / n + corr, corr)


def _factor_blocks(T, X, kind, p, budget, rows):
    """A callable returning the blocks ``(lo, hi, S, P, Q)`` of the factors of ``K`` over rows
    ``lo:hi`` of ``X``; kept in memory when ``3 n N`` doubles fit ``budget`` bytes, else
    recomputed at each call."""
    from solvers import _curvature
    n, N = X.shape[0], T.shape[1]
    rows = max(1, int(rows))

    def compute():
        for lo in range(0, n, rows):
            hi = min(n, lo + rows)
            S, P, Q = (np.empty((hi - lo, N)) for _ in range(3))
            _curvature.gauss_newton_factors(T, X[lo:hi], kind, p, S, P, Q)
            yield lo, hi, S, P, Q

    if 3 * 8 * n * N <= budget:
        kept = list(compute())
        return lambda: kept
    return compute


def _data_mode_lanczos(T, X, R, lam, kind, p, budget, rows) -> DataMode:
    """:func:`data_mode` for large ``n``: the top eigenpair of ``K`` by Lanczos iteration on
    its factors, and the correction from the same blocks (NumPy)."""
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh
    n, d = X.shape
    N = T.shape[1]
    Xl = np.hstack([X, np.ones((n, 1))])
    blocks = _factor_blocks(T, X, kind, p, budget, rows)

    def matvec(v):
        v = np.asarray(v, dtype=np.float64).ravel()
        s = np.zeros(N)
        W = np.zeros((N, d + 1))
        for lo, hi, S, _, Q in blocks():
            s += S.T @ v[lo:hi]
            W += Q.T @ (v[lo:hi, None] * Xl[lo:hi])
        out = np.empty(n)
        for lo, hi, S, _, Q in blocks():
            out[lo:hi] = S @ s + np.einsum("jc,jc->j", Q @ W, Xl[lo:hi])
        return out / N

    op = LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    v0 = np.random.default_rng(0).standard_normal(n)        # fixed: the result is reproducible
    try:
        vals, vecs = eigsh(op, k=1, which="LA", v0=v0, tol=1e-12)
    except ArpackNoConvergence as exc:
        if not len(exc.eigenvalues):
            raise
        vals, vecs = exc.eigenvalues, exc.eigenvectors
    kappa, e = float(vals[-1]), np.ascontiguousarray(vecs[:, -1])
    if not kappa > 0:
        return _mode(kappa, 0.0, N, n, lam)
    # the correction: Σ_i 2 α_i a_i (β_i·h_i) (see solvers._curvature.residual_curvature)
    alpha = np.zeros(N)
    B = np.zeros((N, d + 1))
    H = np.zeros((N, d + 1))
    for lo, hi, S, P, _ in blocks():
        alpha += S.T @ e[lo:hi]
        B += P.T @ (e[lo:hi, None] * Xl[lo:hi])
        H += P.T @ (R[lo:hi, None] * Xl[lo:hi])
    total = float(np.sum(2.0 * alpha * T[0] * np.einsum("ic,ic->i", B, H)))
    return _mode(kappa, total, N, n, lam)


def _kernel_of_directions(V, X, w_value, w_slope) -> np.ndarray:
    """``K = Σ_k [w_value_k s_k s_kᵀ + w_slope_k (s'_k s'_kᵀ) ∘ (X̃X̃ᵀ)]`` with
    ``s_k = (v_k·x̃_j)_+``, ``s'_k = 1[v_k·x̃_j > 0]``, for unit directions ``V`` (m, d+1)."""
    Xl = np.hstack([np.asarray(X, float), np.ones((len(X), 1))])
    Z = np.asarray(V, float) @ Xl.T
    S = np.maximum(Z, 0.0)
    P = (Z > 0).astype(float)
    return (S.T * w_value) @ S + ((P.T * w_slope) @ P) * (Xl @ Xl.T)


def _top(K, n, lam) -> DataMode:
    kappa = float(np.linalg.eigvalsh(K)[-1])
    return DataMode(kappa, kappa / n + float(lam), float(lam))


def convex_data_mode(solution, X, lam) -> DataMode:
    """Data mode of the ``τ → 0`` convex reference (relu): balanced rays ``|a| = |u|`` carry
    ``r² = |c_k|``, so ``K = Σ_k |c_k| [s_k s_kᵀ + (s'_k s'_kᵀ) ∘ X̃X̃ᵀ]``. The correction is
    taken at its bound ``λ`` (``0 ≤ c ≤ λ`` at a stationary point).

    Parameters
    ----------
    solution : solvers.convex.ConvexSolution
    X : ndarray (n, d)
    lam : float
    """
    w = np.abs(np.asarray(solution.weights, float))
    if not len(w):
        return DataMode(0.0, float(lam), float(lam))
    K = _kernel_of_directions(solution.directions, X, w, w)
    return _top(K, len(X), lam)


def gibbs_data_mode(solution, X, lam, tau, m=None) -> DataMode:
    """Data mode of the Gibbs reference at temperature ``τ`` (relu, ``d ≤ 2``), by a midpoint
    rule on ``S^d``: ``K = ∫ π(v) (E[r²|v] s sᵀ + E[a²|v] (s' s'ᵀ) ∘ X̃X̃ᵀ) dv`` with
    ``E[a²|v] = E[r²|v] G(v)² + τ/λ`` (docs/theory.md, Gibbs reference). The correction is taken
    at its bound ``λ``.

    Parameters
    ----------
    solution : solvers.gibbs.GibbsSolution
    X : ndarray (n, d)
    lam, tau : float
    m : int, optional
        Grid size: ``m`` angles on ``S¹`` (default 20000) or ``m × 2m`` on ``S²`` (default 300).
    """
    d = np.asarray(X).shape[1]
    if d == 1:
        m = m or 20000
        th = (np.arange(m) + 0.5) * 2 * np.pi / m
        V = np.stack([np.cos(th), np.sin(th)], axis=1)
        dA = np.full(m, 2 * np.pi / m)
    elif d == 2:
        m = m or 300
        th = (np.arange(m) + 0.5) * np.pi / m
        ph = (np.arange(2 * m) + 0.5) * np.pi / m
        T, P = np.meshgrid(th, ph, indexing="ij")
        V = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)],
                     axis=-1).reshape(-1, 3)
        dA = (np.sin(T) * (np.pi / m) ** 2).ravel()
    else:
        raise ValueError(f"the Gibbs data mode needs d <= {QUADRATURE_MAX_D} (the quadrature "
                         f"back end), got d = {d}")
    mass = solution.density(V) * dA
    r2 = solution.second_moment(V)
    G = solution.G(V)
    K = _kernel_of_directions(V, X, mass * r2, mass * (r2 * G ** 2 + float(tau) / float(lam)))
    return _top(K, len(X), lam)


def reference_limits(X, y, lam, taus, eta=None, gibbs_max_d=2, gibbs_from=0.1) -> list:
    """Predicted data modes from the exact references, for a guard before a run (relu).

    The ``τ → 0`` convex reference always; for ``d ≤ gibbs_max_d`` also the Gibbs reference
    at the hottest positive temperature of ``taus`` (where, on the shipped data, the thermal
    spread makes ``h`` largest: up to 9× the convex value on D2), unless ``eta`` is given and
    ``η h`` of the convex reference is below ``gibbs_from`` (the Gibbs solve costs seconds).

    Returns
    -------
    list of (str, float, DataMode)
        ``(reference name, τ, data mode)``; the Gibbs entry is left out when its fixed point
        does not converge.
    """
    from solvers.convex import convex
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    out = [("convex", 0.0, convex_data_mode(convex(X, y, lam), X, lam))]
    hot = max((float(t) for t in taus if float(t) > 0), default=None)
    if eta is not None and out[0][2].eta_lambda_max(eta) < gibbs_from:
        return out
    if hot is not None and X.shape[1] <= gibbs_max_d:
        from solvers.gibbs import GibbsConvergenceError, gibbs
        try:
            out.append(("Gibbs", hot, gibbs_data_mode(gibbs(X, y, lam, hot), X, lam, hot,
                                                      m=None if X.shape[1] == 1 else 100)))
        except GibbsConvergenceError:
            pass
    return out
