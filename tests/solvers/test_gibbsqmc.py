"""The randomized-QMC Gibbs reference (solvers/gibbsqmc.py) against independent oracles: the
quadrature reference for d ≤ 2, closed-form sphere integrals for the proposal, the symmetries
of the problem, and a particle run for d = 3."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import DATA, toml
from scipy.special import gammaln

from solvers.gibbs import gibbs
from solvers.gibbsqmc import GibbsAccuracyError, GibbsBarrierError, QMCGibbsReference, gibbs_qmc
from solvers.qmcproposal import Cone, Peak, build_proposal


def _area(d):
    return math.exp(math.log(2.0) + 0.5 * (d + 1) * math.log(math.pi) - gammaln(0.5 * (d + 1)))


def _data(name):
    from meanfield import config, data
    cfg = config.load(DATA / f"{name}.toml")
    return data.from_config(cfg), cfg.dynamics.lam, cfg.taus


# ---------------------------------------------------------------------------------------------
# the proposal: its density is the law it samples
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_proposal_weights_integrate_closed_forms(d):
    """With weights 1/(M q), the sample integrates 1 to |S^d| and (v·e)_+² to |S^d|/(2(d+1));
    a density that is not the sampled law misses both by far more than the scatter."""
    rng = np.random.default_rng(d)
    D = d + 1
    v1 = rng.standard_normal(D)
    v1 /= np.linalg.norm(v1)
    v2 = rng.standard_normal(D)
    v2 /= np.linalg.norm(v2)
    # a peak inside its cell, and one on a kink whose normal is orthogonal to v2
    nrm = rng.standard_normal(D)
    nrm -= (nrm @ v2) * v2
    nrm /= np.linalg.norm(nrm)
    peaks = [Peak(v1, math.sqrt(1 - 1e-3), 1e-3, np.zeros((D, 0))),
             Peak(v2, math.sqrt(1 - 1e-4), 1e-4, nrm[:, None])]
    slope = lambda V: 1e-4 + 0.5 * np.abs(V @ nrm)                # 1 − G² across the kink
    prop = build_proposal(peaks, d, 2 ** 13, slope)
    assert any(isinstance(c, Cone) for c in prop.components)
    e = rng.standard_normal(D)
    e /= np.linalg.norm(e)
    I0, I2 = [], []
    for seed in range(8):
        V, W = prop.sample(seed)
        assert np.allclose(np.linalg.norm(V, axis=1), 1.0)
        I0.append(W.sum())
        I2.append(W @ np.maximum(V @ e, 0.0) ** 2)
    for est, want in ((I0, _area(d)), (I2, _area(d) / (2 * (d + 1)))):
        se = np.std(est, ddof=1) / math.sqrt(len(est))
        assert abs(np.mean(est) - want) <= 4 * se + 1e-12 * want, (np.mean(est), want, se)
        assert se < 0.01 * want


# ---------------------------------------------------------------------------------------------
# d ≤ 2: against the quadrature
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["skm22_d4", "skm22_d7", "two_point_odd", "two_point_even"])
def test_agrees_with_quadrature_on_the_ladder(name):
    ds, lam, taus = _data(name)
    taus = [t for t in taus if t > 0]
    quad = gibbs(ds.X, ds.y, lam, taus)
    qmc = gibbs_qmc(ds.X, ds.y, lam, taus)
    for q, s in zip(quad, qmc):
        assert s.tau == q.tau and s.quad_error > 0
        diff = np.max(np.abs(s.f_train - q.f_train))
        assert diff <= 3 * s.quad_error, (name, s.tau, diff, s.quad_error)
        if s.tau >= 1e-3:
            assert s.quad_error <= 1e-4 * np.max(np.abs(s.f_train))
        assert abs(s.max_abs_G - q.max_abs_G) <= 0.05 * (1 - q.max_abs_G)   # the barrier distance


@pytest.mark.slow
def test_agrees_with_quadrature_plane8():
    ds, lam, _ = _data("plane8")
    q = gibbs(ds.X, ds.y, lam, 1e-2)
    s = gibbs_qmc(ds.X, ds.y, lam, 1e-2)
    assert np.max(np.abs(s.f_train - q.f_train)) <= 3 * s.quad_error
    assert s.quad_error <= 1e-4 * np.max(np.abs(s.f_train))
    # the prediction off the data uses the same samples
    x = np.array([[0.3, -0.2], [1.5, 0.5]])
    assert np.allclose(s.predict(x), q.predict(x), atol=20 * s.quad_error)


# ---------------------------------------------------------------------------------------------
# symmetries (d = 3)
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gauss3():
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((6, 3)), rng.standard_normal(6)
    return X, y, gibbs_qmc(X, y, 0.1, 2e-2, rtol=1e-3)


def test_rotation_of_the_inputs_leaves_f_unchanged(gauss3):
    X, y, s = gauss3
    Q, _ = np.linalg.qr(np.random.default_rng(7).standard_normal((3, 3)))
    r = gibbs_qmc(X @ Q.T, y, 0.1, 2e-2, rtol=1e-3, seed=3)
    tol = 3 * np.sqrt(s.f_stderr ** 2 + r.f_stderr ** 2)
    assert np.all(np.abs(r.f_train - s.f_train) <= tol)
    assert r.max_abs_G == pytest.approx(s.max_abs_G, abs=1e-9 + 10 * s.quad_error)


def test_permuting_the_data_permutes_f(gauss3):
    X, y, s = gauss3
    p = np.random.default_rng(8).permutation(len(y))
    r = gibbs_qmc(X[p], y[p], 0.1, 2e-2, rtol=1e-3, seed=4)
    tol = 3 * np.sqrt(s.f_stderr[p] ** 2 + r.f_stderr ** 2)
    assert np.all(np.abs(r.f_train - s.f_train[p]) <= tol)


def test_fixed_point_and_sampled_measure(gauss3):
    """``f = y + nR`` holds for the mean; particles drawn from the solution reproduce f."""
    X, y, s = gauss3
    assert s.residual < 1e-6
    assert s.max_abs_G < 1
    theta = s.sample_particles(200_000, seed=1)
    Xt = np.hstack([X, np.ones((len(y), 1))])
    f = np.mean(theta[:, :1] * np.maximum(theta[:, 1:] @ Xt.T, 0.0), axis=0)
    se = np.std(theta[:, :1] * np.maximum(theta[:, 1:] @ Xt.T, 0.0), axis=0) / math.sqrt(2e5)
    assert np.all(np.abs(f - s.f_train) <= 4 * se + 3 * s.f_stderr)


# ---------------------------------------------------------------------------------------------
# accuracy out of reach, input errors, command line
# ---------------------------------------------------------------------------------------------

def test_accuracy_out_of_reach_is_an_error_not_an_answer():
    X = np.array([[-2.0], [-1.0], [0.0], [1.0], [2.0]])
    y = np.array([1.0, -0.5, 0.3, 0.8, -1.0])
    ref = QMCGibbsReference(X, y, 0.05, rtol=1e-4, points=2 ** 12, max_points=2 ** 13)
    with pytest.raises(GibbsAccuracyError) as ei:
        ref.solve([1e-1, 1e-3])
    e = ei.value
    assert e.tau == 1e-1 and e.error > e.target
    # with no temperature solved before it, hotter ones are searched: the one named is
    # hotter and really reaches the accuracy with the same settings
    assert e.coldest is not None and e.coldest > 1e-1 and f"tau={e.coldest:.3g}" in str(e)
    sol = QMCGibbsReference(X, y, 0.05, rtol=1e-4, points=2 ** 12,
                            max_points=2 ** 13).solve([e.coldest])[0]
    assert sol.quad_error <= 1e-4 * np.max(np.abs(sol.f_train))


def test_out_of_reach_search_names_the_coldest_reachable_tau():
    """The search between the last temperature reached and the failing one (a solver that
    reaches the accuracy exactly for tau >= 2e-3)."""
    X = np.array([[-1.0], [0.5], [2.0]])
    y = np.array([0.3, -0.2, 0.5])

    class Fake(QMCGibbsReference):
        def _solve_one(self, R, tau_prev, tau):
            if tau >= 2e-3:
                return type("S", (), {"R": R, "tau": tau})(), None
            return None, (1.0, 0.1, 64)

    ref = Fake(X, y, 0.05)
    with pytest.raises(GibbsAccuracyError) as ei:
        ref.solve([1e-2, 1e-4])
    e = ei.value
    assert e.tau == 1e-4 and e.error == 1.0 and e.target == 0.1
    # two geometric bisections of [1e-4, 1e-2]: 1e-3 fails, then sqrt(1e-2·1e-3) reached
    assert e.coldest == pytest.approx(math.sqrt(1e-2 * 1e-3))
    assert f"tau={e.coldest:.3g}" in str(e)


class _ReachesFrom(QMCGibbsReference):
    """A solver that finds the fixed point exactly for tau >= 2e-3 and fails below with
    ``failure`` (an exception to raise, or the tuple of an accuracy failure)."""

    failure = (1.0, 0.1, 64)

    def _solve_one(self, R, tau_prev, tau):
        if tau >= 2e-3:
            return type("S", (), {"R": R, "tau": tau})(), None
        if isinstance(self.failure, Exception):
            raise self.failure
        return None, self.failure


def test_out_of_reach_alone_searches_hotter_temperatures():
    X = np.array([[-1.0], [0.5], [2.0]])
    y = np.array([0.3, -0.2, 0.5])
    with pytest.raises(GibbsAccuracyError) as ei:
        _ReachesFrom(X, y, 0.05).solve([1e-4])
    # 10^{1/2}·1e-4 and 1e-3 fail, 10^{3/2}·1e-4 is reached; bisections: sqrt(1e-3·3.16e-3)
    # fails, then the geometric mean of it and 3.16e-3 is reached
    hi = 10 ** 1.5 * 1e-4
    assert ei.value.coldest == pytest.approx(math.sqrt(math.sqrt(1e-3 * hi) * hi))


def test_barrier_error_names_the_coldest_solvable_tau():
    X = np.array([[-1.0], [0.5], [2.0]])
    y = np.array([0.3, -0.2, 0.5])

    class Barrier(_ReachesFrom):
        failure = GibbsBarrierError(0.0, 1e-12, 3)

    with pytest.raises(GibbsBarrierError) as ei:
        Barrier(X, y, 0.05).solve([1e-2, 1e-4])
    e = ei.value
    assert e.tau == 1e-4 and e.kinks == 3 and e.delta == 1e-12
    assert e.coldest == pytest.approx(math.sqrt(1e-2 * 1e-3))
    assert "presses against the barrier" in str(e) and f"tau={e.coldest:.3g}" in str(e)


def test_refusal_keeps_the_hotter_temperatures_solved():
    """A ladder refused at its coldest temperature hands back the ones solved before it."""
    X = np.array([[-1.0], [0.5], [2.0]])
    y = np.array([0.3, -0.2, 0.5])
    for failure in (GibbsBarrierError(0.0, 1e-12, 3), (1.0, 0.1, 64)):
        ref = _ReachesFrom(X, y, 0.05)
        ref.failure = failure
        with pytest.raises(GibbsAccuracyError) as ei:
            ref.solve([3e-3, 1e-4, 1e-2])
        assert [s.tau for s in ei.value.solved] == [1e-2, 3e-3]
        with pytest.raises(GibbsAccuracyError) as ei:
            ref.solve([1e-4])
        assert ei.value.solved == []


@pytest.mark.long
@pytest.mark.slow
def test_barrier_in_d4_is_refused_with_a_solvable_temperature():
    """d = 4, tau = 1e-3 (Gaussian data, n = 10, lam = 0.05): the fixed point presses
    against max|G| = 1 at a peak on three kinks (THEORY §5); the refusal names a hotter
    temperature, and that one is solved."""
    from meanfield.data import gaussian
    ds = gaussian(10, 4, 0)
    with pytest.raises(GibbsBarrierError) as ei:
        QMCGibbsReference(ds.X, ds.y, 0.05, rtol=1e-3).solve([1e-3])
    e = ei.value
    assert e.delta < 1e-8 and e.coldest is not None and e.coldest > 1e-3
    sol = QMCGibbsReference(ds.X, ds.y, 0.05, rtol=1e-3).solve([e.coldest])[0]
    assert sol.max_abs_G < 1 and sol.quad_error <= 1e-3 * np.max(np.abs(sol.f_train))


def _config(tmp_path, X, y, lam, taus):
    p = tmp_path / "c.toml"
    p.write_text(toml({"data": {"kind": "inline", "X": np.asarray(X, float).tolist(),
                                "y": np.asarray(y, float).tolist()},
                       "dynamics": {"lam": lam, "taus": list(taus)}}))
    return str(p)


def test_cli_gibbs_any_d(tmp_path, capsys):
    from meanfield.cli import main
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((6, 3)), rng.standard_normal(6)
    cfg = _config(tmp_path, X, y, 0.1, [2e-2, 0.0])
    assert main(["reference", "gibbs", cfg, "--json", "--rtol", "1e-3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc) == 1 and doc[0]["method"] == "qmc" and doc[0]["quad_error"] > 0
    want = gibbs_qmc(X, y, 0.1, 2e-2, rtol=1e-3)
    assert np.allclose(doc[0]["f_train"], want.f_train, atol=1e-12)
    assert main(["reference", "gibbs", cfg, "--tau", "0.02", "--rtol", "1e-9"]) == 2
    err = capsys.readouterr().err.strip()
    # an accuracy refusal names --rtol (the knob that helps) and why the sample stopped growing
    assert len(err.splitlines()) == 1 and "c.toml: --rtol:" in err and "standard error" in err
    assert "beyond the 1048576 allowed" in err and "ask for a larger --rtol" in err
    assert main(["reference", "gibbs", cfg, "--method", "quadrature"]) == 2
    assert "d = 3" in capsys.readouterr().err
    # d = 1: selectable, and it agrees with the default (quadrature)
    cfg1 = _config(tmp_path, [[-1.0], [0.0], [1.5]], [0.5, -0.2, 0.4], 0.05, [1e-2])
    assert main(["reference", "gibbs", cfg1, "--json", "--tau", "0.01", "--method", "qmc"]) == 0
    q = json.loads(capsys.readouterr().out)
    assert main(["reference", "gibbs", cfg1, "--json", "--tau", "0.01"]) == 0
    g = json.loads(capsys.readouterr().out)
    assert q["method"] == "qmc" and g["method"] == "quadrature"
    assert np.max(np.abs(np.subtract(q["f_train"], g["f_train"]))) <= 3 * q["quad_error"]


def test_cli_barrier_refusal_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    from meanfield.cli import main

    def refuse(self, taus, R0=None):
        raise GibbsBarrierError(1e-3, 4.5e-9, 3, 7.5e-3)

    monkeypatch.setattr(QMCGibbsReference, "solve", refuse)
    rng = np.random.default_rng(5)
    cfg = _config(tmp_path, rng.standard_normal((6, 3)), rng.standard_normal(6), 0.1, [1e-3])
    assert main(["reference", "gibbs", cfg, "--tau", "1e-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "c.toml: --tau:" in err
    assert "tau=0.0075" in err and "hotter" in err and "--rtol" not in err


def test_cli_ladder_refusal_prints_the_temperatures_solved(tmp_path, capsys, monkeypatch):
    """A ladder whose coldest temperature is refused prints the hotter ones, then the
    refusal, and exits 2."""
    from meanfield.cli import main
    X, y = np.array([[-1.0, 0.2], [0.5, 0.1], [2.0, -0.3]]), np.array([0.3, -0.2, 0.5])
    good = gibbs_qmc(X, y, 0.1, 2e-2, rtol=1e-3)

    def solve_one(self, R, tau_prev, tau):
        if tau >= 1e-2:
            return good, None
        raise GibbsBarrierError(tau, 4.5e-9, 3)

    monkeypatch.setattr(QMCGibbsReference, "_solve_one", solve_one)
    cfg = _config(tmp_path, X, y, 0.1, [2e-2, 1e-3])
    for extra in ([], ["--json"]):
        assert main(["reference", "gibbs", cfg, "--method", "qmc", *extra]) == 2
        out, err = capsys.readouterr()
        assert len(err.strip().splitlines()) == 1 and "presses against the barrier" in err
        if extra:
            doc = json.loads(out)
            assert len(doc) == 1 and np.allclose(doc[0]["f_train"], good.f_train)
        else:
            assert out.count("tau=") == 1 and "f_train" in out


def test_input_errors():
    from solvers.gibbs import GibbsInputError
    with pytest.raises(GibbsInputError, match="rtol"):
        QMCGibbsReference(np.zeros((3, 3)), np.zeros(3), 0.1, rtol=0.0)
    with pytest.raises(GibbsInputError, match="randomizations"):
        QMCGibbsReference(np.zeros((3, 3)), np.zeros(3), 0.1, randomizations=1)
    with pytest.raises(GibbsInputError, match="lam"):
        QMCGibbsReference(np.ones((3, 3)), np.zeros(3), -0.1)
    with pytest.raises(GibbsInputError, match="tau"):
        gibbs_qmc(np.ones((3, 3)), np.zeros(3), 0.1, 0.0)


# ---------------------------------------------------------------------------------------------
# particles (d = 3): the dynamics keeps the reference measure
# ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_particles_keep_the_qmc_gibbs_measure_d3():
    from benchmarks.gibbs_particles import time_average
    rng = np.random.default_rng(11)
    X, y = rng.standard_normal((5, 3)), 0.5 * rng.standard_normal(5)
    lam, tau = 0.2, 2e-2
    ref = gibbs_qmc(X, y, lam, tau, rtol=1e-3)
    theta0 = ref.sample_particles(300, seed=2)
    runs = {}
    for eta in (0.1, 0.05):
        runs[eta] = time_average(X, y, lam, tau, eta, theta0, int(400 / eta), 10, 3)
    (f1, _, _), (f2, se2, _) = runs[0.1], runs[0.05]
    allowed = 3 * se2 + np.abs(f1 - f2) + ref.f_stderr
    assert np.all(np.abs(f2 - ref.f_train) <= allowed), (f2 - ref.f_train, allowed)
    # and the check can fail: a reference at the wrong temperature is far outside
    wrong = gibbs_qmc(X, y, lam, 4 * tau, rtol=1e-3)
    assert np.any(np.abs(f2 - wrong.f_train) > allowed)


@pytest.mark.slow
def test_analyze_references_use_qmc_for_d3(tmp_path):
    """``analyze``'s reference section has a Gibbs distance for a d = 3 run (QMC), equal to
    the distance to the QMC reference computed directly."""
    import numba

    from analysis.references import QMC_RTOL, compare_run
    from analysis.time_average import time_average_predictor
    from meanfield import config, runner
    from meanfield.store import open_run
    numba.set_num_threads(1)
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((6, 3)), rng.standard_normal(6)
    cfg = config.from_dict({"data": {"kind": "inline", "X": X.tolist(), "y": y.tolist()},
                            "model": {"n_particles": 200},
                            "dynamics": {"lam": 0.1, "eta": 0.1, "taus": [2e-2],
                                         "steps_per_tau": 2000},
                            "output": {"observe_every": 10, "snapshots_per_tau": 1}})
    runner.run(cfg, tmp_path / "r.h5", progress=False)
    run = open_run(tmp_path / "r.h5")
    rep = compare_run(run)
    g = rep["gibbs"][0]
    assert g["method"] == "qmc" and "skipped" not in g
    f, _ = time_average_predictor(run, 0, 0.5)
    ref = gibbs_qmc(X, y, 0.1, 2e-2, rtol=QMC_RTOL)
    assert g["max_abs_diff"] == pytest.approx(np.max(np.abs(f - ref.f_train)), abs=1e-12)
    assert g["quad_error"] == pytest.approx(ref.quad_error)
