"""Rays as the exact N-particle law holds them at low temperature (docs/theory.md §6.1): a
ray's weight on a few heavy particles at its exact direction, and rays of one sign joined by a
bridge of particles at coarse linkage thresholds.

The oracle is the convex ``τ → 0`` reference of the nine 1-D points ``W9`` (four rays, every
kink on a data point): its residuals give the certificate, its rays the planted measure."""

import numpy as np
import pytest

from analysis.ray_checks import convex_counts
from analysis.rays import find_rays, min_particles_default
from analysis.references import convex_reference, match_rays
from analysis.synthetic import planted_rays

XW = np.linspace(-1.0, 1.0, 9)[:, None]
YW = np.array([1.0, 0.2, 0.6, 0.1, 0.9, 0.1, 0.6, 0.2, 1.0])
LAMW = 0.01
TAU = 1e-4
N = 4000


@pytest.fixture(scope="module")
def w9():
    conv = convex_reference(XW, YW, LAMW)
    cc = convex_counts(conv, XW)
    assert cc["J"] == 4 and set(cc["signs"]) == {1}
    return conv, np.asarray(cc["directions"]), np.asarray(cc["weights"])


def _rays_of(res, conv, **kw):
    # the linkage rule's tests name it: with R and tau, "auto" is the basins rule
    kw.setdefault("rule", "linkage")
    return find_rays(res, XW, lam=LAMW, tau=TAU, R=conv.R, y=YW, **kw)


def _matched(res, dirs, weights):
    m = match_rays([q.direction for q in res.rays], [q.sign for q in res.rays],
                   [q.weight for q in res.rays], dirs, [1] * len(dirs), weights, max_angle=0.01)
    return len(m["pairs"])


def _few_heavy(w9, k=0, shares=(0.4, 0.3, 0.2, 0.1), spread=2e-4, seed=0):
    """Rays other than ``k`` planted with many particles (and a light halo); ray ``k``'s
    weight on ``len(shares)`` particles within ``spread`` rad of its exact direction."""
    conv, D, W = w9
    rest = [i for i in range(len(W)) if i != k]
    theta, _ = planted_rays(D[rest], W[rest], N - len(shares), noise=0.01,
                            halo_particles=0.3, halo_mass=0.01, seed=1)
    d = D[k]
    t = np.array([-d[1], d[0]])
    ang = np.random.default_rng(seed).uniform(-spread, spread, len(shares))
    V = np.cos(ang)[:, None] * d + np.sin(ang)[:, None] * t
    r = np.sqrt(np.asarray(shares) * abs(W[k]) * N)
    return np.vstack([theta, np.c_[np.sign(W[k]) * r, r[:, None] * V]])


def test_a_ray_held_by_four_heavy_particles_is_one_ray(w9):
    conv, D, W = w9
    theta = _few_heavy(w9)
    res = _rays_of(theta, conv)
    assert res.min_particles == 1 and res.plateau_particles == min_particles_default(N)
    assert len(res.rays) == 4 and res.resolved
    assert _matched(res, D, W) == 4
    few = [q for q in res.rays if q.n_particles == 4]
    assert len(few) == 1 and few[0].weight == pytest.approx(W[0], rel=1e-9)
    assert res.merged == [{"ray": res.rays.index(few[0]), "parts": 4, "data_points": []}]
    # the two failures this repairs: fragments counted apart, and the ray refused as "N too
    # small" under the particle floor of a ray that many particles hold
    assert len(_rays_of(theta, conv, merge=False).rays) == 7
    old = _rays_of(theta, conv, min_particles=min_particles_default(N))
    assert len(old.rays) == 3 and not old.resolved
    # the basins rule: one ray on the maximum, its weight the four particles' and the light
    # halo's in its basin (the planted halo holds 1 % of the mass over the whole circle)
    bas = _rays_of(theta, conv, rule="basins")
    assert bas.rule == "basins" and len(bas.rays) == 4 and _matched(bas, D, W) == 4
    k = int(np.argmax([q.direction @ D[0] for q in bas.rays]))
    assert np.all(bas.labels[-4:] == k)
    assert bas.rays[k].weight == pytest.approx(W[0], abs=1e-3)
    assert _rays_of(theta, conv, rule="auto").rule == "basins"


def test_two_heavy_particles_in_one_cell_are_one_ray_only_within_a_ray_width(w9):
    # two heavy particles inside one activation cell (pure bias and 0.05 or 5e-4 rad from it:
    # every point active): 5e-4 rad apart they are one ray held by two particles; 0.05 rad
    # apart, far beyond a heavy particle's width, two directions of the snapshot's measure,
    # reported as a cell conflict (the measure is then not the convex limit's)
    conv, D, W = w9
    theta = _few_heavy(w9, shares=(0.5, 0.5), spread=0.0)
    r = np.linalg.norm(theta[-2:, 1:], axis=1)

    def rays_at(angle):
        th = theta.copy()
        for i, phi in zip((-2, -1), (0.0, angle)):
            th[i, 1:] = r[i] * np.array([np.sin(phi), np.cos(phi)])
        return find_rays(th, XW, min_particles=1)

    far, near = rays_at(0.05), rays_at(5e-4)
    assert len(far.rays) == 5 and len(far.cell_conflicts) == 1 and not far.merged
    assert len(near.rays) == 4 and not near.cell_conflicts
    assert [m["parts"] for m in near.merged] == [2]


@pytest.mark.parametrize("ends, nb", [((1, 2), 1500), ((0, 2), 2500)])
def test_rays_joined_by_a_bridge_are_counted_where_they_are_apart(w9, ends, nb):
    # a dense arc of particles of three free-particle baselines each from ray `ends[0]` to ray
    # `ends[1]` (one sign): beyond some linkage threshold the rays on the arc are one cluster,
    # refused as thermal mass (rays 1, 2: 0.4 rad apart, its mean direction in the valley of
    # G) or too wide (rays 0, 3, 2: 1.1 rad of arc). The rays left made the widest plateau
    # before (J = 2 and J = 1); now no threshold from the first such join counts
    conv, D, W = w9
    theta, _ = planted_rays(D, W, N - nb, noise=0.005, halo_particles=0.3, halo_mass=0.01,
                            seed=1)
    a1, a2 = (np.arctan2(D[i, 1], D[i, 0]) for i in ends)
    ph = np.random.default_rng(2).uniform(min(a1, a2), max(a1, a2), nb)
    r = np.full(nb, np.sqrt(3 * 2 * TAU / LAMW))
    theta = np.vstack([theta, np.c_[r, r[:, None] * np.c_[np.cos(ph), np.sin(ph)]]])
    res = _rays_of(theta, conv)
    assert len(res.rays) == 4 and _matched(res, D, W) == 4
    assert not res.thermal
    first_zero = res.thresholds[np.argmax(res.counts == 0)]
    assert np.any(res.counts == 0) and res.plateau[1] < first_zero
    assert np.all(res.counts[res.thresholds >= first_zero] == 0)


def test_first_join_is_where_a_non_ray_holds_two_earlier_rays():
    from analysis.rays import _first_join
    thr = np.array([0.1, 0.2, 0.3, 0.4])
    lab = [np.array([0, 1, 2, 3]), np.array([0, 0, 1, 2]), np.array([0, 0, 0, 1]),
           np.array([0, 0, 0, 0])]
    rays = [np.array([1, 1, 0, 0], bool), np.array([1, 0, 0], bool),
            np.array([1, 0], bool), np.array([0], bool)]
    # particles 0, 1 are one ray at 0.1 and 0.2 (a merge of two rays into a ray is no join);
    # particle 2 is never in a ray; at 0.4 the non-ray holds ray {0,1,2}'s particles only
    assert _first_join(list(zip(lab, rays)), thr) == np.inf
    rays[1] = np.array([0, 0, 0], bool)                   # 0.2: rays 0 and 1 joined, no ray
    assert _first_join(list(zip(lab, rays)), thr) == 0.2
    # order of the thresholds given is not the order of the scan
    perm = [2, 0, 3, 1]
    assert _first_join([list(zip(lab, rays))[k] for k in perm], thr[perm]) == 0.2


@pytest.mark.parametrize("delta", [-0.008, -0.003, 0.005])
def test_a_satellite_joins_its_own_ray_not_the_next_one_across_a_valley(w9, delta):
    # ray 2 held by one particle on its exact direction (weight 0.17) and a satellite
    # (0.018) `delta` rad off it; ray 1, of the same sign, lies 0.40 rad away across a valley of
    # G about 0.12 deep. At the union's mean with ray 1 (next to ray 1's peak) G shows no
    # valley; on the arc between them it does
    conv, D, W = w9
    theta, _ = planted_rays(D[[0, 1, 3]], W[[0, 1, 3]], N - 2, noise=0.01,
                            halo_particles=0.3, halo_mass=0.01, seed=0)
    a2 = float(np.arctan2(D[2, 1], D[2, 0]))

    def particle(angle, weight):
        r = np.sqrt(weight * N)
        return np.array([r, r * np.cos(angle), r * np.sin(angle)])

    theta = np.vstack([theta, particle(a2, 0.17), particle(a2 + delta, 0.018)])
    res = _rays_of(theta, conv)
    assert len(res.rays) == 4 and _matched(res, D, W) == 4
    lab = res.labels[-2:]
    assert lab[0] == lab[1] >= 0
    assert res.rays[lab[0]].weight == pytest.approx(0.188, abs=1e-9)
    # the basins rule: both in the basin of ray 2's maximum (the halo's share added)
    bas = _rays_of(theta, conv, rule="basins")
    assert len(bas.rays) == 4 and _matched(bas, D, W) == 4
    lab = bas.labels[-2:]
    assert lab[0] == lab[1] >= 0
    assert bas.rays[lab[0]].weight == pytest.approx(0.188, abs=1e-3)


def test_no_valley_reads_the_whole_arc():
    from analysis.ray_linkage import _no_valley
    va, vb = np.array([1.0, 0.0]), np.array([0.0, 1.0])

    def two_peaks(V, s):                 # gap 0 at both ends, 0.5 midway
        return np.sin(2 * np.arctan2(V[:, 1], V[:, 0])) / 2

    def one_slope(V, s):                 # rising from va to vb
        return np.arctan2(V[:, 1], V[:, 0])

    assert not _no_valley(va, vb, np.pi / 2, 1, two_peaks)
    assert _no_valley(va, vb, np.pi / 2, 1, one_slope)
    assert _no_valley(vb, va, np.pi / 2, 1, one_slope)


def _rotated(theta, angle):
    """Every particle's direction turned by ``angle`` (radians) in the plane of (w, b)."""
    c, s = np.cos(angle), np.sin(angle)
    out = theta.copy()
    out[:, 1:] = theta[:, 1:] @ np.array([[c, s], [-s, c]])
    return out


@pytest.mark.parametrize("skew", [-0.01, 0.004, 0.01])
def test_basins_report_a_rays_particles_not_its_maximiser(w9, skew):
    # every kink of W9's convex limit lies on a data point; the rays' particles all turned by
    # `skew` (a finite-τ basin's mass is skewed about its mode). The basins rule still gives
    # each ray its particles (the four rays, their weights) and reports their mean direction,
    # `skew` off the maximiser: at finite τ the top of |G| is flat and its maximiser moves
    # with the residuals' last digits, the mean does not (docs/theory.md §6.1, §6.7)
    conv, D, W = w9
    theta, _ = planted_rays(D, W, N, noise=0.002, halo_particles=0.3, halo_mass=0.01, seed=3)
    theta = _rotated(theta, skew)
    bas = _rays_of(theta, conv, rule="basins")
    assert len(bas.rays) == 4
    for q in bas.rays:
        j = int(np.argmax(D @ q.direction))
        assert q.weight == pytest.approx(W[j], abs=2e-3)
        assert float(np.arccos(np.clip(D[j] @ q.direction, -1, 1))) == pytest.approx(
            abs(skew), abs=1e-3)


def test_basins_keep_the_particles_mean_where_the_maximum_is_not_pinned():
    # residuals whose |G| has smooth maxima (no data point's hyperplane through them): a ray
    # planted 0.02 rad off its maximum is one ray, at its particles' mean direction
    from analysis.certificate_maxima import ZERO_TOL, cell_maxima_of, maxima_of
    from analysis.ternary import ternary_pattern
    X = np.array([[-1.0], [-0.3], [0.2], [0.9]])
    R = np.array([0.3, -0.1, 0.25, 0.2])
    lam = 0.5
    mx = maxima_of(cell_maxima_of(R, X, lam))
    smooth = [(v, s) for v, s, _ in mx
              if not np.any(ternary_pattern(v, X, ZERO_TOL)[0] == 0)]
    assert smooth
    v, s = smooth[0]
    R = R / abs(float(np.asarray(certificate_at(v, X, R, lam))))      # |G(v*)| = 1
    t = np.array([-v[1], v[0]])
    ang = 0.02 + np.random.default_rng(0).normal(0, 0.002, 400)
    V = np.cos(ang)[:, None] * v + np.sin(ang)[:, None] * t
    r = np.full(400, 1.0)
    theta = np.c_[-s * r, r[:, None] * V]
    res = find_rays(theta, X, lam=lam, tau=1e-5, R=R, weight_scale=1.0, rule="basins")
    assert len(res.rays) == 1 and res.rule == "basins"
    mean = V.mean(axis=0) / np.linalg.norm(V.mean(axis=0))
    assert np.linalg.norm(res.rays[0].direction - mean) < 1e-12
    assert float(np.arccos(res.rays[0].direction @ v)) == pytest.approx(0.02, abs=2e-3)


def certificate_at(v, X, R, lam):
    from analysis.certificate import certificate
    return certificate(np.atleast_2d(v), X, R, lam)[0]


@pytest.mark.parametrize("per", [2, 4, 6, 10])
def test_basins_of_a_few_particles_per_ray_do_not_cross_valleys(w9, per):
    # the exact law's low-τ measure: each of the four rays held by `per` heavy particles within
    # 2e-3 rad of its direction, nothing else. A particle's 16 nearest neighbours then lie on
    # other hills; an ascent step across a valley of |G| merged all four into one basin (per 4)
    conv, D, W = w9
    rng = np.random.default_rng(per)
    rows = []
    for d, w in zip(D, W):
        t = np.array([-d[1], d[0]])
        ang = rng.uniform(-2e-3, 2e-3, per)
        V = np.cos(ang)[:, None] * d + np.sin(ang)[:, None] * t
        r = np.full(per, np.sqrt(abs(w) * 4))
        rows.append(np.c_[np.sign(w) * r, r[:, None] * V])
    res = _rays_of(np.vstack(rows), conv, rule="basins")
    assert len(res.rays) == 4 and _matched(res, D, W) == 4
    assert sorted(q.n_particles for q in res.rays) == [per] * 4
