"""``dynamics.chains = K``: independent particle systems in one run.

Oracles: chain 0 of a run of ``K`` chains is bitwise the run of one chain (the one-chain run
is the reference, written before chains existed); chain ``k`` does not depend on ``K`` nor on
the thread count; a stopped and resumed run of several chains is bitwise the uninterrupted
one; R̂ and ESS of the verdict equal ArviZ called by hand on the ``(chain, draw)`` arrays read
with h5py; the pooled time average is the mean of the chains' means; the tidy view, the
report rows and the checkpoint carry the chain axis."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from conftest import tiny_toml
from support import leftovers, stop_after

from analysis import stationarity as st
from analysis.time_average import mean_and_mcse, time_average_predictor
from meanfield import checkpoint, config, runner
from meanfield.errors import ConfigError, Interrupted
from meanfield.store import open_run
from solvers.langevin import SolverState, chain_seed

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(tmp_path, name, changes=None, **kw):
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(tiny_toml(changes or {}))
    return runner.run(config.load(cfg), tmp_path / f"{name}.h5", progress=False, **kw)


def _rows(run):
    """Every observable and frame of one chain, as comparable arrays."""
    out = {f"obs/{k}": np.asarray(v["value"]) for k, v in run.observables.items()}
    out.update({f"frame/{k}": run.frame(k) for k in range(run.n_frames)})
    return out


def _same(a, b):
    ra, rb = _rows(a), _rows(b)
    assert sorted(ra) == sorted(rb)
    differ = [k for k in ra if not np.array_equal(ra[k], rb[k], equal_nan=True)]
    assert not differ, differ


def test_config_key_hash_and_bounds(tmp_path):
    one = config.loads(tiny_toml(), "a.toml", tmp_path)
    explicit = config.loads(tiny_toml({"dynamics.chains": 1}), "b.toml", tmp_path)
    two = config.loads(tiny_toml({"dynamics.chains": 2}), "c.toml", tmp_path)
    assert one.dynamics.chains == explicit.dynamics.chains == 1
    # one chain keeps the hash of configs written before the key existed
    assert "chains" not in one.as_dict()["dynamics"]
    assert explicit.hash() == one.hash() and explicit.physics_hash() == one.physics_hash()
    assert two.physics_hash() != one.physics_hash()
    for bad in (0, 65, 1.5, "2", True):
        with pytest.raises(ConfigError, match="dynamics.chains"):
            config.loads(tiny_toml({"dynamics.chains": bad}), "bad.toml", tmp_path)


def test_chain_seeds_are_distinct_and_chain_zero_is_the_seed():
    seeds = [chain_seed(3, k) for k in range(64)]
    assert seeds[0] == 3 and len(set(seeds)) == 64
    assert all(0 <= s < 2**63 for s in seeds)
    assert chain_seed(3, 1) != chain_seed(4, 1) and chain_seed(3, 1) == chain_seed(3, 1)


@pytest.fixture(scope="module")
def em_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("chains")
    return {K: open_run(_run(d, f"k{K}", {"dynamics.chains": K} if K > 1 else {}))
            for K in (1, 2, 3)}


def test_chain_zero_is_the_one_chain_run_and_no_chain_depends_on_k(em_runs):
    one, two, three = em_runs[1], em_runs[2], em_runs[3]
    assert (one.n_chains, two.n_chains, three.n_chains) == (1, 2, 3)
    assert one.schema_version == two.schema_version == 2
    _same(one, two.chain(0))
    _same(two.chain(1), three.chain(1))
    # and the chains are different systems
    assert not np.array_equal(two.chain(1).frame(-1), two.frame(-1))
    with pytest.raises(IndexError):
        two.chain(2)


def test_file_layout_of_chains(em_runs):
    path = em_runs[2].path
    with h5py.File(path, "r") as f:
        assert int(f["parameters"].attrs["chains"]) == 2
        assert "chains/1/observables/residuals/value" in f
        assert "chains/1/particles/neurons/position/value" in f
        assert "chains/2" not in f and "chains/0" not in f
        no = int(f.attrs["n_observations"])
        assert f["chains/1/observables/risk/value"].shape[0] == no


def test_pooled_time_average_is_the_mean_of_the_chain_means(em_runs):
    run = em_runs[3]
    y = run.y
    means, ses = [], []
    with h5py.File(run.path, "r") as f:
        for root in ("", "chains/1/", "chains/2/"):
            R = f[f"{root}observables/residuals/value"][()]
            stage = f[f"{root}observables/stage/value"][()]
            steps = f[f"{root}observables/residuals/step"][()]
            lo, hi = run.schedule.last_part(1, 0.5)
            sel = (stage == 1) & (steps > lo) & (steps <= hi)
            m, se, _ = mean_and_mcse(R[sel] * len(y) + y)
            means.append(m)
            ses.append(se)
    got, got_se = time_average_predictor(run, 1)
    np.testing.assert_allclose(got, np.mean(means, axis=0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(got_se, np.sqrt(np.sum(np.square(ses), axis=0)) / 3,
                               rtol=1e-13)


def test_verdict_rhat_and_ess_equal_arviz_between_chains(em_runs):
    from arviz_stats.base import array_stats
    run = em_runs[3]
    verdicts = st.run_verdicts(run)
    y, n = run.y, run.n
    with h5py.File(run.path, "r") as f:
        series = []
        for root in ("", "chains/1/", "chains/2/"):
            R = f[f"{root}observables/residuals/value"][()]
            stage = f[f"{root}observables/stage/value"][()]
            series.append((R, f[f"{root}observables/risk/value"][()],
                           f[f"{root}observables/regulariser/value"][()], stage))
    for s, v in enumerate(verdicts):
        H = []
        for R, risk, reg, stage in series:
            sel = stage == s
            h = np.column_stack([R[sel] * n + y, risk[sel], reg[sel]])
            H.append(h[len(h) // 2:].T)                  # (observable, draw)
        H = np.stack(H, axis=1)                          # (observable, chain, draw)
        rhat = array_stats.rhat(H, method="rank")
        bulk = array_stats.ess(H, method="bulk")
        tail = array_stats.ess(H, method="tail", prob=(0.05, 0.95))
        assert v.n_chains == 3 and v.rhat_test == "between chains"
        assert v.rhat == pytest.approx(np.nanmax(rhat), rel=1e-12)
        assert v.ess_bulk == pytest.approx(np.nanmin(bulk), rel=1e-12)
        assert v.ess_tail == pytest.approx(np.nanmin(tail), rel=1e-12)


def test_to_xarray_has_a_chain_dimension(em_runs):
    run = em_runs[2]
    ds = run.to_xarray()
    assert ds.sizes["chain"] == 2 and ds.attrs["n_chains"] == 2
    assert ds.risk.dims == ("chain", "time")
    np.testing.assert_array_equal(ds.risk.sel(chain=1).values,
                                  run.chain(1).observables["risk"]["value"])
    assert ds.particles.dims == ("chain", "frame", "particle", "coord")
    np.testing.assert_array_equal(ds.particles.values[1, -1], run.chain(1).frame(-1))
    np.testing.assert_array_equal(ds.particles.values[0, -1], run.frame(-1))


def test_report_rows_carry_each_chains_counts(em_runs):
    from analysis.run_analysis import analyze, analyze_frame, count_text
    run = em_runs[2]
    rep = analyze(run, w2=False)
    for row in rep.ladder:
        k = int(run.stage_frames(row.stage)[-1])
        # J_chains: each chain's last snapshot alone; J: every chain's frames pooled
        alone = [analyze_frame(c, k) for c in (run, run.chain(1))]
        assert row.J_chains == [len(a.rays.rays) for a in alone]
        assert row.K_chains == [len(a.kinks) for a in alone]
        assert row.chains_agree == (row.J_chains[0] == row.J_chains[1]
                                    and row.K_chains[0] == row.K_chains[1])
        assert set(row.J_chains) <= set(row.J_frames)
        assert row.replicas >= 2 and row.replicas % 2 == 0      # frames x 2 chains
        assert row.stationarity["n_chains"] == 2
    # a report of the pooled counts shows the single snapshots' range where it differs
    assert count_text({"J": 4, "J_frames": [4, 5, 3], "stationary": True}, "J") == \
        "4 (one snapshot: 3–5)"
    assert count_text({"J": 4, "J_frames": [4, 4], "stationary": True}, "J") == "4"
    # an older report (no J_frames) still shows its chains' disagreement
    shown = count_text({"J": 4, "J_chains": [4, 5], "stationary": True}, "J")
    assert shown == "4 (chains disagree: 4, 5)"
    assert count_text({"J": 4, "J_chains": [4, 4], "stationary": True}, "J") == "4"


def test_checkpoint_of_chains_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    states = [SolverState(theta=rng.standard_normal((5, 4)), step=7, stage=1,
                          stage_residuals=[rng.standard_normal(3)]) for _ in range(3)]
    path = tmp_path / "c.ckpt"
    checkpoint.save(path, states, physics_hash="p", config_hash="c")
    back, meta = checkpoint.load_chains(path, SolverState)
    assert meta["chains"] == 3 and len(back) == 3
    for a, b in zip(states, back):
        np.testing.assert_array_equal(a.theta, b.theta)
        np.testing.assert_array_equal(a.stage_residuals[0], b.stage_residuals[0])
    with pytest.raises(Exception, match="3 chains, expected one"):
        checkpoint.load(path, SolverState)


MALA2 = {"dynamics.integrator": "mala", "dynamics.jumps": 0.3, "dynamics.chains": 2,
         "output.checkpoint_every": 60}


def test_mala_chains_step_in_threads_with_results_of_one_thread(tmp_path):
    import numba
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two numba threads")
    ref = open_run(_run(tmp_path, "one", MALA2))              # one thread (the fixture)
    numba.set_num_threads(2)
    got = open_run(_run(tmp_path, "two", MALA2))
    for k in range(2):
        _same(ref.chain(k), got.chain(k))
    single = open_run(_run(tmp_path, "single", {**MALA2, "dynamics.chains": 1}))
    _same(single, got.chain(0))


@pytest.mark.parametrize("k", [3, 16])
def test_stop_then_resume_of_chains_is_bitwise_identical(tmp_path, monkeypatch, k):
    import numba
    ref = open_run(_run(tmp_path, "ref", MALA2))
    cfg = tmp_path / "ref.toml"
    out = tmp_path / "run.h5"
    with monkeypatch.context() as m:
        stop_after(m, k)
        with pytest.raises(Interrupted):
            runner.run(config.load(cfg), out, progress=False)
    assert leftovers(out) == ["run.h5.ckpt", "run.h5.part"]
    if numba.config.NUMBA_NUM_THREADS >= 2:
        numba.set_num_threads(2)                             # resumed on another thread count
    runner.run(config.load(cfg), out, resume=True, progress=False)
    got = open_run(out)
    for c in range(2):
        _same(ref.chain(c), got.chain(c))


def test_study_summary_risk_pools_the_chains(em_runs):
    from meanfield.sweep.summary import RISK_WINDOW, _observable_summary
    run = em_runs[2]
    got = _observable_summary(run)["risk"]
    for s, value in enumerate(got):
        lo, hi = run.schedule.last_part(s, RISK_WINDOW)
        per = []
        for c in (run.chain(0), run.chain(1)):
            steps, risk = c.observables["risk"]["step"], c.observables["risk"]["value"]
            per.append(risk[(steps > lo) & (steps <= hi)].mean())
        assert value == pytest.approx(np.mean(per), rel=1e-12)
        assert per[0] != per[1]                  # two systems: the pooling is seen


def test_trajectory_overlays_the_chains(em_runs):
    import meanfield
    run = em_runs[2]
    fig = meanfield.plot_trajectory(None, run)
    top = fig.axes[0]
    for k in range(2):
        np.testing.assert_array_equal(top.lines[k].get_ydata(),
                                      run.chain(k).observables["risk"]["value"])
        assert top.lines[k].get_label() == f"chain {k}"
    texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert texts == ["chain 0", "chain 1"]


def test_inspect_names_the_chains(em_runs, capsys):
    import json

    from meanfield.cli import main
    path = em_runs[2].path
    assert main(["inspect", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["chains"] == 2 and doc["schema_version"] == 2
    assert all(s["stationarity"]["n_chains"] == 2 for s in doc["stages"] if s["stationarity"])
    assert main(["inspect", path]) == 0
    assert "chains=2 (independent systems" in capsys.readouterr().out


@pytest.mark.slow       # two auto stages of up to 4e5 steps, two chains (about 30 s)
def test_an_auto_stage_ends_only_on_the_verdict_the_report_gives(tmp_path):
    """The stop test of an ``"auto"`` stage is the report's verdict, ray drift between the
    stage's snapshots included: a stage that ended before its budget reads stationary in
    ``run_verdicts``, one that did not spent its budget. (The stop test used to leave out the
    ray drift: stages ended at 2e5 and 3e5 steps were then reported not stationary, "ray
    weights drift by 0.101 / 0.262".)"""
    from conftest import DATA
    budget = 400000
    path = _run(tmp_path, "auto", {
        "data": {"kind": "file", "path": str(DATA / "plane8.csv"), "target": "y"},
        "model.n_particles": 200, "dynamics.taus": [1e-2, 1e-2],
        "dynamics.steps_per_tau": "auto", "dynamics.max_steps_per_tau": budget,
        "dynamics.seed": 0, "dynamics.chains": 2, "output.observe_every": 100,
        "output.checkpoint_every": 5000})
    run = open_run(path)
    verdicts = st.run_verdicts(run)
    ran = [run.steps_run(s) for s in range(run.schedule.n_stages)]
    for s, v in enumerate(verdicts):
        assert v.stationary == (ran[s] < budget), (s, ran[s], v.reasons)


def test_a_chains_own_run_knows_its_index(em_runs):
    run = em_runs[3]
    two = run.chain(2)
    assert two.chain_index == 2 and two.n_chains == 1 and two.chain(0) is two
    assert "chain=2" in repr(two) and "chains=3" in repr(run)
    assert list(two.to_xarray(frames=False).chain.values) == [2]
    assert list(run.to_xarray(frames=False).chain.values) == [0, 1, 2]
    for bad in (1.0, "1", True):
        with pytest.raises(TypeError, match="chain index must be an integer"):
            run.chain(bad)


def test_resuming_with_another_chain_count_names_both(tmp_path, monkeypatch, capsys):
    from meanfield.cli import main
    cfg = tmp_path / "two.toml"
    cfg.write_text(tiny_toml({"dynamics.chains": 2, "output.checkpoint_every": 20}))
    out = tmp_path / "run.h5"
    with monkeypatch.context() as m:
        stop_after(m, 3)
        with pytest.raises(Interrupted):
            runner.run(config.load(cfg), out, progress=False)
    one = tmp_path / "one.toml"
    one.write_text(tiny_toml({"dynamics.chains": 1, "output.checkpoint_every": 20}))
    capsys.readouterr()
    assert main(["run", str(one), "-o", str(out), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "dynamics.chains 2 -> 1" in err, err


def test_inspect_gives_no_verdict_on_an_auto_stage_still_running(tmp_path, monkeypatch, capsys):
    import json

    from meanfield.cli import main
    cfg = tmp_path / "auto.toml"
    cfg.write_text(tiny_toml({"dynamics.steps_per_tau": "auto",
                              "dynamics.max_steps_per_tau": 4000, "dynamics.chains": 2,
                              "output.checkpoint_every": 50}))
    out = tmp_path / "run.h5"
    with monkeypatch.context() as m:
        stop_after(m, 30)                  # within the first stage's budget of 4000 steps
        with pytest.raises(Interrupted):
            runner.run(config.load(cfg), out, progress=False)
    part = out.with_name("run.h5.part")
    capsys.readouterr()
    assert main(["inspect", str(part), "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert stages[0]["steps"] < 4000
    # interrupted, so no process writes it: the stage it was in has stopped, with no verdict
    assert stages[0]["stopped"] is True and stages[0]["running"] is False
    assert stages[0]["stationary"] is None


def test_many_chains_that_disagree_are_tallied():
    from analysis.run_analysis import count_text
    row = {"J": 4, "J_chains": [4] * 60 + [5] * 3 + [3], "stationary": True}
    assert count_text(row, "J") == "4 (chains disagree: 3 ×1, 4 ×60, 5 ×3)"


def test_report_says_what_is_chain_zeros(em_runs):
    from analysis.run_analysis import analyze
    from meanfield.report import markdown
    rep = analyze(em_runs[2], w2=False).as_dict()
    md = markdown(rep)
    assert "- chains: 2 independent particle systems" in md
    assert "chains:" not in markdown(analyze(em_runs[1], w2=False).as_dict())


def test_a_convex_start_is_solved_once_for_all_chains(tmp_path, monkeypatch):
    import solvers.convex as cvx
    from meanfield import data
    from meanfield.runner.loop import initial_states
    calls = []
    real = cvx.convex

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(cvx, "convex", counted)
    cfg = config.loads(tiny_toml({"model.init": "convex", "dynamics.chains": 3}), "c.toml",
                       tmp_path)
    states = initial_states(cfg, data.from_config(cfg))
    assert len(calls) == 1 and len(states) == 3      # three chains, one convex solve
    from solvers.langevin import convex_start
    ds = data.from_config(cfg)
    for k in range(3):              # each as if solved on its own
        np.testing.assert_array_equal(
            states[k].theta, convex_start(ds.X, ds.y, cfg.n_particles, cfg.dynamics.lam,
                                          cfg.taus[0], chain_seed(cfg.dynamics.seed, k)))
    one = open_run(_run(tmp_path, "one", {"model.init": "convex"}))
    two = open_run(_run(tmp_path, "two", {"model.init": "convex", "dynamics.chains": 3}))
    _same(one, two.chain(0))                      # chain 0: the one-chain convex start
    assert not np.array_equal(states[1].theta, states[0].theta)    # each chain its spread


def test_follow_shows_the_risk_of_every_chain(em_runs):
    """``inspect --follow``'s progress line gives chain 0's risk and the range over the
    chains, each read from its own chain's last committed row."""
    import io

    from meanfield.cli.inspect import follow
    run = em_runs[3]
    rs = [float(c.observables["risk"]["value"][-1]) for c in run.chains()]
    assert len(set(rs)) == 3                       # three systems, three risks
    buf = io.StringIO()
    assert follow(run.path, interval=0.0, out=buf) == 0
    line = buf.getvalue().splitlines()[0]
    assert (f"risk={rs[0]:.4e} (chain 0; 3 chains: {min(rs):.4e} to {max(rs):.4e})"
            in line), line
    buf = io.StringIO()
    assert follow(em_runs[1].path, interval=0.0, out=buf) == 0
    assert "chain 0" not in buf.getvalue()
