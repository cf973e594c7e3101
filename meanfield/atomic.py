"""Atomic file replacement: the one way ``meanfield`` writes a file that must never be seen
half-written (checkpoints, study manifests, the empty run-file layout, reports, figures), and
its counterpart for a folder written as a whole (:func:`replacing_dir`, report folders).

The content goes to a scratch file in the same folder, which is renamed over the target
(``os.replace``, atomic on POSIX): a reader, or a crash at any moment, sees the previous file
or the new one, never a mixture. ``durable=True`` also ``fsync``-s the scratch file before the
rename and the folder after it, so the new file survives a power loss once the call returns.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from meanfield import interrupts
from meanfield.errors import InputError


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
    held = interrupts.hold()     # a signal before the ``try`` would leave the scratch file
    try:
        if scratch is None:
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix,
                                        dir=path.parent)
            os.close(fd)
            tmp = Path(name)
        else:
            tmp = Path(scratch)
    except BaseException:
        interrupts.release(held)
        raise
    try:
        interrupts.release(held)
        yield tmp
        interrupts.raise_pending()        # a swallowed SIGTERM publishes nothing
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

    Raises
    ------
    OSError
        The file cannot be written; ``path`` is then unchanged.
    """
    with replacing(path, durable=durable) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def replacing_dir(final, field: str = "-o", replaceable=None):
    """Yield a temporary folder next to ``final``; when the block succeeds it becomes
    ``final`` (replacing an existing one), otherwise it is deleted and ``final`` is untouched.

    Parameters
    ----------
    final : path-like
        The folder to produce. The caller owns it (:func:`meanfield.ownership.claim`). A
        symbolic link is written through: the folder it points to is produced, the link stays.
    field : str
        The option that named it, for messages.
    replaceable : callable(Path) -> bool, optional
        Decides whether an existing ``final`` may be replaced (e.g. it holds only files of a
        previous report); default: always.

    Raises
    ------
    InputError
        ``final`` exists and may not be replaced, or a file could not be written (the message
        names it, under its final name, and the reason, e.g. "File too large").
    """
    final = Path(final)
    if final.is_symlink():      # written through: the link stays, its target is replaced
        final = Path(os.path.realpath(final))
    parent = final.absolute().parent
    if final.exists() and not final.is_dir():
        raise InputError(str(final), field, "is a file, expected a folder")
    if final.exists() and replaceable is not None and not replaceable(final):
        raise InputError(str(final), field, "holds files this command did not write; choose "
                                            "another folder (nothing was replaced)")
    held = interrupts.hold()     # a signal before the ``try`` would leave the folder
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        interrupts.release(held)
        raise InputError(str(final), field, f"cannot write in {parent} "
                                            f"({exc.strerror or exc})") from None
    except BaseException:
        interrupts.release(held)
        raise
    try:
        interrupts.release(held)
        try:
            yield tmp
        except OSError as exc:
            from meanfield.io_failures import describe
            what, reason = describe(exc, tmp, within=tmp)
            with contextlib.suppress(ValueError):
                what = final / Path(what).relative_to(tmp.absolute())
                what = what.with_name(what.name.removesuffix(".tmp"))
            raise InputError(str(what), "", f"cannot write ({reason}); nothing written to "
                                            f"{final}") from None
        interrupts.raise_pending()        # a swallowed SIGTERM publishes nothing
        # the commit runs to its end: a signal now is delivered once the new folder is in
        # place and the old one removed (no ``.old`` folder left behind by a signal)
        with interrupts.deferred():
            _commit_dir(tmp, final, parent, field)
    finally:
        if tmp.exists():
            _remove(tmp)


def _commit_dir(tmp: Path, final: Path, parent: Path, field: str) -> None:
    """Rename the complete folder ``tmp`` to ``final``, moving an existing ``final`` aside
    first and removing it after; on failure ``final`` is put back."""
    old = None
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".old",
                                        dir=parent))
            os.replace(final, old / final.name)
        os.replace(tmp, final)
    except OSError as exc:
        if old is not None and (old / final.name).exists() and not final.exists():
            os.replace(old / final.name, final)
        raise InputError(str(final), field, f"cannot replace ({exc.strerror or exc}); "
                                            "left as it was") from None
    finally:
        if old is not None:
            _remove(old)
