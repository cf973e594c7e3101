"""``meanfield analyze`` killed by SIGKILL leaves its scratch folder (``.REPORT.XXXXXXXX.tmp``)
and its lock file (``.REPORT.lock``, holding its dead pid); the next ``analyze`` of the same
report removes both: the lock does not block it (the kernel dropped the dead owner's
``flock``), and, once it owns the report, every scratch folder of it is a dead process's."""

from __future__ import annotations

import os
import signal

import pytest
from support import run_cli, start, wait_for

from meanfield.store.leftovers import remove_stale_folders, stale_folders

pytestmark = pytest.mark.slow


def _scratch(folder, name):
    return sorted(p.name for p in folder.iterdir()
                  if p.name.startswith(f".{name}.") and p.name != f".{name}.lock")


def test_the_next_analyze_removes_what_a_killed_one_left(tiny_run_file, tmp_path):
    import shutil
    _, src = tiny_run_file
    run = tmp_path / "tiny.h5"
    shutil.copy(src, run)
    report = tmp_path / "tiny-report"
    p = start(["analyze", run, "-o", report, "--quiet"], tmp_path)
    assert wait_for(lambda: bool(_scratch(tmp_path, report.name)), p, timeout=300)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    lock = tmp_path / ".tiny-report.lock"
    assert lock.exists() and _scratch(tmp_path, report.name), sorted(os.listdir(tmp_path))
    dead = int(lock.read_text().strip())
    assert dead == p.pid

    r = run_cli(["analyze", run, "-o", report, "--quiet", "--no-figures", "--no-w2",
                 "--no-references"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["tiny-report", "tiny.h5"]
    assert (report / "report.json").is_file()


def test_only_the_scratch_folders_of_that_output_are_stale(tmp_path):
    final = tmp_path / "rep"
    mine = [tmp_path / ".rep.ab12cd_9.tmp", tmp_path / ".rep.zzzzzzzz.old"]
    others = [tmp_path / ".rep.x.ab12cd_9.tmp",      # of an output named "rep.x"
              tmp_path / ".rep.ab12cd_9.tmp.keep", tmp_path / ".rep.short.tmp",
              tmp_path / ".report.ab12cd_9.tmp", tmp_path / "rep"]
    for d in mine + others:
        d.mkdir()
    (tmp_path / ".rep.abcdefgh.tmp").write_text("a file, not a scratch folder")
    (tmp_path / ".rep.linklink.tmp").symlink_to(tmp_path / "rep")
    assert stale_folders(final) == sorted(mine)
    assert remove_stale_folders(final) == sorted(mine)
    assert not any(d.exists() for d in mine) and all(d.exists() for d in others)
