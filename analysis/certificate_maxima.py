"""The local maxima of ``|G|`` on the sphere and their basins, exactly (docs/theory.md §6.7).

``G_R(v) = (1/λ) Σ_j R_j (v·x̃_j)_+`` (:mod:`analysis.certificate`) is linear on every
activation cell; the maximum of ``±G`` on a closed cell and its maximiser are a cone projection
(:func:`solvers.convex.cell_maxima`). A linear function has one local maximum on a convex
spherical cell, so a point is a local maximum of ``±G`` on the sphere exactly when it is the
maximiser of every closed cell that contains it, which is how they are found. The rays of a measure sit at these maxima
(THEORY §4–5): :mod:`analysis.gibbs_rays` finds the Gibbs measure's (its basins weighed by
:func:`nearest_maximum` at the end of an ascent), and
:func:`analysis.rays.find_rays` splits a cluster of particles that spans two basins.
"""

from __future__ import annotations

import math

import numpy as np

from solvers.activation_regions import activation_patterns
from solvers.convex import cell_maxima
from solvers.geometry import lifted

#: A pattern entry of an exact maximum of ``|G|`` is 0 within this angle (radians) of
#: ``x̃_j``'s hyperplane (:func:`analysis.ternary.ternary_pattern`): the cone projection puts a
#: maximiser on a face to round-off.
ZERO_TOL = 1e-9

#: Two local maxima closer than this (chord) are one point found from two cells.
SAME_POINT = 1e-7


class CellMaxima:
    """The maximum of ``±G_R`` on every closed activation cell and its maximiser
    (:func:`solvers.convex.cell_maxima`), and which of them are local maxima on the sphere."""

    def __init__(self, R, X, lam, patterns):
        self.Xt = lifted(X)
        self.nx = np.linalg.norm(self.Xt, axis=1)
        self.patterns = patterns
        self.vals, self.args, _ = cell_maxima(R, X, lam, patterns)

    def is_local_maximum(self, k: int, col: int) -> bool:
        """Whether cell ``k``'s maximiser of ``±G`` (``col`` 0: ``+G``, 1: ``−G``) is a local
        maximum on the sphere: no closed cell containing it has a higher maximum (the module
        docstring)."""
        z = self.Xt @ self.args[k, col]
        tol = 1e-9 * self.nx
        P = self.patterns
        inside = np.all((P & (z[None, :] >= -tol)) | (~P & (z[None, :] <= tol)), axis=1)
        top = self.vals[k, col]
        return not np.any(self.vals[inside, col] > top * (1 + 1e-12) + 1e-15)


def local_maxima(R, X, lam, patterns=None) -> list:
    """The local maxima of ``|G_R|`` on ``S^d`` (the module docstring).

    Returns
    -------
    list of (v (d+1,), s) with ``s = +1`` for a maximum of ``G`` and ``−1`` for one of ``−G``;
    points where ``G = 0`` are not maxima of ``|G|`` and are left out.
    """
    return [(v, s) for v, s, _ in maxima_of(cell_maxima_of(R, X, lam, patterns))]


#: :func:`cell_maxima_of` results of the last few ``(R, X, lam)`` (the sensitivity scan and the
#: frames of a stage ask for the same one many times; each costs a cone projection per
#: activation cell and sign).
_ASCENTS: dict = {}
_ASCENTS_KEPT = 8
#: The activation patterns of the last data set (:func:`cell_maxima_of`).
_PATTERNS: dict = {}


def cell_maxima_of(R, X, lam, patterns=None) -> CellMaxima:
    """The :class:`CellMaxima` of ``G_R`` on the data ``X`` (patterns computed when omitted),
    remembered for the last few arguments."""
    R = np.asarray(R, dtype=float).ravel()
    X = np.asarray(X, dtype=float).reshape(R.size, -1)
    key = (R.tobytes(), X.tobytes(), float(lam), None if patterns is None
           else np.asarray(patterns, dtype=bool).tobytes())
    if key not in _ASCENTS:
        if patterns is None:
            xk = X.tobytes()
            if xk not in _PATTERNS:         # 0.14 s for eight points in the plane
                _PATTERNS.clear()
                _PATTERNS[xk] = activation_patterns(X)[0]
            patterns = _PATTERNS[xk]
        if len(_ASCENTS) >= _ASCENTS_KEPT:
            _ASCENTS.pop(next(iter(_ASCENTS)))
        _ASCENTS[key] = CellMaxima(R, X, lam, np.asarray(patterns, dtype=bool))
    return _ASCENTS[key]


def maxima_of(asc: CellMaxima) -> list:
    """``(v, s, cells)``: each local maximum, its sign and the top cells (one per column and
    cell whose maximiser it is)."""
    out = []
    scale = float(asc.vals.max(initial=0.0))          # both signs: a column may be all 0
    for col, s in ((0, 1), (1, -1)):
        top = asc.vals[:, col]
        for k in np.nonzero(top > 1e-12 * scale)[0] if scale > 0 else []:
            if not asc.is_local_maximum(int(k), col):
                continue
            v = asc.args[k, col]
            for entry in out:
                if entry[1] == s and float(np.linalg.norm(v - entry[0])) <= SAME_POINT:
                    entry[2].append(int(k))
                    break
            else:
                out.append((v, s, [int(k)]))
    return out


def nearest_maximum(maxima: list, V, s) -> np.ndarray:
    """For each direction of ``V`` (m, d+1), the index into ``maxima`` (:func:`maxima_of`) of
    the nearest (by angle) local maximum of ``s·G`` (``s`` (m,) ±1); −1 where there is none of
    that sign. Used on directions already near the top of their hill (the end of an ascent,
    or the particles of one concentration): hopping from a cell to its maximiser would pick,
    for a cell whose closure touches two maxima, the higher one whatever the nearer."""
    V = np.atleast_2d(np.asarray(V, dtype=float))
    s = np.broadcast_to(np.asarray(s), (V.shape[0],))
    out = -np.ones(V.shape[0], dtype=int)
    if not maxima:
        return out
    Vm = np.array([v for v, _, _ in maxima])
    sm = np.array([sg for _, sg, _ in maxima])
    cos = V @ Vm.T
    cos[s[:, None] != sm[None, :]] = -np.inf
    best = np.argmax(cos, axis=1)
    ok = np.isfinite(cos[np.arange(V.shape[0]), best])
    out[ok] = best[ok]
    return out


#: Points on a great-circle arc where :func:`basins` looks for a valley of ``|G|``.
ARC_POINTS = 17


def _arc_dips(P, Q, s, start, X, R, lam, points: int = ARC_POINTS) -> np.ndarray:
    """For each pair of rows of ``P``, ``Q`` (m, d+1): whether ``s·G`` dips below ``start``
    (m,) somewhere on the great-circle arc between them (a valley: the two are on two hills)."""
    from analysis.certificate import certificate
    m = P.shape[0]
    if m == 0:
        return np.zeros(0, dtype=bool)
    t = np.linspace(0.0, 1.0, points)[1:-1]
    pts = P[:, None, :] * (1.0 - t)[None, :, None] + Q[:, None, :] * t[None, :, None]
    pts /= np.linalg.norm(pts, axis=2, keepdims=True)
    g = s[:, None] * certificate(pts.reshape(-1, P.shape[1]), X, R, lam).reshape(m, -1)
    return np.min(g, axis=1) < start - 1e-12 * np.maximum(1.0, np.abs(start))


def basins(V, G, maxima: list, X, R, lam, k: int = 16) -> np.ndarray:
    """The index into ``maxima`` (:func:`maxima_of`) of the local maximum of ``|G|`` whose
    basin holds each direction of ``V`` (m, d+1), ``G`` (m,) the certificate there (from
    residuals ``R`` (n,) on inputs ``X`` (n, d) at weight decay ``lam``); −1 where ``G = 0`` (a
    flat region, no maximum) or no maximum of that sign exists.

    Discrete ascent: every direction points to its neighbour (among its ``k`` nearest with
    the same sign of ``G``) of highest ``|G|`` when that is higher than its own and no valley
    of ``|G|`` lies on the arc between them (``|G|`` nowhere on it below the direction's own:
    a sparse point set, a ray held by a few particles, has neighbours on other hills), and the
    pointers are followed to their ends; this follows the flow of ``|G|`` up to the point
    set's resolution, along the ridges (kinks) too, where a projected gradient step zigzags.
    An end joins the nearest exact maximum of its sign that it reaches without crossing a
    valley (the nearest of its sign when none does). The points are an integration rule's
    nodes (:mod:`analysis.gibbs_rays`) or particles (:func:`analysis.rays.find_rays`): the
    same partition of the sphere for both (docs/theory.md §6.7)."""
    from scipy.spatial import cKDTree
    V = np.atleast_2d(np.asarray(V, dtype=float))
    G = np.asarray(G, dtype=float).ravel()
    out = -np.ones(V.shape[0], dtype=int)
    live = np.nonzero(np.abs(G) > 1e-12)[0]
    m = live.size
    if m == 0 or not maxima:
        return out
    P, s = V[live], np.where(G[live] >= 0, 1, -1)
    value = np.abs(G[live])
    kk = min(k + 1, m)
    _, nb = cKDTree(P).query(P, k=kk)
    nb = nb.reshape(m, kk)
    vals = np.where(s[nb] == s[:, None], value[nb], -np.inf)
    best = np.argmax(vals, axis=1)
    parent = nb[np.arange(m), best]
    up = vals[np.arange(m), best] > value
    step = np.nonzero(up)[0]
    up[step] = ~_arc_dips(P[step], P[parent[step]], s[step], value[step], X, R, lam)
    parent = np.where(up, parent, np.arange(m))
    while True:
        nxt = parent[parent]
        if np.array_equal(nxt, parent):
            break
        parent = nxt
    ends, inverse = np.unique(parent, return_inverse=True)
    out[live] = _join_ends(maxima, P[ends], s[ends], value[ends], X, R, lam)[inverse]
    return out


def _join_ends(maxima, E, s, value, X, R, lam) -> np.ndarray:
    """The maximum each end of an ascent (``E`` (m, d+1), signs ``s``, ``|G|`` ``value``)
    joins: the nearest of its sign reached without a valley, else the nearest of its sign."""
    out = nearest_maximum(maxima, E, s)
    Vm = np.array([v for v, _, _ in maxima])
    sm = np.array([sg for _, sg, _ in maxima])
    cos = E @ Vm.T
    cos[s[:, None] != sm[None, :]] = -np.inf
    order = np.argsort(-cos, axis=1)
    todo = np.nonzero(out >= 0)[0]
    for rank in range(len(maxima)):
        if todo.size == 0:
            break
        cand = order[todo, rank]
        ok_sign = np.isfinite(cos[todo, cand])
        dips = np.ones(todo.size, dtype=bool)
        sel = np.nonzero(ok_sign)[0]
        dips[sel] = _arc_dips(E[todo[sel]], Vm[cand[sel]], s[todo[sel]], value[todo[sel]], X,
                              R, lam)
        reach = ok_sign & ~dips
        out[todo[reach]] = cand[reach]
        todo = todo[~reach & ok_sign]
    return out


#: A local maximum of ``|G|`` is a hill of its own only when the dip of ``|G|`` on the way to
#: its nearest higher maximum of the same sign exceeds this many standard errors of the dip
#: (:func:`resolved_maxima`; a one-sided test at 0.13 %). On the benchmark's run files
#: (docs/theory.md §6.7) the maxima that split one Gibbs basin had dips of 0.5–1.3
#: standard errors.
DIP_Z = 3.0

#: Two maxima at least this far from antipodal (radians) have one shortest arc between them.
_ANTIPODAL = 1e-6


def arc_minimum(P, Q, s, X, R, lam, points: int = 64):
    """The smallest ``s·G_R`` on the great-circle arc from ``P`` to ``Q`` (unit vectors of
    shape (d+1,), ``s = ±1``) and where it is. ``G`` restricted to the arc is a sinusoid on each
    piece between two data points' hyperplanes, concave where ``s·G > 0`` near the top of a
    hill, so the minimum is at a piece's end: the crossings of the hyperplanes, found exactly,
    are evaluated with ``points`` evenly spaced ones.

    Returns
    -------
    (value, point) : float and ndarray of shape (d+1,)

    Raises
    ------
    ValueError
        ``P`` or ``Q`` not a finite unit vector of length ``d+1``, ``P`` and ``Q`` equal or
        antipodal, ``s`` not ±1, ``points < 2``.
    """
    from analysis.certificate import certificate
    P, Q = np.asarray(P, dtype=float), np.asarray(Q, dtype=float)
    X = np.asarray(X, dtype=float)
    X = X.reshape(X.shape[0], -1)
    for name, u in (("P", P), ("Q", Q)):
        if u.shape != (X.shape[1] + 1,) or not np.all(np.isfinite(u)) \
                or abs(np.linalg.norm(u) - 1.0) > 1e-6:
            raise ValueError(f"{name} must be a finite unit vector of length d+1 = "
                             f"{X.shape[1] + 1}, got {u}")
    if not (np.ndim(s) == 0 and s in (1, -1)):
        raise ValueError(f"s must be +1 or -1, got {s}")
    if int(points) < 2:
        raise ValueError(f"points must be at least 2 (both ends of the arc), got {points}")
    B = Q - (P @ Q) * P
    if np.linalg.norm(B) < 1e-12:
        raise ValueError("P and Q are equal or antipodal: no one shortest arc between them")
    Xt = lifted(np.asarray(X, dtype=float))
    omega = float(np.arccos(np.clip(P @ Q, -1.0, 1.0)))
    B = B / np.linalg.norm(B)
    a, b = Xt @ P, Xt @ B                     # x̃·v(θ) = a cos θ + b sin θ
    with np.errstate(divide="ignore", invalid="ignore"):
        t0 = np.arctan2(-a, b)                # zeros of a cos θ + b sin θ, mod π
    cross = np.concatenate([t0 % np.pi, t0 % np.pi + np.pi]) if np.all(np.isfinite(t0)) else []
    th = np.concatenate([np.linspace(0.0, omega, int(points)),
                         [t for t in cross if 0.0 < t < omega]])
    V = np.cos(th)[:, None] * P[None, :] + np.sin(th)[:, None] * B[None, :]
    g = s * certificate(V, X, R, lam)
    i = int(np.argmin(g))
    return float(g[i]), V[i]


def resolved_maxima(maxima: list, X, R, lam, dip_se=None, z: float = DIP_Z) -> np.ndarray:
    """Which local maxima of ``|G_R|`` (:func:`maxima_of`) are hills of their own.

    A maximum ``v`` joins the nearest higher maximum ``w`` of its sign when the dip of ``s·G``
    between them, ``s·G(v)`` less its smallest value on the arc from ``v`` to ``w``
    (:func:`arc_minimum`; one path, so an upper bound of the dip along the best path, ``v``'s
    prominence), is
    at most ``z`` standard errors of that dip. The dip is linear in the residuals,
    ``(s/λ) Σ_j R_j ((v·x̃_j)_+ − (p·x̃_j)_+)`` at the arc's lowest point ``p``, so its
    standard error is that of the time average ``R`` (``dip_se``); with exact residuals
    (``dip_se`` None, a Gibbs reference) only a dip of zero to round-off joins, a maximum that
    is no separate hill. Used by the basins of the particles and of the Gibbs measure alike
    (docs/theory.md §6.7), so that a maximum the run's residuals cannot tell from its
    neighbour's shoulder does not split a ray.

    Parameters
    ----------
    maxima : list of (v, s, cells)
        :func:`maxima_of`.
    X : ndarray of shape (n, d)
    R : ndarray of shape (n,)
        The residuals the maxima are of.
    lam : float
    dip_se : callable, optional
        ``dip_se(C)`` with ``C`` of shape (m, n): the standard errors (m,) of ``C @ R / λ``
        (:func:`residual_dip_se`); a ``nan`` error (unknown) joins nothing.
    z : float
        Standard errors a dip must exceed (finite, ``≥ 0``).

    Returns
    -------
    ndarray of shape (len(maxima),) int
        For each maximum, the index of the maximum whose hill it is on (itself when resolved;
        always one that is resolved).

    Raises
    ------
    ValueError
        ``z`` negative or not finite; ``dip_se`` not returning one error per row of ``C``.
    """
    from analysis.certificate import certificate
    if not (math.isfinite(z) and z >= 0):
        raise ValueError(f"z must be finite and >= 0, got {z}")
    m = len(maxima)
    parent = np.arange(m)
    if m < 2:
        return parent
    Xt = lifted(np.asarray(X, dtype=float))
    Vm = np.array([v for v, _, _ in maxima])
    sm = np.array([sg for _, sg, _ in maxima])
    top = sm * certificate(Vm, X, R, lam)
    pairs = []
    for k in range(m):
        higher = np.nonzero((sm == sm[k]) & (top > top[k]))[0]
        cos = Vm[higher] @ Vm[k]
        higher = higher[cos > -1.0 + 0.5 * _ANTIPODAL ** 2]
        if higher.size == 0:
            continue
        j = int(higher[np.argmax(Vm[higher] @ Vm[k])])
        low, p = arc_minimum(Vm[k], Vm[j], int(sm[k]), X, R, lam)
        c = sm[k] * (np.maximum(Xt @ Vm[k], 0.0) - np.maximum(Xt @ p, 0.0))
        pairs.append((k, j, top[k] - low, c))
    if not pairs:
        return parent
    dips = np.array([q[2] for q in pairs])
    se = (np.zeros(len(pairs)) if dip_se is None
          else np.asarray(dip_se(np.array([q[3] for q in pairs])), dtype=float))
    if se.shape != (len(pairs),):
        raise ValueError(f"dip_se returned shape {se.shape} for {len(pairs)} dips")
    for (k, j, _, _), dip, e in zip(pairs, dips, se):
        if dip <= z * e + 1e-12 * max(1.0, abs(float(top[k]))):
            parent[k] = j
    while True:                               # a joined maximum's parent is strictly higher
        nxt = parent[parent]
        if np.array_equal(nxt, parent):
            return parent
        parent = nxt


def residual_dip_se(series, lam):
    """``dip_se`` of :func:`resolved_maxima` from the residual observations the time average
    ``R`` is the mean of: ``series`` a list over independent chains of arrays (M_c, n), ``R``
    the mean of their means. The standard error of ``C @ R / λ`` is that of each chain's time
    average of the projected series (:func:`analysis.time_average.mean_and_mcse`: its
    integrated autocorrelation time), combined over the chains
    (:func:`analysis.time_average.pooled`). With fewer than
    :data:`analysis.time_average.MIN_TAU_SAMPLES` observations in a chain, or no chain, the
    errors are ``nan`` (unknown: :func:`resolved_maxima` joins nothing).

    Raises
    ------
    ValueError
        ``lam <= 0``; ``series`` one array instead of a list of them."""
    from analysis.time_average import MIN_TAU_SAMPLES, mean_and_mcse, pooled
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    if isinstance(series, np.ndarray):
        raise ValueError("series must be a list of arrays (M_c, n), one per chain, not one "
                         f"array of shape {series.shape}")
    series = [np.asarray(S, dtype=float) for S in series]
    known = bool(series) and all(S.ndim == 2 and S.shape[0] >= MIN_TAU_SAMPLES for S in series)

    def dip_se(C):
        C = np.atleast_2d(np.asarray(C, dtype=float))
        if known and C.shape[1] != series[0].shape[1]:
            raise ValueError(f"C has {C.shape[1]} columns, the residuals {series[0].shape[1]}")
        if not known:
            return np.full(C.shape[0], np.nan)
        per = [mean_and_mcse(S @ C.T / lam)[:2] for S in series]
        return pooled([q[0] for q in per], [q[1] for q in per])[1]
    return dip_se
