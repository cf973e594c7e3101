"""R̂ and ESS of a stage (analysis/convergence.py) and their place in the verdict.

Oracles: the effective sample size of AR(1) chains, ``K M (1 − φ)/(1 + φ)``; chains started
apart (a shifted chain) that only a between-chain R̂ can see; ArviZ called by hand on a run
file read with h5py, which must equal the report's numbers.
"""

import h5py
import numpy as np
import pytest

from analysis import convergence as cv
from analysis import stationarity as st


def ar1(K, M, phi, n=1, seed=0):
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((K, M, n))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0] / np.sqrt(1 - phi ** 2)
    for t in range(1, M):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


def test_bulk_ess_of_ar1_chains():
    phi, K, M = 0.5, 4, 20000
    x = ar1(K, M, phi, n=2, seed=1)
    r, bulk, tail = cv.diagnostics(np.moveaxis(x, 2, 0))
    want = K * M * (1 - phi) / (1 + phi)
    np.testing.assert_allclose(bulk, want, rtol=0.1)
    assert np.all(tail > 0.5 * want) and np.all(r < 1.01)


def test_shifted_chain_is_flagged_by_rhat_only():
    x = ar1(4, 8000, 0.5, n=3, seed=2)
    x[3] += 0.6                              # one chain started elsewhere and stayed there
    steps = np.arange(1, 8001)
    v = st.verdict(steps, x)
    assert not v.stationary and v.rhat > cv.RHAT_MAX and v.n_chains == 4
    assert v.rhat_test == cv.BETWEEN_CHAINS
    assert any(r.startswith("R-hat") for r in v.reasons)
    # no chain alone sees it: each one is stationary
    assert all(st.verdict(steps, x[c]).stationary for c in range(4))
    assert st.verdict(steps, x[0]).rhat_test == cv.WITHIN_CHAIN


def test_short_chains_fail_on_ess():
    x = ar1(2, 400, 0.95, n=2, seed=3)       # about 5 effective samples per chain and half
    c = cv.assess({"a": x[:, :, 0], "b": x[:, :, 1]})
    assert c.ess_bulk < 2 * cv.ESS_PER_CHAIN_MIN
    assert any(r.startswith("too few effective samples") for r in c.reasons)


def test_constant_observable_is_left_out_and_bad_shapes_are_refused():
    x = ar1(4, 2000, 0.0, n=1, seed=4)[:, :, 0]
    c = cv.assess({"f": x, "const": np.ones_like(x)})
    assert c.reasons == [] and c.rhat_worst == "f" and c.ess_worst == "f"
    with pytest.raises(ValueError, match="same shape"):
        cv.assess({"f": x, "g": x[:, :10]})
    with pytest.raises(ValueError, match="at least 8"):
        cv.diagnostics(np.zeros((1, 2, 4)))


@pytest.mark.usefixtures("one_thread")
def test_report_rhat_and_ess_equal_arviz_on_the_run_file(tmp_path):
    from arviz_stats.base import array_stats

    from meanfield import config, runner
    from meanfield.store import open_run
    toml = tmp_path / "d4.toml"
    toml.write_text('[data]\nkind = "inline"\nX = [-5.0, -4.0, 4.0, 5.0]\n'
                    'y = [4.0, 1.0, 1.0, 4.0]\n[model]\nn_particles = 60\n'
                    '[dynamics]\nlam = 0.003\neta = 0.005\ntaus = [5e-2, 5e-3]\n'
                    'steps_per_tau = 4000\n[output]\nobserve_every = 7\n')
    path = runner.run(config.load(toml), tmp_path / "d4.h5", progress=False)
    verdicts = st.run_verdicts(open_run(path))
    with h5py.File(path, "r") as f:
        no = int(f.attrs["n_observations"])
        tau = f["observables/tau/value"][:no]
        R = f["observables/residuals/value"][:no]
        risk = f["observables/risk/value"][:no]
        reg = f["observables/regulariser/value"][:no]
    y = np.array([4.0, 1.0, 1.0, 4.0])
    for t, v in zip((5e-2, 5e-3), verdicts):
        sel = tau == t
        H = np.column_stack([R[sel] * 4 + y, risk[sel], reg[sel]])
        H = H[len(H) // 2:].T                          # (observable, draw), one chain
        h = H.shape[1] // 2
        halves = np.stack([H[:, :h], H[:, H.shape[1] - h:]], axis=1)
        rhat = array_stats.rhat(halves, method="rank")
        bulk = array_stats.ess(H[:, None, :], method="bulk")
        tail = array_stats.ess(H[:, None, :], method="tail", prob=(0.05, 0.95))
        names = [f"f(x_{j})" for j in range(4)] + ["risk", "regulariser"]
        assert v.rhat == pytest.approx(np.nanmax(rhat), rel=1e-12)
        assert v.rhat_worst == names[int(np.nanargmax(rhat))]
        assert v.ess_bulk == pytest.approx(np.nanmin(bulk), rel=1e-12)
        assert v.ess_tail == pytest.approx(np.nanmin(tail), rel=1e-12)
        assert v.n_chains == 1 and v.rhat_test == cv.WITHIN_CHAIN
    rep = st.annotate_report({"ladder": [{"stage": 0, "tau": 5e-2, "J": 1, "K": 1}]},
                             verdicts)
    row = rep["ladder"][0]
    assert row["rhat"] == verdicts[0].rhat and row["ess_bulk"] == verdicts[0].ess_bulk
    assert row["ess_tail"] == verdicts[0].ess_tail
    assert row["rhat_worst"] == verdicts[0].rhat_worst


def test_the_ess_reason_says_per_chain_and_all_chains_together():
    """With several chains the ESS a failed verdict names is given per chain and for all chains
    together, as is the threshold; with one chain there is only the one number."""
    x = ar1(2, 400, 0.95, n=2, seed=3)
    obs = {"a": x[:, :, 0], "b": x[:, :, 1]}
    _, bulk, tail = cv.diagnostics(np.stack([obs["a"], obs["b"]]))
    e = float(np.min(np.fmin(bulk, tail)))
    (why,) = [r for r in cv.assess(obs).reasons if r.startswith("too few effective samples")]
    assert f" ESS {e / 2:.4g} per chain ({e:.4g} for all 2 chains together) at " in why
    assert "at least 100 per chain (200 together) needed;" in why
    one = {k: v[:1] for k, v in obs.items()}
    _, bulk, tail = cv.diagnostics(np.stack([one["a"], one["b"]]))
    e = float(np.min(np.fmin(bulk, tail)))
    (why,) = [r for r in cv.assess(one).reasons if r.startswith("too few effective samples")]
    assert f" ESS {e:.4g} at " in why and "at least 100 needed;" in why
    assert "per chain" not in why and "together" not in why
