"""What a killed process leaves next to an output it was writing, and its removal.

A command that writes a folder as a whole (``meanfield analyze``: a report, a study's
analysis) writes it into a scratch folder ``.NAME.XXXXXXXX.tmp`` next to it, renames it into
place when complete, and moves an older one aside into ``.NAME.XXXXXXXX.old`` on the way
(:func:`meanfield.atomic.replacing_dir`). A process killed by SIGKILL (or the OOM killer, or
a power cut) removes neither, nor its lock file ``.NAME.lock`` (:mod:`meanfield.ownership`).

The lock file is an ``flock``: the kernel drops it when its owner dies, so a stale one never
blocks; the next owner removes it when it is done. The scratch folders carry no owner, but only
the owner of ``NAME`` creates them: once a process holds the claim on ``NAME``, every scratch
folder of ``NAME`` is a dead process's, and :func:`remove_stale_folders` removes them.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

#: The random part of :func:`tempfile.mkdtemp` names (8 characters of ``[a-z0-9_]``).
_RANDOM = r"[a-z0-9_]{8}"


def stale_folders(final) -> list[Path]:
    """The scratch folders of the folder ``final`` next to it (``.NAME.XXXXXXXX.tmp`` and
    ``.NAME.XXXXXXXX.old``, as :func:`meanfield.atomic.replacing_dir` names them); call it
    while holding the claim on ``final`` (:func:`meanfield.ownership.claim`), when they can
    only be a dead process's. A symbolic link is never one."""
    final = Path(os.path.realpath(final)) if Path(final).is_symlink() else Path(final)
    parent = final.absolute().parent
    pattern = re.compile(rf"\.{re.escape(final.name)}\.{_RANDOM}\.(tmp|old)")
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    return sorted(parent / n for n in names
                  if pattern.fullmatch(n) and (parent / n).is_dir()
                  and not (parent / n).is_symlink())


def remove_stale_folders(final) -> list[Path]:
    """Remove the scratch folders :func:`stale_folders` finds; returns those removed (a
    folder that cannot be removed, e.g. in a read-only place, is left, silently)."""
    removed = []
    for p in stale_folders(final):
        shutil.rmtree(p, ignore_errors=True)
        if not p.exists():
            removed.append(p)
    return removed
