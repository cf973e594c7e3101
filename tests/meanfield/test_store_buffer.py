"""Buffered observation writes: rows wait in memory and are committed in blocks (every
``flush_rows`` rows, ``flush_seconds`` after the last commit, before every frame, at checkpoints
and at the end), each block made visible to readers by one counter update."""

from __future__ import annotations

import numpy as np
import pytest

from meanfield import config, data
from meanfield.store import FLUSH_ROWS, RunWriter, open_run
from solvers.observation import Observation


def _cfg():
    return config.from_dict({"data": {"kind": "gaussian", "n": 3, "d": 2},
                             "model": {"n_particles": 4},
                             "dynamics": {"taus": [0.1], "steps_per_tau": 40},
                             "output": {"observe_every": 10, "snapshots_per_tau": 1}})


def _obs(k, n=3):
    return Observation(step=k, time=0.5 * k, stage=0, step_in_stage=k, tau=0.1, risk=float(k), regulariser=2.0 * k,
                       mean_sq_norm=3.0 * k, stationarity=np.nan, residuals=np.full(n, k / 7),
                       residuals_previous=np.full(n, k / 9), eta_lambda_max=0.1 * k)


def _seen(path):
    run = open_run(path)
    return len(run.observables["risk"]["step"]), run.n_frames


def _writer(tmp_path, **kw):
    cfg = _cfg()
    return RunWriter(tmp_path / "r.h5", cfg, data.from_config(cfg), capacity=(4, 20), **kw)


def test_rows_wait_until_a_block_is_full(tmp_path):
    with _writer(tmp_path, flush_rows=4, flush_seconds=1e9) as w:
        for k in range(1, 4):
            w.append_observations([_obs(k)])
            assert _seen(w.path) == (0, 0) and w.pending == k and w.n_observations == 0
        w.append_observations([_obs(4)])                # the 4th row completes a block
        assert _seen(w.path) == (4, 0) and w.pending == 0 and w.n_observations == 4
        w.append_observations([_obs(5), _obs(6)])
        assert _seen(w.path) == (4, 0)
    run = open_run(tmp_path / "r.h5")                   # close commits the rest
    np.testing.assert_array_equal(run.observables["risk"]["value"], np.arange(1.0, 7.0))
    np.testing.assert_array_equal(run.observables["residuals"]["value"],
                                  np.repeat(np.arange(1.0, 7.0)[:, None] / 7, 3, axis=1))
    np.testing.assert_array_equal(run.observables["tau"]["step"], np.arange(1, 7))


def test_large_rows_commit_in_smaller_blocks(tmp_path, monkeypatch):
    """Rows whose arrays reach ``FLUSH_BYTES`` together are committed before ``flush_rows``
    wait: a row of 3 points holds 2 x 3 x 8 = 48 bytes of residuals (counted with 128 bytes
    of the rest: 176), so a cap of 3 x 176 bytes commits every 3 rows."""
    from meanfield.store import writer as writer_module
    monkeypatch.setattr(writer_module, "FLUSH_BYTES", 3 * 176)
    with _writer(tmp_path, flush_rows=100, flush_seconds=1e9) as w:
        seen = []
        for k in range(1, 8):
            w.append_observations([_obs(k)])
            seen.append(_seen(w.path)[0])
    assert seen == [0, 0, 3, 3, 3, 6, 6]


def test_a_frame_commits_the_observations_before_it(tmp_path):
    with _writer(tmp_path, flush_rows=100, flush_seconds=1e9) as w:
        w.append_observations([_obs(1), _obs(2)])
        w.append_frame(np.ones((4, 4)), 2, 1.0, 0.1, 0, 2)
        assert _seen(w.path) == (2, 1)
        w.append_observations([_obs(3)])
        w.commit()
        assert _seen(w.path) == (3, 1)


def test_an_append_after_flush_seconds_commits(tmp_path):
    with _writer(tmp_path, flush_rows=100, flush_seconds=0.0) as w:
        w.append_observations([_obs(1)])
        assert _seen(w.path) == (1, 0) and w.pending == 0


def test_truncate_and_mark_complete_commit_first(tmp_path):
    with _writer(tmp_path, flush_rows=100, flush_seconds=1e9) as w:
        w.append_observations([_obs(k) for k in range(1, 6)])
        w.truncate(0, 3)                  # the five rows are committed, then three kept
        assert _seen(w.path) == (3, 0)
        w.append_observations([_obs(9)])
        w.mark_complete()
    run = open_run(tmp_path / "r.h5")
    assert run.complete
    np.testing.assert_array_equal(run.observables["risk"]["value"], [1.0, 2.0, 3.0, 9.0])


def test_leaving_on_an_error_keeps_the_buffered_rows(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with _writer(tmp_path, flush_rows=100, flush_seconds=1e9) as w:
            w.append_observations([_obs(1), _obs(2)])
            raise KeyboardInterrupt
    assert _seen(tmp_path / "r.h5") == (2, 0)


def test_a_failed_write_writes_nothing_more(tmp_path, monkeypatch):
    import meanfield.store.writer as store
    w = _writer(tmp_path, flush_rows=2, flush_seconds=1e9)
    calls = []

    def failing(*a):
        calls.append(a)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(store, "_write_rows", failing)
    with pytest.raises(OSError):
        w.append_observations([_obs(1), _obs(2)])
    w.close()                             # no second attempt on a file HDF5 may have left torn
    assert len(calls) == 1
    monkeypatch.undo()
    assert _seen(tmp_path / "r.h5") == (0, 0)


_KILLED = """
import sys
import numpy as np
from meanfield import config, data
from meanfield.store import RunWriter
from solvers.observation import Observation
cfg = config.from_dict({{"data": {{"kind": "gaussian", "n": 3}}, "model": {{"n_particles": 4}}}})
w = RunWriter(sys.argv[1], cfg, data.from_config(cfg), capacity=(1, 100000), flush_seconds=1e9)
for k in range(1, 100000):
    w.append_observations([Observation(step=k, time=k / 2, stage=0, step_in_stage=k, tau=0.1,
                                       risk=k * 1.0,
                                       regulariser=1.0, mean_sq_norm=1.0, stationarity=0.0,
                                       residuals=np.full(3, k * 1.0),
                                       residuals_previous=np.full(3, k * 1.0),
                                       eta_lambda_max=0.0)])
    print(k, flush=True)
"""


def test_sigkill_loses_at_most_one_block(tmp_path):
    """Killed after ``k`` appends, a writer has committed at least ``k - FLUSH_ROWS + 1``
    rows, each holding what was written."""
    import subprocess
    import sys
    script = tmp_path / "w.py"
    script.write_text(_KILLED.format())
    path = tmp_path / "k.h5"
    p = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE,
                         text=True)
    target = 3 * FLUSH_ROWS + FLUSH_ROWS // 2
    try:
        for line in p.stdout:
            if int(line) >= target:
                break
        k = int(line)
        p.kill()
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
    no, _ = _seen(path)
    assert k >= target and no >= k - FLUSH_ROWS + 1 and no % FLUSH_ROWS == 0
    run = open_run(path)
    np.testing.assert_array_equal(run.observables["risk"]["value"], np.arange(1.0, no + 1))
