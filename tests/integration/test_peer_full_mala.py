"""The full-vector MALA peer of ``benchmarks/peer_full_mala.py`` samples the N-particle law, so
that its effective samples per second are those of a correct sampler:

- data term off, ``π_N`` Gaussian: ``E (1/N) Σ|θ_i|² = (d+2) τ/λ`` within 4 MCSE at the tuned
  step, where Euler–Maruyama at the same step (the peer without its accept/reject) is more
  than 8 off;
- one particle on three points: the time-averaged predictor within 3 MCSE of ``π_1`` by
  quadrature (Gaussian in ``a`` in closed form, a grid in ``(w, b)``);
- its gradient is that of its energy (central differences).
"""

import numpy as np
import pytest

from analysis.time_average import mean_and_mcse
from benchmarks.peer_full_mala import TARGET_ACCEPTANCE, FullMALA


def _chain(s, steps, every=1):
    F, reg = [], []
    for _ in range(steps // every):
        s.step(every)
        F.append(np.array(s.f))
        reg.append(s.regulariser())
    return np.asarray(F), np.asarray(reg)


def test_peer_gradient_is_that_of_its_energy():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((5, 2)), rng.standard_normal(5)
    th = rng.standard_normal((7, 4))
    s = FullMALA(X, y, th, lam=0.1, tau=0.01)
    _, g, _ = s.terms(th)
    eps = 1e-6
    num = np.empty_like(th)
    for idx in np.ndindex(th.shape):
        e = np.zeros_like(th)
        e[idx] = eps
        num[idx] = (s.terms(th + e)[0] - s.terms(th - e)[0]) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8)


def test_peer_samples_the_gaussian_law_where_euler_is_biased():
    lam, tau, d, N = 1.0, 0.01, 2, 200
    rng = np.random.default_rng(1)
    th = rng.standard_normal((N, d + 2)) * 0.3
    s = FullMALA(np.zeros((1, d)), np.zeros(1), th, lam, tau, h=0.01, seed=2,
                 data_term=False)
    s.tune(3000)                                    # burn-in and tuning
    h = s.h
    _, reg = _chain(s, 20000)
    acc = s.accepted / s.proposed
    assert abs(acc - TARGET_ACCEPTANCE) < 0.08, acc
    m, se, _ = mean_and_mcse(reg[:, None])
    want = (d + 2) * tau / lam
    assert abs(m[0] - want) < 4 * se[0], (m, want, se)
    euler = (d + 2) * tau / (lam * (1 - 0.5 * h * lam))       # the unadjusted chain's
    assert abs(euler - want) > 8 * se[0], (h, euler, want, se)


# one particle, three points in one dimension (as tests/solvers/test_mala.py)
X1 = np.array([[-1.0], [0.5], [1.5]])
Y1 = np.array([0.3, -0.2, 0.6])
LAM1, TAU1 = 0.5, 0.05


def _one_particle_reference(M=1201, width=12.0):
    """``E f(x_j)`` under ``π_1``: ``a`` given ``(w, b)`` is Gaussian, a grid in ``(w, b)``."""
    L = width * np.sqrt(TAU1 / LAM1)
    g = np.linspace(-L, L, M)
    W, B = np.meshgrid(g, g, indexing="ij")
    s = np.maximum(W[..., None] * X1[:, 0] + B[..., None], 0.0)
    S2, SY = (s * s).mean(-1), (s * Y1).mean(-1)
    lw = -0.5 * np.log(S2 + LAM1) + SY ** 2 / (2 * TAU1 * (S2 + LAM1)) \
        - LAM1 * (W * W + B * B) / (2 * TAU1)
    wt = np.exp(lw - lw.max())
    m = SY / (S2 + LAM1)
    return np.array([(wt * m * s[..., j]).sum() / wt.sum() for j in range(len(Y1))])


@pytest.mark.slow
def test_peer_samples_the_one_particle_law_by_quadrature():
    ref = _one_particle_reference()
    s = FullMALA(X1, Y1, np.array([[0.3, 0.5, 0.2]]), LAM1, TAU1, h=0.5, seed=3)
    s.tune(3000)
    F, _ = _chain(s, 150000)
    assert 0.4 < s.accepted / s.proposed < 0.75
    m, se, _ = mean_and_mcse(F)
    assert np.all(np.abs(m - ref) < 3 * se), (m, ref, se)
