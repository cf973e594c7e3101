"""Reading a run while it is written (HDF5 SWMR): ``open_run``, plain h5py, ``inspect`` and
``inspect --follow`` see only committed rows, with file locking on, while a writer in another
process appends."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_toml

from meanfield.store import open_run, writer_alive

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, HDF5_USE_FILE_LOCKING="TRUE")

# A store-level writer (no solver): observation k has risk k and residuals k/7; frame k holds
# 1000 k + arange. It appends one row every few milliseconds and says when it starts.
WRITER = textwrap.dedent("""\
    import sys, time
    import numpy as np
    from meanfield import config, data
    from meanfield.store import RunWriter
    from solvers.observation import Observation
    cfg = config.from_dict({"data": {"kind": "gaussian", "n": 3, "d": 2},
                            "model": {"n_particles": 6},
                            "dynamics": {"taus": [0.1], "steps_per_tau": 4000},
                            "output": {"observe_every": 10, "snapshots_per_tau": 4}})
    ds = data.from_config(cfg)
    M = int(sys.argv[2])
    with RunWriter(sys.argv[1], cfg, ds, capacity=(M // 10, M)) as w:
        print("started", flush=True)
        for k in range(1, M + 1):
            w.append_observations([Observation(step=10 * k, time=0.5 * k, stage=0,
                                               step_in_stage=10 * k, tau=0.1,
                                               risk=float(k), regulariser=0.0,
                                               mean_sq_norm=0.0, stationarity=0.0,
                                               residuals=np.full(3, k / 7),
                                               residuals_previous=np.full(3, k / 7),
                                               eta_lambda_max=0.0)])
            if k % 10 == 0:
                w.append_frame(np.arange(24.0).reshape(6, 4) + 1000 * (k // 10), 10 * k,
                               0.5 * k, 0.1, 0, 10 * k)
            time.sleep(0.008)
        w.mark_complete()
""")


def _check_prefix(run):
    """The committed rows of a run written by WRITER, whatever moment it was read at."""
    no = len(run.observables["risk"]["step"])
    np.testing.assert_array_equal(run.observables["risk"]["value"], np.arange(1.0, no + 1))
    np.testing.assert_array_equal(run.observables["residuals"]["value"],
                                  np.repeat(np.arange(1.0, no + 1)[:, None] / 7, 3, axis=1))
    assert run.n_frames <= no // 10 + 1
    for k in range(run.n_frames):
        assert np.array_equal(run.frame(k), np.arange(24.0).reshape(6, 4) + 1000 * (k + 1))
    return no


def _plain_h5py(path):
    """The recipe of docs/format.md, "Reading a run in progress"."""
    import h5py
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        no, nf = int(f.attrs["n_observations"]), int(f.attrs["n_frames"])
        risk = f["observables/risk/value"][:no]
        frames = f["particles/neurons/position/value"][:nf]
    return risk, frames


@pytest.mark.slow
def test_readers_see_only_committed_rows_while_the_writer_appends(tmp_path):
    path = tmp_path / "live.h5"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "1000"], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        seen, plain, cli_reads = [], 0, 0
        while proc.poll() is None:
            alive = writer_alive(path)
            run = open_run(path)
            assert alive or run.complete     # the lock goes when the writer closes the file
            if run.complete:
                break
            seen.append(_check_prefix(run))
            if len(seen) == 2:                  # the tidy view of a live run: committed rows
                ds = run.to_xarray()
                assert ds.sizes["time"] == seen[-1] and ds.sizes["frame"] == run.n_frames
                np.testing.assert_array_equal(ds.risk.sel(chain=0).values,
                                              np.arange(1.0, seen[-1] + 1))
            risk, frames = _plain_h5py(path)
            assert np.array_equal(risk, np.arange(1.0, len(risk) + 1))  # never a zero row
            assert all(np.array_equal(fr, np.arange(24.0).reshape(6, 4) + 1000 * (k + 1))
                       for k, fr in enumerate(frames))
            plain += 1
            if cli_reads < 2:
                out = subprocess.run([sys.executable, "-m", "meanfield", "inspect", str(path),
                                      "--json"], env=ENV, capture_output=True, text=True,
                                     check=False, timeout=120)
                assert out.returncode == 0, out.stderr
                assert '"complete": false' in out.stdout
                cli_reads += 1
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # read in the middle of the run, more rows each time, not all at once
    middle = sorted({k for k in seen if 0 < k < 1000})
    assert len(middle) >= 3 and seen == sorted(seen)
    assert plain >= 3 and cli_reads == 2
    assert not writer_alive(path)
    run = open_run(path)
    assert run.complete and _check_prefix(run) == 1000 and run.n_frames == 100


def test_a_killed_swmr_writer_leaves_a_readable_file_that_resumes(tmp_path):
    """SIGKILL leaves HDF5's "open for write" mark: readers still see the committed rows, and
    opening for appending (what --resume does) rebuilds the file with the same rows."""
    from meanfield.store import RunWriter
    path = tmp_path / "killed.h5"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "100000"], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait()
    assert not writer_alive(path)
    before = open_run(path)
    no = _check_prefix(before)
    assert 0 < no < 100000 and not before.complete
    with RunWriter(path, mode="a") as w:
        assert (w.n_observations, w.n_frames) == (no, before.n_frames)
        assert writer_alive(path)
    after = open_run(path)
    assert _check_prefix(after) == no and after.n_frames == before.n_frames


@pytest.mark.slow
def test_follow_a_real_run_until_it_completes(tmp_path):
    """``meanfield run`` in one process, ``inspect --follow`` and ``open_run`` in others: the
    follower prints progress lines and exits 0 at the end; every live read is a prefix of the
    finished run."""
    cfg = tmp_path / "live.toml"
    # conftest.TINY, longer: a few seconds, so that a reader starved by a loaded machine still
    # reads the run while it is going (20 000 steps a stage, about 1 s, were not always enough)
    cfg.write_text(tiny_toml({"dynamics.steps_per_tau": 100000}))
    out = tmp_path / "live.h5"
    part = tmp_path / "live.h5.part"
    run = subprocess.Popen([sys.executable, "-m", "meanfield", "run", str(cfg), "-o", str(out),
                            "--threads", "1", "--quiet"], env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    follow = None
    try:
        while not part.exists() and run.poll() is None:
            time.sleep(0.05)
        follow = subprocess.Popen([sys.executable, "-m", "meanfield", "inspect", str(out),
                                   "--follow", "--interval", "0.2"], env=ENV,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        partial = []
        while run.poll() is None:
            try:
                r = open_run(part)
                frames = [r.frame(k) for k in range(r.n_frames)]
            except Exception:               # renamed away at the end
                if out.exists():
                    break
                raise
            if 0 < len(r.observables["risk"]["step"]) and not r.complete:
                partial.append((r, frames))
            time.sleep(0.3)
        assert run.wait(timeout=600) == 0, run.stderr.read()
        fout, ferr = follow.communicate(timeout=120)
    finally:
        for p in (run, follow):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert follow.returncode == 0, ferr
    lines = fout.strip().splitlines()
    assert lines[-1] == f"complete: {out}"
    assert lines[-2].startswith("step 200000/200000 (100%)  tau=1.00e-03 (temperature 2/2)")
    assert len(lines) >= 3                  # progress while it ran, not only the end
    final = open_run(out)
    assert partial, "the run ended before a live read"
    for r, frames in partial:
        m = len(r.observables["risk"]["step"])
        for name, obs in r.observables.items():
            for key in ("step", "time", "value"):
                assert obs[key].tobytes() == final.observables[name][key][:m].tobytes()
        for k, frame in enumerate(frames):
            assert frame.tobytes() == final.frame(k).tobytes()


def test_a_live_run_without_frames_is_refused_as_still_going(tmp_path, capsys):
    """``analyze`` of a run file whose writer is alive but has committed no frame says the run
    is still going (not that it was stopped) and points to ``inspect --follow``."""
    from support import one_line

    from meanfield.cli import main
    path = tmp_path / "live.h5.part"
    hold = textwrap.dedent("""\
        import sys, time
        from meanfield import config, data
        from meanfield.store import RunWriter
        cfg = config.from_dict({"data": {"kind": "gaussian", "n": 3, "d": 2},
                                "model": {"n_particles": 6},
                                "dynamics": {"taus": [0.1], "steps_per_tau": 40},
                                "output": {"observe_every": 10, "snapshots_per_tau": 1}})
        with RunWriter(sys.argv[1], cfg, data.from_config(cfg), capacity=(1, 4)):
            print("started", flush=True)
            sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", hold, str(path)], env=ENV, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == "started"
        assert writer_alive(path)
        line = one_line(capsys, main(["analyze", str(path), "-o", str(tmp_path / "rep")]))
    finally:
        proc.communicate("", timeout=60)
    assert line == (f"meanfield: error: {path}: holds no frames yet: the run writing it has "
                    f"not reached its first frame (follow it with 'meanfield inspect {path} "
                    "--follow')")
    assert not (tmp_path / "rep").exists()
