"""Ternary activation patterns of rays and the checks of [LJM26] Theorem 6 (THEORY §7).

The pattern of a direction ``v = (w, b)`` on the training inputs is
``t(v)_j = sign(v·x̃_j) ∈ {−1, 0, +1}``, 0 when the kink of ``v`` passes through ``x_j``. The
degeneration order is ``t ⪯ t'`` iff ``t_j ∈ {0, t'_j}`` for every ``j``. Theorem 6 (as
summarised in THEORY §7) claims, for the learned rays: the patterns are pairwise distinct; they
form an antichain under ``⪯``; for every binary pattern ``s ∈ {±1}^n`` at most two learned
patterns satisfy ``t ⪯ s``. The count of rays is compared with ``2P − 1`` and with ``P − 1``
(the convention of [LJM26] is not confirmed, THEORY §6).

Deciding a 0 needs a tolerance. For a ray (a cloud of particles at finite temperature) entry
``j`` is 0 when

* the kink of the mean direction passes within ``angle_tol`` radians of ``x̃_j``, i.e.
  ``|v·x̃_j| ≤ sin(angle_tol)·|x̃_j|`` (``v`` a unit vector), or
* the ray's particles straddle the hyperplane ``{u : u·x̃_j = 0}``: the lighter side holds at
  least ``mass_tol`` of the ray's mass ``Σ|a||u|``.

Both tolerances are reported with the patterns, with per-ray margins.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from solvers.geometry import lifted

#: Default angular tolerance (radians) of a 0 entry.
ANGLE_TOL = 1e-3
#: Default straddling-mass tolerance of a 0 entry.
MASS_TOL = 0.1


@dataclass
class PatternTolerance:
    """Tolerances of the 0 entries (module docstring)."""

    angle_tol: float = ANGLE_TOL
    mass_tol: float = MASS_TOL

    def as_dict(self) -> dict:
        return {"angle_tol": float(self.angle_tol), "mass_tol": float(self.mass_tol)}


def ternary_pattern(v, X, angle_tol: float = ANGLE_TOL):
    """Pattern ``sign(v·x̃_j)`` of one direction, with 0 within ``angle_tol`` of ``x̃_j``.

    Parameters
    ----------
    v : array-like of shape (d+1,)
        Direction ``(w, b)`` (normalised inside).
    X : ndarray of shape (n, d)
    angle_tol : float

    Returns
    -------
    pattern : ndarray of shape (n,) int8
    margin : float
        Smallest ``|v·x̃_j|/|x̃_j|`` over the non-zero entries (``inf`` if none): how far the
        nearest data point not on the kink is, as the sine of an angle.
    """
    v = np.asarray(v, dtype=float)
    v = v / np.linalg.norm(v)
    L = lifted(X)
    z = (L @ v) / np.linalg.norm(L, axis=1)
    t = np.sign(z).astype(np.int8)
    t[np.abs(z) <= np.sin(angle_tol)] = 0
    nz = np.abs(z[t != 0])
    return t, float(nz.min()) if nz.size else float("inf")


def ray_pattern(v, V_members, mass_members, X, tol: PatternTolerance | None = None):
    """Pattern of a ray: :func:`ternary_pattern` of its direction ``v``, with 0 also where its
    particles straddle the hyperplane of ``x̃_j`` (module docstring).

    Parameters
    ----------
    v : ndarray of shape (d+1,)
        Mass-weighted mean direction of the ray.
    V_members : ndarray of shape (m, d+1)
        Unit directions of its particles.
    mass_members : ndarray of shape (m,)
        Their masses ``|a||u|``.
    X : ndarray of shape (n, d)
    tol : PatternTolerance, optional

    Returns
    -------
    pattern : ndarray of shape (n,) int8
    info : dict
        ``angle_margin`` (smallest ``|v·x̃_j|/|x̃_j|`` over non-zero entries),
        ``straddle`` (lighter-side mass fraction per entry, list of n floats).
    """
    tol = PatternTolerance() if tol is None else tol
    t, margin = ternary_pattern(v, X, tol.angle_tol)
    L = lifted(X)
    mm = np.asarray(mass_members, dtype=float)
    tot = mm.sum()
    if tot > 0 and len(mm):
        pos = (np.asarray(V_members) @ L.T > 0)            # (m, n)
        up = mm @ pos / tot
        straddle = np.minimum(up, 1.0 - up)
    else:
        straddle = np.zeros(L.shape[0])
    t[straddle >= tol.mass_tol] = 0
    z = np.abs(L @ (v / np.linalg.norm(v))) / np.linalg.norm(L, axis=1)
    nz = z[t != 0]
    return t, {"angle_margin": float(nz.min()) if nz.size else float("inf"),
               "straddle": [float(s) for s in straddle]}


def pattern_realisable(t, X) -> bool:
    """Whether some direction ``v ≠ 0`` has the ternary pattern ``t`` on the data: ``v·x̃_j = 0``
    where ``t_j = 0`` and ``sign(v·x̃_j) = t_j`` elsewhere (docs/theory.md §6.7).

    The zero entries need ``rank(x̃_Z) ≤ d`` (a direction lies on at most ``d`` hyperplanes of
    lifted points in general position); with the signs it is a linear feasibility problem,
    ``x̃_Z v = 0``, ``t_j x̃_j·v ≥ 1`` (scale-free), solved by ``scipy.optimize.linprog``.

    Parameters
    ----------
    t : array-like of shape (n,), entries in {−1, 0, +1}
    X : ndarray of shape (n, d)

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        ``t`` not of length ``n`` or with an entry outside {−1, 0, +1}.
    """
    from scipy.optimize import linprog
    t = np.asarray(t).ravel()
    L = lifted(X)
    if t.shape != (L.shape[0],) or not np.all(np.isin(t, (-1, 0, 1))):
        raise ValueError(f"a ternary pattern has one entry in {{-1, 0, 1}} per data point "
                         f"({L.shape[0]}), got {t.tolist()}")
    t = t.astype(int)
    Z = L[t == 0]
    if Z.shape[0] and np.linalg.matrix_rank(Z) >= L.shape[1]:
        return False
    on = t != 0
    if not np.any(on):
        return True
    A_ub = -(t[on, None] * L[on])
    res = linprog(np.zeros(L.shape[1]), A_ub=A_ub, b_ub=-np.ones(int(on.sum())),
                  A_eq=Z if Z.shape[0] else None, b_eq=np.zeros(Z.shape[0]) if Z.shape[0] else None,
                  bounds=[(None, None)] * L.shape[1], method="highs")
    return bool(res.status == 0)


def realisable_pattern(t, v, X, angle_tol: float):
    """A ray's pattern ``t`` (:func:`ray_pattern`) if some direction can have it
    (:func:`pattern_realisable`), else the direction ``v``'s own pattern
    (:func:`ternary_pattern` at ``angle_tol``) trimmed to zeros it can have, the zero whose
    hyperplane is farthest from ``v`` going first (docs/theory.md §6.7): the straddling mass
    or the angle tolerance can put more zeros than a direction can have, three in the plane.

    Returns
    -------
    (pattern, repaired) : ndarray of shape (n,) int8 and bool
    """
    t = np.asarray(t, dtype=np.int8)
    if pattern_realisable(t, X):
        return t, False
    v = np.asarray(v, dtype=float)
    L = lifted(X)
    own, _ = ternary_pattern(v, X, angle_tol)
    while not pattern_realisable(own, X) and np.any(own == 0):
        z = np.nonzero(own == 0)[0]
        far = z[np.argmax(np.abs(L[z] @ v) / np.linalg.norm(L[z], axis=1))]
        own[far] = 1 if float(L[far] @ v) >= 0 else -1
    return own, True


def precedes(t, s) -> bool:
    """``t ⪯ s``: ``t_j ∈ {0, s_j}`` for every ``j`` (THEORY §7)."""
    t = np.asarray(t)
    s = np.asarray(s)
    return bool(np.all((t == 0) | (t == s)))


def _compatible(t, s) -> bool:
    """Some binary pattern is above both: no ``j`` with ``t_j = −s_j ≠ 0``."""
    t = np.asarray(t)
    s = np.asarray(s)
    return not bool(np.any(t * s < 0))


def _max_clique(adj: list) -> list:
    """A maximum clique of the graph with adjacency sets ``adj`` (Bron–Kerbosch with pivot)."""
    best: list = []

    def bk(Rset, Pset, Xset):
        nonlocal best
        if not Pset and not Xset:
            if len(Rset) > len(best):
                best = list(Rset)
            return
        if len(Rset) + len(Pset) <= len(best):
            return
        u = max(Pset | Xset, key=lambda w: len(adj[w] & Pset))
        for v in list(Pset - adj[u]):
            bk(Rset | {v}, Pset & adj[v], Xset & adj[v])
            Pset = Pset - {v}
            Xset = Xset | {v}

    bk(set(), set(range(len(adj))), set())
    return sorted(best)


def theorem6(patterns: Sequence[ArrayLike], cell_conflicts: Sequence | None = None) -> dict:
    """Check the claims of [LJM26] Theorem 6 on a list of ray patterns (THEORY §7).

    Parameters
    ----------
    patterns : sequence of array-like of shape (n,), entries in {−1, 0, +1}
        One pattern per ray, ray ``k`` at position ``k``.
    cell_conflicts : sequence of [k, l], optional
        Pairs of rays of one sign sharing an activation cell
        (:attr:`analysis.rays.RayResult.cell_conflicts`): one ray split in two, or a snapshot
        not yet stationary. A duplicate or comparable pair among them is no failure of the
        theorem but of the ray count (``explained_by_cells``).

    Returns
    -------
    dict
        ``distinct`` (bool) and ``duplicates`` (pairs ``[k, l]`` with equal patterns);
        ``antichain`` (bool) and ``comparable`` (pairs ``[k, l]``, ``k ≠ l``, with
        ``t_k ⪯ t_l``; equal patterns are comparable both ways, so a duplicate also breaks the
        antichain); ``max_per_binary`` (the largest number of patterns below one binary
        ``s ∈ {±1}^n``: a maximum clique of the "no opposite non-zero entry" graph),
        ``at_most_two_per_binary`` (bool), ``max_per_binary_rays`` (the rays of one largest set)
        and ``binary_witness`` (an ``s`` above all of them; free entries set to +1);
        ``cell_conflicts`` (as given), ``conflicts_in_failures`` (the duplicate or comparable
        pairs, unordered, whose rays share a cell) and ``explained_by_cells`` (True when some
        check fails and every failing pair shares a cell: the verdict is not decided).

    Raises
    ------
    ValueError
        Patterns of different lengths.
    """
    T = [np.asarray(t, dtype=np.int8) for t in patterns]
    J = len(T)
    dups, comp = [], []
    for k, l in itertools.combinations(range(J), 2):
        if np.array_equal(T[k], T[l]):
            dups.append([k, l])
        if precedes(T[k], T[l]):
            comp.append([k, l])
        if precedes(T[l], T[k]):
            comp.append([l, k])
    adj = [set() for _ in range(J)]
    for k, l in itertools.combinations(range(J), 2):
        if _compatible(T[k], T[l]):
            adj[k].add(l)
            adj[l].add(k)
    clique = _max_clique(adj) if J else []
    witness = None
    if clique:
        s = np.ones(len(T[0]), dtype=np.int8)
        for k in clique:
            s[T[k] != 0] = T[k][T[k] != 0]
        witness = [int(x) for x in s]
    conf = {tuple(sorted(map(int, c))) for c in (cell_conflicts or [])}
    failing = {tuple(sorted(c)) for c in dups + comp}
    hit = sorted(failing & conf)
    return {"distinct": not dups, "duplicates": dups,
            "antichain": not comp, "comparable": comp,
            "cell_conflicts": [list(c) for c in sorted(conf)],
            "conflicts_in_failures": [list(c) for c in hit],
            "explained_by_cells": bool(failing) and failing <= conf,
            "max_per_binary": len(clique), "at_most_two_per_binary": len(clique) <= 2,
            "max_per_binary_rays": clique, "binary_witness": witness}


def bounds(P: int, J: int) -> dict:
    """The ray count ``J`` against ``2P − 1`` and ``P − 1`` (THEORY §6)."""
    return {"J": int(J), "bound_2P_minus_1": 2 * int(P) - 1, "bound_P_minus_1": int(P) - 1,
            "within_2P_minus_1": int(J) <= 2 * int(P) - 1,
            "within_P_minus_1": int(J) <= int(P) - 1}
