"""Settings of the process environment that break every command, checked before any work.

:func:`check_numba_settings` reads numba's own environment variables (``NUMBA_NUM_THREADS``,
``NUMBA_THREADING_LAYER``, ``NUMBA_THREADING_LAYER_PRIORITY``) before numba reads them: a value
numba cannot use would otherwise be a traceback deep inside the first parallel kernel, after the
run's files were created (a ``RUN.h5.part`` left behind), or a multi-line warning on every
command. It raises :class:`meanfield.errors.InputError` (exit code 2, one line).

:func:`thread_limit` tells a resource limit apart from an interrupt: when no thread can be
started (``ulimit -u``, a cgroup's ``pids.max``), OpenBLAS raises SIGINT on itself while NumPy
loads, which Python reports as a Ctrl-C.
"""

from __future__ import annotations

import os
import threading

from meanfield.errors import InputError

#: The values of ``NUMBA_THREADING_LAYER`` numba knows (lower case).
THREADING_LAYERS = ("default", "safe", "threadsafe", "forksafe", "tbb", "omp", "workqueue")
#: The named backends, which ``NUMBA_THREADING_LAYER_PRIORITY`` orders.
_BACKENDS = ("tbb", "omp", "workqueue")
#: The backends each threading layer may use (numba.np.ufunc.parallel._launch_threads, Linux).
_CANDIDATES = {"tbb": ("tbb",), "omp": ("omp",), "workqueue": ("workqueue",),
               "safe": ("tbb",), "threadsafe": ("tbb", "omp"), "forksafe": ("tbb", "workqueue")}
#: What to install for a backend that does not load.
_INSTALL = {"tbb": "Intel TBB (pip install tbb)", "omp": "an OpenMP runtime (libgomp or "
                                                         "pip install intel-openmp)"}


def _error(var: str, value: str, reason: str) -> InputError:
    return InputError(f"environment variable {var}={value!r}", "", reason)


def check_numba_settings(environ=None) -> None:
    """Refuse numba settings that would fail every command (exit 2, one line).

    ``NUMBA_NUM_THREADS`` must be a whole number >= 1 (as numba's ``int()`` reads it);
    ``NUMBA_THREADING_LAYER`` one of :data:`THREADING_LAYERS` whose backend loads here (only
    an explicit layer other than ``default`` is loaded to check it: ``default`` falls back to
    the ``workqueue`` that ships with numba); ``NUMBA_THREADING_LAYER_PRIORITY`` an order of
    ``tbb omp workqueue``.

    Raises
    ------
    InputError
        Naming the variable, its value, the reason and the way out.
    """
    env = os.environ if environ is None else environ
    value = env.get("NUMBA_NUM_THREADS")
    if value is not None:
        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < 1:
            raise _error("NUMBA_NUM_THREADS", value, "must be a whole number >= 1 (numba's "
                         "thread count); unset it to use every core, or use "
                         "'meanfield run --threads K'")
    order = env.get("NUMBA_THREADING_LAYER_PRIORITY")
    if order is not None and sorted(order.split()) != sorted(_BACKENDS):
        raise _error("NUMBA_THREADING_LAYER_PRIORITY", order,
                     "must order the three backends 'tbb omp workqueue' (e.g. "
                     "'omp tbb workqueue'), or be unset")
    layer = env.get("NUMBA_THREADING_LAYER")
    if layer is None:
        return
    name = layer.strip().lower()
    if name not in THREADING_LAYERS:
        raise _error("NUMBA_THREADING_LAYER", layer, "is not a threading layer numba knows; "
                     f"use one of {', '.join(THREADING_LAYERS)}, or unset it")
    if name == "default":
        return
    candidates = _CANDIDATES[name]
    if not any(_backend_loads(b) for b in candidates):
        needs = " or ".join(_INSTALL[b] for b in candidates if b in _INSTALL)
        raise _error("NUMBA_THREADING_LAYER", layer, f"the {name} threading layer does not "
                     f"load here: it needs {needs}; install it, or unset the variable (numba "
                     "then picks a layer that loads)")


def _backend_loads(backend: str) -> bool:
    """Whether numba's ``backend`` threading pool loads (its compiled module imports)."""
    if backend == "workqueue":
        return True
    import importlib
    try:
        if backend == "tbb":
            from numba.np.ufunc import parallel
            check = getattr(parallel, "_check_tbb_version_compatible", None)
            if check is not None:
                check()                  # an old TBB: ImportError, as numba treats it
        importlib.import_module(f"numba.np.ufunc.{backend}pool")
    except (ImportError, OSError):
        return False
    return True


def thread_limit() -> str | None:
    """``None`` when a thread can be started now; otherwise the reason, naming the limit (the
    line the command line prints, exit code 1)."""
    try:
        t = threading.Thread(target=lambda: None, daemon=True)
        t.start()
        t.join()
        return None
    except RuntimeError:
        pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        if soft == resource.RLIM_INFINITY:
            soft = None
    except (ImportError, AttributeError, OSError, ValueError):
        soft = None
    if soft is not None:
        where = (f"the limit on this user's processes and threads is reached (ulimit -u = "
                 f"{soft}); raise it (e.g. ulimit -u 4096) or end some of them")
    else:
        where = ("the system's limit on processes and threads is reached (a container's "
                 "pids.max or kernel.threads-max); raise it or end some of them")
    return f"cannot start a thread: {where}"
