"""Rays of a particle measure: clusters of neurons with one direction and one sign of ``a``
(THEORY §6).

A neuron contributes ``a σ(u·x̃) = a|u| σ(v·x̃)`` with direction ``v = u/|u| ∈ S^d`` and signed
mass ``a|u|``. The method (documented in ``docs/theory.md``):

1. split the particles by the sign of ``a``;
2. within each sign, link directions by single linkage on the chord distance ``|v − v'|``
   (a minimum spanning tree of the k-nearest-neighbour graph, so it scales to 10⁵ particles);
3. scan the linkage threshold on a log grid; at each threshold count the clusters whose mass
   ``Σ|a||u|`` is at least ``min_mass_frac`` of the total (the rest is the thermal halo); pick the
   middle of the widest plateau of the count;
4. per ray report the mass-weighted mean direction, sign, weight ``c_k = (1/N) Σ a_i |u_i|``,
   mass fraction, angular spread and ternary activation pattern on the training inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from scipy.spatial import cKDTree


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
    pattern : ndarray of shape (n,) int8  ``sign(v·x̃_j)`` with 0 where ``|v·x̃_j| ≤ pattern_tol``
    """

    direction: np.ndarray
    sign: int
    weight: float
    mass_fraction: float
    spread: float
    n_particles: int
    pattern: np.ndarray

    def as_dict(self) -> dict:
        return {"direction": [float(x) for x in self.direction], "sign": int(self.sign),
                "weight": float(self.weight), "mass_fraction": float(self.mass_fraction),
                "spread": float(self.spread), "n_particles": int(self.n_particles),
                "pattern": [int(t) for t in self.pattern]}


@dataclass
class RayResult:
    """Output of :func:`find_rays`.

    Attributes
    ----------
    rays : list of Ray                    sorted by decreasing mass
    threshold : float                     chosen chord-distance linkage threshold
    thresholds : ndarray                  the scanned thresholds
    counts : ndarray of int               ray count at each scanned threshold
    plateau : tuple (lo, hi)              threshold range of the chosen plateau
    min_mass_frac : float                 mass filter of the thermal halo
    halo_mass_fraction : float            mass in clusters below the filter
    pattern_tol : float
    labels : ndarray of shape (N,) int    ray index of each particle, −1 for the halo
    """

    rays: list
    threshold: float
    thresholds: np.ndarray
    counts: np.ndarray
    plateau: tuple
    min_mass_frac: float
    halo_mass_fraction: float
    pattern_tol: float
    labels: np.ndarray = field(repr=False)

    def thresholds_used(self) -> dict:
        return {"linkage_chord": float(self.threshold),
                "plateau": [float(self.plateau[0]), float(self.plateau[1])],
                "min_mass_frac": float(self.min_mass_frac),
                "pattern_tol": float(self.pattern_tol),
                "halo_mass_fraction": float(self.halo_mass_fraction)}


def directions(theta):
    """Directions ``v`` (N, d+1), norms ``|u|`` (N,) and masses ``|a||u|`` (N,) of particles
    ``theta`` (N, d+2)."""
    theta = np.asarray(theta, dtype=np.float64)
    u = theta[:, 1:]
    r = np.linalg.norm(u, axis=1)
    v = u / np.where(r > 0, r, 1.0)[:, None]
    return v, r, np.abs(theta[:, 0]) * r


def _mst_edges(V, k=12):
    """Edges (i, j, chord) of a minimum spanning forest of the k-NN graph of the rows of V."""
    m = V.shape[0]
    if m < 2:
        return np.zeros(0, int), np.zeros(0, int), np.zeros(0)
    kk = min(k + 1, m)
    dist, nb = cKDTree(V).query(V, k=kk)
    rows = np.repeat(np.arange(m), kk - 1)
    cols = nb[:, 1:].ravel()
    w = dist[:, 1:].ravel()
    w = np.maximum(w, 1e-15)      # zero weights would be dropped as "no edge" by scipy
    G = coo_matrix((w, (rows, cols)), shape=(m, m)).tocsr()
    T = minimum_spanning_tree(G).tocoo()
    return T.row, T.col, T.data


def _components(m, ei, ej, ew, t):
    sel = ew <= t
    G = coo_matrix((np.ones(sel.sum()), (ei[sel], ej[sel])), shape=(m, m))
    return connected_components(G, directed=False)[1]


def pattern_of(v, X, tol):
    """Ternary activation pattern ``sign(v·x̃_j)`` in {−1, 0, +1}^n (THEORY §7); entries with
    ``|v·x̃_j| ≤ tol·|x̃_j|`` are 0 (the kink passes through ``x_j``)."""
    Xl = np.hstack([np.asarray(X, float), np.ones((len(X), 1))])
    z = Xl @ v
    t = np.sign(z).astype(np.int8)
    t[np.abs(z) <= tol * np.linalg.norm(Xl, axis=1)] = 0
    return t


def _widest_plateau(counts):
    best = (0, 0)
    i = 0
    L = len(counts)
    while i < L:
        j = i
        while j + 1 < L and counts[j + 1] == counts[i]:
            j += 1
        if counts[i] > 0 and (j - i) > (best[1] - best[0]):
            best = (i, j)
        i = j + 1
    return best


def find_rays(theta, X, *, min_mass_frac: float = 1e-2, thresholds=None,
              pattern_tol: float = 1e-3, knn: int = 12) -> RayResult:
    """Cluster particles into rays (THEORY §6; method in the module docstring).

    Parameters
    ----------
    theta : ndarray of shape (N, d+2)
        Particles, rows ``(a, w, b)``.
    X : ndarray of shape (n, d)
        Training inputs (for the activation patterns).
    min_mass_frac : float
        Clusters with less than this fraction of the total mass ``Σ|a||u|`` are thermal halo.
    thresholds : array-like, optional
        Chord-distance linkage thresholds to scan (default 40 values, log-spaced 1e-3 … 0.5).
    pattern_tol : float
        Tolerance of the 0 entries of the ternary patterns.

    Returns
    -------
    RayResult
    """
    theta = np.asarray(theta, dtype=np.float64)
    N = theta.shape[0]
    V, r, mass = directions(theta)
    total = mass.sum()
    if thresholds is None:
        thresholds = np.logspace(-3, np.log10(0.5), 40)
    thresholds = np.asarray(thresholds, dtype=float)
    sign = np.where(theta[:, 0] >= 0, 1, -1)
    groups = []
    for s in (1, -1):
        idx = np.nonzero((sign == s) & (mass > 0))[0]
        groups.append((s, idx, _mst_edges(V[idx], knn) if idx.size else None))

    def labelling(t):
        out = []
        for s, idx, edges in groups:
            if idx.size == 0:
                continue
            lab = _components(idx.size, *edges, t)
            cm = np.bincount(lab, weights=mass[idx])
            out.append((s, idx, lab, cm))
        return out

    counts = np.zeros(len(thresholds), dtype=int)
    if total > 0:
        for k, t in enumerate(thresholds):
            counts[k] = sum(int(np.sum(cm >= min_mass_frac * total))
                            for _, _, _, cm in labelling(t))
    lo, hi = _widest_plateau(counts)
    t_star = float(np.sqrt(thresholds[lo] * thresholds[hi]))
    found = []          # (Ray, member indices)
    halo = 0.0
    if total > 0:
        for s, idx, lab, cm in labelling(t_star):
            for c in np.nonzero(cm >= min_mass_frac * total)[0]:
                members = idx[lab == c]
                mm = mass[members]
                vbar = (mm[:, None] * V[members]).sum(axis=0)
                vbar /= np.linalg.norm(vbar)
                ang = np.arccos(np.clip(V[members] @ vbar, -1.0, 1.0))
                found.append((Ray(direction=vbar, sign=s,
                                  weight=float(np.sum(theta[members, 0] * r[members]) / N),
                                  mass_fraction=float(mm.sum() / total),
                                  spread=float(np.sqrt(np.sum(mm * ang ** 2) / mm.sum())),
                                  n_particles=int(members.size),
                                  pattern=pattern_of(vbar, X, pattern_tol)), members))
            halo += float(cm[cm < min_mass_frac * total].sum() / total)
    found.sort(key=lambda rm: -rm[0].mass_fraction)
    labels = -np.ones(N, dtype=int)
    for k, (_, members) in enumerate(found):
        labels[members] = k
    rays = [ray for ray, _ in found]
    return RayResult(rays=rays, threshold=t_star, thresholds=thresholds, counts=counts,
                     plateau=(float(thresholds[lo]), float(thresholds[hi])),
                     min_mass_frac=min_mass_frac, halo_mass_fraction=halo,
                     pattern_tol=pattern_tol, labels=labels)
