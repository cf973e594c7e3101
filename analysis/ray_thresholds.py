"""The thermal scales of :func:`analysis.rays.find_rays` (THEORY §5, docs/theory.md §6.5): the
free-particle baseline ``(d+1)τ/λ``, the labels' weight scale ``c_y``, the certificate-gap
threshold ``ε(τ)`` and the gap implied by a cluster's mean mass, the default smallest number of
particles of a ray, and the entry of a cluster refused as thermal mass."""

from __future__ import annotations

import numpy as np

from solvers.geometry import lifted


def min_particles_default(N: int) -> int:
    """Smallest number of particles of the rays that fix the linkage threshold of
    :func:`analysis.rays.find_rays` (and of every ray when the radial-law tests are off):
    ``max(3, ceil(sqrt(N)/2))`` (3 at ``N ≤ 36``, 5 at ``N = 100``, 12 at ``N = 500``, 159 at
    ``N = 10⁵``).

    Below it, the count of clusters depends on the linkage threshold through clumps of one
    or two heavy particles (halo, or fragments of a ray). The stationary law at low ``τ`` does
    not give every ray that many particles (docs/theory.md §6.1), so with the certificate-gap
    and radial tests a ray of fewer particles is counted at the threshold this fixes.
    """
    return max(3, int(np.ceil(0.5 * np.sqrt(max(int(N), 0)))))


def halo_baseline(d: int, tau: float, lam: float) -> float:
    """The free-particle second moment ``(d+1) τ / λ`` (THEORY §5: ``E[r² | v]`` at ``G = 0``),
    the scale of the mass ``|a||u|`` of a thermal-halo particle."""
    return (d + 1) * float(tau) / float(lam)


#: Default constant κ of the certificate-gap threshold ``ε(τ) = κ (d+1)τ / (λ c_y)``
#: (docs/theory.md §6.5).
THERMAL_GAP = 1.0


def label_weight_scale(X, y) -> float | None:
    """The weight scale of the labels ``c_y = rms_j(y_j) / rms_j(|x̃_j|)``: the weight of one
    neuron whose output on the data has the labels' RMS (docs/theory.md §6.5). ``None`` when
    the labels are all 0.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    y : ndarray of shape (n,)
    """
    y = np.asarray(y, dtype=float).ravel()
    ry = float(np.sqrt(np.mean(y ** 2))) if y.size else 0.0
    if not ry > 0:
        return None
    rx = float(np.sqrt(np.mean(np.sum(lifted(X) ** 2, axis=1))))
    return ry / rx


def thermal_gap_threshold(d: int, tau: float, lam: float, weight_scale: float,
                          kappa: float = THERMAL_GAP) -> float:
    """The largest certificate gap ``1 − |G|`` of a ray at temperature ``τ``:
    ``ε(τ) = κ (d+1)τ / (λ c_y)`` (docs/theory.md §6.5). By the radial law a cluster whose
    particles hold mean mass ``m`` has ``1 − G² = (d+1)τ/(λ m)``, so the test passes a ray
    whose mean particle mass is at least about ``c_y / (2κ)`` at every ``τ``, and refuses, once
    ``τ`` is small enough, a concentration whose gap stays bounded away from 0 (thermal mass,
    weight ``∝ τ``). Linear in ``τ``; ``inf`` when ``κ`` or ``c_y`` is not positive."""
    if not (kappa > 0 and weight_scale is not None and weight_scale > 0):
        return float("inf")
    return float(kappa) * (d + 1) * float(tau) / (float(lam) * float(weight_scale))


def mass_gap(mean_mass, baseline):
    """Certificate gap ``1 − |G|`` implied by the radial law from a cluster's mean particle
    mass ``m`` and the baseline ``B = (d+1)τ/λ``: ``1 − sqrt(max(0, 1 − B/m))`` (1 for
    ``m ≤ B``). Array in, array out."""
    m = np.asarray(mean_mass, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(m > 0, 1.0 - baseline / np.where(m > 0, m, 1.0), 0.0)
    return 1.0 - np.sqrt(np.clip(q, 0.0, 1.0))


def _thermal_entry(c, info, members, theta, V, mass, N, gap, eps, baseline, above_baseline,
                   cdir) -> dict:
    """The ``thermal`` entry of a cluster refused as thermal mass: its weight, direction,
    ``G``, gap and the weight the radial law gives thermal mass at that ``G``."""
    mm = mass[members]
    ang = np.arccos(np.clip(V[members] @ cdir, -1.0, 1.0))
    r = np.linalg.norm(theta[members, 1:], axis=1)
    G = info["G"]
    g_abs = None
    if G is not None and np.isfinite(G):
        g_abs = abs(G)
    elif baseline is not None and mm.size:
        g_abs = float(1.0 - mass_gap(mm.mean(), baseline))
    radial = None
    if baseline is not None and g_abs is not None and g_abs < 1:
        radial = float(info["sign"] * members.size / N * g_abs * baseline / (1.0 - g_abs ** 2))
    return {**info, "weight": float(np.sum(theta[members, 0] * r) / N),
            "spread": float(np.sqrt(np.sum(mm * ang ** 2) / max(mm.sum(), 1e-300))),
            "gap": None if not np.isfinite(gap) else float(gap),
            "gap_threshold": eps, "radial_weight": radial,
            "reason": "certificate gap" if above_baseline else "free-particle baseline"}
