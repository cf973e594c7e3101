"""Noise rules of the parallel step kernel (``solvers._kernels``): one per parallel integrator
of :data:`solvers.integrators.INTEGRATORS`, keyed by its ``noise`` code.

A rule is a pair of inlined functions of the draw positions ``pos = (step, i, c)`` and
``pos1 = (step + 1, i, c)`` of one coordinate and of ``sd = sqrt(2 η τ)``:

- ``fast(k, pos, pos1, sd) -> (increment, ok)``: the increment from the ziggurat's
  branch-free fast path (:func:`solvers._rng._fast_normal`), ``ok`` False when a draw needs
  the slow path (the kernel then flags it and calls ``slow`` in a second sweep);
- ``slow(k, pos, pos1, sd) -> increment``: the same increment by the exact
  :func:`solvers._rng._normal`.

:func:`rule_fast` and :func:`rule_slow` dispatch on the code; the kernel calls them with the
code a constant (one sweep per rule), so that the dispatch folds away at compile time and the
loops over particles stay free of branches.

- Euler–Maruyama (``NOISE_EM``): ``sd ξ(step)``;
- Leimkuhler–Matthews (``NOISE_LM``; Leimkuhler & Matthews, Appl. Math. Res. Express 2013;
  THEORY §2.1): ``(sd/2) (ξ(step) + ξ(step + 1))``.
"""

from __future__ import annotations

import numba as nb

from solvers._rng import _fast_normal, _normal
from solvers.integrators import NOISE_LM


@nb.njit(inline="always")
def _em_fast(k, pos, pos1, sd):
    x, ok = _fast_normal(k, pos)
    return sd * x, ok


@nb.njit(inline="always")
def _em_slow(k, pos, pos1, sd):
    return sd * _normal(k, pos)


@nb.njit(inline="always")
def _lm_fast(k, pos, pos1, sd):
    hsd = 0.5 * sd
    x, ok = _fast_normal(k, pos)
    x1, ok1 = _fast_normal(k, pos1)
    return hsd * (x + x1), ok & ok1


@nb.njit(inline="always")
def _lm_slow(k, pos, pos1, sd):
    hsd = 0.5 * sd
    return hsd * (_normal(k, pos) + _normal(k, pos1))


@nb.njit(inline="always")
def rule_fast(noise, k, pos, pos1, sd):
    """The fast path of the rule ``noise``: ``(increment, ok)``."""
    if noise == NOISE_LM:
        return _lm_fast(k, pos, pos1, sd)
    return _em_fast(k, pos, pos1, sd)


@nb.njit(inline="always")
def rule_slow(noise, k, pos, pos1, sd):
    """The slow path of the rule ``noise``: the increment."""
    if noise == NOISE_LM:
        return _lm_slow(k, pos, pos1, sd)
    return _em_slow(k, pos, pos1, sd)
