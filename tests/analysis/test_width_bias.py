"""The width bias of the N-particle law from its particles (analysis.width_bias,
docs/theory.md §2.3).

Oracle: an N-particle law whose particles take three values, ``π_N ∝ multinomial ×
exp(−N|f_N − y|²/(2nτ))`` (the Gibbs law of the particle system with a three-atom law in place
of the Gaussian weight decay; the derivation holds for any), whose mean predictor is summed
exactly over the counts, with no use of the formula; its Richardson limit in ``1/N`` must be the
estimate from particles of the mean-field fixed point.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import root
from scipy.special import gammaln, logsumexp

from analysis.width_bias import width_bias_coefficient

X = np.array([[-0.5], [1.0]])
Y = np.array([0.4, -0.3])
TAU = 1.0 / 3.0                                    # n τ = 2/3
#: Three neurons (a, w, b) and their base probabilities.
ATOMS = np.array([[1.0, 1.0, 0.2], [-0.8, -1.0, 0.5], [0.6, 0.5, 1.0]])
P = np.array([0.5, 0.3, 0.2])


def _features(theta):
    return theta[:, :1] * np.maximum(theta[:, 1:2] * X[:, 0] + theta[:, 2:3], 0.0)


def _fixed_point():
    """Tilted weights of the atoms at the mean-field fixed point: ``ρ*(k) ∝ p_k exp(−s·φ_k)``
    with ``s = (f − y)/(nτ)`` and ``f = Σ_k ρ*(k) φ_k``."""
    phi = _features(ATOMS)
    n = len(Y)

    def weights(s):
        lw = np.log(P) - phi @ s
        return np.exp(lw - logsumexp(lw))
    s = root(lambda s: s - (weights(s) @ phi - Y) / (n * TAU), np.zeros(n), tol=1e-15).x
    w = weights(s)
    return w, w @ phi


def _exact_mean(N):
    """``E[f_N]`` under the N-particle law, summed over all counts ``(c_1, c_2, c_3)``."""
    phi = _features(ATOMS)
    c1, c2 = np.meshgrid(np.arange(N + 1), np.arange(N + 1), indexing="ij")
    keep = c1 + c2 <= N
    counts = np.stack([c1[keep], c2[keep], N - c1[keep] - c2[keep]], axis=1).astype(float)
    f = counts @ phi / N
    lw = (gammaln(N + 1) - gammaln(counts + 1).sum(axis=1) + counts @ np.log(P)
          - N * np.sum((f - Y) ** 2, axis=1) / (2 * len(Y) * TAU))
    return np.exp(lw - logsumexp(lw)) @ f


def test_the_estimate_is_the_exact_laws_coefficient_of_1_over_n():
    w, f_star = _fixed_point()
    # particles of the fixed point: each atom repeated in proportion to its tilted weight
    reps = np.rint(w * 2_000_000).astype(int)
    particles = np.repeat(ATOMS, reps, axis=0)
    B = width_bias_coefficient(particles, X, TAU)
    nb = [N * (_exact_mean(N) - f_star) for N in (400, 800)]
    limit = 2 * nb[1] - nb[0]                       # Richardson: N(f̄_N − f*) = B + O(1/N)
    assert np.max(np.abs(nb[1] - limit)) > 1e-6     # the remainder is there, and removed
    np.testing.assert_allclose(B, limit, rtol=1e-3, atol=1e-6)
    assert np.max(np.abs(B)) > 1e-3                 # not a vacuous zero


def test_symmetric_features_have_no_width_bias_at_this_order():
    """A law symmetric under a → −a with y = 0 has no third cumulant at f = 0: B = 0."""
    rng = np.random.default_rng(0)
    half = rng.normal(size=(500, 3))
    particles = np.concatenate([half, half * [-1.0, 1.0, 1.0]])
    np.testing.assert_allclose(width_bias_coefficient(particles, X, 0.1), 0.0, atol=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="tau > 0"):
        width_bias_coefficient(ATOMS, X, 0.0)
    with pytest.raises(ValueError, match="particles of shape"):
        width_bias_coefficient(ATOMS[:, :2], X, TAU)
