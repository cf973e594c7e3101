"""The temperature ladder of a run: the one owner of the stage arithmetic.

A run integrates the stages ``0 .. n_stages-1`` one after another, stage ``s`` at temperature
``taus[s]`` for ``stage_length(s)`` steps, each stage starting from the last particles of the
previous one (THEORY §2). Steps are counted globally from 1: the steps of stage ``s`` are
``stage_bounds(s) = (lo, hi)``, i.e. ``lo < step <= hi``. Within a stage the solver stops at
*observation boundaries*: every multiple of ``observe_every``, every snapshot step and the end
of the stage; a run file holds one observation per boundary and one frame per snapshot step.

Everything else (the solver loop, the run-file writer and reader, the time averages of the
analysis) asks this object instead of computing ``stage * steps_per_tau``. With
``steps_per_tau = "auto"`` the stage lengths are decided while the ladder runs: a stage runs in
:data:`AUTO_CHUNKS` chunks of ``max_steps_per_tau`` steps, a snapshot at every chunk end, and
may end at any chunk end from the second on (:meth:`Schedule.may_end`); the lengths decided so
far are the schedule's ``lengths`` (:meth:`Schedule.with_length`), a stage not yet decided
counts ``max_steps_per_tau`` steps and :meth:`Schedule.row_counts` is then an upper bound.

A stage is its index, never its temperature: a ladder may visit one temperature more than once
(``taus = [1e-2, 1e-3, 1e-2]``, a reheating study), and each visit is a stage of its own. A run
file stores the stage and the step within it of every observation and frame; for files written
before it did, :meth:`Schedule.stages_of_rows` is the one place that tells them from the rows
(docs/format.md).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np


def snapshot_steps(steps: int, snapshots: int) -> list[int]:
    """Steps within a stage (1-based counts) after which a snapshot frame is written.

    Parameters
    ----------
    steps : int
        Length of the stage, ``>= 1``.
    snapshots : int
        Snapshots per stage, ``1 <= snapshots <= steps``.

    Returns
    -------
    list of int
        Evenly spaced over the second half of the stage, the last at its end; increasing.

    Raises
    ------
    Nothing for valid arguments.
    """
    if snapshots == 1:
        return [steps]
    half = steps // 2
    return sorted({half + int(round((steps - half) * (s + 1) / snapshots))
                   for s in range(snapshots)})


#: ``steps_per_tau = "auto"``: a stage is cut into this many chunks of
#: ``max_steps_per_tau // AUTO_CHUNKS`` steps (the last takes the remainder).
AUTO_CHUNKS = 8


@dataclass(frozen=True)
class Schedule:
    """A temperature ladder and where its observations and snapshots fall.

    Parameters
    ----------
    taus : tuple of float
        Temperatures ``τ >= 0``, one per stage (hot to cold, by convention).
    steps_per_tau : int or "auto"
        Steps per stage, ``>= 1``, or ``"auto"`` (stage lengths decided while running).
    observe_every : int
        An observation every this many steps of a stage, ``>= 1``.
    snapshots_per_tau : int
        Snapshot frames per stage, ``1 <= snapshots_per_tau <= steps_per_tau`` (with
        ``"auto"``: per chunk, evenly spaced, the last at the chunk's end).
    max_steps_per_tau : int
        ``"auto"`` only: the most steps of a stage, ``>= 16``.
    lengths : tuple of int
        ``"auto"`` only: the lengths of the first ``len(lengths)`` stages, decided.
    """

    taus: tuple[float, ...]
    steps_per_tau: int | str
    observe_every: int
    snapshots_per_tau: int = 1
    max_steps_per_tau: int = 0
    lengths: tuple[int, ...] = ()

    @property
    def auto(self) -> bool:
        """Whether stage lengths are decided while running (``steps_per_tau = "auto"``)."""
        return self.steps_per_tau == "auto"

    def chunk_ends(self) -> list[int]:
        """``"auto"``: steps within a stage (1-based) at which a chunk ends, the last at
        ``max_steps_per_tau``."""
        T = int(self.max_steps_per_tau)
        c = T // AUTO_CHUNKS
        return [c * k for k in range(1, AUTO_CHUNKS)] + [T]

    def may_end(self, stage: int, step_in_stage: int) -> bool:
        """``"auto"``: whether stage ``stage`` may end early after ``step_in_stage`` steps (a
        chunk end from the second on, before the budget is spent)."""
        if not self.auto or stage < len(self.lengths):
            return False
        ends = self.chunk_ends()
        return step_in_stage in ends[1:-1]

    def planned_total(self, stage: int, start: int) -> int:
        """``"auto"``: the steps planned once stage ``stage`` has begun at global step
        ``start``: those done before it plus the whole budget (``max_steps_per_tau``) of it
        and of every later stage, the most the ladder can still take (the progress total)."""
        return int(start) + (self.n_stages - int(stage)) * int(self.max_steps_per_tau)

    def with_length(self, stage: int, length: int) -> Schedule:
        """A copy with stage ``stage``'s length decided (``"auto"``; the stages before
        it must be decided already)."""
        if len(self.lengths) != stage:
            raise ValueError(f"stage {stage} decided out of order ({len(self.lengths)} known)")
        return replace(self, lengths=self.lengths + (int(length),))

    def with_lengths(self, lengths) -> Schedule:
        """A copy with the first ``len(lengths)`` stage lengths decided."""
        return replace(self, lengths=tuple(int(x) for x in lengths))

    @property
    def n_stages(self) -> int:
        """Number of stages (temperatures)."""
        return len(self.taus)

    def stage_length(self, stage: int) -> int:
        """Steps of stage ``stage`` (``"auto"``: as decided, else ``max_steps_per_tau``)."""
        if stage < len(self.lengths):
            return int(self.lengths[stage])
        return int(self.max_steps_per_tau) if self.auto else int(self.steps_per_tau)

    @cached_property
    def _ends(self) -> list[int]:
        ends, total = [], 0
        for s in range(self.n_stages):
            total += self.stage_length(s)
            ends.append(total)
        return ends

    @property
    def total_steps(self) -> int:
        """Steps of the whole ladder."""
        return self._ends[-1] if self._ends else 0

    def stage_bounds(self, stage: int) -> tuple[int, int]:
        """Global steps ``(lo, hi)`` of stage ``stage``: its steps are ``lo < step <= hi``."""
        hi = self._ends[stage]
        return hi - self.stage_length(stage), hi

    def stage_of_step(self, step: int) -> int:
        """The stage that global step ``step >= 1`` belongs to."""
        return bisect.bisect_left(self._ends, int(step))

    def stages_of_steps(self, steps) -> tuple[np.ndarray, np.ndarray]:
        """Stage and step within it of each global step (vectorised :meth:`stage_of_step`).

        Parameters
        ----------
        steps : array_like of int, shape (m,)
            Global steps ``1 <= step <= total_steps``.

        Returns
        -------
        stage, step_in_stage : ndarray of int64, shape (m,)
            The stage of each step (0 = the first of the ladder) and its 1-based step within
            that stage.
        """
        steps = np.asarray(steps, dtype=np.int64)
        ends = np.asarray(self._ends, dtype=np.int64)
        stage = np.searchsorted(ends, steps, side="left")
        stage = np.minimum(stage, max(len(ends) - 1, 0))
        starts = np.concatenate(([0], ends[:-1])) if len(ends) else np.zeros(1, np.int64)
        return stage.astype(np.int64), steps - starts[stage]

    def as_run(self, stages, steps) -> Schedule:
        """The schedule as a run file's observations show it.

        Parameters
        ----------
        stages, steps : array_like of int, shape (m,)
            Stage and global step of each observation, in the order written.

        Returns
        -------
        Schedule
            ``self`` for fixed stage lengths; with ``"auto"`` a copy in which every stage that
            has observations is decided, ending at its last one (a stage still under way ends
            at its last observation so far), and the later ones are not.
        """
        if not self.auto:
            return self
        stages = np.asarray(stages, dtype=np.int64)
        steps = np.asarray(steps, dtype=np.int64)
        lengths, lo = [], 0
        for s in range(self.n_stages):
            seen = steps[stages == s]
            if not seen.size:
                break
            lengths.append(int(seen[-1]) - lo)
            lo = int(seen[-1])
        return self.with_lengths(lengths)

    def stages_of_rows(self, steps, taus) -> tuple[np.ndarray, np.ndarray]:
        """Stage and step within it of the observations of a run file that does not store
        them (written before they were stored).

        With fixed stage lengths they follow from the steps alone (:meth:`stages_of_steps`).
        With ``"auto"`` the lengths were decided while running and are not stored, so a stage
        is taken to end at an observation after which the stored temperature changes, or
        where its budget ``max_steps_per_tau`` is spent. This is the only place a stage is
        told from a temperature; it cannot separate two adjacent stages at one temperature
        (e.g. ``taus = [1e-2, 1e-2]``) of which the first ended early.

        Parameters
        ----------
        steps : array_like of int, shape (m,)
            Global steps of the observations, increasing.
        taus : array_like of float, shape (m,)
            Their stored temperatures.

        Returns
        -------
        stage, step_in_stage : ndarray of int64, shape (m,)
            As :meth:`stages_of_steps`.
        """
        steps = np.asarray(steps, dtype=np.int64)
        if not self.auto:
            return self.stages_of_steps(steps)
        taus = np.asarray(taus, dtype=float)
        budget = int(self.max_steps_per_tau)
        stage = np.zeros(steps.shape, dtype=np.int64)
        in_stage = np.zeros(steps.shape, dtype=np.int64)
        s, lo = 0, 0
        for k in range(steps.size):
            if k and (taus[k] != taus[k - 1] or steps[k] - lo > budget):
                s, lo = s + 1, int(steps[k - 1])
            stage[k], in_stage[k] = s, steps[k] - lo
        return stage, in_stage

    def coldest_stage(self) -> int:
        """The last stage at the lowest temperature of the ladder (where the ``τ → 0``
        comparisons are made)."""
        low = min(self.taus)
        return max(s for s, t in enumerate(self.taus) if t == low)

    def last_part(self, stage: int, fraction: float) -> tuple[int, int]:
        """Global steps ``(cut, hi)`` of the last ``fraction`` of stage ``stage``: the steps
        ``cut < step <= hi`` (``cut`` rounded down to a whole step)."""
        lo, hi = self.stage_bounds(stage)
        return lo + int(math.floor((1 - fraction) * (hi - lo))), hi

    def snapshots(self, stage: int) -> list[int]:
        """Steps within stage ``stage`` (1-based) after which a frame is written (``"auto"``:
        ``snapshots_per_tau`` frames evenly spaced over every chunk within the stage, the
        last at the chunk's end; a chunk's end is always a frame, so a stage that ends early
        ends on one)."""
        if self.auto:
            T = self.stage_length(stage)
            k = int(self.snapshots_per_tau)
            out, lo = [], 0
            for e in self.chunk_ends():
                if lo >= T:
                    break
                out += [lo + int(round((e - lo) * (i + 1) / k)) for i in range(k)]
                lo = e
            return sorted({s for s in out if 0 < s <= T} | {T})
        return snapshot_steps(self.stage_length(stage), int(self.snapshots_per_tau))

    def boundaries(self, stage: int) -> list[int]:
        """Steps within stage ``stage`` (1-based) at which an observation is written: the
        multiples of ``observe_every``, the snapshot steps and the end of the stage."""
        T, every = self.stage_length(stage), int(self.observe_every)
        return sorted(set(range(every, T + 1, every)) | set(self.snapshots(stage)) | {T})

    def next_boundary(self, stage: int, step_in_stage: int) -> int:
        """The first boundary of stage ``stage`` after ``step_in_stage`` steps of it."""
        T, every = self.stage_length(stage), int(self.observe_every)
        nxt_snap = min((s for s in self.snapshots(stage) if s > step_in_stage), default=T)
        return min((step_in_stage // every + 1) * every, nxt_snap, T)

    def row_counts(self) -> tuple[int, int]:
        """Rows of a complete run file: ``(n_frames, n_observations)`` (``"auto"``: at most,
        the stages not yet decided counted at ``max_steps_per_tau``)."""
        return (sum(len(self.snapshots(s)) for s in range(self.n_stages)),
                sum(len(self.boundaries(s)) for s in range(self.n_stages)))
