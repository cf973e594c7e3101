"""Warm start from the convex τ → 0 solution (solvers/warmstart.py, THEORY §4).

Oracles: the placed particles' predictor (solvers.numpy_model, independent of the convex
solver's own predict) equals the convex predictor; the neurons are balanced with the least weight decay
(λ Σ r² = λ N ‖c‖₁); the spread has the Ornstein–Uhlenbeck variance τ/λ.
"""

import numpy as np
import pytest

from solvers import numpy_model as model
from solvers.convex import convex
from solvers.warmstart import convex_particles, free_particles, ray_counts

PLANE8 = np.array([[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4],
                   [-1.1, 0.3], [0.2, 0.1], [1.0, 1.5], [-0.3, -1.8]])
PLANE8_Y = np.array([1.0, -0.5, 0.5, 1.2, -0.8, 0.3, -1.0, 0.9])


@pytest.mark.parametrize("w,N", [([0.5, -0.3, 0.2], 10), ([1e-9, 1.0], 7), ([2.0], 3),
                                 ([0.1, 0.1, 0.1], 3)])
def test_ray_counts(w, N):
    c = ray_counts(w, N)
    assert c.sum() == N and np.all(c >= 1)
    share = N * np.abs(w) / np.sum(np.abs(w))
    assert np.all(np.abs(c - share) < len(w) + 1)


def test_placed_particles_reproduce_the_convex_predictor():
    lam = 0.05
    sol = convex(PLANE8, PLANE8_Y, lam)
    theta = convex_particles(sol.directions, sol.weights, 1001, tau=0.0, lam=lam, seed=0)
    assert theta.shape == (1001, 4)
    np.testing.assert_allclose(model.predict(theta, PLANE8), sol.f_train, rtol=0, atol=1e-12)
    # balanced (|a| = |u|) with sign(a) = sign(c) on its ray, weight decay λ N ‖c‖₁
    np.testing.assert_allclose(np.abs(theta[:, 0]), np.linalg.norm(theta[:, 1:], axis=1),
                               rtol=1e-14)
    np.testing.assert_allclose(0.5 * np.sum(theta ** 2), 1001 * np.sum(np.abs(sol.weights)),
                               rtol=1e-12)


def test_thermal_spread_and_seed():
    V = np.array([[0.6, 0.0, 0.8]])
    tau, lam = 0.02, 0.5
    a = convex_particles(V, [1.5], 40000, tau=tau, lam=lam, seed=3)
    b = convex_particles(V, [1.5], 40000, tau=tau, lam=lam, seed=3)
    assert np.array_equal(a, b)
    base = convex_particles(V, [1.5], 40000, tau=0.0, lam=lam, seed=3)
    dev = a - base
    np.testing.assert_allclose(dev.var(axis=0), tau / lam, rtol=4 * np.sqrt(2 / 40000))
    assert not np.array_equal(a, convex_particles(V, [1.5], 40000, tau=tau, lam=lam, seed=4))


def test_bad_input():
    with pytest.raises(ValueError, match="no ray"):
        convex_particles(np.zeros((0, 3)), [], 10, tau=0.0, lam=0.1, seed=0)
    with pytest.raises(ValueError, match="one particle per ray"):
        convex_particles(np.eye(3), [1.0, 1.0, 1.0], 2, tau=0.0, lam=0.1, seed=0)
    with pytest.raises(ValueError, match="lam"):
        convex_particles(np.eye(3), [1.0, 1.0, 1.0], 5, tau=0.0, lam=0.0, seed=0)


def test_free_particles_have_the_free_laws_moments_and_the_spreads_seed():
    """N(0, (τ/λ) I): the Gibbs law of one particle under (λ/2)|θ|² alone at τ, drawn from the
    spread's stream (the spread of a start on rays, with the rays taken away)."""
    tau, lam = 0.02, 0.5
    a = free_particles(40000, 4, tau=tau, lam=lam, seed=3)
    assert a.shape == (40000, 4) and np.array_equal(a, free_particles(40000, 4, tau=tau,
                                                                         lam=lam, seed=3))
    np.testing.assert_allclose(a.var(axis=0), tau / lam, rtol=4 * np.sqrt(2 / 40000))
    assert np.all(np.abs(a.mean(axis=0)) < 4 * np.sqrt(tau / lam / 40000))
    V = np.array([[0.6, 0.0, 0.8]])          # d + 1 = 3: particles of d + 2 = 4 coordinates
    spread = (convex_particles(V, [1.5], 40000, tau=tau, lam=lam, seed=3)
              - convex_particles(V, [1.5], 40000, tau=0.0, lam=lam, seed=3))
    np.testing.assert_allclose(a, spread, rtol=0, atol=1e-12)
    assert not np.any(free_particles(5, 3, tau=0.0, lam=lam, seed=3))
    with pytest.raises(ValueError, match="lam"):
        free_particles(5, 3, tau=tau, lam=0.0, seed=0)


#: Three points and labels small against λ: the certificate of μ = 0,
#: |G(v)| = |Σ_j y_j (v·x̃_j)₊| / (nλ) ≤ Σ_j |y_j| |x̃_j| / (nλ) (|v| = 1), is far below 1, so
#: f = 0 is the τ → 0 solution and the convex solution has no ray (THEORY §4).
ZERO_RAY_X = [[-1.0], [0.0], [1.0]]
ZERO_RAY_Y = [0.01, -0.02, 0.01]
ZERO_RAY_LAM = 0.5


def test_the_zero_ray_data_has_no_ray():
    X, y = np.array(ZERO_RAY_X), np.array(ZERO_RAY_Y)
    bound = np.sum(np.abs(y) * np.linalg.norm(np.c_[X, np.ones(3)], axis=1)) / (3 * ZERO_RAY_LAM)
    assert bound < 0.05
    sol = convex(X, y, ZERO_RAY_LAM)
    assert len(sol.weights) == 0
    from solvers.langevin import convex_start
    theta = convex_start(X, y, 7, ZERO_RAY_LAM, 0.02, 3, solution=sol)
    assert np.array_equal(theta, free_particles(7, 3, tau=0.02, lam=ZERO_RAY_LAM, seed=3))


def test_a_warm_start_without_a_ray_starts_from_the_free_law(tmp_path):
    """``model.init = "convex"`` on data whose convex solution has no ray: exit 0, one note on
    stderr, and the particles of the frame after the first step have the free law's second
    moment τ/λ per coordinate (one Euler step keeps it up to a factor 1 + (ηλ)², 6e-4 here,
    and the data term is of the size of the labels) within 4 standard errors
    ``(τ/λ) sqrt(2/(N(d+2)))``."""
    from conftest import toml
    from support import run_cli
    tau, N = 0.02, 400
    cfg = {"data": {"kind": "inline", "X": ZERO_RAY_X, "y": ZERO_RAY_Y},
           "model": {"n_particles": N, "init": "convex"},
           "dynamics": {"lam": ZERO_RAY_LAM, "eta": 0.05, "taus": [tau, tau / 2],
                        "steps_per_tau": 1, "seed": 5},
           "output": {"observe_every": 1, "snapshots_per_tau": 1}}
    (tmp_path / "zero.toml").write_text(toml(cfg))
    done = run_cli(["run", "zero.toml", "-o", "zero.h5", "--quiet"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    notes = [ln for ln in done.stderr.splitlines() if "has no ray" in ln]
    assert len(notes) == 1
    assert notes[0].startswith('meanfield: note: model.init = "convex": the tau -> 0 convex '
                               "solution has no ray")
    assert "free law N(0, (tau/lam) I) at tau = 0.02" in notes[0]
    from meanfield.store import open_run
    run = open_run(tmp_path / "zero.h5")
    assert run.complete and list(run.frame_step[:1]) == [1]
    theta = run.frame(0)
    v = tau / ZERO_RAY_LAM
    m2 = np.mean(theta ** 2)
    assert abs(m2 - v) < 4 * v * np.sqrt(2 / theta.size)
    # not the default start N(0, 1) nor particles on a ray
    assert m2 < 0.1


def test_compare_ladders_matches_temperatures_and_standardises():
    from analysis.ladders import compare_ladders
    hot = [(1e-2, [1.0, 2.0], [0.1, 0.1]), (1e-3, [1.0, 2.0], [0.01, 0.03])]
    cold = [(1e-4, [0.0, 0.0], [1.0, 1.0]), (1e-3 * (1 + 1e-12), [1.04, 1.9], [0.03, 0.04]),
            (1e-2, [1.0, 2.0], [0.0, 0.0])]
    rows = compare_ladders(hot, cold)
    assert [r.tau for r in rows] == [1e-2, 1e-3]
    assert (rows[0].stage_a, rows[0].stage_b, rows[0].max_abs_diff, rows[0].z) == (0, 2, 0, 0)
    r = rows[1]
    assert (r.stage_a, r.stage_b) == (1, 1)
    assert abs(r.max_abs_diff - 0.1) < 1e-12
    assert abs(r.z - 0.1 / 0.05) < 1e-12          # point 2: 0.1 / sqrt(0.03² + 0.04²)
    assert r.to_dict()["mcse_b"] == 0.04
    with pytest.raises(ValueError, match="same data"):
        compare_ladders([(1.0, [1.0], [0.1])], [(1.0, [1.0, 2.0], [0.1, 0.1])])


@pytest.mark.slow
def test_convex_init_lm_cold_to_hot_run_resumes_bitwise(tmp_path, monkeypatch):
    """model.init = "convex" with a ladder run cold to hot under Leimkuhler–Matthews: the
    first particles are the convex rays (the first observation's predictor is the convex one
    to within the one step and the tiny spread), and a run stopped at a boundary inside the
    first stage and resumed (across the temperature change) equals the uninterrupted run."""
    from conftest import tiny_toml
    from support import assert_identical, stop_after

    from meanfield import config, runner
    from meanfield.errors import Interrupted
    from meanfield.store import open_run
    path = tmp_path / "cold.toml"
    path.write_text(tiny_toml({"model.init": "convex", "dynamics.integrator": "lm",
                               "dynamics.taus": [1e-6, 1e-3], "dynamics.eta": 0.01,
                               "output.observe_every": 1, "output.checkpoint_every": 7}))
    cfg = config.load(path)
    ref = runner.run(cfg, tmp_path / "ref.h5", progress=False, threads=1)
    run = open_run(ref)
    sol = convex(run.X, run.y, 0.05)
    f1 = run.observables["residuals"]["value"][0] * run.n + run.y
    assert np.max(np.abs(f1 - sol.f_train)) < 0.05 * np.max(np.abs(sol.f_train))
    out = tmp_path / "run.h5"
    with monkeypatch.context() as m:
        stop_after(m, 290)
        with pytest.raises(Interrupted):
            runner.run(config.load(path), out, progress=False, threads=1)
    runner.run(config.load(path), out, resume=True, progress=False, threads=1)
    assert assert_identical(ref, out) > 0


def test_config_rejects_unknown_integrator_and_init(tmp_path):
    from conftest import tiny_toml

    from meanfield import config
    from meanfield.errors import ConfigError
    for key, bad in (("dynamics.integrator", "rk4"), ("model.init", "zeros")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            config.loads(tiny_toml({key: bad}), "t.toml", tmp_path)


@pytest.mark.slow
def test_analyze_against_compares_hot_and_cold_ladders(tmp_path, capsys):
    import json

    from conftest import tiny_toml

    from meanfield import cli, runner
    hot, cold = tmp_path / "hot.toml", tmp_path / "cold.toml"
    hot.write_text(tiny_toml())
    cold.write_text(tiny_toml({"model.init": "convex", "dynamics.taus": [1e-3, 1e-2]}))
    a = runner.run(str(hot), tmp_path / "hot.h5", progress=False, threads=1)
    b = runner.run(str(cold), tmp_path / "cold.h5", progress=False, threads=1)
    capsys.readouterr()
    assert cli.main(["analyze", str(a), "--against", str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["tau"]: r for r in doc["taus"]}
    assert set(rows) == {1e-2, 1e-3}
    assert (rows[1e-2]["stage_a"], rows[1e-2]["stage_b"]) == (0, 1)
    assert all(r["max_abs_diff"] >= 0 and r["mcse_a"] > 0 for r in rows.values())
    # against itself: no difference at all
    assert cli.main(["analyze", str(a), "--against", str(a), "--json"]) == 0
    assert all(r["max_abs_diff"] == 0 and r["z"] == 0
               for r in json.loads(capsys.readouterr().out)["taus"])
    other = tmp_path / "other.toml"
    other.write_text(tiny_toml({"data.seed": 9}))
    c = runner.run(str(other), tmp_path / "other.h5", progress=False, threads=1)
    assert cli.main(["analyze", str(a), "--against", str(c)]) == 2
