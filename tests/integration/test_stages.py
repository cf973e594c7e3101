"""Ladder stages in run files: the stage stored with every observation and frame, files written
before it was stored, and ladders that visit a temperature twice (a reheating study) through
``to_xarray``, ``analyze --json``, the figures and the study summary."""

import json

import h5py
import numpy as np
import pytest
from support import auto_walk

REHEAT = [1e-2, 1e-3, 1e-2]


def _cfg(**dyn):
    from meanfield import config
    return config.from_dict({"data": {"kind": "gaussian", "n": 5, "d": 2, "seed": 0},
                             "model": {"n_particles": 20},
                             "dynamics": {"taus": REHEAT, "steps_per_tau": 100, **dyn},
                             "output": {"observe_every": 10, "snapshots_per_tau": 2}})


def _strip_stages(src, dst):
    """A copy of run file ``src`` as written before the stages were stored."""
    import shutil
    shutil.copy(src, dst)
    with h5py.File(dst, "a") as f:
        for g in ("observables", "particles/neurons"):
            for name in ("stage", "step_in_stage"):
                del f[g][name]
    return dst


@pytest.fixture(scope="module")
def reheat_run(tmp_path_factory):
    from meanfield import runner
    out = tmp_path_factory.mktemp("reheat") / "r.h5"
    return runner.run(_cfg(), out, progress=False, threads=1)


@pytest.fixture(scope="module")
def reheat_auto_run(tmp_path_factory):
    """An auto-length reheating ladder whose stages 0 and 2 end at their second chunk end and
    stage 1 spends its budget (the verdict replaced by that rule)."""
    from meanfield import runner
    out = tmp_path_factory.mktemp("auto") / "a.h5"
    mp = pytest.MonkeyPatch()
    mp.setattr(runner.loop, "_stage_stationary", lambda *a: (lambda st: st.stage != 1))
    try:
        runner.run(_cfg(steps_per_tau="auto", max_steps_per_tau=160), out, progress=False,
                   threads=1)
    finally:
        mp.undo()
    return out


def test_the_run_file_stores_the_stage_of_every_row(reheat_run):
    from meanfield.store import open_run
    run = open_run(reheat_run)
    sch = _cfg().schedule
    with h5py.File(reheat_run, "r") as f:
        stage = f["observables/stage/value"][:]
        fstage = f["particles/neurons/stage/value"][:]
        assert stage.dtype == np.int64 and fstage.dtype == np.int64
        np.testing.assert_array_equal(f["observables/step_in_stage/value"][:],
                                      np.concatenate([sch.boundaries(s) for s in range(3)]))
        np.testing.assert_array_equal(f["particles/neurons/step_in_stage/value"][:],
                                      [75, 100] * 3)
    np.testing.assert_array_equal(stage, np.repeat([0, 1, 2], len(sch.boundaries(0))))
    np.testing.assert_array_equal(fstage, [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(run.stage, stage)
    np.testing.assert_array_equal(run.frame_stage, fstage)
    # the stored temperature is that of the stage, visited twice
    np.testing.assert_array_equal(run.observables["tau"]["value"], np.asarray(REHEAT)[stage])
    assert [run.last_frame(s) for s in range(3)] == [1, 3, 5]
    assert [run.steps_run(s) for s in range(3)] == [100, 100, 100]


def test_auto_reheating_run_stores_the_stage_lengths_it_ran(reheat_auto_run):
    from meanfield.store import open_run
    run = open_run(reheat_auto_run)
    obs, frames = auto_walk((40, 160, 40), 160, 10, per=2)     # snapshots_per_tau = 2
    assert list(zip(run.stage.tolist(), run.step_in_stage.tolist(),
                    run.observables["risk"]["step"].tolist())) == obs
    assert list(zip(run.frame_stage.tolist(), run.frame_step_in_stage.tolist(),
                    run.frame_step.tolist())) == frames
    assert run.schedule.lengths == (40, 160, 40)
    assert [run.schedule.stage_bounds(s) for s in range(3)] == [(0, 40), (40, 200), (200, 240)]
    ds = run.to_xarray(frames=False)
    np.testing.assert_array_equal(ds.stage.values, [t for t, _, _ in obs])
    np.testing.assert_array_equal(ds.step_in_stage.values, [k for _, k, _ in obs])
    np.testing.assert_array_equal(ds.attrs["stage_lengths"], [40, 160, 40])
    np.testing.assert_array_equal(ds.frame_tau.values, np.asarray(REHEAT)[ds.frame_stage.values])


@pytest.mark.parametrize("which", ["reheat_run", "reheat_auto_run"])
def test_a_file_without_stored_stages_reads_the_same(which, request, tmp_path):
    from meanfield.store import open_run
    path = request.getfixturevalue(which)
    new = open_run(path)
    old = open_run(_strip_stages(path, tmp_path / "old.h5"))
    for name in ("stage", "step_in_stage", "frame_stage", "frame_step_in_stage"):
        np.testing.assert_array_equal(getattr(old, name), getattr(new, name), err_msg=name)
    assert old.schedule == new.schedule
    np.testing.assert_array_equal(old.to_xarray(frames=False).stage, new.stage)


def test_an_old_file_resumed_keeps_its_layout(reheat_run, tmp_path):
    """A run file without stored stages appended to (a resume across the upgrade) gets no
    half-written stage columns; its rows are still told apart."""
    from meanfield.store import RunWriter, open_run
    path = _strip_stages(reheat_run, tmp_path / "old.h5")
    n = open_run(path).n_frames
    with h5py.File(path, "a") as f:
        f.attrs["n_frames"] = n - 2
        f.attrs["n_observations"] = int(f.attrs["n_observations"]) - 4
        f.attrs["complete"] = False
    before = open_run(reheat_run)
    with RunWriter(path, mode="a") as w:
        w.append_frame(before.frame(n - 2), int(before.frame_step[-2]), 0.0, 1e-2, 2, 75)
    with h5py.File(path, "r") as f:
        assert "stage" not in f["particles/neurons"]
    assert open_run(path).frame_stage[-1] == 2


@pytest.mark.slow
def test_reheating_ladder_is_analysed_stage_by_stage(reheat_run, tmp_path, capsys):
    from meanfield.cli import main
    from meanfield.report import Report
    from meanfield.store import open_run
    from meanfield.sweep.summary import run_summary
    out = tmp_path / "rep"
    assert main(["analyze", str(reheat_run), "-o", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [r["stage"] for r in rep["ladder"]] == [0, 1, 2]
    assert [r["tau"] for r in rep["ladder"]] == REHEAT
    assert [r["step"] for r in rep["ladder"]] == [100, 200, 300]
    assert [s["stage"] for s in rep["snapshots"]] == [0, 0, 1, 1, 2, 2]
    assert [s["stage"] for s in rep["n_rays_by_tau"]] == [0, 0, 1, 1, 2, 2]
    # each row carries the verdict of its own stage: stages 0 and 2 share a temperature only
    from analysis.stationarity import run_verdicts
    vs = run_verdicts(open_run(reheat_run))
    assert vs[0].to_dict() != vs[2].to_dict()
    for r in rep["ladder"]:
        assert r["stationarity"] == json.loads(json.dumps(vs[r["stage"]].to_dict()))
    for name in ("ladder.png", "predictor.png", "directions.png", "trajectory.png"):
        assert (out / name).stat().st_size > 0
    # "the coldest snapshot" is the last of the coldest stage (1), not the last of the ladder (2)
    from analysis.snapshots import coldest
    cold = coldest(rep["snapshots"])
    assert (cold["stage"], cold["step"]) == (1, 200)
    md = (out / "report.md").read_text()
    assert f"## Rays at τ = {REHEAT[1]:.2e}" in md
    rays = Report(rep).to_dataframe("rays")
    # keyed by the stage, never the temperature (stages 0 and 2 share one): every stage with
    # rays in the ladder has its own rows, stage 2's at its own step
    assert sorted(set(rays.stage)) == [r["stage"] for r in rep["ladder"] if r["J"] > 0]
    assert 2 in set(rays.stage) and set(rays[rays.stage == 2].step) == {300}
    # the study's per-run summary: one entry per stage, J from the stage's last snapshot
    summ = run_summary(reheat_run)
    run = open_run(reheat_run)
    assert summ["taus"] == REHEAT and summ["frames"] == [1, 3, 5]
    last = {s["stage"]: s for s in rep["snapshots"]}
    assert summ["n_rays"] == [float(last[s]["n_rays"]) for s in range(3)]
    steps, risk = run.observables["risk"]["step"], run.observables["risk"]["value"]
    for s in range(3):
        sel = (steps > 100 * s + 50) & (steps <= 100 * (s + 1))
        assert summ["risk"][s] == pytest.approx(risk[sel].mean(), rel=1e-12)


def test_directions_figure_picks_a_stage(reheat_run):
    from meanfield import figures
    from meanfield.report import analyze_run
    from meanfield.store import open_run
    rep = analyze_run(reheat_run, w2=False, references=False, sensitivity=False)
    run = open_run(reheat_run)
    assert figures.plot_directions(rep, run, stage=0) is not None
    with pytest.raises(ValueError, match="no snapshot of stage 7"):
        figures.plot_directions(rep, run, stage=7)


def test_study_of_a_reheating_ladder_keeps_its_stages_apart(tmp_path, monkeypatch):
    import sys

    from meanfield.sweep import Study
    from meanfield.sweep import summary as S
    monkeypatch.setitem(sys.modules, "distributed", None)      # serial needs no Dask
    study = Study.from_dict(
        {"data": {"kind": "gaussian", "n": 5, "d": 2, "seed": 0},
         "model": {"n_particles": 20},
         "dynamics": {"taus": REHEAT, "steps_per_tau": 100},
         "output": {"observe_every": 10, "snapshots_per_tau": 2},
         "sweep": {"dynamics.seed": [0, 1]}}, tmp_path / "st")
    assert study.run(serial=True, threads=1, progress=False).ok
    res = S.analyze_study(tmp_path / "st", w2=False)
    assert [(r["stage"], r["tau"]) for r in res["table"]] == list(enumerate(REHEAT))
    assert all(r["n_seeds"] == 2 for r in res["table"])
    runs = {r["id"]: r for r in res["runs"]}
    for r in res["table"]:
        want = np.mean([run["risk"][r["stage"]] for run in runs.values()])
        assert r["risk_mean"] == pytest.approx(want, rel=1e-12)
    assert "| 2 | 0.01 |" in S.format_markdown(res)
    ds = study.results()
    assert ds.risk.dims == ("seed", "stage") and list(ds.stage.values) == [0, 1, 2]
    np.testing.assert_array_equal(ds.tau.values, REHEAT)
    out = tmp_path / "report"
    files = S.write_report(res, out)
    assert {"study.json", "study.md", "risk_tau.png"} <= {f.name for f in files}
