"""Private numba kernels of the Langevin dynamics. The project's numba code lives in two private
modules of ``solvers``: this one and ``solvers.arrangement`` (region counting).

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

Noise. ``ξ_ik`` is a pure function of ``(seed, step, particle i, coordinate k)``. The draw gets
the position ``p = step·M + i (d+2) + k`` with ``M = 2**32 + 5`` (injective for
``N (d+2) < 2**32``, ``step < 2**31``), and its 64 random bits are output number ``p`` of
SplitMix64 (Steele, Lea & Flood, OOPSLA 2014) seeded from ``seed``: ``mix64(k + p·γ)`` with the
golden gamma ``γ``. Every draw of a run is thus a distinct output of one SplitMix64 sequence,
in an order that does not depend on the threads. Neighbouring draws of a particle are
consecutive outputs; the same draw at consecutive steps is the SplitMix64 sequence with gamma
``M·γ``, which passes SplitMix64's own gamma-quality rule (≥ 24 bit transitions; it has 33).
The 64 bits feed a 256-layer ziggurat (Marsaglia & Tsang, J. Stat. Softw. 5(8), 2000; the
52-bit variant used by NumPy): 8 bits choose the layer, 1 bit the sign, 52 bits the abscissa.
The rare (≈ 1.5 %) wedge and tail paths draw further uniforms by re-hashing the draw's bits, so
a normal is still a pure function of its key. Minibatch indices come from the same positions
of a second SplitMix64 sequence (a second seed-derived key).
"""

from __future__ import annotations

import math

import llvmlite.binding as _llvm
import numba as nb
import numpy as np
from llvmlite import ir as _ir
from numba.core import cgutils as _cgutils
from numba.core import types as _types
from numba.extending import intrinsic as _intrinsic

from solvers._numba_cache import install as _install_cache_fallbacks

_install_cache_fallbacks()   # a damaged or unwritable numba cache: recompile, with a note

#: Particles per block. Fixed (never derived from the thread count) so that the floating-point
#: summation order, hence the result, is reproducible.
BLOCK = 512

ACT_RELU = 0
ACT_SOFTPLUS = 1
ACT_CAPPED = 2

#: Largest step index (positions ``step·M + draw`` must stay below 2**64).
MAX_STEP = 2**31 - 1
#: Bound on the number of draws per step, ``N (d+2) < MAX_DRAWS``.
MAX_DRAWS = 2**32
#: Stride of the step in the position of a draw (odd, > MAX_DRAWS; see the module docstring).
STEP_STRIDE = 2**32 + 5

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_S11 = np.uint64(11)
_S9 = np.uint64(9)
_S8 = np.uint64(8)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_LOW32 = np.uint64(0xFFFFFFFF)
_LOW52 = np.uint64(0x000FFFFFFFFFFFFF)
_LOW8 = np.uint64(0xFF)
_STRIDE = np.uint64(STEP_STRIDE)
_TWO_M53 = 1.0 / 9007199254740992.0


# ---------------------------------------------------------------------------------------------
# Fused multiply-add
# ---------------------------------------------------------------------------------------------

def _target_has_fma() -> bool:
    if nb.config.CPU_FEATURES:
        return "+fma" in nb.config.CPU_FEATURES.split(",")
    if nb.config.CPU_NAME:     # an explicit (e.g. generic) target without a feature list
        return False
    return "+fma" in _llvm.get_host_cpu_features().flatten().split(",")


_HAS_FMA = _target_has_fma()


@_intrinsic
def _fma(typingctx, a, b, c):
    """``a*b + c`` rounded once (``llvm.fma``), or the plain ``a*b + c`` on targets without FMA.

    Explicit, so every use rounds the same way in every compiled context (the kernels never
    let the compiler contract or reassociate on its own).
    """
    sig = _types.float64(_types.float64, _types.float64, _types.float64)

    def codegen(context, builder, signature, args):
        x, y, z = args
        if _HAS_FMA:
            dt = _ir.DoubleType()
            fn = _cgutils.get_or_insert_function(builder.module,
                                                 _ir.FunctionType(dt, [dt, dt, dt]),
                                                 "llvm.fma.f64")
            return builder.call(fn, [x, y, z])
        return builder.fadd(builder.fmul(x, y), z)

    return sig, codegen


# ---------------------------------------------------------------------------------------------
# Counter-based random numbers
# ---------------------------------------------------------------------------------------------

@nb.njit(inline="always")
def _mix(z):
    """splitmix64 finaliser (Steele, Lea & Flood 2014): a bijective avalanche mix of a uint64."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@nb.njit(inline="always")
def _seed_keys(seed):
    """Two 64-bit keys derived from the seed (the first two SplitMix64 outputs): ``k1`` keys
    the noise, ``k2`` the minibatches."""
    s = np.uint64(seed)
    k1 = _mix(s + _GOLD)
    k2 = _mix(s + _GOLD + _GOLD)
    return k1, k2


@nb.njit(inline="always")
def _hash(k, pos):
    """Output number ``pos`` of SplitMix64 with state offset ``k``; a bijection of ``pos``."""
    return _mix(pos * _GOLD + k)


@nb.njit(inline="always")
def _position(step, draw):
    """Position of draw ``draw`` of step ``step``: ``step·M + draw``."""
    return np.uint64(step) * _STRIDE + np.uint64(draw)


@nb.njit(inline="always")
def _uniform(h):
    """Uniform double in (0, 1) from the top 53 bits of ``h`` (never 0 or 1)."""
    return (np.float64(h >> _S11) + 0.5) * _TWO_M53


def _ziggurat_tables():
    """Layer tables of the 256-layer ziggurat for exp(-x²/2) (Marsaglia & Tsang 2000).

    Layer 0 is the base strip including the tail beyond ``R``; layer ``i ≥ 1`` has right edge
    ``x_i`` (``x_255 = R``, ``x_0 = 0`` at the top). ``KI[i] = 2^52 x_{i-1}/x_i`` is the
    acceptance threshold for the 52-bit abscissa, ``WI[i] = x_i / 2^52`` its scale, and
    ``FI[i] = exp(-x_i²/2)``.
    """
    r = 3.6541528853610088
    v = 0.00492867323399
    m1 = 2.0 ** 52
    ki = np.zeros(256, np.uint64)
    wi = np.zeros(256)
    fi = np.zeros(256)
    dn = tn = r
    q = v / math.exp(-0.5 * dn * dn)
    ki[0] = np.uint64(int(dn / q * m1))
    ki[1] = np.uint64(0)
    wi[0] = q / m1
    wi[255] = dn / m1
    fi[0] = 1.0
    fi[255] = math.exp(-0.5 * dn * dn)
    for i in range(254, 0, -1):
        dn = math.sqrt(-2.0 * math.log(v / dn + math.exp(-0.5 * dn * dn)))
        ki[i + 1] = np.uint64(int(dn / tn * m1))
        tn = dn
        fi[i] = math.exp(-0.5 * dn * dn)
        wi[i] = dn / m1
    return ki, wi, fi, r


_ZKI, _ZWI, _ZFI, _ZR = _ziggurat_tables()
_ZRINV = 1.0 / _ZR


@nb.njit(cache=True)
def _normal_slow(h, idx, x, neg):
    """Wedge and tail of the ziggurat, entered with probability ≈ 1.2 %; ``h`` is the draw's
    hash, re-hashed with an increasing counter for every further uniform needed."""
    t = _ONE
    while True:
        if idx == 0:
            # tail beyond R (Marsaglia 1964)
            while True:
                xx = -math.log(_uniform(_mix(h + t * _GOLD))) * _ZRINV
                yy = -math.log(_uniform(_mix(h + (t + _ONE) * _GOLD)))
                t += np.uint64(2)
                if yy + yy > xx * xx:
                    return -(_ZR + xx) if neg else _ZR + xx
        u = _uniform(_mix(h + t * _GOLD))
        t += _ONE
        if (_ZFI[idx - 1] - _ZFI[idx]) * u + _ZFI[idx] < math.exp(-0.5 * x * x):
            return -x if neg else x
        # rejected: a fresh 64-bit draw
        g = _mix(h + t * _GOLD)
        t += _ONE
        idx = np.int64(g & _LOW8)
        rabs = (g >> _S9) & _LOW52
        neg = ((g >> _S8) & _ONE) != _ZERO
        x = np.float64(rabs) * _ZWI[idx]
        if rabs < _ZKI[idx]:
            return -x if neg else x


@nb.njit(inline="always")
def _normal(k, pos):
    """Standard normal number ``pos`` of the stream keyed by ``k`` (ziggurat; one hash with
    probability ≈ 0.99)."""
    h = _hash(k, pos)
    idx = np.int64(h & _LOW8)
    rabs = (h >> _S9) & _LOW52
    neg = ((h >> _S8) & _ONE) != _ZERO
    x = np.float64(rabs) * _ZWI[idx]
    if rabs < _ZKI[idx]:
        return -x if neg else x
    return _normal_slow(h, idx, x, neg)


@nb.njit(cache=True)
def gaussian_block(seed, step, n_particles, dim, out):
    """Fill ``out`` of shape (n_particles, dim) with the noise the kernel adds at ``step``.

    ``out[i, k] = ξ(seed, step, i, k)``, the normal at position ``step·M + i·dim + k``. This is
    the reference noise for tests and for the NumPy step.
    """
    k1, _ = _seed_keys(seed)
    for i in range(n_particles):
        for k in range(dim):
            out[i, k] = _normal(k1, _position(step, i * dim + k))


@nb.njit(cache=True)
def normals(seed, positions, out):
    """``out[m]`` = the noise normal at ``positions[m]`` (uint64; see :func:`_position`):
    raw access to the stream for statistical tests."""
    k1, _ = _seed_keys(seed)
    for m in range(positions.shape[0]):
        out[m] = _normal(k1, positions[m])


@nb.njit(inline="always")
def _below(k2, step, t, m):
    """Uniform integer in ``[0, m)`` (``1 <= m < 2**32``) for draw ``t`` of the batch stream of
    ``step``: Lemire's multiply-shift with rejection (exactly uniform); a rejected draw is
    re-hashed with an attempt counter."""
    mm = np.uint64(m)
    thr = (np.uint64(1 << 32) - mm) % mm
    h = _hash(k2, _position(step, t))
    attempt = _ONE
    while True:
        prod = (h >> _S32) * mm
        if (prod & _LOW32) >= thr:
            return np.int64(prod >> _S32)
        h = _mix(h + attempt * _GOLD)
        attempt += _ONE


@nb.njit(cache=True)
def batch_indices(seed, step, n, B, perm, out):
    """Minibatch of ``step``: ``out[:B]`` gets a uniformly random ``B``-subset of ``0..n-1``
    in draw order (partial Fisher–Yates on ``perm``, of length ``n``, reset every call)."""
    _, k2 = _seed_keys(seed)
    for j in range(n):
        perm[j] = j
    for t in range(B):
        r = t + _below(k2, step, t, n - t)
        tmp = perm[t]
        perm[t] = perm[r]
        perm[r] = tmp
        out[t] = perm[t]


# ---------------------------------------------------------------------------------------------
# Activations (THEORY §3); ``p`` = activation_params(...)
# ---------------------------------------------------------------------------------------------

def activation_params(kind: int, sharpness: float, cap: float) -> np.ndarray:
    """Constants of an activation, ``[t, m², z_m, s_m]``.

    ``z_m`` solves ``softplus_t(z_m) = m²``, ``s_m = softplus_t'(z_m) = 1 − e^{−t m²}``.
    """
    t = float(sharpness)
    m2 = float(cap) ** 2
    zm = m2 + math.log(-math.expm1(-t * m2)) / t
    sm = -math.expm1(-t * m2)
    return np.array([t, m2, zm, sm], dtype=np.float64)


@nb.njit(inline="always")
def _softplus_pair(z, t):
    tz = t * z
    e = math.exp(-abs(tz))
    v = ((tz if tz > 0.0 else 0.0) + math.log1p(e)) / t
    if tz >= 0.0:
        dv = 1.0 / (1.0 + e)
    else:
        dv = e / (1.0 + e)
    return v, dv


@nb.njit(inline="always")
def _act_pair(z, kind, p):
    """``(σ(z), σ'(z))`` for softplus / capped (relu is handled inline by the callers).
    NaN in, NaN out (the divergence check relies on it)."""
    if kind == ACT_CAPPED and z > p[2]:
        # cap φ(z) = m²(2 − exp(−s_m (z − z_m)/m²)): φ(z_m) = m², φ'(z_m) = s_m, φ → 2m²
        ex = math.exp(-p[3] * (z - p[2]) / p[1])
        return p[1] * (2.0 - ex), p[3] * ex
    return _softplus_pair(z, p[0])


@nb.njit(cache=True)
def activation_values(z, kind, p, out, dout):
    """Evaluate the kernels' ``σ`` and ``σ'`` elementwise on a 1-D array (for tests)."""
    for m in range(z.shape[0]):
        if kind == ACT_RELU:
            out[m] = 0.0 if z[m] <= 0.0 else z[m]
            dout[m] = 1.0 if z[m] > 0.0 else 0.0
        else:
            out[m], dout[m] = _act_pair(z[m], kind, p)


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
def _relu(z):
    """``max(z, 0)`` that propagates NaN (the divergence check relies on it)."""
    return 0.0 if z <= 0.0 else z


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
def _fast_normal(k, pos):
    """The ziggurat's one-hash path for draw ``pos``: ``(x, ok)``; when ``ok`` is False the
    draw needs :func:`_normal` (≈ 1.5 % of draws). Branch-free, so loops over it vectorise."""
    h = _hash(k, pos)
    idx = h & _LOW8
    rabs = (h >> _S9) & _LOW52
    x = np.float64(rabs) * _ZWI[idx]
    x = -x if ((h >> _S8) & _ONE) != _ZERO else x
    return x, rabs < _ZKI[idx]


@nb.njit(inline="always")
def _add_noise(T, c, i, u, sd, k, pos, sc, t, off):
    """``T[c, i] = u + sd ξ`` when the fast path accepts; else ``T[c, i] = u`` and a flag."""
    x, ok = _fast_normal(k, pos)
    T[c, i] = u + sd * x if ok else u
    sc[t, off] = 0.0 if ok else 1.0


@nb.njit(inline="always")
def _add_noise_lm(T, c, i, u, hsd, k, pos, pos1, sc, t, off):
    """``T[c, i] = u + (sd/2)(ξ + ξ')`` (``hsd = sd/2``) when the fast path accepts both
    draws; else ``T[c, i] = u`` and a flag."""
    x, ok = _fast_normal(k, pos)
    x1, ok1 = _fast_normal(k, pos1)
    good = ok & ok1
    T[c, i] = u + hsd * (x + x1) if good else u
    sc[t, off] = 0.0 if good else 1.0


@nb.njit(inline="always")
def _update_block(T, lo, m, sc, t, lam, eta, sd, k, step, lm, dims):
    """``θ ← θ − η (g + λ θ) + sd ξ`` for the block (``g_u = a (Σ…)`` uses the old ``a``);
    with ``lm`` the Leimkuhler–Matthews noise ``sd (ξ_step + ξ_{step+1})/2`` instead.

    The noise ``ξ(step, i, c)`` comes from the vectorised fast path; the draws it rejects are
    flagged in the scratch and redone exactly in a second sweep. ``sd = 0``: no noise.
    """
    d = _ndim(T, dims)
    D = d + 2
    L = _U(BLOCK)
    if sd > 0.0 and lm:
        hsd = 0.5 * sd
        p0 = _position(step, 0)
        p1 = _position(step + 1, 0)
        nz = _U(2 + d) * L
        for ii in range(m):
            i = lo + ii
            off = i * _U(D)
            a = T[0, i]
            for c in range(d):
                w = T[1 + c, i]
                u = w - eta * (a * sc[t, _U(2 + c) * L + ii] + lam * w)
                _add_noise_lm(T, 1 + c, i, u, hsd, k, p0 + off + _U(1 + c),
                              p1 + off + _U(1 + c), sc, t, nz + _U(1 + c) * L + ii)
            b = T[D - 1, i]
            u = b - eta * (a * sc[t, L + ii] + lam * b)
            _add_noise_lm(T, D - 1, i, u, hsd, k, p0 + off + _U(D - 1), p1 + off + _U(D - 1),
                          sc, t, nz + _U(D - 1) * L + ii)
            u = a - eta * (sc[t, ii] + lam * a)
            _add_noise_lm(T, 0, i, u, hsd, k, p0 + off, p1 + off, sc, t, nz + ii)
        for c in range(D):
            off = nz + _U(c) * L
            for ii in range(m):
                if sc[t, off + ii] != 0.0:
                    i = lo + ii
                    q = i * _U(D) + _U(c)
                    T[c, i] += hsd * (_normal(k, p0 + q) + _normal(k, p1 + q))
    elif sd > 0.0:
        p0 = _position(step, 0)
        nz = _U(2 + d) * L
        for ii in range(m):
            i = lo + ii
            pos = p0 + i * _U(D)
            a = T[0, i]
            for c in range(d):
                w = T[1 + c, i]
                u = w - eta * (a * sc[t, _U(2 + c) * L + ii] + lam * w)
                _add_noise(T, 1 + c, i, u, sd, k, pos + _U(1 + c), sc, t, nz + _U(1 + c) * L + ii)
            b = T[D - 1, i]
            u = b - eta * (a * sc[t, L + ii] + lam * b)
            _add_noise(T, D - 1, i, u, sd, k, pos + _U(D - 1), sc, t, nz + _U(D - 1) * L + ii)
            u = a - eta * (sc[t, ii] + lam * a)
            _add_noise(T, 0, i, u, sd, k, pos, sc, t, nz + ii)
        for c in range(D):
            off = nz + _U(c) * L
            for ii in range(m):
                if sc[t, off + ii] != 0.0:
                    i = lo + ii
                    T[c, i] += sd * _normal(k, p0 + i * _U(D) + _U(c))
    else:
        for ii in range(m):
            i = lo + ii
            a = T[0, i]
            for c in range(d):
                w = T[1 + c, i]
                T[1 + c, i] = w - eta * (a * sc[t, _U(2 + c) * L + ii] + lam * w)
            b = T[D - 1, i]
            T[D - 1, i] = b - eta * (a * sc[t, L + ii] + lam * b)
            T[0, i] = a - eta * (sc[t, ii] + lam * a)


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
def _update_block_rt(T, lo, m, sc, t, lam, eta, sd, k, step, lm):
    """:func:`_update_block` for ``d = T.shape[0] - 2``, one coordinate per sweep over the
    block (``w`` and ``b`` from the old ``a``, ``a`` last); the same expressions and draws."""
    D = T.shape[0]
    d = D - 2
    L = _U(BLOCK)
    nz = _U(2 + d) * L
    p0 = _position(step, 0)
    p1 = _position(step + 1, 0)
    hsd = 0.5 * sd
    for c in range(d + 1):
        row = 1 + c                                   # w_1..w_d, then b (row d+1)
        g = _U(2 + c) * L if c < d else L             # its gradient's scratch row
        fo = nz + _U(row) * L                         # its noise flags
        if sd > 0.0 and lm:
            for ii in range(m):
                i = lo + ii
                a = T[0, i]
                w = T[row, i]
                u = w - eta * (a * sc[t, g + ii] + lam * w)
                q = i * _U(D) + _U(row)
                _add_noise_lm(T, row, i, u, hsd, k, p0 + q, p1 + q, sc, t, fo + ii)
        elif sd > 0.0:
            for ii in range(m):
                i = lo + ii
                a = T[0, i]
                w = T[row, i]
                u = w - eta * (a * sc[t, g + ii] + lam * w)
                _add_noise(T, row, i, u, sd, k, p0 + i * _U(D) + _U(row), sc, t, fo + ii)
        else:
            for ii in range(m):
                i = lo + ii
                a = T[0, i]
                w = T[row, i]
                T[row, i] = w - eta * (a * sc[t, g + ii] + lam * w)
    if sd > 0.0 and lm:
        for ii in range(m):
            i = lo + ii
            a = T[0, i]
            u = a - eta * (sc[t, ii] + lam * a)
            _add_noise_lm(T, 0, i, u, hsd, k, p0 + i * _U(D), p1 + i * _U(D), sc, t, nz + ii)
    elif sd > 0.0:
        for ii in range(m):
            i = lo + ii
            a = T[0, i]
            u = a - eta * (sc[t, ii] + lam * a)
            _add_noise(T, 0, i, u, sd, k, p0 + i * _U(D), sc, t, nz + ii)
    else:
        for ii in range(m):
            i = lo + ii
            a = T[0, i]
            T[0, i] = a - eta * (sc[t, ii] + lam * a)
    if sd > 0.0:
        for c in range(D):
            off = nz + _U(c) * L
            for ii in range(m):
                if sc[t, off + ii] != 0.0:
                    i = lo + ii
                    q = i * _U(D) + _U(c)
                    if lm:
                        T[c, i] += hsd * (_normal(k, p0 + q) + _normal(k, p1 + q))
                    else:
                        T[c, i] += sd * _normal(k, p0 + q)


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
               lm, dims):
    """One Euler–Maruyama (``lm`` False) or Leimkuhler–Matthews (``lm`` True) step of every
    particle, then the block partial sums of the predictor at the new particles on the next
    points ``XnT[:, :nn]``.

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
            _update_block_rt(T, lo, m, scratch, t, lam, eta, sd, k, step, lm)
            _forward_block_rt(T, lo, m, XnT, nn, partial, blk, scratch, t, zoff, kind, p)
    else:
        zoff = _U((2 * len(dims) + 4) * BLOCK)
        for blk in nb.prange(nblocks):
            t = nb.get_thread_id()
            lo = _U(blk * BLOCK)
            m = _U(min(BLOCK, N - blk * BLOCK))
            _grad_block(T, lo, m, XcT, Rc, nc, scratch, t, kind, p, dims)
            _update_block(T, lo, m, scratch, t, lam, eta, sd, k, step, lm, dims)
            _forward_block(T, lo, m, XnT, nn, partial, blk, scratch, t, zoff, kind, p, dims)


@nb.njit(parallel=True, cache=True)
def to_columns(theta, T):
    """``T[k, i] = theta[i, k]``: rows (N, d+2) to the kernels' (d+2, N) layout."""
    N, D = theta.shape
    for blk in nb.prange((N + BLOCK - 1) // BLOCK):
        for i in range(blk * BLOCK, min(N, (blk + 1) * BLOCK)):
            for k in range(D):
                T[k, i] = theta[i, k]


@nb.njit(parallel=True, cache=True)
def to_rows(T, theta):
    """``theta[i, k] = T[k, i]``; returns True when every entry is finite."""
    N, D = theta.shape
    nblocks = (N + BLOCK - 1) // BLOCK
    bad = np.zeros(nblocks, dtype=np.bool_)
    for blk in nb.prange(nblocks):
        for i in range(blk * BLOCK, min(N, (blk + 1) * BLOCK)):
            for k in range(D):
                v = T[k, i]
                theta[i, k] = v
                if not np.isfinite(v):
                    bad[blk] = True
    return not np.any(bad)


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
def run_steps(T, X, y, B, partial, scratch, ibuf, fbuf, f, R, lam, eta, tau, seed, step0,
              nsteps, kind, p, data_term, lm, dims):
    """Advance ``nsteps`` steps from global step ``step0``.

    Step ``s`` adds the noise ``sqrt(2ητ) ξ_s`` (Euler–Maruyama) or, with ``lm``,
    ``sqrt(2ητ) (ξ_s + ξ_{s+1})/2`` (Leimkuhler–Matthews), with the ``τ`` of this call: the
    result depends on ``(T, step0, τ)`` only, so a run split into calls at any step (and with
    another ``τ`` from some step on) is bitwise the run done in one piece with those ``τ``.

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
    lam, eta, tau : float
    seed, step0, nsteps : int
    kind : int; p : ndarray (4,)
        Activation code and :func:`activation_params`.
    data_term : bool
        False drops the data drift (pure Ornstein–Uhlenbeck; for tests).
    lm : bool
        Leimkuhler–Matthews instead of Euler–Maruyama.
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
        nn = _select(seed, step0 + s + 1, X, 0 if last else B, perm, idx_n, XnT)
        fused_step(T, XcT, Rc, nc if data_term else 0, XnT, nn, partial, scratch, lam, eta,
                   sd, k1, step0 + s, kind, p, lm, dims)
        # the next points become the current ones
        for j in range(nn):
            idx_c[j] = idx_n[j]
            for k in range(d):
                XcT[k, j] = XnT[k, j]
        nc = nn
    _reduce(partial, n, N, f)
    return 0 if _scaled_residuals(f, y, R) else 1


# ---------------------------------------------------------------------------------------------
# Data-mode curvature (``solvers.stability``): Gauss–Newton kernel and its Hessian correction
# ---------------------------------------------------------------------------------------------

@nb.njit(inline="always")
def _act_value_slope(z, kind, p):
    if kind == ACT_RELU:
        return (0.0, 0.0) if z <= 0.0 else (z, 1.0)
    return _act_pair(z, kind, p)


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
