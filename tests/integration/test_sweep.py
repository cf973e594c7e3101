"""Studies on a real local Dask cluster: completion, idempotent reruns, redoing a deleted run
file, and recovery after a worker is killed mid-job.

The jobs are tiny (N = 100-200, a few thousand steps). Worker processes are spawned fresh; they
load the kernels from numba's cache of the installed package, which a warm-up run fills first
(a cache folder of their own would cost the suite one more cold compile, minutes on two cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meanfield.store import open_run
from meanfield.sweep import Study
from meanfield.sweep import execute as _execute
from meanfield.sweep import manifest as man

pytest.importorskip("distributed")
pytestmark = [pytest.mark.slow, pytest.mark.long]

REPO = Path(__file__).resolve().parents[2]

STUDY = """
[data]
kind = "gaussian"
n = 8
d = 2

[model]
n_particles = 100

[dynamics]
taus = [1e-2, 1e-3]
steps_per_tau = {steps}

[output]
observe_every = 50

[sweep]
"model.n_particles" = [100, 200]
"dynamics.seed" = [0, 1]
"""


WARM = """
import sys
from meanfield import config, runner
cfg = config.from_dict({"data": {"kind": "gaussian", "n": 4, "d": 2},
                        "model": {"n_particles": 10},
                        "dynamics": {"taus": [0.01], "steps_per_tau": 10}})
runner.run(cfg, sys.argv[1], progress=False, threads=1)
"""


@pytest.fixture(scope="module")
def numba_cache(tmp_path_factory):
    """numba's cache of the installed kernels, filled (or found filled) by one warm-up run in a
    fresh process before the workers start, so that they load the kernels instead of each
    compiling them."""
    d = tmp_path_factory.mktemp("warm-up")
    subprocess.run([sys.executable, "-c", WARM, str(d / "warm.h5")], cwd=d, check=True)
    return d


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory, numba_cache):
    """A 4-job study run once on a 2-worker local cluster."""
    root = tmp_path_factory.mktemp("study")
    p = root / "study.toml"
    p.write_text(STUDY.format(steps=1000))
    study = Study.from_file(p, root / "out")
    summary = study.run(workers=2, progress=False)
    return study, summary


def _mtimes(study):
    return {j.id: os.stat(study.run_file(j)).st_mtime_ns for j in study.jobs}


def test_four_jobs_complete_on_two_workers(finished_study):
    study, summary = finished_study
    assert summary.ok and not summary.failed, str(summary)
    assert sorted(summary.ran) == sorted(j.id for j in study.jobs)
    doc = man.read(study.directory)
    assert doc["counts"] == {"pending": 0, "running": 0, "done": 4, "failed": 0}
    for job, entry in zip(study.jobs, doc["jobs"]):
        assert entry["id"] == job.id and entry["status"] == "done" and entry["error"] is None
        assert entry["attempts"] == 1
        # two workers on this machine's cores: each job got cores // 2 numba threads
        assert entry["threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
        run = open_run(study.run_file(job))
        assert run.complete
        assert run.config.as_dict() == job.config.as_dict()
    assert not list(study.directory.glob("*.part"))


def test_rerun_does_no_work(finished_study, monkeypatch):
    study, _ = finished_study
    before = _mtimes(study)

    def no_cluster(*a, **k):  # pragma: no cover - the failure being tested for
        raise AssertionError("a finished study must not start any job")

    monkeypatch.setattr(_execute, "_dask", no_cluster)
    summary = study.run(workers=2, progress=False)
    assert summary.ok and summary.ran == [] and len(summary.skipped) == 4
    assert _mtimes(study) == before


def test_deleted_run_file_is_redone_alone(finished_study):
    study, _ = finished_study
    victim = study.jobs[2]
    study.run_file(victim).unlink()
    before = {k: v for k, v in _mtimes_existing(study).items()}
    summary = study.run(workers=2, progress=False)
    assert summary.ok, str(summary)
    assert summary.ran == [victim.id]
    assert sorted(summary.skipped) == sorted(j.id for j in study.jobs if j is not victim)
    after = _mtimes(study)
    assert {k: after[k] for k in before} == before
    assert open_run(study.run_file(victim)).complete
    assert man.read(study.directory)["counts"]["done"] == 4


def _mtimes_existing(study):
    return {j.id: os.stat(study.run_file(j)).st_mtime_ns for j in study.jobs
            if study.run_file(j).exists()}


def _wait_for_running_job(directory, proc, timeout=120.0):
    t_end = time.time() + timeout
    while time.time() < t_end:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"driver ended before any job ran:\n{err}")
        try:
            doc = man.read(directory)
        except Exception:  # the manifest does not exist yet
            doc = {"jobs": []}
        for entry in doc["jobs"]:
            if entry["status"] == "running" and (entry.get("worker") or {}).get("pid"):
                return entry
        time.sleep(0.05)
    pytest.fail("no job was reported running")


def test_killed_worker_then_rerun_completes(tmp_path, numba_cache):
    p = tmp_path / "study.toml"
    p.write_text(STUDY.format(steps=5000))
    out = tmp_path / "out"
    env = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0")
    proc = subprocess.Popen([sys.executable, "-m", "meanfield", "sweep", str(p), "-o", str(out),
                             "--workers", "2", "--quiet"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        entry = _wait_for_running_job(out, proc)
        os.kill(entry["worker"]["pid"], signal.SIGKILL)
        killed_mid_job = not (out / entry["run_file"]).exists()
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert killed_mid_job
    # the killed job is recorded as failed with its error; the others went on and finished
    assert proc.returncode == 1, err
    doc = man.read(out)
    failed = [j for j in doc["jobs"] if j["status"] == "failed"]
    assert entry["id"] in {j["id"] for j in failed}
    for j in failed:
        assert "KilledWorker" in j["error"]
    assert doc["counts"]["done"] == 4 - len(failed) >= 1
    assert "failed" in err and "rerun" in err

    study = Study.from_file(p, out)
    summary = study.run(workers=2, progress=False)
    assert summary.ok, str(summary)
    assert sorted(summary.ran) == sorted(j["id"] for j in failed)
    doc = man.read(out)
    assert doc["counts"]["done"] == 4
    assert all(j["error"] is None for j in doc["jobs"])
    for job in study.jobs:
        assert open_run(study.run_file(job)).complete
    assert not list(out.glob("*.part"))
    json.dumps(doc)  # the manifest stays plain JSON
