"""Wasserstein distances: POT called so that it is exact, and a truncated solve is caught."""

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from analysis import transport
from analysis.transport import (
    TransportError,
    emd2_checked,
    w2_exact,
    w2_rays,
    w2_sliced,
    w2_snapshots,
)

rng = np.random.default_rng(0)


def test_exact_w2_equals_the_assignment_problem():
    # uniform measures of equal size: optimal transport is an optimal assignment
    P = rng.standard_normal((150, 4))
    Q = rng.standard_normal((150, 4)) + 0.3
    C = ((P[:, None] - Q[None]) ** 2).sum(-1)
    r, c = linear_sum_assignment(C)
    assert w2_exact(P, Q) == pytest.approx(np.sqrt(C[r, c].mean()), rel=1e-12)


def test_exact_w2_weighted_in_one_dimension():
    # 1-D: W2² = ∫_0^1 |F⁻¹(t) − G⁻¹(t)|² dt, evaluated on the merged quantile grid
    x, a = np.array([0.0, 1.0, 3.0]), np.array([0.2, 0.5, 0.3])
    z, b = np.array([0.5, 2.0]), np.array([0.6, 0.4])
    t = np.unique(np.r_[0.0, np.cumsum(a), np.cumsum(b)])
    mid = 0.5 * (t[1:] + t[:-1])
    Fi = x[np.searchsorted(np.cumsum(a), mid)]
    Gi = z[np.searchsorted(np.cumsum(b), mid)]
    ref = np.sqrt(np.sum(np.diff(t) * (Fi - Gi) ** 2))
    assert w2_exact(x[:, None], z[:, None], a, b) == pytest.approx(ref, rel=1e-12)


def test_pot_is_called_with_exact_settings(monkeypatch):
    import ot
    seen = {}
    real = ot.emd2

    def spy(*args, **kw):
        seen.update(kw)
        return real(*args, **kw)

    monkeypatch.setattr(ot, "emd2", spy)
    w2_exact(rng.standard_normal((20, 2)), rng.standard_normal((30, 2)))
    assert seen["numItermax"] >= 10 ** 8 and seen["log"] is True


def test_a_truncated_solve_raises():
    P = rng.standard_normal((200, 3))
    Q = rng.standard_normal((200, 3))
    with pytest.raises(TransportError, match="result_code=3"):
        w2_exact(P, Q, _num_iter_max=10)
    M = ((P[:, None] - Q[None]) ** 2).sum(-1)
    u = np.full(200, 1 / 200)
    with pytest.raises(TransportError):
        emd2_checked(u, u, M, _num_iter_max=10)
    assert emd2_checked(u, u, M) > 0


def test_snapshots_switch_to_sliced_above_the_exact_limit():
    P = rng.standard_normal((400, 4))
    Q = 1.1 * rng.standard_normal((400, 4)) + 0.2
    ex = w2_snapshots(P, Q)
    assert ex["method"] == "exact"
    sl = w2_snapshots(P, Q, max_exact=100)
    assert sl["method"] == "sliced" and sl["n_projections"] == transport.N_PROJECTIONS
    assert sl["w2"] == w2_snapshots(P, Q, max_exact=100)["w2"]      # fixed projections
    assert 0 < sl["w2"] <= ex["w2"]                                  # sliced ≤ W2


def test_sliced_fast_path_matches_pot():
    import ot
    P = rng.standard_normal((300, 4))
    Q = rng.standard_normal((300, 4)) * 1.3
    proj = ot.sliced.get_random_projections(4, 50, seed=3)
    ref = ot.sliced_wasserstein_distance(P, Q, n_projections=50, p=2, projections=proj)
    assert w2_sliced(P, Q, n_projections=50, seed=3) == pytest.approx(ref, rel=1e-10)
    # unequal sizes go through POT
    assert w2_sliced(P, Q[:200], n_projections=50, seed=3) == pytest.approx(
        ot.sliced_wasserstein_distance(P, Q[:200], n_projections=50, p=2, projections=proj),
        rel=1e-12)


def test_ray_measures():
    v = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    assert w2_rays(v, [0.3, -0.7], v, [0.6, -1.4])["w2"] == pytest.approx(0.0, abs=1e-12)
    # one ray rotated by angle φ: W2 = chord 2 sin(φ/2)
    phi = 0.3
    u = np.array([[np.cos(phi), np.sin(phi), 0.0]])
    r = w2_rays(v[:1], [0.5], u, [0.2])
    assert r["w2"] == pytest.approx(2 * np.sin(phi / 2), rel=1e-12)
    assert r["total_a"] == 0.5 and r["total_b"] == 0.2
    assert w2_rays(v[:1], [0.5], np.zeros((0, 3)), [])["w2"] is None
