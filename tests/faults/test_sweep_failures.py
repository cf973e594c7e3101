"""``meanfield sweep`` when Dask fails under it, and what it shows while it runs.

* Dask failures are one line and the state the manifest keeps (jobs done, pending, failed,
  and those that were running), never a traceback: the scheduler killed mid-study, a malformed
  Dask config file or a setting Dask refuses (exit 2, naming it), too few file descriptors
  (exit 1, naming the limit).
* The local cluster starts no dashboard and no HTTP endpoint, and says nothing about a port
  8787 another cluster holds.
* The progress line's count of finished jobs and its ``done``/``running`` states agree.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest
from support import the_line

from meanfield.sweep import Study
from meanfield.sweep import manifest as man

distributed = pytest.importorskip("distributed")

from meanfield.sweep import execute  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

STUDY = """
[data]
kind = "gaussian"
n = 8
d = 2

[model]
n_particles = 50

[dynamics]
taus = [1e-2]
steps_per_tau = {steps}

[output]
observe_every = 50

[sweep]
"dynamics.seed" = [0, 1, 2]
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update(NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", **extra)
    return env


def _sweep(study, out, *more, env=None, preexec_fn=None, timeout=240):
    return subprocess.run([sys.executable, "-m", "meanfield", "sweep", str(study), "-o",
                           str(out), "--quiet", *map(str, more)], cwd=REPO,
                          env=env or _env(), capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec_fn)


@pytest.fixture
def study_file(tmp_path):
    p = tmp_path / "study.toml"
    p.write_text(STUDY.format(steps=300))
    return p


# ----------------------------------------------------------------------- the progress line

def test_the_count_of_finished_jobs_agrees_with_their_states(tmp_path, monkeypatch, capsys):
    """Every progress line that counts n finished jobs shows done=n, and running only for jobs
    that have not finished (a line read '3/3 ... done=2 running=1' before)."""
    import re

    from meanfield import progress
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)        # a line at every update
    study = Study.from_dict({"data": {"kind": "gaussian", "n": 4, "d": 2},
                             "model": {"n_particles": 10},
                             "dynamics": {"taus": [0.01], "steps_per_tau": 10},
                             "sweep": {"dynamics.seed": [0, 1, 2]}}, tmp_path / "s")
    study.directory.mkdir()
    m = man.Manifest.for_study(study.spec, study.directory)
    summary = execute.Summary(directory=study.directory, n_jobs=3)
    tracker = execute._Tracker(m, summary, progress=None)
    ids = [j.id for j in study.jobs]
    for jid in ids:
        tracker.start(jid, "host", 1)
    for jid in ids:
        tracker.finish(jid, {"status": "done", "wall_s": 0.1, "threads": 1})
    tracker.close(study.directory)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("study:")]
    assert lines
    for line in lines:
        n = int(re.search(r"study: (\d+)/3", line)[1])
        done = int(re.search(r"done=(\d+)", line)[1])
        running = int(re.search(r"running=(\d+)", line)[1])
        assert done == n and n + running <= 3, line
    assert "3/3" in lines[-1] and "running=0" in lines[-1]


# ------------------------------------------------------------------------- the dashboard

@pytest.mark.slow
def test_the_local_cluster_has_no_dashboard_and_no_port_warning():
    """With port 8787 taken (as by another cluster), the local cluster neither warns about
    it nor serves a dashboard or any HTTP route (docs/sweep.md: there is no dashboard)."""
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 8787))
        taken.listen()
    except OSError:
        pass                         # already taken by someone else: the same situation
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with execute._client(1, None, None, 1, threads=1) as (client, _):
                http = client.cluster.scheduler.http_server
                assert http.port != 8787
                for route in ("status", "health", "metrics"):
                    with pytest.raises(urllib.error.HTTPError) as got:
                        urllib.request.urlopen(f"http://127.0.0.1:{http.port}/{route}",
                                               timeout=10)
                    assert got.value.code == 404, route
        texts = [str(w.message) for w in said]
        assert not [t for t in texts if "8787" in t or "already in use" in t], texts
    finally:
        taken.close()


# -------------------------------------------------------------------------- Dask failures

def test_a_malformed_dask_config_file_is_one_line_naming_it(tmp_path, study_file):
    conf = tmp_path / "dask"
    conf.mkdir()
    (conf / "bad.yaml").write_text("distributed:\n  scheduler: [unclosed\n")
    out = tmp_path / "out"
    r = _sweep(study_file, out, "--workers", "1", env=_env(DASK_CONFIG=str(conf)), timeout=120)
    line = the_line(r.stderr, r.returncode, 2)
    assert str(conf / "bad.yaml") in line and "malformed Dask config file" in line, line
    assert "line 2, column 14" in line and "nothing was run" in line, line
    assert not out.exists()


@pytest.mark.slow
def test_a_dask_setting_dask_refuses_is_one_line_naming_it(tmp_path, study_file):
    out = tmp_path / "out"
    r = _sweep(study_file, out, "--workers", "1",
               env=_env(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="banana"), timeout=120)
    line = the_line(r.stderr, r.returncode, 2)
    assert line.startswith("meanfield: error: DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT: "
                           "distributed.comm.timeouts.connect: 'banana' is refused"), line
    assert "0 done, 3 pending, 0 failed" in line, line
    assert man.read(out)["counts"] == {"pending": 3, "running": 0, "done": 0, "failed": 0}


def _few_files():
    resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))


@pytest.mark.slow
def test_too_few_file_descriptors_name_the_limit(tmp_path, study_file):
    """``ulimit -n 32``: the local cluster cannot start its workers."""
    out = tmp_path / "out"
    r = _sweep(study_file, out, "--workers", "2", preexec_fn=_few_files, timeout=180)
    line = the_line(r.stderr, r.returncode, 1)
    assert "too many open files" in line and "ulimit -n" in line and " is 32 " in line, line
    assert f"{out / 'manifest.json'}: 0 done, 3 pending, 0 failed" in line, line


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _stop(proc, sig=signal.SIGTERM, timeout=30):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_the_scheduler_killed_mid_study_is_one_line_and_the_state(tmp_path):
    p = tmp_path / "study.toml"
    p.write_text(STUDY.format(steps=400000))
    out = tmp_path / "out"
    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                              "127.0.0.1", "--port", str(port), "--no-dashboard"], **quiet)
    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", addr,
                               "--nworkers", "1", "--nthreads", "1", "--no-dashboard"], **quiet)
    driver = None
    try:
        driver = subprocess.Popen([sys.executable, "-m", "meanfield", "sweep", str(p), "-o",
                                   str(out), "--scheduler", addr, "--quiet"], cwd=REPO,
                                  env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        t_end = time.monotonic() + 180
        running = None
        while running is None and time.monotonic() < t_end and driver.poll() is None:
            try:
                doc = json.loads((out / "manifest.json").read_text())
                running = next((j["id"] for j in doc["jobs"] if j["status"] == "running"), None)
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        assert running is not None, driver.communicate()[1] if driver.poll() is not None else ""
        sched.kill()
        sched.wait()
        _, err = driver.communicate(timeout=120)
    finally:
        for proc in (driver, worker, sched):
            if proc is not None:
                _stop(proc)
    line = the_line(err, driver.returncode, 1)
    assert f"lost the connection to the Dask scheduler at {addr}" in line, line
    assert f"{out / 'manifest.json'}: 0 done, 3 pending, 0 failed" in line, line
    assert f"were running when it stopped: {running}" in line, line
    assert man.read(out)["counts"] == {"pending": 3, "running": 0, "done": 0, "failed": 0}
