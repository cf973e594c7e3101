"""Autocorrelation-aware Monte Carlo standard error (analysis/time_average.py).

Oracle: an AR(1) series x_t = φ x_{t−1} + e_t has integrated autocorrelation time
(1 + φ)/(1 − φ) exactly; the MCSE of its mean is sqrt(var · τ_int / M).
"""

import numpy as np
import pytest

from analysis.time_average import integrated_time, mean_and_mcse


def _ar1(phi, M, cols, seed):
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((M, cols))
    x = np.empty_like(e)
    x[0] = e[0] / np.sqrt(1 - phi ** 2)
    for t in range(1, M):
        x[t] = phi * x[t - 1] + e[t]
    return x


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_integrated_time_of_ar1(phi):
    x = _ar1(phi, 200_000, 3, seed=1)
    want = (1 + phi) / (1 - phi)
    m, se, tau = mean_and_mcse(x)
    np.testing.assert_allclose(tau, want, rtol=0.1)
    np.testing.assert_allclose(se, np.sqrt(want / (1 - phi ** 2) / len(x)), rtol=0.1)
    # and the naive standard error would be off by sqrt(τ_int) when correlated
    if phi > 0.8:
        assert np.all(se > 3 * x.std(axis=0) / np.sqrt(len(x)))


def test_constant_and_short_series():
    assert integrated_time(np.ones(100)) == 1.0
    assert integrated_time(np.arange(5.0)) == 1.0
    m, se, tau = mean_and_mcse(np.full((50, 2), 3.0))
    assert np.all(m == 3.0) and np.all(se == 0) and np.all(tau == 1)


def test_a_stage_not_reached_yet_says_where_the_run_file_ends():
    """An interrupted run analysed from its ``.part`` read "no observations in stage 1"
    although the stage had 2100 steps of observations, none of them in its last half: the
    message names the window, its steps and where the file ends."""
    from types import SimpleNamespace

    from analysis.time_average import time_average_observable
    from solvers.schedule import Schedule
    sch = Schedule(taus=(1e-2, 1e-3), steps_per_tau=1000, observe_every=10)
    steps = np.arange(10, 1201, 10)              # stage 0 whole, stage 1 to its step 200
    run = SimpleNamespace(schedule=sch, taus=sch.taus,
                          observables={"risk": {"step": steps, "value": 0.1 + 0 * steps}})
    assert time_average_observable(run, "risk", 0)[0] == pytest.approx(0.1)
    with pytest.raises(ValueError, match=r"^no observations in the last 50% of stage 1 "
                       r"\(tau=0.001, steps 1501-2000\): the run file ends at step 1200, "
                       r"before them"):
        time_average_observable(run, "risk", 1)
    full = SimpleNamespace(schedule=sch, taus=sch.taus,       # an empty window in a whole run
                           observables={"risk": {"step": np.array([10, 2000]),
                                                 "value": np.array([0.1, 0.1])}})
    with pytest.raises(ValueError, match=r"steps 501-1000\)$"):
        time_average_observable(full, "risk", 0)
    empty = SimpleNamespace(schedule=sch, taus=sch.taus, observables={
        "risk": {"step": np.array([], int), "value": np.array([])}})
    with pytest.raises(ValueError, match=r"last 25% of stage 0 .*: the run file has no "
                                         r"observations yet"):
        time_average_observable(empty, "risk", 0, window=0.25)
