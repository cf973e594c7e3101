"""One owner per output: an exclusive lock taken atomically before any work.

Every command that writes an output (a run file with its ``.part`` and ``.ckpt``, a report
folder, a study folder, the files of a ``highdim`` study) first *claims* it with
:func:`claim`. The claim is an ``flock`` on a hidden lock file next to the output,
``.NAME.lock``, holding the owner's process id. A second process claiming the same output
fails at once with :class:`OutputBusy` (one line, exit code 2) before it reads, computes or
writes anything. The kernel drops the lock when its owner exits, however it exits (even
``SIGKILL``), so a stale lock file never blocks a later run.

Folders written as a whole (reports) go through :func:`meanfield.atomic.replacing_dir`.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from meanfield import interrupts
from meanfield.errors import InputError


class OutputBusy(InputError):
    """Another process owns the output (holds its lock)."""


def lock_path(output) -> Path:
    """The lock file of ``output``: ``.NAME.lock`` in the same folder."""
    out = Path(output)
    return out.with_name(f".{out.name}.lock")


def check_writable_dir(folder, output, field: str = "") -> None:
    """Refuse (``InputError`` naming ``output``) unless ``folder`` is an existing, writable
    directory; used before any work so that no result is computed for nowhere."""
    folder = Path(folder)
    if not folder.exists():
        raise InputError(str(output), field, f"folder {folder} does not exist")
    if not folder.is_dir():
        raise InputError(str(output), field, f"{folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(str(output), field, f"folder {folder} is not writable")


def _holder(fd) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        pid = os.read(fd, 32).decode("ascii", "replace").strip()
    except OSError:
        pid = ""
    return f" (pid {pid})" if pid.isdigit() else ""


@contextlib.contextmanager
def claim(output, field: str = "", lock=None):
    """Own ``output`` for the duration of the ``with`` block.

    Parameters
    ----------
    output : path-like
        The output (file or folder) to own. Its folder must exist and be writable.
    field : str
        The option that named the output (e.g. ``"-o"``), for messages.
    lock : path-like, optional
        The lock file (default :func:`lock_path`); a study directory keeps its own inside.

    Raises
    ------
    OutputBusy
        Another process owns ``output`` now.
    InputError
        The lock cannot be created (folder missing or not writable, locks unsupported).
    """
    import fcntl
    out = Path(output)
    lock = lock_path(out) if lock is None else Path(lock)
    check_writable_dir(lock.absolute().parent, out, field)
    # SIGTERM, SIGHUP and SIGINT are held while the lock is taken: a signal between creating the
    # lock file and entering the ``try`` below would leave ``.NAME.lock`` behind. They are
    # delivered as soon as the lock is held, inside the ``try``, whose ``finally`` removes it.
    held = interrupts.hold()
    try:
        fd = _acquire(lock, out, field, fcntl)
    except BaseException:
        interrupts.release(held)
        raise
    try:
        interrupts.release(held)
        yield out
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def _acquire(lock: Path, out: Path, field: str, fcntl) -> int:
    """Create (or open) ``lock`` and take its exclusive ``flock``; returns the descriptor,
    holding this process's id."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(str(out), field, f"cannot create its lock file {lock.name} "
                                              f"({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            who = _holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise OutputBusy(str(out), field, f"in use by another meanfield process{who}; "
                                                  "wait for it to finish or choose another "
                                                  "output") from None
            raise InputError(str(out), field, f"cannot lock {lock.name} "
                                              f"({exc.strerror or exc})") from None
        # The previous owner unlinks the lock file before releasing it: if the name now points
        # elsewhere (or nowhere), the lock just taken is on a dead file; take the new one.
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:
        pass                    # the pid is a courtesy for messages; the lock is what counts
    return fd
