"""Comparison of runs with the exact references (analysis.references)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.references import (
    compare_run,
    convex_distance,
    gibbs_distance,
    match_rays,
)


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
        assert g["verdict"] == ("consistent" if z <= 3 else "inconsistent")
        # and what it would read with no step bias allowed
        assert g["z_without_allowance"] == pytest.approx(np.max(np.abs(f - ref) / e), rel=1e-9)
        assert g["z_without_allowance"] >= g["z"]
    c = convex_distance(run)
    assert c["tau"] == 0.02
    f, _ = time_average_predictor(run, 1, 0.5)
    assert c["max_abs_diff"] == pytest.approx(
        np.max(np.abs(f - convex(run.X, run.y, 0.2).f_train)), abs=1e-12)
    ref = convex(run.X, run.y, 0.2)
    rep = compare_run(run, rays_by_stage={1: (ref.directions, ref.signs, ref.weights)})
    assert len(rep["gibbs"]) == 2 and rep["rays"]["max_angle"] < 1e-7
