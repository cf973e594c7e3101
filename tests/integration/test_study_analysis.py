"""W2 between particle clouds and the aggregated study analysis, against independent oracles."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from analysis import transport as W
from meanfield.sweep import loads
from meanfield.sweep import manifest as man
from meanfield.sweep import summary as S

# --- W2 -------------------------------------------------------------------------------------

def test_exact_w2_equals_optimal_assignment():
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(7, 4)), rng.normal(0.5, 1.0, size=(7, 4))
    C = ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
    r, c = linear_sum_assignment(C)  # uniform equal-size measures: an optimal plan is a matching
    assert W.w2_exact(X, Y) == pytest.approx(math.sqrt(C[r, c].mean()), rel=1e-12)


def _w2_1d(x, y):
    """Exact W2 in 1-D from the quantile functions, integrated over their breakpoints."""
    x, y = np.sort(x), np.sort(y)
    t = np.union1d(np.arange(len(x) + 1) / len(x), np.arange(len(y) + 1) / len(y))
    mid = (t[:-1] + t[1:]) / 2
    qx = x[np.minimum((mid * len(x)).astype(int), len(x) - 1)]
    qy = y[np.minimum((mid * len(y)).astype(int), len(y) - 1)]
    return math.sqrt(np.sum(np.diff(t) * (qx - qy) ** 2))


def test_exact_w2_unequal_sizes_matches_1d_quantile_formula():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=3), rng.normal(1.0, 2.0, size=5)
    assert W.w2_exact(x[:, None], y[:, None]) == pytest.approx(_w2_1d(x, y), rel=1e-12)


def test_translation_exact_and_sliced_closed_forms():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 4))
    a = rng.random(40)
    v = np.array([0.3, -0.2, 0.1, 0.5])
    # exact: translating a measure moves it by exactly |v|
    assert W.w2_exact(X, X + v, a, a) == pytest.approx(np.linalg.norm(v), rel=1e-10)
    # sliced with fixed directions P: sqrt(mean_k (p_k . v)^2)
    import ot
    P = ot.sliced.get_random_projections(4, 64, seed=0)
    assert np.allclose(np.linalg.norm(P, axis=0), 1.0)
    expected = math.sqrt(np.mean((P.T @ v) ** 2))
    assert W.w2_sliced(X, X + v, n_projections=64) == pytest.approx(expected, rel=1e-10)
    assert W.w2_sliced(X, (X + v)[:30], n_projections=64) > 0     # the unequal-size route


def test_sliced_is_a_lower_bound_and_dispatch():
    rng = np.random.default_rng(4)
    X, Y = rng.normal(size=(30, 3)), rng.normal(size=(50, 3)) * 1.5
    ex = W.w2_exact(X, Y)
    assert W.w2_sliced(X, Y) <= ex + 1e-12
    assert W.w2_snapshots(X, Y) == {"w2": ex, "method": "exact"}
    out = W.w2_snapshots(X, Y, max_exact=20)
    assert out["method"] == "sliced" and out["w2"] == pytest.approx(W.w2_sliced(X, Y))


def test_unconverged_emd_is_an_error(monkeypatch):
    import ot
    monkeypatch.setattr(ot, "emd2", lambda *a, **k: (0.0, {"result_code": 3,
                                                            "warning": "numItermax reached"}))
    with pytest.raises(W.TransportError, match="result_code=3"):
        W.w2_exact(np.zeros((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError):
        W.w2_exact(np.zeros((2, 2)), np.ones((2, 3)))


# --- aggregation over a synthetic study -----------------------------------------------------

STUDY = """
[data]
kind = "gaussian"
[model]
n_particles = 8
[dynamics]
taus = [1e-2, 1e-3]
steps_per_tau = 100
[sweep]
"model.n_particles" = [8, 32, 128]
"dynamics.seed" = [0, 1, 2]
"""
BASE_PTS = np.array([[1.0, 0.0, 0.5, -1.0], [-0.5, 1.0, 0.0, 0.2],
                     [0.3, -0.7, 1.0, 0.0], [0.0, 0.4, -0.6, 1.0]])


def _fake(N, seed, stage):
    """Per-run numbers of the stub: risk, J, K and the W2 shift scale."""
    return {"risk": 0.1 * (stage + 1) + 0.01 * seed + 1.0 / N, "J": 3 + seed + stage,
            "K": 2 + (seed % 2), "c": 1.0 + 0.1 * seed}


@pytest.fixture
def synthetic_study(tmp_path, monkeypatch):
    """A 3 widths x 3 seeds study directory whose runs are stubs: the summaries come from
    :func:`_fake` and the particles of width N, seed s are the 4 points BASE_PTS replicated,
    shifted by c_s / sqrt(N) along e_1 (the widest run unshifted), so that
    W2(N, N_max) = c_s / sqrt(N) exactly."""
    spec = loads(STUDY)
    m = man.Manifest.for_study(spec, tmp_path)
    by_file = {}
    for j in spec.jobs:
        status = "pending" if (j.axis_values["model.n_particles"], j.axis_values[
            "dynamics.seed"]) == (32, 2) else "done"
        m.set(j.id, status=status)
        if status == "done":
            (tmp_path / j.run_file).write_bytes(b"")
        by_file[j.run_file] = j.axis_values
    m.save(force=True)
    n_max = 128

    def summarize(path):
        v = by_file[path.name]
        f = [_fake(v["model.n_particles"], v["dynamics.seed"], s) for s in range(2)]
        return {"taus": [1e-2, 1e-3], "risk": [x["risk"] for x in f],
                "n_rays": [x["J"] for x in f], "n_hyperplanes": [x["K"] for x in f],
                "frames": [0, 1], "source": "stub"}

    def frame(path, k):
        v = by_file[path.name]
        N = v["model.n_particles"]
        shift = 0.0 if N == n_max else _fake(N, v["dynamics.seed"], k)["c"] / math.sqrt(N)
        return np.tile(BASE_PTS, (N // 4, 1)) + np.array([shift, 0, 0, 0])

    monkeypatch.setattr(S, "_frame", frame)
    return tmp_path, spec, summarize


def test_table_means_and_spreads_over_seeds(synthetic_study):
    d, spec, summarize = synthetic_study
    res = S.analyze_study(d, summarize=summarize)
    assert res["seed_axis"] == "dynamics.seed" and res["width_axis"] == "model.n_particles"
    assert res["jobs"] == {"pending": 1, "running": 0, "done": 8, "failed": 0}
    assert len(res["table"]) == 3 * 2
    for row in res["table"]:
        N, stage = row["model.n_particles"], [1e-2, 1e-3].index(row["tau"])
        seeds = [0, 1] if N == 32 else [0, 1, 2]  # (32, seed 2) is not done
        vals = [_fake(N, s, stage) for s in seeds]
        assert row["n_seeds"] == len(seeds)
        for key, name in (("risk", "risk"), ("J", "J"), ("K", "K")):
            x = np.array([v[key] for v in vals], float)
            assert row[f"{name}_mean"] == pytest.approx(x.mean(), rel=1e-12)
            assert row[f"{name}_std"] == pytest.approx(x.std(ddof=1), rel=1e-12)
        if N == 128:
            assert math.isnan(row["w2_mean"])
        else:
            w = np.array([v["c"] / math.sqrt(N) for v in vals])
            assert row["w2_mean"] == pytest.approx(w.mean(), rel=1e-6)
            assert row["w2_std"] == pytest.approx(w.std(ddof=1), rel=1e-4)


def test_width_dependence_and_slope(synthetic_study):
    d, spec, summarize = synthetic_study
    res = S.analyze_study(d, summarize=summarize)
    assert len(res["width"]) == 2  # one line per tau
    for g in res["width"]:
        assert g["n_particles"] == [8, 32] and g["reference_n_particles"] == 128
        assert g["method"] == "exact"
    # seeds 0,1,2 at N=8 but only 0,1 at N=32: slope of the means, computed independently
    stage = 0
    m8 = np.mean([_fake(8, s, stage)["c"] for s in (0, 1, 2)]) / math.sqrt(8)
    m32 = np.mean([_fake(32, s, stage)["c"] for s in (0, 1)]) / math.sqrt(32)
    assert res["width"][0]["slope"] == pytest.approx(math.log(m32 / m8) / math.log(4), rel=1e-6)


def test_arrays_markdown_json_and_figures(synthetic_study, tmp_path_factory):
    d, spec, summarize = synthetic_study
    arr = S.study_arrays(d, summarize=summarize)
    assert arr.shape == (3, 3) and list(arr.taus) == [1e-2, 1e-3]
    assert arr.risk.shape == (3, 3, 2)
    assert arr.status[1, 2] == "pending" and np.isnan(arr.risk[1, 2]).all()
    assert arr.risk[2, 1, 1] == pytest.approx(_fake(128, 1, 1)["risk"])
    assert arr.n_rays[0, 2, 0] == _fake(8, 2, 0)["J"]
    res = S.analyze_study(d, summarize=summarize)
    md = S.format_markdown(res)
    assert "W2 to widest" in md and "slope" in md and "± " in md
    doc = json.loads(S.to_json(res))
    assert doc["table"][-1]["w2_mean"] is None  # nan -> null
    out = tmp_path_factory.mktemp("report")
    files = S.write_report(res, out)
    names = {f.name for f in files}
    assert {"study.json", "study.md", "J_tau.png", "K_tau.png", "risk_tau.png",
            "w2_width.png"} <= names
    assert all(f.stat().st_size > 0 for f in files)


def test_is_study_dir(synthetic_study, tmp_path_factory):
    d, _, _ = synthetic_study
    assert S.is_study_dir(d)
    other = tmp_path_factory.mktemp("plain")
    assert not S.is_study_dir(other)
    (other / "manifest.json").write_text('{"format": "something-else"}')
    assert not S.is_study_dir(other)
    assert not S.is_study_dir(d / "manifest.json")


# --- per-run summary from a real run file ---------------------------------------------------

@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    from meanfield import config, runner
    cfg = config.from_dict({"data": {"kind": "gaussian", "n": 5, "d": 2},
                            "model": {"n_particles": 20},
                            "dynamics": {"taus": [1e-2, 1e-3, 1e-3], "steps_per_tau": 200},
                            "output": {"observe_every": 10, "snapshots_per_tau": 2}})
    out = tmp_path_factory.mktemp("run") / "r.h5"
    runner.run(cfg, out, progress=False, threads=1)
    return out


def test_run_summary_risk_and_frames_per_stage(run_file, monkeypatch):
    from meanfield.store import open_run
    monkeypatch.setattr(S, "_per_run_analysis", lambda: None)
    summ = S.run_summary(run_file)
    run = open_run(run_file)
    steps, risk = run.observables["risk"]["step"], run.observables["risk"]["value"]
    assert summ["taus"] == [1e-2, 1e-3, 1e-3] and summ["source"] == "observables"
    for s in range(3):  # time average over the second half of each stage, by step
        sel = (steps > 200 * s + 100) & (steps <= 200 * (s + 1))
        assert sel.sum() == 10
        assert summ["risk"][s] == pytest.approx(risk[sel].mean(), rel=1e-12)
        assert run.frame_step[summ["frames"][s]] == 200 * (s + 1)
    assert all(math.isnan(v) for v in summ["n_rays"] + summ["n_hyperplanes"])


def test_run_summary_takes_j_k_from_the_per_run_report(run_file, monkeypatch):
    calls = []

    def fake_analyze_run(path):
        calls.append(path)
        # two snapshots per stage; the last one of each stage must be used
        return {"bound_2P_minus_1": 31,
                "snapshots": [{"stage": g, "step": st, "tau": t, "n_rays": st // 10,
                               "n_hyperplanes": 1}
                              for g, st, t in ((0, 150, 1e-2), (0, 200, 1e-2), (1, 350, 1e-3),
                                               (1, 400, 1e-3), (2, 550, 1e-3), (2, 600, 1e-3))]}

    monkeypatch.setattr(S, "_per_run_analysis", lambda: fake_analyze_run)
    summ = S.run_summary(run_file)
    assert calls == [str(run_file)]
    assert summ["n_rays"] == [20.0, 40.0, 60.0] and summ["n_hyperplanes"] == [1.0] * 3
    assert summ["bound_2P_minus_1"] == 31 and summ["source"] == "meanfield.report"


def test_run_summary_of_a_two_chain_run_says_whether_its_chains_agree(tmp_path):
    """The summary of a run of two chains carries the chain count and, per stage, the
    per-run report's verdict on whether the chains' ``J`` and ``K`` agree."""
    from meanfield import config, report, runner
    cfg = config.from_dict({"data": {"kind": "gaussian", "n": 5, "d": 2},
                            "model": {"n_particles": 20},
                            "dynamics": {"taus": [1e-2, 1e-3], "steps_per_tau": 200,
                                         "chains": 2},
                            "output": {"observe_every": 10, "snapshots_per_tau": 1}})
    out = tmp_path / "r.h5"
    runner.run(cfg, out, progress=False, threads=1)
    summ = S.run_summary(out)
    rep = report.analyze_run(str(out), references=False, sensitivity=False)
    assert summ["n_chains"] == 2
    assert summ["chains_agree"] == [r["chains_agree"] for r in rep["ladder"]]
    assert summ["stationary"] == [r["stationary"] for r in rep["ladder"]]
    assert all(isinstance(a, bool) for a in summ["chains_agree"])


def test_study_table_counts_the_runs_whose_chains_disagree(synthetic_study):
    d, spec, summarize = synthetic_study

    seeds_of = {j.run_file: j.axis_values["dynamics.seed"] for j in spec.jobs}

    def fake(path):
        out = summarize(path)
        out["n_chains"] = 2
        out["chains_agree"] = [True, seeds_of[path.name] != 1]   # stage 1: seed 1 disagrees
        out["stationary"] = [seeds_of[path.name] != 0, False]   # stage 0: seed 0 is not
        return out
    res = S.analyze_study(d, summarize=fake, w2=False)
    for row in res["table"]:
        expect = 0 if row["stage"] == 0 else 1                # seed 1 is done at every width
        assert row["runs_chains_disagree"] == expect
        assert row["runs_stationary"] == (row["n_seeds"] - 1 if row["stage"] == 0 else 0)
    assert all(r["n_chains"] == 2 for r in res["runs"])
    md = S.format_markdown(res)
    assert "Runs of 2 chains: `J` and `K` are chain 0's" in md
    assert md.count(": 1 of") == 3                            # three widths at stage 1
    assert "| stationary runs |" in md and "| 0 of 3 |" in md and "| 1 of 2 |" in md
    assert "its `J` and `K` are not results" in md
    assert "risk: time average over the last 50% of each stage" in md
    one = S.analyze_study(d, summarize=summarize, w2=False)   # summaries without chains
    assert all(r["runs_chains_disagree"] is None for r in one["table"])
    assert all(r["runs_stationary"] is None for r in one["table"])
    assert "chain 0" not in S.format_markdown(one)
    assert "stationary runs" not in S.format_markdown(one)
