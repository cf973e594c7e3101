"""``meanfield run``: integrate the particle dynamics over a temperature ladder."""

from __future__ import annotations

import sys
import time


def register(sub):
    p = sub.add_parser(
        "run", help="integrate the mean-field Langevin particles over a temperature ladder",
        description="Integrate N interacting particles (a, w, b) by Euler-Maruyama over the "
                    "temperatures dynamics.taus (hot to cold, each warm-started from the "
                    "previous), writing snapshot frames and observables to an HDF5 run file.",
        epilog="Without CONFIG the embedded default runs: eight points in the plane "
               "(data/plane8.csv), N=4000, lam=0.05, eta=0.05, taus=[1e-2, 1e-3, 1e-4].")
    p.add_argument("config", nargs="?", help="TOML config (see docs/cli.md); default: embedded")
    p.add_argument("-o", "--output", help="run file to write (default: run-<config hash>.h5)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run file")
    p.add_argument("--threads", type=int, default=None, help="numba threads (default: all cores)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def main(args) -> int:
    from meanfield import runner
    t0 = time.time()
    out = runner.run(args.config, args.output, overwrite=args.overwrite,
                     progress=False if args.quiet else None, threads=args.threads)
    sys.stderr.write(f"meanfield: wrote {out} in {time.time() - t0:.1f} s\n")
    print(out)
    return 0
