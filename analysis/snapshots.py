"""Which snapshots of a ladder a report reads: the last of each stage, and the coldest.

Both take the snapshot analyses (``analysis.run_analysis.FrameAnalysis``) or their report
entries (dicts with ``"stage"`` and ``"tau"``) in ladder order, and key them by the stage,
never by the temperature (a ladder may visit one twice; docs/format.md, "Stages").
"""

from __future__ import annotations

__all__ = ["coldest", "last_of_stages"]


def last_of_stages(snapshots: list) -> list:
    """The last snapshot of each stage, in ladder order.

    Parameters
    ----------
    snapshots : list of FrameAnalysis, or of their report entries (dicts with ``"stage"``)
        In ladder order (as frames are written).

    Returns
    -------
    list
        One item per stage that has snapshots, keyed by the stage, never by the temperature
        (a ladder may visit one twice).
    """
    last = {}
    for s in snapshots:
        last[s["stage"] if isinstance(s, dict) else s.stage] = s
    return [last[k] for k in sorted(last)]


def coldest(snapshots: list):
    """The last snapshot of the coldest stage: the lowest temperature, and of the stages at it
    the last (as :meth:`solvers.schedule.Schedule.coldest_stage`; a ladder that reheats ends
    hotter than its coldest stage, and "the coldest snapshot" of the report, its rays,
    sensitivity, Theorem 6 and direction map are taken there, as the references are).

    Parameters
    ----------
    snapshots : list of FrameAnalysis, or of their report entries (dicts with ``"stage"`` and
        ``"tau"``), in ladder order.

    Returns
    -------
    FrameAnalysis or dict or None
        None when ``snapshots`` is empty.
    """
    if not snapshots:
        return None

    def get(s, key):
        return s[key] if isinstance(s, dict) else getattr(s, key)
    t_min = min(get(s, "tau") for s in snapshots)
    stage = max(get(s, "stage") for s in snapshots if get(s, "tau") == t_min)
    return [s for s in snapshots if get(s, "stage") == stage][-1]
