"""Tidy outputs on a real run file: ``Run.to_xarray``, the analysis tables (one row per τ, ray,
kink hyperplane), ``analyze --csv`` and ``Study.results()`` as an ``xarray.Dataset``."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import plane8_toml, run_one_thread

from meanfield import cli
from meanfield.store import open_run


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """A run of the eight points in the plane, its analysis (no W2, no references) and the
    report folder written with --csv."""
    d = tmp_path_factory.mktemp("tables")
    out = run_one_thread(plane8_toml({"output.snapshots_per_tau": 2}), d)
    rep_dir = d / "rep"
    assert cli.main(["analyze", str(out), "-o", str(rep_dir), "--csv", "--no-w2",
                     "--no-references", "--no-figures", "--quiet"]) == 0
    import json
    rep = json.loads((rep_dir / "report.json").read_text())
    return out, rep, rep_dir


def test_run_to_xarray_matches_the_file(analysed):
    import h5py
    out, _, _ = analysed
    run = open_run(out)
    ds = run.to_xarray()
    with h5py.File(out, "r") as f:           # an independent read of the same rows
        no, nf = int(f.attrs["n_observations"]), int(f.attrs["n_frames"])
        risk = f["observables/risk/value"][:no]
        steps = f["observables/risk/step"][:no]
        tau = f["observables/tau/value"][:no]
        resid = f["observables/residuals/value"][:no]
        frames = f["particles/neurons/position/value"][:nf]
        ftau = f["particles/neurons/temperature/value"][:nf]
        eta = float(f["parameters"].attrs["eta"])
    assert ds.risk.dims == ("chain", "time") and ds.sizes["time"] == no == 2 * 16  # 15 + snap
    assert ds.sizes["chain"] == 1 and ds.attrs["n_chains"] == 1   # one chain: still the axis
    np.testing.assert_array_equal(ds.risk.values[0], risk)
    np.testing.assert_array_equal(ds.step.values, steps)
    np.testing.assert_array_equal(ds.tau.values, tau)
    np.testing.assert_allclose(ds.time.values, steps * eta)
    np.testing.assert_array_equal(ds.residuals.values[0], resid)
    # stage: 0 for the steps of the first temperature (1..1500), 1 for the second
    np.testing.assert_array_equal(ds.stage.values, (steps > 1500).astype(int))
    assert set(ds.tau.values[ds.stage.values == 0]) == {1e-2}
    assert ds.particles.dims == ("chain", "frame", "particle", "coord")
    assert ds.particles.shape == (1, nf, 300, 4) == (1, 4, 300, 4)
    assert list(ds.coord.values) == ["a", "w1", "w2", "b"]
    np.testing.assert_array_equal(ds.particles.values[0], frames)
    np.testing.assert_array_equal(ds.frame_tau.values, ftau)
    np.testing.assert_array_equal(ds.frame_stage.values, [0, 0, 1, 1])
    np.testing.assert_array_equal(ds.X.values, run.X)
    assert bool(ds.attrs["complete"]) and ds.attrs["steps_per_tau"] == 1500
    # selection by temperature works the xarray way
    cold = ds.risk.where(ds.tau == 1e-3, drop=True)
    assert cold.sizes["time"] == 16
    assert "particles" not in run.to_xarray(frames=False)


def test_tables_one_row_per_tau_ray_and_hyperplane(analysed):
    from meanfield.tidy import kinks_table, ladder_table, rays_table
    _, rep, _ = analysed
    lad = ladder_table(rep)
    assert list(lad.tau) == [1e-2, 1e-3]
    assert list(lad.J) == [r["J"] for r in rep["ladder"]]
    assert (lad.bound_2P_minus_1 == 2 * rep["P"] - 1).all()
    rays = rays_table(rep)
    kinks = kinks_table(rep)
    for r in rep["ladder"]:
        assert (rays.tau == r["tau"]).sum() == r["J"] > 0
        assert kinks[kinks.tau == r["tau"]].hyperplane.nunique() == r["K"] > 0
    last = rep["snapshots"][-1]
    mine = rays[rays.tau == last["tau"]]
    np.testing.assert_allclose(mine.weight, [q["weight"] for q in last["rays"]])
    np.testing.assert_allclose(mine[["v1", "v2", "v3"]].to_numpy(),
                               [q["direction"] for q in last["rays"]])
    # every ray of a frame lies on exactly one kink hyperplane of it (d = 2, no pure biases
    # expected here), and each row of a hyperplane gives one of its rays and the sign of a
    k_last = kinks[kinks.tau == last["tau"]]
    on = sorted(int(i) for i in k_last.ray)
    assert on == sorted(set(on)) and set(on) <= set(range(len(last["rays"])))
    groups = list(k_last.groupby("hyperplane", sort=True))
    assert [h for h, _ in groups] == list(range(len(last["kinks"])))
    for kk, (_, rows) in zip(last["kinks"], groups):
        assert list(rows.ray) == list(kk["rays"])
        assert list(rows.sign) == [1 if last["rays"][i]["sign"] > 0 else -1 for i in kk["rays"]]
        assert rows.offset.nunique() == 1 and rows.offset.iloc[0] == kk["offset"]
    np.testing.assert_allclose(np.hypot(k_last.n1, k_last.n2), 1.0)


def test_analyze_csv_writes_the_tables(analysed):
    import pandas as pd

    from meanfield.tidy import kinks_table, ladder_table, rays_table
    _, rep, rep_dir = analysed
    for name, table in (("ladder.csv", ladder_table), ("rays.csv", rays_table),
                        ("kinks.csv", kinks_table)):
        back = pd.read_csv(rep_dir / name, keep_default_na=False, na_values=[""])
        want = table(rep)
        assert list(back.columns) == list(want.columns) and len(back) == len(want)
        for col in want.columns:
            if want[col].dtype.kind in "fi":
                np.testing.assert_allclose(back[col].astype(float), want[col].astype(float))


def test_csv_files_are_tidy(analysed):
    """One value per cell: nested values are JSON (the stationarity verdict reads back as the
    report's dict), list columns are long rows, minus signs are ASCII."""
    import csv
    import json
    _, rep, rep_dir = analysed
    for name in ("ladder.csv", "rays.csv", "kinks.csv"):
        text = (rep_dir / name).read_text(encoding="utf-8")
        assert "\u2212" not in text, name
        for row in csv.DictReader(text.splitlines()):
            for key, cell in row.items():
                assert "'" not in cell and not cell.startswith(("{'", "['")), (name, key, cell)
    ladder = list(csv.DictReader((rep_dir / "ladder.csv").read_text().splitlines()))
    assert [float(r["tau"]) for r in ladder] == [r["tau"] for r in rep["ladder"]]
    for row, want in zip(ladder, rep["ladder"]):
        assert json.loads(row["stationarity"]) == want["stationarity"]
        assert isinstance(want["stationarity"], dict)
    rays = list(csv.DictReader((rep_dir / "rays.csv").read_text().splitlines()))
    last = rep["snapshots"][-1]
    mine = [r for r in rays if float(r["tau"]) == last["tau"]]
    assert [r["pattern"] for r in mine] == [
        "".join({1: "+", 0: "0", -1: "-"}[int(t)] for t in q["pattern"]) for q in last["rays"]]
    assert all(set(r["pattern"]) <= set("+0-") for r in rays)
    kinks = list(csv.DictReader((rep_dir / "kinks.csv").read_text().splitlines()))
    mine = [r for r in kinks if float(r["tau"]) == last["tau"]]
    assert [(int(r["hyperplane"]), int(r["ray"]), int(r["sign"])) for r in mine] == [
        (h, i, 1 if last["rays"][i]["sign"] > 0 else -1)
        for h, kk in enumerate(last["kinks"]) for i in kk["rays"]]


def test_ladder_table_cells_hold_one_value():
    from meanfield.tidy import ladder_table
    rep = {"ladder": [{"tau": 0.01, "J": 2, "stationarity": {"b": [1.5, float("nan")],
                                                            "a": "1 \u2212 G"},
                       "unmatched_measured": [0, 3], "w2_method": None}],
           "bound_2P_minus_1": 7, "bound_P_minus_1": 3}
    df = ladder_table(rep)
    assert df.stationarity[0] == '{"a":"1 - G","b":[1.5,null]}'
    assert df.unmatched_measured[0] == "[0,3]"
    assert df.J[0] == 2 and df.bound_P_minus_1[0] == 3


def test_study_results_is_a_dataset_over_the_axes(tmp_path, monkeypatch):
    from meanfield.sweep import Study
    monkeypatch.setitem(sys.modules, "distributed", None)      # serial needs no Dask
    study = Study.from_dict(
        {"data": {"kind": "gaussian", "n": 4, "d": 1, "seed": 0},
         "model": {"n_particles": 40},
         "dynamics": {"taus": [1e-2, 1e-3], "steps_per_tau": 200},
         "output": {"observe_every": 50},
         "sweep": {"dynamics.lam": [0.05, 0.1], "dynamics.seed": [0, 1, 2]}},
        tmp_path / "st")
    summary = study.run(serial=True, threads=1, progress=False)
    assert summary.ok, summary.failed
    res = study.results()
    assert res.risk.dims == ("lam", "seed", "stage")
    assert res.risk.shape == (2, 3, 2) and res.J.shape == (2, 3, 2)
    assert list(res.seed.values) == [0, 1, 2] and list(res.tau.values) == [1e-2, 1e-3]
    assert list(res.stage.values) == [0, 1] and res.tau.dims == ("stage",)
    assert res.lam.attrs["axis"] == "dynamics.lam"
    assert (res.status == "done").all()
    # each cell holds its own run's numbers: the time-averaged risk of the stage
    for job in study.jobs:
        lam, seed = job.axis_values["dynamics.lam"], job.axis_values["dynamics.seed"]
        run = open_run(study.run_file(job))
        stage = run.observables["risk"]
        sel = (stage["step"] > 200 + 100) & (stage["step"] <= 400)
        np.testing.assert_allclose(res.risk.sel(lam=lam, seed=seed, stage=1),
                                   stage["value"][sel].mean())
        assert res.run_file.sel(lam=lam, seed=seed).item() == str(study.run_file(job))
    assert np.isfinite(res.J.values).all()
    # the mean over seeds, the xarray way
    assert res.risk.mean("seed").dims == ("lam", "stage")
    # a ladder visiting each temperature once: tau can index the stages
    assert res.risk.swap_dims(stage="tau").sel(lam=lam, seed=seed, tau=1e-3).item() == \
        res.risk.sel(lam=lam, seed=seed, stage=1).item()


def test_to_xarray_on_an_auto_length_run(tmp_path):
    """``steps_per_tau = "auto"`` (the embedded default's setting): stages and steps within a
    stage come from the run's schedule; checked against the file's own temperature column."""
    out = run_one_thread(plane8_toml({"dynamics.steps_per_tau": "auto",
                                      "dynamics.max_steps_per_tau": 1600,
                                      "dynamics.taus": [1e-2, 1e-3, 1e-4]}), tmp_path)
    run = open_run(out)
    ds = run.to_xarray()
    steps, tau = run.observables["tau"]["step"], run.observables["tau"]["value"]
    # independent oracle: the ladder's temperatures are distinct, so a stage ends where the
    # stored temperature changes
    change = np.flatnonzero(np.diff(tau) != 0)
    want_stage = np.searchsorted(change, np.arange(len(tau)), side="left")
    np.testing.assert_array_equal(ds.stage.values, want_stage)
    ends = np.concatenate(([0], steps[change]))
    np.testing.assert_array_equal(ds.step_in_stage.values, steps - ends[want_stage])
    assert ds.attrs["steps_per_tau"] == "auto"
    lengths = np.diff(np.concatenate(([0], steps[change], [steps[-1]])))
    np.testing.assert_array_equal(ds.attrs["stage_lengths"], lengths)
    assert set(np.unique(ds.frame_stage.values)) == {0, 1, 2}
    np.testing.assert_array_equal(ds.frame_tau.values,
                                  np.asarray([1e-2, 1e-3, 1e-4])[ds.frame_stage.values])
