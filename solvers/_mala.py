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

After its move, with probability ``radial``, the particle gets a *radial move*: ``t = |θ|²``
is resampled along its direction ``ω = θ/|θ|`` (activation pattern and sign of ``a`` kept),
from a proposal fitted to the conditional law of ``t`` given ``ω`` and the other particles,
``∝ t^m exp(−U(√t ω)/τ)``, ``m = (d+2)/2 − 1`` (:func:`_radial_move`), and accepted with the
exact ratio of an independence sampler on that conditional. The radial direction is the soft
one at low ``τ``: along a ray ``U`` changes with ``t`` at the rate ``c(ω) → 0`` (THEORY §11,
docs/theory.md §2.6), so Langevin moves relax it only over ``~1/c`` units of time, a radial
move in one.

Each move leaves ``π_N`` invariant (detailed balance of that Gibbs component), so do the
mixture over move types and subsets, whose draws do not look at the state, and the
composition over the scan.

``ΔU`` is incremental: with ``e_j = f_j − y_j`` and ``Δf_j = (a' σ(z'_j) − a σ(z_j))/N``,
``ΔU = (N/(2n)) Σ_j Δf_j (2 e_j + Δf_j) + (λ/2)(|θ'|² − |θ|²)``, ``O(n d)`` per move; an
accepted move adds ``Δf`` to ``e``. At the start of every pass ``f`` is recomputed from the
particles with the block sums of ``solvers._kernels.forward`` (the same blocks in the same
order, so the same bits), so a pass is a function of the particles and the step index alone and
a run cut into calls anywhere is bitwise the run done in one piece. That sum runs on the
calling thread: it is ``O(N n d)``, a few per cent of a pass, and a parallel region per pass
made a pass up to 8 times slower when the other cores were busy (measured: plane8, N = 4000,
2 threads beside one busy process, 8.1 against 1.0 ms).

Random numbers come from the counter-based stream of ``solvers._rng``, with keys derived from
the seed beyond the two used there (SplitMix64 outputs 3..6):

* proposal normals of the Langevin move: the Euler–Maruyama noise itself, key ``k1``, position
  ``step·M + i (d+2) + c`` (a proposal that is always accepted is the Euler–Maruyama step, in the
  sequential order);
* uniforms, key ``k3``: position ``step·M + 3i`` chooses the move type, ``3i + 1`` accepts,
  ``3i + 2`` picks the jump centre among the subset;
* jump normals, key ``k4``, position ``step·M + i (d+2) + c``;
* subset members, key ``k5``, draw ``i K + k``;
* the radial move, key ``k6``: position ``step·M + 4i`` decides whether it is made,
  ``4i + 1`` chooses the mixture component, ``4i + 2`` accepts, and the hash of ``4i + 3``
  starts the chain of the Gamma draw (:func:`_gamma`).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from solvers._activations import ACT_RELU, _act_pair
from solvers._fma import _fma
from solvers._kernels import (
    BLOCK,
    _forward_block,
    _forward_block_rt,
    _ndim,
    _scaled_residuals,
)
from solvers._rng import _below, _hash, _mix, _normal, _position, _seed_keys, _uniform

#: Other particles in the mixture of a jump proposal (bounds a jump at ``O(K d)``).
JUMP_SUBSET = 16
#: Mixture terms this far (in log) below the largest are left out of the proposal density.
MIXTURE_CUT = 60.0

#: Entries of the move counters (``counts``), in order.
COUNTS = ("moves", "moves_accepted", "jumps", "jumps_accepted", "jumps_changed_cell",
          "radial_moves", "radial_accepted")

_GOLD = np.uint64(0x9E3779B97F4A7C15)


@nb.njit(inline="always")
def _keys(seed):
    """The keys ``k1`` (noise, as in ``solvers._kernels``), ``k3``, ``k4``, ``k5``, ``k6``."""
    k1, _ = _seed_keys(seed)
    s = np.uint64(seed)
    k3 = _mix(s + np.uint64(3) * _GOLD)
    k4 = _mix(s + np.uint64(4) * _GOLD)
    k5 = _mix(s + np.uint64(5) * _GOLD)
    k6 = _mix(s + np.uint64(6) * _GOLD)
    return k1, k3, k4, k5, k6


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
def _dot2(u1, v1, u2, v2, n):
    """``(:func:`_dot` (u1, v1), :func:`_dot` (u2, v2))`` in one loop over the points: the same
    sums bit for bit, with eight independent accumulators instead of four."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    r0 = 0.0
    r1 = 0.0
    r2 = 0.0
    r3 = 0.0
    j = 0
    while j + 4 <= n:
        s0 = _fma(u1[j], v1[j], s0)
        s1 = _fma(u1[j + 1], v1[j + 1], s1)
        s2 = _fma(u1[j + 2], v1[j + 2], s2)
        s3 = _fma(u1[j + 3], v1[j + 3], s3)
        r0 = _fma(u2[j], v2[j], r0)
        r1 = _fma(u2[j + 1], v2[j + 1], r1)
        r2 = _fma(u2[j + 2], v2[j + 2], r2)
        r3 = _fma(u2[j + 3], v2[j + 3], r3)
        j += 4
    acc = (s0 + s1) + (s2 + s3)
    acc2 = (r0 + r1) + (r2 + r3)
    while j < n:
        acc = _fma(u1[j], v1[j], acc)
        acc2 = _fma(u2[j], v2[j], acc2)
        j += 1
    return acc, acc2


@nb.njit(inline="always")
def _dot2_rows(u, A, r, n):
    """``(:func:`_dot` (u, A[r]), :func:`_dot` (u, A[r + 1]))`` in one loop, as :func:`_dot2`
    (no views of ``A`` made)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    r0 = 0.0
    r1 = 0.0
    r2 = 0.0
    r3 = 0.0
    q = r + 1
    j = 0
    while j + 4 <= n:
        s0 = _fma(u[j], A[r, j], s0)
        s1 = _fma(u[j + 1], A[r, j + 1], s1)
        s2 = _fma(u[j + 2], A[r, j + 2], s2)
        s3 = _fma(u[j + 3], A[r, j + 3], s3)
        r0 = _fma(u[j], A[q, j], r0)
        r1 = _fma(u[j + 1], A[q, j + 1], r1)
        r2 = _fma(u[j + 2], A[q, j + 2], r2)
        r3 = _fma(u[j + 3], A[q, j + 3], r3)
        j += 4
    acc = (s0 + s1) + (s2 + s3)
    acc2 = (r0 + r1) + (r2 + r3)
    while j < n:
        acc = _fma(u[j], A[r, j], acc)
        acc2 = _fma(u[j], A[q, j], acc2)
        j += 1
    return acc, acc2


@nb.njit(inline="always")
def _dot_row(u, A, r, n):
    """:func:`_dot` of ``u`` with row ``r`` of ``A`` (no view made: the same sums, bit for bit)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    j = 0
    while j + 4 <= n:
        s0 = _fma(u[j], A[r, j], s0)
        s1 = _fma(u[j + 1], A[r, j + 1], s1)
        s2 = _fma(u[j + 2], A[r, j + 2], s2)
        s3 = _fma(u[j + 3], A[r, j + 3], s3)
        j += 4
    acc = (s0 + s1) + (s2 + s3)
    while j < n:
        acc = _fma(u[j], A[r, j], acc)
        j += 1
    return acc


@nb.njit(inline="always")
def _pre_activations(th, XT, n, d, z, dims):
    """``z_j = b + w·x_j`` of particle ``th`` (FMAs in the order of ``solvers._kernels``).
    With ``d`` fixed at compile time (``dims`` a d-tuple) one loop over the points, the
    coordinates unrolled; with ``d`` at run time (``dims = ()``) coordinates outside, points
    inside. Both vectorise over the points and give the same bits."""
    b = th[d + 1]
    if len(dims) == 0:
        for j in range(n):
            z[j] = b
        for k in range(d):
            w = th[1 + k]
            for j in range(n):
                z[j] = _fma(w, XT[k, j], z[j])
    else:
        for j in range(n):
            zz = b
            for k in range(d):
                zz = _fma(th[1 + k], XT[k, j], zz)
            z[j] = zz


@nb.njit(inline="always")
def _own_terms(th, XT, n, d, kind, p, e, z, s, h, dims):
    """The terms of particle ``th`` at the current errors ``e``: ``z`` (see
    :func:`_pre_activations`), ``s_j = σ(z_j)`` and the gradient weights ``h_j = e_j σ'(z_j)``
    (the activation's branch outside the loop over the points, so that it vectorises)."""
    _pre_activations(th, XT, n, d, z, dims)
    if kind == ACT_RELU:
        for j in range(n):
            zz = z[j]
            s[j] = zz if zz > 0.0 else 0.0
            h[j] = e[j] * (1.0 if zz > 0.0 else 0.0)
    else:
        for j in range(n):
            sj, dsj = _act_pair(z[j], kind, p)
            s[j] = sj
            h[j] = e[j] * dsj


@nb.njit(inline="always")
def _move_terms(th, thp, XT, n, d, kind, p, inv_N, e, s, zp, sp, df, t, ep, hp, grad, dims):
    """The terms of the move ``th → thp``: ``zp`` and ``sp = σ(zp)`` as in :func:`_own_terms`,
    the change of the predictor ``df_j = (a' sp_j − a s_j)/N``, ``t_j = 2 e_j + df_j`` (for
    ``ΔU``) and, when ``grad``, the errors after the move ``ep = e + df`` and the weights
    ``hp_j = ep_j σ'(zp_j)``."""
    _pre_activations(thp, XT, n, d, zp, dims)
    a = th[0]
    ap = thp[0]
    if kind == ACT_RELU:
        for j in range(n):
            zz = zp[j]
            sj = zz if zz > 0.0 else 0.0
            sp[j] = sj
            dfj = (ap * sj - a * s[j]) * inv_N
            df[j] = dfj
            t[j] = 2.0 * e[j] + dfj
        if grad:
            for j in range(n):
                epj = e[j] + df[j]
                ep[j] = epj
                hp[j] = epj * (1.0 if zp[j] > 0.0 else 0.0)
    else:
        for j in range(n):
            sj, dsj = _act_pair(zp[j], kind, p)
            sp[j] = sj
            dfj = (ap * sj - a * s[j]) * inv_N
            df[j] = dfj
            t[j] = 2.0 * e[j] + dfj
            if grad:
                epj = e[j] + dfj
                ep[j] = epj
                hp[j] = epj * dsj


@nb.njit(inline="always")
def _grad_from(th, XT, n, d, e, s, h, lam, ones, g):
    """``g = ∇_θ U`` of one particle from ``s`` and the weights ``h`` of :func:`_own_terms`:
    ``g_a = (1/n) Σ_j e_j s_j + λ a``, ``g_u = (a/n) Σ_j h_j x̃_j + λ u`` (each sum a
    :func:`_dot`, two at a time; ``ones`` a vector of ones)."""
    D = d + 2
    inv_n = 1.0 / n
    a = th[0]
    an = a * inv_n
    sa, sb = _dot2(e, s, h, ones, n)
    g[0] = _fma(lam, a, sa * inv_n)
    g[D - 1] = _fma(an, sb, lam * th[D - 1])
    k = 0
    while k + 2 <= d:
        w0, w1 = _dot2_rows(h, XT, k, n)
        g[1 + k] = _fma(an, w0, lam * th[1 + k])
        g[2 + k] = _fma(an, w1, lam * th[2 + k])
        k += 2
    if k < d:
        g[1 + k] = _fma(an, _dot_row(h, XT, k, n), lam * th[1 + k])


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
def _gamma(h, shape):
    """Gamma(``shape``, 1) variate, ``shape >= 1`` (Marsaglia & Tsang, ACM TOMS 26(3), 2000),
    from the hash chain ``_mix(h + t γ)``, ``t = 1, 2, …`` (a pure function of ``h``)."""
    dd = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * dd)
    t = np.uint64(1)
    while True:
        x = _normal(h, t)
        t += np.uint64(1)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = _uniform(_mix(h + t * _GOLD))
        t += np.uint64(1)
        if math.log(u) < 0.5 * x * x + dd - dd * v + dd * math.log(v):
            return dd * v


@nb.njit(inline="always")
def _log_gamma_pdf(x, k, s):
    """``log`` of the Gamma(shape ``k``, scale ``s``) density at ``x > 0``."""
    return (k - 1.0) * math.log(x) - x / s - math.lgamma(k) - k * math.log(s)


@nb.njit(inline="always")
def _log_radial_q(x, k1, s1, k2, s2, w1):
    """``log`` of the radial proposal density at ``x``: the mixture of Gamma(``k1``, ``s1``)
    (weight ``w1``) and Gamma(``k2``, ``s2``)."""
    l1 = math.log(w1) + _log_gamma_pdf(x, k1, s1)
    l2 = math.log1p(-w1) + _log_gamma_pdf(x, k2, s2) if w1 < 1.0 else -math.inf
    hi = l1 if l1 > l2 else l2
    return hi + math.log(math.exp(l1 - hi) + math.exp(l2 - hi))


@nb.njit(inline="always")
def _radial_move(th, XT, n, d, D, N, kind, p, inv_N, lam, tau, m, e, z, s, zp, sp, df, tb, ep,
                 hp, thp, data_term, dims, h_mix, h_acc, h_gamma):
    """One Metropolis–Hastings move of ``t = |θ|²`` along the particle's direction
    ``ω = θ/|θ|`` (the other particles fixed): True when accepted, with the proposal in
    ``thp`` and the change of the predictor ``df``; ``z``, ``s`` are the particle's
    pre-activations and activations, ``e`` the errors with it.

    Along ``ω`` the conditional law of ``t`` is ``∝ t^m exp(−U(√t ω)/τ)``, ``m = D/2 − 1``
    (the Jacobian of polar coordinates); for ReLU ``U(√t ω) = const + A t + B t²`` with
    ``A = ⟨e_{−i}, φ(ω)⟩/n + λ/2``, ``B = |φ(ω)|²/(2nN)``, ``φ_j(ω) = ω_a σ(ω_u·x̃_j)`` and
    ``e_{−i}`` the errors without the particle: functions of ``ω`` and the other particles only.
    The proposal is a mixture of two Gammas fitted to that law at its mode ``t*``: shape
    ``m + 1`` (the law's behaviour at 0; the density ratio is bounded, so the move is
    uniformly ergodic along ``ω``) and shape ``m + 1 + κ``, ``κ = 2Bt*²/τ`` (its curvature at
    ``t*``), weights ``1/(1 + κ)`` and ``κ/(1 + κ)``. It depends on ``ω`` and the other
    particles only, so the ratio of an independence sampler on the conditional is exact; for
    other activations ``A, B`` are those of ``σ(ω_u·x̃)`` and ``ΔU`` is computed in full."""
    tt = 0.0
    for c in range(D):
        tt += th[c] * th[c]
    if not tt > 0.0:
        return False
    A = 0.5 * lam
    B = 0.0
    inv_rt = 1.0 / math.sqrt(tt)
    a = th[0]
    if data_term:
        P1 = 0.0
        P2 = 0.0
        if kind == ACT_RELU:
            # φ(ω) = a s / t by homogeneity
            P0 = 0.0
            for j in range(n):
                q = a * s[j]
                P0 += e[j] * q
                P2 += q * q
            inv_t = 1.0 / tt
            P1 = (P0 - P2 * inv_N) * inv_t
            P2 = P2 * inv_t * inv_t
        else:
            aw = a * inv_rt
            ai = a * inv_N
            for j in range(n):
                sw, _ = _act(z[j] * inv_rt, kind, p)
                fw = aw * sw
                P1 += (e[j] - ai * s[j]) * fw
                P2 += fw * fw
        A += P1 / n
        B = P2 / (2.0 * n * N)
    disc = math.sqrt(A * A + 8.0 * B * m * tau)
    if A >= 0.0:
        tstar = 2.0 * m * tau / (A + disc)
    else:
        tstar = (disc - A) / (4.0 * B)
    if not (tstar > 0.0 and tstar < math.inf):
        return False
    kap = 2.0 * B * tstar * tstar / tau
    k1 = m + 1.0
    s1 = tstar / m
    k2 = k1 + kap
    s2 = tstar / (m + kap)
    w1 = 1.0 / (1.0 + kap)
    if _uniform(h_mix) < w1:
        tn = _gamma(h_gamma, k1) * s1
    else:
        tn = _gamma(h_gamma, k2) * s2
    if not tn > 0.0:
        return False
    rho2 = tn / tt
    rho = math.sqrt(rho2)
    for c in range(D):
        thp[c] = rho * th[c]
    if kind == ACT_RELU:
        du = (tn - tt) * A + (tn * tn - tt * tt) * B
        if data_term:
            g = (rho2 - 1.0) * a * inv_N
            for j in range(n):
                df[j] = g * s[j]
    else:
        du = 0.0
        if data_term:
            _move_terms(th, thp, XT, n, d, kind, p, inv_N, e, s, zp, sp, df, tb, ep, hp,
                        False, dims)
            du = _dot(df, tb, n) * (N / (2.0 * n))
        du += 0.5 * lam * (tn - tt)
    log_a = (-du / tau + m * math.log(rho2)
             + _log_radial_q(tt, k1, s1, k2, s2, w1) - _log_radial_q(tn, k1, s1, k2, s2, w1))
    return log_a >= 0.0 or math.log(_uniform(h_acc)) < log_a


@nb.njit(inline="always")
def _forward_serial(T, XT, n, partial, scratch, kind, p, dims):
    """``solvers._kernels.forward`` on the calling thread (block by block, the same bits);
    ``dims = ()``: ``d`` at run time, as there."""
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


@nb.njit(cache=True, nogil=True)     # chains step in parallel threads (solvers.langevin)
def mala_steps(T, X, y, XT, partial, scratch, sub, f, R, counts, f_sum, lam, eta, tau,
               seed, step0, nsteps, kind, p, data_term, jumps, radial, dims):
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
    sub : int64 ndarray (JUMP_SUBSET,)
        Work space.
    f, R : ndarray (n,)
        Out: predictor and scaled residuals ``(f − y)/n`` after the last pass.
    counts : int64 ndarray (7,)
        Move counters, incremented (:data:`COUNTS`).
    f_sum : ndarray (n,)
        The predictor after each pass is added to it.
    lam, eta, tau : float
        ``λ``, ``η``, ``τ > 0`` (with ``nsteps = 0`` any ``τ``).
    seed, step0, nsteps : int
    kind : int; p : ndarray (4,)
        Activation code and ``solvers._activations.activation_params``.
    data_term : bool
        False drops the data term of ``U`` (pure Gaussian target; for tests).
    jumps : float
        Share of jump moves in ``[0, 1]``.
    radial : float
        Probability of a radial move after each particle's move, in ``[0, 1]``.
    dims : tuple
        ``()`` (``d = T.shape[0] - 2`` at run time: one compile for every input dimension) or
        a d-tuple (specialised: the loops over the points fused and unrolled over the
        coordinates, faster; bitwise the same results). :class:`solvers.stepper.Stepper`
        passes :func:`solvers.stepper.kernel_dims`.

    Returns
    -------
    int
        0, or 1 if a non-finite residual appeared (``T`` is left at the start of that pass).
    """
    N = T.shape[1]
    n = X.shape[0]
    d = _ndim(T, dims)
    D = d + 2
    k1, k3, k4, k5, k6 = _keys(seed)
    sd = math.sqrt(2.0 * eta * tau)
    inv4 = 1.0 / (4.0 * eta * tau) if tau > 0.0 else 0.0
    s_jump = math.sqrt(tau / lam)
    inv2s2 = 0.5 * lam / tau if tau > 0.0 else 0.0
    K = sub.shape[0]
    # separate allocations (not rows of one array): the compiler then vectorises the loops
    # over the points, which it does not when they may overlap
    e = np.empty(n)
    z = np.empty(n)
    s = np.empty(n)
    h = np.empty(n)
    zp = np.empty(n)
    sp = np.empty(n)
    hp = np.empty(n)
    df = np.empty(n)
    ep = np.empty(n)
    tb = np.empty(n)
    ones = np.empty(n)
    for j in range(n):
        ones[j] = 1.0
    inv_N = 1.0 / N
    th = np.empty(D)
    mbuf = np.empty(K)
    thp = np.empty(D)
    g = np.empty(D)
    gp = np.empty(D)
    can_jump = jumps > 0.0 and N >= 2
    do_radial = radial > 0.0
    m_rad = 0.5 * D - 1.0
    for st in range(nsteps + 1):
        # the predictor of the particles as they are, in the fixed block order
        _forward_serial(T, XT, n, partial, scratch, kind, p, dims)
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
            jump = False
            if can_jump:        # the move type's draw is made only when it can matter
                jump = _uniform(_hash(k3, _position(step, 3 * i))) < jumps
            if data_term:
                _own_terms(th, XT, n, d, kind, p, e, z, s, h, dims)
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
                    _grad_from(th, XT, n, d, e, s, h, lam, ones, g)
                else:
                    for c in range(D):
                        g[c] = lam * th[c]
                for c in range(D):
                    thp[c] = th[c] - eta * g[c] + sd * _normal(k1, _position(step, i * D + c))
            du = 0.0
            if data_term:
                _move_terms(th, thp, XT, n, d, kind, p, inv_N, e, s, zp, sp, df, tb, ep, hp,
                            not jump, dims)
                du = _dot(df, tb, n) * (N / (2.0 * n))
            nq = 0.0
            for c in range(D):
                nq += (thp[c] - th[c]) * (thp[c] + th[c])
            du = du + 0.5 * lam * nq
            if jump:
                log_a = -du / tau + (_log_mixture(th, T, sub, K, D, inv2s2, mbuf)
                                     - _log_mixture(thp, T, sub, K, D, inv2s2, mbuf))
            else:
                if data_term:
                    _grad_from(thp, XT, n, d, ep, sp, hp, lam, ones, gp)
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
            # log u < 0 <= log_a: accepted without the uniform's logarithm (the same verdict;
            # False for a NaN log_a either way)
            ok = log_a >= 0.0 or \
                math.log(_uniform(_hash(k3, _position(step, 3 * i + 1)))) < log_a
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
            if do_radial and (radial >= 1.0 or                # drawn only when it matters
                              _uniform(_hash(k6, _position(step, 4 * i))) < radial):
                if ok:
                    for c in range(D):
                        th[c] = thp[c]
                    if data_term:
                        for j in range(n):
                            z[j] = zp[j]
                            s[j] = sp[j]
                counts[5] += 1
                if _radial_move(th, XT, n, d, D, N, kind, p, inv_N, lam, tau, m_rad, e, z, s,
                                zp, sp, df, tb, ep, hp, thp, data_term, dims,
                                _hash(k6, _position(step, 4 * i + 1)),
                                _hash(k6, _position(step, 4 * i + 2)),
                                _hash(k6, _position(step, 4 * i + 3))):
                    counts[6] += 1
                    for c in range(D):
                        T[c, i] = thp[c]
                    if data_term:
                        for j in range(n):
                            e[j] += df[j]
    return 0 if _scaled_residuals(f, y, R) else 1
