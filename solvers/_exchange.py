"""Private numba kernel of the exchange move of the exact sampler (``dynamics.exchange``).

At low ``τ`` the exact law ``π_N`` puts each ray of the measure on one or a few heavy particles,
and what is slow is the split of the mass between the rays: the masses ``t_i = |θ_i|²`` of the
heavy particles are pinned, each given the others, within about ``sqrt(τ/(2B_i))`` (a few units
of ``t``), while their combinations along which the predictor changes little spread hundreds
of times wider. Moves of one particle at a time (Langevin, radial) then walk along those
combinations in steps of the narrow width, the slow random walk of a Gibbs sampler on a
correlated law (measured: plane10_light, ``N = 1000``, ``τ = 10⁻⁴``, ray masses with an
integrated autocorrelation time of 1000–2000 passes; docs/theory.md §2.6).

The exchange move resamples those masses together. For a ReLU network ``f`` is linear in every
``t_i`` along the particle's direction ``ω_i = θ_i/|θ_i|``: ``a σ(u·x̃) = t ω_a σ(ω_u·x̃)``.

* **Who takes part.** The particles are grouped into *cells* by their activation pattern on
  the training points and the sign of ``a``. A cell is *stiff* when
  ``κ_r = Σ_j (Σ_{i∈r} a_i σ(u_i·x̃_j))² / (n N τ)`` exceeds :data:`EXCHANGE_STIFF` (for a
  cell of one particle ``κ`` is ``2 B t²/τ`` of the radial move,
  ``solvers._mala._radial_proposal``: the data's curvature of ``log π`` along the mass over
  that of the volume term). At low ``τ`` the stiff cells are those of the heavy particles.
* **What moves.** Each cell ``r`` with mass ``M_r = Σ_{i∈r} t_i`` is scaled as a whole,
  ``t_i → t_i M'_r / M_r``: every direction, pattern and share ``p_i = t_i/M_r`` within a cell
  is kept, and so is every other particle. Given all of those, the law of
  ``M = (M_1..M_R)`` is ``∝ Π_r M_r^{α_r} exp(−U(M)/τ)`` with ``α_r = |r| (m + 1) − 1``,
  ``m = (d+2)/2 − 1`` (the volume ``t^m dt`` of each particle and the Jacobian ``M^{|r|−1}``
  of ``t = M p``), and ``U`` is quadratic in ``M``:
  ``U = (N/(2n)) Σ_j (c_j + Σ_r M_r Φ_rj)² + (λ/2) Σ_r M_r + const``, with
  ``Φ_rj = Σ_{i∈r} a_i σ(u_i·x̃_j) / (N M_r)`` and ``c`` the errors without the cells.
* **The proposal** is a Langevin step in ``M`` with the position-dependent metric
  ``G(M) = (N/(nτ)) Φ Φᵀ + diag(α_r/M_r²)``, the Hessian of ``−log`` of that law (exact in
  its quadratic part): ``M' = M + (h/2) G⁻¹ ∇log π + sqrt(h) G^{-1/2} ξ``,
  ``h =`` :data:`EXCHANGE_STEP`, accepted with the Metropolis–Hastings ratio of the two
  Gaussian densities ``N(M'; M + (h/2)G(M)⁻¹∇, h G(M)⁻¹)`` and back. Scaling keeps every
  pattern, so the cells are the same at both ends, and ``κ_r`` grows as ``M_r²``: a proposal
  that would make a stiff cell soft (``M'_r <= M_r sqrt(EXCHANGE_STIFF/κ_r)``) is refused,
  so the stiff cells are the same at both ends too. The move is then a
  Metropolis–Hastings kernel on the states with those stiff cells, and ``π_N`` is invariant
  (the skips below depend only on them and on what the move keeps).
* Skipped (no move, counted as made and refused) when no cell is stiff, more than
  :data:`EXCHANGE_CELLS` are, or the metric is not positive definite in floating point.

Random numbers: key ``k9`` (SplitMix64 output 9 of the seed), position ``step·M + r`` for the
normal of cell ``r`` and ``step·M + EXCHANGE_CELLS`` for the acceptance uniform.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from solvers._kernels import _z
from solvers._rng import _hash, _mix, _normal, _position, _seed_output, _uniform

#: Stiffness ``κ_r`` above which a cell is stiff and takes part in the exchange move.
EXCHANGE_STIFF = 100.0
#: Most cells the move handles; with more it is skipped (its cost is ``O(R³)`` in cells).
EXCHANGE_CELLS = 64
#: Step ``h`` of the move's Langevin proposal in its metric (acceptance 0.4–0.8 measured).
EXCHANGE_STEP = 0.5


@nb.njit(inline="always")
def exchange_key(seed):
    """The key ``k9`` of the exchange move (SplitMix64 output 9 of the seed)."""
    return _seed_output(seed, 9)


@nb.njit
def exchange_workspace(n, N, R):
    """The arrays :func:`exchange_move` works in, for ``n`` points, ``N`` particles and at
    most ``R`` stiff cells (:data:`EXCHANGE_CELLS`; 0 and 0 where no move is made: empty)."""
    return (np.empty(N, dtype=np.uint64), np.empty(N, dtype=np.int64), np.empty(N),
            np.empty((R, n)), np.empty((8, R)), np.empty((3, R, R)), np.empty(n), np.empty(n))


@nb.njit(inline="always")
def _cholesky(G, L, R):
    """Lower Cholesky factor ``L`` of the leading ``R × R`` block of ``G``; False if that block
    is not positive definite in floating point."""
    for i in range(R):
        for j in range(i + 1):
            s = G[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if not s > 0.0:
                    return False
                L[i, i] = math.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
    return True


@nb.njit(inline="always")
def _solve(L, b, x, R):
    """``x = (L Lᵀ)⁻¹ b`` (leading ``R`` entries)."""
    for i in range(R):
        s = b[i]
        for k in range(i):
            s -= L[i, k] * x[k]
        x[i] = s / L[i, i]
    _back(L, x, x, R)


@nb.njit(inline="always")
def _back(L, b, x, R):
    """``x = L⁻ᵀ b`` (a draw ``L⁻ᵀ ξ`` has covariance ``(L Lᵀ)⁻¹``); ``b`` may be ``x``."""
    for i in range(R - 1, -1, -1):
        s = b[i]
        for k in range(i + 1, R):
            s -= L[k, i] * x[k]
        x[i] = s / L[i, i]


@nb.njit(inline="always")
def _log_target(M, alpha, Phi, c, R, n, N, lam, tau, e, grad):
    """``log π(M)`` up to a constant, its gradient into ``grad`` and the errors ``e``;
    ``-inf`` where some ``M_r <= 0``."""
    for j in range(n):
        e[j] = c[j]
    lp = 0.0
    msum = 0.0
    for r in range(R):
        if not M[r] > 0.0:
            return -math.inf
        lp += alpha[r] * math.log(M[r])
        msum += M[r]
        for j in range(n):
            e[j] += M[r] * Phi[r, j]
    ee = 0.0
    for j in range(n):
        ee += e[j] * e[j]
    lp -= (N / (2.0 * n) * ee + 0.5 * lam * msum) / tau
    for r in range(R):
        s = 0.0
        for j in range(n):
            s += e[j] * Phi[r, j]
        grad[r] = alpha[r] / M[r] - (N / n * s + 0.5 * lam) / tau
    return lp


@nb.njit(inline="always")
def _metric(A, M, alpha, R, G, L):
    """``G = A + diag(α/M²)`` and its Cholesky factor; False if not positive definite."""
    for r in range(R):
        for q in range(R):
            G[r, q] = A[r, q]
        G[r, r] += alpha[r] / (M[r] * M[r])
    return _cholesky(G, L, R)


@nb.njit(inline="always")
def _log_q(to, frm, grad, G, L, R, h, buf):
    """``log N(to; frm + (h/2) G⁻¹ grad, h G⁻¹)`` up to the constant that does not depend on
    ``G``."""
    _solve(L, grad, buf, R)
    for r in range(R):
        buf[r] = to[r] - frm[r] - 0.5 * h * buf[r]
    quad = 0.0
    for r in range(R):
        s = 0.0
        for q in range(R):
            s += G[r, q] * buf[q]
        quad += buf[r] * s
    ld = 0.0
    for r in range(R):
        ld += math.log(L[r, r])
    return ld - 0.5 * quad / h


@nb.njit
def exchange_move(T, XT, e, lam, tau, k9, step, m_rad, ws):
    """One exchange move of the particles ``T`` ((d+2, N), column layout, ReLU), the errors
    ``e = f − y`` (n,) kept up to date. Returns ``(made, accepted)`` as 0/1."""
    key, order, tsq, Phi, V, W, e1, c = ws
    D, N = T.shape
    d = D - 2
    n = XT.shape[1]
    Rmax = Phi.shape[0]
    M0, alpha, smin, grad0, grad1, M1, xi, first = (V[0], V[1], V[2], V[3], V[4], V[5], V[6],
                                                    V[7])
    A, G, L = W[0], W[1], W[2]
    # every particle's cell: a hash of its activation pattern and the sign of a (two cells
    # that share a hash are one cell to the move, which is then still exact: any grouping
    # that the move keeps will do)
    for i in range(N):
        tt = 0.0
        for k in range(D):
            tt += T[k, i] * T[k, i]
        tsq[i] = tt
        hsh = _mix(np.uint64(1 if T[0, i] > 0.0 else 2))
        word = np.uint64(0)
        for j in range(n):
            if _z(T, i, XT, j, ()) > 0.0:       # the kernels' FMAs, as the pass computes it
                word |= np.uint64(1) << np.uint64(j & 63)
            if (j & 63) == 63 or j == n - 1:
                hsh = _mix(hsh ^ word)
                word = np.uint64(0)
        key[i] = hsh
    order[:] = np.argsort(key, kind="mergesort")
    # a cell can only be stiff if its mass is: |Σ_i a_i σ(u_i·x̃_j)| <= Σ_i t_i |x̃_j| / 2
    sx = 0.0
    for j in range(n):
        sx += 1.0
        for k in range(d):
            sx += XT[k, j] * XT[k, j]
    scale = 1.0 / (n * N * tau)
    t_low = math.sqrt(4.0 * EXCHANGE_STIFF / (sx * scale))
    R = 0
    lo = 0
    while lo < N:
        hi = lo
        mass = 0.0
        while hi < N and key[order[hi]] == key[order[lo]]:
            mass += tsq[order[hi]]
            hi += 1
        if mass > t_low:
            for j in range(n):
                e1[j] = 0.0
            for q in range(lo, hi):
                i = order[q]
                a = T[0, i]
                for j in range(n):
                    z = _z(T, i, XT, j, ())
                    if z > 0.0:
                        e1[j] += a * z
            kap = 0.0
            for j in range(n):
                kap += e1[j] * e1[j]
            kap *= scale
            if kap > EXCHANGE_STIFF:
                if R == Rmax:
                    return 1, 0
                M0[R] = mass
                alpha[R] = (hi - lo) * (m_rad + 1.0) - 1.0
                smin[R] = math.sqrt(EXCHANGE_STIFF / kap)
                first[R] = lo
                for j in range(n):
                    Phi[R, j] = e1[j] / (N * mass)
                R += 1
        lo = hi
    if R == 0:
        return 1, 0
    for j in range(n):
        s = e[j]
        for r in range(R):
            s -= M0[r] * Phi[r, j]
        c[j] = s
    for r in range(R):
        for q in range(R):
            s = 0.0
            for j in range(n):
                s += Phi[r, j] * Phi[q, j]
            A[r, q] = N / (n * tau) * s
    h = EXCHANGE_STEP
    lp0 = _log_target(M0, alpha, Phi, c, R, n, N, lam, tau, e1, grad0)
    if not _metric(A, M0, alpha, R, G, L):
        return 1, 0
    # M1 = M0 + (h/2) G⁻¹ grad0 + sqrt(h) L⁻ᵀ ξ
    _solve(L, grad0, M1, R)
    for r in range(R):
        grad1[r] = _normal(k9, _position(step, r))
    _back(L, grad1, xi, R)
    sh = math.sqrt(h)
    for r in range(R):
        M1[r] = M0[r] + 0.5 * h * M1[r] + sh * xi[r]
        if not M1[r] > M0[r] * smin[r]:        # the cell would no longer be stiff
            return 1, 0
    lq_fwd = _log_q(M1, M0, grad0, G, L, R, h, xi)
    lp1 = _log_target(M1, alpha, Phi, c, R, n, N, lam, tau, e1, grad1)
    if not _metric(A, M1, alpha, R, G, L):
        return 1, 0
    lq_bwd = _log_q(M0, M1, grad1, G, L, R, h, xi)
    log_a = lp1 - lp0 + lq_bwd - lq_fwd
    if not (log_a >= 0.0 or math.log(_uniform(_hash(k9, _position(step, Rmax)))) < log_a):
        return 1, 0
    for r in range(R):
        rho = math.sqrt(M1[r] / M0[r])
        lo = int(first[r])
        q = lo
        while q < N and key[order[q]] == key[order[lo]]:
            i = order[q]
            for k in range(D):
                T[k, i] *= rho
            q += 1
    for j in range(n):
        e[j] = e1[j]
    return 1, 1
