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
