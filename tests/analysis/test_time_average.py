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
