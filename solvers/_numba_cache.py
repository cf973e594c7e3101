"""numba's compilation cache, made to fall back instead of failing.

The kernels are compiled with ``cache=True``: numba keeps the machine code in an index file
(``*.nbi``) and data files (``*.nbc``) next to the source (``__pycache__``), under
``NUMBA_CACHE_DIR``, or in ``~/.cache/numba``. numba itself fails on two environments that are
not the user's fault:

- a damaged cache file (an interrupted write, a full disk, a copied tree): unpickling it raises
  ``UnpicklingError``, ``EOFError`` or ``ValueError`` from inside the first kernel call;
- no writable cache folder at all: ``RuntimeError: cannot cache function ...: no locator
  available`` when the module is imported;

and silently ignores an unwritable ``NUMBA_CACHE_DIR`` (it caches elsewhere, or nowhere).
A third failure is a race: numba's ``save`` reads a kernel's index, picks the first free data
file number and writes both without a lock, so two processes compiling different signatures
of one kernel into one cache (two runs on data of different ``d``, or a run and the background
compile of the other dimensions, ``solvers.stepper.compile_in_background``) can give both the
same number; the index then names machine code of another signature, and the next process to
load it crashes (SIGSEGV, seen in the test suite on an empty cache).

:func:`install` (run when ``solvers._kernels`` or ``solvers.arrangement`` is imported) makes a
damaged file a cache miss (the file is removed, the kernel compiled again and the cache
rewritten), a missing cache folder a compilation without cache, notes where the kernels
are cached when ``NUMBA_CACHE_DIR`` cannot be written, and serialises every save and load of a
kernel's cache entries with a file lock next to its index (``flock``: exclusive to save,
shared to load), so that concurrent processes never share a data file. Each case is reported once
as a :class:`NumbaCacheWarning` of one line; the command line prints it as a note. Writing the
cache is left as it is: a failure to write (full disk) is an error that names the cache file.
"""

from __future__ import annotations

import contextlib
import os
import warnings

try:
    import fcntl
except ImportError:                          # pragma: no cover - not POSIX: numba's own
    fcntl = None  # type: ignore[assignment]

__all__ = ["NumbaCacheWarning", "install"]


class NumbaCacheWarning(UserWarning):
    """numba's compilation cache could not be used as it is; the kernels are compiled again.
    The message is one line for the user."""


_INSTALLED = False
_REPORTED: set = set()


def _note(key, message: str) -> None:
    """Warn once per ``key`` (a cache folder; one line however many of its files are bad)."""
    if key not in _REPORTED:
        _REPORTED.add(key)
        warnings.warn(NumbaCacheWarning(message), stacklevel=4)


def _first_line(exc) -> str:
    text = (str(exc).splitlines() or [""])[0][:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _drop(path: str, exc) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
    _note(os.path.dirname(path),
          f"numba cache file {path} is damaged ({_first_line(exc)}); removed the damaged "
          "cache files, compiling the kernels again")


def _check_user_dir(dispatcher) -> None:
    """Note once when ``NUMBA_CACHE_DIR`` is set but numba, unable to write there, silently
    caches somewhere else."""
    from numba.core import caching, config
    if not config.CACHE_DIR:
        return
    locator = getattr(getattr(getattr(dispatcher, "_cache", None), "_impl", None), "locator",
                      None)
    if locator is None or isinstance(locator, caching.UserProvidedCacheLocator):
        return
    _note("user dir", f"NUMBA_CACHE_DIR={config.CACHE_DIR} cannot be written; numba caches the "
                      f"kernels in {locator.get_cache_path()} instead")


@contextlib.contextmanager
def _locked(cache_file, exclusive: bool):
    """Hold the lock of ``cache_file``'s index (``<index>.lock`` beside it) while the body
    runs: exclusive for a save, shared for a load. Where the lock file cannot be opened (a
    read-only cache folder: nothing is saved there) or ``fcntl`` is missing, no lock."""
    fh = None
    if fcntl is not None:
        try:
            fh = open(cache_file._index_path + ".lock", "a")
        except OSError:
            fh = None
    if fh is None:
        yield
        return
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def install() -> None:
    """Patch numba's cache classes once (idempotent); see the module docstring.

    Nothing is patched when this numba lacks the internals relied upon
    (``numba.core.caching.IndexDataCacheFile._load_index`` / ``_load_data``,
    ``numba.core.dispatcher.Dispatcher.enable_caching``): numba's own behaviour is kept.
    """
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    try:
        from numba.core import caching, dispatcher
        cache_file = caching.IndexDataCacheFile
        load_index, load_data = cache_file._load_index, cache_file._load_data
        save, load = cache_file.save, cache_file.load
        enable_caching = dispatcher.Dispatcher.enable_caching
    except (ImportError, AttributeError):     # pragma: no cover - another numba layout
        return

    def _load_index(self):
        try:
            return load_index(self)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unpickling failure: a damaged index
            _drop(self._index_path, exc)
            return {}

    def _load_data(self, name):
        try:
            return load_data(self, name)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unpickling failure: a damaged file
            path = self._data_path(name)
            _drop(path, exc)
            # numba's load() reads an OSError as "the file went away": a cache miss
            raise FileNotFoundError(path) from None

    def _enable_caching(self):
        try:
            enable_caching(self)
            _check_user_dir(self)
        except RuntimeError as exc:
            if "no locator available" not in str(exc):
                raise
            _note("no locator",
                  "numba has no writable cache folder (neither NUMBA_CACHE_DIR, nor __pycache__ "
                  f"next to {self.py_func.__code__.co_filename}, nor ~/.cache/numba): the "
                  "kernels are compiled again on every run; set NUMBA_CACHE_DIR to a writable "
                  "folder")

    def _save(self, key, data):
        with _locked(self, exclusive=True):      # one number per data file, see above
            return save(self, key, data)

    def _load(self, key):
        with _locked(self, exclusive=False):
            return load(self, key)

    cache_file._load_index = _load_index
    cache_file._load_data = _load_data
    cache_file.save = _save
    cache_file.load = _load
    dispatcher.Dispatcher.enable_caching = _enable_caching
