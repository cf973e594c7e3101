"""The outside checks of benchmarks/outside_*.py: published settings run in their small versions,
each outcome held to an oracle (a closed form, a brute-force count or an independent
reference), never to a number measured by the code under test."""

import math

import numpy as np
import pytest

from benchmarks import outside_chizat_2d as chz
from benchmarks import outside_orthogonal_gd as orth
from benchmarks import outside_skm22_kinks as skm
from benchmarks import outside_width_bias as wb

# --- one ReLU neuron on orthogonal inputs (benchmarks/outside_orthogonal_gd.py) -------------


@pytest.fixture(scope="module")
def orthogonal():
    X, y = orth.orthogonal_data(6, 30, seed=3)
    assert np.all((y > 0).any() and (y < 0).any())
    G = X @ X.T
    assert np.array_equal(G, np.diag(np.diag(G)))        # exactly orthogonal rows
    return X, y


def test_orthogonal_minimum_norm_solution_is_the_explicit_one(orthogonal):
    """The project's QP (Clarabel, polished) finds ``w* = Σ_{y>0} y_i x_i/|x_i|²``."""
    from analysis.minnorm import minnorm
    X, y = orthogonal
    mn = minnorm(X, y, (1.0,))
    w = orth.minnorm_explicit(X, y)
    assert np.linalg.norm(mn.W[0] - w) <= 1e-12 * np.linalg.norm(w)


@pytest.mark.parametrize("c", [0.05, 0.2, 0.8, 1.5])
def test_zero_start_gd_ends_eta_times_the_negatives_norm_from_the_minimum_norm_solution(
        orthogonal, c):
    """Zero-start GD (relu'(0) = 1 on the first step) ends at exactly ``η‖X₋ᵀy₋‖`` from the
    minimum-norm solution of the QP, with the negatives' span coefficients frozen at ``η y_i``
    and the pattern ``1[y > 0]`` from step 1; the project's closed form is that end point."""
    from analysis.minnorm import closed_form_limit, minnorm
    from solvers.highdim_gd import gd
    X, y = orthogonal
    eta = c / float(np.max(np.sum(X ** 2, axis=1)))
    res = gd(X, y, eta=eta, tol=1e-15, max_steps=200_000)
    assert res.converged
    w_star = minnorm(X, y, (1.0,)).W[0]
    neg = y < 0
    want = eta * np.linalg.norm(X[neg].T @ y[neg])
    assert np.linalg.norm(res.W[0] - w_star) == pytest.approx(want, rel=1e-12)
    assert np.array_equal(res.alpha[0, neg], eta * y[neg])
    assert res.last_change == 1 and np.array_equal(res.pattern[0], y > 0)
    w_cf = closed_form_limit(X, y, eta)[0]
    assert np.linalg.norm(res.W[0] - w_cf) <= 1e-12 * np.linalg.norm(w_cf)


def test_the_gap_is_linear_in_the_step(orthogonal):
    """``gap(η)/η`` is one constant, the closed form ``‖X₋ᵀy₋‖``, over a decade and a half of
    steps: log-log slope 1."""
    X, y = orthogonal
    rows = orth.measure(X, y, (0.02, 0.1, 0.5, 1.0))
    k = orth.expected_gap(X, y, 1.0)
    for r in rows:
        assert r["gap_over_eta"] == pytest.approx(k, rel=1e-12)
    assert orth.slope(rows) == pytest.approx(1.0, abs=1e-10)


def test_zero_start_conventions(orthogonal):
    """With relu'(0) = 0 the zero start never moves (distance ‖w*‖ whatever η); the all-active
    start ``β_0 = ε1`` freezes its negatives at ``ε/|x_i|² + η(y_i − ε)`` and tends to the
    zero start as ``ε → 0``."""
    from solvers.highdim_gd import gd, initial_weights
    X, y = orthogonal
    eta = 0.3 / float(np.max(np.sum(X ** 2, axis=1)))
    assert not np.any(orth.gd_zero_derivative(X, y, eta))
    w_star = orth.minnorm_explicit(X, y)
    for eps in (1e-2, 1e-4):
        res = gd(X, y, eta=eta, W0=initial_weights("all_active", X, (1.0,), eps=eps),
                 tol=1e-15, max_steps=200_000)
        got = np.linalg.norm(res.W[0] - w_star)
        assert got == pytest.approx(orth.expected_gap_all_active(X, y, eta, eps), rel=1e-11)
    zero = orth.expected_gap(X, y, eta)
    assert abs(orth.expected_gap_all_active(X, y, eta, 1e-9) - zero) < 1e-7 * zero


def test_orthogonal_script_small_version_reports_the_expected_outcome(capsys):
    assert orth.main(["--small"]) == 0
    assert "outcome: as expected" in capsys.readouterr().out


# --- Chizat's 2-D weight-decay setting (benchmarks/outside_chizat_2d.py) --------------------


def test_gd_step_is_m_times_the_gradient_of_the_zero_temperature_free_energy():
    """The script's GD step ``θ_i − η ∇Ψ(θ_i)`` is ``θ_i − η m ∇_{θ_i} F₀`` for
    ``F₀ = (1/2n)Σ(f − y)² + (λ/2m)Σ|θ_i|²`` (central differences), and ``F₀`` is that
    expression written out."""
    from solvers import numpy_model
    X, y = chz.data()
    lam = 0.01
    theta = chz.initial(7, 0.8, seed=4)
    theta[:, 0] *= np.linspace(0.5, 1.5, 7)
    m = len(theta)
    f = (np.maximum(theta[:, 1:-1] @ X.T + theta[:, -1:], 0.0) * theta[:, :1]).mean(axis=0)
    direct = np.mean((f - y) ** 2) / 2 + lam / (2 * m) * np.sum(theta ** 2)
    assert chz.objective(theta, X, y, lam) == pytest.approx(direct, rel=1e-14)
    g = numpy_model.drift(theta, X, y, lam)
    h = 1e-6
    fd = np.zeros_like(theta)
    for idx in np.ndindex(theta.shape):
        tp, tm = theta.copy(), theta.copy()
        tp[idx] += h
        tm[idx] -= h
        fd[idx] = (chz.objective(tp, X, y, lam) - chz.objective(tm, X, y, lam)) / (2 * h)
    np.testing.assert_allclose(g, m * fd, rtol=1e-6, atol=1e-9)


def test_chizat_small_version_reaches_the_convex_reference(capsys):
    """At λ = 0.1 (relaxation in 10 time units) GD from a balanced start reaches the convex
    ``τ → 0`` reference: the objective is bounded below by the convex optimum (any particle
    measure is feasible) and lands within 0.2 % of it, the predictor within 10⁻², and every
    ray found lies within 0.05 rad of a convex ray of its sign, the rays near each convex ray
    summing to its weight within 1 %."""
    r = chz.main(["--small"])
    assert r["F"] >= r["particle_objective"] - 1e-15
    assert r["particle_objective"] >= r["F_convex"] * (1 - 1e-9)
    assert 0 <= r["rel_gap"] < 2e-3
    assert r["max_abs_diff_train"] < 1e-2
    assert r["max_abs_G"] == pytest.approx(1.0, abs=0.02)
    groups = [g for g in r["groups"] if g["direction"] is not None]
    assert len(groups) == len(r["groups"])             # no ray of a sign the reference lacks
    for g in groups:
        assert g["members"] >= 1 and g["max_angle"] < 0.05
        assert g["weight_sum"] == pytest.approx(g["weight"], rel=1e-2)
    assert "reached (to 1 %)" in capsys.readouterr().out


# --- [SKM22]: at most three kinks between consecutive inputs (outside_skm22_kinks.py) -------


def _brute_force_counts(positions, edges, tol):
    """Per interval, the kinks in ``[edges[i] − tol, edges[i+1] + tol]`` (equal to the rule of
    ``kinks_between`` when ``tol`` is below half the smallest gap)."""
    return np.array([sum(edges[i] - tol <= p <= edges[i + 1] + tol for p in positions)
                     for i in range(len(edges) - 1)])


def test_kinks_between_consecutive_inputs_by_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(200):
        x = np.round(rng.uniform(-3, 3, rng.integers(2, 9)), 1)
        edges = np.unique(x)
        if len(edges) < 2:
            continue
        tol = 0.3 * float(np.min(np.diff(edges)))
        pos = np.concatenate([rng.uniform(-4, 4, rng.integers(0, 8)),
                              rng.choice(edges, rng.integers(0, 3)) + rng.uniform(-tol, tol)])
        got = skm.kinks_between(pos, x, tol)
        assert np.array_equal(got["per_interval"], _brute_force_counts(pos, edges, tol))
        inside = [p for p in pos if edges[0] - tol <= p <= edges[-1] + tol]
        assert len(got["outside"]) == len(pos) - len(inside)


def test_kink_positions_in_one_dimension():
    from analysis.kinks import data_kinks
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    v = np.array([[2.0, -3.0], [-1.0, 0.5]])           # kinks at x = 1.5 and x = 0.5
    assert skm.kink_positions(data_kinks(v, X)) == pytest.approx([0.5, 1.5])


@pytest.mark.parametrize("name", sorted(skm.SETS))
def test_convex_reference_has_at_most_three_kinks_between_consecutive_inputs(name):
    """[SKM22]'s bound on the exact ``τ → 0`` reference of every shipped set, for its rays
    above the 1 % floor and for all of them (a kink left of every input, as D7's and D12's
    at x < 0 from a ray active on all of them, is between no two inputs)."""
    from analysis.kinks import data_spread
    from analysis.ray_checks import convex_counts
    from analysis.references import convex_reference
    from meanfield import config, data
    cfg = config.from_dict(skm.cell_config(name, small=False))
    ds = data.from_config(cfg)
    conv = convex_reference(ds.X, ds.y, cfg.dynamics.lam)
    tol = skm.ON_POINT_TOL * data_spread(ds.X)
    for kinks in (convex_counts(conv, ds.X)["kinks"], conv.kinks()):
        k = skm.kinks_between(skm.kink_positions(kinks), ds.X[:, 0], tol)
        assert k["max"] <= skm.MAX_KINKS


@pytest.mark.slow
def test_skm22_small_run_has_at_most_three_kinks_between_inputs_at_the_convex_kinks(
        tmp_path, one_thread):
    """The small version on D7: at the coldest stationary stage the particle kinks are at
    most three per interval and each lies within 5 % of the data's spread of a convex kink,
    the numbers of kinks equal."""
    r = skm.main(["--small", "--sets", "D7", "--workdir", str(tmp_path)])["D7"]
    assert r["stationary"]
    assert r["particles"]["max"] <= skm.MAX_KINKS
    assert len(r["positions"]) == len(r["positions_convex"])
    tol = 0.05 * r["tol"] / skm.ON_POINT_TOL
    for p in r["positions"]:
        assert min(abs(p - q) for q in r["positions_convex"]) <= tol


# --- the width bias is O(1/N) (benchmarks/outside_width_bias.py) ----------------------------


def test_loglog_fit_recovers_a_power_law():
    N = np.array([16, 32, 64, 128, 256])
    f = wb.loglog_fit(N, 3.0 * N ** -1.0, 0.01 * 3.0 * N ** -1.0)
    assert f["slope"] == pytest.approx(-1.0, abs=1e-12)
    assert f["lo"] < -1.0 < f["hi"] and f["hi"] - f["lo"] < 0.05
    g = wb.loglog_fit(N, 2.0 * N ** -0.5, 0.01 * 2.0 * N ** -0.5)
    assert not (g["lo"] <= -1.0 <= g["hi"])


@pytest.mark.slow
def test_width_bias_small_version_falls_like_one_over_n(tmp_path, one_thread):
    """N = 16 … 128, exact sampler: the distance to the Gibbs reference (quadrature) falls with
    slope −1 within an interval narrow enough to exclude −1/2 and −3/2, and the measured
    coefficient ``N · projection`` agrees with the closed-form ``|B|`` of docs/theory.md §2.3
    estimated from the particles."""
    out = tmp_path / "wb.png"
    r = wb.main(["--small", "--out", str(out)])
    f = r["fit_distance"]
    assert f["lo"] <= -1.0 <= f["hi"]
    assert f["hi"] - f["lo"] < 0.5
    assert out.stat().st_size > 0
    row = r["rows"][-1]
    coef = row["N"] * row["projection"]
    assert 0.7 < coef / float(np.linalg.norm(r["B"])) < 1.5
    assert math.isfinite(r["fit_projection"]["slope"])
