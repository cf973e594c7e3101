"""Scaling of our kernel: time and memory per step over N, n and d.

Sweeps one of ``N ∈ {10³ … 10⁶}``, ``n ∈ {5 … 200}``, ``d ∈ {1 … 10}`` at a time around the
base point ``N = 10⁴, n = 20, d = 2`` (relu, full batch, noise included). Linear cost shows as a
constant ``ns/(N·n)`` along the N and n sweeps; along the d sweep the work per particle-sample
grows like ``d`` (pre-activation and input gradient) plus a constant.

Peak memory is what tracemalloc sees while the stepper is built and run (all NumPy buffers,
the particles included); it should be ``O(N (n/512 + d))``.

Usage::

    python benchmarks/bench_scaling.py            # full sweep (d <= 4: one compile each)
    python benchmarks/bench_scaling.py --quick    # N up to 10^5, n up to 50, d in {1, 2}
"""

from __future__ import annotations

import argparse
import os
import sys

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import (
    ETA,
    LAM,
    TAU,
    header,
    peak_traced,
    problem,
    set_threads,
    time_per_step,
)

FULL = {"N": [10**3, 10**4, 10**5, 10**6], "n": [5, 20, 50, 200], "d": [1, 2, 5, 10]}
QUICK = {"N": [10**3, 10**4, 10**5], "n": [5, 20, 50], "d": [1, 2]}
BASE = {"N": 10**4, "n": 20, "d": 2}


def measure(N, n, d, budget):
    from solvers.stepper import Stepper

    # compile this d first, so that the traced peak holds the run's buffers, not the compiler's
    Xw, yw, thw = problem(600, 3, d)
    Stepper(Xw, yw, 600, lam=LAM, eta=ETA).advance(thw, TAU, 0, 1)

    def build():
        X, y, theta = problem(N, n, d)
        st = Stepper(X, y, N, lam=LAM, eta=ETA, seed=0)
        st.advance(theta, TAU, 0, 1)
        return st, theta

    (st, theta), peak = peak_traced(build)
    k = max(10, min(50, int(4e6 / (N * n))))   # steps per call: per-call costs amortised
    state = {"step": 1}

    def chunk():
        st.advance(theta, TAU, state["step"], k)
        state["step"] += k

    best, med = time_per_step(chunk, k, min_reps=3, budget_s=budget)
    return best, med, peak


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="numba threads (2)")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per row (2)")
    ap.add_argument("--quick", action="store_true", help="smaller sweep, 0.5 s per row")
    args = ap.parse_args(argv)
    grid = QUICK if args.quick else FULL
    budget = 0.5 if args.quick else args.budget
    set_threads(args.threads)
    print("\n".join(header(args.threads)))
    print("our kernel, relu, full batch, noise included; one parameter swept at a time around "
          f"N={BASE['N']}, n={BASE['n']}, d={BASE['d']}")
    print()
    print(f"{'N':>8s} {'n':>4s} {'d':>3s} {'ms/step':>9s} {'median':>9s} {'ns/(N.n)':>9s} "
          f"{'ns/(N.n.(d+2))':>15s} {'peak MiB':>9s} {'B/particle':>10s}")
    rows = []
    seen = set()
    for key in ("N", "n", "d"):
        for v in grid[key]:
            p = dict(BASE, **{key: v})
            t = (p["N"], p["n"], p["d"])
            if t in seen:
                continue
            seen.add(t)
            best, med, peak = measure(*t, budget)
            N, n, d = t
            rows.append((N, n, d, best, med, peak))
            print(f"{N:8d} {n:4d} {d:3d} {best:9.3f} {med:9.3f} {best * 1e6 / (N * n):9.2f} "
                  f"{best * 1e6 / (N * n * (d + 2)):15.3f} {peak / 2**20:9.2f} "
                  f"{peak / N:10.0f}", flush=True)
    return rows


if __name__ == "__main__":
    main()
