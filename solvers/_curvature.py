"""Data-mode curvature kernels (``solvers.stability``): the factors of the Gauss–Newton kernel
and its Hessian correction, for particles in the column layout of ``solvers._kernels``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from solvers._activations import ACT_RELU, _act_pair
from solvers._numba_cache import install as _install_cache_fallbacks

_install_cache_fallbacks()   # a damaged or unwritable numba cache: recompile, with a note


@nb.njit(cache=True)
def gauss_newton_factors(T, X, kind, p, S, P, Q):
    """The factors of the Gauss–Newton kernel ``K = (S Sᵀ + (Q Qᵀ) ∘ X̃X̃ᵀ)/N`` for particles
    ``T`` in column layout (d+2, N): ``S_ji = σ(z_ij)``, ``P_ji = σ'(z_ij)``,
    ``Q_ji = a_i σ'(z_ij)``, each (n, N). ``O(N n d)``, serial, vectorised over particles (the
    products, being reductions, are left to BLAS)."""
    N = T.shape[1]
    n, d = X.shape
    a = T[0]
    for j in range(n):
        sj = S[j]
        pj = P[j]
        qj = Q[j]
        for i in range(N):
            z = T[d + 1, i]
            for k in range(d):
                z += T[1 + k, i] * X[j, k]
            if kind == ACT_RELU:
                sj[i] = z if z > 0.0 else 0.0
                pj[i] = 1.0 if z > 0.0 else 0.0
            else:
                sj[i], pj[i] = _act_pair(z, kind, p)
            qj[i] = a[i] * pj[i]


@nb.njit(cache=True)
def residual_curvature(T, X, e, R, S, P):
    """``Σ_i 2 α_i a_i (β_i·h_i)`` with ``α_i = Σ_j e_j σ(z_ij)``,
    ``β_i = Σ_j e_j σ'(z_ij) x̃_j``, ``h_i = Σ_j R_j σ'(z_ij) x̃_j``: the quadratic form of the
    residual part of the Hessian on the direction the kernel eigenvector ``e`` spans. ``S``,
    ``P``: as left by :func:`gauss_newton_factors` for the same ``T``. Serial, vectorised over
    particles."""
    N = T.shape[1]
    n, d = X.shape
    alpha = np.zeros(N)
    B = np.zeros((d + 1, N))
    H = np.zeros((d + 1, N))
    for j in range(n):
        ej = e[j]
        rj = R[j]
        sj = S[j]
        pj = P[j]
        for i in range(N):
            alpha[i] += ej * sj[i]
        for c in range(d + 1):
            xc = X[j, c] if c < d else 1.0
            be = ej * xc
            hr = rj * xc
            Bc = B[c]
            Hc = H[c]
            for i in range(N):
                Bc[i] += be * pj[i]
                Hc[i] += hr * pj[i]
    total = 0.0
    a = T[0]
    for i in range(N):
        bh = 0.0
        for c in range(d + 1):
            bh += B[c, i] * H[c, i]
        total += 2.0 * alpha[i] * a[i] * bh
    return total


@nb.njit(cache=True)
def small_data_mode(T, X, R, kind, p):
    """``(κ, q)`` for a small system in one call: ``κ`` the top eigenvalue of the Gauss–Newton
    kernel ``K`` (formed by loops, ``O(N n² d)``; the eigenpair by LAPACK's symmetric solver)
    and ``q`` = :func:`residual_curvature` on its eigenvector; ``q = 0`` when ``κ <= 0``.
    What ``solvers.stability.data_mode`` computes with BLAS products for larger systems, to
    round-off; one compiled call costs a few µs where those products and their Python
    calls cost some 40 µs (an observation every few steps of a small system)."""
    N = T.shape[1]
    n, d = X.shape
    S = np.empty((n, N))
    P = np.empty((n, N))
    Q = np.empty((n, N))
    gauss_newton_factors(T, X, kind, p, S, P, Q)
    K = np.empty((n, n))
    for j in range(n):
        for k in range(j + 1):
            xx = 1.0
            for c in range(d):
                xx += X[j, c] * X[k, c]
            acc = 0.0
            for i in range(N):
                acc += S[j, i] * S[k, i] + Q[j, i] * Q[k, i] * xx
            K[j, k] = acc / N
            K[k, j] = acc / N
    vals, vecs = np.linalg.eigh(K)
    kappa = vals[n - 1]
    if not kappa > 0.0:
        return kappa, 0.0
    e = np.ascontiguousarray(vecs[:, n - 1])
    return kappa, residual_curvature(T, X, e, R, S, P)
