"""Time of the exact count P for n Gaussian points in d = 2..5 (target: n = 50, d = 4 in at
most 2 s on two cores), float and exact modes, against Cover's formula.

    python benchmarks/bench_dichotomies.py [--n 50] [--dims 2 3 4 5] [--exact-dims 2 3 4]

The first float call includes loading (or, on a fresh checkout, compiling) the numba kernel;
it is reported separately.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

from analysis.dichotomies import count_dichotomies, cover


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 3, 4, 5])
    ap.add_argument("--exact-dims", type=int, nargs="*", default=[2, 3, 4])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    t = time.perf_counter()
    count_dichotomies(np.random.default_rng(0).standard_normal((5, 2)))
    print(f"kernel load/compile: {time.perf_counter() - t:.2f} s")
    for d in args.dims:
        X = np.random.default_rng(d).standard_normal((args.n, d))
        best = np.inf
        for _ in range(args.repeat):
            t = time.perf_counter()
            res = count_dichotomies(X)
            best = min(best, time.perf_counter() - t)
        print(f"float  n={args.n} d={d}: P={res.P} (Cover {cover(args.n, d)}), {best:7.3f} s, "
              f"tolerance range [{res.tol_range[0]:.2g}, {res.tol_range[1]:.2g})")
    for d in args.exact_dims:
        X = np.random.default_rng(d).standard_normal((args.n, d))
        t = time.perf_counter()
        res = count_dichotomies(X, exact=True)
        print(f"exact  n={args.n} d={d}: P={res.P}, {time.perf_counter() - t:7.3f} s")


if __name__ == "__main__":
    main()
