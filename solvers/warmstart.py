"""Warm start of the particles from the ``τ → 0`` limit (THEORY §4).

The convex solution is a finite signed measure ``μ = Σ_k c_k δ_{v_k}`` on the sphere of
directions, with predictor ``Σ_k c_k (v_k·x̃)_+``. A balanced neuron on ray ``k``,
``u = r v_k``, ``a = sign(c_k) r``, contributes ``sign(c_k) r² (v_k·x̃)_+`` to
``f = (1/N) Σ_i a_i (u_i·x̃)_+`` and costs ``(λ/2)(a² + |u|²) = λ r²``, the least for that
contribution (THEORY §4, homogeneity). :func:`convex_particles` puts ``N_k ≈ N |c_k| / ‖c‖₁``
particles on ray ``k`` (at least one each), all with ``r_k² = N |c_k| / N_k``, so the placed
particles reproduce the convex predictor exactly (to round-off) at the least weight decay;
then it adds the thermal spread ``sqrt(τ/λ) ξ`` per coordinate, the Ornstein–Uhlenbeck
variance of the weight decay at temperature ``τ`` (THEORY §2).

Starting there, the rays of the stationary measure at small ``τ`` carry their mass from the
first step, instead of having to grow out of an isotropic cloud and shed the mass on competing
directions at the slow rate ``λ(1 − |G(v)|)`` (THEORY §2, "Slow modes").

A convex solution without a ray (``f = 0`` optimal: labels small against ``λ``) has nothing to
place; :func:`free_particles` is then the start, the spread alone: the data-free Gibbs law
``N(0, (τ/λ) I)`` of one particle under the weight decay ``(λ/2)|θ|²`` at temperature ``τ``
(THEORY §2.2), drawn from the same stream as the spread.
"""

from __future__ import annotations

import math

import numpy as np


def ray_counts(weights, n_particles: int) -> np.ndarray:
    """Particles per ray: ``N_k ≥ 1`` with ``Σ N_k = N``, ``N_k ≈ N |c_k| / ‖c‖₁`` (largest
    remainders).

    Raises
    ------
    ValueError
        ``N`` smaller than the number of rays, or no ray.
    """
    w = np.abs(np.asarray(weights, dtype=float))
    K, N = len(w), int(n_particles)
    if K == 0:
        raise ValueError("the convex solution has no ray (f = 0): nothing to warm-start from")
    if N < K:
        raise ValueError(f"need at least one particle per ray: N={N} < {K} rays")
    share = (N - K) * w / w.sum()
    counts = 1 + np.floor(share).astype(np.int64)
    rest = N - int(counts.sum())
    order = np.argsort(-(share - np.floor(share)), kind="stable")
    counts[order[:rest]] += 1
    return counts


def convex_particles(directions, weights, n_particles: int, *, tau: float, lam: float,
                     seed: int) -> np.ndarray:
    """Particles on the rays of a convex solution with a thermal spread.

    Parameters
    ----------
    directions : ndarray of shape (K, d+1)
        Unit ray directions ``v_k = (w, b)/|(w, b)|`` (``solvers.convex.ConvexSolution``).
    weights : ndarray of shape (K,)
        Signed ray weights ``c_k``.
    n_particles : int
        ``N >= K``.
    tau : float
        Temperature of the first stage, ``>= 0``; each coordinate gets an independent
        ``N(0, τ/λ)`` spread.
    lam : float
        Weight decay ``λ > 0``.
    seed : int
        The spread is drawn from ``numpy.random.default_rng([seed, 0xC0DE])``, independent of
        the kernels' noise stream.

    Returns
    -------
    ndarray of shape (N, d+2)
        Rows ``(a, w_1..w_d, b)``; without spread (``τ = 0``) their predictor is
        ``Σ_k c_k (v_k·x̃)_+`` exactly (to round-off).

    Raises
    ------
    ValueError
        No ray, fewer particles than rays, ``λ <= 0`` or ``τ < 0``.
    """
    V = np.asarray(directions, dtype=float)
    c = np.asarray(weights, dtype=float)
    if V.ndim != 2 or c.shape != (V.shape[0],):
        raise ValueError(f"directions (K, d+1) and weights (K,) expected, got {V.shape}, "
                         f"{c.shape}")
    if not lam > 0 or not tau >= 0:
        raise ValueError(f"need lam > 0 and tau >= 0, got lam={lam}, tau={tau}")
    counts = ray_counts(c, n_particles)
    r = np.sqrt(int(n_particles) * np.abs(c) / counts)
    k = np.repeat(np.arange(len(c)), counts)
    theta = np.empty((int(n_particles), V.shape[1] + 1))
    theta[:, 0] = np.sign(c[k]) * r[k]
    theta[:, 1:] = r[k, None] * V[k]
    if tau > 0:
        rng = np.random.default_rng([int(seed), 0xC0DE])
        theta += math.sqrt(tau / lam) * rng.standard_normal(theta.shape)
    return theta


def free_particles(n_particles: int, width: int, *, tau: float, lam: float,
                   seed: int) -> np.ndarray:
    """Particles of the free law: i.i.d. ``N(0, (τ/λ) I)``, the Gibbs law of one particle with
    the weight decay ``(λ/2)|θ|²`` alone at temperature ``τ`` (the stationary law of the
    dynamics with the data term off, THEORY §2), drawn as :func:`convex_particles` draws its
    spread.

    The start of ``model.init = "convex"`` when the convex solution has no ray (``f = 0``
    optimal at ``λ``): its particles would be the spread alone.

    Parameters
    ----------
    n_particles : int
        ``N >= 1``.
    width : int
        Coordinates per particle, ``d + 2``.
    tau, lam : float
        Temperature of the first stage ``τ >= 0`` (``τ = 0``: every particle at the origin,
        the ``τ → 0`` solution ``f = 0``) and weight decay ``λ > 0``.
    seed : int
        As :func:`convex_particles`: ``numpy.random.default_rng([seed, 0xC0DE])``.

    Returns
    -------
    ndarray of shape (N, width)

    Raises
    ------
    ValueError
        ``λ <= 0``, ``τ < 0``, ``N < 1`` or ``width < 1``.
    """
    if not lam > 0 or not tau >= 0:
        raise ValueError(f"need lam > 0 and tau >= 0, got lam={lam}, tau={tau}")
    if int(n_particles) < 1 or int(width) < 1:
        raise ValueError(f"need n_particles >= 1 and width >= 1, got {n_particles}, {width}")
    rng = np.random.default_rng([int(seed), 0xC0DE])
    return math.sqrt(tau / lam) * rng.standard_normal((int(n_particles), int(width)))
