"""Realisable activation patterns of the lifted training inputs (THEORY §4, §6).

A direction ``u ∈ R^{d+1}`` activates the inputs ``{j : u·x̃_j > 0}``. The patterns that occur for
some ``u`` are the regions of the central arrangement ``{u : u·x̃_j = 0}``; there are ``P`` of them
(the dichotomy count of THEORY §6). On the closed cone of one region,
``K_s = {u : (2 s_j − 1) u·x̃_j ≥ 0 ∀j}``, the map ``u ↦ ((u·x̃_j)_+)_j = diag(s) X̃ u`` is linear;
this is what makes the zero-temperature problem a finite convex program [Pilanci & Ergen,
ICML 2020].

Enumeration is incremental: the regions of the first ``j`` hyperplanes are refined by hyperplane
``j+1``; a region's witness decides one side, a linear programme (HiGHS through
``scipy.optimize.linprog``) the other. That is at most one LP per region per hyperplane, fine
for the small data sets of the references (``P`` up to a few thousand).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import linprog

from solvers.geometry import lifted


class TooManyPatterns(ValueError):
    """The arrangement has more regions than the caller allowed."""


def _strict_witness(rows):
    """A ``u`` with ``rows @ u ≥ 1`` (an interior point of the open cone), or None."""
    m, D = rows.shape
    res = linprog(np.zeros(D), A_ub=-rows, b_ub=-np.ones(m), bounds=[(None, None)] * D,
                  method="highs")
    if res.status == 0:
        return res.x
    if res.status == 2:
        return None
    raise RuntimeError(f"activation patterns: LP failed ({res.message})")


def activation_patterns(X: ArrayLike, max_patterns: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
    """All realisable activation patterns of the lifted inputs ``x̃_j = (x_j, 1)``.

    Parameters
    ----------
    X : array-like of shape (n, d)
    max_patterns : int
        Stop with :class:`TooManyPatterns` beyond this many regions.

    Returns
    -------
    patterns : ndarray of shape (P, n), bool
        ``patterns[k, j] = 1[u·x̃_j > 0]`` on region ``k`` (all-on and all-off included).
    witnesses : ndarray of shape (P, d+1)
        A unit vector strictly inside each region.

    Raises
    ------
    TooManyPatterns
        More than ``max_patterns`` regions.
    """
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    n, d = X.shape
    Xt = lifted(X)
    # start: the two half-spaces of the first hyperplane
    cells = [(np.array([True]), Xt[0] / (Xt[0] @ Xt[0])),
             (np.array([False]), -Xt[0] / (Xt[0] @ Xt[0]))]
    for j in range(1, n):
        nxt = []
        for s, u in cells:
            val = float(Xt[j] @ u)
            signs = 2.0 * s - 1.0
            for side in (True, False):
                sgn = 1.0 if side else -1.0
                if sgn * val > 1e-9 * np.linalg.norm(Xt[j]) * np.linalg.norm(u):
                    w = u
                else:
                    rows = np.vstack([signs[:, None] * Xt[:j], sgn * Xt[j]])
                    w = _strict_witness(rows)
                    if w is None:
                        continue
                nxt.append((np.append(s, side), w))
        cells = nxt
        if len(cells) > max_patterns:
            raise TooManyPatterns(f"more than {max_patterns} activation patterns "
                                  f"(n={n}, d={d})")
    pats = np.array([s for s, _ in cells], dtype=bool).reshape(-1, n)
    wit = np.array([u / np.linalg.norm(u) for _, u in cells]).reshape(-1, d + 1)
    return pats, wit
