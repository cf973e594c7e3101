"""Atomic replacement: a failed write leaves the old file and no scratch file behind."""

import os

import pytest

from meanfield import atomic


def test_write_text_replaces_and_keeps_the_umask_mode(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("old")
    atomic.write_text(p, "new", durable=True)
    assert p.read_text() == "new"
    mask = os.umask(0)
    os.umask(mask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~mask
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.txt"]


@pytest.mark.parametrize("scratch", [None, "a.txt.tmp"])
def test_a_failing_block_leaves_the_old_file(tmp_path, scratch):
    p = tmp_path / "a.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic.replacing(p, scratch=scratch and tmp_path / scratch) as tmp:
            tmp.write_text("half")
            raise RuntimeError("disk full")
    assert p.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.txt"]


def test_a_swallowed_termination_signal_publishes_nothing(tmp_path):
    """A SIGTERM whose exception Python swallowed (raised inside a weakref callback, printed as
    'Exception ignored') is raised at the next commit point, before the rename: the old file
    and folder stay, no scratch is left."""
    import signal

    from meanfield import interrupts
    from meanfield.atomic import replacing_dir, write_text
    old = tmp_path / "old.txt"
    old.write_text("before")
    interrupts.note(signal.SIGTERM)
    try:
        with pytest.raises(interrupts.Terminated, match="SIGTERM"):
            write_text(old, "after")
        with pytest.raises(interrupts.Terminated):
            with replacing_dir(tmp_path / "rep") as tmp:
                (tmp / "report.md").write_text("x")
    finally:
        interrupts.clear()
    assert old.read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]
    write_text(old, "after")                    # cleared: commits again
    assert old.read_text() == "after"

