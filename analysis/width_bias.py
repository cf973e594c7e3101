"""The ``O(1/N)`` width bias of the N-particle law, estimated from its particles
(docs/theory.md §2.3, "The width bias from the particles").

The exact sampler (``integrator = "mala"``) samples the N-particle Gibbs law
``π_N ∝ exp(−[N R(f_N)/2 + (λ/2) Σ_i |θ_i|²]/τ)``, whose mean predictor on the training points is
``f_Gibbs + B/N + O(1/N²)``. To leading order (*derived*, docs/theory.md §2.3)

    B = −(nτ/2) G v,    G = (nτ I + C)⁻¹,    v_b = Σ_{c,e} κ_{bce} G_{ce},

with ``C`` and ``κ`` the covariance and the third cumulant of the features
``φ_j(θ) = a σ(u·x̃_j)`` of one particle under the Gibbs fixed point ``ρ*``. Both are estimated
here from the particles of a stage's snapshot frames (their one-particle law is ``ρ*`` up to
``O(1/N)``): ``C = Ψᵀ Ψ / P``, ``v = Ψᵀ q / P`` with ``Ψ`` the centred features of the ``P``
particles and ``q_i = Ψ_i G Ψ_iᵀ``, in ``O(P n²)``.

The third cumulant is dominated by the heaviest particles of the rays, so few particles
underestimate it: on plane8 at ``τ = 10⁻³`` 250–1000 particles gave about 0.6 of the
estimate from 80 000 (docs/theory.md §2.3). The estimate pools every frame of the stage's window
in every chain, and says how many particles it rests on.
"""

from __future__ import annotations

import numpy as np

from analysis.protocols import RunLike
from analysis.time_average import chains_of
from solvers.geometry import lifted


def width_bias_coefficient(particles, X, tau: float) -> np.ndarray:
    """The leading coefficient ``B`` of the width bias ``B/N`` of the N-particle law's mean
    predictor on the training points, from particles of the Gibbs fixed point (ReLU).

    Parameters
    ----------
    particles : array_like of shape (P, d+2)
        Rows ``(a, w, b)``, samples of the one-particle law (pooled frames and chains).
    X : array_like of shape (n, d)
        The training inputs.
    tau : float
        Temperature ``τ > 0``.

    Returns
    -------
    ndarray of shape (n,)
        ``B`` (units of ``y`` times particles): ``B/N`` is the bias of a run of ``N``
        particles.

    Raises
    ------
    ValueError
        ``tau <= 0``, fewer than 3 particles, or particles of the wrong width.
    """
    theta = np.asarray(particles, dtype=float)
    Xt = lifted(X)
    if not tau > 0:
        raise ValueError(f"need tau > 0, got {tau}")
    if theta.ndim != 2 or theta.shape[1] != Xt.shape[1] + 1 or len(theta) < 3:
        raise ValueError(f"particles of shape (P >= 3, {Xt.shape[1] + 1}) expected, got "
                         f"{theta.shape}")
    n = Xt.shape[0]
    phi = theta[:, :1] * np.maximum(theta[:, 1:] @ Xt.T, 0.0)         # (P, n)
    psi = phi - phi.mean(axis=0)
    P = len(psi)
    C = psi.T @ psi / P
    G = np.linalg.inv(n * tau * np.eye(n) + C)
    q = np.einsum("ib,bc,ic->i", psi, G, psi)
    v = psi.T @ q / P
    return -(n * tau / 2.0) * (G @ v)


def stage_width_bias(run: RunLike, stage: int, window: float = 0.5) -> dict | None:
    """:func:`width_bias_coefficient` of stage ``stage`` of a run, from the particles of its
    snapshot frames in the last ``window`` fraction of the stage, every chain pooled.

    Returns
    -------
    dict or None
        ``coefficient`` (``B``, per training point), ``max_abs_coefficient``, ``estimate``
        (``B/N``), ``max_abs`` (its largest magnitude), ``particles`` and ``frames`` (what it
        rests on); ``None`` when the stage has no frame in the window, fewer than 3
        particles there, or ``τ <= 0``.
    """
    tau = float(run.taus[stage])
    if not tau > 0:
        return None
    lo, hi = run.schedule.last_part(stage, window)
    parts = []
    for c in chains_of(run):
        for k in c.stage_frames(stage):
            if lo < int(c.frame_step[k]) <= hi:
                parts.append(np.asarray(c.frame(int(k)), dtype=float))
    theta = np.concatenate(parts) if parts else np.zeros((0, 0))
    if len(theta) < 3:                  # no frame, or too few particles for a third cumulant
        return None
    B = width_bias_coefficient(theta, run.X, tau)
    N = int(run.n_particles)
    return {"coefficient": [float(b) for b in B], "max_abs_coefficient": float(np.max(np.abs(B))),
            "estimate": [float(b) / N for b in B], "max_abs": float(np.max(np.abs(B))) / N,
            "particles": int(sum(len(p) for p in parts)), "frames": len(parts)}
