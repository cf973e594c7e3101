"""The temperature schedule against a brute-force walk over the steps of a ladder."""

import math

import pytest

from solvers.schedule import Schedule, snapshot_steps


def _walk(T, every, snaps, n_stages):
    """Step by step: the observation boundaries and snapshot steps, global and 1-based."""
    obs, frames = [], []
    snap = set(snapshot_steps(T, snaps))
    for s in range(n_stages):
        for k in range(1, T + 1):
            if k % every == 0 or k in snap or k == T:
                obs.append((s, s * T + k))
            if k in snap:
                frames.append((s, s * T + k))
    return obs, frames


@pytest.mark.parametrize("T,every,snaps", [(40, 10, 2), (37, 10, 3), (12, 5, 12), (9, 20, 1),
                                           (50, 7, 4), (1, 1, 1)])
def test_schedule_matches_a_step_by_step_walk(T, every, snaps):
    taus = (1e-2, 1e-3, 0.0)
    sch = Schedule(taus, T, every, snaps)
    obs, frames = _walk(T, every, snaps, len(taus))
    assert sch.row_counts() == (len(frames), len(obs))
    assert sch.total_steps == T * len(taus)
    for s in range(len(taus)):
        assert sch.stage_bounds(s) == (s * T, (s + 1) * T)
        assert [g - s * T for t, g in obs if t == s] == sch.boundaries(s)
        assert [g - s * T for t, g in frames if t == s] == sch.snapshots(s)
        k, seen = 0, []
        while k < T:
            k = sch.next_boundary(s, k)
            seen.append(k)
        assert seen == sch.boundaries(s)
        for frac in (0.5, 0.25, 1.0):
            assert sch.last_part(s, frac) == (s * T + math.floor((1 - frac) * T), (s + 1) * T)
    for step in range(1, sch.total_steps + 1):
        assert sch.stage_of_step(step) == (step - 1) // T
