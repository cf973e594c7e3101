"""Particles the sampler did not move in direction over a stage's stationary window.

At low ``τ`` the exact law puts a ray on one or a few heavy particles, and one that sits on a
data point's kink hyperplane is pinned there by a potential whose slope grows with its mass
``m = |a||u|`` (``λm/τ`` per radian, against the Langevin move's isotropic angular step of
about ``sqrt(2ητ)/|u|``): its Langevin moves are all refused, its radial moves (which keep the
direction) accepted, so its direction stays where the stage found it (docs/theory.md §2.6,
"Heavy particles on a kink keep their direction"). The stationarity verdict reads observables
that such a particle does not move and cannot see it; this module measures it from the frames.
Fine Langevin steps (``dynamics.fine``, :mod:`solvers._mala`) move such particles.
"""

from __future__ import annotations

import numpy as np

from analysis.protocols import RunLike
from analysis.time_average import chains_of

#: Two directions are the same when they differ by less than this angle (radians): a radial
#: move rescales ``u`` and changes its direction only by rounding (``1e-16``).
SAME_DIRECTION = 1e-9
#: The share of a stage's mass held by particles of unchanged direction above which the
#: command line and the report name it.
FROZEN_NOTE = 0.05


def frozen_particles(run: RunLike, frames: list[int]) -> dict | None:
    """The particles whose direction ``u/|u|`` is the same in the first and the last of
    ``frames`` (frame indices of one stage, in step order), in every chain of the run.

    Parameters
    ----------
    run : meanfield.store.Run or alike
        The run (its chains: :func:`analysis.time_average.chains_of`).
    frames : list of int
        The stage's stationary window (:func:`analysis.run_analysis.stage_frames`).

    Returns
    -------
    dict or None
        ``{"mass_fraction", "particles", "from_step", "to_step"}``: the share of the mass
        ``Σ|a||u|`` at the last frame held by particles whose direction did not change (mean
        over the chains), the number of those particles per chain, and the steps of the two
        frames; ``None`` when the window holds fewer than two frames.
    """
    if len(frames) < 2:
        return None
    fractions, counts = [], []
    for chain in chains_of(run):
        first, last = chain.frame(frames[0]), chain.frame(frames[-1])
        r0 = np.linalg.norm(first[:, 1:], axis=1)
        r1 = np.linalg.norm(last[:, 1:], axis=1)
        live = (r0 > 0) & (r1 > 0)
        # the chord of the unit directions (arccos of their dot product cannot resolve angles
        # below 1e-8: one rounding of the cosine is that much)
        chord = np.linalg.norm(first[live, 1:] / r0[live, None]
                               - last[live, 1:] / r1[live, None], axis=1)
        same = np.zeros(len(last), dtype=bool)
        same[live] = 2.0 * np.arcsin(np.minimum(chord / 2.0, 1.0)) < SAME_DIRECTION
        mass = np.abs(last[:, 0]) * r1
        total = float(mass.sum())
        fractions.append(float(mass[same].sum()) / total if total > 0 else 0.0)
        counts.append(int(same.sum()))
    return {"mass_fraction": float(np.mean(fractions)), "particles": counts,
            "from_step": int(run.frame_step[frames[0]]),
            "to_step": int(run.frame_step[frames[-1]])}


def frozen_note(frozen: dict | None, unit: str = "step") -> str | None:
    """The sentence the command line and report.md give a stage whose particles of unchanged
    direction (:func:`frozen_particles`) hold at least :data:`FROZEN_NOTE` of its mass, else
    ``None``. ``unit``: what a step is (``"pass"`` for the exact sampler)."""
    if not frozen or frozen["mass_fraction"] < FROZEN_NOTE:
        return None
    counts = frozen["particles"]
    who = (f"{counts[0]} particle{'s' if counts[0] != 1 else ''}" if len(counts) == 1 else
           f"{', '.join(str(c) for c in counts)} particles in the {len(counts)} chains")
    units = unit + ("es" if unit.endswith("s") else "s")
    return (f"{100 * frozen['mass_fraction']:.0f} % of the mass ({who}) kept its direction "
            f"over {units} {frozen['from_step']}-{frozen['to_step']}: the sampler moved their "
            "radius only (heavy particles pinned on a kink, docs/theory.md §2.6): their "
            "directions are where the stage found them, not draws from its stationary law, "
            "and averages that depend on them can be off by more than their standard errors; "
            "dynamics.fine = 0.5 (fine Langevin steps) moves them")
