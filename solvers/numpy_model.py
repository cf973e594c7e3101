"""The mean-field two-layer ReLU model in plain NumPy (THEORY §1–2).

These are the reference implementations: readable, vectorised, and used by tests as the oracle
for the numba kernels in ``solvers._kernels``. Particles are rows ``(a, w_1..w_d, b)`` of an
array ``theta`` of shape ``(N, d+2)``.
"""

from __future__ import annotations

import numpy as np

from solvers.geometry import lifted


def relu(z):
    """``max(z, 0)``."""
    return np.maximum(z, 0.0)


def relu_grad(z):
    """``1[z > 0]`` (the convention ``relu'(0) = 0`` of THEORY §3)."""
    return (z > 0.0).astype(np.float64)


def softplus(z, sharpness: float = 10.0):
    """``log(1 + exp(t z)) / t`` with ``t = sharpness`` (THEORY §3), computed stably."""
    return np.logaddexp(0.0, sharpness * z) / sharpness


def softplus_grad(z, sharpness: float = 10.0):
    """Derivative of :func:`softplus`: the logistic function of ``t z``."""
    return 0.5 * (1.0 + np.tanh(0.5 * sharpness * z))


def cap_junction(sharpness: float = 10.0, cap: float = 3.0):
    """Junction of :func:`capped`: ``(z_m, s_m)`` with ``softplus_t(z_m) = m²`` and
    ``s_m = softplus_t'(z_m) = 1 − exp(−t m²)``."""
    t, m2 = float(sharpness), float(cap) ** 2
    return m2 + np.log(-np.expm1(-t * m2)) / t, -np.expm1(-t * m2)


def capped(z, sharpness: float = 10.0, cap: float = 3.0):
    """Smoothed bounded activation ``σ_{m,t}`` (THEORY §3, after [SKM22] §3.2).

    ``σ(z) = softplus_t(z)`` for ``z ≤ z_m`` (where ``softplus_t(z_m) = m²``), continued by the
    concave exponential cap ``φ(z) = m² (2 − exp(−s_m (z − z_m) / m²))`` with ``s_m`` the
    softplus slope at ``z_m``. So ``σ`` is C¹ (value and slope match at ``z_m``), increasing,
    ``0 < σ < 2 m²`` (saturating at ``2m²``), and ``|φ''| ≤ s_m² / m² < 1/m²``; the second
    derivative jumps at ``z_m`` from ``t s_m (1 − s_m) ≈ t e^{−t m²}`` to ``−s_m²/m²``. As
    ``t, m → ∞`` it tends to relu. The parameters ``a`` and ``w`` are not truncated.
    """
    z = np.asarray(z, dtype=np.float64)
    zm, sm = cap_junction(sharpness, cap)
    m2 = float(cap) ** 2
    over = np.maximum(z - zm, 0.0)
    return np.where(z <= zm, softplus(z, sharpness), m2 * (2.0 - np.exp(-sm * over / m2)))


def capped_grad(z, sharpness: float = 10.0, cap: float = 3.0):
    """Derivative of :func:`capped`."""
    z = np.asarray(z, dtype=np.float64)
    zm, sm = cap_junction(sharpness, cap)
    m2 = float(cap) ** 2
    over = np.maximum(z - zm, 0.0)
    return np.where(z <= zm, softplus_grad(z, sharpness), sm * np.exp(-sm * over / m2))


def activation(name: str, sharpness: float = 10.0, cap: float = 3.0):
    """Return ``(sigma, sigma_prime)`` for an activation name of the config
    (``"relu"``, ``"softplus"`` or ``"capped"``)."""
    if name == "relu":
        return relu, relu_grad
    if name == "softplus":
        return (lambda z: softplus(z, sharpness)), (lambda z: softplus_grad(z, sharpness))
    if name == "capped":
        return (lambda z: capped(z, sharpness, cap)), (lambda z: capped_grad(z, sharpness, cap))
    raise ValueError(f"unknown activation {name!r}")


def split(theta):
    """Split ``theta`` (N, d+2) into ``a`` (N,), ``w`` (N, d), ``b`` (N,)."""
    theta = np.asarray(theta)
    return theta[:, 0], theta[:, 1:-1], theta[:, -1]


def preactivations(theta, X):
    """``Z[i, j] = w_i·x_j + b_i``: ndarray of shape (N, n)."""
    _, w, b = split(theta)
    return w @ np.asarray(X).T + b[:, None]


def predict(theta, X, sigma=relu):
    """Particle predictor ``f_N(x) = (1/N) Σ_i a_i σ(w_i·x + b_i)`` (THEORY §1).

    Parameters
    ----------
    theta : ndarray of shape (N, d+2)
    X : ndarray of shape (m, d)

    Returns
    -------
    ndarray of shape (m,)
    """
    a = np.asarray(theta)[:, 0]
    return sigma(preactivations(theta, X)).T @ a / theta.shape[0]


def residuals(theta, X, y, sigma=relu):
    """Scaled residuals ``R_j = (f_N(x_j) − y_j) / n`` (THEORY §1), shape (n,)."""
    return (predict(theta, X, sigma) - y) / len(y)


def risk(theta, X, y, sigma=relu):
    """Risk ``R = (1/n) Σ_j (f(x_j) − y_j)²`` (SKM normalisation, no 1/2)."""
    r = predict(theta, X, sigma) - y
    return float(np.mean(r * r))


def regulariser(theta, lam):
    """Weight-decay term of the free energy, ``(lam/2) (1/N) Σ_i |θ_i|²``."""
    return 0.5 * lam * float(np.mean(np.sum(np.asarray(theta) ** 2, axis=1)))


def drift(theta, X, y, lam, sigma=relu, sigma_prime=relu_grad, batch=None):
    """Per-particle gradient of the potential, ``∇_θ Ψ(θ_i; ρ_N)`` (THEORY §2), shape (N, d+2).

    ``∇_a Ψ = Σ_j R_j σ(u·x̃_j) + lam a`` and ``∇_u Ψ = a Σ_j R_j σ'(u·x̃_j) x̃_j + lam u``.
    Equals ``N`` times the gradient of ``½ R + (lam / 2N) Σ_i |θ_i|²`` with respect to ``θ_i``.

    With ``batch`` (integer array of ``B`` indices), the data term is the unbiased minibatch
    estimate ``(n/B) Σ_{j∈batch}``, i.e. ``R_j = (f_N(x_j) − y_j) / B`` summed over the batch;
    ``f_N`` is still the average over all particles.
    """
    theta = np.asarray(theta)
    X = np.asarray(X)
    y = np.asarray(y)
    if batch is not None:
        X, y = X[batch], y[batch]
    a = theta[:, 0]
    Z = preactivations(theta, X)
    R = (sigma(Z).T @ a / theta.shape[0] - y) / len(y)
    Xl = lifted(X)
    g = np.empty_like(theta)
    g[:, 0] = sigma(Z) @ R
    g[:, 1:] = a[:, None] * ((sigma_prime(Z) * R[None, :]) @ Xl)
    return g + lam * theta


def euler_maruyama_step(theta, X, y, lam, eta, tau, xi, sigma=relu, sigma_prime=relu_grad,
                        batch=None):
    """One Euler–Maruyama step ``θ − η ∇Ψ + sqrt(2ητ) ξ`` given the noise ``xi`` (N, d+2);
    ``batch`` as in :func:`drift` (noisy minibatch SGD)."""
    g = drift(theta, X, y, lam, sigma, sigma_prime, batch)
    return theta - eta * g + np.sqrt(2 * eta * tau) * xi


def leimkuhler_matthews_step(theta, X, y, lam, eta, tau, xi, xi_next, sigma=relu,
                             sigma_prime=relu_grad, batch=None):
    """One Leimkuhler–Matthews step ``θ − η ∇Ψ + sqrt(2ητ) (ξ_k + ξ_{k+1})/2`` given the
    noise ``xi`` of this step and ``xi_next`` of the next one, both (N, d+2) (Leimkuhler &
    Matthews, Appl. Math. Res. Express 2013; THEORY §2)."""
    g = drift(theta, X, y, lam, sigma, sigma_prime, batch)
    return theta - eta * g + np.sqrt(2 * eta * tau) * 0.5 * (xi + xi_next)


def ou_stationary_variance(lam, eta, tau, integrator="em"):
    """Per-coordinate stationary variance of the chain with the data term off (THEORY §2):
    the ``ou_variance`` of the integrator (:data:`solvers.integrators.INTEGRATORS`).

    Euler–Maruyama, ``θ ← (1 − ηλ)θ + sqrt(2ητ) ξ_k``: ``τ / (λ (1 − ηλ/2))``.
    Leimkuhler–Matthews, ``θ ← (1 − ηλ)θ + sqrt(2ητ)(ξ_k + ξ_{k+1})/2``: ``τ/λ`` exactly for
    every stable ``0 < ηλ < 2``.

    Raises
    ------
    ValueError
        An unknown integrator.
    """
    from solvers.integrators import integrator_named
    return integrator_named(integrator).ou_variance(lam, eta, tau)
