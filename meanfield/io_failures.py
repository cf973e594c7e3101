"""Which file an I/O failure (an ``OSError``) is about, and why, in words (the numerical
failures of the reference solvers are :mod:`solvers.numerical`).

An ``OSError`` raised by ``write()`` (full disk, file-size limit) carries no file name, and
the failure may come from a file the command did not choose: numba's compilation cache, a
temporary file of a library. :func:`describe` finds the file from the error or, failing
that, from the frames that raised it, so that messages name the real file.
"""

from __future__ import annotations

import os
import re


def _numba_cache_file(tb):
    """The cache file numba was writing when the traceback ``tb`` was raised, if any."""
    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename.replace(os.sep, "/").endswith("numba/core/caching.py"):
            loc = frame.f_locals
            for key in ("path", "filepath"):
                if isinstance(loc.get(key), str):
                    found = loc[key]
                    break
            else:
                owner = loc.get("self")
                for attr in ("_index_path", "_cache_path"):
                    if isinstance(getattr(owner, attr, None), str):
                        found = getattr(owner, attr)
                        break
        tb = tb.tb_next
    return found


def reason(exc) -> str:
    """The reason of an ``OSError`` (``"File too large"``) or of an HDF5 write failure."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    m = re.search(r"error message = '([^']*)'", str(exc))
    if m:
        return m.group(1)
    text = str(exc).split("(")[0].strip()
    return text or type(exc).__name__


def _file_within(tb, folder):
    """The innermost path under ``folder`` held by a local variable of the frames of ``tb``
    (e.g. the PNG that matplotlib was writing when ``write()`` failed)."""
    root = os.path.abspath(folder) + os.sep
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, (str, os.PathLike)):
                try:
                    path = os.path.abspath(os.fspath(value))
                except (TypeError, ValueError):
                    continue
                if path.startswith(root):
                    return path
    return None


def describe(exc, default, within=None) -> tuple[str, str]:
    """``(file, reason)`` of an I/O failure.

    Parameters
    ----------
    exc : BaseException
        Usually an ``OSError``.
    default : path-like
        The file the caller was writing, named when nothing more precise is known.
    within : path-like, optional
        A folder being written: a file under it that the failing code was handling is named.

    Returns
    -------
    (str, str)
        The file (``"numba cache file PATH"`` for numba's compilation cache) and the reason.
    """
    cache = _numba_cache_file(exc.__traceback__)
    if cache is not None:
        return f"numba cache file {cache}", reason(exc) + (
            "; set NUMBA_CACHE_DIR to a writable folder with free space")
    name = getattr(exc, "filename", None)
    if isinstance(name, (str, os.PathLike)) and str(name):
        return str(name), reason(exc)
    if within is not None:
        found = _file_within(exc.__traceback__, within)
        if found is not None:
            return found, reason(exc)
    return str(default), reason(exc)


def is_numba_cache_failure(exc) -> bool:
    """Whether ``exc`` was raised while numba wrote or read its compilation cache."""
    return _numba_cache_file(getattr(exc, "__traceback__", None)) is not None
