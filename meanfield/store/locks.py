"""Opening a run file that a SWMR writer has (or had) open, and the POSIX record lock that
tells a live writer from a killed one (HDF5 drops its own lock in SWMR mode)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
from pathlib import Path

import h5py

from meanfield.errors import RunFileError


def _is_open_for_write(exc) -> bool:
    """Whether an HDF5 open failed because the file is marked as open by a (SWMR) writer."""
    return "already open for write" in str(exc)


def _open_read(path):
    """Open a run file for reading, live or not.

    A file written in SWMR mode (running, or its writer killed) refuses a plain open; it is
    then opened as a SWMR reader, which sees every row committed when it opens.

    Raises
    ------
    OSError
        From h5py: not HDF5, unreadable, or locked by a writer outside SWMR mode.
    """
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        if not _is_open_for_write(exc):
            raise
    return h5py.File(path, "r", libver="latest", swmr=True)


def _record_lock(fd, kind) -> None:
    """Take a non-blocking record lock (``fcntl.F_RDLCK`` or ``F_WRLCK``) on all of ``fd``.

    Open-file-description locks where the system has them (Linux): unlike classic POSIX
    record locks, closing another descriptor of the same file in the process keeps them.

    Raises
    ------
    OSError
        EAGAIN/EACCES when a conflicting lock is held.
    """
    if hasattr(fcntl, "F_OFD_SETLK"):
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, 0, 0, 0, 0))
    else:  # pragma: no cover
        fcntl.lockf(fd, (fcntl.LOCK_EX if kind == fcntl.F_WRLCK else fcntl.LOCK_SH)
                    | fcntl.LOCK_NB)


def _take_writer_lock(path):
    """A record write lock on ``path`` for as long as the returned descriptor is open.

    HDF5 releases its own (``flock``) lock when SWMR writing starts, and SWMR readers take a
    shared ``flock``; a record lock is independent of both. Returns ``None`` where record
    locks are not supported.

    Raises
    ------
    RunFileError
        Another process holds the lock.
    """
    fd = os.open(path, os.O_RDWR)
    try:
        _record_lock(fd, fcntl.F_WRLCK)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            raise RunFileError(str(path), "", "locked: another process is writing this run "
                                              "(never run two 'meanfield run' with one output)") \
                from None
        return None
    return fd


def writer_alive(path) -> bool:
    """Whether a process is writing the run file ``path`` now (holds its writer lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        _record_lock(fd, fcntl.F_RDLCK)
    except OSError as exc:
        return exc.errno in (errno.EACCES, errno.EAGAIN)
    finally:
        os.close(fd)       # closing drops the probe's own shared lock
    return False


def _rebuild(path) -> None:
    """Rewrite a run file whose SWMR writer was killed, so it can be opened for appending.

    HDF5 marks a file open by a SWMR writer and refuses to open it for writing until the mark
    is cleared (``h5clear -s``); h5py offers no way to clear it. The file's objects are copied
    (as a SWMR reader, committed or not) into a fresh file, ``PATH.tmp``, that then replaces
    it atomically.

    The disk space of the copy (the size of ``path``) is tried first (``posix_fallocate``; HDF5
    truncates the file again when it creates it): a full disk or a file-size limit then fails
    here with a plain ``OSError`` before HDF5 writes a byte (HDF5 does not recover from a
    failed write). Whatever fails, the copy is removed and ``path`` is left as it was.

    Raises
    ------
    OSError
        The copy cannot be written (``filename`` is the copy); HDF5's own write failures
        (``RuntimeError``) are raised as they are.
    """
    from meanfield import interrupts
    from meanfield.store.disk import _fallocate
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    held = interrupts.hold()          # a signal between creating the copy and the ``try``
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except BaseException:
        interrupts.release(held)
        raise
    try:
        interrupts.release(held)
        try:
            _fallocate(fd, os.path.getsize(path))
        except OSError as exc:
            raise OSError(exc.errno, f"{exc.strerror}; it needs about "
                                     f"{os.path.getsize(path) / 1e6:.3g} MB",
                          str(tmp)) from None
        finally:
            os.close(fd)
        with h5py.File(path, "r", libver="latest", swmr=True) as src, \
                h5py.File(tmp, "w", libver="latest") as dst:
            for name in src:
                src.copy(src[name], dst, name=name)
            for key, value in src.attrs.items():
                dst.attrs[key] = value
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
