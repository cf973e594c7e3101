"""Stationarity verdict of a stage (analysis/stationarity.py).

Oracles: AR(1) series with a known integrated autocorrelation time ``(1+φ)/(1−φ)`` and known
variance of the mean; series with a drift or a period-2 component that the tests must flag;
stationary series whose false-alarm rate must stay near the nominal level.
"""

import numpy as np
import pytest

from analysis import stationarity as st


def ar1(M, phi, n=3, seed=0, burn=True):
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((M, n))
    x = np.empty((M, n))
    x[0] = e[0] / np.sqrt(1 - phi ** 2) if burn else e[0]
    for t in range(1, M):
        x[t] = phi * x[t - 1] + e[t]
    return x


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_integrated_time_of_ar1(phi):
    x = ar1(200_000, phi, n=2, seed=1)
    want = (1 + phi) / (1 - phi)
    np.testing.assert_allclose(st.integrated_time(x), want, rtol=0.08)


def test_mcse_matches_spread_of_means_over_replicates():
    phi, M = 0.8, 4000
    means, ses = [], []
    for seed in range(200):
        x = ar1(M, phi, n=1, seed=seed)
        se, _ = st.mcse(x)
        means.append(x.mean())
        ses.append(se[0])
    exact = np.sqrt((1 + phi) / (1 - phi) / (1 - phi ** 2) / M)   # var 1/(1-φ²), τ (1+φ)/(1-φ)
    assert np.std(means) == pytest.approx(exact, rel=0.15)
    assert np.median(ses) == pytest.approx(exact, rel=0.1)


@pytest.mark.slow       # 6 s: many replicated series (out of the fast tier)
def test_stationary_series_pass_at_nominal_rate():
    # 12 000 draws (about 1000 effective in the second half): R-hat < 1.01 within one chain
    # needs about 900 (docs/theory.md §2.5); 2000 draws sufficed for the older floor of 20
    alarms = 0
    for seed in range(100):
        x = ar1(12000, 0.7, n=4, seed=seed)
        alarms += not st.verdict(np.arange(1, 12001), x).stationary
    assert alarms <= 5          # nominal family-wise level 1 %


def test_drift_is_flagged():
    x = ar1(2000, 0.7, n=4, seed=3) + np.linspace(0, 4.0, 2000)[:, None] * [1, 0, 0, 0]
    v = st.verdict(np.arange(1, 2001), x)
    assert not v.stationary
    assert v.drift_z > v.z_crit
    assert any(r.startswith("drift") for r in v.reasons)


def test_period_two_is_flagged_when_both_parities_are_observed():
    steps = np.arange(1, 2001) * 101          # odd stride: both parities
    x = ar1(2000, 0.3, n=4, seed=4) + 0.3 * np.where(steps % 2 == 0, 1.0, -1.0)[:, None]
    v = st.verdict(steps, x)
    assert not v.stationary and v.parity_z > v.z_crit
    assert any(r.startswith("parity") for r in v.reasons)
    # with the predictor one step earlier, the lag-1 statistic sees it at even steps only
    even_steps = steps * 2
    base, base_prev = ar1(2000, 0.3, n=4, seed=8), ar1(2000, 0.3, n=4, seed=7)
    v1 = st.verdict(even_steps, base + 0.3, F_previous=base_prev - 0.3)
    assert v1.parity_z > v1.z_crit and any(r.startswith("parity") for r in v1.reasons)
    assert st.verdict(even_steps, base, F_previous=base_prev).stationary
    # even steps only: the parity test cannot run (nan), the stability number must do it
    v2 = st.verdict(steps * 2, x, eta_h=np.full(2000, 2.4))
    assert v2.parity_z != v2.parity_z
    assert any(r.startswith("unstable step") for r in v2.reasons)


def test_unrelaxed_series_is_flagged():
    """A slow exponential relaxation, a few of its times long: drift or too few samples."""
    t = np.arange(2000)
    x = ar1(2000, 0.5, n=2, seed=5) * 0.1 + np.exp(-t / 1500.0)[:, None]
    v = st.verdict(t + 1, x)
    assert not v.stationary


def test_too_short_for_a_verdict():
    v = st.verdict(np.arange(1, 9), np.zeros((8, 2)))
    assert not v.stationary and "too few" in v.reasons[0]
    assert v.to_dict()["mcse"] is None


def test_ray_drift():
    X = np.array([[-1.0], [1.0]])
    # two rays: +1 at v ∝ (1, 0) (cell: on at x=1 only), -1 at v ∝ (-1, 0.5)
    a = np.array([[1.0, 1.0, 0.0], [-1.0, -1.0, 0.5]])
    w = a[:, 0] * np.linalg.norm(a[:, 1:], axis=1) / 2
    b = a.copy()
    b[0, 0] = 1.1                                      # first ray 10 % heavier
    c = a.copy()
    c[1, 1] = 1.0                                      # second ray moved to another cell
    tot = np.abs(w).sum()
    assert st.ray_drift([a, b], X) == pytest.approx(0.1 * w[0] / (tot + 0.1 * w[0]))
    wc = -1.0 * np.linalg.norm(c[1, 1:]) / 2
    assert st.ray_drift([a, c], X) == pytest.approx(max(abs(w[1]), abs(wc))
                                                    / max(tot, w[0] + abs(wc)))
    assert st.ray_drift([a, a], X) == 0.0
    assert st.ray_drift([a], X) != st.ray_drift([a], X)    # nan
    v = st.verdict(np.arange(1, 2001), ar1(2000, 0.5, n=2, seed=6), snapshots=[a, c], X=X)
    assert any(r.startswith("ray weights") for r in v.reasons)


def _cloud(phi0, n, spread, a, seed):
    """``n`` particles of sign ``a`` at directions ``(cos φ, sin φ)`` in the (w, b) plane,
    ``φ ~ φ0 + spread·N(0, 1)``, with norms in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    phi = phi0 + spread * rng.standard_normal(n)
    r = rng.uniform(0.5, 1.5, n)
    return np.column_stack([np.full(n, a) * r, r * np.cos(phi), r * np.sin(phi)])


def test_ray_drift_joins_the_two_sides_of_a_kink_on_a_data_point():
    """A ray whose kink is at the data point x = 0 (``b = 0``) straddles the point's cell
    boundary; its particles changing side between snapshots (φ → −φ: same |a|, |u|, so the
    same weight) is no drift, while the per-cell weights change by most of the ray's."""
    X = np.array([[-1.0], [0.0], [1.0]])
    ray = _cloud(0.0, 60, 0.002, 1.0, seed=1)               # kink at x = 0: v ≈ (1, 0)
    other = _cloud(np.pi - 0.6, 40, 0.01, -1.0, seed=2)     # v ≈ (−0.83, 0.56)
    first = np.vstack([ray, other])
    flipped = ray.copy()
    flipped[:, 2] = np.abs(flipped[:, 2])                   # every particle on the b > 0 side
    second = np.vstack([flipped, other])
    assert st.ray_drift([first, second], X) == pytest.approx(0.0, abs=1e-12)
    # the old per-cell measure: the ray's mass on the b < 0 side moved to the b > 0 side
    below = ray[:, 2] < 0
    moved = np.sum(ray[below, 0] * np.linalg.norm(ray[below, 1:], axis=1)) / len(first)
    assert moved > 0.2 * np.sum(np.abs(first[:, 0]) * np.linalg.norm(first[:, 1:], axis=1)
                                / len(first))


def test_ray_drift_keeps_two_rays_on_either_side_of_a_boundary_apart():
    """Two compact rays 0.3 rad on either side of x = 0's boundary (many spreads from it)
    exchanging mass: the drift is the mass moved over the total, as for any two rays."""
    X = np.array([[-1.0], [0.0], [1.0]])
    left, right = _cloud(-0.3, 50, 0.005, 1.0, seed=3), _cloud(0.3, 50, 0.005, 1.0, seed=4)
    first = np.vstack([left, right])
    second = first.copy()
    second[:10, 1:] = right[:10, 1:] / np.linalg.norm(right[:10, 1:], axis=1)[:, None] \
        * np.linalg.norm(left[:10, 1:], axis=1)[:, None]    # 10 particles jump, norms kept
    w = first[:, 0] * np.linalg.norm(first[:, 1:], axis=1) / len(first)
    assert st.ray_drift([first, second], X) == pytest.approx(w[:10].sum() / w.sum())
