"""The exact Gibbs measure's rays (analysis.gibbs_rays), the local maxima of |G|
(analysis.certificate_maxima), the realisability of a ternary pattern and the split of a ray
at a valley of the certificate, each against an independent check: a brute-force grid, Monte
Carlo, the convex τ → 0 reference, and planted particles."""

import math

import numpy as np
import pytest

from analysis.certificate import certificate
from analysis.certificate_maxima import local_maxima
from analysis.gibbs_rays import _kept_probability, _mean_abs_a_r, gibbs_rays
from analysis.ray_checks import convex_counts
from analysis.references import convex_reference, gibbs_reference
from analysis.ternary import pattern_realisable
from solvers.geometry import lifted

# nine 1-D points with every convex kink on a data point (x = ±0.25, ±0.75), λ = 0.01
X9 = np.linspace(-1.0, 1.0, 9)[:, None]
Y9 = np.array([1.0, 0.2, 0.6, 0.1, 0.9, 0.1, 0.6, 0.2, 1.0])
# eight points in the plane (the embedded default's), λ = 0.05
X8 = np.array([[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4], [-1.1, 0.3], [0.2, 0.1],
               [1.0, 1.5], [-0.3, -1.8]])
Y8 = np.array([1.0, -0.5, 0.5, 1.2, -0.8, 0.3, -1.0, 0.9])


def _angle(u, v):
    return float(np.arccos(np.clip(np.dot(u, v), -1.0, 1.0)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_local_maxima_of_G_on_the_circle_match_a_brute_force_grid(seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (7, 1))
    R = rng.standard_normal(7)
    lam = 0.3
    exact = local_maxima(R, X, lam)
    th = np.linspace(0, 2 * np.pi, 400_000, endpoint=False)
    V = np.stack([np.cos(th), np.sin(th)], axis=1)
    G = certificate(V, X, R, lam)
    grid = []
    for s in (1, -1):
        g = s * G
        peak = (g > np.roll(g, 1)) & (g >= np.roll(g, -1)) & (g > 1e-9)
        grid += [(V[i], s) for i in np.nonzero(peak)[0]]
    assert len(grid) == len(exact)
    for v, s in grid:         # every grid peak is within a grid step of an exact maximum
        assert min(_angle(v, u) for u, t in exact if t == s) < 2 * np.pi / 400_000 * 2


def test_local_maxima_in_the_plane_are_maxima_and_ascent_ends_at_them():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (8, 2))
    R = rng.standard_normal(8) / 8
    lam = 0.05
    exact = local_maxima(R, X, lam)
    assert exact
    for v, s in exact:        # no nearby direction is higher
        B = np.linalg.svd(v[None, :])[2][1:]
        for eps in (1e-6, 1e-4, 1e-2):
            t = rng.standard_normal((200, 2)) @ B
            t /= np.linalg.norm(t, axis=1, keepdims=True)
            P = v + eps * t
            P /= np.linalg.norm(P, axis=1, keepdims=True)
            assert np.all(s * certificate(P, X, R, lam) <= s * certificate(v[None], X, R, lam)
                          + 1e-12)
    # projected subgradient ascent from random starts ends at one of them (independent method)
    L = lifted(X)
    for _ in range(40):
        v = rng.standard_normal(3)
        v /= np.linalg.norm(v)
        s = 1 if certificate(v[None], X, R, lam)[0] > 0 else -1
        for h in np.geomspace(0.05, 1e-7, 4000):
            g = s * ((L @ v > 0) * R) @ L / lam
            g -= (g @ v) * v
            if np.linalg.norm(g) == 0:
                break
            v = v + h * g / np.linalg.norm(g)
            v /= np.linalg.norm(v)
        if abs(certificate(v[None], X, R, lam)[0]) < 1e-9:
            continue          # a flat region (G = 0): no maximum of |G|
        assert min(_angle(v, u) for u, t in exact if t == s) < 1e-4


def _masses(rng, G, tau, lam, d, n=2_000_000):
    """Masses ``|a| r`` of ``n`` draws of the radial law at ``G`` (THEORY §5)."""
    r = np.sqrt(rng.gamma((d + 1) / 2, 2 * tau / (lam * (1 - G * G)), n))
    return np.abs(-r * G + math.sqrt(tau / lam) * rng.standard_normal(n)) * r


def test_radial_mass_is_the_folded_normal_mean_over_the_radial_law():
    rng = np.random.default_rng(0)
    tau, lam, d = 1e-2, 0.05, 2
    p = (d + 1) / 2
    for G in (0.0, 0.5, -0.9, 0.999):
        mc = _masses(rng, G, tau, lam, d)
        got = _mean_abs_a_r(np.array([G]), tau, lam, d)[0]
        assert abs(got - mc.mean()) < 4 * mc.std() / math.sqrt(mc.size)
    # G = 0: a and r independent, E|a| E r in closed form
    closed = math.sqrt(tau / lam) * math.sqrt(2 / math.pi) * math.sqrt(2 * tau / lam) \
        * math.exp(math.lgamma(p + 0.5) - math.lgamma(p))
    assert _mean_abs_a_r(np.array([0.0]), tau, lam, d)[0] == pytest.approx(closed, rel=1e-10)


@pytest.mark.parametrize("cut", [1.0, 3.0, 10.0])
def test_kept_mass_is_the_mean_mass_of_particles_heavier_than_the_cut(cut):
    # what the particles' halo cut keeps, E[|a| r 1(|a| r >= cut) | v], against Monte Carlo of
    # the radial law, from G = 0 (the cut removes most) to a sharp peak (it removes nothing)
    rng = np.random.default_rng(1)
    tau, lam, d = 1e-2, 1e-2, 2
    for G in (0.0, 0.5, -0.9, 0.97):
        m = _masses(rng, G, tau, lam, d)
        mc = m * (m >= cut)
        got = _mean_abs_a_r(np.array([G]), tau, lam, d, cut=cut)[0]
        assert abs(got - mc.mean()) < 4 * mc.std() / math.sqrt(mc.size) + 1e-12
        share = np.mean(m >= cut)          # and the share of the particles kept
        got = _kept_probability(np.array([G]), tau, lam, d, cut)[0]
        assert abs(got - share) < 4 * math.sqrt(share * (1 - share) / m.size) + 1e-9
    assert _mean_abs_a_r(np.array([0.3]), tau, lam, d, cut=cut)[0] \
        < _mean_abs_a_r(np.array([0.3]), tau, lam, d)[0]


@pytest.mark.parametrize("cut", [0.0, 1.0, 3.0, 10.0])
def test_kept_weight_is_the_mean_signed_weight_of_particles_heavier_than_the_cut(cut):
    # a Gibbs ray's weight, E[a r 1(|a| r >= cut) | v], as a particle ray's (its kept
    # particles' a r, both signs of a): against Monte Carlo of the radial law, and at cut = 0
    # against the closed form E[a r | v] = -G (d+1) tau / (lam (1 - G^2)) (THEORY §5)
    rng = np.random.default_rng(2)
    tau, lam, d = 1e-2, 1e-2, 2
    for G in (0.0, 0.5, -0.9, 0.97):
        n = 2_000_000
        r = np.sqrt(rng.gamma((d + 1) / 2, 2 * tau / (lam * (1 - G * G)), n))
        a = -r * G + math.sqrt(tau / lam) * rng.standard_normal(n)
        wc = a * r * (np.abs(a) * r >= cut)
        got = _mean_abs_a_r(np.array([G]), tau, lam, d, cut=cut, signed=True)[0]
        assert abs(got - wc.mean()) < 4 * wc.std() / math.sqrt(n) + 1e-12
        if cut == 0.0:
            # to the 64-node rule's accuracy: in t the integrand has a sqrt(t), no polynomial
            assert got == pytest.approx(-G * (d + 1) * tau / (lam * (1 - G * G)), rel=1e-5,
                                        abs=1e-14)


def test_gibbs_rays_at_low_tau_are_the_convex_rays_and_carry_the_predictor():
    lam = 0.01
    cc = convex_counts(convex_reference(X9, Y9, lam), X9)
    sol = gibbs_reference(X9, Y9, lam, 1e-4)
    gr = gibbs_rays(sol)
    assert (gr.J, gr.K) == (cc["J"], cc["K"]) == (4, 4)
    for v, w in zip(cc["directions"], cc["weights"]):
        near = min(gr.rays, key=lambda q: _angle(q.direction, v))
        assert near.sign == np.sign(w)
        assert _angle(near.direction, v) < 0.02
        assert near.weight == pytest.approx(w, rel=0.05)
    # the rays hold the measure: their predictor is the Gibbs predictor up to the halo's share
    f_rays = sum(q.weight * np.maximum(lifted(X9) @ q.direction, 0) for q in gr.maxima)
    assert np.max(np.abs(f_rays - sol.f_train)) < 0.02 * np.max(np.abs(Y9))
    assert gr.unassigned_mass < 1e-3


def test_gibbs_rays_of_the_default_set_follow_the_ladder_to_the_convex_limit():
    lam = 0.05
    cc = convex_counts(convex_reference(X8, Y8, lam), X8)
    gr = gibbs_rays(gibbs_reference(X8, Y8, lam, 1e-3))
    # every convex ray is a Gibbs ray at 1e-3 (same sign, within 0.1 rad: the finite-tau shift
    # is 0.055 rad at most here, 0.006 at 1e-4); the Gibbs measure
    # has one more, light and falling (a finite-temperature concentration)
    for v, w in zip(cc["directions"], cc["weights"]):
        assert any(q.sign == np.sign(w) and _angle(q.direction, v) < 0.1 for q in gr.rays)
    extra = [q for q in gr.rays if not any(_angle(q.direction, v) < 0.1
                                           for v in cc["directions"])]
    assert all(q.mass_fraction < 0.05 for q in extra)
    # patterns of exact directions are realisable, and so are the kinks counted from them
    assert all(pattern_realisable(q.pattern, X8) for q in gr.rays)


def _realised_patterns(X, n_dirs=200_000, seed=0):
    """Ternary patterns of directions, by brute force: random directions (binary patterns),
    directions on each hyperplane (one zero) and on each pair's intersection (two zeros)."""
    rng = np.random.default_rng(seed)
    L = lifted(X)
    seen = set()

    def add(V):
        Z = V @ L.T
        T = np.sign(Z).astype(int)
        T[np.abs(Z) < 1e-12 * np.linalg.norm(L, axis=1)] = 0
        seen.update(map(tuple, T))
    V = rng.standard_normal((n_dirs, 3))
    add(V / np.linalg.norm(V, axis=1, keepdims=True))
    for j in range(len(L)):
        B = np.linalg.svd(L[j][None, :])[2][1:]
        th = np.linspace(0, 2 * np.pi, 20_000, endpoint=False)
        add(np.stack([np.cos(th), np.sin(th)], 1) @ B)
        for k in range(j + 1, len(L)):
            c = np.cross(L[j], L[k])
            add(np.array([c, -c]) / np.linalg.norm(c))
    return seen


def test_pattern_realisable_agrees_with_brute_force_on_every_ternary_pattern():
    import itertools
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, (5, 2))
    seen = _realised_patterns(X)
    for t in itertools.product((-1, 0, 1), repeat=5):
        assert pattern_realisable(t, X) == (t in seen), t


def test_three_zeros_need_three_collinear_points_in_the_plane():
    assert not pattern_realisable([0, 0, 0, 1, -1, 1, 1, -1], X8)      # general position
    collinear = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
    assert pattern_realisable([0, 0, 0, 1], collinear)                  # v = (0, 1, 0)
    assert not pattern_realisable([0, 0, 0, 0], collinear)


def _bridged_rays(seed=0):
    """Particles on the convex rays of ten random points in the plane (λ = 0.01), whose
    heaviest ray (34 % of Σ|c|) has a light one (4.4 %) of its sign 0.10 rad away, joined by a
    thin bridge of particles along the arc between them (what makes single linkage chain
    the two); the certificate of the convex optimum (a valley between the two)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from ray_counts import _uniform_plane
    d = _uniform_plane(10, 191)
    X, y, lam = np.array(d["X"]), np.array(d["y"]), 0.01
    cv = convex_reference(X, y, lam)
    cc = convex_counts(cv, X)
    D, W = cc["directions"], cc["weights"]
    frac = np.abs(W) / np.abs(W).sum()
    h, light = next((i, j) for i in range(len(W)) for j in range(len(W))
                    if i != j and np.sign(W[i]) == np.sign(W[j]) and frac[i] > 0.3
                    and frac[j] < 0.05 and _angle(D[i], D[j]) < 0.15)
    rng = np.random.default_rng(seed)
    rows = []
    for v, w in zip(D, W):
        for _ in range(40):
            u = v + 0.005 * rng.standard_normal(3)
            u /= np.linalg.norm(u)
            r = math.sqrt(abs(w) / 40)
            rows.append(np.r_[np.sign(w) * r, r * u])
    a = _angle(D[h], D[light])
    for t in np.linspace(0.1, 0.9, 30):
        u = (np.sin((1 - t) * a) * D[h] + np.sin(t * a) * D[light]) / np.sin(a)
        r = math.sqrt(0.3 * abs(W[light]) / 40)
        rows.append(np.r_[np.sign(W[h]) * r, r * u])
    for _ in range(400):
        u = rng.standard_normal(3)
        rows.append(np.r_[rng.choice([-1, 1]) * 1e-3, 1e-3 * u / np.linalg.norm(u)])
    theta = np.array(rows)
    theta[:, 0] *= len(theta)
    return theta, X, cv.R, lam, cc["J"], _angle(D[h], D[light])


def test_a_ray_chained_to_a_light_neighbour_across_a_valley_is_split(monkeypatch):
    import analysis.rays as rays
    theta, X, R, lam, J, angle = _bridged_rays()
    assert angle < 0.15
    res = rays.find_rays(theta, X, lam=lam, R=R, tau=1e-4)
    assert len(res.rays) == J == 8
    assert len(res.split) == 1
    # without the split the bridge chains the two into one ray: the check can fail
    monkeypatch.setattr(rays, "_split_by_basins", lambda labels, signs, *a, **k:
                        (labels, list(signs), []))
    assert len(rays.find_rays(theta, X, lam=lam, R=R, tau=1e-4).rays) == J - 1


def test_gibbs_rays_never_report_a_pattern_no_direction_can_have(monkeypatch):
    """The straddling mass of a broad basin can give its mean pattern three zeros in the plane,
    which no direction has on points in general position: the Gibbs rays get the particles'
    repair (analysis.ternary.realisable_pattern; plane8's data at τ = 10⁻² has two such
    basins), so that every reported pattern is checked by an LP, not taken on trust."""
    import analysis.gibbs_rays as gmod
    from analysis.ternary import realisable_pattern
    calls = []

    def spy(t, v, X, tol):
        out = realisable_pattern(t, v, X, tol)
        calls.append(out[1])
        return out
    monkeypatch.setattr(gmod, "realisable_pattern", spy)
    gr = gibbs_rays(gibbs_reference(X8, Y8, 0.05, 1e-2))
    assert sum(calls) >= 1                     # the data has such basins
    assert len(calls) == len(gr.maxima)
    for q in gr.maxima:
        assert pattern_realisable(q.mean_pattern, X8)


@pytest.mark.parametrize("t", [[1, 1, 1], [2, -3], [0.4, 1]])
def test_pattern_realisable_refuses_what_is_no_ternary_pattern_of_the_data(t):
    with pytest.raises(ValueError, match="one entry in"):
        pattern_realisable(t, np.array([[0.0], [1.0]]))
