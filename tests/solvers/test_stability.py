"""Stability number of the Euler step on the data mode (solvers/stability.py).

Oracles: the Gauss–Newton kernel written out in NumPy from solvers.numpy_model, the largest
eigenvalue of the full particle Hessian by finite differences of the NumPy drift, and the
Euler iteration itself (a perturbation of a fixed point grows past eta*h = 2, decays below).
"""

import numpy as np
import pytest

from solvers import _activations, _curvature, stability
from solvers import numpy_model as model
from solvers.stepper import ACT_CODES

X4 = np.array([[-5.0], [-4.0], [4.0], [5.0]])
Y4 = np.array([4.0, 1.0, 1.0, 4.0])
LAM = 0.003


def numpy_kernel(theta, X, act, sharp, cap):
    sigma, dsigma = model.activation(act, sharp, cap)
    a = theta[:, 0]
    Xl = np.hstack([X, np.ones((len(X), 1))])
    Z = model.preactivations(theta, X)
    S, D = sigma(Z), dsigma(Z) * a[:, None]
    return (S.T @ S + (D.T @ D) * (Xl @ Xl.T)) / len(theta)


@pytest.mark.parametrize("act,sharp,cap", [("relu", 10.0, 3.0), ("softplus", 4.0, 3.0),
                                           ("capped", 5.0, 0.8)])
def test_kernel_matches_numpy(act, sharp, cap):
    rng = np.random.default_rng(1)
    theta = rng.standard_normal((333, 3))
    X = rng.standard_normal((6, 1))
    S, P, Q = np.empty((6, 333)), np.empty((6, 333)), np.empty((6, 333))
    p = _activations.activation_params(ACT_CODES[act], sharp, cap)
    _curvature.gauss_newton_factors(np.ascontiguousarray(theta.T), X, ACT_CODES[act], p, S, P, Q)
    K = (S @ S.T + (Q @ Q.T) * (X @ X.T + 1.0)) / len(theta)
    np.testing.assert_allclose(K, numpy_kernel(theta, X, act, sharp, cap), rtol=1e-12,
                               atol=1e-12)


@pytest.fixture(scope="module")
def relaxed():
    """A small particle system at a tau = 0 fixed point of the D4 data (gradient descent)."""
    from scipy.optimize import minimize
    rng = np.random.default_rng(0)
    N = 30

    def objective(x):
        th = x.reshape(N, 3)
        return (0.5 * model.risk(th, X4, Y4) + model.regulariser(th, LAM),
                model.drift(th, X4, Y4, LAM).ravel() / N)

    res = minimize(objective, rng.standard_normal(N * 3), jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-12, "ftol": 0, "maxiter": 100000})
    theta = res.x.reshape(N, 3)
    assert np.max(np.abs(model.drift(theta, X4, Y4, LAM))) < 1e-6
    return theta


def full_hessian(theta):
    N, p = theta.shape
    x0 = theta.ravel()
    H = np.empty((x0.size, x0.size))
    eps = 1e-6
    for k in range(x0.size):
        xp, xm = x0.copy(), x0.copy()
        xp[k] += eps
        xm[k] -= eps
        H[:, k] = (model.drift(xp.reshape(N, p), X4, Y4, LAM)
                   - model.drift(xm.reshape(N, p), X4, Y4, LAM)).ravel() / (2 * eps)
    return 0.5 * (H + H.T)


def test_curvature_is_the_top_hessian_eigenvalue(relaxed):
    h_true = np.linalg.eigvalsh(full_hessian(relaxed))[-1]
    dm = stability.data_mode(relaxed, X4, model.residuals(relaxed, X4, Y4), LAM)
    assert dm.curvature == pytest.approx(h_true, rel=1e-7)
    # the correction is of order lambda and lies in [0, lambda] at a stationary point
    assert 0.0 <= dm.correction <= LAM
    assert dm.curvature - dm.lambda_max_K / 4 == pytest.approx(dm.correction)


def test_thermal_particles_first_order_accurate(relaxed):
    """Away from the fixed point (particles spread as at a finite temperature) the Rayleigh
    quotient stays a close lower bound of the top eigenvalue."""
    rng = np.random.default_rng(3)
    theta = relaxed + 0.1 * rng.standard_normal(relaxed.shape)
    h_true = np.linalg.eigvalsh(full_hessian(theta))[-1]
    dm = stability.data_mode(theta, X4, model.residuals(theta, X4, Y4), LAM)
    assert dm.curvature <= h_true * (1 + 1e-9)
    assert dm.curvature == pytest.approx(h_true, rel=1e-3)


@pytest.mark.parametrize("factor,grows", [(0.97, False), (1.03, True)])
def test_euler_unstable_exactly_past_the_limit(relaxed, factor, grows):
    dm = stability.data_mode(relaxed, X4, model.residuals(relaxed, X4, Y4), LAM)
    eta = factor * dm.largest_stable_eta()
    rng = np.random.default_rng(5)
    theta = relaxed + 1e-7 * rng.standard_normal(relaxed.shape)
    f0 = model.predict(relaxed, X4)
    dev = [np.max(np.abs(model.predict(theta, X4) - f0))]
    for _ in range(400):
        theta = model.euler_maruyama_step(theta, X4, Y4, LAM, eta, 0.0, 0.0 * theta)
        dev.append(np.max(np.abs(model.predict(theta, X4) - f0)))
    assert (dev[-1] > 100 * dev[0]) == grows


def test_convex_and_gibbs_references_agree_with_particles(relaxed):
    from solvers.convex import convex
    from solvers.gibbs import gibbs
    dm = stability.data_mode(relaxed, X4, model.residuals(relaxed, X4, Y4), LAM)
    cv = stability.convex_data_mode(convex(X4, Y4, LAM), X4, LAM)
    assert cv.curvature == pytest.approx(dm.curvature, rel=2e-3)
    g = stability.gibbs_data_mode(gibbs(X4, Y4, LAM, 1e-5), X4, LAM, 1e-5)
    assert g.curvature == pytest.approx(cv.curvature, rel=5e-3)


@pytest.mark.parametrize("act,sharp,cap", [("relu", 10.0, 3.0), ("softplus", 4.0, 3.0),
                                           ("capped", 5.0, 0.8)])
def test_small_system_loops_match_the_blas_path(relaxed, monkeypatch, act, sharp, cap):
    """A small system's K formed by loops in one compiled call equals the factors' BLAS path
    to round-off."""
    rng = np.random.default_rng(7)
    theta = relaxed + 0.1 * rng.standard_normal(relaxed.shape)
    R = model.residuals(theta, X4, Y4)
    assert len(theta) * len(X4) ** 2 <= stability.SMALL_MAX
    small = stability.data_mode(theta, X4, R, LAM, act, sharp, cap)
    monkeypatch.setattr(stability, "SMALL_MAX", -1)
    blas = stability.data_mode(theta, X4, R, LAM, act, sharp, cap)
    assert small.lambda_max_K == pytest.approx(blas.lambda_max_K, rel=1e-12)
    assert small.curvature == pytest.approx(blas.curvature, rel=1e-12)
    assert small.correction == pytest.approx(blas.correction, rel=1e-10, abs=1e-15)
