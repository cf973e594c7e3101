"""Rays of a particle measure: clusters of neurons with one direction and one sign of ``a``
(THEORY §6).

A neuron contributes ``a σ(u·x̃) = a|u| σ(v·x̃)`` with direction ``v = u/|u| ∈ S^d`` and mass
``|a||u|``. The method, in order:

1. **Thermal halo, particle level.** Drop particles lighter than ``light_frac`` times the
   mass-weighted median particle mass (at finite τ the halo is light: ``E[r² | v]`` grows like
   ``1/(1 − G(v)²)``, THEORY §5). When the targets ``y`` and ``lam`` are given, also drop particles
   whose certificate disagrees: keep ``−sign(a) G(v) ≥ g_particle · max|G|`` (THEORY §4).
2. **Exact partition.** Each kept particle gets its cell: the sign of ``a`` and its binary
   activation pattern ``1[v·x̃_j > 0]`` on the training inputs (a region of the arrangement of
   THEORY §6). Particles of one cell act identically on the training set; the cells of a ray give
   its ternary pattern (a ray whose kink passes through ``x_j`` straddles the cells on both sides
   of ``x̃_j``'s hyperplane) and a threshold-free cross-check: two rays of one sign sharing a
   cell are reported in ``cell_conflicts`` (at a stationary point ``G`` is linear inside a cell,
   so a cell holds at most one ray of each sign, THEORY §4).
3. **Angular clustering with a plateau scan.** Kept particles of one sign are linked by single
   linkage on the mutual-reachability chord distance ``max(|v_i − v_j|, core_i, core_j)``
   (``core`` = distance to the k-th nearest neighbour, so a sparse halo particle is far from
   everything and cannot chain two rays), over the minimum spanning tree of the k-nearest-
   neighbour graph (scales to 10⁵ particles and more). The linkage threshold is scanned on a log
   grid from the typical neighbour spacing inside rays (mass-weighted median core distance) to 1.
   At each threshold a cluster counts as a ray when its mass is at least ``min_mass_frac`` of the
   total ``Σ|a||u|`` of all particles, it is compact (RMS angle at most ``max_spread``) and, with
   ``G`` available, its mean direction passes ``−sign(a) G(v) ≥ g_ray · max|G|``. The threshold
   used is the geometric middle of the widest plateau of that count (widest in log scale).
4. The ray's outskirts, which single linkage leaves out at the chosen threshold, join it: every
   particle of the ray's sign within ``absorb`` core spreads of its direction.
5. Per ray: mass-weighted mean direction, sign, weight ``c_k = (1/N) Σ_{i∈k} a_i |u_i|``, mass
   fraction, mass-weighted RMS angle to the direction (spread), ``G`` at the direction and the
   ternary pattern (:mod:`analysis.ternary`).

Every threshold is returned with the result (:meth:`RayResult.thresholds_used`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from scipy.spatial import cKDTree

from analysis.certificate import certificate, residuals
from analysis.ternary import PatternTolerance, ray_pattern, ternary_pattern
from solvers.geometry import lifted


@dataclass
class Ray:
    """One ray.

    Attributes
    ----------
    direction : ndarray of shape (d+1,)   unit vector ``v = (w, b)/|(w, b)|``
    sign : int                            sign of ``a`` (+1 or −1)
    weight : float                        ``c_k = (1/N) Σ_{i∈k} a_i |u_i|`` (signed)
    mass_fraction : float                 ``Σ_{i∈k} |a_i||u_i|`` over the total of all particles
    spread : float                        mass-weighted RMS angle (radians) to ``direction``
    n_particles : int
    n_cells : int                         activation cells merged into the ray
    G : float or None                     certificate at ``direction`` (None without y, lam)
    pattern : ndarray of shape (n,) int8  ternary pattern (:func:`analysis.ternary.ray_pattern`)
    pattern_margin : float                smallest ``|v·x̃_j|/|x̃_j|`` over non-zero entries
    """

    direction: np.ndarray
    sign: int
    weight: float
    mass_fraction: float
    spread: float
    n_particles: int
    n_cells: int
    G: float | None
    pattern: np.ndarray
    pattern_margin: float

    def as_dict(self) -> dict:
        return {"direction": [float(x) for x in self.direction], "sign": int(self.sign),
                "weight": float(self.weight), "mass_fraction": float(self.mass_fraction),
                "spread": float(self.spread), "n_particles": int(self.n_particles),
                "n_cells": int(self.n_cells),
                "G": None if self.G is None else float(self.G),
                "pattern": [int(t) for t in self.pattern],
                "pattern_margin": float(self.pattern_margin)}


@dataclass
class RayResult:
    """Output of :func:`find_rays`.

    Attributes
    ----------
    rays : list of Ray                    sorted by decreasing mass
    threshold : float                     chord-distance linkage threshold used
    thresholds : ndarray                  the scanned thresholds
    counts : ndarray of int               ray count at each scanned threshold
    plateau : tuple (lo, hi)              threshold range of the chosen plateau
    min_mass_frac : float                 cluster mass filter
    light_frac : float                    particle mass filter (relative to the weighted median)
    max_spread : float                    compactness of a ray (radians)
    absorb : float                        outskirts radius in core spreads
    g_particle, g_ray : float or None     certificate filters (None without y, lam)
    G_max : float or None                 ``max |G|`` over the particles
    halo_mass_fraction : float            mass outside the rays
    pattern_tol : PatternTolerance
    n_cells : int                         occupied activation cells after the particle filter
    rejected : list of dict               clusters heavy enough but failing the certificate
    cell_conflicts : list of [k, l]       rays of one sign sharing a cell (cross-check)
    labels : ndarray of shape (N,) int    ray index of each particle, −1 for the halo
    """

    rays: list
    threshold: float
    thresholds: np.ndarray
    counts: np.ndarray
    plateau: tuple
    min_mass_frac: float
    light_frac: float
    max_spread: float
    absorb: float
    g_particle: float | None
    g_ray: float | None
    G_max: float | None
    halo_mass_fraction: float
    pattern_tol: PatternTolerance
    n_cells: int
    rejected: list
    cell_conflicts: list
    labels: np.ndarray = field(repr=False)

    def thresholds_used(self) -> dict:
        return {"linkage_chord": float(self.threshold),
                "plateau": [float(self.plateau[0]), float(self.plateau[1])],
                "min_mass_frac": float(self.min_mass_frac),
                "light_frac": float(self.light_frac),
                "max_spread": float(self.max_spread),
                "absorb": float(self.absorb),
                "g_particle": self.g_particle, "g_ray": self.g_ray,
                "G_max": None if self.G_max is None else float(self.G_max),
                "pattern_angle_tol": float(self.pattern_tol.angle_tol),
                "pattern_mass_tol": float(self.pattern_tol.mass_tol),
                "halo_mass_fraction": float(self.halo_mass_fraction),
                "n_cells": int(self.n_cells)}


def directions(theta):
    """Directions ``v`` (N, d+1), norms ``|u|`` (N,) and masses ``|a||u|`` (N,) of particles
    ``theta`` (N, d+2)."""
    theta = np.asarray(theta, dtype=np.float64)
    u = theta[:, 1:]
    r = np.linalg.norm(u, axis=1)
    v = u / np.where(r > 0, r, 1.0)[:, None]
    return v, r, np.abs(theta[:, 0]) * r


def pattern_of(v, X, tol):
    """Ternary pattern of direction ``v`` with angular tolerance ``tol`` (radians); see
    :func:`analysis.ternary.ternary_pattern`."""
    return ternary_pattern(v, X, tol)[0]


def weighted_median(values, weights) -> float:
    """The weighted median of ``values`` (the smallest value with at least half the weight
    at or below it)."""
    o = np.argsort(values)
    c = np.cumsum(weights[o])
    return float(values[o][np.searchsorted(c, 0.5 * c[-1])])


def cells(sign, V, X) -> np.ndarray:
    """Cell id of each particle: its sign and binary activation pattern ``1[v·x̃_j > 0]``
    (ids are consecutive integers from 0; equal ids, equal cells).

    Parameters
    ----------
    sign : ndarray of shape (m,)   sign of ``a``
    V : ndarray of shape (m, d+1)  directions
    X : ndarray of shape (n, d)    training inputs
    """
    bits = np.hstack([(np.asarray(sign) > 0)[:, None], np.asarray(V) @ lifted(X).T > 0])
    packed = np.ascontiguousarray(np.packbits(bits, axis=1))
    key = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
    return np.unique(key, return_inverse=True)[1].ravel()


def _linkage_tree(V, sign, mass, knn):
    """Minimum spanning forest of the mutual-reachability k-NN graph of each sign.

    Returns
    -------
    ei, ej, ew : ndarrays
        Tree edges (indices into the rows of ``V``) and their mutual-reachability chord distance
        ``max(|v_i − v_j|, core_i, core_j)``.
    core_median : float
        Mass-weighted median core distance (distance to the k-th neighbour): the typical
        neighbour spacing inside rays.
    """
    m_all = V.shape[0]
    rows, cols, wts = [], [], []
    core = np.full(m_all, np.inf)
    for s in (1, -1):
        idx = np.nonzero(sign == s)[0]
        m = idx.size
        if m < 2:
            continue
        kk = min(knn + 1, m)
        dist, nb = cKDTree(V[idx]).query(V[idx], k=kk)
        core[idx] = dist[:, -1]
        mr = np.maximum(dist[:, 1:], np.maximum(dist[:, -1:], dist[nb[:, 1:], -1]))
        rows.append(np.repeat(idx, kk - 1))
        cols.append(idx[nb[:, 1:].ravel()])
        wts.append(mr.ravel())
    fin = np.isfinite(core)
    core_median = weighted_median(core[fin], mass[fin]) if fin.any() else float("nan")
    if not rows:
        return np.zeros(0, int), np.zeros(0, int), np.zeros(0), core_median
    w = np.maximum(np.concatenate(wts), 1e-300)     # zero weights would read as "no edge"
    g = coo_matrix((w, (np.concatenate(rows), np.concatenate(cols))),
                   shape=(m_all, m_all)).tocsr()
    T = minimum_spanning_tree(g).tocoo()
    return T.row, T.col, T.data, core_median


def _cell_conflicts(ray_of, cell, mass, J, frac):
    """Pairs ``[k, l]`` of rays that each hold at least ``frac`` of their mass in one common
    cell (same sign and binary pattern)."""
    if J < 2:
        return []
    sel = ray_of >= 0
    C = int(cell.max()) + 1
    M = np.zeros((J, C))
    np.add.at(M, (ray_of[sel], cell[sel]), mass[sel])
    M /= np.maximum(M.sum(axis=1, keepdims=True), 1e-300)
    big = M >= frac
    out = []
    for k in range(J):
        for l in range(k + 1, J):
            if np.any(big[k] & big[l]):
                out.append([k, l])
    return out


def _widest_plateau(counts):
    """Index range ``(i, j)`` of the longest run of equal non-zero counts (first if tied)."""
    best = (0, 0)
    found = False
    i = 0
    L = len(counts)
    while i < L:
        j = i
        while j + 1 < L and counts[j + 1] == counts[i]:
            j += 1
        if counts[i] > 0 and (not found or (j - i) > (best[1] - best[0])):
            best = (i, j)
            found = True
        i = j + 1
    return best


def find_rays(theta: ArrayLike, X: ArrayLike, *, y: ArrayLike | None = None,
              lam: float | None = None, min_mass_frac: float = 1e-2,
              light_frac: float = 1e-2, g_particle: float = 0.5, g_ray: float = 0.9,
              max_spread: float = 0.3, absorb: float = 3.0,
              thresholds: ArrayLike | None = None, pattern_tol: PatternTolerance | None = None,
              pattern_mass_tol: float | None = None,
              knn: int = 12) -> RayResult:
    """Cluster particles into rays (THEORY §6; method in the module docstring).

    Parameters
    ----------
    theta : ndarray of shape (N, d+2)
        Particles, rows ``(a, w, b)``.
    X : ndarray of shape (n, d)
        Training inputs.
    y : ndarray of shape (n,), optional
        Training targets; with ``lam`` enables the certificate filters.
    lam : float, optional
        Weight decay ``λ`` of the run.
    min_mass_frac : float, default 0.01
        A ray holds at least this fraction of the total mass ``Σ|a||u|``.
    light_frac : float, default 0.01
        Particles lighter than this times the mass-weighted median particle mass are halo.
    g_particle : float, default 0.5
        Particle certificate filter ``−sign(a) G(v) ≥ g_particle · max|G|``.
    g_ray : float, default 0.9
        Ray certificate filter, the same test at the ray's mean direction.
    max_spread : float, default 0.3
        A ray is compact: its mass-weighted RMS angle to its mean direction is at most this
        (radians). Clusters formed by merging distinct rays fail it, which ends the plateau.
    absorb : float, default 3.0
        After clustering, a particle of a ray's sign within ``absorb`` times the ray's core
        spread of its direction joins the ray (the outskirts that single linkage leaves out);
        the reported direction, weight and spread include them.
    thresholds : array-like, optional
        Chord-distance linkage thresholds to scan (default 50 values, log-spaced from the
        typical neighbour spacing inside rays, the mass-weighted median core distance, to 1:
        below that spacing a threshold resolves activation cells, not directions).
    pattern_tol : float or PatternTolerance, optional
        Angular tolerance (radians) of the 0 entries of the patterns, or both tolerances
        (default :class:`analysis.ternary.PatternTolerance()`).
    pattern_mass_tol : float, optional
        Straddling-mass tolerance of the 0 entries (overrides ``pattern_tol.mass_tol``).
    knn : int, default 12
        Neighbours per particle in the linkage graph.

    Returns
    -------
    RayResult

    Raises
    ------
    ValueError
        Shapes that do not match, or only one of ``y`` and ``lam`` given.
    """
    theta = np.asarray(theta, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64).reshape(np.shape(X)[0], -1)
    if theta.ndim != 2 or theta.shape[1] != X.shape[1] + 2:
        raise ValueError(f"theta must have shape (N, d+2) = (N, {X.shape[1] + 2}), "
                         f"got {theta.shape}")
    if (y is None) != (lam is None):
        raise ValueError("give both y and lam (certificate filters) or neither")
    if isinstance(pattern_tol, PatternTolerance):
        ptol = PatternTolerance(pattern_tol.angle_tol, pattern_tol.mass_tol)
    else:
        ptol = PatternTolerance() if pattern_tol is None else PatternTolerance(float(pattern_tol))
    if pattern_mass_tol is not None:
        ptol.mass_tol = float(pattern_mass_tol)
    N = theta.shape[0]
    V, r, mass = directions(theta)
    L = lifted(X)
    sign = np.where(theta[:, 0] >= 0, 1, -1)
    total = float(mass.sum())
    have_G = y is not None
    G = Gmax = None
    if have_G:
        f_train = np.maximum(theta[:, 1:] @ L.T, 0.0).T @ theta[:, 0] / N
        R = residuals(f_train, y)
        G = certificate(V, X, R, lam)
        Gmax = float(np.abs(G).max()) if N else 0.0

    def empty():
        thr = np.zeros(0) if thresholds is None else np.asarray(thresholds, dtype=float)
        return RayResult([], float("nan"), thr, np.zeros(len(thr), int),
                         (float("nan"), float("nan")), min_mass_frac, light_frac, max_spread,
                         absorb,
                         g_particle if have_G else None, g_ray if have_G else None, Gmax,
                         1.0 if total > 0 else 0.0, ptol, 0, [], [], -np.ones(N, dtype=int))

    if total <= 0:
        return empty()
    keep = mass > 0
    keep &= mass >= light_frac * weighted_median(mass[keep], mass[keep])
    if have_G and Gmax > 0:
        keep &= -sign * G >= g_particle * Gmax
    idx = np.nonzero(keep)[0]
    if idx.size == 0:
        return empty()
    Vk, mk, sk = V[idx], mass[idx], sign[idx]
    cell_all = cells(sign, V, X)
    M = idx.size
    ei, ej, ew, core_median = _linkage_tree(Vk, sk, mk, knn)
    if thresholds is None:
        lo_t = core_median if np.isfinite(core_median) and 0 < core_median < 0.5 else 1e-4
        thresholds = np.logspace(np.log10(lo_t), 0, 50)
    thresholds = np.asarray(thresholds, dtype=float)
    weighted_dirs = mk[:, None] * Vk

    def clusters(t):
        sel = ew <= t
        g = coo_matrix((np.ones(int(sel.sum())), (ei[sel], ej[sel])), shape=(M, M))
        lab = connected_components(g, directed=False)[1]
        K = int(lab.max()) + 1
        cm = np.bincount(lab, weights=mk, minlength=K)
        cs = np.stack([np.bincount(lab, weights=weighted_dirs[:, c], minlength=K)
                       for c in range(Vk.shape[1])], axis=1)
        nrm = np.linalg.norm(cs, axis=1)
        cdir = cs / np.where(nrm > 0, nrm, 1.0)[:, None]
        # RMS angle from the mean resultant length ρ: spread² ≈ 2(1 − ρ) for small spreads
        rho = nrm / np.where(cm > 0, cm, 1.0)
        compact = np.sqrt(np.maximum(2.0 * (1.0 - rho), 0.0)) <= max_spread
        csign = np.zeros(K, dtype=int)
        csign[lab] = sk
        heavy = (cm >= min_mass_frac * total) & compact
        if have_G:
            cg = certificate(cdir, X, R, lam)
            good = heavy & (-csign * cg >= g_ray * Gmax)
        else:
            cg = None
            good = heavy
        return lab, cm, cdir, csign, cg, heavy, good

    counts = np.array([int(clusters(t)[-1].sum()) for t in thresholds])
    lo, hi = _widest_plateau(counts)
    t_star = float(np.sqrt(thresholds[lo] * thresholds[hi]))
    lab, cm, cdir, csign, cg, heavy, good = clusters(t_star)
    cores, rejected = [], []
    for c in np.nonzero(heavy)[0]:
        if not good[c]:
            rejected.append({"direction": [float(x) for x in cdir[c]], "sign": int(csign[c]),
                             "mass_fraction": float(cm[c] / total),
                             "G": None if cg is None else float(cg[c])})
            continue
        core = idx[lab == c]
        ang = np.arccos(np.clip(V[core] @ cdir[c], -1.0, 1.0))
        spread = float(np.sqrt(np.sum(mass[core] * ang ** 2) / mass[core].sum()))
        cores.append((c, core, spread))
    # absorb the ray's outskirts: any particle of the ray's sign within `absorb` core spreads
    labels = -np.ones(N, dtype=int)
    if cores:
        dirs = np.array([cdir[c] for c, _, _ in cores])
        rad = np.array([max(absorb * sp, 1e-12) for _, _, sp in cores])
        ang = np.arccos(np.clip(V @ dirs.T, -1.0, 1.0))
        ang[(sign[:, None] != csign[[c for c, _, _ in cores]][None, :]) | (ang > rad)
            | (mass[:, None] <= 0)] = np.inf
        near = np.argmin(ang, axis=1)
        labels[np.isfinite(ang[np.arange(N), near])] = near[np.isfinite(ang[np.arange(N), near])]
        for k, (_, core, _) in enumerate(cores):
            labels[core] = k
    found = []
    for k, (c, _, _) in enumerate(cores):
        members = np.nonzero(labels == k)[0]
        mm = mass[members]
        vbar = mm @ V[members]
        vbar /= np.linalg.norm(vbar)
        ang = np.arccos(np.clip(V[members] @ vbar, -1.0, 1.0))
        pat, info = ray_pattern(vbar, V[members], mm, X, ptol)
        found.append(Ray(direction=vbar, sign=int(csign[c]),
                         weight=float(np.sum(theta[members, 0] * r[members]) / N),
                         mass_fraction=float(mm.sum() / total),
                         spread=float(np.sqrt(np.sum(mm * ang ** 2) / mm.sum())),
                         n_particles=int(members.size),
                         n_cells=int(np.unique(cell_all[members]).size),
                         G=None if not have_G else float(certificate(vbar[None], X, R, lam)[0]),
                         pattern=pat, pattern_margin=info["angle_margin"]))
    order = np.argsort([-q.mass_fraction for q in found], kind="stable")
    rays = [found[k] for k in order]
    relabel = -np.ones(len(found) + 1, dtype=int)
    relabel[order] = np.arange(len(found))
    labels = np.where(labels >= 0, relabel[labels], -1)
    halo = 1.0 - sum(q.mass_fraction for q in rays)
    conflicts = _cell_conflicts(labels, cell_all, mass, len(rays), ptol.mass_tol)
    return RayResult(rays=rays, threshold=t_star, thresholds=thresholds, counts=counts,
                     plateau=(float(thresholds[lo]), float(thresholds[hi])),
                     min_mass_frac=min_mass_frac, light_frac=light_frac, max_spread=max_spread,
                     absorb=absorb, g_particle=g_particle if have_G else None,
                     g_ray=g_ray if have_G else None, G_max=Gmax,
                     halo_mass_fraction=max(0.0, halo), pattern_tol=ptol,
                     n_cells=int(np.unique(cell_all[idx]).size), rejected=rejected,
                     cell_conflicts=conflicts,
                     labels=labels)
