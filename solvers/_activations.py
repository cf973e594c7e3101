"""Activations of the kernels (THEORY §3): ``σ`` and ``σ'`` of relu, softplus and capped
softplus, for ``solvers._kernels``, ``solvers._mala`` and ``solvers._curvature``; ``p`` is
:func:`activation_params`, the codes those of :data:`solvers.limits.ACT_CODES`.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from solvers._numba_cache import install as _install_cache_fallbacks
from solvers.limits import ACT_CODES

_install_cache_fallbacks()   # a damaged or unwritable numba cache: recompile, with a note

ACT_RELU = ACT_CODES["relu"]
ACT_SOFTPLUS = ACT_CODES["softplus"]
ACT_CAPPED = ACT_CODES["capped"]


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



@nb.njit(inline="always")
def _relu(z):
    """``max(z, 0)`` that propagates NaN (the divergence check relies on it)."""
    return 0.0 if z <= 0.0 else z



@nb.njit(inline="always")
def _act_value_slope(z, kind, p):
    if kind == ACT_RELU:
        return (0.0, 0.0) if z <= 0.0 else (z, 1.0)
    return _act_pair(z, kind, p)

