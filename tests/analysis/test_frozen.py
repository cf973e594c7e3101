"""Particles whose direction the sampler did not move over a stage's window
(:mod:`analysis.frozen`): found from the frames alone, by mass."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.frozen import FROZEN_NOTE, frozen_note, frozen_particles


class _Run:
    """Frames of one chain: the rows (a, w, b) of each frame, and their steps."""

    def __init__(self, frames, steps):
        self._frames, self.frame_step = frames, np.asarray(steps)

    def frame(self, k):
        return self._frames[k]


def _frames(rng, N=200, heavy=(0, 1), scale=3.0):
    first = rng.standard_normal((N, 3))
    first[list(heavy), 0] *= 50.0                          # two heavy particles
    last = first.copy()
    moved = np.setdiff1d(np.arange(N), heavy)
    last[moved, 1:] += 0.01 * rng.standard_normal((moved.size, 2))   # the others move
    last[list(heavy), 1:] *= scale                         # a radial move: direction kept
    last[list(heavy), 0] /= scale
    return first, last


def test_frozen_particles_are_those_of_unchanged_direction_weighted_by_mass():
    rng = np.random.default_rng(0)
    first, last = _frames(rng)
    run = _Run([first, first, last], [100, 200, 300])
    got = frozen_particles(run, [0, 1, 2])
    mass = np.abs(last[:, 0]) * np.linalg.norm(last[:, 1:], axis=1)
    assert got["particles"] == [2]
    assert got["mass_fraction"] == pytest.approx(mass[:2].sum() / mass.sum(), rel=1e-12)
    assert (got["from_step"], got["to_step"]) == (100, 300)
    # a rotation by 1e-7 rad is a move: the test resolves angles far below arccos's 1e-8
    c, s = np.cos(1e-7), np.sin(1e-7)
    turned = last.copy()
    turned[0, 1:] = [c * last[0, 1] - s * last[0, 2], s * last[0, 1] + c * last[0, 2]]
    assert frozen_particles(_Run([first, turned], [1, 2]), [0, 1])["particles"] == [1]
    assert frozen_particles(run, [2]) is None                  # one frame: nothing to compare


def test_the_note_names_a_frozen_share_above_its_threshold_only():
    row = {"mass_fraction": 0.48, "particles": [21, 10], "from_step": 28750, "to_step": 35000}
    note = frozen_note(row, "pass")
    assert note.startswith("48 % of the mass (21, 10 particles in the 2 chains) kept its "
                           "direction over passes 28750-35000")
    assert frozen_note({**row, "particles": [1]}, "step").startswith(
        "48 % of the mass (1 particle) kept its direction over steps")
    assert frozen_note({**row, "mass_fraction": FROZEN_NOTE / 2}) is None
    assert frozen_note(None) is None
