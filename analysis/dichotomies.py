"""The number ``P`` of affine dichotomies of the training inputs (THEORY §6).

``P`` is the number of regions of the central hyperplane arrangement
``{u ∈ R^{d+1} : u·x̃_j = 0}``, ``x̃_j = (x_j, 1)``: every region is one strict sign pattern
``sign(w·x_j + b)``; a split and its complement count separately and the all-on / all-off
patterns are included.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import comb

import numpy as np


def cover(n: int, d: int) -> int:
    """Cover's count for ``n`` points in general position in ``R^d`` (affine dichotomies):
    ``C(n, d+1) = 2 Σ_{k=0}^{d} binom(n−1, k)`` [Cover 1965; THEORY §6]."""
    if n < 1:
        return 0
    return 2 * sum(comb(n - 1, k) for k in range(0, d + 1))


def general_position(X, tol: float = 1e-9, max_subsets: int = 2_000_000) -> bool | None:
    """Whether the lifted points ``x̃_j`` are in general position: every ``min(n, d+1)`` of them
    linearly independent (THEORY §6).

    Independence is decided by the smallest singular value of each subset relative to its
    largest, against ``tol``. Duplicated points are never in general position.

    Returns
    -------
    bool, or None when more than ``max_subsets`` subsets would need checking.
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    L = np.hstack([X, np.ones((n, 1))])
    k = min(n, d + 1)
    if comb(n, k) > max_subsets:
        return None
    idx = np.array(list(itertools.combinations(range(n), k)), dtype=np.int64)
    for lo in range(0, len(idx), 100_000):
        sub = L[idx[lo:lo + 100_000]]                       # (m, k, d+1)
        s = np.linalg.svd(sub, compute_uv=False)            # (m, k)
        if np.any(s[:, -1] <= tol * s[:, 0]):
            return False
    return True


@dataclass
class DichotomyCount:
    """Result of :func:`count_dichotomies`.

    Attributes
    ----------
    P : int or None      number of affine dichotomies (None if not computed)
    cover : int          Cover's general-position value for (n, d)
    general_position : bool or None
    n, d : int
    method : str         how P was obtained
    """

    P: int | None
    cover: int
    general_position: bool | None
    n: int
    d: int
    method: str

    def as_dict(self) -> dict:
        return {"P": self.P, "cover": self.cover, "general_position": self.general_position,
                "n": self.n, "d": self.d}


def count_dichotomies(X, tol: float = 1e-9) -> DichotomyCount:
    """Count the affine dichotomies ``P`` of ``X`` (n, d) (THEORY §6).

    In general position this is Cover's formula. Otherwise ``P`` is left ``None`` and
    ``method`` says so.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    n, d = X.shape
    gp = general_position(X, tol)
    cv = cover(n, d)
    if gp:
        return DichotomyCount(cv, cv, True, n, d, "cover")
    return DichotomyCount(None, cv, gp, n, d, "not in general position: exact count needed")
