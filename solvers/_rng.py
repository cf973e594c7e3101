"""Counter-based random numbers of the kernels (``solvers._kernels``, ``solvers._mala``).

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

Every function here is a pure function of its key and position; the kernels inline them.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from solvers._numba_cache import install as _install_cache_fallbacks
from solvers.limits import MAX_DRAWS, MAX_STEPS

_install_cache_fallbacks()   # a damaged or unwritable numba cache: recompile, with a note

#: Largest step index (positions ``step·M + draw`` must stay below 2**64).
MAX_STEP = MAX_STEPS
#: Stride of the step in the position of a draw (odd, > MAX_DRAWS; see the module docstring).
STEP_STRIDE = 2**32 + 5
assert STEP_STRIDE > MAX_DRAWS

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


@nb.njit(inline="always")
def _mix(z):
    """splitmix64 finaliser (Steele, Lea & Flood 2014): a bijective avalanche mix of a uint64."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@nb.njit(inline="always")
def _seed_output(seed, k):
    """SplitMix64 output number ``k`` of the stream seeded with ``seed``: the key ``k<k>``
    (1: the noise, 2: the minibatches, 3-8: the exact sampler's draws, ``solvers._mala``)."""
    return _mix(np.uint64(seed) + np.uint64(k) * _GOLD)


@nb.njit(inline="always")
def _seed_keys(seed):
    """Two 64-bit keys derived from the seed (the first two SplitMix64 outputs): ``k1`` keys
    the noise, ``k2`` the minibatches."""
    return _seed_output(seed, 1), _seed_output(seed, 2)


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

