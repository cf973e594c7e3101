"""Bounded long computations: the ray linkage of a large snapshot on a mass-weighted sample
against the full k-nearest-neighbour tree, and the count of P (closed form, refusal, rate).

    python benchmarks/bench_bounded.py [--N 200000] [--d 2 10] [--exact-linkage]

Prints, per ``d``: the ray analysis time of ``N`` particles on three planted rays with the
sampled linkage (and with ``--exact-linkage`` the full tree, with the counts of both); then
the time of Cover's closed form at ``n = 30, d = 40``, the refusal of ``n = 40, d = 10`` with
its estimated time, and the float count's rate at ``n = 40, d = 6``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# after site-packages: an installed package is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

import analysis.ray_linkage as rl  # noqa: E402
from analysis.dichotomies import TooManyRegions, count_dichotomies  # noqa: E402
from analysis.rays import find_rays  # noqa: E402
from analysis.synthetic import planted_rays  # noqa: E402


def linkage(N, d, exact):
    rng = np.random.default_rng(0)
    theta, _ = planted_rays(rng.standard_normal((3, d + 1)), [0.5, -0.3, 0.2], N, seed=1)
    X = rng.standard_normal((10, d))
    caps = [rl.LINKAGE_MAX_PARTICLES] + ([10**12] if exact else [])
    cap0 = rl.LINKAGE_MAX_PARTICLES
    try:
        for cap in caps:
            rl.LINKAGE_MAX_PARTICLES = cap
            t = time.perf_counter()
            res = find_rays(theta, X)
            how = "full tree" if cap > N else f"sample of {cap}"
            print(f"rays  N={N} d={d} {how:>16}: J={len(res.rays)} masses "
                  f"{[round(q.mass_fraction, 4) for q in res.rays]}  "
                  f"{time.perf_counter() - t:7.1f} s")
    finally:
        rl.LINKAGE_MAX_PARTICLES = cap0


def dichotomies():
    count_dichotomies(np.random.default_rng(0).standard_normal((5, 2)))      # load the kernel
    X = np.random.default_rng(1).standard_normal((30, 40))
    t = time.perf_counter()
    res = count_dichotomies(X)
    print(f"P     n=30 d=40: {res.P} ({res.method}) in {time.perf_counter() - t:.3f} s")
    X = np.random.default_rng(1).standard_normal((40, 10))
    t = time.perf_counter()
    try:
        count_dichotomies(X)
    except TooManyRegions as exc:
        print(f"P     n=40 d=10: refused after {time.perf_counter() - t:.2f} s: up to "
              f"{exc.bound:.3g} regions, about {exc.seconds:.0f} s at {exc.rate:.3g}/s")
    X = np.random.default_rng(1).standard_normal((40, 6))
    t = time.perf_counter()
    res = count_dichotomies(X)
    el = time.perf_counter() - t
    print(f"P     n=40 d=6: {res.P} ({res.method}) in {el:.2f} s, {res.P / el:.3g} regions/s")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, default=200_000)
    ap.add_argument("--d", type=int, nargs="+", default=[2, 10])
    ap.add_argument("--exact-linkage", action="store_true")
    args = ap.parse_args(argv)
    for d in args.d:
        linkage(args.N, d, args.exact_linkage)
    dichotomies()


if __name__ == "__main__":
    main()
