"""Shared pieces of the benchmarks: the test problem, timing, and the machine header.

Every implementation performs the same full-batch Euler–Maruyama step of THEORY §2 with relu,
``θ_i ← θ_i − η (∇_θ Ψ(θ_i; ρ̂_N)) + sqrt(2ητ) ξ_i``, on the same problem.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np

# Like `meanfield run` (meanfield.runner): idle OpenMP workers sleep unless the environment says
# otherwise. Set before numba or torch start their thread pools (both are imported lazily).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

LAM, ETA, TAU = 0.05, 0.01, 0.01

#: The checkout that holds the benchmarks.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def package_home() -> str:
    """The folder holding the ``solvers`` (and ``analysis``, ``meanfield``) this process
    imports: site-packages for a regular install, the checkout for an editable one or none.

    The benchmarks put the checkout on ``sys.path`` *after* site-packages, so an installed
    package wins; numba keys its cache by the path of the kernels' source file, so the
    benchmark and its subprocesses must import the same files to share one cache.
    """
    import solvers
    return os.path.dirname(os.path.dirname(os.path.abspath(solvers.__file__)))


def package_env(base=None, **extra) -> dict:
    """The environment of a subprocess (``python -m meanfield``, ``python -c``) that imports
    the package this process imports (:func:`package_home`), and so loads the kernels from
    the numba cache this process filled instead of compiling a second one.

    The checkout goes on ``PYTHONPATH`` only when this process imports its packages from it
    (no install, or an editable one: the same files); with a regular install ``PYTHONPATH`` is
    left as it is (minus the checkout), so that the child finds the installed package as this
    process did. ``PYTHONSAFEPATH`` keeps a ``python -c`` child's current folder off its path
    (run in the checkout, it would import the checkout's ``solvers``; ``python -m meanfield``
    drops it by itself). Run the child with ``cwd`` outside the checkout all the same: Python
    before 3.11 ignores ``PYTHONSAFEPATH``."""
    env = dict(os.environ if base is None else base)
    home = package_home()
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
             if p and os.path.abspath(p) != ROOT]
    if home == ROOT:
        parts.insert(0, ROOT)
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        env.pop("PYTHONPATH", None)
    env["PYTHONSAFEPATH"] = "1"
    env.update(extra)
    return env


def child_imports(env, cwd) -> str:
    """``solvers.__file__`` as a subprocess with ``env`` started in ``cwd`` imports it (what
    :func:`package_env` is for: it must be this process's)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import solvers; print(solvers.__file__)"],
                         env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def check_same_package(env, cwd) -> str:
    """Raise SystemExit unless a subprocess with ``env`` in ``cwd`` imports this process's
    ``solvers``; return the line to print."""
    import solvers
    mine = os.path.abspath(solvers.__file__)
    theirs = child_imports(env, cwd)
    if os.path.abspath(theirs) != mine:
        raise SystemExit(f"a subprocess would import {theirs}, this process {mine}: two numba "
                         "caches")
    return f"solvers imported from {mine} (here and in the subprocesses)"


def problem(N, n, d, seed=0):
    """``X`` (n, d), ``y`` (n,), ``theta`` (N, d+2): Gaussian data and particles."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = rng.standard_normal(n)
    theta = 0.5 * rng.standard_normal((N, d + 2))
    return X, y, theta


def time_per_step(run_chunk, steps_per_chunk, *, min_reps=5, budget_s=2.0):
    """Call ``run_chunk()`` (which does ``steps_per_chunk`` steps) repeatedly, after one
    warm-up call, for about ``budget_s`` seconds and at least ``min_reps`` times.

    Returns ``(best, median)`` in ms per step. The best of many short repetitions is the
    least disturbed by other processes on a shared machine.
    """
    run_chunk()
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        run_chunk()
        times.append((time.perf_counter() - t0) / steps_per_chunk * 1e3)
    return min(times), statistics.median(times)


def set_threads(threads):
    """Pin numba, BLAS (threadpoolctl) and, if present, torch to ``threads`` threads."""
    import numba
    numba.set_num_threads(threads)
    try:
        import threadpoolctl
        threadpoolctl.threadpool_limits(threads)
    except ImportError:  # pragma: no cover
        pass
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        pass


def header(threads):
    """Lines describing the machine and the settings (printed before every table)."""
    import numba
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    cpu = platform.processor() or platform.machine()
    lines = [f"machine: {cpu}, {os.cpu_count()} logical CPUs, "
             f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
             f"threads: {threads}   numba {numba.__version__}   numpy {np.__version__}   "
             f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}"]
    if load[0] > 0.5 * (os.cpu_count() or 1):
        lines.append("WARNING: the machine is busy; timings are upper bounds. Rerun on an idle "
                     "machine.")
    return lines


def peak_traced(fn):
    """Run ``fn()`` under tracemalloc; return ``(result, peak bytes)`` of Python/NumPy
    allocations (numba's internal allocations are not traced)."""
    import tracemalloc
    tracemalloc.start()
    try:
        res = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return res, peak
