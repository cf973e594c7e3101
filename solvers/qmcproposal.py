"""The proposal of the randomized-QMC Gibbs reference (:mod:`solvers.gibbsqmc`): a mixture of
a uniform component on ``S^d`` and Cauchy and cone components at the peaks of ``|G|``, with an
exact density.

Proposal (a mixture with exact density)
---------------------------------------
As ``τ → 0`` the density concentrates at the maximisers ``v*`` of ``|G|`` (the rays of the
convex limit, THEORY §4), with ``δ = 1 − G(v*)²`` of order ``τ``. The maximisers of ``±G`` on
every activation cell are exact (:func:`solvers.convex.cell_maxima`, a cone projection each).
Around a maximiser use gnomonic coordinates ``t ∈ v*^⊥ ≅ R^d``,
``v = (v* + t)/√(1 + |t|²)``, with surface element ``dΩ = (1 + |t|²)^{−(d+1)/2} dt``. When
``v*`` is interior to its cell, ``G = g/√(1 + |t|²)`` there and

    (1 − G²)^{−(d+1)/2} dΩ = (δ + |t|²)^{−(d+1)/2} dt ,

exactly the multivariate Cauchy density of scale ``√δ`` in ``t``: the importance weight of
``π_R`` is constant on the cell and those of ``f`` (one more factor ``1/(1 − G²)``) and of the
Hessian have relative variance bounded uniformly in ``δ``. When ``v*`` lies on a kink
(``c⊥ ≠ 0``, ``c`` the cell's linear coefficient) ``1 − G²`` grows linearly across it, with
width ``δ/(2g|c⊥|)``: an anisotropic Cauchy component of that width across the kink and
``√δ`` along it is added. The proposal is the deterministic mixture ``q = Σ_i α_i q_i`` of a
uniform component on ``S^d`` (defensive: bounds every weight by ``|S^d|/α_0``) and these
components, ``α_i = M_i/M`` the exact share of points of component ``i``; every point is
weighted by ``1/(M q(v))`` (balance heuristic), which is unbiased.

Source: THEORY §5 *(derived)*; Owen, *Monte Carlo theory, methods and examples* (2013), §9.13
(mixture importance sampling) and §17 (randomized QMC).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betaincinv, gammaln, ndtri
from scipy.stats import qmc

#: target's exponent is ``(d+1)/2``).
PARETO = 1.5
#: Below this ``δ = 1 − G²`` at a peak on ``≥ 3`` kinks the fixed point is taken to press
#: Ratio of successive scales of a peak's components, and the largest ``δ`` given them.
LADDER = 8.0
LADDER_DELTA = 0.1



@dataclass
class Peak:
    """A maximiser ``v`` of ``±G``: ``g = |G(v)|``, ``delta = 1 − g²`` and ``normal``
    (d+1, k), the unit normals of the ``k`` kinks ``{v·x̃_j = 0}`` through ``v``."""

    v: np.ndarray
    g: float
    delta: float
    normal: np.ndarray


def _log_cauchy_const(m: int) -> float:
    """``log Γ((m+1)/2)/π^{(m+1)/2}``: the standard Cauchy density on ``R^m`` at 0."""
    return float(gammaln(0.5 * (m + 1)) - 0.5 * (m + 1) * math.log(math.pi))


class _Gnomonic(dict):
    """The gnomonic coordinates ``t`` (m, d) of a set of points around one centre, and
    quantities derived from them that the components sharing the centre reuse (computed once
    each: ``|t|²``, projections onto a component's subspaces)."""

    def __init__(self, t):
        super().__init__()
        self.t = t

    def sq(self):
        if "sq" not in self:
            self["sq"] = np.einsum("ij,ij->i", self.t, self.t)
        return self["sq"]

    def project(self, basis):
        """``t @ basis`` and its squared norm, for ``basis`` (d, k) orthonormal."""
        key = id(basis)
        if key not in self:
            u = self.t @ basis
            self[key] = (u, np.einsum("ij,ij->i", u, u))
        return self[key]


@dataclass
class Cauchy:
    """An isotropic Cauchy law in gnomonic coordinates ``t`` around ``center``: ``t = scale·z``,
    ``z`` standard multivariate Cauchy in ``R^d``; ``basis`` (d+1, d) spans ``center^⊥``."""

    center: np.ndarray
    basis: np.ndarray
    scale: float

    def __post_init__(self):
        self.d = self.basis.shape[1]
        self.log_c = _log_cauchy_const(self.d) - self.d * math.log(self.scale)

    def sample_t(self, N, U):
        return self.scale * (N[:, :self.d] / np.abs(N[:, self.d:self.d + 1]))

    def logpdf_t(self, g: _Gnomonic):
        return self.log_c - 0.5 * (self.d + 1) * np.log1p(g.sq() / self.scale ** 2)


@dataclass
class Cone:
    """A peak on ``k ≥ 1`` kinks: ``1 − G² ≈ A + b|t_N|`` with ``A = δ + |t_F|²``, ``t_N`` the
    part of ``t`` across the kinks (orthonormal ``normal`` (d, k)), ``t_F`` along them
    (orthonormal ``face`` (d, m), ``m = d − k``). ``t_F`` is Cauchy of scale ``sigma`` on
    ``R^m``; given ``t_F``, ``t_N = (A/b) ρ ω`` with ``ω`` uniform on ``S^{k−1}`` and ``ρ``
    beta-prime ``(k, PARETO − 1)`` (density ``∝ ρ^{k−1}(1+ρ)^{−k−PARETO+1}``)."""

    center: np.ndarray
    basis: np.ndarray
    normal: np.ndarray
    face: np.ndarray
    sigma: float
    delta: float
    b: float

    def __post_init__(self):
        self.d = self.basis.shape[1]
        self.k = self.normal.shape[1]
        self.m = self.face.shape[1]
        beta = PARETO - 1.0
        self.beta = beta
        # log of 1/(B(k, β) |S^{k−1}|)
        self.log_c = float(-(gammaln(self.k) + gammaln(beta) - gammaln(self.k + beta))
                           - (math.log(2.0) + 0.5 * self.k * math.log(math.pi)
                              - gammaln(0.5 * self.k)))

    def sample_t(self, N, U):
        m, k = self.m, self.k
        if m:
            tF = self.sigma * N[:, :m] / np.abs(N[:, m:m + 1])
            A = self.delta + np.einsum("ij,ij->i", tF, tF)
        else:
            tF = np.zeros((N.shape[0], 0))
            A = np.full(N.shape[0], self.delta)
        om = N[:, m + 1:m + 1 + k]
        om = om / np.linalg.norm(om, axis=1, keepdims=True)
        x = betaincinv(k, self.beta, U[:, self.d + 1])
        rho = x / np.maximum(1.0 - x, 1e-300)
        return tF @ self.face.T + ((A / self.b) * rho)[:, None] * (om @ self.normal.T)

    def logpdf_t(self, g: _Gnomonic):
        m, k = self.m, self.k
        out = np.zeros(g.t.shape[0])
        if m:
            _, r2 = g.project(self.face)
            out += _log_cauchy_const(m) - m * math.log(self.sigma) \
                - 0.5 * (m + 1) * np.log1p(r2 / self.sigma ** 2)
            A = self.delta + r2
        else:
            A = np.full(g.t.shape[0], self.delta)
        _, n2 = g.project(self.normal)
        rho = (self.b / A) * np.sqrt(n2)
        return out + self.log_c + k * np.log(self.b / A) - (k + self.beta) * np.log1p(rho)


def _tangent_basis(v):
    Q, _ = np.linalg.qr(np.column_stack([v, np.eye(len(v))]))
    return Q[:, 1:len(v)]


class Proposal:
    """Mixture of the uniform law on ``S^d`` and gnomonic components (module docstring).

    Parameters
    ----------
    d : int
    components : list of Cauchy or Kink
    counts : list of int
        Points per randomization of each component, the uniform one first (powers of two, so
        every component's Sobol' points are balanced).
    """

    def __init__(self, d: int, components: list, counts: list):
        self.d, self.D = d, d + 1
        self.components = components
        self.counts = [int(c) for c in counts]
        self.M = int(sum(self.counts))
        self.log_alpha = np.log(np.asarray(self.counts, float) / self.M)
        self.p = 0.5 * (d + 1)
        self.log_area = math.log(2.0) + self.p * math.log(math.pi) - gammaln(self.p)   # |S^d|
        groups = {}                      # components sharing a centre share its coordinates
        for i, c in enumerate(components):
            groups.setdefault(id(c.center), (c.center, []))[1].append(i)
        self._groups = list(groups.values())

    def pdf(self, V) -> np.ndarray:
        """``q(v)`` of the mixture (surface measure) at ``V`` (m, d+1): (m,).

        On the hemisphere ``s = v·v* > 0`` of a gnomonic component ``t = Bᵀv/s`` and
        ``q_i(v) = q_t(t) s^{−(d+1)}`` (``dΩ = s^{d+1} dt``); 0 elsewhere. The terms are summed
        directly, one component at a time, with the gnomonic coordinates computed once per
        centre: every term is far inside the range of doubles (the uniform one is
        ``1/|S^d|``), so no log-sum-exp over an (m, C) table is needed."""
        V = np.asarray(V, float)
        q = np.full(V.shape[0], math.exp(self.log_alpha[0] - self.log_area))
        for center, members in self._groups:
            s = V @ center
            on = s > 0
            sp = np.where(on, s, 1.0)
            g = _Gnomonic((V @ self.components[members[0]].basis) / sp[:, None])
            ls = (self.d + 1) * np.log(sp)
            acc = np.zeros(V.shape[0])
            for i in members:
                acc += np.exp(self.components[i].logpdf_t(g) - ls + self.log_alpha[1 + i])
            q += np.where(on, acc, 0.0)
        return q

    def sample(self, seed):
        """One randomization: points ``V`` (M, d+1) and weights ``W = 1/(M q(V))`` (M,)."""
        ss = np.random.SeedSequence(seed).spawn(len(self.counts))
        parts = []
        for i, (m, sd) in enumerate(zip(self.counts, ss)):
            U = qmc.Sobol(self.D + 1, scramble=True, seed=np.random.default_rng(sd)).random(m)
            U = np.clip(U, 1e-300, 1 - 1e-16)
            N = ndtri(U)
            if i == 0:
                V = N[:, :self.D] / np.linalg.norm(N[:, :self.D], axis=1, keepdims=True)
            else:
                c = self.components[i - 1]
                P = c.center[None, :] + c.sample_t(N, U) @ c.basis.T
                V = P / np.linalg.norm(P, axis=1, keepdims=True)
            parts.append(V)
        V = np.concatenate(parts, axis=0)
        W = 1.0 / (self.M * self.pdf(V))
        return V, W

    def resized(self, M: int) -> Proposal:
        """The same mixture with about ``M`` points per randomization (``M`` a power of two)."""
        k = round(math.log2(M / self.M))
        return Proposal(self.d, self.components, [c * 2 ** k if k >= 0 else max(1, c >> -k)
                                                  for c in self.counts])


def build_proposal(peaks: list, d: int, M: int, one_minus_G2=None,
                   uniform_fraction: float = 0.125) -> Proposal:
    """The mixture for the peaks of ``G``.

    Per peak an isotropic Cauchy of scale ``√δ`` in ``t`` (exact for a peak inside its cell).
    For a peak on ``k ≥ 1`` kinks (``peak.normal`` (d+1, k), the kinks' normals), with ``b``
    the smallest slope of ``1 − G²`` across them (measured by ``one_minus_G2(V)``): :class:`Cone`
    components with face scales ``σ = √δ·8^i`` up to 1 (the mass along a kink spreads over all
    scales), and isotropic Cauchy components of scales ``(δ/b)·8^i`` up to 1 (the cone's
    tails). Shares of points ``∝ δ^{−1/2}`` per peak, equal among its components;
    ``uniform_fraction`` uniform. ``M`` (a power of two) is the number of points per
    randomization (approximately: every component gets a power of two, at least 16).
    """
    comps, w = [], []
    for pk in peaks:
        sd = math.sqrt(pk.delta)
        B = _tangent_basis(pk.v)
        mine = [Cauchy(pk.v, B, sd)]
        if pk.normal.shape[1] and one_minus_G2 is not None and pk.delta <= LADDER_DELTA:
            Nt, _ = np.linalg.qr(B.T @ pk.normal)               # (d, k) in t coordinates
            k = Nt.shape[1]
            Fb = _null(Nt.T) if k < d else np.zeros((d, 0))
            eps = 1e-3 * pk.delta
            dirs = np.concatenate([Nt.T, -Nt.T], axis=0)
            P = pk.v[None, :] + eps * dirs @ B.T
            om = one_minus_G2(P / np.linalg.norm(P, axis=1, keepdims=True))
            b = float(max(np.min((om - pk.delta) / eps), sd))
            sig = sd
            while True:
                mine.append(Cone(pk.v, B, Nt, Fb, sig, pk.delta, b))
                if sig >= 0.25 or Fb.shape[1] == 0 or not sig > 0:   # δ = 0: no ladder
                    break
                sig *= LADDER
            sc = pk.delta / b
            while 0 < sc < 0.25:                  # δ = 0 (a peak at the barrier): none
                if not 0.5 * sd < sc < 2 * sd:
                    mine.append(Cauchy(pk.v, B, sc))
                sc *= LADDER
        share = pk.delta ** -0.5
        w.extend([share / len(mine)] * len(mine))
        comps.extend(mine)
    counts = [M * uniform_fraction]
    if w:
        w = np.asarray(w) / np.sum(w) * (1 - uniform_fraction)
        counts += list(M * w)
    else:
        counts = [M]
    counts = [2 ** max(4, round(math.log2(c))) for c in counts]
    return Proposal(d, comps, counts)


def _null(A):
    """Orthonormal basis of the null space of ``A`` (r, d): (d, d − rank)."""
    _, sv, Vt = np.linalg.svd(A)
    r = int(np.sum(sv > 1e-12 * max(1.0, sv.max(initial=0.0))))
    return Vt[r:].T
