"""Comparison of runs with the exact references (analysis.references)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.references import (
    VERDICT_CONSISTENT,
    VERDICT_INCONSISTENT,
    VERDICT_TOO_FEW,
    VERDICT_WITHIN_STEP_BIAS,
    VERDICTS,
    WIDTH_BIAS_NOTE,
    Z_CONSISTENT,
    compare_run,
    convex_distance,
    gibbs_allowance,
    gibbs_distance,
    match_rays,
    verdict_text,
)
from analysis.time_average import MIN_TAU_SAMPLES


def _unit(a):
    return np.array([math.cos(a), math.sin(a)])


def test_match_rays_permutation_signs_and_far_pairs():
    ref_d = np.array([_unit(0.0), _unit(1.0), _unit(2.0)])
    ref_s = np.array([1, -1, 1])
    ref_w = np.array([0.5, -0.2, 0.1])
    # measured: permuted, slightly rotated, one extra ray, the ray at angle 2.0 has the wrong sign
    dirs = np.array([_unit(1.01), _unit(0.02), _unit(2.0), _unit(3.0)])
    signs = np.array([-1, 1, -1, 1])
    weights = np.array([-0.21, 0.48, -0.1, 0.05])
    m = match_rays(dirs, signs, weights, ref_d, ref_s, ref_w, max_angle=0.1)
    pairs = {(p["measured"], p["reference"]): p for p in m["pairs"]}
    assert set(pairs) == {(0, 1), (1, 0)}
    assert pairs[(0, 1)]["angle"] == pytest.approx(0.01, abs=1e-12)
    assert pairs[(1, 0)]["weight_error"] == pytest.approx(0.02, abs=1e-12)
    assert m["unmatched_measured"] == [2, 3] and m["unmatched_reference"] == [2]
    assert m["max_angle"] == pytest.approx(0.02, abs=1e-12)
    empty = match_rays(np.zeros((0, 2)), [], [], ref_d, ref_s, ref_w)
    assert empty["pairs"] == [] and empty["unmatched_reference"] == [0, 1, 2]
    assert math.isnan(empty["max_angle"])


def test_match_rays_is_optimal_not_greedy():
    """Greedy nearest matching would pair measured 0 with reference 1 (angle 0.05) and leave
    measured 1 at angle 0.35; the assignment minimises the total (0.1 + 0.1)."""
    ref = np.array([_unit(0.0), _unit(0.2)])
    got = np.array([_unit(0.15), _unit(-0.1)])
    m = match_rays(got, [1, 1], [1, 1], ref, [1, 1], [1, 1], max_angle=0.5)
    assert {(p["measured"], p["reference"]) for p in m["pairs"]} == {(0, 1), (1, 0)}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A small d = 1 run file: five points, λ = 0.2, η = 0.1, N = 500, τ = 0.04 then 0.02."""
    import numba

    from meanfield import config, runner
    numba.set_num_threads(1)
    X = [[-1.0], [-0.3], [0.2], [0.8], [1.5]]
    y = [0.5, -0.2, 0.3, 1.0, -0.4]
    cfg = config.from_dict({"data": {"kind": "inline", "X": X, "y": y},
                            "model": {"n_particles": 500},
                            "dynamics": {"lam": 0.2, "eta": 0.1, "taus": [0.04, 0.02],
                                         "steps_per_tau": 4000},
                            "output": {"observe_every": 10, "snapshots_per_tau": 2}})
    out = tmp_path_factory.mktemp("run") / "r.h5"
    runner.run(cfg, out, progress=False)
    from meanfield.store import open_run
    return open_run(out)


def test_distances_on_a_run(small_run):
    from analysis.time_average import time_average_predictor
    from solvers.convex import convex
    from solvers.gibbs import gibbs
    run = small_run
    assert list(run.frame_stage) == [0, 0, 1, 1]
    for stage, tau in enumerate([0.04, 0.02]):
        g = gibbs_distance(run, stage)
        f, se = time_average_predictor(run, stage, 0.5)
        ref = gibbs(run.X, run.y, 0.2, tau).f_train
        assert g["tau"] == tau
        assert g["max_abs_diff"] == pytest.approx(np.max(np.abs(f - ref)), abs=1e-12)
        # N = 500, window 200 time units: agreement well inside the wrong-τ distance (≥ 0.02)
        assert g["max_abs_diff"] < 0.01
        # the row states its allowance: b = (d+3)(ηλ/2) max|f_ref| (Euler), and z against it
        b = (1 + 3) * (0.1 * 0.2 / 2) * np.max(np.abs(ref))
        assert g["step_bias_allowance"] == pytest.approx(b, rel=1e-12)
        e = np.sqrt(se ** 2 + g["quad_error"] ** 2)
        assert g["combined_error"] == pytest.approx(np.max(e), rel=1e-12)
        z = np.max(np.maximum(np.abs(f - ref) - b, 0) / e)
        assert g["z"] == pytest.approx(z, rel=1e-9, abs=1e-12)
        # and what it reads with no step bias allowed, what the verdict tests
        z0 = np.max(np.abs(f - ref) / e)
        assert g["z_without_allowance"] == pytest.approx(z0, rel=1e-9)
        assert g["z_without_allowance"] >= g["z"]
        assert g["verdict"] == (VERDICT_CONSISTENT if z0 <= 3 else
                                VERDICT_WITHIN_STEP_BIAS if z <= 3 else VERDICT_INCONSISTENT)
        assert g["exact_sampler"] is False and g["n_particles"] == 500
        assert g["n_observations"] == 200                   # 2000 steps / observe_every 10
        assert g["width_bias_implied"] == pytest.approx(500 * np.max(np.abs(f - ref)))
        # the estimate rests on the stage's frames in its second half (both of them)
        assert g["width_bias"]["frames"] == 2 and g["width_bias"]["particles"] == 1000
    c = convex_distance(run)
    assert c["tau"] == 0.02
    f, _ = time_average_predictor(run, 1, 0.5)
    assert c["max_abs_diff"] == pytest.approx(
        np.max(np.abs(f - convex(run.X, run.y, 0.2).f_train)), abs=1e-12)
    ref = convex(run.X, run.y, 0.2)
    rep = compare_run(run, rays_by_stage={1: (ref.directions, ref.signs, ref.weights)})
    assert len(rep["gibbs"]) == 2 and rep["rays"]["max_angle"] < 1e-7


# The four verdicts of gibbs_allowance (docs/theory.md §2.4), each against the arithmetic
# written out: e_j = sqrt(MCSE_j² + q²), z0 = max |diff_j| / e_j (no allowance), z = max
# (|diff_j| − b)₊ / e_j (with the step-bias allowance b).
SE = np.array([3e-3, 4e-3])
Q = 0.0                                            # e = SE exactly


def test_consistent_is_within_three_errors_with_no_allowance():
    g = gibbs_allowance([-8.9e-3, 1.1e-2], SE, Q, 0.05)        # 2.967 and 2.75 errors
    assert g["z_without_allowance"] == pytest.approx(8.9e-3 / 3e-3)
    assert g["z"] == 0.0 and g["verdict"] == VERDICT_CONSISTENT
    g = gibbs_allowance([0.0, 1.2e-2], SE, 5e-3, 0.0)          # e_2 = sqrt(16 + 25)e-3
    assert g["combined_error"] == pytest.approx(np.sqrt(4.1e-5))
    assert g["z_without_allowance"] == pytest.approx(1.2e-2 / np.sqrt(4.1e-5))
    assert g["verdict"] == VERDICT_CONSISTENT


def test_a_difference_only_the_step_bias_bound_allows_is_not_a_test():
    # 3.33 errors at point 1 with no allowance; within 3 once b = 2e-3 is taken off (2.67)
    g = gibbs_allowance([1e-2, 0.0], SE, Q, 2e-3)
    assert g["z_without_allowance"] == pytest.approx(1e-2 / 3e-3) and 1e-2 / 3e-3 > Z_CONSISTENT
    assert g["z"] == pytest.approx(8e-3 / 3e-3) and 8e-3 / 3e-3 <= Z_CONSISTENT
    assert g["verdict"] == VERDICT_WITHIN_STEP_BIAS == "within the step-bias bound (not a test)"
    # beyond the bound too: inconsistent, and no width-bias note without the exact sampler
    g = gibbs_allowance([1.2e-2, 0.0], SE, Q, 2e-3)
    assert g["z"] == pytest.approx(1e-2 / 3e-3) and g["verdict"] == VERDICT_INCONSISTENT
    assert verdict_text(g) == VERDICT_INCONSISTENT


@pytest.mark.parametrize("se,M", [([0.0, 4e-3], None), ([np.nan, 4e-3], None),
                                  ([3e-3, np.inf], None), ([3e-3, 4e-3], MIN_TAU_SAMPLES - 1),
                                  ([0.0, 0.0], 1)])
def test_no_mcse_reads_too_few_observations(se, M):
    """An MCSE of 0 (one observation, or a series that never moved), nan or inf at any point,
    or fewer observations per chain than the autocorrelation time needs: no z, whatever the
    reference's own error (the old rule printed z = 3.5e+14 over a quad_error of 1e-16)."""
    g = gibbs_allowance([0.035, 0.0], se, 1e-16, 0.0, n_observations=M)
    assert g["verdict"] == VERDICT_TOO_FEW == "too few observations"
    assert math.isnan(g["z"]) and math.isnan(g["z_without_allowance"])
    text = verdict_text(g)
    assert text.startswith(VERDICT_TOO_FEW) and f"at least {MIN_TAU_SAMPLES}" in text
    assert (f"{M} per chain" in text) == (M is not None)


def test_enough_observations_is_the_autocorrelation_times_minimum():
    g = gibbs_allowance([0.0, 0.0], SE, Q, 0.0, n_observations=MIN_TAU_SAMPLES)
    assert g["verdict"] == VERDICT_CONSISTENT and g["n_observations"] == MIN_TAU_SAMPLES


def test_the_exact_sampler_names_the_width_bias_with_its_estimate_and_the_command():
    diff = np.array([1.5e-2, -1e-3])                            # 5 errors at point 1
    g = gibbs_allowance(diff, SE, Q, 0.0, exact=True, n_observations=400)
    assert g["z"] == g["z_without_allowance"] == pytest.approx(5.0)
    assert g["verdict"] == VERDICT_INCONSISTENT and g["exact_sampler"] is True
    # with the estimate B/N = (1.2e-2, 0) of N = 50 particles: |diff − B/N| / e = 1 at point 1
    row = {**g, "n_particles": 50, "width_bias_implied": 50 * 1.5e-2,
           "width_bias": {"max_abs": 1.2e-2, "max_abs_coefficient": 0.6, "particles": 500},
           "z_without_width_bias": float(np.max(np.abs(diff - [1.2e-2, 0.0]) / SE))}
    text = verdict_text(row, "runs/a.h5")
    assert text == (f"{VERDICT_INCONSISTENT}, {WIDTH_BIAS_NOTE} (estimated 1.2e-02 = 0.6/N "
                    f"from 500 particles, here 0.75/N; z 1 once it is taken off: an estimate, not a "
                    f"test); meanfield analyze runs/a.h5 --extrapolate-n B.h5 removes it, B "
                    f"the same run at n_particles = 100")
    assert WIDTH_BIAS_NOTE == "possibly the O(1/N) width bias of the N-particle law"
    # an estimate that leaves more than 3 errors says what else the rest may be
    far = verdict_text({**row, "z_without_width_bias": 4.0}, "runs/a.h5")
    assert "z 4 once it is taken off, so the rest is not width bias as estimated (a stage not " \
        "relaxed, heavy particles frozen in direction, the Monte Carlo error): an estimate, " \
        "not a test)" in far
    # no frame to estimate it from: the coefficient the difference implies, said to be no test
    text = verdict_text({**row, "width_bias": None}, "runs/a.h5")
    assert "it would be 0.75/N, against at most 0.095/N measured with the exact sampler" in text
    assert "not a test" in text and "n_particles = 100" in text


def test_the_verdicts_are_four_words_in_one_place():
    assert len(set(VERDICTS)) == 4
    assert VERDICT_CONSISTENT in VERDICTS and VERDICT_TOO_FEW in VERDICTS


def _row(tau, diff, se, step_bias, **kw):
    """A Gibbs row as gibbs_distance makes it, from made-up numbers."""
    diff, se = np.asarray(diff, float), np.asarray(se, float)
    exact = kw.pop("exact", False)
    g = gibbs_allowance(diff, se, 0.0, step_bias, exact=exact, n_observations=kw.pop("M", 100))
    return {"stage": 0, "tau": tau, "max_abs_diff": float(np.max(np.abs(diff))),
            "rms_diff": float(np.sqrt(np.mean(diff ** 2))), "max_stderr": float(np.max(se)),
            "f_particles": list(diff), "f_reference": [0.0] * len(diff), **g,
            "n_particles": 64, "width_bias": None,
            "width_bias_implied": 64 * float(np.max(np.abs(diff))),
            "z_without_width_bias": None, "max_abs_G": 0.5, "residual": 0.0,
            "quad_error": 0.0, "method": "quadrature", "seconds": 0.0, **kw}


def test_the_analyze_line_and_the_report_row_say_each_verdict():
    """Each verdict reads the same on the command line and in report.md, with both ``z``
    where a step-bias allowance applies and no ``z`` without an MCSE."""
    from meanfield.cli.analyze import gibbs_line
    from meanfield.report import _references_markdown
    rows = [_row(1e-2, [3e-3, 0.0], [2e-3, 2e-3], 0.01),          # 1.5 errors
            _row(1e-3, [1e-2, 0.0], [2e-3, 2e-3], 0.01),          # 5 errors, 0 with b
            _row(1e-4, [1e-2, 0.0], [2e-3, 2e-3], 0.0, exact=True),
            _row(1e-5, [1e-2, 0.0], [0.0, 0.0], 0.0, M=1)]
    assert [r["verdict"] for r in rows] == [VERDICT_CONSISTENT, VERDICT_WITHIN_STEP_BIAS,
                                            VERDICT_INCONSISTENT, VERDICT_TOO_FEW]
    lines = [gibbs_line(r, "a.h5") for r in rows]
    assert lines[0].endswith("z = 0 (1.5 without the allowance): consistent")
    assert lines[1].endswith("z = 0 (5 without the allowance): within the step-bias bound "
                             "(not a test)")
    assert f"z = 5: inconsistent, {WIDTH_BIAS_NOTE} (it would be 0.64/N" in lines[2]
    assert "allowance" not in lines[2] and "combined error 2.0e-03)" in lines[2]   # exact
    assert lines[2].endswith("meanfield analyze a.h5 --extrapolate-n B.h5 removes it, B the "
                             "same run at n_particles = 128")
    assert lines[3].endswith("(std. error 0.0e+00): too few observations (1 per chain in the "
                             "window; an MCSE needs at least 8 and a nonzero, finite value at "
                             "every point: no z)")
    assert "z =" not in lines[3] and "e+14" not in lines[3]
    assert all("\n" not in ln for ln in lines)
    convex = {"tau": 1e-5, "max_abs_diff": 0.0, "rms_diff": 0.0, "n_rays": 1, "max_abs_G": 1.0,
              "duality_gap": 0.0}
    md = _references_markdown({"gibbs": rows, "convex": convex}, "a.h5")
    table = [ln for ln in md if ln.startswith("| 1.00e-")]
    assert len(table) == 4
    for ln, r in zip(table, rows):
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert cells[8] == verdict_text(r, "a.h5")
    assert [ln.split("|")[7].strip() for ln in table] == ["0", "0", "5", "—"]    # z
    assert [ln.split("|")[8].strip() for ln in table] == ["1.5", "5", "5", "—"]  # without


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """``meanfield analyze`` of two runs of the data of ``small_run`` at ``τ = 0.04``: the exact
    sampler with 8 particles, whose width bias (about 0.2/N) is many standard errors, and
    Euler–Maruyama with 2 observations in the second half of the stage."""
    import json

    from conftest import toml
    from support import run_cli
    d = tmp_path_factory.mktemp("verdicts")
    data = {"kind": "inline", "X": [[-1.0], [-0.3], [0.2], [0.8], [1.5]],
            "y": [0.5, -0.2, 0.3, 1.0, -0.4]}
    runs = {"mala": {"data": data, "model": {"n_particles": 8},
                     "dynamics": {"lam": 0.2, "eta": 0.1, "taus": [0.04], "steps_per_tau": 10000,
                                  "integrator": "mala", "seed": 1},
                     "output": {"observe_every": 10, "snapshots_per_tau": 10}},
            "few": {"data": data, "model": {"n_particles": 50},
                    "dynamics": {"lam": 0.2, "eta": 0.1, "taus": [0.04], "steps_per_tau": 40},
                    "output": {"observe_every": 10, "snapshots_per_tau": 1}}}
    out = {}
    for name, cfg in runs.items():
        (d / f"{name}.toml").write_text(toml(cfg))
        done = run_cli(["run", f"{name}.toml", "-o", f"{name}.h5", "--quiet"], d)
        assert done.returncode == 0, done.stderr
        got = run_cli(["analyze", f"{name}.h5", "--no-figures", "--no-sensitivity", "--no-w2",
                       "--quiet"], d)
        assert got.returncode == 0, got.stderr
        rep = d / f"{name}-report"
        out[name] = (got.stdout.splitlines(), json.loads((rep / "report.json").read_text()),
                     (rep / "report.md").read_text())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name,verdict", [("mala", VERDICT_INCONSISTENT),
                                          ("few", VERDICT_TOO_FEW)])
def test_meanfield_analyze_prints_the_verdict_and_its_note(analysed, name, verdict):
    stdout, rep, md = analysed[name]
    g = rep["references"]["gibbs"][0]
    assert g["verdict"] == verdict
    line = next(ln for ln in stdout if "particles vs Gibbs reference" in ln)
    text = verdict_text(g, f"{name}.h5")
    # a stage whose stationarity verdict failed says so on its Gibbs line
    moving = rep["ladder"][0]["stationary"] is False
    from meanfield.cli.analyze import NOT_STATIONARY_NOTE
    assert line.endswith(NOT_STATIONARY_NOTE) == moving
    line = line.removesuffix(NOT_STATIONARY_NOTE)
    assert line.endswith(": " + text) and f"| {text} |" in md
    if name == "mala":
        # the exact sampler: the width bias named, estimated from the 10 frames' particles
        # (the stage's second half holds all of them), the command that removes it
        assert g["exact_sampler"] and g["step_bias_allowance"] == 0.0
        assert g["z"] == g["z_without_allowance"] > Z_CONSISTENT
        assert g["width_bias"]["frames"] == 10 and g["width_bias"]["particles"] == 80
        assert g["width_bias_implied"] == pytest.approx(8 * g["max_abs_diff"])
        assert WIDTH_BIAS_NOTE in line and "n_particles = 16" in line
        assert "meanfield analyze mala.h5 --extrapolate-n B.h5" in line
    else:
        assert g["n_observations"] == 2 and math.isnan(g["z"]) and "z =" not in line
