"""Synthetic particle snapshots with known rays (planted rays plus a thermal halo), for tests
and benchmarks of :func:`analysis.rays.find_rays`."""

from __future__ import annotations

import numpy as np


def planted_rays(directions, weights, n_particles: int, *, noise: float = 0.02,
                 halo_particles: float = 0.3, halo_mass: float = 0.02, seed: int = 0):
    """Particles ``(a, w, b)`` forming rays of known direction and weight, plus a halo.

    Ray ``k`` gets a share of the non-halo particles proportional to ``|weights[k]|``; each of
    its particles has direction ``directions[k]`` perturbed by an isotropic tangent Gaussian of
    standard deviation ``noise`` (radians), is balanced (``|a| = |u|``), has ``sign(a) =
    sign(weights[k])``, and the norms are log-normal scaled so that
    ``(1/N) Σ_{i∈k} a_i |u_i| = weights[k]`` exactly. The halo particles have uniform
    directions on ``S^d``, random signs and small norms, holding ``halo_mass`` of the total mass.

    Parameters
    ----------
    directions : array-like of shape (K, d+1)
        Ray directions (normalised inside).
    weights : array-like of shape (K,)
        Signed ray weights ``c_k`` (non-zero).
    n_particles : int
        Total number of particles ``N``.
    noise : float
        Angular noise of the ray particles (radians).
    halo_particles : float
        Fraction of the particles in the halo.
    halo_mass : float
        Fraction of the total mass ``Σ|a||u|`` in the halo.
    seed : int

    Returns
    -------
    theta : ndarray of shape (N, d+2)
    ray_of : ndarray of shape (N,) int
        Planted ray of each particle, −1 for the halo.
    """
    rng = np.random.default_rng(seed)
    Vk = np.asarray(directions, dtype=float)
    Vk = Vk / np.linalg.norm(Vk, axis=1, keepdims=True)
    c = np.asarray(weights, dtype=float)
    K, D = Vk.shape
    N = int(n_particles)
    n_halo = int(round(halo_particles * N))
    share = np.abs(c) / np.abs(c).sum()
    n_ray = np.floor(share * (N - n_halo)).astype(int)
    n_ray[: (N - n_halo) - n_ray.sum()] += 1
    rows, ray_of = [], []
    for k in range(K):
        m = n_ray[k]
        xi = rng.standard_normal((m, D)) * noise
        xi -= (xi @ Vk[k])[:, None] * Vk[k]                 # tangent noise
        v = Vk[k] + xi
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        s = rng.lognormal(0.0, 0.3, m)
        r2 = s / s.sum() * abs(c[k]) * N                    # Σ r² / N = |c_k|
        r = np.sqrt(r2)
        rows.append(np.c_[np.sign(c[k]) * r, r[:, None] * v])
        ray_of.append(np.full(m, k))
    ray_mass = np.abs(c).sum() * N
    if n_halo:
        v = rng.standard_normal((n_halo, D))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        s = rng.lognormal(0.0, 0.3, n_halo)
        r2 = s / s.sum() * ray_mass * halo_mass / (1.0 - halo_mass)
        r = np.sqrt(r2)
        sg = rng.choice([-1.0, 1.0], n_halo)
        rows.append(np.c_[sg * r, r[:, None] * v])
        ray_of.append(np.full(n_halo, -1))
    theta = np.vstack(rows)
    ray_of = np.concatenate(ray_of)
    perm = rng.permutation(N)
    return theta[perm], ray_of[perm]
