"""Rays of the exact mean-field Gibbs measure at a finite temperature (docs/theory.md §6.7).

At temperature ``τ`` the stationary measure of the mean-field dynamics has, for its fixed
residuals ``R``, the direction density ``π_R(v) ∝ (1 − G(v)²)^{−p}``, ``p = (d+1)/2``, and given
``v`` the radial law ``E[a r | v] = −G(v) (d+1)τ / (λ (1 − G(v)²))`` (THEORY §5,
:mod:`solvers.gibbs`). The signed mass density over directions ``π_R(v) E[a r | v]`` is an
increasing function of ``−G`` where ``G < 0`` (rays with ``a > 0``) and of ``G`` where ``G > 0``
(rays with ``a < 0``); so the concentrations of the measure are at the local maxima of ``|G|``,
the sign of ``a`` opposite to that of ``G``. This module finds them exactly and weighs them:

1. **Local maxima.** Exactly, cell by cell (:mod:`analysis.certificate_maxima`).
2. **Basins.** The directions of an integration rule on ``S^d`` (the Gibbs solver's adaptive
   quadrature for ``d ≤ 2``, its importance-sampling proposal centred on the peaks of ``|G|``
   for ``d ≥ 3``) ascend ``|G|`` by discrete steps to their highest near neighbour and join
   the exact local maximum nearest to where they stop
   (:func:`analysis.certificate_maxima.basins`). A basin's weight is
   ``c_k = ∫_basin π_R(v) E[a r 1(|a| r ≥ c) | v] dv`` and its mass ``∫_basin π_R(v) E[|a| r
   1(|a| r ≥ c) | v] dv``, the weight and mass of its particles heavier than the particles'
   halo cut ``c`` (truncated normal moments of ``a`` given ``r``, integrated over the radial
   law by Gauss–Laguerre quadrature, :func:`_radial_moments`), the analogues of a particle ray's
   ``(1/N) Σ a_i |u_i|`` and ``Σ |a_i||u_i|/N`` over its kept particles.
3. **The ray rule the particles get** (:func:`analysis.rays.find_rays`, docs/theory.md §6.5): a
   local maximum is a ray when its basin holds at least ``min_mass_frac`` of the mass, it passes
   the certificate (``|G(v*)| ≥ g_ray``), its mean particle mass at ``v*`` is at least
   ``halo_ratio`` times the free-particle baseline ``(d+1)τ/λ``, and its certificate gap
   ``1 − |G(v*)|`` is at most ``ε(τ) = κ (d+1)τ/(λ c_y)``. The others are listed with the reason.
   The particles' compactness limit is not part of it (a basin holds one maximum by
   construction); a basin's breadth is its ``spread``.

Each ray's ``pattern`` is its maximiser's (a zero entry where ``v*`` lies on the data point's
hyperplane to :data:`analysis.certificate_maxima.ZERO_TOL`). Its kink hyperplanes, ``K``, are
those of the kept mass's mean direction and straddling-mass pattern with the particles' zero
tolerance (:func:`analysis.kinks.ray_kinks`): at finite ``τ`` the top of ``|G|`` is flat (plane
D12 at ``τ = 10⁻³``: ``G`` differs by ``2·10⁻⁵`` between a data point's hyperplane and the
maximiser 0.038 away), so the maximiser, pinned to a data point or not, moves with the
residuals' last digits, while the mean is well determined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import gammaln, ndtr, roots_genlaguerre

from analysis.certificate import certificate
from analysis.certificate_maxima import (
    ZERO_TOL,
    basins,
    cell_maxima_of,
    maxima_of,
    resolved_maxima,
)
from analysis.kinks import ray_kinks
from analysis.ray_thresholds import THERMAL_GAP, halo_baseline, mass_gap, thermal_gap_threshold
from analysis.ternary import (
    PatternTolerance,
    ray_pattern,
    realisable_pattern,
    ternary_pattern,
)

#: Relative tolerance of the quadrature rule of the basins (``d ≤ 2``).
RULE_RTOL = 1e-6
#: Points of the importance-sampling rule of the basins (``d ≥ 3``).
SAMPLE_POINTS = 2 ** 16


@dataclass
class GibbsRay:
    """One local maximum of ``|G|`` of the Gibbs measure at ``τ`` and its basin.

    Attributes
    ----------
    direction : ndarray of shape (d+1,)   the maximiser ``v*`` (unit vector)
    sign : int                            sign of ``a`` (``−sign G(v*)``)
    weight : float                        ``c_k = ∫_basin π E[a r 1(|a| r ≥ c) | v] dv``
                                          (signed; the basin's particles heavier than the
                                          halo cut ``c``, as a particle ray's weight)
    mass_fraction : float                 the basin's mass of particles heavier than the halo
                                          cut, over the total mass
    spread : float                        RMS angle (radians) of that mass to its mean
                                          direction
    G : float                             ``G(v*)``
    gap : float                           the gap the rule tests: the larger of ``1 − |G(v*)|``
                                          and the gap its mean particle mass implies
    pattern : ndarray of shape (n,) int8  ternary pattern of ``v*``
    is_ray : bool                         passes the ray rule (module docstring)
    reason : str                          why not, "" for a ray
    mean_direction : ndarray (d+1,)       the kept mass's mean direction (the analogue of a
                                          particle ray's ``direction``; the kinks ``K`` are
                                          of it)
    mean_pattern : ndarray (n,) int8      its pattern by the particles' rule (straddling mass,
                                          :func:`analysis.ternary.ray_pattern`)
    mean_mass : float                     the basin's mean kept particle mass in free-particle
                                          baselines ``(d+1)τ/λ`` (the heaviness test's
                                          quantity; a ray needs ``halo_ratio``)
    """

    direction: np.ndarray
    sign: int
    weight: float
    mass_fraction: float
    spread: float
    G: float
    gap: float
    pattern: np.ndarray
    is_ray: bool = True
    reason: str = ""
    mean_mass: float = float("nan")
    mean_direction: np.ndarray | None = None
    mean_pattern: np.ndarray | None = None

    def as_dict(self) -> dict:
        return {"direction": [float(x) for x in self.direction], "sign": int(self.sign),
                "weight": float(self.weight), "mass_fraction": float(self.mass_fraction),
                "spread": float(self.spread), "G": float(self.G), "gap": float(self.gap),
                "pattern": [int(t) for t in self.pattern], "is_ray": bool(self.is_ray),
                "reason": self.reason, "mean_mass": float(self.mean_mass),
                "mean_direction": None if self.mean_direction is None
                else [float(x) for x in self.mean_direction],
                "mean_pattern": None if self.mean_pattern is None
                else [int(t) for t in self.mean_pattern]}


@dataclass
class GibbsRays:
    """Output of :func:`gibbs_rays`.

    Attributes
    ----------
    tau : float
    rays : list of GibbsRay                the rays, by decreasing mass
    maxima : list of GibbsRay              every local maximum of ``|G|`` (rays and refused)
    kinks : list of solvers.geometry.Kink  kink hyperplanes of the rays
    gap_threshold : float or None          ``ε(τ)`` (None: no gap test)
    unassigned_mass : float                mass fraction whose ascent reached no maximum
                                           (flat ``G = 0`` regions)
    rule : str                             "quadrature" or "importance sample"
    n_nodes : int                          directions of the rule
    """

    tau: float
    rays: list
    maxima: list
    kinks: list
    gap_threshold: float | None
    unassigned_mass: float
    rule: str
    n_nodes: int
    thresholds: dict = field(default_factory=dict)

    @property
    def J(self) -> int:
        return len(self.rays)

    @property
    def K(self) -> int:
        return len(self.kinks)

    def as_dict(self) -> dict:
        return {"tau": float(self.tau), "J": self.J, "K": self.K,
                "rays": [q.as_dict() for q in self.rays],
                "maxima": [q.as_dict() for q in self.maxima],
                "kinks": [k.as_dict() for k in self.kinks],
                "gap_threshold": self.gap_threshold,
                "unassigned_mass": float(self.unassigned_mass), "rule": self.rule,
                "n_nodes": int(self.n_nodes), "thresholds": dict(self.thresholds)}


def _radial_nodes(G, tau, lam, d, power: float, order: int):
    """Gauss–Laguerre nodes of the radial law at certificates ``G`` (m,): ``t = λ(1 − G²)
    r²/(2τ) ~ Gamma(p)``, ``p = (d+1)/2`` (THEORY §5), with the weight ``t^{p−1+power} e^{−t}``
    over ``Γ(p)``. Returns ``c`` (m, 1) with ``r = c√t``, ``r`` and ``μ = −rG`` (m, order),
    ``σ = √(τ/λ)`` (the law of ``a`` given ``r`` is ``N(μ, σ²)``) and the weights (order,)."""
    p = 0.5 * (d + 1)
    t, w = roots_genlaguerre(order, p - 1.0 + power)
    w = w / math.exp(gammaln(p))
    G = np.asarray(G, dtype=float)
    c = np.sqrt(2.0 * tau / (lam * (1.0 - G) * (1.0 + G)))[:, None]
    r = c * np.sqrt(t)[None, :]
    return c, r, -r * G[:, None], math.sqrt(tau / lam), w


def _radial_moments(G, tau, lam, d, cut: float = 0.0, order: int = 64):
    """At certificates ``G`` (m,): ``E[|a| r | v]`` (the mean mass of all the particles at
    ``v``), ``E[|a| r 1(|a| r ≥ cut) | v]`` (of those heavier than ``cut``) and
    ``E[a r 1(|a| r ≥ cut) | v]`` (their mean weight), from one set of nodes. Given ``v``,
    ``a | r ~ N(−rG, σ²)``, ``σ² = τ/λ``, and ``t = λ(1 − G²) r²/(2τ) ~ Gamma((d+1)/2)`` (THEORY
    §5). For fixed ``r`` the truncated first moments of the normal are closed:
    ``E[±a 1(±a ≥ k)] = ±μ Φ((±μ−k)/σ) + σ φ((k∓μ)/σ)``, ``μ = −rG``, ``k = cut/r``; their sum
    is ``E[|a| 1(|a| ≥ k)]`` (at ``k = 0`` the folded-normal mean ``μ(2Φ(μ/σ) − 1) +
    2σφ(μ/σ)``, an even function of ``μ``, so smooth in ``t``), their difference
    ``E[a 1(|a| ≥ k)]`` (``μ`` at ``k = 0``). With ``r = c√t`` the outer integral is
    Gauss–Laguerre with the weight ``t^{p−1/2} e^{−t}``, ``p = (d+1)/2``.

    Returns
    -------
    (mass, kept_mass, kept_weight) : three ndarrays of shape (m,)
    """
    c, r, mu, sigma, w = _radial_nodes(G, tau, lam, d, 0.5, order)
    z = mu / sigma
    mass = c[:, 0] * ((mu * (2.0 * ndtr(z) - 1.0) + 2.0 * sigma * _phi(z)) @ w)
    if cut == 0.0:
        return mass, mass, c[:, 0] * (mu @ w)
    k = float(cut) / r
    up = mu * ndtr((mu - k) / sigma) + sigma * _phi((k - mu) / sigma)       # E[a 1(a ≥ k)]
    down = -mu * ndtr((-k - mu) / sigma) + sigma * _phi((k + mu) / sigma)   # E[-a 1(a ≤ -k)]
    return mass, c[:, 0] * ((up + down) @ w), c[:, 0] * ((up - down) @ w)


def _mean_abs_a_r(G, tau, lam, d, cut: float = 0.0, order: int = 64, signed: bool = False):
    """``E[|a| r 1(|a| r ≥ cut) | v]`` at certificates ``G`` (m,), or with ``signed``
    ``E[a r 1(|a| r ≥ cut) | v]`` (:func:`_radial_moments`)."""
    _, kept_mass, kept_weight = _radial_moments(G, tau, lam, d, cut, order)
    return kept_weight if signed else kept_mass


def _kept_probability(G, tau, lam, d, cut: float, order: int = 64):
    """``P(|a| r ≥ cut | v)`` at certificates ``G`` (m,): the share of the particles at ``v``
    that the particles' halo cut keeps, ``E[Φ((μ−k)/σ) + Φ((−k−μ)/σ)]`` over the radial law
    (notation of :func:`_mean_abs_a_r`; Gauss–Laguerre with the weight ``t^{p−1} e^{−t}``)."""
    _, r, mu, sigma, w = _radial_nodes(G, tau, lam, d, 0.0, order)
    k = float(cut) / r
    return (ndtr((mu - k) / sigma) + ndtr((-k - mu) / sigma)) @ w


def _phi(z):
    return np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def _rule(sol, X, y, lam, R):
    """Directions and weights (surface measure) of ``S^d`` adapted to the peaks of ``|G_R|``."""
    d = X.shape[1]
    if d <= 2:
        from solvers.gibbs import GibbsReference
        ref = GibbsReference(X, y, lam)
        rule = ref._rule(R, RULE_RTOL)
        return rule.V, rule.W, "quadrature"
    from solvers.gibbsqmc import QMCGibbsReference
    from solvers.qmcproposal import build_proposal
    ref = QMCGibbsReference(X, y, lam)
    peaks = ref.peaks(R)
    prop = build_proposal(peaks, d, SAMPLE_POINTS, ref._one_minus_G2(R))
    V, W = prop.sample([0, 1, 0])
    return V, W, "importance sample"


@dataclass
class _AsRay:
    """A Gibbs ray as :func:`analysis.kinks.ray_kinks` reads a particle ray: its mean
    direction, that direction's pattern and its spread."""

    ray: GibbsRay

    @property
    def direction(self):
        return self.ray.mean_direction

    @property
    def pattern(self):
        return self.ray.mean_pattern

    @property
    def spread(self):
        return self.ray.spread


def gibbs_rays(sol, *, min_mass_frac: float = 1e-2, g_ray: float = 0.5, halo_ratio: float = 3.0,
               thermal_gap: float = THERMAL_GAP, weight_scale: float | None = None,
               particle_halo: float = 1.0, pattern_tol=None, patterns=None) -> GibbsRays:
    """Rays of the exact Gibbs measure at one temperature (module docstring).

    Parameters
    ----------
    sol : solvers.gibbs.GibbsSolution
        The fixed point at ``sol.tau`` (attributes ``tau``, ``lam``, ``X`` (n, d), ``y`` (n,),
        ``R`` (n,) are read; one from the disk cache will do).
    min_mass_frac, g_ray, halo_ratio, thermal_gap, particle_halo : float
        The ray rule of :func:`analysis.rays.find_rays` (same defaults). As the particles
        lighter than ``particle_halo`` times the baseline ``(d+1)τ/λ`` are halo there, a
        basin's mass fraction and spread are those of the mass of its particles heavier than
        that (:func:`_radial_moments` with the cut; the whole mass is the denominator). The
        particles' compactness test (``max_spread``) is not applied: it ends the linkage's
        plateau where clusters of two rays merge, and a basin holds one maximum by
        construction; its breadth is reported (``spread``).
    weight_scale : float, optional
        ``c_y`` of the gap threshold (default :func:`analysis.rays.label_weight_scale`).
    pattern_tol : float or PatternTolerance, optional
        The tolerances of the mean patterns' zeros (as :func:`analysis.rays.find_rays`).
    patterns : ndarray of shape (P, n) bool, optional
        The realisable activation patterns of ``X`` (computed when omitted).

    Returns
    -------
    GibbsRays

    Raises
    ------
    solvers.activation_regions.TooManyPatterns
        More activation cells than the enumeration takes.
    """
    from analysis.ray_thresholds import label_weight_scale
    X = np.asarray(sol.X, dtype=float)
    y = np.asarray(sol.y, dtype=float).ravel()
    R = np.asarray(sol.R, dtype=float).ravel()
    lam, tau = float(sol.lam), float(sol.tau)
    d = X.shape[1]
    ptol = pattern_tol if isinstance(pattern_tol, PatternTolerance) else (
        PatternTolerance() if pattern_tol is None else PatternTolerance(float(pattern_tol)))
    asc = cell_maxima_of(R, X, lam, patterns)
    maxima = maxima_of(asc)
    V, W, rule_name = _rule(sol, X, y, lam, R)
    G = certificate(V, X, R, lam)
    om = (1.0 - G) * (1.0 + G)
    p = 0.5 * (d + 1)
    h = W * np.exp(-p * np.log(om))
    pi_w = h / h.sum()                              # probability of each node
    baseline = halo_baseline(d, tau, lam)
    m_node, kept, w_node = (pi_w * q for q in _radial_moments(G, tau, lam, d,
                                                               cut=particle_halo * baseline))
    total = float(m_node.sum())
    kept_n = pi_w * _kept_probability(G, tau, lam, d, cut=particle_halo * baseline)
    label = basins(V, G, maxima, X, R, lam)
    parent = resolved_maxima(maxima, X, R, lam)      # exact R: only a maximum with no dip
    label[label >= 0] = parent[label[label >= 0]]
    if weight_scale is None:
        weight_scale = label_weight_scale(X, y)
    eps = None
    if weight_scale is not None and thermal_gap > 0:
        eps = thermal_gap_threshold(d, tau, lam, weight_scale, thermal_gap)
    found = []
    for k, (v, sg, _) in enumerate(maxima):
        if parent[k] != k:
            continue
        mem = label == k
        mk = float(kept[mem].sum())
        # the kept mass's mean direction, spread and straddling-mass pattern, as a particle
        # ray's (analysis.rays.find_rays): the maximiser of a flat top is ill-conditioned
        vm = kept[mem] @ V[mem] if mk > 0 else np.asarray(v, dtype=float)
        vm = vm / np.linalg.norm(vm)
        angk = np.arccos(np.clip(V[mem] @ vm, -1.0, 1.0))
        spread = float(np.sqrt(np.sum(kept[mem] * angk ** 2) / mk)) if mk > 0 else 0.0
        mean_pat = (ray_pattern(vm, V[mem], kept[mem], X, ptol)[0] if mk > 0
                    else ternary_pattern(vm, X, ptol.angle_tol)[0])
        # as a particle ray's: never a pattern no direction can have (docs/theory.md §6.7)
        mean_pat = realisable_pattern(mean_pat, vm, X, ptol.angle_tol)[0]
        g = float(certificate(v[None], X, R, lam)[0])
        pat = ternary_pattern(v, X, ZERO_TOL)[0]
        frac = mk / total if total > 0 else 0.0
        # the basin's mean kept particle mass, as a cluster's cm/cn (find_rays)
        n_k = float(kept_n[mem].sum())
        mean_mass = mk / n_k if n_k > 0 else 0.0
        gap = max(1.0 - abs(g), float(mass_gap(mean_mass, baseline)))
        reasons = []
        if frac < min_mass_frac:
            reasons.append(f"mass fraction {frac:.3g} < {min_mass_frac:g}")
        if abs(g) < g_ray:
            reasons.append(f"|G| {abs(g):.3g} < g_ray {g_ray:g}")
        if mean_mass < halo_ratio * baseline:
            reasons.append(f"mean particle mass {mean_mass:.3g} < {halo_ratio:g} x baseline "
                           f"{baseline:.3g}")
        if eps is not None and gap > eps:
            reasons.append(f"gap {gap:.3g} > {eps:.3g}")
        found.append(GibbsRay(direction=v, sign=-int(sg), weight=float(w_node[mem].sum()),
                              mass_fraction=frac, spread=spread, G=g, gap=gap,
                              pattern=pat, is_ray=not reasons, reason="; ".join(reasons),
                              mean_mass=mean_mass / baseline, mean_direction=vm,
                              mean_pattern=mean_pat))
    found.sort(key=lambda q: -q.mass_fraction)
    rays = [q for q in found if q.is_ray]
    kinks = ray_kinks([_AsRay(q) for q in rays], X, ptol.angle_tol)
    unassigned = float(m_node[label < 0].sum() / total) if total > 0 else 0.0
    return GibbsRays(tau=tau, rays=rays, maxima=found, kinks=kinks, gap_threshold=eps,
                     unassigned_mass=unassigned, rule=rule_name, n_nodes=int(V.shape[0]),
                     thresholds={"min_mass_frac": float(min_mass_frac), "g_ray": float(g_ray),
                                 "halo_ratio": float(halo_ratio),
                                 "thermal_gap": float(thermal_gap),
                                 "particle_halo": float(particle_halo),
                                 "weight_scale": None if weight_scale is None
                                 else float(weight_scale)})
