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
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from math import comb, gcd, lcm
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from solvers.arrangement import distinct_normals, walk
from solvers.geometry import lifted

#: Default chord tolerance of the float mode (see the module docstring).
DEFAULT_TOL = 1e-12
#: Default limit of :func:`count_dichotomies` on the regions it may enumerate (its upper bound
#: :func:`region_bound`, Cover's count of the distinct points): about a minute of the float
#: mode at the 1.5–2·10⁷ regions/s measured on one core (``benchmarks/README.md``). A larger
#: count is refused before the enumeration (:class:`TooManyRegions`), unless the points are
#: certified in general position (then ``P`` is Cover's count, without enumeration).
DEFAULT_MAX_REGIONS = 10**9
#: The exact mode counts regions about this many times slower than the float mode (measured
#: 4·10⁵ against 1.5·10⁷ regions/s): it is refused above ``max_regions / EXACT_SLOWDOWN``.
EXACT_SLOWDOWN = 40
#: Regions per second assumed before any is counted (a refusal that comes before the
#: enumeration starts; the float mode's measured rate on one core).
NOMINAL_RATE = 1.5e7
#: Seconds the enumeration runs inside its compiled kernel before returning to Python, where a
#: pending SIGINT/SIGTERM is handled and progress is reported (the slice's work is adapted to
#: this duration as it goes).
SLICE_SECONDS = 0.2
#: Seconds of enumeration after which a count that does not fit within the limit is refused
#: (the measured rate then gives its time).
PROBE_SECONDS = 0.25
#: Most subsets of ``min(n, d+1)`` lifted points the general-position check examines.
GP_MAX_SUBSETS = 300_000
#: Cost of checking one subset (a singular value decomposition), in enumerated regions
#: (measured: about 10⁵ subsets/s against 1.5·10⁷ regions/s): the check is made only where it
#: is cheaper than the enumeration it replaces.
SUBSET_COST = 200
#: Relative smallest singular value below which the general-position check calls a subset of
#: lifted points dependent (the default of :func:`general_position`).
GP_TOL = 1e-9


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


def region_bound(m: int, rank: int) -> int:
    """Upper bound on the regions of a central arrangement of ``m`` distinct hyperplanes whose
    normals span ``rank`` dimensions: the generic count ``2 Σ_{k<rank} binom(m−1, k)``
    (:func:`cover` of ``m`` points in ``R^(rank−1)``), reached exactly when every ``rank`` of
    the normals are linearly independent [Cover 1965; Zaslavsky 1975]."""
    if m < 1:
        return 1
    return cover(m, max(rank, 1) - 1)


class TooManyRegions(ValueError):
    """Counting ``P`` would enumerate more regions than allowed (:data:`DEFAULT_MAX_REGIONS`).

    Attributes
    ----------
    bound : int
        Upper bound on the regions (:func:`region_bound`; ``P`` when the points are in general
        position).
    seconds : float
        Estimated time of the enumeration at ``rate``.
    rate : float
        Regions per second, measured on this data (or :data:`NOMINAL_RATE` before any).
    limit : int
        The limit in force.
    """

    def __init__(self, bound, seconds, rate, limit, n_distinct, rank, exact=False):
        self.bound, self.seconds, self.rate, self.limit = int(bound), float(seconds), \
            float(rate), int(limit)
        self.n_distinct, self.rank, self.exact = int(n_distinct), int(rank), bool(exact)
        super().__init__(self.reason())

    def reason(self, option: str = "max_regions") -> str:
        """One line: the estimated count and time, the limit, and how to raise it."""
        mode = " in the exact mode (about 40 times slower)" if self.exact else ""
        return (f"counting P would enumerate up to {self.bound:.3g} regions{mode} (Cover's count "
                f"of {self.n_distinct} distinct points spanning {self.rank} dimensions lifted, "
                f"which is P if they are in general position), about "
                f"{duration(self.seconds)} at {self.rate:.2g} regions/s: above the limit of "
                f"{self.limit:.3g} regions; raise {option} to count them")


def duration(seconds: float) -> str:
    """``12 s``, ``3 min 05 s``, ``2 h 07 min``, ``3.1e+04 h``."""
    if not np.isfinite(seconds):
        return "forever"
    s = round(seconds)
    if s < 60:
        return f"{max(s, 0)} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 10**6:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s / 3600:.2g} h"


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
    return _independent_subsets(lifted(X), tol, max_subsets)


def _independent_subsets(L, tol, max_subsets):
    """:func:`general_position` of lifted points ``L`` (n, d+1), subsets made in chunks."""
    n, D = L.shape
    k = min(n, D)
    if comb(n, k) > max_subsets:
        return None
    combos = itertools.combinations(range(n), k)
    while True:
        idx = np.array(list(itertools.islice(combos, 50_000)), dtype=np.int64)
        if idx.size == 0:
            return True
        s = np.linalg.svd(L[idx], compute_uv=False)         # (m, k)
        if np.any(s[:, -1] <= tol * s[:, 0]):
            return False


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
        (float mode; ``b = 4`` means nothing was kept apart by a small margin). None in exact
        mode and for the closed form.
    closed_form : bool
        ``P`` is Cover's count, the points certified in general position by the singular
        values of every ``min(n, d+1)`` lifted points (:func:`general_position`, relative
        tolerance :data:`GP_TOL`), without enumeration.
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
    closed_form: bool = False

    @property
    def method(self) -> str:
        if self.closed_form:
            return "closed-form"
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
                "tol_range": None if self.tol_range is None else [float(t) for t in self.tol_range],
                "closed_form": bool(self.closed_form)}


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


def _regions_exact(H: list, D: int, progress: Callable | None = None, bound: int = 0) -> int:
    """Regions of the central arrangement of the distinct canonical integer normals ``H`` in
    ``Z^D``, by deletion–restriction with fraction-free elimination; ``progress(done, bound)``
    after each restriction of the top level (pure Python: signals are handled as it runs)."""
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
        if progress is not None:
            progress(r, bound)
    return r


# ---------------------------------------------------------------------------------- public API

def _rank(L) -> int:
    """Numerical rank of the rows of ``L`` (relative tolerance ``1e-12``)."""
    if L.size == 0:
        return 0
    sv = np.linalg.svd(L, compute_uv=False)
    return int(np.sum(sv > 1e-12 * sv[0])) if sv[0] > 0 else 0


def _enumerate(L, tol, bound, limit, progress, exact_rank):
    """The float count of the lifted points ``L`` (n, D) in slices of about
    :data:`SLICE_SECONDS` (a pending signal is handled between two; ``progress(done, bound)``
    after each), refused with :class:`TooManyRegions` after :data:`PROBE_SECONDS` when the
    bound exceeds ``limit`` and the count is not done. Returns ``(P, stats, n_distinct)``."""
    n, D = L.shape
    L = np.ascontiguousarray(L)
    buf = np.zeros((D + 1, n + 1, D))
    ang = np.empty(n + 1)
    stats = np.array([0.0, 4.0])
    over = limit is not None and bound > limit

    def refuse(rate, extra=0.0):
        raise TooManyRegions(bound, extra + bound / rate, rate, limit, n_u, exact_rank)

    # 1. the distinct unit normals, in slices of rows (quadratic in their number); the first
    # slice of each kernel includes loading it, so the clocks start after it
    n_u, cnt, lo, rows = bound_rows(L), 0, 0, 256
    t0 = None
    while lo < n:
        t = time.monotonic()
        hi = min(n, lo + rows)
        cnt = int(distinct_normals(L, buf[0], cnt, lo, hi, tol, stats))
        rows = _next_budget(rows, time.monotonic() - t)
        if progress is not None:
            progress(0, bound)
        if t0 is None:
            t0, lo0 = time.monotonic(), hi
        elif over and hi < n and time.monotonic() - t0 >= PROBE_SECONDS:
            # pairs compared grow as the square of the rows done
            el = time.monotonic() - t0
            refuse(NOMINAL_RATE, el * ((n / hi) ** 2 - (lo0 / hi) ** 2) / (1 - (lo0 / hi) ** 2))
        lo = hi
    if cnt == 0 or D == 1:
        return (1 if cnt == 0 else 2), stats, cnt
    if D == 2:
        return 2 * cnt, stats, cnt
    # 2. the regions: the depth-first traversal of solvers.arrangement.walk, in slices
    mm = np.zeros(D, dtype=np.int64)
    kk = np.zeros(D, dtype=np.int64)
    mm[0] = cnt
    st = np.array([0, 1], dtype=np.int64)
    budget, t0, r0 = 4096, None, 0
    while st[0] >= 0:
        t = time.monotonic()
        walk(buf, D, ang, tol, stats, mm, kk, st, np.int64(budget))
        budget = _next_budget(budget, time.monotonic() - t)
        if progress is not None:
            progress(int(st[1]), bound)
        if t0 is None:
            t0, r0 = time.monotonic(), int(st[1])
        elif over and st[0] >= 0 and time.monotonic() - t0 >= PROBE_SECONDS:
            refuse(max(int(st[1]) - r0, 1) / (time.monotonic() - t0))
    return int(st[1]), stats, cnt


def bound_rows(L) -> int:
    """Number of distinct rows of ``L`` (exact comparison)."""
    return int(np.unique(L, axis=0).shape[0]) if L.size else 0


def _next_budget(budget, seconds):
    """The work of the next slice: scaled towards :data:`SLICE_SECONDS`, at most ×4 at once."""
    if seconds <= 0:
        return budget * 4
    return int(max(16, min(budget * 4, budget * SLICE_SECONDS / seconds)))


def count_dichotomies(X: ArrayLike, tol: float = DEFAULT_TOL, *, exact: bool = False,
                      max_regions: int | None = DEFAULT_MAX_REGIONS,
                      progress: Callable[[int, int], Any] | None = None,
                      closed_form: bool = True) -> DichotomyCount:
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
    max_regions : int or None, default :data:`DEFAULT_MAX_REGIONS`
        Most regions the enumeration may visit, judged by its upper bound (:func:`region_bound`
        of the distinct points and their rank, i.e. Cover's count); ``max_regions /
        EXACT_SLOWDOWN`` in exact mode. None: no limit.
    progress : callable ``(done, bound)``, optional
        Called between the slices of the enumeration (every :data:`SLICE_SECONDS` or so) with
        the regions counted so far and the upper bound.
    closed_form : bool, default True
        Where checking general position costs less than the enumeration (:data:`SUBSET_COST`
        per subset, at most :data:`GP_MAX_SUBSETS` subsets; always when ``n <= d + 1``) and the
        points are in general position (float mode), return Cover's count without
        enumerating. False: always enumerate.

    Returns
    -------
    DichotomyCount

    Raises
    ------
    ValueError
        Empty input, NaN/Inf, or ``tol`` not in (0, 1).
    TooManyRegions
        The upper bound exceeds ``max_regions`` and the count is not done after
        :data:`PROBE_SECONDS` (float mode; before any enumeration in exact mode). A subclass
        of ``ValueError`` whose message gives the bound and the estimated time.

    Notes
    -----
    The enumeration runs in slices of about :data:`SLICE_SECONDS` inside the numba kernel:
    between two, Python handles a pending SIGINT or SIGTERM (KeyboardInterrupt, or the
    command line's ``Terminated``) and ``progress`` is told. Cost of the float mode for
    ``n = 50`` Gaussian points (``benchmarks/bench_dichotomies.py``): well below a second up
    to ``d = 5`` (``P = 4,276,820``), after a one-time numba compilation cached on disk;
    1.5–2·10⁷ regions/s on one core (``benchmarks/README.md``).
    """
    if exact:
        arr = np.asarray(X, dtype=object)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[0] == 0:
            raise ValueError(f"X must be a non-empty (n, d) array, got shape {arr.shape}")
        n, d = arr.shape
        H = integer_lift(arr)
        rank = _rank(np.array([[float(c) for c in h] for h in H]))
        bound = region_bound(len(H), rank)
        if max_regions is not None and bound * EXACT_SLOWDOWN > max_regions:
            rate = NOMINAL_RATE / EXACT_SLOWDOWN
            raise TooManyRegions(bound, bound / rate, rate, max_regions // EXACT_SLOWDOWN,
                                 len(H), rank, exact=True)
        P = _regions_exact(H, d + 1, progress, bound)
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
    cv = cover(n, D - 1)
    n_u = bound_rows(L)
    rank = _rank(L)
    bound = region_bound(n_u, rank)
    subsets = comb(n, min(n, D))
    if closed_form and n_u == n and subsets <= GP_MAX_SUBSETS \
            and subsets * SUBSET_COST < bound and _independent_subsets(L, GP_TOL, subsets):
        return DichotomyCount(cv, cv, True, n, D - 1, n, False, float(tol), None,
                              closed_form=True)
    P, stats, n_distinct = _enumerate(L, float(tol), bound, max_regions, progress, rank)
    return DichotomyCount(int(P), cv, int(P) == cv, n, D - 1, int(n_distinct), False,
                          float(tol), (float(stats[0]), float(stats[1])))
