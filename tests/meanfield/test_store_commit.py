"""Run-file writer: preallocated rows, commit counters, truncation for resume, space reservation,
and survival of SIGKILL at any moment (store level, no solver)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from meanfield import config, data
from meanfield.errors import RunFileError
from meanfield.store import SCHEMA_VERSION, RunWriter, estimate_size, open_run
from solvers.observation import Observation

REPO = Path(__file__).resolve().parents[2]


def _cfg(N=6, n=3, d=2, T=40, every=10, snaps=2, taus=(0.1, 0.01)):
    return config.from_dict({"data": {"kind": "gaussian", "n": n, "d": d},
                             "model": {"n_particles": N},
                             "dynamics": {"taus": list(taus), "steps_per_tau": T},
                             "output": {"observe_every": every, "snapshots_per_tau": snaps}})


def _obs(k, n):
    return Observation(step=k, time=0.5 * k, stage=0, step_in_stage=k, tau=0.1, risk=float(k), regulariser=2.0 * k,
                       mean_sq_norm=3.0 * k, stationarity=np.nan, residuals=np.full(n, k / 7),
                       residuals_previous=np.full(n, k / 9), eta_lambda_max=0.1 * k)


def _frame(k, N, d):
    return np.arange(N * (d + 2), dtype=float).reshape(N, d + 2) + 1000 * k


class _Recorder:
    """Stands in for RunWriter in the solver loop and counts the rows it would write."""

    def __init__(self):
        self.frames = self.observations = 0

    def append_frame(self, *a):
        self.frames += 1

    def append_observations(self, rows):
        self.observations += len(rows)


@pytest.fixture
def one_thread():
    """One numba thread: on a busy machine, parallel regions of tiny kernels are mostly waiting."""
    import numba
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(old)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("T,every,snaps", [(40, 10, 2), (37, 10, 3), (12, 5, 12), (9, 20, 1),
                                           (50, 7, 4)])
def test_row_counts_match_what_simulate_writes(T, every, snaps):
    from meanfield.runner import integrate
    cfg = _cfg(N=4, n=2, T=T, every=every, snaps=snaps)
    rec = _Recorder()
    integrate(cfg, data.from_config(cfg), writer=rec, progress=False)
    assert cfg.schedule.row_counts() == (rec.frames, rec.observations)


def test_rows_are_preallocated_and_trimmed_on_completion(tmp_path):
    cfg = _cfg()
    ds = data.from_config(cfg)
    N, n, d = cfg.n_particles, ds.n, ds.d
    path = tmp_path / "r.h5"
    with RunWriter(path, cfg, ds, capacity=(3, 5)) as w:
        import h5py
        assert w.f["particles/neurons/position/value"].shape == (3, N, d + 2)
        assert w.f["observables/residuals/value"].shape == (5, n)
        w.append_observations([_obs(1, n), _obs(2, n)])
        w.append_frame(_frame(1, N, d), 10, 5.0, 0.1, 0, 10)
        run = open_run(path)       # another handle, like a reader after a crash
        assert run.n_frames == 1 and len(run.observables["risk"]["step"]) == 2
        assert not run.complete
        for k in range(3, 8):      # beyond the capacity: the datasets grow
            w.append_observations([_obs(k, n)])
        w.mark_complete()
    run = open_run(path)
    assert run.complete and run.n_frames == 1
    np.testing.assert_array_equal(run.observables["risk"]["value"], np.arange(1.0, 8.0))
    np.testing.assert_array_equal(run.frame(0), _frame(1, N, d))
    with h5py.File(path, "r") as f:    # a complete file holds exactly the committed rows
        assert f["particles/neurons/position/value"].shape[0] == 1
        assert f["particles/neurons/temperature/step"].shape[0] == 1
        assert all(f[f"observables/{k}/{x}"].shape[0] == 7
                   for k in f["observables"] for x in ("step", "time", "value"))
        assert f["parameters"].attrs["schema_version"] == SCHEMA_VERSION


def test_truncate_rewinds_counters_and_rows_are_rewritten(tmp_path):
    cfg = _cfg()
    ds = data.from_config(cfg)
    N, n, d = cfg.n_particles, ds.n, ds.d
    path = tmp_path / "r.h5"
    with RunWriter(path, cfg, ds, capacity=(2, 4)) as w:
        for k in range(1, 5):
            w.append_observations([_obs(k, n)])
        w.append_frame(_frame(1, N, d), 10, 5.0, 0.1, 0, 10)
        w.append_frame(_frame(2, N, d), 20, 10.0, 0.1, 0, 20)
    with RunWriter(path, mode="a") as w:
        assert (w.n_frames, w.n_observations) == (2, 4)
        with pytest.raises(RunFileError, match="fewer than the checkpoint"):
            w.truncate(3, 4)
        w.truncate(1, 2)
        assert open_run(path).n_frames == 1
        w.append_observations([_obs(30, n)])
        w.append_frame(_frame(9, N, d), 99, 1.0, 0.1, 0, 99)
        w.mark_complete()
    run = open_run(path)
    np.testing.assert_array_equal(run.observables["risk"]["value"], [1.0, 2.0, 30.0])
    np.testing.assert_array_equal(run.frame_step, [10, 99])
    np.testing.assert_array_equal(run.frame(1), _frame(9, N, d))


@pytest.mark.parametrize("N,n,d,cap", [(6, 3, 2, (2, 8)), (5000, 40, 7, (30, 4000)),
                                       (1, 1, 1, (1, 1)), (300, 2, 3, (0, 0))])
def test_estimate_bounds_the_file_size(tmp_path, N, n, d, cap):
    cfg = _cfg(N=N, n=n, d=d)
    ds = data.from_config(cfg)
    path = tmp_path / "r.h5"
    with RunWriter(path, cfg, ds, capacity=cap):
        pass
    size = path.stat().st_size
    assert size <= estimate_size(N, d, n, cap) <= 2 * size + 200_000
    # the preallocated rows are real blocks, not holes (where the file system can allocate)
    assert path.stat().st_blocks * 512 >= size - 4096


def test_reservation_failure_leaves_no_hdf5_write(tmp_path):
    """A file-size limit below the estimate fails in the reservation with a plain OSError."""
    script = textwrap.dedent(f"""
        import resource, sys
        from meanfield import config, data
        from meanfield.store import RunWriter
        cfg = config.from_dict({{"data": {{"kind": "gaussian"}}, "model": {{"n_particles": 4000}}}})
        resource.setrlimit(resource.RLIMIT_FSIZE, (50000, 50000))
        try:
            RunWriter({str(tmp_path / "r.h5")!r}, cfg, data.from_config(cfg), capacity=(3, 100))
        except OSError as exc:
            print("OSError", exc.errno, exc.strerror)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OSError 27 File too large; the run file needs about")
    assert out.stderr == ""
    assert (tmp_path / "r.h5").stat().st_size == 0


_WRITER = """
import sys
import numpy as np
from meanfield import config, data
from meanfield.store import RunWriter
from solvers.observation import Observation
cfg = config.from_dict({{"data": {{"kind": "gaussian", "n": 5}}, "model": {{"n_particles": 300}}}})
ds = data.from_config(cfg)
w = RunWriter(sys.argv[1], cfg, ds, capacity=(40, 400))
print("ready", flush=True)
k = 0
while True:
    k += 1
    w.append_observations([Observation(step=k, time=k / 2, stage=0, step_in_stage=k, tau=0.01,
                                       risk=k * 1.0,
                                       regulariser=1.0, mean_sq_norm=1.0, stationarity=0.0,
                                       residuals=np.full(5, k * 1.0),
                                       residuals_previous=np.full(5, k * 1.0),
                                       eta_lambda_max=0.0)])
    if k % 10 == 0:
        w.append_frame(np.full((300, 4), k * 1.0), k, k / 2, 0.01, 0, k)
"""


@pytest.mark.slow
def test_store_survives_sigkill_anywhere(tmp_path):
    """A writer appending as fast as it can, killed at random moments: every file opens and
    every committed row holds exactly what was written."""
    script = tmp_path / "writer.py"
    script.write_text(_WRITER.format())
    rng = random.Random(6)
    readable = 0
    for trial in range(12):
        path = tmp_path / f"w{trial}.h5"
        p = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE)
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, 0.4))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        run = open_run(path)
        no = len(run.observables["risk"]["step"])
        np.testing.assert_array_equal(run.observables["risk"]["value"], np.arange(1, no + 1))
        np.testing.assert_array_equal(run.observables["residuals"]["value"],
                                      np.repeat(np.arange(1.0, no + 1)[:, None], 5, axis=1))
        np.testing.assert_array_equal(run.frame_step, 10 * np.arange(1, run.n_frames + 1))
        for k in range(run.n_frames):
            assert np.all(run.frame(k) == 10.0 * (k + 1))
        readable += 1
    assert readable == 12


def test_open_run_names_a_lock_held_by_a_writer_outside_swmr(tmp_path):
    """A process holding the file open for writing the plain HDF5 way (not a meanfield
    writer, which works in SWMR mode) still blocks readers, and the message says so."""
    import h5py
    cfg = _cfg()
    path = tmp_path / "r.h5"
    RunWriter(path, cfg, data.from_config(cfg), capacity=(1, 1)).close()
    with h5py.File(path, "r+"):
        script = ("from meanfield.store import open_run\n"
                  f"open_run({str(path)!r})\n")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=60, env=dict(os.environ, HDF5_USE_FILE_LOCKING="TRUE"))
    assert "RunFileError" in out.stderr
    assert "locked: another process has it open for writing" in out.stderr
