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
