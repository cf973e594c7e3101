"""End to end: a run file with planted snapshots of symmetric two-point data through
``analyze_run`` and ``meanfield analyze --json``."""

import json

import numpy as np
import pytest

from analysis.synthetic import planted_rays
from analysis.two_point import predict
from meanfield import config, data
from meanfield.cli import main as cli_main
from meanfield.report import analyze_run
from meanfield.store import RunWriter

S, LAM = 2.5, 0.05


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    """Even two-point data in d = 2 with |x̄| = 2.5 > √3; frames at three temperatures holding
    the two predicted rays u = (±x̄, 1) with weights c = φ/sqrt(1+s²), each (THEORY §8), noisier
    at higher τ, plus a halo. The ray particles carry about 15 free-particle baselines
    (d+1)τ/λ at the hottest τ, so they are rays at every τ."""
    cfg = config.from_dict({"data": {"kind": "two_point", "d": 2, "norm": S, "labels": "even",
                                     "y": 1.0},
                            "model": {"n_particles": 1500},
                            "dynamics": {"lam": LAM, "taus": [1e-3, 3e-4, 1e-4]}})
    ds = data.from_config(cfg)
    p = predict(S, 1.0, LAM, "even")
    xbar = ds.X[0]
    dirs = np.array([np.r_[xbar, 1.0], np.r_[-xbar, 1.0]])
    c = p["phi"] / np.sqrt(1 + S * S)
    path = tmp_path_factory.mktemp("run") / "two_point.h5"
    with RunWriter(path, cfg, ds) as w:
        for k, (tau, noise) in enumerate([(1e-3, 0.05), (3e-4, 0.02), (1e-4, 0.005)]):
            theta, _ = planted_rays(dirs, [c, c], 1500, noise=noise, halo_particles=0.2,
                                    halo_mass=0.02, seed=k)
            w.append_frame(theta, (k + 1) * 1000, (k + 1) * 10.0, tau, k, 1000)
        w.mark_complete()
    return path, p


def test_analyze_run_ladder_patterns_theorem6_and_proposition7(run_file, tmp_path):
    path, p = run_file
    ref = np.full(2, p["phi"])
    rep = analyze_run(path, tmp_path / "rep", figures=True, reference=ref, references=False,
                      sensitivity=False)
    assert rep["P"] == 4 and rep["cover"] == 4 and rep["bound_2P_minus_1"] == 7
    assert [r["n_rays"] for r in rep["n_rays_by_tau"]] == [2, 2, 2]
    rows = rep["ladder"]
    assert [r["tau"] for r in rows] == [1e-3, 3e-4, 1e-4]
    assert all(r["J"] == 2 and r["K"] == 2 for r in rows)
    assert rows[0]["w2_to_previous"] is None
    assert all(r["w2_method"] == "exact" and r["w2_to_previous"] > 0 for r in rows[1:])
    # same rays at every τ; W2 of the ray measures still feels the ~1e-4 weight differences
    # between the two antipodal-ish atoms (moving mass δ over chord 1.86 costs 1.86 sqrt(δ))
    assert all(r["w2_rays_to_previous"] < 0.05 for r in rows[1:])
    assert all(r["dist_to_reference"] < 0.02 for r in rows)
    assert [w["tau"] for w in rep["w2_to_previous"]] == [3e-4, 1e-4]
    # ternary patterns: the kink ⟨x̄, x⟩ = ±1 passes through neither point
    assert sorted(map(tuple, rep["patterns"])) == [(-1, 1), (1, -1)]
    assert rep["theorem6"]["distinct"] and rep["theorem6"]["antichain"]
    assert rep["theorem6"]["max_per_binary"] == 1
    tp = rep["two_point"][-1]
    assert tp["labels"] == "even" and tp["predicted"]["kinks"] == [-1.0, 1.0]
    assert tp["measured"]["kinks"] == pytest.approx([-1.0, 1.0], abs=0.02)
    assert tp["measured"]["off_axis"] == 0
    assert tp["measured"]["phi"] == pytest.approx(p["phi"], rel=0.03)
    for f in ("report.json", "report.md", "predictor.png", "ladder.png"):
        assert (tmp_path / "rep" / f).exists()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Proposition 7" in md and "Theorem 6" in md


def test_cli_analyze_json_keys(run_file, tmp_path, capsys):
    path, _ = run_file
    assert cli_main(["analyze", str(path), "-o", str(tmp_path / "r"), "--json",
                     "--no-figures", "--no-w2"]) == 0
    rep = json.loads(capsys.readouterr().out)
    for key in ("n_rays_by_tau", "w2_to_previous", "patterns", "theorem6"):
        assert key in rep
    assert {"distinct", "antichain", "max_per_binary"} <= set(rep["theorem6"])
    assert cli_main(["analyze", str(path), "--g-ray", "2"]) == 2
    with pytest.raises(SystemExit) as exc:
        cli_main(["analyze", str(path), "--rule", "kmeans"])
    assert exc.value.code == 2


def test_cli_analyze_rule_linkage_reaches_every_stage(tiny_run_file, tmp_path, capsys):
    """``--rule linkage`` groups every stage by the single linkage (to compare with the default
    basins rule); the report says which rule each snapshot got."""
    _, path = tiny_run_file
    rules = {}
    for rule in ("auto", "linkage"):
        assert cli_main(["analyze", str(path), "-o", str(tmp_path / rule), "--json",
                         "--no-figures", "--no-w2", "--no-sensitivity", "--no-references",
                         "--rule", rule]) == 0
        rep = json.loads(capsys.readouterr().out)
        rules[rule] = {s["thresholds"]["rule"] for s in rep["snapshots"]}
    assert rules["linkage"] == {"linkage"}
    assert "basins" in rules["auto"]


def test_analyze_run_defaults_are_those_of_meanfield_analyze():
    """Each ``--no-X`` switch of ``meanfield analyze`` is a parameter ``X`` of
    ``analyze_run`` that defaults to on, and the ray thresholds default alike: the report of
    a call and of the command are the same."""
    import inspect

    from meanfield.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    analyze = sub.choices["analyze"]
    params = inspect.signature(analyze_run).parameters
    switched = {a.dest[len("no_"):]: a.default for a in analyze._actions
                if a.dest.startswith("no_") and a.dest[len("no_"):] in params}
    assert set(switched) >= {"w2", "references", "sensitivity"}
    for name, off in switched.items():
        assert off is False and params[name].default is True, name
    assert params["figures"].default is True            # --no-figures
    from analysis.rays import find_rays
    rays = inspect.signature(find_rays).parameters
    for flag, name in (("min_mass", "min_mass_frac"), ("g_ray", "g_ray"),
                       ("halo_ratio", "halo_ratio")):
        default = next(a.default for a in analyze._actions if a.dest == flag)
        assert rays[name].default == default, flag


def test_theorem6_of_a_stage_not_stationary_reads_as_words(run_file, tmp_path):
    """The checks of a stage that is not stationary are listed as words and numbers (they
    were Python's dict repr, ``{'distinct': True, ...}``)."""
    from meanfield.report import markdown
    path, _ = run_file
    rep = analyze_run(path, references=False, sensitivity=False)
    rep["theorem6"] = {"status": "not stationary",
                       "measured": {"distinct": True, "antichain": False, "max_per_binary": 2}}
    md = markdown(rep)
    assert ("- not stationary: the coldest stage is not stationary (see above); measured: "
            "distinct yes, antichain no, max per binary 2") in md
    assert "{'" not in md


def test_ladder_table_leaves_out_the_columns_not_computed(tiny_run_file):
    """Without the references and ``W2`` the ladder table has no columns for them (not a
    column of dashes), and every row has as many cells as the header."""
    from meanfield.report import markdown
    _, path = tiny_run_file
    rep = analyze_run(path, w2=False, references=False, sensitivity=False)
    lines = markdown(rep).split("## Low-temperature limit")[1].strip().splitlines()
    table = [ln for ln in lines[:2 + len(rep["ladder"])]]
    header = table[0]
    for gone in ("Gibbs J, K", "matched to τ → 0", "W2 to previous τ", "W2 of rays", "RMS"):
        assert gone not in header
    assert "rays J" in header and "hyperplanes K" in header and "risk" in header
    assert {ln.count("|") for ln in table} == {header.count("|")}
