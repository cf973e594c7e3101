"""Private numba kernels of the Langevin dynamics: the block routines, the parallel passes and
the serial step driver. They draw on ``solvers._fma`` (the explicit multiply-add),
``solvers._rng`` (the counter-based noise) and ``solvers._activations``; the curvature of the
data mode is ``solvers._curvature``, the Metropolis-adjusted sweep ``solvers._mala``, region
counting ``solvers.arrangement``.

One Euler–Maruyama step of the mean-field Langevin dynamics (THEORY §2), for particles
``θ_i = (a_i, w_i, b_i)``::

    θ_i ← θ_i − η ∇_θ Ψ(θ_i; ρ̂_N) + sqrt(2 η τ) ξ_i,
    ∇_a Ψ = Σ_{j∈J} R_j σ(z_ij) + λ a,   ∇_u Ψ = a Σ_{j∈J} R_j σ'(z_ij) x̃_j + λ u,

with ``z_ij = w_i·x_j + b_i``, or the Leimkuhler–Matthews step (Leimkuhler & Matthews,
Appl. Math. Res. Express 2013; THEORY §2), the same drift with the noise of two consecutive steps averaged::

    θ_i ← θ_i − η ∇_θ Ψ(θ_i; ρ̂_N) + sqrt(2 η τ) (ξ_i(step) + ξ_i(step + 1)) / 2.

Full batch: ``J = {0..n-1}`` and ``R_j = (f(x_j) − y_j)/n``.
Minibatch of size ``B``: ``J`` is a uniformly random ``B``-subset (without replacement) and
``R_j = (f(x_j) − y_j)/B``, i.e. the unbiased estimate ``(n/B) Σ_{j∈J}`` of the data term; the
predictor ``f(x_j)`` on a batch point is still the average over *all* particles.

Layout. Inside the kernels the particles are stored transposed ("structure of arrays"),
``T`` of shape ``(d+2, N)``: row 0 is ``a``, rows ``1..d`` are ``w``, row ``d+1`` is ``b``.
Loops over particles are then unit-stride and vectorise. :class:`solvers.stepper.Stepper`
converts to and from the public ``(N, d+2)`` row layout once per call.

One step is one parallel pass over fixed blocks of ``BLOCK`` particles. For its block, a thread

1. accumulates the data gradient over the current batch points (vectorised over particles;
   the sum over ``j`` is serial per particle, in batch order),
2. applies weight decay, drift and noise to the block (``a`` last: ``∇_u`` uses the old ``a``;
   Leimkuhler–Matthews draws ``ξ(step)`` and ``ξ(step + 1)``, both pure functions of their key,
   so it needs no state beyond the particles),
3. computes the block's partial predictor sums ``Σ_{i∈block} a_i σ(z_ij)`` on the *next* step's
   batch points (vectorised over points; the sum over particles is serial in particle order).

The partial sums of all blocks are added serially in block order between steps. No reduction
depends on the thread count, no fast-math reassociation is used, and multiply-adds are
explicit FMAs (:func:`_fma`) that round identically in every compiled context, so runs are
bitwise independent of the number of threads and of how a run is split into calls. (They
agree with the NumPy reference of ``solvers.numpy_model`` to round-off, not bitwise.)

Noise: :mod:`solvers._rng`. The noise rule of a step (Euler–Maruyama or Leimkuhler–Matthews) is
the integer code ``noise`` of :data:`solvers.integrators.INTEGRATORS`.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from solvers._activations import ACT_RELU, _act_pair, _relu
from solvers._fma import _fma
from solvers._noise import rule_fast, rule_slow
from solvers._numba_cache import install as _install_cache_fallbacks
from solvers._rng import _position, _seed_keys, batch_indices
from solvers.integrators import NOISE_EM, NOISE_LM

_install_cache_fallbacks()   # a damaged or unwritable numba cache: recompile, with a note

#: Particles per block. Fixed (never derived from the thread count) so that the floating-point
#: summation order, hence the result, is reproducible.
BLOCK = 512


# ---------------------------------------------------------------------------------------------
# Block routines (inlined into the parallel passes)
#
# ``dims`` is either a tuple of length d or the empty tuple ``()``. A d-tuple's length is a
# compile-time constant, so that the loops over coordinates unroll and the loops over particles
# vectorise (one specialisation per d). ``()`` means "d at run time", ``d = T.shape[0] - 2``:
# one compiled kernel serves every d. numba types ``()`` distinctly and prunes the branches on
# ``len(dims) == 0`` of a jitted function's own argument at compile time; the parallel passes
# use that to run the run-time-d block routines (``*_rt``: loops over coordinates outside, over
# particles or points inside, so that the inner loops still vectorise). Both variants do the same
# floating-point operations in the same order (FMAs included), hence give bitwise equal results.
# The inlined helpers below (``_z``, ``_grad_block``, ...) accept ``()`` too, through
# :func:`_ndim` (correct, but their loops over coordinates then do not unroll).
# Indices inside a block are unsigned so that no negative-index wraparound blocks unit-stride
# vector loads. Per-thread scratch row ``sc[t]`` (L = BLOCK):
#     [0, L) ga   [L, 2L) gb   [(2+k)L, (3+k)L) gw_k   [(2+d+c)L, (3+d+c)L) flags of the
#     noise draws of coordinate c that the ziggurat's fast path rejected
#     [(2+2d+2)L, (2+2d+2)L + n) one row of pre-activations for the forward pass
# ---------------------------------------------------------------------------------------------

_U = np.uint64


def scratch_shape(d: int, n: int) -> tuple[int, int]:
    """Shape of the per-thread scratch: one row per possible thread."""
    return nb.config.NUMBA_NUM_THREADS, (2 * d + 4) * BLOCK + n


@nb.njit(inline="always")
def _ndim(T, dims):
    """The input dimension ``d``: ``len(dims)`` for a d-tuple (a compile-time constant), else
    (``dims = ()``) the run-time ``T.shape[0] - 2`` of the column layout ``T`` (d+2, N)."""
    if len(dims) == 0:
        return T.shape[0] - 2
    return len(dims)


@nb.njit(inline="always")
def _z(T, i, XT, j, dims):
    """Pre-activation ``z_ij = b_i + Σ_k w_ik x_jk``: FMAs in this order, everywhere."""
    d = _ndim(T, dims)
    z = T[d + 1, i]
    for k in range(d):
        z = _fma(T[1 + k, i], XT[k, j], z)
    return z


@nb.njit(inline="always")
def _forward_block(T, lo, m, XT, nb_pts, partial, blk, sc, t, zoff, kind, p, dims):
    """``partial[blk, j] = Σ_{i<m} a σ(z)`` for particles ``lo..lo+m-1`` and the points
    ``XT[:, j]``, ``j < nb_pts``: serial over particles (four per sweep, added in order),
    vectorised over points."""
    for j in range(nb_pts):
        partial[blk, j] = 0.0
    ii = _U(0)
    if kind == ACT_RELU:
        while ii + _U(4) <= m:
            i = lo + ii
            a0 = T[0, i]
            a1 = T[0, i + _U(1)]
            a2 = T[0, i + _U(2)]
            a3 = T[0, i + _U(3)]
            for j in range(nb_pts):
                acc = partial[blk, j]
                acc = _fma(a0, _relu(_z(T, i, XT, j, dims)), acc)
                acc = _fma(a1, _relu(_z(T, i + _U(1), XT, j, dims)), acc)
                acc = _fma(a2, _relu(_z(T, i + _U(2), XT, j, dims)), acc)
                acc = _fma(a3, _relu(_z(T, i + _U(3), XT, j, dims)), acc)
                partial[blk, j] = acc
            ii += _U(4)
        while ii < m:
            i = lo + ii
            a = T[0, i]
            for j in range(nb_pts):
                partial[blk, j] = _fma(a, _relu(_z(T, i, XT, j, dims)), partial[blk, j])
            ii += _U(1)
    else:
        while ii < m:
            i = lo + ii
            a = T[0, i]
            for j in range(nb_pts):
                sc[t, zoff + _U(j)] = _z(T, i, XT, j, dims)
            for j in range(nb_pts):
                s, _ = _act_pair(sc[t, zoff + _U(j)], kind, p)
                partial[blk, j] = _fma(a, s, partial[blk, j])
            ii += _U(1)


@nb.njit(inline="always")
def _grad_block(T, lo, m, XT, Rb, nb_pts, sc, t, kind, p, dims):
    """Data gradient of the block into the scratch: ``ga = Σ_j R_j σ(z_ij)``,
    ``gb = Σ_j R_j σ'(z_ij)``, ``gw_k = Σ_j R_j σ'(z_ij) x_jk``: serial in ``j`` for each
    particle (four points per sweep, added in order), vectorised over particles."""
    d = _ndim(T, dims)
    L = _U(BLOCK)
    for ii in range(m):
        sc[t, ii] = 0.0
        sc[t, L + ii] = 0.0
        for k in range(d):
            sc[t, _U(2 + k) * L + ii] = 0.0
    j = 0
    if kind == ACT_RELU:
        while j + 4 <= nb_pts:
            r0 = Rb[j]
            r1 = Rb[j + 1]
            r2 = Rb[j + 2]
            r3 = Rb[j + 3]
            for ii in range(m):
                i = lo + ii
                z0 = _z(T, i, XT, j, dims)
                z1 = _z(T, i, XT, j + 1, dims)
                z2 = _z(T, i, XT, j + 2, dims)
                z3 = _z(T, i, XT, j + 3, dims)
                ga = sc[t, ii]
                ga = _fma(r0, _relu(z0), ga)
                ga = _fma(r1, _relu(z1), ga)
                ga = _fma(r2, _relu(z2), ga)
                ga = _fma(r3, _relu(z3), ga)
                sc[t, ii] = ga
                g0 = r0 if z0 > 0.0 else 0.0
                g1 = r1 if z1 > 0.0 else 0.0
                g2 = r2 if z2 > 0.0 else 0.0
                g3 = r3 if z3 > 0.0 else 0.0
                gb = sc[t, L + ii]
                gb += g0
                gb += g1
                gb += g2
                gb += g3
                sc[t, L + ii] = gb
                for k in range(d):
                    o = _U(2 + k) * L + ii
                    gw = sc[t, o]
                    gw = _fma(g0, XT[k, j], gw)
                    gw = _fma(g1, XT[k, j + 1], gw)
                    gw = _fma(g2, XT[k, j + 2], gw)
                    gw = _fma(g3, XT[k, j + 3], gw)
                    sc[t, o] = gw
            j += 4
    while j < nb_pts:
        r = Rb[j]
        for ii in range(m):
            z = _z(T, lo + ii, XT, j, dims)
            if kind == ACT_RELU:
                s = _relu(z)
                g = r if z > 0.0 else 0.0
            else:
                s, ds = _act_pair(z, kind, p)
                g = r * ds
            sc[t, ii] = _fma(r, s, sc[t, ii])
            sc[t, L + ii] += g
            for k in range(d):
                o = _U(2 + k) * L + ii
                sc[t, o] = _fma(g, XT[k, j], sc[t, o])
        j += 1


@nb.njit(inline="always")
def _drift(v, ag, lam, eta):
    """One coordinate's drift step ``v − η (ag + λ v)`` (``ag``: its data gradient,
    ``a Σ…`` for ``w`` and ``b``)."""
    return v - eta * (ag + lam * v)


@nb.njit(inline="always")
def _place(T, c, i, u, inc, ok, sc, t, off):
    """``T[c, i] = u + inc`` when the fast path took the draws; else ``T[c, i] = u`` and a
    flag at ``sc[t, off]`` (the slow path adds the increment later)."""
    T[c, i] = u + inc if ok else u
    sc[t, off] = 0.0 if ok else 1.0


@nb.njit(inline="always")
def _update_block(T, lo, m, sc, t, lam, eta, sd, k, step, noise, dims):
    """``θ ← θ − η (g + λ θ) + noise`` for the block (``g_u = a (Σ…)`` uses the old ``a``),
    the noise by the rule ``noise`` (``solvers._noise``): ``sd ξ_step`` (Euler–Maruyama) or
    ``sd (ξ_step + ξ_{step+1})/2`` (Leimkuhler–Matthews). ``sd = 0``: no noise.

    One sweep per rule, the code a constant in each (see ``solvers._noise``).
    """
    if not sd > 0.0:
        _noisy_block(T, lo, m, sc, t, lam, eta, sd, k, step, -1, dims)
    elif noise == NOISE_LM:
        _noisy_block(T, lo, m, sc, t, lam, eta, sd, k, step, NOISE_LM, dims)
    else:
        _noisy_block(T, lo, m, sc, t, lam, eta, sd, k, step, NOISE_EM, dims)


@nb.njit(inline="always")
def _noisy_block(T, lo, m, sc, t, lam, eta, sd, k, step, rule, dims):
    """Drift and the noise of ``rule`` (``-1``: no noise) for the block (``w`` and ``b`` from
    the old ``a``, ``a`` last). The noise of ``(step, i, c)`` comes from the vectorised fast
    path; the draws it rejects are flagged in the scratch and redone exactly in a second
    sweep."""
    d = _ndim(T, dims)
    D = d + 2
    L = _U(BLOCK)
    p0 = _position(step, 0)
    p1 = _position(step + 1, 0)
    nz = _U(2 + d) * L
    for ii in range(m):
        i = lo + ii
        a = T[0, i]
        for c in range(d):
            u = _drift(T[1 + c, i], a * sc[t, _U(2 + c) * L + ii], lam, eta)
            _put(T, 1 + c, i, u, rule, k, p0, p1, D, sd, sc, t, nz + _U(1 + c) * L + ii)
        u = _drift(T[D - 1, i], a * sc[t, L + ii], lam, eta)
        _put(T, D - 1, i, u, rule, k, p0, p1, D, sd, sc, t, nz + _U(D - 1) * L + ii)
        _put(T, 0, i, _drift(a, sc[t, ii], lam, eta), rule, k, p0, p1, D, sd, sc, t, nz + ii)
    if rule >= 0:
        _slow_draws(T, lo, m, sc, t, sd, k, p0, p1, nz, D, rule)


@nb.njit(inline="always")
def _put(T, row, i, u, rule, k, p0, p1, D, sd, sc, t, off):
    """``T[row, i] = u`` plus the fast-path noise of ``rule`` (none for ``-1``)."""
    if rule < 0:
        T[row, i] = u
    else:
        q = i * _U(D) + _U(row)
        inc, ok = rule_fast(rule, k, p0 + q, p1 + q, sd)
        _place(T, row, i, u, inc, ok, sc, t, off)


@nb.njit(inline="always")
def _slow_draws(T, lo, m, sc, t, sd, k, p0, p1, nz, D, rule):
    """Add the exact increment of every draw the fast path flagged (rows ``nz + c L``)."""
    L = _U(BLOCK)
    for c in range(D):
        off = nz + _U(c) * L
        for ii in range(m):
            if sc[t, off + ii] != 0.0:
                i = lo + ii
                q = i * _U(D) + _U(c)
                T[c, i] += rule_slow(rule, k, p0 + q, p1 + q, sd)


# ---------------------------------------------------------------------------------------------
# Block routines with d at run time (``dims = ()``): the same operations in the same order as
# the routines above, with the loops over coordinates outside the loops over particles
# (gradient, update) or points (forward), so that the inner loops vectorise for any d
# ---------------------------------------------------------------------------------------------

@nb.njit(inline="always")
def _forward_block_rt(T, lo, m, XT, nb_pts, partial, blk, sc, t, zoff, kind, p):
    """:func:`_forward_block` for ``d = T.shape[0] - 2``: per particle, its pre-activations on
    all points into the scratch row at ``zoff`` (``b`` then one FMA per coordinate), then its
    term added to every point's sum; each sum still runs over particles in order."""
    d = T.shape[0] - 2
    for j in range(nb_pts):
        partial[blk, j] = 0.0
    for ii in range(m):
        i = lo + ii
        a = T[0, i]
        bi = T[d + 1, i]
        for j in range(nb_pts):
            sc[t, zoff + _U(j)] = bi
        for k in range(d):
            w = T[1 + k, i]
            for j in range(nb_pts):
                o = zoff + _U(j)
                sc[t, o] = _fma(w, XT[k, j], sc[t, o])
        if kind == ACT_RELU:
            for j in range(nb_pts):
                partial[blk, j] = _fma(a, _relu(sc[t, zoff + _U(j)]), partial[blk, j])
        else:
            for j in range(nb_pts):
                s, _ = _act_pair(sc[t, zoff + _U(j)], kind, p)
                partial[blk, j] = _fma(a, s, partial[blk, j])


@nb.njit(inline="always")
def _grad_block_rt(T, lo, m, XT, Rb, nb_pts, sc, t, kind, p):
    """:func:`_grad_block` for ``d = T.shape[0] - 2``, one point per sweep: the block's
    pre-activations on point ``j`` go to the scratch rows of the noise flags (free until the
    update), are replaced by ``g_i = R_j σ'(z_ij)``, and each coordinate's ``gw_k`` gets its
    FMA; every sum still runs over ``j`` in order."""
    d = T.shape[0] - 2
    L = _U(BLOCK)
    zo = _U(2 + d) * L
    for ii in range(m):
        sc[t, ii] = 0.0
        sc[t, L + ii] = 0.0
    for k in range(d):
        for ii in range(m):
            sc[t, _U(2 + k) * L + ii] = 0.0
    for j in range(nb_pts):
        r = Rb[j]
        for ii in range(m):
            sc[t, zo + ii] = T[d + 1, lo + ii]
        for k in range(d):
            x = XT[k, j]
            for ii in range(m):
                sc[t, zo + ii] = _fma(T[1 + k, lo + ii], x, sc[t, zo + ii])
        if kind == ACT_RELU:
            for ii in range(m):
                z = sc[t, zo + ii]
                g = r if z > 0.0 else 0.0
                sc[t, ii] = _fma(r, _relu(z), sc[t, ii])
                sc[t, L + ii] += g
                sc[t, zo + ii] = g
        else:
            for ii in range(m):
                s, ds = _act_pair(sc[t, zo + ii], kind, p)
                g = r * ds
                sc[t, ii] = _fma(r, s, sc[t, ii])
                sc[t, L + ii] += g
                sc[t, zo + ii] = g
        for k in range(d):
            x = XT[k, j]
            o = _U(2 + k) * L
            for ii in range(m):
                sc[t, o + ii] = _fma(sc[t, zo + ii], x, sc[t, o + ii])


@nb.njit(inline="always")
def _update_block_rt(T, lo, m, sc, t, lam, eta, sd, k, step, noise):
    """:func:`_update_block` for ``d = T.shape[0] - 2``, one coordinate per sweep over the
    block (``w`` and ``b`` from the old ``a``, ``a`` last); the same expressions and draws."""
    if not sd > 0.0:
        _noisy_block_rt(T, lo, m, sc, t, lam, eta, sd, k, step, -1)
    elif noise == NOISE_LM:
        _noisy_block_rt(T, lo, m, sc, t, lam, eta, sd, k, step, NOISE_LM)
    else:
        _noisy_block_rt(T, lo, m, sc, t, lam, eta, sd, k, step, NOISE_EM)


@nb.njit(inline="always")
def _noisy_block_rt(T, lo, m, sc, t, lam, eta, sd, k, step, rule):
    """Drift and the noise of ``rule`` (``-1``: no noise) for the block, one coordinate per
    sweep; the draws the fast path rejects are redone in a last sweep."""
    D = T.shape[0]
    d = D - 2
    L = _U(BLOCK)
    nz = _U(2 + d) * L
    p0 = _position(step, 0)
    p1 = _position(step + 1, 0)
    for c in range(d + 1):
        row = 1 + c                                   # w_1..w_d, then b (row d+1)
        g = _U(2 + c) * L if c < d else L             # its gradient's scratch row
        fo = nz + _U(row) * L                         # its noise flags
        for ii in range(m):
            i = lo + ii
            u = _drift(T[row, i], T[0, i] * sc[t, g + ii], lam, eta)
            _put(T, row, i, u, rule, k, p0, p1, D, sd, sc, t, fo + ii)
    for ii in range(m):
        i = lo + ii
        u = _drift(T[0, i], sc[t, ii], lam, eta)
        _put(T, 0, i, u, rule, k, p0, p1, D, sd, sc, t, nz + ii)
    if rule >= 0:
        _slow_draws(T, lo, m, sc, t, sd, k, p0, p1, nz, D, rule)


# ---------------------------------------------------------------------------------------------
# Parallel passes
# ---------------------------------------------------------------------------------------------

@nb.njit(parallel=True, cache=True)
def forward(T, XT, nb_pts, partial, scratch, kind, p, dims):
    """Block partial sums of the predictor: ``partial[blk, j] = Σ_{i∈blk} a_i σ(z_ij)`` for the
    points ``XT[:, :nb_pts]`` (``XT`` of shape (d, ≥nb_pts); ``dims`` a d-tuple, or ``()``
    for d at run time)."""
    N = T.shape[1]
    nblocks = (N + BLOCK - 1) // BLOCK
    if len(dims) == 0:       # d at run time (pruned at compile time: one branch is compiled)
        zoff = _U((2 * (T.shape[0] - 2) + 4) * BLOCK)
        for blk in nb.prange(nblocks):
            t = nb.get_thread_id()
            lo = _U(blk * BLOCK)
            m = _U(min(BLOCK, N - blk * BLOCK))
            _forward_block_rt(T, lo, m, XT, nb_pts, partial, blk, scratch, t, zoff, kind, p)
    else:
        zoff = _U((2 * len(dims) + 4) * BLOCK)
        for blk in nb.prange(nblocks):
            t = nb.get_thread_id()
            lo = _U(blk * BLOCK)
            m = _U(min(BLOCK, N - blk * BLOCK))
            _forward_block(T, lo, m, XT, nb_pts, partial, blk, scratch, t, zoff, kind, p, dims)


@nb.njit(parallel=True, cache=True)
def fused_step(T, XcT, Rc, nc, XnT, nn, partial, scratch, lam, eta, sd, k, step, kind, p,
               noise, dims):
    """One step of every particle with the noise rule ``noise`` (``solvers._noise``:
    Euler–Maruyama or Leimkuhler–Matthews), then the block partial sums of the predictor at
    the new particles on the next points ``XnT[:, :nn]``.

    ``Rc[:nc]`` are the (scaled) residuals on the current points ``XcT[:, :nc]``; ``nc = 0``
    drops the data term. ``sd = sqrt(2 η τ)``; the noise is keyed by ``(k, step)`` (and
    ``(k, step + 1)`` for Leimkuhler–Matthews). ``dims``: as for :func:`run_steps`.
    """
    N = T.shape[1]
    nblocks = (N + BLOCK - 1) // BLOCK
    if len(dims) == 0:       # d at run time (pruned at compile time: one branch is compiled)
        zoff = _U((2 * (T.shape[0] - 2) + 4) * BLOCK)
        for blk in nb.prange(nblocks):
            t = nb.get_thread_id()
            lo = _U(blk * BLOCK)
            m = _U(min(BLOCK, N - blk * BLOCK))
            _grad_block_rt(T, lo, m, XcT, Rc, nc, scratch, t, kind, p)
            _update_block_rt(T, lo, m, scratch, t, lam, eta, sd, k, step, noise)
            _forward_block_rt(T, lo, m, XnT, nn, partial, blk, scratch, t, zoff, kind, p)
    else:
        zoff = _U((2 * len(dims) + 4) * BLOCK)
        for blk in nb.prange(nblocks):
            t = nb.get_thread_id()
            lo = _U(blk * BLOCK)
            m = _U(min(BLOCK, N - blk * BLOCK))
            _grad_block(T, lo, m, XcT, Rc, nc, scratch, t, kind, p, dims)
            _update_block(T, lo, m, scratch, t, lam, eta, sd, k, step, noise, dims)
            _forward_block(T, lo, m, XnT, nn, partial, blk, scratch, t, zoff, kind, p, dims)


@nb.njit(parallel=True, cache=True)
def _to_columns_blocks(theta, T):
    N, D = theta.shape
    for blk in nb.prange((N + BLOCK - 1) // BLOCK):
        for i in range(blk * BLOCK, min(N, (blk + 1) * BLOCK)):
            for k in range(D):
                T[k, i] = theta[i, k]


@nb.njit(cache=True)
def _to_columns_one(theta, T):
    N, D = theta.shape
    for i in range(N):
        for k in range(D):
            T[k, i] = theta[i, k]


def to_columns(theta, T):
    """``T[k, i] = theta[i, k]``: rows (N, d+2) to the kernels' (d+2, N) layout (in parallel
    over blocks of :data:`BLOCK` particles; one block without a parallel region)."""
    if theta.shape[0] <= BLOCK:
        _to_columns_one(theta, T)
    else:
        _to_columns_blocks(theta, T)


@nb.njit(inline="always")
def _rows_block(T, theta, lo, hi):
    D = theta.shape[1]
    sq = 0.0
    for i in range(lo, hi):
        for k in range(D):
            v = T[k, i]
            theta[i, k] = v
            sq += v * v
    return sq


@nb.njit(parallel=True, cache=True)
def _to_rows_blocks(T, theta):
    N = theta.shape[0]
    nblocks = (N + BLOCK - 1) // BLOCK
    sums = np.zeros(nblocks)
    for blk in nb.prange(nblocks):
        sums[blk] = _rows_block(T, theta, blk * BLOCK, min(N, (blk + 1) * BLOCK))
    total = 0.0
    for blk in range(nblocks):
        total += sums[blk]
    return total


@nb.njit(cache=True)
def _to_rows_one(T, theta):
    return _rows_block(T, theta, 0, theta.shape[0])


def to_rows(T, theta) -> float:
    """``theta[i, k] = T[k, i]``; returns ``Σ_ik theta[i, k]²``, summed within blocks of
    :data:`BLOCK` particles and then over the blocks in order (the same whatever the thread
    count): not finite when an entry is not, or when the squares overflow."""
    if theta.shape[0] <= BLOCK:
        return _to_rows_one(T, theta)
    return _to_rows_blocks(T, theta)


# ---------------------------------------------------------------------------------------------
# Serial driver
# ---------------------------------------------------------------------------------------------

@nb.njit(inline="always")
def _select(seed, step, X, B, perm, idx, XT):
    """Points of ``step``: all ``n`` in order (``B = 0``) or a minibatch; fills ``idx`` and the
    gathered, transposed points ``XT[:, :nb]``; returns ``nb``."""
    n, d = X.shape
    if B == 0:
        for j in range(n):
            idx[j] = j
        nbp = n
    else:
        batch_indices(seed, step, n, B, perm, idx)
        nbp = B
    for j in range(nbp):
        for k in range(d):
            XT[k, j] = X[idx[j], k]
    return nbp


@nb.njit(inline="always")
def _scaled_residuals(f, y, R):
    """``R_j = (f_j − y_j)/n`` for every point; whether all of them are finite."""
    n = y.shape[0]
    ok = True
    for j in range(n):
        R[j] = (f[j] - y[j]) / n
        if not np.isfinite(R[j]):
            ok = False
    return ok


@nb.njit(inline="always")
def _reduce(partial, nbp, N, out):
    """``out[j] = (Σ_blk partial[blk, j]) / N`` for ``j < nbp``, serial in block order."""
    for j in range(nbp):
        out[j] = 0.0
    for blk in range(partial.shape[0]):
        for j in range(nbp):
            out[j] += partial[blk, j]
    for j in range(nbp):
        out[j] /= N


@nb.njit(cache=True)
def run_steps(T, X, y, B, partial, scratch, ibuf, fbuf, f, R, R_prev, lam, eta, tau, seed,
              step0, nsteps, kind, p, data_term, noise, dims):
    """Advance ``nsteps`` steps from global step ``step0``.

    Step ``s`` adds the noise ``sqrt(2ητ) ξ_s`` (Euler–Maruyama) or
    ``sqrt(2ητ) (ξ_s + ξ_{s+1})/2`` (Leimkuhler–Matthews), by the rule ``noise``, with the
    ``τ`` of this call: the result depends on ``(T, step0, τ)`` only, so a run split into
    calls at any step (and with another ``τ`` from some step on) is bitwise the run done in
    one piece with those ``τ``.

    Parameters
    ----------
    T : ndarray (d+2, N)
        Particles in column layout, updated in place.
    X, y : ndarray (n, d), (n,)
    B : int
        Minibatch size, 0 for full batch.
    partial : ndarray (ceil(N/BLOCK), n)
    scratch : ndarray of :func:`scratch_shape`
    ibuf : int64 ndarray (3, n); fbuf : float64 ndarray (2 d + 2, n)
        Work space.
    f, R : ndarray (n,)
        Out: predictor and scaled residuals ``(f − y)/n`` on all points after the last step.
    R_prev : ndarray (n,)
        Out, full batch (``B = 0``) and ``nsteps >= 1`` only: the scaled residuals on all
        points before the last step (those its drift used), bitwise what a call with
        ``nsteps − 1`` steps leaves in ``R``. Not written otherwise.
    lam, eta, tau : float
    seed, step0, nsteps : int
    kind : int; p : ndarray (4,)
        Activation code and :func:`activation_params`.
    data_term : bool
        False drops the data drift (pure Ornstein–Uhlenbeck; for tests).
    noise : int
        The noise rule: the ``noise`` code of the integrator
        (:data:`solvers.integrators.INTEGRATORS`; ``solvers._noise``).
    dims : tuple of length d, or ()
        Only its length is used: a compile-time constant that selects the kernel specialised
        for d, or ``()`` for the kernel that reads ``d = T.shape[0] - 2`` at run time (one
        compile for every d; bitwise the same results, slower: benchmarks/README.md).

    Returns
    -------
    int
        0, or 1 if a non-finite residual appeared (``T`` is then left after the last
        finished step, and ``R[:B]`` holds the offending residuals on that step's points).
    """
    N = T.shape[1]
    n = X.shape[0]
    d = _ndim(T, dims)
    k1, _ = _seed_keys(seed)
    sd = math.sqrt(2.0 * eta * tau)
    perm = ibuf[0]
    idx_c = ibuf[1]
    idx_n = ibuf[2]
    XcT = fbuf[0:d]
    XnT = fbuf[d:2 * d]
    Rc = fbuf[2 * d]
    fc = fbuf[2 * d + 1]
    nc = _select(seed, step0, X, B if nsteps > 0 else 0, perm, idx_c, XcT)
    forward(T, XcT, nc, partial, scratch, kind, p, dims)
    for s in range(nsteps):
        _reduce(partial, nc, N, fc)
        bad = False
        for j in range(nc):
            Rc[j] = (fc[j] - y[idx_c[j]]) / nc
            if not np.isfinite(Rc[j]):
                bad = True
        if bad:
            for j in range(nc):
                R[j] = Rc[j]
            return 1
        last = s == nsteps - 1
        if last and B == 0:
            for j in range(n):
                R_prev[j] = Rc[j]
        nn = _select(seed, step0 + s + 1, X, 0 if last else B, perm, idx_n, XnT)
        fused_step(T, XcT, Rc, nc if data_term else 0, XnT, nn, partial, scratch, lam, eta,
                   sd, k1, step0 + s, kind, p, noise, dims)
        # the next points become the current ones
        for j in range(nn):
            idx_c[j] = idx_n[j]
            for k in range(d):
                XcT[k, j] = XnT[k, j]
        nc = nn
    _reduce(partial, n, N, f)
    return 0 if _scaled_residuals(f, y, R) else 1
