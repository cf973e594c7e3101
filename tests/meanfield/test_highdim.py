"""High-dimensional GD on few ReLU neurons vs the minimum-norm QP (THEORY §10, [LWTM26]).

Oracles: the literal projector formula of THEORY §10 (built with a pseudo-inverse), brute-force
enumeration of active sets for the QP, exact linear algebra for the GD bookkeeping, and the
``sqrt(n / d)`` scaling on a small grid.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from analysis.minnorm import closed_form_limit, frozen_limit, minnorm, minnorm_pattern
from analysis.slopes import loglog_fit
from meanfield.cli import main as cli_main
from meanfield.errors import DataError, DivergenceError, InputError
from meanfield.highdim.design import GaussianDesign
from meanfield.highdim.experiment import StudyParams, run_study, summarize
from meanfield.highdim.output import read_h5
from solvers.highdim_gd import default_signs, gd, initial_weights, step_size


def _data(n=10, d=500, seed=0, labels="sign", a=0.0):
    des = GaussianDesign(d, a)
    ds = des.sample(n, seed=seed, labels=labels)
    return ds.X, ds.y, des.trace


def _theory_formula(X, y, eta):
    """THEORY §10 literally: w = X₊⁺ y₊ + η (I − P₊) X₋ᵀ y₋ with P₊ = X₊⁺ X₊ (d × d)."""
    Xp, Xm = X[y > 0], X[y < 0]
    pinv = np.linalg.pinv(Xp)
    P = pinv @ Xp
    return pinv @ y[y > 0] + eta * (np.eye(X.shape[1]) - P) @ Xm.T @ y[y < 0]


# --------------------------------------------------------------------------- data


def test_spectrum_normalisations():
    iso = GaussianDesign(50)
    assert np.array_equal(iso.lam, np.ones(50)) and iso.trace == 50
    pw = GaussianDesign(50, a=1.5)
    assert pw.trace == pytest.approx(50, rel=1e-12)
    k = np.arange(1, 51)
    np.testing.assert_allclose(pw.lam / pw.lam[0], k ** -1.5, rtol=1e-12)
    top = GaussianDesign(50, a=1.5, normalize="top")
    assert top.lam[0] == 1 and top.trace == pytest.approx(np.sum(k ** -1.5), rel=1e-12)


def test_sample_covariance_labels_and_seeding():
    des = GaussianDesign(6, a=1.0)
    ds = des.sample(40000, seed=3)
    cov = ds.X.T @ ds.X / ds.n
    np.testing.assert_allclose(np.diag(cov), des.lam, rtol=0.03)
    assert np.max(np.abs(cov - np.diag(np.diag(cov)))) < 0.05
    assert set(np.unique(ds.y)) == {-1.0, 1.0}
    assert abs(np.mean(ds.y > 0) - 0.5) < 0.02
    u = des.sample(2000, seed=3, labels="uniform").y
    assert np.all((np.abs(u) >= 0.5) & (np.abs(u) <= 1.5)) and (u > 0).any() and (u < 0).any()
    a, b = des.sample(5, seed=(1, 2)), des.sample(5, seed=(1, 2))
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)
    assert not np.array_equal(a.X, des.sample(5, seed=(1, 3)).X)


@pytest.mark.parametrize("kw, field", [({"d": 0}, "d"), ({"d": 5, "a": -1.0}, "a"),
                                       ({"d": 5, "normalize": "max"}, "normalize")])
def test_design_rejects_bad_parameters(kw, field):
    with pytest.raises(DataError) as e:
        GaussianDesign(**kw)
    assert e.value.field == field


def test_sample_rejects_bad_parameters():
    with pytest.raises(DataError):
        GaussianDesign(5).sample(0)
    with pytest.raises(DataError):
        GaussianDesign(5).sample(3, labels="gauss")


# --------------------------------------------------------------------------- GD


@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.parametrize("labels", ["sign", "uniform"])
def test_gd_limit_matches_closed_form(m, labels):
    X, y, tr = _data(10, 500, seed=1, labels=labels)
    signs = default_signs(m)
    eta = step_size(0.5, tr)
    res = gd(X, y, eta=eta, signs=signs)
    target = signs[:, None] * y[None, :] > 0
    assert res.converged
    assert res.last_change == 1 and np.array_equal(res.pattern, target)   # frozen from step 1
    W_cf = closed_form_limit(X, y, eta, signs)
    assert np.linalg.norm(res.W - W_cf) <= 1e-10
    if m <= 2:   # the literal formula; m = 2: the second neuron is the formula for (X, -y)
        assert np.linalg.norm(W_cf[0] - _theory_formula(X, y, eta)) <= 1e-12
    if m == 2:
        assert np.linalg.norm(W_cf[1] - _theory_formula(X, -y, eta)) <= 1e-12
    f = res.predict()
    fit = np.any(target, axis=0)
    assert np.max(np.abs(f - y)[fit]) <= 1e-9
    if m == 1:
        assert np.all(f[y < 0] == 0)


def test_gd_first_step_and_bookkeeping():
    X, y, tr = _data(8, 60, seed=2)
    signs = default_signs(2)
    eta = step_size(0.5, tr)
    one = gd(X, y, eta=eta, signs=signs, max_steps=1)
    np.testing.assert_allclose(one.W, signs[:, None] * eta * (X.T @ y)[None, :], atol=1e-15)
    W0 = initial_weights("random", X, signs, eps=0.3, seed=4)
    res = gd(X, y, eta=eta, signs=signs, W0=W0, record=True, max_steps=500)
    np.testing.assert_allclose(res.W, res.W0 + res.alpha @ X, atol=1e-12)
    np.testing.assert_allclose(res.beta, res.W @ X.T, atol=1e-12)
    h = res.history
    assert h["beta"].shape == (res.n_steps + 1, 2, 8) == h["alpha"].shape
    pats = h["beta"] > 0
    changes = [0] + [t for t in range(1, len(pats)) if not np.array_equal(pats[t], pats[t - 1])]
    assert list(res.change_steps) == changes
    assert np.array_equal(res.change_patterns[-1], res.pattern)
    np.testing.assert_allclose(res.W_last_change, W0 + h["alpha"][res.last_change] @ X,
                               atol=1e-12)
    assert np.all(np.diff(h["loss"][1:]) <= 1e-12)   # GD with c < 1 decreases the loss


def test_frozen_limit_from_other_starts():
    """all_active start: the pattern freezes at the label signs and the GD limit is the
    frozen-pattern projection of the iterate at the last change."""
    X, y, tr = _data(10, 800, seed=5)
    signs = default_signs(2)
    eta = step_size(0.5, tr)
    W0 = initial_weights("all_active", X, signs, eps=1e-3)
    np.testing.assert_allclose(W0 @ X.T, 1e-3, atol=1e-15)
    res = gd(X, y, eta=eta, signs=signs, W0=W0)
    assert np.array_equal(res.pattern, signs[:, None] * y[None, :] > 0)
    W_f = frozen_limit(X, y, res.W_last_change, signs)
    assert np.linalg.norm(res.W - W_f) <= 1e-10


def test_initial_weights():
    X, y, tr = _data(12, 300, seed=6)
    W = initial_weights("disconnected", X, default_signs(3), eps=0.01, seed=1)
    act = (W @ X.T) > 0
    assert act.sum(axis=0).max() <= 1                       # disjoint activation sets
    groups = np.array([0, 1, -1] * 4)
    W = initial_weights("disconnected", X, default_signs(2), eps=0.01, groups=groups)
    assert np.array_equal((W @ X.T) > 0, groups[None, :] == np.arange(2)[:, None])
    R = initial_weights("random", X, default_signs(2), eps=0.5, seed=2)
    assert R.shape == (2, 300) and 0.4 < np.std(R) * np.sqrt(300) < 0.6
    assert not initial_weights("zero", X, (1.0,)).any()
    with pytest.raises(InputError):
        initial_weights("ones", X, (1.0,))
    with pytest.raises(InputError):
        initial_weights("random", X, (1.0,), eps=0.0)
    with pytest.raises(InputError):
        initial_weights("disconnected", X, (1.0,), groups=np.full(12, 3))


def test_gd_input_validation():
    X, y, tr = _data(5, 20)
    with pytest.raises(InputError):
        gd(X, y, eta=0.0)
    with pytest.raises(InputError):
        gd(X, y[:-1], eta=0.1)
    with pytest.raises(InputError):
        gd(X, y, eta=0.1, signs=(1, 0))
    with pytest.raises(InputError):
        gd(X, y, eta=0.1, W0=np.zeros((2, 20)))
    with pytest.raises(InputError):
        step_size(2.0, 10.0)
    with pytest.raises(InputError):
        default_signs(0)
    with pytest.raises(DivergenceError):
        gd(X, y, eta=100.0, max_steps=10_000)


# --------------------------------------------------------------------------- min-norm QP


def _brute_force(X, t, eq):
    """Exact minimiser: the smallest feasible min-norm point over all candidate active sets."""
    idx_I = np.flatnonzero(~eq)
    best = None
    for r in range(idx_I.size + 1):
        for A in itertools.combinations(idx_I, r):
            J = np.concatenate([np.flatnonzero(eq), np.array(A, dtype=int)])
            rhs = np.concatenate([t[eq], np.zeros(len(A))])
            w = X[J].T @ np.linalg.solve(X[J] @ X[J].T, rhs)
            if np.all(X[~eq] @ w <= 1e-10) and (best is None or w @ w < best @ best):
                best = w
    return best


@pytest.mark.parametrize("n, d, seed", [(8, 8, 0), (8, 11, 1), (9, 40, 2), (10, 200, 3)])
def test_qp_matches_brute_force_and_kkt(n, d, seed):
    X, y, _ = _data(n, d, seed=seed, labels="uniform", a=0.7)
    for s in (1.0, -1.0):
        q = minnorm_pattern(X, s * y, s * y > 0)
        w_bf = _brute_force(X, s * y, s * y > 0)
        assert np.linalg.norm(q.w - w_bf) <= 1e-8 * max(1.0, np.linalg.norm(w_bf))
        assert q.kkt_max <= 1e-8
        eq = s * y > 0
        assert np.max(np.abs(X[eq] @ q.w - s * y[eq])) <= 1e-8
        assert np.max(X[~eq] @ q.w) <= 1e-8
        assert np.all(q.mu >= -1e-8)
        np.testing.assert_allclose(q.w, X.T @ q.alpha, atol=1e-10)
        raw = minnorm_pattern(X, s * y, eq, polish=False)   # Clarabel's own primal-dual pair
        assert not raw.polished and raw.kkt_max <= 1e-8
        assert np.linalg.norm(raw.w - w_bf) <= 1e-8 * max(1.0, np.linalg.norm(w_bf))


def test_two_neuron_decoupled_solution_interpolates():
    X, y, _ = _data(12, 100, seed=7, labels="uniform")
    mn = minnorm(X, y, (1.0, -1.0))
    f = np.maximum(X @ mn.W[0], 0) - np.maximum(X @ mn.W[1], 0)
    assert np.max(np.abs(f - y)) <= 1e-8
    assert mn.interpolation_residual <= 1e-8 and mn.inactive_violation <= 1e-8
    assert mn.kkt_max <= 1e-8
    one = minnorm(X, y, (1.0,))
    np.testing.assert_allclose(one.W[0], mn.W[0], atol=1e-12)
    three = minnorm(X, y, (1.0, -1.0, 1.0))
    np.testing.assert_allclose(three.W[0], mn.W[0] / 2, atol=1e-12)
    np.testing.assert_allclose(three.W[2], three.W[0], atol=0)
    np.testing.assert_allclose(three.W[1], mn.W[1], atol=1e-12)


def test_qp_degenerate_label_sets():
    X, _, _ = _data(6, 30, seed=8)
    pos = np.ones(6)
    q = minnorm(X, pos).qp[1.0]                        # no inequalities: X⁺y
    np.testing.assert_allclose(q.w, np.linalg.pinv(X) @ pos, atol=1e-10)
    assert not minnorm(X, -pos).W.any()                # no equalities: w* = 0
    with pytest.raises(DataError):
        minnorm(X, np.r_[0.0, pos[1:]])
    with pytest.raises(DataError):
        minnorm(X[:, :4], pos)                          # d < n


# --------------------------------------------------------------------------- study


def test_loglog_fit_recovers_exact_power_law():
    ds = [100, 200, 400, 800] * 2
    ns = [10] * 4 + [20] * 4
    rng = np.random.default_rng(0)
    samples = [3.0 * d ** -0.5 * n ** 0.5 * (1 + 0.01 * rng.standard_normal(6))
               for d, n in zip(ds, ns)]
    fit = loglog_fit(samples, ds, ns)
    assert fit["d"]["slope"] == pytest.approx(-0.5, abs=0.01)
    assert fit["n"]["slope"] == pytest.approx(0.5, abs=0.01)
    lo, hi = fit["d"]["ci95"]
    assert lo < fit["d"]["slope"] < hi and hi - lo < 0.05
    only_d = loglog_fit(samples[:4], ds[:4], ns[:4])
    assert "n" not in only_d and "d" in only_d


@pytest.mark.parametrize("m, trials", [(1, 16), (2, 4)])
def test_gap_slope_in_d_is_minus_half(m, trials):
    p = StudyParams(neurons=m, ns=(10,), ds=(400, 800, 1600, 3200), trials=trials, seed=0)
    summary = summarize(p, run_study(p, progress=False))
    assert abs(summary["slopes"]["gap"]["d"]["slope"] + 0.5) <= 0.1
    for row in summary["cells"]:
        assert row["qp_kkt_max"] <= 1e-8 and row["converged_fraction"] == 1.0


@pytest.mark.parametrize("kw", [dict(ns=(30,), ds=(20,)), dict(c=2.0), dict(trials=0),
                                dict(init="ones"), dict(ds=(100, 100)), dict(eps=-1.0),
                                dict(labels="x"), dict(seed=-1)])
def test_study_params_validation(kw):
    with pytest.raises(InputError):
        StudyParams(**kw)


def test_cli_json_h5_and_figure(tmp_path, capsys):
    rc = cli_main(["highdim", "--neurons", "2", "--n", "6,8", "--d", "40,80", "--trials", "3",
                   "--json", "--quiet", "-o", str(tmp_path)])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["n"], r["d"]) for r in doc["cells"]] == [(6, 40), (6, 80), (8, 40), (8, 80)]
    row = doc["cells"][0]
    for key in ("gap", "rel_gap"):
        lo, hi = row[key]["ci95"]
        assert lo <= row[key]["mean"] <= hi
    assert len(row["frozen_fraction"]) == 2
    assert {"fit_residual_pos_max", "closed_form_residual_max", "qp_kkt_max"} <= set(row)
    assert {"d", "n"} <= set(doc["slopes"]["gap"])
    h5 = tmp_path / "highdim-m2-zero-c0.5-seed0.h5"
    assert doc["files"]["h5"] == str(h5)
    assert (tmp_path / "highdim-m2-zero-c0.5-seed0.png").stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == [h5.name, h5.with_suffix(".png").name]
    back = read_h5(h5)
    assert back["params"]["ns"] == [6, 8] and len(back["cells"]) == 4
    c = back["cells"][3]
    assert (c["n"], c["d"]) == (8, 80) and c["pattern"].shape == (3, 2, 8)
    assert np.mean(c["gap"]) == pytest.approx(doc["cells"][3]["gap"]["mean"], rel=1e-12)
    # the stored coefficients regenerate W_inf and W* from the seeded data
    ds = GaussianDesign(80).sample(8, seed=(0, 8, 80, 2))
    assert np.array_equal(c["y"][2], ds.y)
    gap = np.linalg.norm(c["alpha"][2] @ ds.X - c["alpha_star"][2] @ ds.X)
    assert gap == pytest.approx(c["gap"][2], rel=1e-9)


@pytest.mark.parametrize("argv", [["--d", "10"], ["--c", "3"], ["--trials", "x"],
                                  ["--init", "ones"], ["--d", "100,abc"], ["-o", "FILE/sub"],
                                  ["--neurons", "0"]])
def test_cli_bad_arguments_exit_2_with_one_line(argv, tmp_path, capsys):
    args = ["highdim", "--quiet", "--n", "20", "--d", "40"]
    if "-o" not in argv:
        args += ["-o", str(tmp_path)]
    else:                               # an output folder that cannot be created
        (tmp_path / "FILE").write_text("")
        argv = ["-o", str(tmp_path / "FILE" / "sub")]
    rc = cli_main(args + argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("meanfield: error:")


def test_cli_refuses_to_overwrite(tmp_path, capsys):
    args = ["highdim", "--quiet", "--n", "5", "--d", "20", "--trials", "2", "-o", str(tmp_path)]
    assert cli_main(args) == 0
    assert cli_main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli_main(args + ["--overwrite"]) == 0


def test_cli_one_trial_has_no_interval_but_works(tmp_path, capsys):
    """One trial per cell: the slope has no confidence interval; the figure and the data file
    are still written (a first-time user hit a crash here)."""
    from meanfield.cli import main
    assert main(["highdim", "--trials", "1", "--n", "5", "--d", "50,100", "-o", str(tmp_path),
                 "--quiet", "--json"]) == 0
    assert len(list(tmp_path.glob("*.png"))) == 1 and len(list(tmp_path.glob("*.h5"))) == 1


def test_disconnected_start_with_more_than_two_neurons_is_refused(tmp_path, capsys):
    # examples assigned to no neuron stay unfit: the gap to the global minimum-norm
    # interpolant would be meaningless, so the combination is refused with one line
    with pytest.raises(InputError, match="disconnected"):
        StudyParams(neurons=3, init="disconnected")
    StudyParams(neurons=2, init="disconnected")
    rc = cli_main(["highdim", "--quiet", "--neurons", "3", "--init", "disconnected", "--n", "5",
                   "--d", "20", "-o", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "disconnected" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_leaves_neither_file(tmp_path, capsys, monkeypatch):
    """The data file is built in memory and written in one plain write: a full disk is one
    line naming the file (HDF5 writing to a full disk itself crashed the process), and the
    figure written just before is taken back."""
    import errno
    from pathlib import Path

    real = Path.write_bytes

    def full(self, data):
        if self.name.endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)
    monkeypatch.setattr(Path, "write_bytes", full)
    rc = cli_main(["highdim", "--quiet", "--trials", "1", "--n", "5", "--d", "50,100", "-o",
                   str(tmp_path), "--name", "full"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "No space left on device" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
