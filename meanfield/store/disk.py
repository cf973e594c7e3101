"""Disk space for a new run file, reserved before HDF5 writes a byte (HDF5 does not recover
from a failed write)."""

from __future__ import annotations

import errno
import os


def _reserve(path, nbytes) -> None:
    """Fail early and cleanly (``OSError``: ENOSPC, EFBIG) if ``nbytes`` cannot be written at
    ``path``; HDF5 itself does not recover from a failed write. Leaves an empty file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        _fallocate(fd, nbytes)
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _fallocate(fd, nbytes) -> None:
    """Allocate disk blocks for the first ``nbytes`` of ``fd`` (no-op where unsupported)."""
    if nbytes <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
