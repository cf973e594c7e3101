"""Rays of a particle measure: clusters of neurons with one direction and one sign of ``a``
(THEORY §6; the criteria in THEORY §6.1).

A neuron contributes ``a σ(u·x̃) = a|u| σ(v·x̃)`` with direction ``v = u/|u| ∈ S^d`` and mass
``|a||u|``. Two rules group the kept particles (``rule``; docs/theory.md §6.1). With the
stage's residuals ``R``, ``tau`` and the weight scale (a stage's analysis), the **basins** of the
exact local maxima of ``|G_R|`` (:func:`analysis.certificate_maxima.basins`), each basin tested
at its maximum by the rule the exact Gibbs measure's rays get (:func:`_basin_rays`,
:mod:`analysis.gibbs_rays`): no threshold to choose, and the same partition as the reference's.
Otherwise the **linkage**, in order:

1. **Lightest particles.** Particles lighter than ``light_frac`` times the mass-weighted
   median particle mass are dropped (a robust scale), and, with ``tau``, those lighter than
   ``particle_halo`` times the free-particle baseline ``(d+1)τ/λ`` (thermal particles).
2. **Exact partition.** Each kept particle gets its cell: the sign of ``a`` and its binary
   activation pattern ``1[v·x̃_j > 0]`` on the training inputs (a region of the arrangement of
   THEORY §6). The cells of a ray give its ternary pattern and a threshold-free cross-check:
   two rays of one sign sharing a cell are reported in ``cell_conflicts``.
3. **Angular clustering with a plateau scan.** Kept particles of one sign are linked by single
   linkage on the mutual-reachability chord distance ``max(|v_i − v_j|, core_i, core_j)``
   (``core`` = distance to the k-th nearest neighbour, ``k ≤ max(3, n_plateau − 1)`` with
   ``n_plateau = max(3, ⌈√N/2⌉)``, so a sparse halo particle cannot chain two rays), over the
   minimum spanning tree of the k-nearest-neighbour graph (scales to 10⁵ particles and more;
   above :data:`analysis.ray_linkage.LINKAGE_MAX_PARTICLES` particles of one sign the graph is
   that of a mass-weighted sample, the others hanging from it, so that the neighbour queries
   take a bounded time: accuracy in :func:`analysis.ray_linkage._linkage_tree` and
   docs/theory.md §6.1).
   The linkage threshold is scanned on a log grid and the geometric middle of the widest
   plateau of the count of rays of at least ``n_plateau`` particles is used (the rays that many
   particles resolve fix the resolution; from the first threshold at which a cluster that is
   no ray holds particles of two rays of smaller thresholds, none counts). At each threshold
   a cluster is a ray when
   it holds at least ``min_mass_frac`` of the total mass ``Σ|a||u|``, is compact (RMS angle at
   most ``max_spread``), is not thermal (with ``tau``: mean particle mass at least
   ``halo_ratio · (d+1)τ/λ``, the free-particle second moment of THEORY §5), is not thermal
   mass (with ``tau`` and the labels' weight scale ``c_y``: its certificate gap ``1 − |G|`` is
   at most ``ε(τ) = κ (d+1)τ/(λ c_y)``, docs/theory.md §6.5; refused clusters are listed in
   ``thermal`` with their weight, direction and ``G``), passes the
   certificate at an absolute level (with ``G``: ``−sign(a) G(v̄) ≥ g_ray``, ``G`` from the
   residuals ``R`` given, normally the stage's time average) and holds at least
   ``min_particles`` particles (default 1 with ``tau`` and the time-averaged ``R`` at a ``τ``
   low enough that ``ε(τ) < 1 − g_ray``, where the radial-law tests decide: the exact law at
   low ``τ`` puts a ray's weight on the few particles nearest its direction, docs/theory.md
   §6.1; else ``n_plateau``). Heavy certified
   clusters refused only for their number of particles are listed in ``small``: the snapshot
   is then not resolved (``N`` too small for a verdict).
4. The ray's outskirts, which single linkage leaves out at the chosen threshold, join it: every
   particle of the ray's sign within ``absorb`` core spreads of its direction. Rays of one sign
   that are one ray are joined: fragments on one maximum of ``|G|`` (no valley of the
   certificate between them; without ``G``, one cell within a ray's width), and a ray cut by
   a data point's cell boundary (its kink on the data point; docs/theory.md §6.1, §6.6). When no cluster is a ray at any threshold, the plateau of the
   thermal concentrations fixes the threshold at which they are reported.
5. Per ray: mass-weighted mean direction, sign, weight ``c_k = (1/N) Σ_{i∈k} a_i |u_i|``, mass
   fraction, mass-weighted RMS angle to the direction (spread), ``G`` at the direction and the
   ternary pattern (:mod:`analysis.ternary`).

Every threshold is returned with the result (:meth:`RayResult.thresholds_used`).
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from analysis.certificate import certificate, residuals
from analysis.certificate_maxima import (
    basins,
    cell_maxima_of,
    maxima_of,
    residual_dip_se,
    resolved_maxima,
)
from analysis.ray_linkage import (
    _cell_conflicts,
    _linkage_tree,
    _merge_across_data_points,
    _split_by_basins,
    _widest_plateau,
    cells,
    directions,
    pattern_of,
    weighted_median,
)
from analysis.ray_thresholds import (
    THERMAL_GAP,
    _thermal_entry,
    halo_baseline,
    label_weight_scale,
    mass_gap,
    min_particles_default,
    thermal_gap_threshold,
)
from analysis.ternary import PatternTolerance, ray_pattern, realisable_pattern
from solvers.activation_regions import TooManyPatterns
from solvers.geometry import lifted

#: The public names; the building blocks live in :mod:`analysis.ray_linkage` and
#: :mod:`analysis.ray_thresholds` and are importable from here as before.
__all__ = ["THERMAL_GAP", "Ray", "RayResult", "cells", "directions", "find_rays",
           "halo_baseline", "label_weight_scale", "mass_gap", "min_particles_default",
           "pattern_of", "thermal_gap_threshold", "weighted_median"]


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
    min_mass_frac : float                 cluster mass filter (fraction of the total mass)
    light_frac : float                    particle mass filter (relative to the weighted median)
    max_spread : float                    compactness of a ray (radians)
    absorb : float                        outskirts radius in core spreads
    g_ray : float or None                 certificate level ``−sign(a) G ≥ g_ray`` (None: no G)
    G_max : float or None                 ``max |G|`` over the particles (diagnostic)
    G_source : str or None                "given residuals" or "snapshot residuals"
    halo_ratio : float or None            halo test: mean particle mass ≥ ratio × baseline
    halo_baseline : float or None         ``(d+1)τ/λ`` (None without ``tau``)
    particle_halo : float or None         particles lighter than this × baseline are halo
    min_particles : int                   smallest number of particles of a ray
    plateau_particles : int               smallest number of particles of a ray that fixes
                                          the linkage threshold (``max(3, ⌈√N/2⌉)`` per
                                          snapshot, times ``replicas``)
    replicas : int                        snapshots pooled in ``theta`` (counts of particles
                                          such as ``min_particles`` and ``Ray.n_particles``
                                          are of the pool)
    pattern_tol : PatternTolerance
    halo_mass_fraction : float            mass outside the rays
    n_cells : int                         occupied activation cells after the particle filter
    rejected : list of dict               clusters heavy enough but failing the certificate
    small : list of dict                  heavy, certified clusters with too few particles
    cell_conflicts : list of [k, l]       rays of one sign sharing a cell (cross-check)
    labels : ndarray of shape (N,) int    ray index of each particle, −1 for the halo
    thermal : list of dict                heavy, compact clusters that are thermal mass, not
                                          rays (:func:`thermal_gap_threshold`): ``direction``,
                                          ``sign``, ``weight``, ``mass_fraction``,
                                          ``n_particles``, ``spread``, ``G``, ``gap``,
                                          ``gap_threshold``, ``radial_weight``, ``reason``
    thermal_gap : float or None           the constant κ of the gap threshold
    weight_scale : float or None          ``c_y`` of the gap threshold (:func:`label_weight_scale`)
    gap_threshold : float or None         ``ε(τ) = κ (d+1)τ / (λ c_y)`` (None: no test)
    merged : list of dict                 clusters joined into one ray, fragments or across a
                                          data point's cell boundary, per ray: ``ray``,
                                          ``parts``, ``data_points``
                                          (:func:`_merge_across_data_points`)
    split : list of dict                  rays split at a valley of the certificate (their
                                          particles in the basins of two maxima of ``|G|``):
                                          ``ray``, ``parts``, ``directions``, ``masses``
                                          (:func:`analysis.ray_linkage._split_by_basins`)
    repaired_patterns : list of dict      rays whose pattern (zeros from straddling mass or
                                          the angle tolerance) no direction can have
                                          (:func:`analysis.ternary.pattern_realisable`):
                                          ``ray``, ``pattern``, ``replaced_by`` (the
                                          direction's own pattern, trimmed to realisable
                                          zeros); the counts of such a snapshot are suspect
    rule : str                            "basins" (the basins of the maxima of ``|G|``; no
                                          threshold, plateau or counts) or "linkage"
                                          (:func:`find_rays`'s ``rule``)
    joined : list of dict                 basins rule: local maxima of ``|G|`` that are no hill
                                          of their own at the residuals' precision, whose
                                          basin went to a higher neighbour's
                                          (:func:`analysis.certificate_maxima.resolved_maxima`):
                                          ``direction``, ``sign`` (of ``a``), ``joins``
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
    g_ray: float | None
    G_max: float | None
    G_source: str | None
    halo_ratio: float | None
    halo_baseline: float | None
    particle_halo: float | None
    min_particles: int
    pattern_tol: PatternTolerance
    halo_mass_fraction: float
    n_cells: int
    rejected: list
    small: list
    cell_conflicts: list
    labels: np.ndarray = field(repr=False)
    thermal: list = field(default_factory=list)
    thermal_gap: float | None = None
    weight_scale: float | None = None
    gap_threshold: float | None = None
    merged: list = field(default_factory=list)
    plateau_particles: int = 0
    replicas: int = 1
    split: list = field(default_factory=list)
    repaired_patterns: list = field(default_factory=list)
    rule: str = "linkage"
    joined: list = field(default_factory=list)

    @property
    def resolved(self) -> bool:
        """False when a heavy, certified cluster was refused only for holding fewer than
        ``min_particles`` particles: the width ``N`` is too small for a verdict on ``J``."""
        return not self.small

    def thresholds_used(self) -> dict:
        basins = self.rule == "basins"          # no linkage threshold chosen: null
        return {"rule": self.rule,
                "linkage_chord": None if basins else float(self.threshold),
                "plateau": [None, None] if basins else [float(self.plateau[0]),
                                                        float(self.plateau[1])],
                "min_mass_frac": float(self.min_mass_frac),
                "light_frac": float(self.light_frac),
                "max_spread": float(self.max_spread),
                "absorb": float(self.absorb),
                "g_ray": self.g_ray,
                "G_max": None if self.G_max is None else float(self.G_max),
                "G_source": self.G_source,
                "halo_ratio": self.halo_ratio,
                "halo_baseline": self.halo_baseline,
                "particle_halo": self.particle_halo,
                "min_particles": int(self.min_particles),
                "plateau_particles": int(self.plateau_particles),
                "replicas": int(self.replicas),
                "pattern_angle_tol": float(self.pattern_tol.angle_tol),
                "pattern_mass_tol": float(self.pattern_tol.mass_tol),
                "halo_mass_fraction": float(self.halo_mass_fraction),
                "n_cells": int(self.n_cells),
                "resolved": bool(self.resolved),
                "thermal_gap": self.thermal_gap,
                "weight_scale": self.weight_scale,
                "gap_threshold": self.gap_threshold,
                "thermal_mass_fraction": float(sum(t["mass_fraction"] for t in self.thermal))}


def _first_join(scans, thresholds) -> float:
    """The smallest threshold at which a cluster that is not a ray holds particles of two rays
    of smaller thresholds (``inf`` if none).

    ``scans``: per threshold, the cluster of each particle (M,) and which clusters are rays
    (K,). Single linkage only merges clusters as the threshold grows; a particle keeps the
    last ray it was in."""
    order = np.argsort(thresholds)
    last = -np.ones(len(scans[0][0]) if scans else 0, dtype=np.int64)
    offset = 0
    for i in order:
        lab, ray = scans[i]
        had = last >= 0
        if np.any(had):
            # distinct (cluster, earlier ray) pairs, as one int64 key each (a 1-D sort)
            b = last[had]
            base = int(b.max()) + 1
            key = np.unique(lab[had].astype(np.int64) * base + b)
            rays_held = np.bincount(key // base, minlength=ray.size)
            if np.any(~ray & (rays_held >= 2)):
                return float(thresholds[i])
        now = ray[lab]
        last[now] = lab[now] + offset
        offset += ray.size
    return float("inf")


#: The last few partitions of :func:`_basins_of`, by the hash of their input: the threshold
#: scan of :func:`analysis.ray_checks.sensitivity` asks for the same one about twenty times.
_BASINS_SEEN: dict = {}
_BASINS_KEPT = 4


def _basins_of(V, X, R, lam, maxima) -> np.ndarray:
    """:func:`analysis.certificate_maxima.basins` of the directions ``V`` (m, d+1), remembered
    for its last :data:`_BASINS_KEPT` inputs (a pure function of them)."""
    h = hashlib.blake2b(digest_size=16)
    for a in (V, X, R, [lam]) + tuple(np.r_[v, sg] for v, sg, _ in maxima):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    key = h.hexdigest()
    if key not in _BASINS_SEEN:
        if len(_BASINS_SEEN) >= _BASINS_KEPT:
            del _BASINS_SEEN[next(iter(_BASINS_SEEN))]
        _BASINS_SEEN[key] = basins(V, certificate(V, X, R, lam), maxima, X, R, lam)
    return _BASINS_SEEN[key].copy()


def _basin_rays(idx, V, mass, theta, X, R, lam, maxima, parent, total, min_mass_frac, g_ray,
                baseline, halo_ratio, eps, n_min, n_plateau):
    """The rays of ``rule = "basins"`` (:func:`find_rays`): the kept particles ``idx`` go to
    the basins of the local maxima of ``|G_R|`` (:func:`analysis.certificate_maxima.basins`),
    and a basin is a ray when its particles pass the rule the exact Gibbs measure's basins get
    (:func:`analysis.gibbs_rays.gibbs_rays`): mass floor, certificate ``|G(v*)| ≥ g_ray`` at
    the maximum ``v*``, mean particle mass at least ``halo_ratio`` baselines, gap (the larger of
    ``1 − |G(v*)|`` and the gap of the mean mass) at most ``ε(τ)``, and ``n_min`` particles.
    A maximum that is no hill of its own (``parent``, :func:`analysis.certificate_maxima.
    resolved_maxima`) lends its basin to the one it joins.

    Returns ``(labels, signs, rejected, small, thermal)`` as the linkage path builds them."""
    N = theta.shape[0]
    lab = _basins_of(V[idx], X, R, lam, maxima)
    lab[lab >= 0] = parent[lab[lab >= 0]]
    labels = -np.ones(N, dtype=int)
    signs, rejected, small, hot = [], [], [], []
    for k, (v, sg, _) in enumerate(maxima):
        if parent[k] != k:
            continue
        mem = idx[lab == k]
        cm = float(mass[mem].sum())
        if mem.size == 0 or cm < min_mass_frac * total:
            continue
        g = float(certificate(v[None], X, R, lam)[0])
        sgn = -int(sg)
        info = {"direction": [float(x) for x in v], "sign": sgn,
                "mass_fraction": cm / total, "n_particles": int(mem.size), "G": g}
        mean_mass = cm / mem.size
        heavy = baseline is None or mean_mass >= halo_ratio * baseline
        gap = 1.0 - abs(g)
        if baseline is not None:
            gap = max(gap, float(mass_gap(mean_mass, baseline)))
        if abs(g) < g_ray:
            rejected.append(info)
        elif not heavy or (eps is not None and gap > eps):
            if mem.size >= n_plateau:  # a lone heavy thermal particle is no concentration
                hot.append(_thermal_entry(k, info, mem, theta, V, mass, N, gap, eps, baseline,
                                          heavy, v))
        elif mem.size < n_min:
            small.append(info)
        else:
            labels[mem] = len(signs)
            signs.append(sgn)
    return labels, signs, rejected, small, hot


def find_rays(theta: ArrayLike, X: ArrayLike, *, y: ArrayLike | None = None,
              lam: float | None = None, tau: float | None = None, R: ArrayLike | None = None,
              min_mass_frac: float = 1e-2, halo_ratio: float = 3.0, particle_halo: float = 1.0,
              g_ray: float = 0.5, min_particles: int | None = None,
              light_frac: float = 1e-2, max_spread: float = 0.3, absorb: float = 3.0,
              thresholds: ArrayLike | None = None, pattern_tol: PatternTolerance | None = None,
              pattern_mass_tol: float | None = None, thermal_gap: float = THERMAL_GAP,
              weight_scale: float | None = None, merge: bool = True,
              knn: int = 12, replicas: int = 1, rule: str = "auto",
              R_series: list | None = None, progress=None) -> RayResult:
    """Cluster particles into rays (THEORY §6; method in the module docstring).

    Parameters
    ----------
    theta : ndarray of shape (N, d+2)
        Particles, rows ``(a, w, b)``.
    X : ndarray of shape (n, d)
        Training inputs.
    y : ndarray of shape (n,), optional
        Training targets; with ``lam`` the certificate ``G`` is computed (from ``R`` when
        given, else from this snapshot's residuals).
    lam : float, optional
        Weight decay ``λ`` of the run.
    tau : float, optional
        Temperature of the snapshot; with ``lam`` enables the halo test against the
        free-particle baseline ``(d+1)τ/λ``.
    R : ndarray of shape (n,), optional
        Scaled residuals ``(f − y)/n`` to compute ``G`` from, normally time-averaged over the
        stage (one snapshot's residuals are too noisy at small ``λ``: ``G`` divides them by
        ``λ``). Needs ``lam``.
    min_mass_frac : float, default 0.01
        A ray holds at least this fraction of the total mass ``Σ|a||u|``.
    halo_ratio : float, default 3
        With ``tau`` and ``lam``: a ray's mean particle mass is at least ``halo_ratio`` times
        the free-particle baseline ``(d+1)τ/λ`` (a free particle's mean mass is about half a
        baseline, ``E|a| E|u|``; a ray's, ``|c_k|/(particle fraction)``, independent of
        ``τ``).
    particle_halo : float, default 1
        With ``tau`` and ``lam``: particles lighter than ``particle_halo`` times the baseline
        ``(d+1)τ/λ`` are halo before the linkage (a particle holding less than a free particle
        is thermal; removing them keeps the halo from chaining rays of one sign that are wide
        because ``G`` is flat across their cells).
    g_ray : float, default 0.5
        With ``G`` available: a ray's mean direction has ``−sign(a) G(v) ≥ g_ray`` (absolute
        level; the optimum has exactly 1 on every ray, THEORY §4). ``-inf`` switches it off.
    min_particles : int, optional
        Smallest number of particles of a ray (default 1 when ``tau``, ``R`` and the weight
        scale are given and the certificate-gap threshold ``ε(τ)`` is below ``1 − g_ray``, so
        that the certificate-gap and radial tests decide; otherwise
        :func:`min_particles_default`). The linkage threshold is fixed by the rays of at
        least :func:`min_particles_default` particles either way.
    light_frac : float, default 0.01
        Particles lighter than this times the mass-weighted median particle mass are halo.
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
        below that spacing a threshold resolves activation cells, not directions). One value
        fixes the threshold.
    pattern_tol : float or PatternTolerance, optional
        Angular tolerance (radians) of the 0 entries of the patterns, or both tolerances
        (default :class:`analysis.ternary.PatternTolerance()`).
    pattern_mass_tol : float, optional
        Straddling-mass tolerance of the 0 entries (overrides ``pattern_tol.mass_tol``).
    thermal_gap : float, default :data:`THERMAL_GAP` (1)
        With ``tau`` and ``lam``: the constant ``κ`` of the certificate-gap test
        (docs/theory.md §6.5). A cluster is a ray only when its gap ``1 − |G|`` (the larger of
        the gap of ``−sign(a) G(v̄)`` when ``G`` is available and the gap implied by its mean
        particle mass, :func:`mass_gap`: both must be small; the gap of ``G`` only with ``R``
        given, since one snapshot's ``G`` is too noisy) is at most ``ε(τ) = κ (d+1)τ/(λ c_y)``
        (:func:`thermal_gap_threshold`); otherwise it is listed in ``thermal`` (weight,
        direction, ``G``), not counted. 0 switches the test off.
    weight_scale : float, optional
        ``c_y`` of that threshold (default :func:`label_weight_scale` of ``X`` and ``y``; no
        test without either).
    merge : bool, default True
        Join clusters of one sign that are one ray: fragments, and a ray split by a data
        point's cell boundary (:func:`_merge_across_data_points`; docs/theory.md §6.1,
        §6.6).
    knn : int, default 12
        Neighbours per particle in the linkage graph (at most ``max(3, n − 1)``, ``n`` =
        :func:`min_particles_default`, so that a ray of ``n`` particles has small core
        distances).
    replicas : int, default 1
        ``theta`` pools this many snapshots of ``N / replicas`` particles each (the frames of
        a stage's stationary part and its chains, docs/theory.md §6.1): weights and mass
        fractions are then averages over the snapshots, and the particle counts of the rules
        are per snapshot: ``min_particles`` (and the plateau's) counts particles of one
        snapshot, so a pooled cluster needs ``replicas`` times as many, and a ray of one
        particle (``min_particles = 1``) must be present in half the snapshots
        (``⌈replicas/2⌉`` pooled particles).
    rule : {"auto", "basins", "linkage"}, default "auto"
        How the kept particles are grouped. ``"basins"``: by the basins of the exact local
        maxima of ``|G|`` (from ``R``), each basin one candidate ray tested at its maximum by
        the rule the exact Gibbs measure's rays get (:func:`_basin_rays`, docs/theory.md
        §6.1, §6.7); no linkage, no thresholds to scan. ``"linkage"``: the plateau of the
        single-linkage scan (module docstring). ``"auto"``: basins when ``R``, ``tau`` and
        the weight scale are given (a stage's analysis, with its time-averaged residuals) and
        the data's activation cells can be enumerated, else linkage.
    R_series : list of ndarray of shape (M_c, n), optional
        The residual observations ``R`` is the time average of, one array per independent
        chain (``R`` the mean of their means). With the basins rule, a local maximum of
        ``|G|`` whose dip to its nearest higher neighbour is within
        :data:`analysis.certificate_maxima.DIP_Z` standard errors of that dip joins the
        neighbour's basin (:func:`analysis.certificate_maxima.resolved_maxima`; listed in
        ``joined``): the residuals cannot tell it from the neighbour's shoulder. Without it
        only a maximum with no dip at all joins.
    progress : callable ``(done, total)``, optional
        Told after each chunk of the k-nearest-neighbour queries of the linkage (above
        :data:`analysis.ray_linkage.LINKAGE_MAX_PARTICLES` kept particles of one sign they run
        on a mass-weighted sample of that many; docs/theory.md §6.1).

    Returns
    -------
    RayResult

    Raises
    ------
    ValueError
        Shapes that do not match, non-finite ``theta``, ``R`` or ``R_series``, ``R_series``
        without ``R``, ``replicas < 1``, ``R`` or
        ``y`` without ``lam``, ``tau < 0``, an unknown
        ``rule``, ``rule = "basins"`` without ``R`` or ``y``.
    solvers.activation_regions.TooManyPatterns
        ``rule = "basins"`` on data with more activation cells than the enumeration takes.
    """
    theta = np.asarray(theta, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64).reshape(np.shape(X)[0], -1)
    if theta.ndim != 2 or theta.shape[1] != X.shape[1] + 2:
        raise ValueError(f"theta must have shape (N, d+2) = (N, {X.shape[1] + 2}), "
                         f"got {theta.shape}")
    if rule not in ("auto", "basins", "linkage"):
        raise ValueError(f"rule must be 'auto', 'basins' or 'linkage', got {rule!r}")
    if rule == "basins" and R is None and y is None:
        raise ValueError("rule 'basins' needs the certificate: R or y, and lam")
    if (y is not None or R is not None or tau is not None) and lam is None:
        raise ValueError("y, R and tau need lam (the weight decay of the run)")
    if tau is not None and not tau >= 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    if isinstance(pattern_tol, PatternTolerance):
        ptol = PatternTolerance(pattern_tol.angle_tol, pattern_tol.mass_tol)
    else:
        ptol = PatternTolerance() if pattern_tol is None else PatternTolerance(float(pattern_tol))
    if pattern_mass_tol is not None:
        ptol.mass_tol = float(pattern_mass_tol)
    N = theta.shape[0]
    if not np.all(np.isfinite(theta)):
        bad = np.nonzero(~np.all(np.isfinite(theta), axis=1))[0]
        raise ValueError(f"theta has non-finite entries in {bad.size} row(s), first row "
                         f"{int(bad[0])}: a particle must be finite to have a direction and mass")
    if R is not None and not np.all(np.isfinite(np.asarray(R, dtype=float))):
        raise ValueError("R (the residuals) has non-finite entries")
    if R_series is not None:
        if R is None:
            raise ValueError("R_series needs R (the time average of its rows)")
        R_series = [np.asarray(S, dtype=float) for S in R_series]
        if not R_series:
            raise ValueError("R_series is empty: one array of residual observations per chain "
                             "expected (or None)")
        n_pts = np.shape(X)[0]
        for c, S in enumerate(R_series):
            if S.ndim != 2 or S.shape[1] != n_pts or S.shape[0] == 0:
                raise ValueError(f"R_series[{c}] has shape {S.shape}: one row of {n_pts} "
                                 "residuals per observation, at least one row, expected")
            if not np.all(np.isfinite(S)):
                raise ValueError(f"R_series[{c}] (residual observations) has non-finite entries")
        Rm = np.mean([S.mean(axis=0) for S in R_series], axis=0)
        Rv = np.asarray(R, dtype=float).ravel()
        if Rm.shape == Rv.shape and not np.allclose(Rm, Rv, rtol=1e-9, atol=1e-12):
            raise ValueError(f"R is not the mean of R_series' chain means (they differ by up to "
                             f"{np.max(np.abs(Rm - Rv)):.3g}): the series must be the "
                             "observations R averages")
    if int(replicas) < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    replicas = int(replicas)
    if N % replicas:
        raise ValueError(f"theta has {N} rows, not a multiple of replicas = {replicas}")
    n_plateau = min_particles_default(N // replicas) * replicas
    V, r, mass = directions(theta)
    L = lifted(X)
    sign = np.where(theta[:, 0] >= 0, 1, -1)
    total = float(mass.sum())
    have_G = R is not None or y is not None
    G_source = None
    if R is not None:
        R = np.asarray(R, dtype=float).ravel()
        if R.shape[0] != X.shape[0]:
            raise ValueError(f"R has {R.shape[0]} entries, the data {X.shape[0]} points")
        G_source = "given residuals"
    elif y is not None:
        y = np.asarray(y, dtype=float).ravel()
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y has {y.shape[0]} entries, the data {X.shape[0]} points")
        f_train = np.maximum(theta[:, 1:] @ L.T, 0.0).T @ theta[:, 0] / max(N, 1)
        R = residuals(f_train, y)
        G_source = "snapshot residuals"
    Gmax = None
    if have_G:
        Gmax = float(np.abs(certificate(V, X, R, lam)).max()) if N else 0.0
    baseline = None if tau is None else halo_baseline(X.shape[1], tau, lam)
    if weight_scale is None and y is not None:
        weight_scale = label_weight_scale(X, y)
    eps = None
    if baseline is not None and weight_scale is not None and thermal_gap > 0:
        eps = thermal_gap_threshold(X.shape[1], tau, lam, weight_scale, thermal_gap)
    radial_tests = eps is not None and G_source == "given residuals"
    if rule == "basins" and eps is None and thermal_gap > 0:
        missing = [name for name, v in (("tau", tau), ("weight_scale (or y)", weight_scale))
                   if v is None]
        warnings.warn(f"find_rays(rule='basins') without {' and '.join(missing)}: the "
                      "certificate-gap test is off"
                      + ("" if tau is not None else " and so is the heaviness test")
                      + ", so every basin above the mass floor with |G| >= g_ray is a ray; "
                      "pass tau and weight_scale=label_weight_scale(X, y) for the rule the "
                      "exact Gibbs measure's rays get", UserWarning, stacklevel=2)
    if min_particles is not None:
        n_min = max(1, int(min_particles))
        n_min = n_min * replicas if n_min > 1 else -(-replicas // 2)
    else:
        # the gap test decides where it is stricter than the certificate level: at low τ
        n_min = -(-replicas // 2) if radial_tests and eps < 1.0 - g_ray else n_plateau
    common = {"min_mass_frac": min_mass_frac, "light_frac": light_frac,
              "max_spread": max_spread, "absorb": absorb,
              "g_ray": g_ray if have_G else None, "G_max": Gmax, "G_source": G_source,
              "halo_ratio": halo_ratio if baseline is not None else None,
              "halo_baseline": baseline,
              "particle_halo": particle_halo if baseline is not None else None,
              "min_particles": n_min, "plateau_particles": n_plateau, "pattern_tol": ptol,
              "thermal_gap": float(thermal_gap) if eps is not None else None,
              "weight_scale": None if weight_scale is None else float(weight_scale),
              "gap_threshold": eps, "replicas": replicas}

    def empty():
        thr = np.zeros(0) if thresholds is None else np.asarray(thresholds, dtype=float)
        common["rule"] = ("basins" if rule == "basins" or (rule == "auto" and radial_tests)
                          else "linkage")
        return RayResult(rays=[], threshold=float("nan"), thresholds=thr,
                         counts=np.zeros(len(thr), int), plateau=(float("nan"), float("nan")),
                         halo_mass_fraction=1.0 if total > 0 else 0.0, n_cells=0, rejected=[],
                         small=[], cell_conflicts=[], labels=-np.ones(N, dtype=int), **common)

    if total <= 0:
        return empty()
    keep = mass > 0
    keep &= mass >= light_frac * weighted_median(mass[keep], mass[keep])
    if baseline is not None:
        keep &= mass >= particle_halo * baseline
    idx = np.nonzero(keep)[0]
    if idx.size == 0:
        return empty()
    Vk, mk, sk = V[idx], mass[idx], sign[idx]
    cell_all = cells(sign, V, X)
    use_basins = rule == "basins" or (rule == "auto" and radial_tests)
    maxima = None
    if use_basins:
        try:
            maxima = maxima_of(cell_maxima_of(R, X, lam))
        except TooManyPatterns:
            if rule == "basins":
                raise
            use_basins = False
    if use_basins:
        # the basins keep every particle the Gibbs measure's basins do: heavier than the halo
        # cut (light_frac guards the linkage against chaining: there the rays' outskirts are
        # absorbed back; the exact law's few heavy particles put the weighted median far above
        # a ray's other particles)
        kept = (mass > 0) & (mass >= particle_halo * baseline) if baseline is not None else keep
        parent = resolved_maxima(maxima, X, R, lam, None if R_series is None
                                 else residual_dip_se(R_series, lam))
        joined = [{"direction": [float(x) for x in maxima[k][0]], "sign": -int(maxima[k][1]),
                   "joins": [float(x) for x in maxima[int(j)][0]]}
                  for k, j in enumerate(parent) if j != k]
        labels, ray_signs, rejected, small, hot = _basin_rays(
            np.nonzero(kept)[0], V, mass, theta, X, R, lam, maxima, parent, total,
            min_mass_frac, g_ray, baseline, halo_ratio, eps, n_min, n_plateau)
        merged, split = [], []
        t_star, plateau = float("nan"), (float("nan"), float("nan"))
        thresholds, counts = np.zeros(0), np.zeros(0, dtype=int)
    else:
        joined = []
        M = idx.size
        k_nn = max(1, min(int(knn), max(3, n_plateau // replicas - 1)))
        ei, ej, ew, core_median = _linkage_tree(Vk, sk, mk, k_nn, progress, replicas=replicas)
        if thresholds is None:
            lo_t = core_median if np.isfinite(core_median) and 0 < core_median < 0.5 else 1e-4
            thresholds = np.logspace(np.log10(lo_t), 0, 50)
        thresholds = np.atleast_1d(np.asarray(thresholds, dtype=float))
        weighted_dirs = mk[:, None] * Vk

        def clusters(t):
            sel = ew <= t
            g = coo_matrix((np.ones(int(sel.sum())), (ei[sel], ej[sel])), shape=(M, M))
            lab = connected_components(g, directed=False)[1]
            K = int(lab.max()) + 1
            cm = np.bincount(lab, weights=mk, minlength=K)
            cn = np.bincount(lab, minlength=K)
            cs = np.stack([np.bincount(lab, weights=weighted_dirs[:, c], minlength=K)
                           for c in range(Vk.shape[1])], axis=1)
            nrm = np.linalg.norm(cs, axis=1)
            cdir = cs / np.where(nrm > 0, nrm, 1.0)[:, None]
            # RMS angle from the mean resultant length ρ: spread² ≈ 2(1 − ρ) for small spreads
            rho = nrm / np.where(cm > 0, cm, 1.0)
            compact = np.sqrt(np.maximum(2.0 * (1.0 - rho), 0.0)) <= max_spread
            csign = np.zeros(K, dtype=int)
            csign[lab] = sk
            bulky = (cm >= min_mass_frac * total) & compact
            heavy = bulky.copy()
            if baseline is not None:
                heavy &= cm >= halo_ratio * baseline * cn
            cg = None
            certified = heavy
            if have_G:                         # G only where needed: few clusters are heavy
                cg = np.full(K, np.nan)
                cg[bulky] = certificate(cdir[bulky], X, R, lam)
                certified = heavy.copy()
                certified[heavy] = -csign[heavy] * cg[heavy] >= g_ray
            gap = np.full(K, np.nan)
            thermal = bulky & ~heavy                        # below the free-particle ratio
            if eps is not None:
                gap[bulky] = mass_gap(cm[bulky] / np.maximum(cn[bulky], 1), baseline)
                if G_source == "given residuals":   # one snapshot's G is too noisy (§6.1)
                    gap[bulky] = np.maximum(gap[bulky], 1.0 + csign[bulky] * cg[bulky])
                thermal |= certified & (gap > eps)
            good = certified & ~thermal & (cn >= n_min)
            return lab, cm, cn, cdir, csign, cg, heavy, certified, good, thermal, gap

        scans = [clusters(t) for t in thresholds]

        def ray_counts(least):
            # from the first threshold that joins two rays into a cluster that is no ray (thermal
            # mass, or too wide) no threshold resolves them: those counts are no plateau's
            counts = np.array([int((c[8] & (c[2] >= least)).sum()) for c in scans])
            t_join = _first_join([(c[0], c[8] & (c[2] >= least)) for c in scans], thresholds)
            counts[thresholds >= t_join] = 0
            return counts
        # the threshold is fixed by the rays that many particles resolve (at least n_plateau);
        # lighter-populated rays (the exact law puts a ray's weight on few particles, docs/theory.md
        # §6.1) are counted at it
        counts = ray_counts(n_plateau)
        if counts.max(initial=0) == 0 and n_min < n_plateau:
            counts = ray_counts(n_min)
        if counts.max(initial=0) == 0:
            # no ray at any threshold: the plateau of the concentrations (thermal mass with at
            # least n_plateau particles) fixes the resolution at which they are reported
            lo, hi = _widest_plateau(np.array([int((c[9] & (c[2] >= n_plateau)).sum())
                                               for c in scans]))
        else:
            lo, hi = _widest_plateau(counts)
        t_star = float(np.sqrt(thresholds[lo] * thresholds[hi]))
        lab, cm, cn, cdir, csign, cg, heavy, certified, good, thermal, gap = clusters(t_star)
        cores, rejected, small, hot = [], [], [], []
        for c in np.nonzero(heavy | thermal)[0]:
            info = {"direction": [float(x) for x in cdir[c]], "sign": int(csign[c]),
                    "mass_fraction": float(cm[c] / total), "n_particles": int(cn[c]),
                    "G": None if cg is None else float(cg[c])}
            if thermal[c]:
                if cn[c] >= n_plateau:     # a lone heavy thermal particle is no concentration
                    hot.append(_thermal_entry(c, info, idx[lab == c], theta, V, mass, N, gap[c],
                                              eps, baseline, heavy[c], cdir[c]))
                continue
            if not certified[c]:
                rejected.append(info)
                continue
            if not good[c]:
                small.append((c, info))
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
        # a small cluster whose particles joined a ray as its outskirts is a fragment of that ray,
        # not an unresolved one
        small = [info for c, info in small if not np.any(labels[idx[lab == c]] >= 0)]
        ray_signs = [int(csign[c]) for c, _, _ in cores]
        merged = []
        if merge and len(cores) > 1:
            gap_of = None
            if radial_tests:
                def gap_of(v, s):
                    return 1.0 + s * certificate(np.atleast_2d(v), X, R, lam)
            labels, ray_signs, merged = _merge_across_data_points(labels, ray_signs, V, mass, X,
                                                                  ptol, max_spread, absorb, gap_of,
                                                                  cell_all)
        split = []
        if merge and ray_signs and G_source == "given residuals":
            labels, ray_signs, split = _split_by_basins(labels, ray_signs, V, mass, X, R, lam,
                                                        min_mass_frac * total)
        plateau = (float(thresholds[lo]), float(thresholds[hi]))
    found, repaired = [], []
    for k, sgn in enumerate(ray_signs):
        members = np.nonzero(labels == k)[0]
        mm = mass[members]
        # the mean direction, under either rule: a flat top of |G| at finite τ makes the
        # maximiser ill-conditioned in the residuals (docs/theory.md §6.1)
        vbar = mm @ V[members]
        vbar /= np.linalg.norm(vbar)
        ang = np.arccos(np.clip(V[members] @ vbar, -1.0, 1.0))
        pat, info = ray_pattern(vbar, V[members], mm, X, ptol)
        own, was_repaired = realisable_pattern(pat, vbar, X, ptol.angle_tol)
        if was_repaired:
            repaired.append({"ray": k, "pattern": [int(x) for x in pat],
                             "replaced_by": [int(x) for x in own]})
            pat = own
        found.append(Ray(direction=vbar, sign=sgn,
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
    for m in merged:
        m["ray"] = int(relabel[m["ray"]])
    for m in split:
        m["parts"] = [int(relabel[p]) for p in m["parts"]]
        m["ray"] = m["parts"][0]
    for m in repaired:
        m["ray"] = int(relabel[m["ray"]])
    halo = 1.0 - sum(q.mass_fraction for q in rays)
    conflicts = _cell_conflicts(labels, cell_all, mass, len(rays), ptol.mass_tol)
    return RayResult(rays=rays, threshold=t_star, thresholds=thresholds, counts=counts,
                     plateau=plateau,
                     halo_mass_fraction=max(0.0, halo),
                     n_cells=int(np.unique(cell_all[idx]).size), rejected=rejected,
                     small=small, cell_conflicts=conflicts, labels=labels, thermal=hot,
                     merged=merged, split=split, repaired_patterns=repaired, joined=joined,
                     **{**common, "rule": "basins" if use_basins else "linkage"})
