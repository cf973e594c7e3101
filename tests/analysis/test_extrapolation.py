"""Richardson extrapolation in the step (``analysis.ladders.extrapolate_ladders``,
``meanfield analyze FINE.h5 --extrapolate COARSE.h5``): against the Euler–Maruyama
Ornstein–Uhlenbeck closed form through the real kernel, the standard error against Monte
Carlo, and the command's checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.ladders import extrapolate_ladders
from analysis.time_average import mean_and_mcse
from solvers import numpy_model as model
from solvers.langevin import initial_particles
from solvers.stepper import Stepper


def _ou_second_moment(eta, lam, tau, seed, N=20000, d=2, samples=300, every=20):
    """Time series of the particle-mean ``θ_c²`` per coordinate ``c`` of the kernel's
    Euler–Maruyama chain with the data term off, after burn-in: shape (samples, d + 2)."""
    X = np.zeros((1, d))
    st = Stepper(X, np.zeros(1), N, lam=lam, eta=eta, seed=seed, integrator="em")
    th = initial_particles(N, d, np.sqrt(tau / lam), seed)
    step = int(30 / (eta * lam))                    # burn-in: memory e^-30
    assert st.advance(th, tau, 0, step, data_term=False) == 0
    F = np.empty((samples, th.shape[1]))
    for k in range(samples):
        assert st.advance(th, tau, step, every, data_term=False) == 0
        step += every
        F[k] = np.mean(th ** 2, axis=0)
    return F


@pytest.mark.long
def test_ou_second_moment_extrapolates_to_the_continuous_value():
    """EM's stationary variance is ``v(η) = τ/(λ(1 − ηλ/2)) = (τ/λ)(1 + ηλ/2 + O(η²))``.
    From the chains at ``η`` and ``2η`` the extrapolation must land on the closed form
    ``2v(η) − v(2η)`` within its MCSE (4 sigma), while the fine run alone misses ``τ/λ`` by
    many standard errors: the linear bias is gone, only its ``O(η²)`` remainder is left."""
    lam, tau, eta = 1.0, 0.01, 0.1
    runs = {e: mean_and_mcse(_ou_second_moment(e, lam, tau, seed=s))[:2]
            for e, s in ((eta, 5), (2 * eta, 6))}
    (mf, sf), (mc, sc) = runs[eta], runs[2 * eta]
    (row,) = extrapolate_ladders([(tau, mf, sf)], [(tau, mc, sc)], 2.0)
    v = lambda e: model.ou_stationary_variance(lam, e, tau, "em")  # noqa: E731
    exact_ext = 2 * v(eta) - v(2 * eta)
    exact = tau / lam
    assert abs(exact_ext - exact) < 0.12 * abs(v(eta) - exact)      # the O(η²) remainder
    assert np.all(np.abs(row.mean - exact_ext) <= 4 * row.mcse), (row.mean, exact_ext, row.mcse)
    assert np.all(np.abs(mf - exact) > 10 * sf)                      # the fine run is biased
    # the estimated step bias of the fine run is the exact v(η) − (2v(η) − v(2η))
    np.testing.assert_allclose(row.step_bias, v(2 * eta) - v(eta),
                               atol=4 * float(np.max(np.hypot(sf, sc))))
    assert row.step_bias_z > 10


def test_mcse_of_the_combination_against_monte_carlo():
    """Independent Gaussian means with known errors: the spread of the extrapolated value over
    many draws equals the reported MCSE (ratio r = 3)."""
    rng = np.random.default_rng(0)
    sf, sc, r = np.array([0.01, 0.03]), np.array([0.02, 0.005]), 3.0
    vals = []
    for _ in range(4000):
        mf, mc = 1 + sf * rng.standard_normal(2), 1 + sc * rng.standard_normal(2)
        (row,) = extrapolate_ladders([(0.1, mf, sf)], [(0.1, mc, sc)], r)
        vals.append(row.mean)
    np.testing.assert_allclose(np.std(vals, axis=0), row.mcse, rtol=0.05)
    assert np.all(np.abs(np.mean(vals, axis=0) - 1) <= 4 * row.mcse / np.sqrt(4000))


def test_matching_and_bad_input():
    f = [(1e-2, [1.0, 2.0], [0.1, 0.1]), (1e-3, [1.0, 2.0], [0.1, 0.1])]
    c = [(1e-3, [1.5, 2.0], [0.1, 0.1])]
    (row,) = extrapolate_ladders(f, c, 2.0)
    assert (row.tau, row.stage_fine, row.stage_coarse) == (1e-3, 1, 0)
    np.testing.assert_allclose(row.mean, [0.5, 2.0])
    np.testing.assert_allclose(row.step_bias, [0.5, 0.0])
    assert json.loads(json.dumps(row.to_dict()))["mean"] == [0.5, 2.0]
    for bad in (1.0, 0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ratio"):
            extrapolate_ladders(f, c, bad)
    with pytest.raises(ValueError, match="not the same data"):
        extrapolate_ladders(f, [(1e-3, [1.0], [0.1])], 2.0)


@pytest.mark.slow       # 14 s: two runs and an extrapolating analysis (out of the fast tier)
def test_analyze_extrapolate(tmp_path, capsys):
    """Two tiny runs at η and 2η: the command's numbers are the formula applied to the two
    ladders (whichever file comes first), and runs that differ in more than η are refused."""
    from conftest import plane8_toml, run_one_thread

    from meanfield import cli
    fine = run_one_thread(plane8_toml({"dynamics.eta": 0.025, "dynamics.steps_per_tau": 3000,
                                       "dynamics.seed": 4}), tmp_path, "fine")
    coarse = run_one_thread(plane8_toml(), tmp_path, "coarse")
    capsys.readouterr()
    docs = []
    for argv in ([str(fine), "--extrapolate", str(coarse)],
                 [str(coarse), "--extrapolate", str(fine)]):
        assert cli.main(["analyze", *argv, "--json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0] == docs[1]
    doc = docs[0]
    assert (doc["eta_fine"], doc["eta_coarse"]) == (0.025, 0.05)
    from meanfield.cli.analyze import _ladder
    from meanfield.store import open_run
    lf, lc = _ladder(open_run(fine)), _ladder(open_run(coarse))
    for row, (tf, mf, _, _), (tc, mc, _, _) in zip(doc["taus"], lf, lc, strict=True):
        assert row["tau"] == tf == tc
        np.testing.assert_allclose(row["mean"], 2 * mf - mc, rtol=0, atol=1e-12)
        g = row["gibbs"]
        assert g["extrapolated"] >= 0 and g["quad_error"] >= 0 and g["z"] >= 0
    assert cli.main(["analyze", str(fine), "--extrapolate", str(coarse), "--no-references"]) == 0
    out = capsys.readouterr().out
    assert "--no-references" in out and "eta = 0.025" in out
    # refused: another lam, the same eta, another integrator, Leimkuhler–Matthews
    lm = [run_one_thread(plane8_toml({"dynamics.integrator": "lm", "dynamics.eta": e}),
                         tmp_path, f"lm{e}") for e in (0.05, 0.1)]
    for a, b, field in ((coarse, run_one_thread(plane8_toml({"dynamics.lam": 0.1}), tmp_path,
                                                "lam"), "dynamics.lam"),
                        (coarse, run_one_thread(plane8_toml({"dynamics.seed": 8}), tmp_path,
                                                "same"), "dynamics.eta"),
                        (coarse, lm[0], "dynamics.integrator"),
                        (lm[0], lm[1], "dynamics.integrator")):
        assert cli.main(["analyze", str(a), "--extrapolate", str(b)]) == 2
        err = capsys.readouterr().err
        assert f": {field}:" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_analyze_extrapolate_warns_and_skips_with_reasons(tmp_path, capsys):
    """What a pair may hide is said on stderr: too few effective samples for an MCSE, a close
    ratio of steps, temperatures without a partner; a softplus pair has no ReLU reference;
    settings the activation does not use do not block a pair; a config is not a run file."""
    from conftest import plane8_toml, run_one_thread

    from meanfield import cli
    base = {"output.observe_every": 500, "dynamics.taus": [1e-2, 1e-3]}
    coarse = run_one_thread(plane8_toml(base), tmp_path, "coarse")
    fine = run_one_thread(plane8_toml({**base, "dynamics.eta": 0.0495,
                                       "dynamics.taus": [3e-2, 1e-3],
                                       "model.sharpness": 5.0}), tmp_path, "fine")
    capsys.readouterr()
    assert cli.main(["analyze", str(fine), "--extrapolate", str(coarse), "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert [r["tau"] for r in doc["taus"]] == [1e-3]
    assert (doc["taus"][0]["stage_fine"], doc["taus"][0]["stage_coarse"]) == (1, 1)
    assert "effective samples" in err and "not to be trusted" in err
    assert "are close (ratio 1.01" in err and "tau = 0.03 not in" in err
    assert "tau = 0.01 not in" in err
    # softplus: no relu reference
    sp = {**base, "model.activation": "softplus"}
    a = run_one_thread(plane8_toml(sp), tmp_path, "sp_coarse")
    b = run_one_thread(plane8_toml({**sp, "dynamics.eta": 0.025}), tmp_path, "sp_fine")
    capsys.readouterr()
    assert cli.main(["analyze", str(b), "--extrapolate", str(a), "--json"]) == 0
    g = json.loads(capsys.readouterr().out)["taus"][0]["gibbs"]
    assert g == {"skipped": "model.activation = 'softplus': the exact references are for relu"}
    # a config instead of a run file
    toml_path = tmp_path / "coarse.toml"
    assert cli.main(["analyze", str(fine), "--extrapolate", str(toml_path)]) == 2
    assert "is a config, not a run file" in capsys.readouterr().err
    assert cli.main(["analyze", str(fine), "--extrapolate", str(coarse),
                     "--against", str(coarse)]) == 2
    assert "not both" in capsys.readouterr().err


def test_analyze_extrapolate_n(tmp_path, capsys):
    """Two tiny runs at N and 4N: the command's numbers are the 1/N combination
    ``(4 f_4N − f_N)/3`` of the two ladders (whichever file comes first), the JSON names the
    finite-N bias, and pairs that differ in more than N, or not in N, are refused."""
    from conftest import plane8_toml, run_one_thread

    from meanfield import cli
    small = run_one_thread(plane8_toml({"model.n_particles": 100}), tmp_path, "small")
    large = run_one_thread(plane8_toml({"model.n_particles": 400, "dynamics.seed": 9}),
                           tmp_path, "large")
    capsys.readouterr()
    docs = []
    for argv in ([str(small), "--extrapolate-n", str(large)],
                 [str(large), "--extrapolate-n", str(small)]):
        assert cli.main(["analyze", *argv, "--json", "--no-references"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0] == docs[1]
    doc = docs[0]
    assert (doc["n_particles_fine"], doc["n_particles_coarse"]) == (400, 100)
    from meanfield.cli.analyze import _ladder
    from meanfield.store import open_run
    lf, lc = _ladder(open_run(large)), _ladder(open_run(small))
    assert len(doc["taus"]) == len(lf) == 2
    for row, (tf, mf, sf, _), (tc, mc, sc, _) in zip(doc["taus"], lf, lc, strict=True):
        assert row["tau"] == tf == tc and row["ratio"] == 4.0
        np.testing.assert_allclose(row["mean"], (4 * mf - mc) / 3, rtol=0, atol=1e-12)
        np.testing.assert_allclose(row["mcse"], np.sqrt((4 * sf) ** 2 + sc ** 2) / 3,
                                   rtol=1e-12)
        np.testing.assert_allclose(row["finite_n_bias"], (mc - mf) / 3, rtol=0, atol=1e-12)
        assert "step_bias" not in row and row["finite_n_bias_z"] >= 0
    assert cli.main(["analyze", str(large), "--extrapolate-n", str(small),
                     "--no-references"]) == 0
    out = capsys.readouterr().out
    assert "n_particles = 400" in out and "finite-N bias" in out and "r = N_fine/N_coarse" in out
    # refused: another eta as well as another N; the same N
    for other, field in ((run_one_thread(plane8_toml({"model.n_particles": 400,
                                                      "dynamics.eta": 0.025}), tmp_path,
                                         "eta"), "dynamics.eta"),
                         (run_one_thread(plane8_toml({"model.n_particles": 100,
                                                      "dynamics.seed": 8}), tmp_path,
                                         "same"), "model.n_particles")):
        assert cli.main(["analyze", str(small), "--extrapolate-n", str(other)]) == 2
        err = capsys.readouterr().err
        assert f": {field}:" in err and len(err.strip().splitlines()) == 1, err
    assert cli.main(["analyze", str(small), "--extrapolate-n", str(large),
                     "--extrapolate", str(large)]) == 2
    assert "not both" in capsys.readouterr().err


def test_two_ladders_pair_the_kth_visit_of_a_temperature():
    from analysis.ladders import compare_ladders, unmatched
    one = np.ones(2)
    a = [(1e-2, one * 0, one, 0), (1e-3, one * 1, one, 1), (1e-2, one * 2, one, 2)]
    b = [(1e-2, one * 10, one, 0), (1e-2, one * 12, one, 1), (1e-3, one * 11, one, 2)]
    rows = compare_ladders(a, b)
    assert [(r.stage_a, r.stage_b, r.max_abs_diff) for r in rows] == [(0, 0, 10.0),
                                                                      (1, 2, 10.0),
                                                                      (2, 1, 10.0)]
    assert unmatched(a, b[:2]) == [1e-3] and unmatched(a, b[1:]) == [1e-2]
