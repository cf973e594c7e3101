"""The benchmark peers perform the same update as the kernel (so the timings compare like with
like): drift against solvers.numpy_model, and noise of standard deviation sqrt(2 η τ)."""

import math

import pytest
from conftest import REPO

from benchmarks import bench_step as bs
from benchmarks.common import ETA, TAU, problem


def impls():
    return bs.implementations(with_torch=True)   # without torch: ours and NumPy only


def test_peers_take_the_reference_drift_step():
    X, y, theta = problem(900, 6, 2, seed=1)
    dev = bs.check_identical_update(impls(), X, y, theta)
    assert len(dev) >= 2
    assert all(v < 1e-12 for v in dev.values()), dev


@pytest.mark.parametrize("cls", impls(), ids=lambda c: c.name)
def test_peers_add_noise_of_the_right_scale(cls):
    X, y, theta = problem(5000, 6, 2, seed=2)
    quiet, noisy = cls(X, y, theta), cls(X, y, theta)
    quiet.run(1, tau=0.0)
    noisy.run(1, tau=TAU)
    xi = (noisy.theta() - quiet.theta()) / math.sqrt(2 * ETA * TAU)
    m = xi.size
    assert abs(xi.mean()) < 5 / math.sqrt(m)
    assert abs(xi.var() - 1) < 5 * math.sqrt(2 / m)


def test_accuracy_benchmarks_load_every_shipped_problem():
    """The accuracy benchmarks (time_to_accuracy, warm_start, step_and_particle_bias) read the
    shipped CSVs, whose header names the target: each loads with its config's lambda."""
    import numpy as np

    from benchmarks.accuracy import PROBLEMS, load
    from meanfield import config, data
    for name, (path, _lam) in PROBLEMS.items():
        X, y, lam = load(name)
        cfg = config.load(REPO / path.replace(".csv", ".toml"))
        ds = data.from_config(cfg)
        assert np.array_equal(X, ds.X) and np.array_equal(y, ds.y), name
        assert lam == cfg.dynamics.lam, name
