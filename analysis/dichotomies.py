"""The number ``P`` of affine dichotomies of the training inputs (THEORY §6).

``P`` is the number of regions of the central hyperplane arrangement
``{u ∈ R^{d+1} : u·x̃_j = 0}``, ``x̃_j = (x_j, 1)``. Every region is one strict sign pattern
``sign(w·x_j + b)`` (points on the hyperplane are excluded: the strict convention); a split and
its complement count separately, and the all-on / all-off patterns are included. ReLU activation
patterns ``1[w·x_j + b > 0]`` of a neuron are in bijection with the regions.

Method: the incremental deletion–restriction recursion ``r(A) = r(A∖H) + r(A^H)``
(THEORY §6.2), exact for any ``d`` and any point set (duplicates, collinear or coplanar
points, grids). Two modes:

* float (default, numba kernel ``solvers.arrangement.region_count``): the inputs are first
  brought to unit scale per column by an invertible affine map (:func:`normalized`; ``P`` does
  not change), so the tolerance is relative to the data's own scale in every coordinate; then
  hyperplanes of every restriction are identified when the chord distance of their unit normals
  up to sign is at most ``tol`` (default ``1e-12``; the distance is an angle in radians for small values; rounding
  errors of coinciding hyperplanes measured on integer grids up to ``d = 5`` stay below
  ``3e-14``). The result
  reports ``tol_range = [a, b)``: the largest distance that was merged and the smallest that was
  kept apart. Every decision of the run, hence ``P``, is the same for any tolerance in that range;
  a narrow range (``b`` near ``a``) means the data is numerically near-degenerate and the exact
  mode should be used.
* exact (``exact=True``): integer arithmetic on the lifted points scaled to integers, with
  fraction-free elimination and gcd normalisation; no tolerance. Float entries are read as the
  shortest decimal that rounds to them (``0.1`` is ``1/10``), so data typed as decimals keeps its
  collinearities; ``fractions.Fraction`` or ``int`` entries are taken as they are. Pure Python:
  about 10³ times slower than the float mode.

References: T. M. Cover, *Geometrical and statistical properties of systems of linear
inequalities*, IEEE Trans. Electron. Comput. 14 (1965); T. Zaslavsky, *Facing up to
arrangements*, Mem. AMS 154 (1975).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from math import comb, gcd, lcm

import numpy as np
from numpy.typing import ArrayLike

from solvers.arrangement import region_count
from solvers.geometry import lifted

#: Default chord tolerance of the float mode (see the module docstring).
DEFAULT_TOL = 1e-12


def cover(n: int, d: int) -> int:
    """Cover's count for ``n`` points in general position in ``R^d`` (affine dichotomies):
    ``C(n, d+1) = 2 Σ_{k=0}^{d} binom(n−1, k)`` [Cover 1965; THEORY §6].

    Parameters
    ----------
    n : int
        Number of points, ``n ≥ 1``.
    d : int
        Input dimension, ``d ≥ 0``.

    Returns
    -------
    int
        The number of regions of the central arrangement of ``n`` lifted points ``(x, 1)`` in
        general position; an upper bound of ``P`` for any ``n`` points (exact :func:`count_dichotomies`).

    Raises
    ------
    Nothing for valid integers (``n ≥ 1``, ``d ≥ 0``).
    """
    if n < 1:
        return 1
    return 2 * sum(comb(n - 1, k) for k in range(0, d + 1))


def normalized(X) -> np.ndarray:
    """``X`` moved by an invertible affine map to unit scale per column: each column minus its
    midrange, times the power of two that brings its largest magnitude into ``[0.5, 1)``.

    ``P`` is invariant under invertible affine maps of the inputs (they map the regions of the
    lifted arrangement one to one), so the count is unchanged while the float mode's chord
    tolerance becomes relative to each column's own spread: coordinates of magnitude 1e-15
    and 1e15 in one data set are resolved alike. Centring subtracts nearby floats (exact or
    within half an ulp of the spread) and the power-of-two scaling is exact.

    Returns
    -------
    ndarray of shape (n, d), float64
    """
    X = np.array(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.size == 0:
        return X
    lo, hi = X.min(axis=0), X.max(axis=0)
    mid = lo / 2 + hi / 2                       # no overflow near the float limit
    C = X - mid
    amax = np.abs(C).max(axis=0)
    _, e = np.frexp(np.where(amax > 0, amax, 1.0))
    return np.ldexp(C, -e)


def general_position(X, tol: float = 1e-9, max_subsets: int = 2_000_000) -> bool | None:
    """Whether the lifted points ``x̃_j`` are in general position: every ``min(n, d+1)`` of them
    linearly independent (THEORY §6), by the singular values of every subset.

    This is an independent check of the flag that :func:`count_dichotomies` derives from
    ``P == cover(n, d)``. Independence is decided by the smallest singular value of each subset
    relative to its largest, against ``tol``. Duplicated points are never in general position.

    Returns
    -------
    bool, or None when more than ``max_subsets`` subsets would need checking.
    """
    L = lifted(X)
    n, D = L.shape
    k = min(n, D)
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
    P : int
        Number of affine dichotomies (regions of the lifted central arrangement).
    cover : int
        Cover's general-position value for ``(n, d)``, an upper bound of ``P``.
    general_position : bool
        ``P == cover``: for a central arrangement this holds exactly when every ``d+1`` lifted
        points are linearly independent.
    n, d : int
        Number of points and input dimension.
    n_distinct : int
        Number of distinct points (distinct hyperplanes).
    exact : bool
        Whether the exact integer mode was used.
    tol : float or None
        Chord tolerance of the float mode (None in exact mode).
    tol_range : tuple (float, float) or None
        ``[a, b)``: every tolerance in it gives the same decisions, hence the same ``P``
        (float mode; ``b = 4`` means nothing was kept apart by a small margin).
    """

    P: int
    cover: int
    general_position: bool
    n: int
    d: int
    n_distinct: int
    exact: bool
    tol: float | None
    tol_range: tuple | None

    @property
    def method(self) -> str:
        return "exact" if self.exact else "float"

    @property
    def ambiguous(self) -> bool:
        """Float mode only: some decision was within a factor 10 of the tolerance, so another
        reasonable tolerance could change ``P``; use the exact mode."""
        if self.tol_range is None:
            return False
        return self.tol_range[0] > self.tol / 10 or self.tol_range[1] < 10 * self.tol

    def as_dict(self) -> dict:
        return {"P": int(self.P), "cover": int(self.cover),
                "general_position": bool(self.general_position), "n": int(self.n),
                "d": int(self.d), "n_distinct": int(self.n_distinct), "exact": bool(self.exact),
                "tol": self.tol,
                "tol_range": None if self.tol_range is None else [float(t) for t in self.tol_range]}


# ---------------------------------------------------------------------------------- exact mode

def _fraction(x) -> Fraction:
    if isinstance(x, (Fraction, int, np.integer)):
        return Fraction(int(x)) if isinstance(x, np.integer) else Fraction(x)
    f = float(x)
    if not np.isfinite(f):
        raise ValueError(f"non-finite input {x!r}")
    return Fraction(repr(f))


def _canon(v) -> tuple:
    """``v`` (non-zero integers) divided by its gcd, signed so the first non-zero entry is > 0."""
    g = 0
    for x in v:
        g = gcd(g, x)
    sgn = 1
    for x in v:
        if x:
            sgn = 1 if x > 0 else -1
            break
    return tuple(sgn * x // g for x in v)


def integer_lift(X) -> list:
    """Lifted points ``(x_j, 1)`` as distinct canonical integer tuples (exact mode).

    Each row is multiplied by the lcm of its denominators and divided by its gcd; rows equal up
    to a positive or negative factor (duplicated points) are merged.
    """
    arr = np.asarray(X, dtype=object)
    if arr.ndim == 1:
        arr = arr[:, None]
    out = {}
    for row in arr:
        fr = [_fraction(x) for x in row] + [Fraction(1)]
        den = lcm(*(f.denominator for f in fr))
        out.setdefault(_canon([int(f * den) for f in fr]), None)
    return list(out)


def _regions_exact(H: list, D: int) -> int:
    """Regions of the central arrangement of the distinct canonical integer normals ``H`` in
    ``Z^D``, by deletion–restriction with fraction-free elimination."""
    m = len(H)
    if m == 0:
        return 1
    if D == 1:
        return 2
    if D == 2:
        return 2 * m
    r = 1
    for k in range(m):
        h = H[k]
        # eliminate the coordinate with the smallest non-zero |h_p| (slowest growth)
        p = min((c for c in range(D) if h[c]), key=lambda c: abs(h[c]))
        hp = h[p]
        seen = set()
        for a in H[:k]:
            ap = a[p]
            v = [hp * a[c] - ap * h[c] for c in range(D) if c != p]
            if any(v):
                seen.add(_canon(v))
        if D == 3:
            r += 2 * len(seen) if seen else 1
        else:
            r += _regions_exact(list(seen), D - 1)
    return r


# ---------------------------------------------------------------------------------- public API

def count_dichotomies(X: ArrayLike, tol: float = DEFAULT_TOL, *,
                      exact: bool = False) -> DichotomyCount:
    """Count the affine dichotomies ``P`` of ``X`` exactly, for any ``d`` (THEORY §6).

    Parameters
    ----------
    X : array-like of shape (n, d) or (n,)
        Training inputs; a 1-D array is ``d = 1``. In exact mode entries may be ``Fraction`` or
        ``int`` objects.
    tol : float, default 1e-12
        Chord tolerance of the float mode (module docstring). Ignored in exact mode.
    exact : bool, default False
        Use exact integer arithmetic (module docstring).

    Returns
    -------
    DichotomyCount

    Raises
    ------
    ValueError
        Empty input, NaN/Inf, or ``tol`` not in (0, 1).

    Notes
    -----
    Cost of the float mode for ``n = 50`` Gaussian points (``benchmarks/bench_dichotomies.py``):
    well below a second up to ``d = 4``, about 2 s for ``d = 5`` (``P = 4,276,820``), after a
    one-time numba compilation cached on disk.
    """
    if exact:
        arr = np.asarray(X, dtype=object)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[0] == 0:
            raise ValueError(f"X must be a non-empty (n, d) array, got shape {arr.shape}")
        n, d = arr.shape
        H = integer_lift(arr)
        P = _regions_exact(H, d + 1)
        cv = cover(n, d)
        return DichotomyCount(P, cv, P == cv, n, d, len(H), True, None, None)
    if not 0 < tol < 1:
        raise ValueError(f"tol must be in (0, 1), got {tol}")
    L = lifted(X)
    if L.shape[0] == 0:
        raise ValueError("X is empty")
    if not np.all(np.isfinite(L)):
        raise ValueError("X holds NaN or Inf")
    L = lifted(normalized(L[:, :-1]))
    n, D = L.shape
    P, stats, n_distinct = region_count(np.ascontiguousarray(L), float(tol))
    cv = cover(n, D - 1)
    return DichotomyCount(int(P), cv, int(P) == cv, n, D - 1, int(n_distinct), False,
                          float(tol), (float(stats[0]), float(stats[1])))
