"""Private numba kernel of the *blocked* Metropolis-adjusted pass (``integrator = "mala"``,
``block = b >= 2``; docs/theory.md §2.6, "The blocked pass").

The sequential pass (``solvers._mala.mala_steps``) moves one particle after the other, each
proposal from the errors left by the previous decision. The blocked pass visits the particles
in rounds of ``b`` (a *block*) in an order drawn afresh every pass from the counter-based
stream (:func:`_pass_order`: it does not look at the state). In a round, with errors ``e⁰`` at
its start and ``φ(θ) = a σ(u·x̃)``:

1. every member ``q`` gets its move's proposal (Langevin, or a jump) from the *field*
   ``F_q = e⁰ − Σ_{r<q} φ(θ_r)/N``, the errors without the members processed before it. That
   field depends on the particles outside the block and on the members not yet processed,
   whose values are still current when ``q``'s move is decided, and on ``θ_q`` itself, so it
   is a valid proposal for the conditional law of ``θ_q`` (the reverse proposal uses
   ``F_q + Δf_q``); it depends on no decision of the round, so all of them are computed at
   once. So are their changes of the predictor ``Δf_q`` and every term of the log acceptance
   ratio but one;
2. in the block's order each move is accepted with the exact ratio against the errors *at that
   time*: ``−ΔU/τ = C_q − (N/(nτ)) Σ_j Δf_qj e_j`` (``C_q`` from phase 1), ``O(n)`` work, and
   ``e += Δf_q`` on acceptance;
3. the radial moves' proposals likewise, from ``G_q = e¹ − Σ_{r<q} φ(θ¹_r)/N`` (after phase 2);
4. their decisions in order, as in 2.

Jumps take their centres among the particles outside the block and the members not yet
processed (a uniform draw among them). Each move is a Metropolis–Hastings move of one particle
whose proposal depends only on the current state, so each leaves ``π_N`` invariant, and so does
their composition; the order is a mixture over draws that do not look at the state.

Random numbers: every draw of particle ``i`` is the one of the sequential pass (same keys and
positions); the order of a pass comes from a further key (SplitMix64 output 7 of the seed).
The result is a function of the particles and the step index alone (bitwise the same cut into
calls anywhere, whatever the number of threads).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from solvers._activations import ACT_RELU
from solvers._fma import _fma
from solvers._kernels import _ndim, _scaled_residuals
from solvers._mala import (
    _act,
    _add_gradient_terms,
    _forward_serial,
    _keys,
    _log_mixture,
    _proposal_terms,
    _radial_law,
    _radial_proposal,
)
from solvers._rng import _below, _hash, _normal, _position, _seed_output, _uniform


def lanes(block: int) -> tuple:
    """The ``lanes`` argument of :func:`mala_block_steps` for block size ``block``."""
    return (0,) * (4 * ((int(block) + 3) // 4))


@nb.njit(inline="always")
def _order_keys(seed):
    """The key ``k7`` of the blocked pass's order (SplitMix64 output 7 of the seed)."""
    return _seed_output(seed, 7)


@nb.njit(inline="always")
def _pass_order(k7, step, N, bb, L, rot, sig):
    """The order of a blocked pass: a global offset ``o`` (returned), a rotation ``rot[m]`` of
    each of the ``bb`` segments of ``L`` consecutive (offset) positions, and the order ``sig``
    in which the segments give the members of a block (Fisher–Yates); draws ``0``, ``1..bb``
    and ``bb+1..2bb-1`` of the order stream of ``step``. Round ``k`` of the pass is the block
    of the particles at position ``(k + rot[m]) mod L`` of segment ``m = sig[q]``,
    ``q = 0..bb-1`` (positions ``≥ N`` are empty). Nothing here looks at the state."""
    o = _below(k7, step, 0, N)
    for m in range(bb):
        rot[m] = _below(k7, step, 1 + m, L)
        sig[m] = m
    for t in range(bb - 1):
        r = t + _below(k7, step, 1 + bb + t, bb - t)
        tmp = sig[t]
        sig[t] = sig[r]
        sig[r] = tmp
    return o


@nb.njit(inline="always")
def _dot_lane(DF, q, e, n):
    """``Σ_j DF[j, q] e_j`` with four partial sums (``j mod 4``) added at the end in a fixed
    order: the dependent chain of the ordered phase a quarter as long; the same bits on every
    thread count."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    j = 0
    while j + 4 <= n:
        s0 = _fma(DF[j, q], e[j], s0)
        s1 = _fma(DF[j + 1, q], e[j + 1], s1)
        s2 = _fma(DF[j + 2, q], e[j + 2], s2)
        s3 = _fma(DF[j + 3, q], e[j + 3], s3)
        j += 4
    while j < n:
        s0 = _fma(DF[j, q], e[j], s0)
        j += 1
    return (s0 + s1) + (s2 + s3)


@nb.njit(inline="always")
def _jump_subset(k5, step, i, K, N, excl, ne, sub):
    """``sub[k]``, ``k < K``: uniform draws among the ``N − ne`` particles not in the sorted
    list ``excl[:ne]`` (the particle and the members of its block processed before it), the
    ``k``-th from draw ``i K + k`` of the subset stream."""
    for k in range(K):
        o = _below(k5, step, i * K + k, N - ne)
        for q in range(ne):
            if o >= excl[q]:
                o += 1
            else:
                break
        sub[k] = o


@nb.njit(inline="always")
def _lane_sums(F, Z, S, XT, j, q, d, act, p, GW, sa, sb, g0, g1, g2, g3):
    """Member ``q``'s terms of point ``j`` in the sums of its gradient at ``θ`` against its
    field (``solvers._mala._current_terms``, the same operations): the sums in registers, so
    that the members of a group of four run as independent chains."""
    zz = Z[j, q]
    if act == ACT_RELU:
        dsj = 1.0 if zz > 0.0 else 0.0
    else:
        _, dsj = _act(zz, act, p)
    fj = F[j, q]
    hj = fj * dsj
    sa = _fma(fj, S[j, q], sa)
    sb += hj
    g0, g1, g2, g3 = _add_gradient_terms(hj, XT, j, d, g0, g1, g2, g3, GW[:, q])
    return sa, sb, g0, g1, g2, g3


@nb.njit(inline="always")
def _lane_proposal(TH, THP, S, F, ZP, SP, DF, XT, j, q, d, act, p, inv_N, GW, du2, pa, pb,
                   g0, g1, g2, g3):
    """Member ``q``'s terms of point ``j`` at its proposal (``solvers._mala._proposal_terms``
    at the field ``F``, the same operations): ``Δf``, ``Σ Δf²`` and the reverse gradient's
    sums, in registers."""
    zz = THP[d + 1, q]
    for k in range(d):
        zz = _fma(THP[1 + k, q], XT[k, j], zz)
    ZP[j, q] = zz
    if act == ACT_RELU:
        sj = zz if zz > 0.0 else 0.0
        dsj = 1.0 if zz > 0.0 else 0.0
    else:
        sj, dsj = _act(zz, act, p)
    SP[j, q] = sj
    dfj = (THP[0, q] * sj - TH[0, q] * S[j, q]) * inv_N
    DF[j, q] = dfj
    du2 = _fma(dfj, dfj, du2)
    epj = F[j, q] + dfj
    pa = _fma(epj, sj, pa)
    hj = epj * dsj
    pb += hj
    g0, g1, g2, g3 = _add_gradient_terms(hj, XT, j, d, g0, g1, g2, g3, GW[:, q])
    return du2, pa, pb, g0, g1, g2, g3


@nb.njit(inline="always")
def _store_lane(GW, q, d, sa, sb, g0, g1, g2, g3, SA, SB):
    """The sums of member ``q`` from registers into the lane arrays."""
    SA[q] = sa
    SB[q] = sb
    GW[0, q] = g0
    if d > 1:
        GW[1, q] = g1
    if d > 2:
        GW[2, q] = g2
    if d > 3:
        GW[3, q] = g3


@nb.njit(cache=True, nogil=True)
def mala_block_steps(T, X, y, XT, partial, scratch, sub, f, R, counts, f_sum, lam, eta, tau,
                     seed, step0, nsteps, kind, p, data_term, jumps, radial, dims, relu, block,
                     lanes, pcounts):
    """:func:`solvers._mala.mala_steps` with the blocked pass (``block = b >= 2``;
    docs/theory.md §2.6, "The blocked pass"; the module docstring).

    The members of a block are stored as lanes (structure of arrays: ``(coordinate or point,
    member)``); the loops over the points that carry the gradients' sums run four members at
    a time, their sums in registers (four independent chains of FMAs), and every member's sums
    run in the order of the points, so a member's numbers do not depend on the others'. The
    proposals' normals, the jumps and the radial moves' Gamma draws are made member by member.
    One thread: a round is 1–5 µs of work, less than a parallel region costs (docs/theory.md
    §2.6, "Cost").

    Parameters and return value as :func:`solvers._mala.mala_steps`, plus ``block`` (``b``) and
    ``lanes``, a tuple of :func:`lanes` entries (its length, ``b`` rounded up to a multiple
    of four, is a compile-time constant: the loops across the members run in groups of four),
    and ``pcounts``, int64 ``(4, N)`` or ``(4, 0)``: per particle, its Langevin moves, their
    acceptances, its radial moves and theirs, incremented when ``N`` wide (for
    the acceptance by particle mass, ``benchmarks/mala_blocks.py``).
    """
    N = T.shape[1]
    n = X.shape[0]
    d = _ndim(T, dims)
    D = d + 2
    if len(relu) == 0:
        act = kind
    else:
        act = ACT_RELU
    k1, k3, k4, k5, k6 = _keys(seed)
    k7 = _order_keys(seed)
    sd = math.sqrt(2.0 * eta * tau)
    inv4 = 1.0 / (4.0 * eta * tau) if tau > 0.0 else 0.0
    s_jump = math.sqrt(tau / lam)
    inv2s2 = 0.5 * lam / tau if tau > 0.0 else 0.0
    K = sub.shape[0]
    inv_N = 1.0 / N
    inv_n = 1.0 / n
    W = len(lanes)             # lanes: the block size rounded up to four, a compile-time
    bb = min(block, N, W)      # constant (the loops across members in groups of four)
    L = (N + bb - 1) // bb
    rot = np.empty(bb, dtype=np.int64)
    sig = np.empty(bb, dtype=np.int64)
    idx = np.empty(bb, dtype=np.int64)
    excl = np.empty(bb + 1, dtype=np.int64)
    # members as lanes: (coordinate, member) and (point, member)
    TH = np.zeros((D, W))
    THP = np.zeros((D, W))
    Z = np.zeros((n, W))
    S = np.zeros((n, W))
    ZP = np.zeros((n, W))
    SP = np.zeros((n, W))
    F = np.zeros((n, W))
    DF = np.zeros((n, W))
    GW = np.zeros((max(d, 1), W))
    zb = np.zeros(W)
    sa = np.zeros(W)
    sb = np.zeros(W)
    sqb = np.zeros(W)
    du2 = np.zeros(W)
    gr = np.zeros(W)
    C = np.empty(bb)
    FWD = np.empty(bb)
    PRI = np.empty(bb)
    EX = np.empty(bb)
    KL = np.empty(bb)
    JMP = np.zeros(bb, dtype=np.bool_)
    RAD = np.zeros(bb, dtype=np.bool_)
    e = np.empty(n)
    # one particle's rows for the helpers of the jumps and the other activations
    z1b = np.empty(n)
    s1b = np.empty(n)
    f1b = np.empty(n)
    zp1b = np.empty(n)
    sp1b = np.empty(n)
    ep1b = np.empty(n)
    th1 = np.empty(D)
    thp1 = np.empty(D)
    gw = np.empty(max(d, 1))
    mbuf = np.empty(K)
    g = np.empty(D)
    gp = np.empty(D)
    can_jump = jumps > 0.0 and N >= 2
    do_radial = radial > 0.0
    m_rad = 0.5 * D - 1.0
    sc = N / (n * tau)          # −ΔU/τ = C − (N/(nτ)) Σ_j Δf_j e_j
    hN = N / (2.0 * n)
    per = pcounts.shape[1] == N
    for st in range(nsteps + 1):
        _forward_serial(T, XT, n, partial, scratch, act, p, dims)
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
        off = _pass_order(k7, step, N, bb, L, rot, sig)
        for k in range(L):
            nm = 0
            for q in range(bb):
                ms = sig[q]
                v = k + rot[ms]
                if v >= L:
                    v -= L
                v += ms * L
                if v < N:
                    i = v + off
                    if i >= N:
                        i -= N
                    idx[nm] = i
                    nm += 1
            for c in range(D):
                for q in range(nm):
                    TH[c, q] = T[c, idx[q]]
            # ---- phase 1: every member's proposal, from its own field (no decision read)
            if data_term:
                # activations at θ
                for j in range(n):
                    for q in range(W):
                        zb[q] = TH[d + 1, q]
                    for kk in range(d):
                        xk = XT[kk, j]
                        for q in range(W):
                            zb[q] = _fma(TH[1 + kk, q], xk, zb[q])
                    for q in range(W):
                        zz = zb[q]
                        Z[j, q] = zz
                        if act == ACT_RELU:
                            S[j, q] = zz if zz > 0.0 else 0.0
                        else:
                            S[j, q], _ = _act(zz, act, p)
                # the fields F_q = e⁰ − Σ_{r<q} a_r s_r / N
                for j in range(n):
                    acc = e[j]
                    for q in range(nm):
                        F[j, q] = acc
                        acc -= TH[0, q] * S[j, q] * inv_N
                # the sums of the gradients at θ against F_q: four members at a time, their
                # sums in registers (four independent chains of FMAs)
                for kk in range(4, d):
                    for q in range(W):
                        GW[kk, q] = 0.0
                for q0 in range(0, W, 4):
                    a0 = b0 = c0 = d0 = e0 = f0 = 0.0
                    a1 = b1 = c1 = d1 = e1 = f1 = 0.0
                    a2 = b2 = c2 = d2 = e2 = f2 = 0.0
                    a3 = b3 = c3 = d3 = e3 = f3 = 0.0
                    for j in range(n):
                        a0, b0, c0, d0, e0, f0 = _lane_sums(F, Z, S, XT, j, q0, d, act, p, GW,
                                                            a0, b0, c0, d0, e0, f0)
                        a1, b1, c1, d1, e1, f1 = _lane_sums(F, Z, S, XT, j, q0 + 1, d, act, p,
                                                            GW, a1, b1, c1, d1, e1, f1)
                        a2, b2, c2, d2, e2, f2 = _lane_sums(F, Z, S, XT, j, q0 + 2, d, act, p,
                                                            GW, a2, b2, c2, d2, e2, f2)
                        a3, b3, c3, d3, e3, f3 = _lane_sums(F, Z, S, XT, j, q0 + 3, d, act, p,
                                                            GW, a3, b3, c3, d3, e3, f3)
                    _store_lane(GW, q0, d, a0, b0, c0, d0, e0, f0, sa, sb)
                    _store_lane(GW, q0 + 1, d, a1, b1, c1, d1, e1, f1, sa, sb)
                    _store_lane(GW, q0 + 2, d, a2, b2, c2, d2, e2, f2, sa, sb)
                    _store_lane(GW, q0 + 3, d, a3, b3, c3, d3, e3, f3, sa, sb)
            # the proposals, member by member (normals, jumps)
            ne = 0
            for q in range(nm):
                i = idx[q]
                # excl: the particle and the members before it (sorted), no jump centres
                pos = ne
                while pos > 0 and excl[pos - 1] > i:
                    excl[pos] = excl[pos - 1]
                    pos -= 1
                excl[pos] = i
                ne += 1
                jump = False
                if can_jump and N - ne >= 1:     # a centre outside the excluded ones exists
                    jump = _uniform(_hash(k3, _position(step, 3 * i))) < jumps
                JMP[q] = jump
                if jump:
                    _jump_subset(k5, step, i, K, N, excl, ne, sub)
                    mm = _below(k3, step, 3 * i + 2, K)
                    c0 = sub[mm]
                    for c in range(D):
                        THP[c, q] = T[c, c0] + s_jump * _normal(k4, _position(step, i * D + c))
                        th1[c] = TH[c, q]
                        thp1[c] = THP[c, q]
                    # log q_S(θ) − log q_S(θ'): the centres are current at q's decision
                    C[q] = (_log_mixture(th1, T, sub, K, D, inv2s2, mbuf)
                            - _log_mixture(thp1, T, sub, K, D, inv2s2, mbuf))
                else:
                    a = TH[0, q]
                    if data_term:       # solvers._mala._gradient
                        an = a * inv_n
                        g[0] = _fma(lam, a, sa[q] * inv_n)
                        g[d + 1] = _fma(an, sb[q], lam * TH[d + 1, q])
                        for kk in range(d):
                            g[1 + kk] = _fma(an, GW[kk, q], lam * TH[1 + kk, q])
                    else:
                        for c in range(D):
                            g[c] = lam * TH[c, q]
                    for c in range(D):
                        THP[c, q] = TH[c, q] - eta * g[c] \
                            + sd * _normal(k1, _position(step, i * D + c))
                    # the forward half of the log proposal ratio
                    fwd = 0.0
                    for c in range(D):
                        r = THP[c, q] - TH[c, q] + eta * g[c]
                        fwd += r * r
                    FWD[q] = fwd
            # the proposals' terms, across members: Δf, Σ Δf², the reverse gradient's sums at
            # the field F_q + Δf
            if data_term:
                for kk in range(4, d):
                    for q in range(W):
                        GW[kk, q] = 0.0
                for q0 in range(0, W, 4):
                    u0 = a0 = b0 = c0 = d0 = e0 = f0 = 0.0
                    u1 = a1 = b1 = c1 = d1 = e1 = f1 = 0.0
                    u2 = a2 = b2 = c2 = d2 = e2 = f2 = 0.0
                    u3 = a3 = b3 = c3 = d3 = e3 = f3 = 0.0
                    for j in range(n):
                        u0, a0, b0, c0, d0, e0, f0 = _lane_proposal(
                            TH, THP, S, F, ZP, SP, DF, XT, j, q0, d, act, p, inv_N, GW, u0, a0,
                            b0, c0, d0, e0, f0)
                        u1, a1, b1, c1, d1, e1, f1 = _lane_proposal(
                            TH, THP, S, F, ZP, SP, DF, XT, j, q0 + 1, d, act, p, inv_N, GW, u1,
                            a1, b1, c1, d1, e1, f1)
                        u2, a2, b2, c2, d2, e2, f2 = _lane_proposal(
                            TH, THP, S, F, ZP, SP, DF, XT, j, q0 + 2, d, act, p, inv_N, GW, u2,
                            a2, b2, c2, d2, e2, f2)
                        u3, a3, b3, c3, d3, e3, f3 = _lane_proposal(
                            TH, THP, S, F, ZP, SP, DF, XT, j, q0 + 3, d, act, p, inv_N, GW, u3,
                            a3, b3, c3, d3, e3, f3)
                    du2[q0] = u0
                    du2[q0 + 1] = u1
                    du2[q0 + 2] = u2
                    du2[q0 + 3] = u3
                    _store_lane(GW, q0, d, a0, b0, c0, d0, e0, f0, sa, sb)
                    _store_lane(GW, q0 + 1, d, a1, b1, c1, d1, e1, f1, sa, sb)
                    _store_lane(GW, q0 + 2, d, a2, b2, c2, d2, e2, f2, sa, sb)
                    _store_lane(GW, q0 + 3, d, a3, b3, c3, d3, e3, f3, sa, sb)
            else:
                for j in range(n):
                    for q in range(nm):
                        DF[j, q] = 0.0
                for q in range(nm):
                    du2[q] = 0.0
            # the rest of C_q: −ΔU/τ without −(N/(nτ)) Σ Δf_j e_j (needs the errors at
            # decision time) and the reverse half of the log proposal ratio
            for q in range(nm):
                nq = 0.0
                for c in range(D):
                    nq += (THP[c, q] - TH[c, q]) * (THP[c, q] + TH[c, q])
                cq = -(du2[q] * hN + 0.5 * lam * nq) / tau
                if JMP[q]:
                    C[q] += cq
                    continue
                ap = THP[0, q]
                if data_term:
                    an = ap * inv_n
                    gp[0] = _fma(lam, ap, sa[q] * inv_n)
                    gp[d + 1] = _fma(an, sb[q], lam * THP[d + 1, q])
                    for kk in range(d):
                        gp[1 + kk] = _fma(an, GW[kk, q], lam * THP[1 + kk, q])
                else:
                    for c in range(D):
                        gp[c] = lam * THP[c, q]
                bwd = 0.0
                for c in range(D):
                    r = TH[c, q] - THP[c, q] + eta * gp[c]
                    bwd += r * r
                C[q] = cq - (bwd - FWD[q]) * inv4
            # ---- phase 2: the decisions, in order, against the errors as they are
            for q in range(nm):
                i = idx[q]
                log_a = C[q] - sc * _dot_lane(DF, q, e, n) if data_term else C[q]
                ok = log_a >= 0.0 or \
                    math.log(_uniform(_hash(k3, _position(step, 3 * i + 1)))) < log_a
                if JMP[q]:
                    counts[2] += 1
                else:
                    counts[0] += 1
                if per and not JMP[q]:
                    pcounts[0, i] += 1
                    if ok:
                        pcounts[1, i] += 1
                if ok:
                    for c in range(D):
                        TH[c, q] = THP[c, q]
                        T[c, i] = THP[c, q]
                    if JMP[q]:
                        counts[3] += 1
                        if data_term:
                            for j in range(n):
                                if (Z[j, q] > 0.0) != (ZP[j, q] > 0.0):
                                    counts[4] += 1
                                    break
                    else:
                        counts[1] += 1
                    if data_term:
                        for j in range(n):
                            e[j] += DF[j, q]
                            Z[j, q] = ZP[j, q]
                            S[j, q] = SP[j, q]
            if not do_radial:
                continue
            # ---- phase 3: the radial proposals, from the fields G_q after phase 2
            if data_term:
                for j in range(n):
                    acc = e[j]
                    for q in range(nm):
                        F[j, q] = acc
                        acc -= TH[0, q] * S[j, q] * inv_N
                for q in range(W):
                    sa[q] = 0.0
                    sqb[q] = 0.0
                for j in range(n):
                    for q in range(W):
                        sj = S[j, q]
                        sa[q] = _fma(F[j, q], sj, sa[q])
                        sqb[q] = _fma(sj, sj, sqb[q])
            for q in range(nm):
                i = idx[q]
                RAD[q] = False
                gr[q] = 0.0
                if not (radial >= 1.0 or _uniform(_hash(k6, _position(step, 4 * i))) < radial):
                    continue
                counts[5] += 1
                if per:
                    pcounts[2, i] += 1
                a = TH[0, q]
                tt = 0.0
                for c in range(D):
                    tt += TH[c, q] * TH[c, q]
                if act == ACT_RELU or not data_term:
                    A = 0.5 * lam
                    B = 0.0
                    if data_term and tt > 0.0:
                        inv_t = 1.0 / tt
                        P2 = a * a * sqb[q]
                        A += (a * sa[q] - P2 * inv_N) * inv_t * inv_n
                        B = P2 * inv_t * inv_t / (2.0 * n * N)
                else:
                    for c in range(D):
                        th1[c] = TH[c, q]
                    for j in range(n):
                        z1b[j] = Z[j, q]
                        s1b[j] = S[j, q]
                        f1b[j] = F[j, q]
                    tt, A, B = _radial_law(th1, n, N, act, p, inv_N, lam, f1b, z1b, s1b, sa[q],
                                           sqb[q], data_term)
                tn, kap, inv_s = _radial_proposal(A, B, m_rad, tau,
                                                  _hash(k6, _position(step, 4 * i + 1)),
                                                  _hash(k6, _position(step, 4 * i + 3)))
                if not (tt > 0.0 and tn > 0.0):
                    continue
                RAD[q] = True
                rho2 = tn / tt
                rho = math.sqrt(rho2)
                for c in range(D):
                    THP[c, q] = rho * TH[c, q]
                gr[q] = (rho2 - 1.0) * a * inv_N
                # the prior's part of ΔU, and (t'/t)^m q(t)/q(t') of the Gamma proposal
                PRI[q] = 0.5 * lam * (tn - tt)
                EX[q] = (tn - tt) * inv_s
                KL[q] = kap * math.log(rho2) if kap > 0.0 else 0.0
                s2 = 0.0
                if data_term and act != ACT_RELU:
                    for c in range(D):
                        thp1[c] = THP[c, q]
                    _proposal_terms(thp1, a, XT, n, d, act, p, inv_N, f1b, s1b, zp1b, sp1b, ep1b,
                                    False, gw)
                    for j in range(n):
                        dfj = (thp1[0] * sp1b[j] - a * s1b[j]) * inv_N
                        DF[j, q] = dfj
                        s2 = _fma(dfj, dfj, s2)
                C[q] = -(s2 * hN + PRI[q]) / tau + EX[q] - KL[q]
            if data_term and act == ACT_RELU:   # Δf = (ρ² − 1) a s / N, across members
                for q in range(W):
                    du2[q] = 0.0
                for j in range(n):
                    for q in range(W):
                        dfj = gr[q] * S[j, q]
                        DF[j, q] = dfj
                        du2[q] = _fma(dfj, dfj, du2[q])
                for q in range(nm):
                    if RAD[q]:
                        C[q] = -(du2[q] * hN + PRI[q]) / tau + EX[q] - KL[q]
            # ---- phase 4: their decisions, in order
            for q in range(nm):
                if not RAD[q]:
                    continue
                i = idx[q]
                log_a = C[q] - sc * _dot_lane(DF, q, e, n) if data_term else C[q]
                if log_a >= 0.0 or \
                        math.log(_uniform(_hash(k6, _position(step, 4 * i + 2)))) < log_a:
                    counts[6] += 1
                    if per:
                        pcounts[3, i] += 1
                    for c in range(D):
                        T[c, i] = THP[c, q]
                    if data_term:
                        for j in range(n):
                            e[j] += DF[j, q]
    return 0 if _scaled_residuals(f, y, R) else 1
