"""Checkpoints: exact round trip of the solver state, atomic replacement, refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from meanfield import checkpoint
from meanfield.errors import CheckpointError
from solvers.langevin import SolverState


def _state(rng, k=3):
    return SolverState(theta=rng.standard_normal((7, 4)) * 1e3, step=123456789012, stage=2,
                       step_in_stage=400,
                       stage_residuals=[rng.standard_normal(5) for _ in range(k)],
                       n_frames=4, n_observations=37)


def _assert_same(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        elif isinstance(x, list):
            assert len(x) == len(y)
            for u, v in zip(x, y):
                assert u.dtype == v.dtype and u.tobytes() == v.tobytes()
        else:
            assert type(x) is type(y) and x == y, f.name


@pytest.mark.parametrize("k", [0, 1, 3])
def test_round_trip_is_bitwise(tmp_path, k):
    st = _state(np.random.default_rng(k), k)
    st.theta[0, 0] = np.nextafter(1.0, 2.0)      # last-bit detail survives
    st.theta[1, 1] = -0.0
    path = tmp_path / "run.h5.ckpt"
    checkpoint.save(path, st, physics_hash="abc", config_hash="def")
    back, meta = checkpoint.load(path, SolverState)
    _assert_same(st, back)
    assert meta["physics_hash"] == "abc" and meta["config_hash"] == "def"
    assert meta["format"] == checkpoint.FORMAT and meta["version"] == checkpoint.VERSION
    assert not (tmp_path / "run.h5.ckpt.tmp").exists()
    assert back.theta is not st.theta and back.theta.flags.writeable


def test_failed_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "run.h5.ckpt"
    old = _state(np.random.default_rng(1))
    checkpoint.save(path, old, physics_hash="p", config_hash="c")
    before = path.read_bytes()

    def broken_savez(fh, **arrays):
        fh.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError):
        checkpoint.save(path, _state(np.random.default_rng(2)), physics_hash="p", config_hash="c")
    assert path.read_bytes() == before
    assert not (tmp_path / "run.h5.ckpt.tmp").exists()
    monkeypatch.undo()
    _assert_same(old, checkpoint.load(path, SolverState)[0])


def test_refuses_damaged_and_foreign_files(tmp_path):
    path = tmp_path / "x.ckpt"
    with pytest.raises(CheckpointError, match="no such file"):
        checkpoint.load(path, SolverState)
    checkpoint.save(path, _state(np.random.default_rng(0)), physics_hash="p", config_hash="c")
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="damaged checkpoint.*start over with --overwrite"):
        checkpoint.load(path, SolverState)
    with open(path, "wb") as fh:
        np.savez(fh, theta=np.zeros((2, 3)))
    with pytest.raises(CheckpointError, match="not a meanfield checkpoint"):
        checkpoint.load(path, SolverState)


def test_refuses_other_version_and_other_fields(tmp_path, monkeypatch):
    path = tmp_path / "x.ckpt"
    checkpoint.save(path, _state(np.random.default_rng(0)), physics_hash="p", config_hash="c")

    @dataclasses.dataclass
    class Wider(SolverState):
        rng_state: int = 0

    with pytest.raises(CheckpointError, match="another meanfield version"):
        checkpoint.load(path, Wider)
    monkeypatch.setattr(checkpoint, "VERSION", checkpoint.VERSION + 1)
    with pytest.raises(CheckpointError, match="not supported"):
        checkpoint.load(path, SolverState)


def test_refuses_non_finite_particles(tmp_path):
    st = _state(np.random.default_rng(0))
    st.theta[3, 2] = np.inf
    path = tmp_path / "x.ckpt"
    checkpoint.save(path, st, physics_hash="p", config_hash="c")
    with pytest.raises(CheckpointError, match="theta: holds NaN or Inf"):
        checkpoint.load(path, SolverState)
