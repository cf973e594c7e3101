"""The temperature schedule against a brute-force walk over the steps of a ladder."""

import math

import numpy as np
import pytest
from support import auto_walk

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


@pytest.mark.parametrize("lengths,T,every,per", [((40, 160, 60), 160, 10, 1),
                                                 ((320, 80), 320, 7, 1),
                                                 ((8, 33, 12, 28), 33, 5, 1),
                                                 ((40, 160, 60), 160, 10, 4),
                                                 ((320, 80), 320, 7, 3),
                                                 ((8, 33, 12, 28), 33, 5, 4)])
def test_auto_schedule_matches_a_step_by_step_walk(lengths, T, every, per):
    taus = (1e-2, 1e-3, 1e-2, 0.0)[:len(lengths)]
    sch = Schedule(taus, "auto", every, per, T).with_lengths(lengths)
    obs, frames = auto_walk(lengths, T, every, per)
    assert sch.row_counts() == (len(frames), len(obs))
    assert sch.total_steps == sum(lengths)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    for s, L in enumerate(lengths):
        lo = int(starts[s])
        assert sch.stage_bounds(s) == (lo, lo + L)
        assert sch.stage_length(s) == L
        assert sch.boundaries(s) == [k for t, k, _ in obs if t == s]
        assert sch.snapshots(s) == [k for t, k, _ in frames if t == s]
        for frac in (0.5, 0.25, 1.0):
            assert sch.last_part(s, frac) == (lo + math.floor((1 - frac) * L), lo + L)
    for step in range(1, sch.total_steps + 1):
        want = int(np.searchsorted(np.cumsum(lengths), step))      # (lo, hi] by brute force
        assert sch.stage_of_step(step) == want
    stage, in_stage = sch.stages_of_steps([g for _, _, g in obs])
    assert list(zip(stage.tolist(), in_stage.tolist())) == [(t, k) for t, k, _ in obs]
    # the schedule as the rows show it: decided lengths from the stored stages alone
    undecided = Schedule(taus, "auto", every, 1, T)
    seen = undecided.as_run([t for t, _, _ in obs], [g for _, _, g in obs])
    assert seen.lengths == tuple(lengths)
    part = [(t, g) for t, _, g in obs if t < 1 or g <= starts[1] + every]   # stage 1 under way
    under_way = undecided.as_run(*zip(*part))
    assert under_way.lengths == (lengths[0], part[-1][1] - lengths[0])
    # a file without stored stages (adjacent temperatures differ here): told once from its rows
    st, ins = undecided.stages_of_rows([g for _, _, g in obs], [taus[t] for t, _, _ in obs])
    assert list(zip(st.tolist(), ins.tolist())) == [(t, k) for t, k, _ in obs]


def test_legacy_rows_of_two_adjacent_stages_at_one_temperature_split_at_the_budget():
    sch = Schedule((1e-2, 1e-2), "auto", 10, 1, 80)
    obs, _ = auto_walk((80, 40), 80, 10)
    st, ins = sch.stages_of_rows([g for _, _, g in obs], [1e-2] * len(obs))
    assert list(zip(st.tolist(), ins.tolist())) == [(t, k) for t, k, _ in obs]


def test_a_fixed_schedule_tells_rows_from_steps_alone_and_the_coldest_stage_is_the_last():
    sch = Schedule((1e-2, 1e-3, 1e-2, 1e-3), 50, 10, 2)
    steps = np.arange(10, 201, 10)
    st, ins = sch.stages_of_rows(steps, np.full(steps.shape, np.nan))   # temperatures unused
    np.testing.assert_array_equal(st, (steps - 1) // 50)
    np.testing.assert_array_equal(ins, steps - 50 * ((steps - 1) // 50))
    assert sch.as_run(st, steps) is sch
    assert sch.coldest_stage() == 3
    assert Schedule((1e-2, 1e-3, 1e-2), 5, 1).coldest_stage() == 1
