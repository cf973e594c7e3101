"""The disk cache of the exact references and snapshot W2 (analysis.refcache): a second request
is read from the cache instead of solved (counted solver calls), another τ, λ, data or solver
code is solved afresh, a damaged entry is recomputed and replaced, and the cache can be turned
off."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from analysis import refcache, references
from solvers import convex as convex_mod
from solvers import gibbs as gibbs_mod

X1 = np.array([[-1.0], [0.3], [1.2]])
Y1 = np.array([0.5, -0.2, 0.8])


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """A fresh cache folder and process cache; counts of the real solvers' calls."""
    monkeypatch.setenv(refcache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(refcache.ENV_OFF, raising=False)
    monkeypatch.setattr(references, "_CACHE", {})
    calls = {"gibbs": 0, "convex": 0}

    def gibbs(*a, **kw):
        calls["gibbs"] += 1
        return gibbs_mod.gibbs(*a, **kw)

    def convex(*a, **kw):
        calls["convex"] += 1
        return convex_mod.convex(*a, **kw)
    monkeypatch.setattr(references, "gibbs", gibbs)
    monkeypatch.setattr(references, "convex", convex)
    return calls


def _forget(monkeypatch):
    """A new process as far as the references know: the in-process cache is empty."""
    monkeypatch.setattr(references, "_CACHE", {})


def _same_gibbs(a, b):
    for name in ("tau", "lam", "residual", "max_abs_G", "quad_error", "n_nodes",
                 "iterations", "log_I"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("X", "y", "R", "f_train"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name


def _entries(tmp_path):
    return sorted((tmp_path / "cache").rglob("*.npz"))


def test_second_gibbs_request_is_read_from_the_cache(counted, monkeypatch, tmp_path):
    first = references.gibbs_reference(X1, Y1, 0.1, 0.05)
    assert counted["gibbs"] == 1 and len(_entries(tmp_path)) == 1
    _forget(monkeypatch)
    again = references.gibbs_reference(X1, Y1, 0.1, 0.05)
    assert counted["gibbs"] == 1
    _same_gibbs(first, again)
    assert type(again) is gibbs_mod.GibbsSolution


@pytest.mark.parametrize("change", ["tau", "lam", "X", "y", "code"])
def test_other_inputs_miss(counted, monkeypatch, tmp_path, change):
    references.gibbs_reference(X1, Y1, 0.1, 0.05)
    _forget(monkeypatch)
    X, y, lam, tau = X1.copy(), Y1.copy(), 0.1, 0.05
    if change == "tau":
        tau = math.nextafter(0.05, 1.0)      # the next float already is another input
    elif change == "lam":
        lam = 0.1 * (1 + 1e-9)
    elif change == "X":
        X[1, 0] += 1e-9
    elif change == "y":
        y[2] = -y[2]
    else:
        monkeypatch.setitem(refcache._state, "code",
                            {**refcache._code_fingerprint(), "source": "0" * 64})
    sol = references.gibbs_reference(X, y, lam, tau)
    assert counted["gibbs"] == 2 and len(_entries(tmp_path)) == 2
    assert sol.tau == tau and sol.lam == lam and np.array_equal(sol.X, X)


def test_a_damaged_entry_is_recomputed_and_replaced(counted, monkeypatch, tmp_path):
    first = references.gibbs_reference(X1, Y1, 0.1, 0.05)
    (entry,) = _entries(tmp_path)
    for damage in (b"not a zip archive", entry.read_bytes()[:200]):
        entry.write_bytes(damage)
        _forget(monkeypatch)
        again = references.gibbs_reference(X1, Y1, 0.1, 0.05)
        _same_gibbs(first, again)
    assert counted["gibbs"] == 3
    _forget(monkeypatch)
    references.gibbs_reference(X1, Y1, 0.1, 0.05)         # the replacement loads
    assert counted["gibbs"] == 3


def test_an_entry_of_other_inputs_under_the_name_is_ignored(counted, monkeypatch, tmp_path):
    """The header repeats the inputs: a file under the wrong name is not believed."""
    references.gibbs_reference(X1, Y1, 0.1, 0.05)
    references.gibbs_reference(X1, Y1, 0.1, 0.02)
    a, b = _entries(tmp_path)
    a.write_bytes(b.read_bytes())
    _forget(monkeypatch)
    references.gibbs_reference(X1, Y1, 0.1, 0.05)
    references.gibbs_reference(X1, Y1, 0.1, 0.02)
    assert counted["gibbs"] == 3


def test_the_cache_can_be_turned_off(counted, monkeypatch, tmp_path):
    monkeypatch.setenv(refcache.ENV_OFF, "1")
    references.gibbs_reference(X1, Y1, 0.1, 0.05)
    _forget(monkeypatch)
    references.gibbs_reference(X1, Y1, 0.1, 0.05)
    assert counted["gibbs"] == 2 and _entries(tmp_path) == []
    monkeypatch.delenv(refcache.ENV_OFF)
    refcache.disable()
    try:
        _forget(monkeypatch)
        references.gibbs_reference(X1, Y1, 0.1, 0.05)
        assert counted["gibbs"] == 3 and _entries(tmp_path) == []
    finally:
        refcache.disable(False)


def test_an_unwritable_cache_is_skipped(counted, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(refcache.ENV_DIR, str(blocker / "cache"))      # under a file
    sol = references.gibbs_reference(X1, Y1, 0.1, 0.05)
    assert counted["gibbs"] == 1 and np.all(np.isfinite(sol.f_train))


def test_convex_reference_is_cached_with_its_rays(counted, monkeypatch, tmp_path):
    X = np.array([[-1.0, 0.2], [0.3, -0.8], [1.2, 0.5], [0.1, 1.1]])
    y = np.array([0.5, -0.2, 0.8, 0.1])
    first = references.convex_reference(X, y, 0.05)
    _forget(monkeypatch)
    again = references.convex_reference(X, y, 0.05)
    assert counted["convex"] == 1
    for name in ("X", "y", "f_train", "R", "directions", "weights", "G_rays"):
        assert getattr(first, name).tobytes() == getattr(again, name).tobytes(), name
    for name in ("lam", "max_abs_G", "primal", "dual", "duality_gap", "n_patterns",
                 "solver_status"):
        assert getattr(first, name) == getattr(again, name), name
    np.testing.assert_array_equal(again.predict(X), first.predict(X))
    ka, kb = again.kinks(), first.kinks()
    assert len(ka) == len(kb) > 0
    assert all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(ka, kb))
    _forget(monkeypatch)
    references.convex_reference(X, y, 0.06)
    assert counted["convex"] == 2


def test_a_ladder_is_one_entry(counted, monkeypatch, tmp_path):
    """prefetch_gibbs solves the ladder by continuation: the sequence is the cached unit."""
    run = SimpleNamespace(d=1, X=X1, y=Y1, lam=0.1, taus=[0.1, 0.03, 0.01])
    references.prefetch_gibbs(run)
    sols = [references.gibbs_reference(X1, Y1, 0.1, t) for t in (0.1, 0.03, 0.01)]
    assert counted["gibbs"] == 1 and len(_entries(tmp_path)) == 1
    _forget(monkeypatch)
    references.prefetch_gibbs(run)
    for t, want in zip((0.1, 0.03, 0.01), sols):
        _same_gibbs(references.gibbs_reference(X1, Y1, 0.1, t), want)
    assert counted["gibbs"] == 1


def test_qmc_solutions_and_errors_round_trip(tmp_path, monkeypatch):
    from solvers.gibbsqmc import GibbsAccuracyError, GibbsBarrierError, QMCGibbsSolution
    monkeypatch.setenv(refcache.ENV_DIR, str(tmp_path / "cache"))
    X = np.arange(9.0).reshape(3, 3) / 7
    y = np.array([0.1, -0.3, 0.2])
    sol = QMCGibbsSolution(tau=0.01, lam=0.05, X=X, y=y, R=np.array([1e-3, -2e-3, 5e-4]),
                           f_train=np.array([0.09, -0.28, 0.21]), residual=1e-11,
                           max_abs_G=0.97, quad_error=2e-4, n_nodes=8 * 4096, iterations=7,
                           log_I=-3.25, f_stderr=np.array([1e-4, 2e-4, 1.5e-4]),
                           randomizations=8, points=4096, n_peaks=3)
    acc = GibbsAccuracyError(0.001, 3e-3, 1e-3, 0.01, 2 ** 20)
    bar = GibbsBarrierError(0.0005, 1e-9, 3, coldest=None)
    digest, inputs = refcache.key("gibbs_qmc", {"X": X, "y": y},
                                  {"lam": 0.05, "taus": [0.01, 0.001, 0.0005],
                                   "options": {"rtol": 1e-3}, "activation": "relu"})
    assert refcache.store(digest, inputs, [sol, acc, bar])
    back = refcache.load(digest, inputs)
    assert type(back[0]) is QMCGibbsSolution
    for name in ("R", "f_train", "f_stderr", "X", "y"):
        np.testing.assert_array_equal(getattr(back[0], name), getattr(sol, name))
    for name in ("tau", "log_I", "randomizations", "points", "n_peaks", "quad_error"):
        assert getattr(back[0], name) == getattr(sol, name)
    assert type(back[1]) is GibbsAccuracyError and str(back[1]) == str(acc)
    assert (back[1].tau, back[1].error, back[1].coldest) == (0.001, 3e-3, 0.01)
    assert type(back[2]) is GibbsBarrierError and str(back[2]) == str(bar)
    assert back[2].kinks == 3 and back[2].coldest is None


def test_exact_w2_of_two_snapshots_is_cached(tmp_path, monkeypatch):
    from analysis import transport
    monkeypatch.setenv(refcache.ENV_DIR, str(tmp_path / "cache"))
    calls = []

    def w2_exact(P, Q):
        calls.append(1)
        return real(P, Q)
    real = transport.w2_exact
    monkeypatch.setattr(transport, "w2_exact", w2_exact)
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((50, 4)), rng.standard_normal((50, 4))
    first = transport.w2_snapshots(A, B)
    again = transport.w2_snapshots(A, B)
    assert len(calls) == 1 and again == first and first["method"] == "exact"
    assert first["w2"] == real(A, B)
    B2 = B.copy()
    B2[7, 1] += 1e-12
    transport.w2_snapshots(A, B2)
    transport.w2_snapshots(B, A)               # the order of the clouds is an input too
    assert len(calls) == 3
