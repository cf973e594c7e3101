"""The config stays typed from the run file to the analysis, and the analysis result stays typed
to the report: ``open_run`` gives a :class:`meanfield.config.RunConfig` (an old file whose stored
config no longer validates reads leniently, with a warning); ``J``, ``K`` of every ladder row are
integers whatever the stage's verdict, "not stationary" is rendered from ``stationary``; an old
``report.json`` (the string in ``J`` and the counts in ``J_measured``) still loads; the ladder
figure draws the report's own ``τ → 0`` counts."""

import json
import warnings

import h5py
import numpy as np
import pytest

from analysis.run_analysis import REPORT_SCHEMA_VERSION, count_text, upgrade_report
from analysis.synthetic import planted_rays
from analysis.time_average import predictor_from_residuals, stored_predictor
from meanfield import config, data
from meanfield.errors import InputError, RunFileError, StoredConfigWarning
from meanfield.store import RunWriter, open_run
from solvers.observation import Observation

S, LAM, TAUS, T, EVERY = 2.5, 0.05, [1e-3, 1e-4], 20000, 10


def _cfg():
    return config.from_dict({"data": {"kind": "two_point", "d": 2, "norm": S, "labels": "even",
                                      "y": 1.0},
                             "model": {"n_particles": 600},
                             "dynamics": {"lam": LAM, "taus": TAUS, "steps_per_tau": T},
                             "output": {"observe_every": EVERY, "snapshots_per_tau": 1}})


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    """Two-point data, two stages of T steps observed every EVERY steps: the first stage's
    residuals are white noise about a constant (stationary), the second's drift linearly
    (judged not stationary); one frame per stage holding the two rays of the even two-point
    solution (docs/theory.md §8), so both stages measure J = K = 2."""
    from analysis.two_point import predict
    cfg = _cfg()
    ds = data.from_config(cfg)
    p = predict(S, 1.0, LAM, "even")
    xbar = ds.X[0]
    dirs = np.array([np.r_[xbar, 1.0], np.r_[-xbar, 1.0]])
    c = p["phi"] / np.sqrt(1 + S * S)
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("run") / "typed.h5"
    with RunWriter(path, cfg, ds) as w:
        for s, tau in enumerate(TAUS):
            rows = []
            for k in range(1, T // EVERY + 1):
                step = s * T + k * EVERY
                drift = 0.0 if s == 0 else 0.05 * k * EVERY / T
                R = (1e-3 * rng.standard_normal(ds.n) + drift - 0.1) / ds.n
                rows.append(Observation(step=step, time=step * 0.05, tau=tau, stage=s,
                                        step_in_stage=k * EVERY, risk=0.1,
                                        regulariser=0.1, mean_sq_norm=1.0, stationarity=np.nan,
                                        residuals=R, residuals_previous=R, eta_lambda_max=0.5))
            w.append_observations(rows)
            theta, _ = planted_rays(dirs, [c, c], 600, noise=0.005, halo_particles=0.2,
                                    halo_mass=0.02, seed=s)
            w.append_frame(theta, (s + 1) * T, (s + 1) * T * 0.05, tau, s, T)
        w.mark_complete()
    return path


@pytest.fixture(scope="module")
def report(run_file):
    from meanfield.report import analyze_run
    return analyze_run(str(run_file), w2=False, convex=True, references=False,
                       sensitivity=False)


def test_open_run_gives_the_typed_config(run_file):
    cfg = _cfg()
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # a valid stored config: no warning
        run = open_run(run_file)
    assert isinstance(run.config, config.RunConfig)
    assert run.config.as_dict() == cfg.as_dict()
    assert run.config.hash() == cfg.hash()
    assert run.config.dynamics.lam == run.lam == LAM
    assert run.taus == TAUS and run.activation == "relu" and run.n_particles == 600
    assert run.schedule == cfg.schedule
    assert json.loads(run.config_json) == cfg.as_dict()


def test_an_old_stored_config_reads_leniently_with_a_warning(run_file, tmp_path):
    """A stored config that no longer validates (here: a key since removed, a value out of
    today's range, a key missing) is read as stored, with the defaults for missing keys."""
    import shutil
    old = tmp_path / "old.h5"
    shutil.copy(run_file, old)
    stored = _cfg().as_dict()
    stored["dynamics"]["lam"] = -0.5                # refused today
    stored["dynamics"]["old_knob"] = 3              # unknown today
    del stored["output"]["checkpoint_every"]        # missing: its default
    with h5py.File(old, "r+") as f:                 # as the run that stored it wrote them
        f["parameters"].attrs["config_json"] = json.dumps(stored)
        f["parameters"].attrs["config_hash"] = config.json_hash(json.dumps(stored))
        f["parameters"].attrs["lam"] = -0.5
    with pytest.warns(StoredConfigWarning, match=r"old\.h5: the stored config no longer "
                                                 r"validates .*dynamics"):
        run = open_run(old)
    assert isinstance(run.config, config.RunConfig)
    assert run.lam == -0.5 and run.taus == TAUS
    assert not hasattr(run.config.dynamics, "old_knob")
    assert run.config.output.checkpoint_every == config.OutputConfig().checkpoint_every
    assert run.schedule == _cfg().schedule
    # a stored [data] table without a known kind is not a run this version can read
    stored["data"]["kind"] = "nope"
    with h5py.File(old, "r+") as f:
        f["parameters"].attrs["config_json"] = json.dumps(stored)
        f["parameters"].attrs["config_hash"] = config.json_hash(json.dumps(stored))
    with pytest.raises(RunFileError, match="data.kind"):
        open_run(old)


def test_the_residual_scaling_is_undone_in_one_place(run_file):
    run = open_run(run_file)
    R = run.observables["residuals"]["value"]
    F = stored_predictor(run)
    np.testing.assert_allclose(F, R * run.n + run.y[None, :], rtol=0, atol=1e-15)
    np.testing.assert_allclose((F - run.y) / run.n, R, rtol=0, atol=1e-15)
    assert predictor_from_residuals([], run.y).shape == (0, run.n)
    with pytest.raises(ValueError, match="residuals of shape"):
        predictor_from_residuals(np.zeros((3, run.n + 1)), run.y)


def test_counts_stay_integers_at_a_stage_judged_not_stationary(report):
    from meanfield.report import markdown
    rows = report["ladder"]
    assert report["schema_version"] == REPORT_SCHEMA_VERSION
    assert [r["stationary"] for r in rows] == [True, False], [r["stationarity"]["reasons"] for r in rows]
    assert any("drift" in why for why in rows[1]["stationarity"]["reasons"])
    for r in rows:
        for key in ("J", "K", "J_convex", "K_convex", "matched"):
            assert type(r[key]) is int, (key, r[key])
        assert "J_measured" not in r and "K_measured" not in r
        assert r["J"] == r["K"] == 2
    assert [count_text(r, "J") for r in rows] == ["2", "2 (not stationary)"]
    md = markdown(report)
    line = next(x for x in md.splitlines() if x.startswith("| 1.00e-04 | 40000 | **NO** |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    v = rows[1]["stationarity"]
    # stage, step, verdict, R̂ (within the one chain), ESS bulk and tail, then J and K
    assert cells[3] == f"{v['rhat']:.3f} ({v['rhat_worst']} within one chain)"
    assert cells[4] == f"{v['ess_bulk']:.0f}, {v['ess_tail']:.0f}"
    assert cells[5:7] == ["2 (not stationary)", "2 (not stationary)"]
    # the convex counts once, as the τ → 0 row
    c = report["convex_counts"]
    assert md.count("τ → 0 (convex)") == 2          # the row and the note under the table
    assert f"| τ → 0 (convex) | — | — | — | — | {c['J']} | {c['K']} |" in md


def test_the_ladder_figure_draws_the_reports_tau0_counts(report, run_file):
    from meanfield.figures import plot_ladder
    run = open_run(run_file)
    c = report["convex_counts"]
    rep = json.loads(json.dumps(report))
    rep["convex_counts"] = {**c, "J": c["J"] + 3, "K": c["K"] + 5}   # not what a solve gives
    fig = plot_ladder(rep, run)
    a = fig.axes[0]
    limit = [ln for ln in a.get_lines() if ln.get_label() == "τ → 0 (exact)"]
    assert len(limit) == 1 and list(limit[0].get_ydata()) == [c["J"] + 3]
    K0 = [ln for ln in a.get_lines() if ln.get_marker() == "s" and len(ln.get_xdata()) == 1]
    assert len(K0) == 1 and list(K0[0].get_ydata()) == [c["K"] + 5]
    J = [ln for ln in a.get_lines() if ln.get_label() == "rays J"][0]
    assert list(J.get_ydata()) == [r["J"] for r in rep["ladder"]]


def test_an_old_report_still_loads(tmp_path):
    from meanfield.report import load_report
    from meanfield.tidy import ladder_table
    old = {"run": "r.h5", "P": 4,
           "ladder": [{"tau": 1e-3, "J": 2, "K": 2, "J_measured": 2, "K_measured": 2,
                       "stationary": True},
                      {"tau": 1e-4, "J": "not stationary", "K": "not stationary",
                       "J_measured": 4, "K_measured": 3, "stationary": False}]}
    new = upgrade_report(old)
    assert new["schema_version"] == REPORT_SCHEMA_VERSION
    assert [(r["J"], r["K"]) for r in new["ladder"]] == [(2, 2), (4, 3)]
    assert all("J_measured" not in r and "K_measured" not in r for r in new["ladder"])
    assert old["ladder"][1]["J"] == "not stationary"        # the input is not modified
    assert upgrade_report(new) == new
    p = tmp_path / "report.json"
    p.write_text(json.dumps(old))
    assert load_report(p) == new
    assert list(ladder_table(old).J) == [2, 4]
    bad = {"ladder": [{"tau": 1e-4, "J": "not stationary", "K": 1}]}
    with pytest.raises(ValueError, match=r"ladder\[0\]\.J = 'not stationary' without"):
        upgrade_report(bad)
    with pytest.raises(ValueError, match="schema_version 99"):
        upgrade_report({"schema_version": 99, "ladder": []})
    p.write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(InputError, match="schema_version 99"):
        load_report(p)


def test_the_command_line_renders_the_flag_and_the_tau0_counts_once(run_file, tmp_path, capsys):
    from meanfield.cli import main
    capsys.readouterr()
    assert main(["analyze", str(run_file), "-o", str(tmp_path / "rep"), "--no-w2",
                 "--no-sensitivity", "--no-figures", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [ln for ln in out if ln.startswith("tau=") and " step=" in ln]
    assert len(rows) == 2
    assert "rays J=  2 hyperplanes K=  2" in rows[0] and "NOT STATIONARY" not in rows[0]
    # the integers in one column, whether the row is stationary or not
    assert "rays J=  2 (not stationary) hyperplanes K=  2 (not stationary)" in rows[1]
    assert rows[0].index("rays J=") == rows[1].index("rays J=")
    assert "NOT STATIONARY: " in rows[1] and "drift: " in rows[1]
    assert not any("convex" in ln for ln in rows)
    limit = [ln for ln in out if ln.startswith("tau -> 0")]
    assert len(limit) == 1 and "rays J=  2 hyperplanes K=  2" in limit[0]


def test_a_gibbs_comparison_states_its_allowance():
    from analysis.references import (
        VERDICT_CONSISTENT,
        VERDICT_INCONSISTENT,
        VERDICT_WITHIN_STEP_BIAS,
        Z_CONSISTENT,
        gibbs_allowance,
        step_bias_allowance,
    )
    f_ref = np.array([0.5, -2.0, 1.0])
    # (d+3)(ηλ/2) max|f_ref| = 5 · 0.001 · 2 at d = 2, η = 0.04, λ = 0.05
    assert step_bias_allowance("em", 0.04, 0.05, 2, f_ref) == pytest.approx(0.01, rel=1e-12)
    assert step_bias_allowance("lm", 0.04, 0.05, 2, f_ref) == pytest.approx(0.01, rel=1e-12)
    assert step_bias_allowance("mala", 0.04, 0.05, 2, f_ref) == 0.0
    with pytest.raises(ValueError, match="unknown integrator 'rk4'"):
        step_bias_allowance("rk4", 0.04, 0.05, 2, f_ref)
    # e = sqrt(se² + q²) = (5e-3, 5e-3, sqrt(1e-5)) with q = 3e-3 and se = (4e-3, 4e-3, 1e-3)
    se, q, b = np.array([4e-3, 4e-3, 1e-3]), 3e-3, 0.01
    e3 = np.sqrt(1e-5)
    g = gibbs_allowance([0.02, -0.005, 0.0], se, q, b)
    assert g["combined_error"] == pytest.approx(5e-3) and g["step_bias_allowance"] == b
    # 4 errors off with no allowance, 2 with it: only the bound brings it within 3
    assert g["z"] == pytest.approx((0.02 - b) / 5e-3)
    assert g["z_without_allowance"] == pytest.approx(0.02 / 5e-3)
    assert g["verdict"] == VERDICT_WITHIN_STEP_BIAS
    g = gibbs_allowance([0.0, 0.0, 0.0115], se, q, b)
    assert g["z"] == pytest.approx((0.0115 - b) / e3)
    assert g["verdict"] == VERDICT_WITHIN_STEP_BIAS
    g = gibbs_allowance([0.01 + 3.01 * 5e-3, 0.0, 0.0], se, q, b)
    assert g["z"] > Z_CONSISTENT and g["verdict"] == VERDICT_INCONSISTENT
    g = gibbs_allowance([0.014, 0.0, 0.0], se, q, b)           # 2.8 errors, no allowance
    assert g["z_without_allowance"] == pytest.approx(2.8) and g["verdict"] == VERDICT_CONSISTENT
    with pytest.raises(ValueError, match="diff of shape"):
        gibbs_allowance([0.0, 0.0], se, q, b)


def test_an_inconsistent_exact_comparison_names_the_width_bias():
    """Without a step bias (``"mala"``) an inconsistent row names the ``O(1/N)`` width bias,
    its estimate (else the coefficient the difference implies) and the command that removes
    it; a consistent row, or one of a sampler with a step bias, says the verdict alone."""
    from analysis.references import (
        VERDICT_CONSISTENT,
        VERDICT_INCONSISTENT,
        WIDTH_BIAS_NOTE,
        gibbs_allowance,
        verdict_text,
    )
    se = np.array([1e-5, 1e-5])
    exact_off = {**gibbs_allowance([7e-5, 0.0], se, 0.0, 0.0, exact=True), "n_particles": 1000,
                 "width_bias": None, "width_bias_implied": 1000 * 7e-5}
    assert exact_off["verdict"] == VERDICT_INCONSISTENT
    text = verdict_text(exact_off, "A.h5")
    assert text.startswith(f"{VERDICT_INCONSISTENT}, {WIDTH_BIAS_NOTE}")
    assert "meanfield analyze A.h5 --extrapolate-n B.h5" in text and "n_particles = 500" in text
    assert "0.07/N" in text and "not a test" in text
    # a handful of particles is far from the O(1/N) regime: the second run gets more, not fewer
    assert "B the same run at n_particles = 10" in verdict_text({**exact_off, "n_particles": 5})
    assert "n_particles = 100" in verdict_text({**exact_off, "n_particles": 200})
    est = {**exact_off, "width_bias": {"max_abs": 6e-5, "max_abs_coefficient": 0.06,
                                       "particles": 4000}, "z_without_width_bias": 1.0}
    text = verdict_text(est, "A.h5")
    assert "6.0e-05 = 0.06/N from 4000 particles" in text and "z 1 once it is taken off" in text
    assert "not a test" in text and "\n" not in text
    assert verdict_text(gibbs_allowance([2e-5, 0.0], se, 0.0, 0.0, exact=True)) == \
        VERDICT_CONSISTENT
    assert verdict_text(gibbs_allowance([7e-5, 0.0], se, 0.0, 1e-5)) == VERDICT_INCONSISTENT


def test_the_ess_column_says_per_chain_or_all_chains(report):
    """The ladder table's ESS cells are what its header says: one chain's ESS, or with ``K``
    chains the ESS per chain (ArviZ's of all chains together over ``K``) with the total in
    parentheses; the verdict line under it says which chain its ESS of the MCSE is."""
    from meanfield.report import markdown
    head = next(x for x in markdown(report).splitlines() if x.startswith("| τ | step |"))
    assert "| ESS bulk, tail (one chain) |" in head
    # the same report as a run of three chains would give it (made-up ESS values)
    rows = [dict(r, stationarity={**r["stationarity"], "n_chains": 3, "ess_bulk": 330.0,
                                  "ess_tail": 240.0, "ess": 90.0})
            for r in report["ladder"]]
    md = markdown(dict(report, ladder=rows)).splitlines()
    head = next(x for x in md if x.startswith("| τ | step |"))
    assert "| ESS bulk, tail per chain (all 3 chains together) |" in head
    line = next(x for x in md if x.startswith("| 1.00e-04 | 40000 | **NO** |"))
    assert [c.strip() for c in line.strip("|").split("|")][4] == "110, 80 (330, 240)"
    notes = [x for x in md if x.startswith("- τ = ")]
    assert len(notes) == 2
    assert all("ESS of the MCSE 90 per chain (the smallest chain's)" in x for x in notes)
