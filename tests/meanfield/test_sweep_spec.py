"""Study files, the manifest and the sweep command line (no cluster started here)."""

from __future__ import annotations

import itertools
import json
import sys
import threading
from pathlib import Path

import pytest

from meanfield import config
from meanfield.cli import main as cli_main
from meanfield.errors import StudyError
from meanfield.sweep import Study, expand, load, loads
from meanfield.sweep import manifest as man

BASE = """
[data]
kind = "gaussian"
n = 6
d = 2

[model]
n_particles = 100

[dynamics]
taus = [1e-2]
steps_per_tau = 200

[output]
observe_every = 50
"""


def _study(tmp_path, sweep: str, base: str = BASE, name="study.toml"):
    p = tmp_path / name
    p.write_text(base + "\n[sweep]\n" + sweep)
    return p


def test_cartesian_product_in_file_order_last_axis_fastest(tmp_path):
    p = _study(tmp_path, '"dynamics.lam" = [0.02, 0.05]\nmodel.n_particles = [100, 200, 400]\n'
                         '"dynamics.seed" = [0, 1]\n')
    spec = load(p)
    assert list(spec.axes) == ["dynamics.lam", "model.n_particles", "dynamics.seed"]
    assert spec.shape == (2, 3, 2)
    expected = list(itertools.product([0.02, 0.05], [100, 200, 400], [0, 1]))
    got = [(j.axis_values["dynamics.lam"], j.axis_values["model.n_particles"],
            j.axis_values["dynamics.seed"]) for j in spec.jobs]
    assert got == expected
    assert [j.index for j in spec.jobs] == list(range(12))
    for j, (lam, N, seed) in zip(spec.jobs, expected):
        assert (j.config.dynamics.lam, j.config.n_particles, j.config.dynamics.seed) == \
            (lam, N, seed)
        # the id is the hash of the job's canonical config, the run file is named by it
        ref = config.from_dict({**json.loads(j.config.canonical_json())})
        assert j.id == ref.hash() and j.run_file == f"run-{ref.hash()}.h5"
    assert len({j.id for j in spec.jobs}) == 12


def test_base_file_merge_and_relative_paths(tmp_path):
    sub = tmp_path / "cfg"
    sub.mkdir()
    (sub / "pts.csv").write_text("x1,y\n0.0,1.0\n1.0,-1.0\n2.0,0.5\n")
    (tmp_path / "other.csv").write_text("x1,y\n0.0,1.0\n3.0,2.0\n")
    (sub / "run.toml").write_text('[data]\nkind = "file"\npath = "pts.csv"\ntarget = "y"\n'
                                  '[model]\nn_particles = 50\n[dynamics]\nsteps_per_tau = 100\n'
                                  'taus = [0.01]\n')
    p = tmp_path / "study.toml"
    p.write_text('base = "cfg/run.toml"\n[dynamics]\nlam = 0.1\n'
                 '[sweep]\n"data.path" = ["cfg/pts.csv", "other.csv"]\n')
    spec = load(p)
    # base keys kept, the study's tables override, relative paths resolve against their file
    assert [j.config.data.path for j in spec.jobs] == [str((sub / "pts.csv").resolve()),
                                                          str((tmp_path / "other.csv").resolve())]
    assert all(j.config.n_particles == 50 and j.config.dynamics.lam == 0.1 for j in spec.jobs)
    # without the axis the base's own relative path resolves against the base's directory
    p.write_text('base = "cfg/run.toml"\n[sweep]\n"dynamics.seed" = [0, 1]\n')
    assert {j.config.data.path for j in load(p).jobs} == {str((sub / "pts.csv").resolve())}


def test_no_sweep_table_is_one_job(tmp_path):
    spec = loads(BASE)
    assert len(spec.jobs) == 1 and spec.shape == ()


@pytest.mark.parametrize("sweep, field, words", [
    ('"dynamics.lamb" = [0.1]', "sweep.dynamics.lamb", "did you mean 'dynamics.lam'"),
    ('"dynamic.lam" = [0.1]', "sweep.dynamic.lam", "did you mean 'dynamics'"),
    ('"lam" = [0.1]', "sweep.lam", 'table.key\', e.g. "dynamics.lam"'),
    # a key of another table is pointed to its table, not to a look-alike ('model.cap')
    ('"chains" = [1, 2]', "sweep.chains", 'e.g. "dynamics.chains"'),
    ('"model.chains" = [1, 2]', "sweep.model.chains",
     "it belongs in [dynamics] (sweep.dynamics.chains)"),
    ('"dynamics.lam" = 0.1', "sweep.dynamics.lam", "must be a list"),
    ('"dynamics.lam" = []', "sweep.dynamics.lam", "at least one value"),
    ('"dynamics.seed" = [0, 1, 0]', "sweep.dynamics.seed[2]", "repeats value 0"),
    ('"dynamics.lam" = [0.1, -1.0]', "sweep.dynamics.lam[1]", "must be > 0"),
    ('"dynamics.taus" = [[0.01], [0.01, -1.0]]', "sweep.dynamics.taus[1]", ">= 0"),
    ('"dynamics.lam" = [0.1, 50.0]', "dynamics.eta", "dynamics.lam=50.0"),
    ('"dynamics.taus" = [0.01, [0.01]]', "sweep", "same config"),
    ('"dynamics.lam" = [0.1]\n"dynamics".lam = [0.2]', "sweep.dynamics.lam", "given twice"),
    ('"dynamics.lam" = [0.1', "", "malformed TOML"),
])
def test_bad_axes_name_file_field_reason(tmp_path, sweep, field, words):
    p = _study(tmp_path, sweep)
    with pytest.raises(StudyError) as ei:
        load(p)
    e = ei.value
    assert e.source == str(p)
    assert e.field == field
    assert words in e.reason


def test_bad_top_level_and_base(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(BASE + "\n[sweeps]\n")
    with pytest.raises(StudyError, match="sweeps: unknown key.*did you mean 'sweep'"):
        load(p)
    p.write_text('base = "nope.toml"\n')
    with pytest.raises(StudyError, match="base: no such file"):
        load(p)
    (tmp_path / "bad.toml").write_text('[data]\nkind = "gaussian"\n[model]\nn_particle = 3\n')
    p.write_text('base = "bad.toml"\n')
    with pytest.raises(config.ConfigError) as ei:   # the base's own error names the base file
        load(p)
    assert ei.value.source.endswith("bad.toml") and ei.value.field == "model.n_particle"
    with pytest.raises(StudyError, match="no such file"):
        load(tmp_path / "missing.toml")


def test_manifest_atomic_and_readable_during_updates(tmp_path):
    spec = loads(BASE + '\n[sweep]\n"dynamics.seed" = [0, 1, 2]\n')
    m = man.Manifest.for_study(spec, tmp_path)
    m.min_interval = 0.0
    m.save(force=True)
    doc = man.read(tmp_path)
    assert doc["format"] == "meanfield-study" and doc["counts"]["pending"] == 3
    assert [j["run_file"] for j in doc["jobs"]] == [j.run_file for j in spec.jobs]
    # a reader polling while the writer updates never sees a torn document
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            try:
                man.read(tmp_path)
            except StudyError as exc:  # pragma: no cover - the failure being tested for
                errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    for k in range(120):
        m.set(spec.jobs[k % 3].id, status=man.STATUSES[k % 4], error="x" * (k % 50))
        m.save()
    stop.set()
    t.join()
    assert errors == []
    assert not list(tmp_path.glob(".manifest.json.*"))  # no temporary files left behind
    # the status history of known jobs carries over into a manifest for a grown study
    spec2 = loads(BASE + '\n[sweep]\n"dynamics.seed" = [0, 1, 2, 3]\n')
    m2 = man.Manifest.for_study(spec2, tmp_path, man.read(tmp_path))
    assert [m2.job(j.id)["status"] for j in spec2.jobs[:3]] == \
        [m.job(j.id)["status"] for j in spec.jobs]
    assert m2.job(spec2.jobs[3].id)["status"] == "pending"
    with pytest.raises(StudyError, match="not a study directory"):
        man.read(tmp_path / "nowhere")
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(StudyError, match="not a meanfield study manifest"):
        man.read(tmp_path)


def test_cli_bad_study_exits_2_with_one_line(tmp_path, capsys):
    p = _study(tmp_path, '"dynamics.lamb" = [0.1]')
    assert cli_main(["sweep", str(p), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert str(p) in err[0] and "sweep.dynamics.lamb" in err[0] and "dynamics.lam" in err[0]
    assert not (tmp_path / "out").exists()
    assert cli_main(["sweep", str(p), "--workers", "0"]) == 2


def test_cli_dry_run_lists_jobs(tmp_path, capsys):
    p = _study(tmp_path, '"dynamics.seed" = [0, 1]')
    assert cli_main(["sweep", str(p), "-o", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for j in load(p).jobs:
        assert j.run_file in out
    assert not (tmp_path / "out").exists()


def test_without_distributed_the_cli_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    p = _study(tmp_path, '"dynamics.seed" = [0, 1]')
    assert cli_main(["sweep", str(p), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "pip install '.[distributed]'" in err and "--serial" in err
    assert len(err.strip().splitlines()) == 1
    assert not list((tmp_path).glob("out/run-*.h5"))


def test_study_api_describes_jobs(tmp_path):
    p = _study(tmp_path, '"model.n_particles" = [100, 200]\n"dynamics.seed" = [0, 1, 2]')
    s = Study.from_file(p, tmp_path / "d")
    assert s.shape == (2, 3) and len(s.jobs) == 6
    assert s.run_file(s.jobs[0]) == tmp_path / "d" / s.jobs[0].run_file
    assert s.status() == {"pending": 6, "running": 0, "done": 0, "failed": 0}
    assert "6 jobs" in repr(s)
    s2 = Study.from_dict({"data": {"kind": "gaussian"}, "model": {"n_particles": 10},
                          "sweep": {"dynamics": {"seed": [3, 4]}}}, tmp_path / "e")
    assert [j.config.dynamics.seed for j in s2.jobs] == [3, 4]
    with pytest.raises(StudyError):
        expand({"sweep": {"model.n_particles": [0]}, "data": {"kind": "gaussian"}})


def test_serial_failed_job_is_recorded_and_retried(tmp_path, monkeypatch):
    """A job that fails (its data file is missing) is recorded with its error, the other job
    finishes, and a rerun redoes only the failed one. Serial runs need no Dask."""
    monkeypatch.setitem(sys.modules, "distributed", None)
    (tmp_path / "a.csv").write_text("x1,y\n0.0,1.0\n1.0,-1.0\n2.0,0.5\n")
    p = tmp_path / "study.toml"
    p.write_text('[data]\nkind = "file"\npath = "a.csv"\ntarget = "y"\n[model]\nn_particles = 20\n'
                 '[dynamics]\ntaus = [0.01]\nsteps_per_tau = 100\n[output]\nobserve_every = 50\n'
                 '[sweep]\n"data.path" = ["a.csv", "b.csv"]\n')
    study = Study.from_file(p, tmp_path / "out")
    good, bad = study.jobs
    summary = study.run(serial=True, threads=1, progress=False)
    assert not summary.ok and summary.ran == [good.id]
    assert list(summary.failed) == [bad.id] and "DataError" in summary.failed[bad.id]
    assert "b.csv" in summary.failed[bad.id] and "failed" in str(summary)
    doc = man.read(study.directory)
    entry = {j["id"]: j for j in doc["jobs"]}
    assert entry[good.id]["status"] == "done" and entry[bad.id]["status"] == "failed"
    assert "DataError" in entry[bad.id]["error"]
    assert study.status() == {"pending": 0, "running": 0, "done": 1, "failed": 1}

    (tmp_path / "b.csv").write_text("x1,y\n0.0,2.0\n1.0,1.0\n")
    mtime = study.run_file(good).stat().st_mtime_ns
    summary = study.run(serial=True, threads=1, progress=False)
    assert summary.ok and summary.ran == [bad.id] and summary.skipped == [good.id]
    assert study.run_file(good).stat().st_mtime_ns == mtime
    assert man.read(study.directory)["jobs"][1]["error"] is None


def test_second_driver_on_the_same_directory_is_refused(tmp_path):
    from meanfield.sweep.execute import _Lock
    p = _study(tmp_path, '"dynamics.seed" = [0, 1]')
    study = Study.from_file(p, tmp_path / "out")
    (tmp_path / "out").mkdir()
    with _Lock(tmp_path / "out"):
        with pytest.raises(StudyError, match="another sweep is driving"):
            study.run(serial=True, progress=False)


def test_interrupting_a_serial_study_stops_it_and_leaves_jobs_pending(tmp_path, monkeypatch):
    """The main job answers SIGINT by checkpointing and raising ``Interrupted``; that stops a
    serial study instead of being recorded as a failed job, and the job stays pending."""
    from meanfield import errors, runner

    class Interrupted(Exception):
        pass

    monkeypatch.setattr(errors, "Interrupted", Interrupted, raising=False)
    calls = []

    def fake_run(cfg, output, **kw):
        calls.append(output)
        raise Interrupted("interrupted at step 10; checkpoint written")

    monkeypatch.setattr(runner, "run", fake_run)
    p = _study(tmp_path, '"dynamics.seed" = [0, 1]')
    study = Study.from_file(p, tmp_path / "out")
    with pytest.raises(Interrupted):
        study.run(serial=True, progress=False)
    assert len(calls) == 1  # the second job was not started
    doc = man.read(study.directory)
    assert [j["status"] for j in doc["jobs"]] == ["pending", "pending"]
    assert all(j["error"] is None for j in doc["jobs"])


def test_manifest_shows_the_running_job_while_it_runs(tmp_path, monkeypatch):
    """Readers of the manifest see a job as running while it runs (serial: no polling loop
    flushes a throttled write later, so the start is written at once)."""
    from meanfield import runner
    seen = []

    def fake_run(cfg, output, **kw):
        doc = man.read(tmp_path / "out")
        seen.append({j["run_file"]: j["status"] for j in doc["jobs"]}[Path(output).name])
        raise RuntimeError("stop here")

    monkeypatch.setattr(runner, "run", fake_run)
    study = Study.from_file(_study(tmp_path, '"dynamics.seed" = [0, 1, 2]'), tmp_path / "out")
    summary = study.run(serial=True, progress=False)
    assert seen == ["running"] * 3
    assert len(summary.failed) == 3 and all("RuntimeError: stop here" in e
                                            for e in summary.failed.values())
