"""Private numba kernels: the only place in the project with numba code.

Particles are rows ``theta[i] = (a, w_1..w_d, b)`` of a C-contiguous float64 array of shape
``(N, d+2)``. One Euler–Maruyama step of the mean-field Langevin dynamics (THEORY §2)::

    theta_i <- theta_i - eta * grad Psi(theta_i; rho_N) + sqrt(2 eta tau) xi_i

Reproducibility: the Gaussian noise is a pure function of ``(seed, step, particle, coordinate)``
(a counter-based generator), and every parallel loop writes disjoint outputs with serial inner
sums over a fixed blocking of the particles, so results are bitwise independent of the number
of threads.
"""

from __future__ import annotations

import numba as nb
import numpy as np

#: Particles per block in the reduction over particles. Fixed (never derived from the thread
#: count) so that the floating-point summation order, hence the result, is reproducible.
BLOCK = 512

ACT_RELU = 0
ACT_SOFTPLUS = 1
ACT_CAPPED = 2

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_TWO_M53 = 1.0 / 9007199254740992.0
_TWO_PI = 6.283185307179586


@nb.njit(inline="always")
def _mix(z):
    """splitmix64 finaliser: a bijective avalanche mix of a uint64."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@nb.njit(inline="always")
def _key(seed, step, particle, pair):
    h = _mix(np.uint64(seed) + _GOLD)
    h = _mix(h ^ (np.uint64(step) * _GOLD))
    h = _mix(h ^ (np.uint64(particle) + _M1))
    h = _mix(h ^ (np.uint64(pair) + _M2))
    return h


@nb.njit(inline="always")
def _normal_pair(seed, step, particle, pair):
    """Two independent N(0,1) draws keyed by (seed, step, particle, pair) via Box–Muller."""
    h = _key(seed, step, particle, pair)
    u1 = (np.float64(_mix(h ^ np.uint64(1)) >> _S11) + 1.0) * _TWO_M53   # (0, 1]
    u2 = np.float64(_mix(h ^ np.uint64(2)) >> _S11) * _TWO_M53           # [0, 1)
    r = np.sqrt(-2.0 * np.log(u1))
    t = _TWO_PI * u2
    return r * np.cos(t), r * np.sin(t)


@nb.njit(cache=True)
def gaussian_block(seed, step, n_particles, dim, out):
    """Fill ``out`` (n_particles, dim) with the noise the kernel uses at ``step``.

    Coordinate ``k`` of particle ``i`` is element ``k % 2`` of the pair keyed by
    ``(seed, step, i, k // 2)``.
    """
    for i in range(n_particles):
        for p in range((dim + 1) // 2):
            g0, g1 = _normal_pair(seed, step, i, p)
            out[i, 2 * p] = g0
            if 2 * p + 1 < dim:
                out[i, 2 * p + 1] = g1


@nb.njit(inline="always")
def _act(z, kind, sharp, cap):
    if kind == ACT_RELU:
        return z if z > 0.0 else 0.0
    # softplus of sharpness t: log(1 + exp(t z)) / t, evaluated stably
    tz = sharp * z
    if tz > 0.0:
        sp = (tz + np.log1p(np.exp(-tz))) / sharp
    else:
        sp = np.log1p(np.exp(tz)) / sharp
    return sp


@nb.njit(inline="always")
def _dact(z, kind, sharp, cap):
    if kind == ACT_RELU:
        return 1.0 if z > 0.0 else 0.0
    tz = sharp * z
    if tz >= 0.0:
        return 1.0 / (1.0 + np.exp(-tz))
    e = np.exp(tz)
    return e / (1.0 + e)


@nb.njit(parallel=True, cache=True)
def forward(theta, X, Z, partial, f):
    """Pre-activations and predictor on the training points.

    Writes ``Z[i, j] = w_i·x_j + b_i`` (N, n) and ``f[j] = (1/N) Σ_i a_i σ(Z[i, j])`` (n,),
    summing over fixed blocks of ``BLOCK`` particles (``partial`` is (n_blocks, n) scratch).
    Only relu is used here; see :func:`forward_act`.
    """
    forward_act(theta, X, Z, partial, f, ACT_RELU, 1.0, 1.0)


@nb.njit(parallel=True, cache=True)
def forward_act(theta, X, Z, partial, f, kind, sharp, cap):
    N = theta.shape[0]
    n, d = X.shape
    nblocks = partial.shape[0]
    for blk in nb.prange(nblocks):
        lo = blk * BLOCK
        hi = min(lo + BLOCK, N)
        for j in range(n):
            partial[blk, j] = 0.0
        for i in range(lo, hi):
            a = theta[i, 0]
            b = theta[i, d + 1]
            for j in range(n):
                z = b
                for k in range(d):
                    z += theta[i, 1 + k] * X[j, k]
                Z[i, j] = z
                partial[blk, j] += a * _act(z, kind, sharp, cap)
    for j in range(n):
        s = 0.0
        for blk in range(nblocks):
            s += partial[blk, j]
        f[j] = s / N


@nb.njit(parallel=True, cache=True)
def update(theta, X, Z, R, lam, eta, tau, seed, step, kind, sharp, cap):
    """In-place Euler–Maruyama update of every particle given pre-activations ``Z`` (N, n)
    and scaled residuals ``R`` (n,) (THEORY §2)::

        grad_a = Σ_j R_j σ(z_ij) + lam a
        grad_u = a Σ_j R_j σ'(z_ij) x̃_j + lam u
        theta <- theta - eta grad + sqrt(2 eta tau) xi(seed, step, i, k)
    """
    N = theta.shape[0]
    n, d = X.shape
    D = d + 2
    npair = (D + 1) // 2
    sd = np.sqrt(2.0 * eta * tau)
    for i in nb.prange(N):
        a = theta[i, 0]
        ga = 0.0
        gb = 0.0
        for j in range(n):
            z = Z[i, j]
            ga += R[j] * _act(z, kind, sharp, cap)
            gb += R[j] * _dact(z, kind, sharp, cap)
        # weights w_k: a Σ_j R_j σ'(z_ij) x_jk
        for k in range(d):
            gk = 0.0
            for j in range(n):
                gk += R[j] * _dact(Z[i, j], kind, sharp, cap) * X[j, k]
            theta[i, 1 + k] -= eta * (a * gk + lam * theta[i, 1 + k])
        theta[i, d + 1] -= eta * (a * gb + lam * theta[i, d + 1])
        theta[i, 0] = a - eta * (ga + lam * a)
        if tau > 0.0:
            for p in range(npair):
                g0, g1 = _normal_pair(seed, step, i, p)
                theta[i, 2 * p] += sd * g0
                if 2 * p + 1 < D:
                    theta[i, 2 * p + 1] += sd * g1


@nb.njit(cache=True)
def run_steps(theta, X, y, Z, partial, f, R, lam, eta, tau, seed, step0, nsteps,
              kind, sharp, cap):
    """Advance ``nsteps`` full-batch steps from global step ``step0``; on return ``f`` and ``R``
    hold the predictor and residuals *after* the last step. Returns 0, or 1 if a non-finite
    residual appeared (the particles are then left at the offending step)."""
    n = X.shape[0]
    for s in range(nsteps):
        forward_act(theta, X, Z, partial, f, kind, sharp, cap)
        for j in range(n):
            R[j] = (f[j] - y[j]) / n
            if not np.isfinite(R[j]):
                return 1
        update(theta, X, Z, R, lam, eta, tau, seed, step0 + s, kind, sharp, cap)
    forward_act(theta, X, Z, partial, f, kind, sharp, cap)
    for j in range(n):
        R[j] = (f[j] - y[j]) / n
        if not np.isfinite(R[j]):
            return 1
    return 0
