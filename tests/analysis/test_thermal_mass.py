"""Thermal mass is not a ray (docs/theory.md §6.5): the certificate-gap threshold, its closed
forms, planted clusters, and particle runs on data whose convex limit has no ray.

The runs: ``gaussian(n = 6, d, seed = 1)`` at ``λ = 1.1 λ₀`` with
``λ₀ = max_v |Σ_j y_j (v·x̃_j)_+| / n``, above which ``f ≡ 0`` is the convex optimum (checked
with the convex solver, an independent reference). There every particle is thermal; the mass
concentrates at the maximum of ``|G| ≈ 1/1.1``, and the former criterion (mean particle mass
at least 3 free-particle baselines) counted that bump as a ray at every temperature."""

import numpy as np
import pytest

from analysis.certificate import certificate
from analysis.rays import (
    find_rays,
    halo_baseline,
    label_weight_scale,
    mass_gap,
    thermal_gap_threshold,
)
from analysis.synthetic import planted_rays
from solvers.geometry import lifted

X2 = np.array([[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4], [-1.1, 0.3], [0.2, 0.1]])


def test_threshold_mass_gap_and_weight_scale_closed_forms():
    y = np.array([1.0, -2.0, 0.5, 0.0, 1.5, -1.0])
    L = np.c_[X2, np.ones(len(X2))]
    cy = label_weight_scale(X2, y)
    assert cy == pytest.approx(np.sqrt(np.mean(y ** 2)) / np.sqrt(np.mean(np.sum(L ** 2, 1))))
    assert label_weight_scale(X2, np.zeros(6)) is None
    # ε(τ) = κ (d+1) τ / (λ c_y): linear in τ and κ, invariant under y → αy, λ → αλ, τ → α²τ
    e = thermal_gap_threshold(2, 1e-3, 0.05, cy)
    assert e == pytest.approx(3e-3 / (0.05 * cy))
    assert thermal_gap_threshold(2, 1e-4, 0.05, cy) == pytest.approx(e / 10)
    assert thermal_gap_threshold(2, 1e-3, 0.05, cy, kappa=3.0) == pytest.approx(3 * e)
    a = 7.0
    assert thermal_gap_threshold(2, a * a * 1e-3, a * 0.05,
                                 label_weight_scale(X2, a * y)) == pytest.approx(e)
    assert thermal_gap_threshold(2, 1e-3, 0.05, None) == np.inf
    # the radial law 1 − G² = B/m inverted: m = B/(1 − G²) gives back 1 − |G|
    B = halo_baseline(2, 1e-3, 0.05)
    G = np.array([0.0, 0.5, 0.9, 0.999])
    assert mass_gap(B / (1 - G ** 2), B) == pytest.approx(1 - G, abs=1e-12)
    assert mass_gap(np.array([0.5 * B, 0.0]), B).tolist() == [1.0, 1.0]


def test_planted_cluster_is_a_ray_only_when_its_mass_closes_the_gap():
    # three planted rays of mean particle mass m; the gap their mass implies is about B/(2m),
    # the threshold κ B / c_y: rays while m ≥ c_y/(2κ), thermal mass beyond, at any τ
    dirs = np.array([[0.6, -0.8, 0.3], [-0.2, 0.5, 0.8], [0.9, 0.1, -0.4]])
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    w = np.array([0.3, -0.2, 0.25])
    theta, _ = planted_rays(dirs, w, 3000, noise=0.01, halo_particles=0.0, seed=2)
    m = np.abs(w).sum()                          # planted: every ray particle has mean mass Σ|c|
    for tau in (1e-3, 1e-4):
        kw = {"lam": 0.05, "tau": tau}
        assert len(find_rays(theta, X2, **kw, weight_scale=1.0 * m).rays) == 3
        hot = find_rays(theta, X2, **kw, weight_scale=4.0 * m)
        assert hot.rays == [] and len(hot.thermal) == 3
        assert hot.gap_threshold == pytest.approx(thermal_gap_threshold(2, tau, 0.05, 4 * m))
        for t in hot.thermal:
            k = int(np.argmin([np.arccos(np.clip(np.dot(t["direction"], v), -1, 1))
                               for v in dirs]))
            assert t["weight"] == pytest.approx(w[k], rel=0.02)
            assert t["gap"] > t["gap_threshold"] and t["reason"] == "certificate gap"
            B = halo_baseline(2, tau, 0.05)
            assert t["gap"] == pytest.approx(B / (2 * m), rel=0.1)
        # κ = 0 switches the test off; a larger κ lets them through again
        assert len(find_rays(theta, X2, **kw, weight_scale=4 * m, thermal_gap=0).rays) == 3
        assert len(find_rays(theta, X2, **kw, weight_scale=4 * m, thermal_gap=4).rays) == 3


def test_certificate_gap_decides_when_mass_and_G_agree():
    # one cluster at a direction where the given residuals put G = −0.9 (a > 0), with particle
    # masses the radial law gives there (1 − G² = B/m): a thermal bump. It is refused while
    # ε(τ) < 0.1 and counted once τ is so hot that ε(τ) > 0.1.
    v = np.array([0.3, -0.2, 0.93])
    v /= np.linalg.norm(v)
    phi = np.maximum(lifted(X2) @ v, 0.0)
    lam = 0.05
    R = -0.9 * lam * phi / (phi @ phi)            # G(v) = R·φ/λ = −0.9
    assert certificate(v[None], X2, R, lam)[0] == pytest.approx(-0.9)
    cy = 0.5
    for tau, is_ray in ((1e-4, False), (5e-4, False), (2e-3, True)):   # ε = 120 τ
        B = halo_baseline(2, tau, lam)
        m = B / (1 - 0.81)
        theta, _ = planted_rays(v[None], [m], 400, noise=0.01, halo_particles=0.0, seed=1)
        res = find_rays(theta, X2, lam=lam, tau=tau, R=R, weight_scale=cy)
        assert res.gap_threshold == pytest.approx(3 * tau / (lam * cy))
        assert (len(res.rays) == 1) == is_ray
        if not is_ray:
            t, = res.thermal
            assert t["G"] == pytest.approx(-0.9, abs=0.01)
            assert t["gap"] == pytest.approx(0.1, abs=0.01)
            # the radial law's thermal weight for that G and particle count: the planted one
            assert t["radial_weight"] == pytest.approx(t["weight"] * 0.9, rel=0.02)


# --- particle runs on data whose convex limit has no ray -----------------------------------

def _lam0(X, y):
    V = np.random.default_rng(0).standard_normal((100000, X.shape[1] + 1))
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    return float(np.abs(certificate(V, X, -y / len(y), 1.0)).max())


@pytest.fixture(scope="module", params=[1, 2])
def no_ray_run(request, tmp_path_factory):
    from conftest import toml

    from meanfield import data
    from solvers.convex import convex
    d = request.param
    ds = data.gaussian(6, d, 1)
    lam = 1.1 * _lam0(ds.X, ds.y)
    conv = convex(ds.X, ds.y, lam)
    assert len(conv.weights) == 0 and np.allclose(conv.f_train, 0.0)     # no ray at τ → 0
    cfg = {"data": {"kind": "inline", "X": ds.X.tolist(), "y": ds.y.tolist()},
           "model": {"n_particles": 300},
           "dynamics": {"lam": lam, "eta": 0.05, "taus": [1e-3, 1e-4],
                        "steps_per_tau": "auto", "max_steps_per_tau": 6000, "seed": 0},
           "output": {"observe_every": 20}}
    tmp = tmp_path_factory.mktemp(f"noray{d}")
    from conftest import run_one_thread
    text = toml({k: {kk: vv for kk, vv in v.items()} for k, v in cfg.items()})
    return d, run_one_thread(text, tmp)


def test_no_ray_data_gives_no_ray_and_reports_thermal_mass(no_ray_run):
    from analysis.run_analysis import analyze_frame
    from meanfield.report import analyze_run, markdown
    from meanfield.store import open_run
    d, path = no_ray_run
    rep = analyze_run(str(path), w2=False, convex=True, references=False,
                      sensitivity=False)
    row = rep["ladder"][-1]
    assert row["tau"] == 1e-4 and row["J_convex"] == 0
    cold = [s for s in rep["snapshots"] if s["tau"] == 1e-4]
    assert cold and all(s["n_rays"] == 0 and s["n_hyperplanes"] == 0 for s in cold)
    assert row["J"] == 0 and row["K"] == 0
    hot = [t for s in cold for t in s["thermal_mass"]]
    assert hot
    for t in hot:
        assert t["gap"] > t["gap_threshold"] == pytest.approx(cold[0]["thresholds"][
            "gap_threshold"])
        assert 0.6 < abs(t["G"]) < 0.97
        assert abs(t["weight"]) < 0.01                 # ∝ τ: a few 10⁻⁴ at τ = 10⁻⁴
        if t["n_particles"] >= 20:                     # the radial law's weight, within noise
            assert 0.4 < t["weight"] / t["radial_weight"] < 2.5
    assert "Thermal mass (not rays" in markdown(rep)
    # the former criterion counts the bump as a ray: what this test guards against
    run = open_run(path)
    former = [len(analyze_frame(run, k, thermal_gap=0.0).rays.rays)
              for k in range(run.n_frames) if run.frame_tau[k] == 1e-4]
    assert max(former) >= 1
