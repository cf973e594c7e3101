"""Atomic file replacement: the one way ``meanfield`` writes a file that must never be seen
half-written (checkpoints, study manifests, the empty run-file layout, reports, figures).

The content goes to a scratch file in the same folder, which is renamed over the target
(``os.replace``, atomic on POSIX): a reader, or a crash at any moment, sees the previous file
or the new one, never a mixture. ``durable=True`` also ``fsync``-s the scratch file before the
rename and the folder after it, so the new file survives a power loss once the call returns.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def fsync_path(path: str | os.PathLike) -> None:
    """``fsync`` a file or a folder by path (makes its written data durable).

    Parameters
    ----------
    path : path-like
        An existing file or folder.

    Returns
    -------
    None

    Raises
    ------
    OSError
        The path cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replacing(path: str | os.PathLike, *, suffix: str = ".tmp",
              scratch: str | os.PathLike | None = None, durable: bool = False) -> Iterator[Path]:
    """Context manager yielding a scratch path that replaces ``path`` when the block succeeds.

    Parameters
    ----------
    path : path-like
        The file to create or replace.
    suffix : str
        Ending of the default scratch name (a writer that infers the format from the name,
        such as Matplotlib's ``savefig``, needs the real one, e.g. ``".png"``).
    scratch : path-like, optional
        The scratch file's name (same folder as ``path``); default a fresh hidden name
        ``.NAME.XXXXXX`` + ``suffix``. A documented fixed name (``RUN.h5.ckpt.tmp``) lets a reader
        recognise a write in progress.
    durable : bool
        ``fsync`` the scratch file before the rename and the folder after it.

    Yields
    ------
    pathlib.Path
        Where the block writes the new content (the block may create it, or fill the empty
        file that is there).

    Raises
    ------
    OSError
        The scratch file cannot be created, synced or renamed; the block's own exceptions pass
        through. Either way the scratch file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    if scratch is None:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
        os.close(fd)
        tmp = Path(name)
    else:
        tmp = Path(scratch)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_path(path.absolute().parent)


def write_text(path: str | os.PathLike, text: str, *, durable: bool = False) -> None:
    """Replace ``path`` atomically by the UTF-8 ``text`` (see :func:`replacing`).

    Parameters
    ----------
    path : path-like
        The file to create or replace.
    text : str
        Its new content.
    durable : bool
        ``fsync`` the file and its folder.

    Returns
    -------
    None

    Raises
    ------
    OSError
        The file cannot be written; ``path`` is then unchanged.
    """
    with replacing(path, durable=durable) as tmp:
        tmp.write_text(text, encoding="utf-8")
