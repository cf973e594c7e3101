"""Compile time and step speed of the kernels with d at run time against those specialised per d.

``solvers._kernels`` compiles either one kernel per input dimension ``d`` (``dims`` a d-tuple:
the loops over coordinates unroll) or one kernel for every ``d`` (``dims = ()``: ``d`` read from
the particles' shape at run time). This benchmark measures, for each ``d``:

- ``--compile``: the seconds of the first ``Stepper.advance`` in a fresh process with an empty,
  private numba cache (``NUMBA_CACHE_DIR`` in a temporary folder; nobody else's cache is read or
  written), for each variant; then the same in a second process on the filled cache (a warm
  start), and for the run-time variant a process with another ``d`` on that cache (what a
  second data set costs).
- ``--speed``: ms per step (full batch, relu, Euler–Maruyama, noise on) of both variants on the
  same problem in one process, in paired repetitions whose order alternates, so that the
  ratio is taken pair by pair on a machine whose speed drifts; medians are printed.

Usage::

    python benchmarks/bench_dims.py --compile --d 1 2 3 5      # minutes per d and variant
    python benchmarks/bench_dims.py --speed --d 1 2 3 5        # N=10^4, n=20, 2 threads
    python benchmarks/bench_dims.py --speed --N 100000 --n 50 --reps 15
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# benchmarks.common from this checkout; solvers as installed (an installed package comes first,
# so the kernels and their numba cache are the ones `meanfield run` uses)
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import ETA, LAM, TAU, header, problem, set_threads  # noqa: E402

VARIANTS = ("specialised", "run-time d")

_CHILD = r"""
import json, sys, time
sys.path.append(sys.argv[3])            # benchmarks.common; solvers as installed
t0 = time.perf_counter()
from solvers.stepper import Stepper
from benchmarks.common import problem
t1 = time.perf_counter()
d, variant = int(sys.argv[1]), sys.argv[2]
X, y, theta = problem(1000, 8, d)
st = Stepper(X, y, len(theta), lam=0.05, eta=0.01)
st.dims = (0,) * d if variant == "specialised" else ()
c1 = time.process_time()
st.advance(theta, 0.01, 0, 1)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_step_s": t2 - t1,
                  "first_step_cpu_s": time.process_time() - c1}))
"""


def _child(d, variant, cache):
    """Wall and CPU seconds of the first step of a fresh process on the numba cache folder
    ``cache`` (numba compiles on one thread: on a busy machine the CPU seconds are what an
    idle core would take)."""
    from benchmarks.common import ROOT, package_env
    # the solvers this process imports (the installed one), in a folder outside the checkout
    res = subprocess.run([sys.executable, "-c", _CHILD, str(d), variant, ROOT],
                         env=package_env(NUMBA_CACHE_DIR=cache), cwd=cache,
                         capture_output=True, text=True, timeout=3600)
    if res.returncode:
        raise SystemExit(f"bench_dims: the compile child failed:\n{res.stderr}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return out["first_step_s"], out["first_step_cpu_s"]


def compile_times(ds):
    """One row per d for the specialised kernels and one for the run-time kernel (the same
    for every d): cold compile, warm load, and (run-time d) the next d on that cache."""
    print("seconds of the first step, wall (CPU): cold = empty cache, warm = the filled cache, "
          "next d = d+1 on it")
    print(f"{'d':>3} {'variant':>12} {'cold':>15} {'warm':>13} {'next d':>13}")
    rows = [(d, VARIANTS[0]) for d in ds] + [(ds[0], VARIANTS[1])]

    def fmt(t, width):
        return f"{t[0]:.1f} ({t[1]:.1f})".rjust(width)

    for d, variant in rows:
        with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
            cold = _child(d, variant, cache)
            warm = _child(d, variant, cache)
            other = _child(d + 1, variant, cache) if variant == VARIANTS[1] else None
        nxt = fmt(other, 13) if other is not None else f"{'-':>13}"
        print(f"{d:>3} {variant:>12} {fmt(cold, 15)} {fmt(warm, 13)} {nxt}", flush=True)


def speeds(ds, N, n, reps, steps):
    """Paired, alternating repetitions of ``steps`` steps of both variants, per d."""
    from solvers.stepper import Stepper
    print(f"N={N} n={n} steps per repetition={steps} repetitions={reps}")
    print(f"{'d':>3} {'specialised ms':>15} {'run-time ms':>12} {'ratio rt/spec':>14} "
          f"{'ratio min..max':>16}")
    for d in ds:
        X, y, theta = problem(N, n, d)
        runs = {}
        first = {}
        for variant in VARIANTS:
            st = Stepper(X, y, N, lam=LAM, eta=ETA, seed=0)
            st.dims = (0,) * d if variant == "specialised" else ()
            th = theta.copy()
            t0 = time.perf_counter()
            st.advance(th, TAU, 0, 2)                 # compile (or load) and warm up
            first[variant] = time.perf_counter() - t0
            runs[variant] = [st, th, 2]
        print(f"    first advance (compile or cache load) at d={d}: " + ", ".join(
            f"{v} {first[v]:.1f} s" for v in VARIANTS), flush=True)
        # both variants are the same chain: equal particles after equal steps
        a, b = runs[VARIANTS[0]], runs[VARIANTS[1]]
        if a[1].tobytes() != b[1].tobytes():
            raise SystemExit(f"bench_dims: the variants differ at d={d}")
        times = {v: [] for v in VARIANTS}
        ratios = []
        for r in range(reps):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            got = {}
            for v in order:
                st, th, s0 = runs[v]
                t0 = time.perf_counter()
                st.advance(th, TAU, s0, steps)
                got[v] = (time.perf_counter() - t0) / steps * 1e3
                runs[v][2] += steps
            for v in VARIANTS:
                times[v].append(got[v])
            ratios.append(got[VARIANTS[1]] / got[VARIANTS[0]])
        print(f"{d:>3} {statistics.median(times[VARIANTS[0]]):15.3f} "
              f"{statistics.median(times[VARIANTS[1]]):12.3f} {statistics.median(ratios):14.3f} "
              f"{min(ratios):7.2f}..{max(ratios):<7.2f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile", action="store_true", help="cold and warm compile times")
    ap.add_argument("--speed", action="store_true", help="paired step timings")
    ap.add_argument("--d", type=int, nargs="+", default=[1, 2, 3, 5])
    ap.add_argument("--N", type=int, default=10_000)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if not (args.compile or args.speed):
        ap.error("give --compile, --speed or both")
    set_threads(args.threads)
    print("\n".join(header(args.threads)))
    if args.compile:
        compile_times(args.d)
    if args.speed:
        speeds(args.d, args.N, args.n, args.reps, args.steps)


if __name__ == "__main__":
    main()
