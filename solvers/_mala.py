"""Private numba kernel of the Metropolis-adjusted particle sweep (``integrator = "mala"``).

The N-particle system of ``solvers._kernels`` is overdamped Langevin dynamics for one potential
(docs/theory.md, "Exact sampling of the N-particle law")::

    U(Θ) = N·R(Θ) + (λ/2) Σ_i |θ_i|²,   R(Θ) = (1/(2n)) Σ_j (f_Θ(x_j) − y_j)²,

so that ``−∇_{θ_i} U`` is exactly the drift of the Euler–Maruyama kernel (``R_j = (f_j − y_j)/n``
and the ``1/N`` of ``f`` cancel the ``N``), and its noise ``sqrt(2 η τ) ξ`` makes
``π_N ∝ exp(−U/τ)`` the law that Euler–Maruyama approximates as ``η → 0``. This kernel samples
``π_N`` exactly: one *pass* (one step of the step counter) visits the particles in the fixed
order ``i = 0, 1, …, N−1`` (systematic scan) and gives each one Metropolis–Hastings move with
the other particles held fixed. The move is

* with probability ``1 − jumps``: a Langevin (MALA) proposal ``θ' = θ − η g(θ) + sqrt(2ητ) ξ``,
  ``g = ∇_{θ_i} U``, accepted with probability
  ``min(1, exp(−ΔU/τ) q(θ | θ') / q(θ' | θ))``, ``q(b | a) ∝ exp(−|b − a + η g(a)|²/(4ητ))``;
* with probability ``jumps`` (and ``N ≥ 2``): a jump. ``K = JUMP_SUBSET`` other particles
  ``S = (o_1..o_K)`` are drawn uniformly with replacement among the ``N − 1`` others, one of
  them, ``o_m``, uniformly, and ``θ' = θ_{o_m} + s ξ`` with ``s² = τ/λ``; the proposal density
  ``q_S(x) = (1/K) Σ_k N(x; θ_{o_k}, s² I)`` depends on the other particles only, and the move
  is accepted with probability ``min(1, exp(−ΔU/τ) q_S(θ) / q_S(θ'))``.

Each move leaves ``π_N`` invariant (detailed balance of that Gibbs component), so do the
mixture over move types and subsets, whose draws do not look at the state, and the
composition over the scan.

``ΔU`` is incremental: with ``e_j = f_j − y_j`` and ``Δf_j = (a' σ(z'_j) − a σ(z_j))/N``,
``ΔU = (N/(2n)) Σ_j Δf_j (2 e_j + Δf_j) + (λ/2)(|θ'|² − |θ|²)``, ``O(n d)`` per move; an
accepted move adds ``Δf`` to ``e``. At the start of every pass ``f`` is recomputed from the
particles with the block kernel of ``solvers._kernels`` (``forward``, bitwise independent of the
thread count), so a pass is a function of the particles and the step index alone and a run cut
into calls anywhere is bitwise the run done in one piece.

Random numbers come from the counter-based stream of ``solvers._kernels``, with keys derived from
the seed beyond the two used there (SplitMix64 outputs 3..5):

* proposal normals of the Langevin move: the Euler–Maruyama noise itself, key ``k1``, position
  ``step·M + i (d+2) + c`` (a proposal that is always accepted is the Euler–Maruyama step, in the
  sequential order);
* uniforms, key ``k3``: position ``step·M + 3i`` chooses the move type, ``3i + 1`` accepts,
  ``3i + 2`` picks the jump centre among the subset;
* jump normals, key ``k4``, position ``step·M + i (d+2) + c``;
* subset members, key ``k5``, draw ``i K + k``.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from solvers._kernels import (
    ACT_RELU,
    BLOCK,
    _act_pair,
    _below,
    _fma,
    _forward_block,
    _forward_block_rt,
    _hash,
    _mix,
    _ndim,
    _normal,
    _position,
    _scaled_residuals,
    _seed_keys,
    _uniform,
    forward,
)

#: Other particles in the mixture of a jump proposal (bounds a jump at ``O(K d)``).
JUMP_SUBSET = 16
#: Mixture terms this far (in log) below the largest are left out of the proposal density.
MIXTURE_CUT = 60.0

#: Below this many blocks of particles the predictor of a pass is summed on one thread (the
#: same block sums in the same order as the parallel ``forward``, so the same bits); launching
#: a parallel region costs more than it saves there.
SERIAL_BLOCKS = 4

#: Entries of the move counters (``counts``), in order.
COUNTS = ("moves", "moves_accepted", "jumps", "jumps_accepted", "jumps_changed_cell")

_GOLD = np.uint64(0x9E3779B97F4A7C15)


@nb.njit(inline="always")
def _keys(seed):
    """The keys ``k1`` (noise, as in ``solvers._kernels``), ``k3``, ``k4``, ``k5``."""
    k1, _ = _seed_keys(seed)
    s = np.uint64(seed)
    k3 = _mix(s + np.uint64(3) * _GOLD)
    k4 = _mix(s + np.uint64(4) * _GOLD)
    k5 = _mix(s + np.uint64(5) * _GOLD)
    return k1, k3, k4, k5


@nb.njit(inline="always")
def _act(z, kind, p):
    if kind == ACT_RELU:
        return (0.0, 0.0) if z <= 0.0 else (z, 1.0)
    return _act_pair(z, kind, p)


@nb.njit(inline="always")
def _dot(u, v, n):
    """``Σ_{j<n} u_j v_j`` with four interleaved accumulators (``j mod 4``), added as
    ``(s0 + s1) + (s2 + s3)`` and then the tail: a fixed order, and no single chain of ``n``
    dependent additions."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    j = 0
    while j + 4 <= n:
        s0 = _fma(u[j], v[j], s0)
        s1 = _fma(u[j + 1], v[j + 1], s1)
        s2 = _fma(u[j + 2], v[j + 2], s2)
        s3 = _fma(u[j + 3], v[j + 3], s3)
        j += 4
    acc = (s0 + s1) + (s2 + s3)
    while j < n:
        acc = _fma(u[j], v[j], acc)
        j += 1
    return acc


@nb.njit(inline="always")
def _features(th, XT, n, d, kind, p, z, s, ds):
    """``z_j = b + w·x_j``, ``s_j = σ(z_j)``, ``ds_j = σ'(z_j)`` of one particle ``th``
    (``XT`` the (d, n) transposed inputs; loops over ``j`` vectorise)."""
    b = th[d + 1]
    for j in range(n):
        z[j] = b
    for k in range(d):
        w = th[1 + k]
        for j in range(n):
            z[j] = _fma(w, XT[k, j], z[j])
    if kind == ACT_RELU:
        for j in range(n):
            zz = z[j]
            s[j] = zz if zz > 0.0 else 0.0
            ds[j] = 1.0 if zz > 0.0 else 0.0
    else:
        for j in range(n):
            s[j], ds[j] = _act_pair(z[j], kind, p)


@nb.njit(inline="always")
def _gradient(th, XT, n, d, e, s, ds, lam, h, ones, g):
    """``g = ∇_θ U`` of one particle from its features and the errors ``e_j = f_j − y_j``:
    ``g_a = (1/n) Σ_j e_j s_j + λ a``, ``g_u = (a/n) Σ_j e_j ds_j x̃_j + λ u``
    (:func:`_dot` for the sums; ``h`` is scratch, ``ones`` a vector of ones)."""
    D = d + 2
    inv_n = 1.0 / n
    a = th[0]
    for j in range(n):
        h[j] = e[j] * ds[j]
    g[0] = _fma(lam, a, _dot(e, s, n) * inv_n)
    an = a * inv_n
    for k in range(d):
        g[1 + k] = _fma(an, _dot(h, XT[k], n), lam * th[1 + k])
    g[D - 1] = _fma(an, _dot(h, ones, n), lam * th[D - 1])


@nb.njit(inline="always")
def _delta_u(th, thp, n, D, inv_N, N, e, s, sp, lam, df, t, data):
    """``ΔU`` of replacing ``th`` by ``thp`` (features ``s``, ``sp``); fills ``df`` with ``Δf``
    (``t`` is scratch)."""
    du = 0.0
    if data:
        a = th[0]
        ap = thp[0]
        for j in range(n):
            dfj = (ap * sp[j] - a * s[j]) * inv_N
            df[j] = dfj
            t[j] = 2.0 * e[j] + dfj
        du = _dot(df, t, n) * (N / (2.0 * n))
    nq = 0.0
    for c in range(D):
        nq += (thp[c] - th[c]) * (thp[c] + th[c])
    return du + 0.5 * lam * nq


@nb.njit(inline="always")
def _log_mixture(x, T, sub, K, D, inv2s2, buf):
    """``log Σ_k exp(−|x − θ_{sub_k}|² / (2 s²))`` (``inv2s2 = 1/(2 s²)``), stably; terms
    more than ``MIXTURE_CUT`` below the largest are dropped (each is below e^-60 of it)."""
    best = -math.inf
    for k in range(K):
        o = sub[k]
        q = 0.0
        for c in range(D):
            dv = x[c] - T[c, o]
            q = _fma(dv, dv, q)
        v = -q * inv2s2
        buf[k] = v
        if v > best:
            best = v
    acc = 0.0
    for k in range(K):
        t = buf[k] - best
        if t > -MIXTURE_CUT:
            acc += math.exp(t)
    return best + math.log(acc)


@nb.njit(inline="always")
def _forward_serial(T, XT, n, partial, scratch, kind, p, dims):
    """``solvers._kernels.forward`` on one thread (block by block); ``dims = ()``: ``d`` at
    run time, as there."""
    N = T.shape[1]
    d = _ndim(T, dims)
    zoff = np.uint64((2 * d + 4) * BLOCK)
    for blk in range((N + BLOCK - 1) // BLOCK):
        lo = np.uint64(blk * BLOCK)
        m = np.uint64(min(BLOCK, N - blk * BLOCK))
        if len(dims) == 0:
            _forward_block_rt(T, lo, m, XT, n, partial, blk, scratch, 0, zoff, kind, p)
        else:
            _forward_block(T, lo, m, XT, n, partial, blk, scratch, 0, zoff, kind, p, dims)


@nb.njit(cache=True)
def mala_steps(T, X, y, XT, partial, scratch, work, sub, f, R, counts, f_sum, lam, eta, tau,
               seed, step0, nsteps, kind, p, data_term, jumps, dims):
    """Advance ``nsteps`` Metropolis-adjusted passes from global step ``step0``.

    Parameters
    ----------
    T : ndarray (d+2, N)
        Particles in the column layout of ``solvers._kernels``, updated in place.
    X, y : ndarray (n, d), (n,)
        Training set; ``XT`` (d, n) its transpose (for ``forward``).
    partial, scratch : ndarray
        Work space of ``solvers._kernels.forward``: ``(ceil(N/BLOCK), n)`` and
        :func:`solvers._kernels.scratch_shape`.
    work : ndarray (12, n) ; sub : int64 ndarray (JUMP_SUBSET,)
        Work space.
    f, R : ndarray (n,)
        Out: predictor and scaled residuals ``(f − y)/n`` after the last pass.
    counts : int64 ndarray (5,)
        Move counters, incremented (:data:`COUNTS`).
    f_sum : ndarray (n,)
        The predictor after each pass is added to it.
    lam, eta, tau : float
        ``λ``, ``η``, ``τ > 0`` (with ``nsteps = 0`` any ``τ``).
    seed, step0, nsteps : int
    kind : int; p : ndarray (4,)
        Activation code and ``solvers._kernels.activation_params``.
    data_term : bool
        False drops the data term of ``U`` (pure Gaussian target; for tests).
    jumps : float
        Share of jump moves in ``[0, 1]``.
    dims : tuple
        ``()`` (``d = T.shape[0] - 2`` at run time: one compile for every input dimension,
        what :class:`solvers.stepper.Stepper` passes) or a d-tuple (specialised).

    Returns
    -------
    int
        0, or 1 if a non-finite residual appeared (``T`` is left at the start of that pass).
    """
    N = T.shape[1]
    n = X.shape[0]
    d = _ndim(T, dims)
    D = d + 2
    k1, k3, k4, k5 = _keys(seed)
    sd = math.sqrt(2.0 * eta * tau)
    inv4 = 1.0 / (4.0 * eta * tau) if tau > 0.0 else 0.0
    s_jump = math.sqrt(tau / lam)
    inv2s2 = 0.5 * lam / tau if tau > 0.0 else 0.0
    K = sub.shape[0]
    e = work[0]
    z = work[1]
    s = work[2]
    ds = work[3]
    zp = work[4]
    sp = work[5]
    dsp = work[6]
    df = work[7]
    ep = work[8]
    hb = work[9]
    tb = work[10]
    ones = work[11]
    for j in range(n):
        ones[j] = 1.0
    inv_N = 1.0 / N
    th = np.empty(D)
    mbuf = np.empty(K)
    thp = np.empty(D)
    g = np.empty(D)
    gp = np.empty(D)
    can_jump = jumps > 0.0 and N >= 2
    for st in range(nsteps + 1):
        # the predictor of the particles as they are, in the fixed block order
        if partial.shape[0] < SERIAL_BLOCKS:
            _forward_serial(T, XT, n, partial, scratch, kind, p, dims)
        else:
            forward(T, XT, n, partial, scratch, kind, p, dims)
        for j in range(n):
            acc = 0.0
            for blk in range(partial.shape[0]):
                acc += partial[blk, j]
            f[j] = acc / N
            e[j] = f[j] - y[j]
            if st > 0:
                f_sum[j] += f[j]
            if not np.isfinite(e[j]):
                for jj in range(n):
                    R[jj] = (f[jj] - y[jj]) / n
                return 1
        if st == nsteps:
            break
        step = step0 + st
        for i in range(N):
            for c in range(D):
                th[c] = T[c, i]
            u_type = _uniform(_hash(k3, _position(step, 3 * i)))
            jump = can_jump and u_type < jumps
            if data_term:
                _features(th, XT, n, d, kind, p, z, s, ds)
            if jump:
                for k in range(K):
                    o = _below(k5, step, i * K + k, N - 1)
                    sub[k] = o + 1 if o >= i else o
                m = _below(k3, step, 3 * i + 2, K)
                c0 = sub[m]
                for c in range(D):
                    thp[c] = T[c, c0] + s_jump * _normal(k4, _position(step, i * D + c))
            else:
                if data_term:
                    _gradient(th, XT, n, d, e, s, ds, lam, hb, ones, g)
                else:
                    for c in range(D):
                        g[c] = lam * th[c]
                for c in range(D):
                    thp[c] = th[c] - eta * g[c] + sd * _normal(k1, _position(step, i * D + c))
            if data_term:
                _features(thp, XT, n, d, kind, p, zp, sp, dsp)
            du = _delta_u(th, thp, n, D, inv_N, N, e, s, sp, lam, df, tb, data_term)
            if jump:
                log_a = -du / tau + (_log_mixture(th, T, sub, K, D, inv2s2, mbuf)
                                     - _log_mixture(thp, T, sub, K, D, inv2s2, mbuf))
            else:
                if data_term:
                    for j in range(n):
                        ep[j] = e[j] + df[j]          # the errors after the move
                    _gradient(thp, XT, n, d, ep, sp, dsp, lam, hb, ones, gp)
                else:
                    for c in range(D):
                        gp[c] = lam * thp[c]
                fwd = 0.0
                bwd = 0.0
                for c in range(D):
                    r = thp[c] - th[c] + eta * g[c]
                    fwd += r * r
                    r = th[c] - thp[c] + eta * gp[c]
                    bwd += r * r
                log_a = -du / tau - (bwd - fwd) * inv4
            u_acc = _uniform(_hash(k3, _position(step, 3 * i + 1)))
            ok = math.log(u_acc) < log_a               # False for NaN
            if jump:
                counts[2] += 1
            else:
                counts[0] += 1
            if ok:
                for c in range(D):
                    T[c, i] = thp[c]
                if data_term:
                    for j in range(n):
                        e[j] += df[j]
                if jump:
                    counts[3] += 1
                    if data_term:
                        for j in range(n):
                            if (z[j] > 0.0) != (zp[j] > 0.0):
                                counts[4] += 1
                                break
                else:
                    counts[1] += 1
    return 0 if _scaled_residuals(f, y, R) else 1
