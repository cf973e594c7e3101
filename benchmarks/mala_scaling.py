"""Cost per particle of the exact sampler's passes against N, beside a two-thread Euler step.

    python benchmarks/mala_scaling.py                       # N = 1e3 .. 1e6, n = 20, d = 2
    python benchmarks/mala_scaling.py --Ns 1000 10000 --blocks 4 --budget 1

Per ``N``, in one process: one Euler–Maruyama step on ``--threads`` threads, one sequential pass
(``integrator = "mala"``, jump share 0.1, radial moves) and one blocked pass per ``--blocks``
(``Stepper(block=b)``), all on the problem of ``benchmarks/bench_step.py`` (Gaussian data and
particles, ``λ = 0.05``, ``η = 0.01``, ``τ = 0.01``). Printed: ms per step or pass (best of
repeated timed calls), ns per particle, the pass in Euler steps, and the spread of the cost
per particle over ``N`` (largest / smallest; issue 44's target: within 15 % from 10³ to 10⁶).
"""

from __future__ import annotations

import argparse
import os
import sys

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_step import Ours  # noqa: E402
from benchmarks.common import header, problem, set_threads, time_per_step  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--Ns", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--blocks", type=int, nargs="*", default=[4, 16])
    ap.add_argument("--threads", type=int, default=2, help="Euler's threads (2)")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per row (2)")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    print("\n".join(header(args.threads)))
    names = ["euler", "seq"] + [f"b{b}" for b in args.blocks]
    per = {k: {} for k in names}
    print(f"\n| N | Euler ms | pass ms | {' | '.join(f'block {b} ms' for b in args.blocks)} | "
          f"ns/particle: Euler, pass{''.join(f', b{b}' for b in args.blocks)} | "
          f"pass / Euler{''.join(f', b{b} / Euler' for b in args.blocks)} |")
    print("|---" * (5 + len(args.blocks)) + "|")
    for N in args.Ns:
        X, y, theta = problem(N, args.n, args.d)
        steps = max(1, min(50, 200_000 // N))
        impls = {"euler": Ours(X, y, theta),
                 "seq": Ours(X, y, theta, integrator="mala", jumps=0.1, radial=1.0)}
        for b in args.blocks:
            impls[f"b{b}"] = Ours(X, y, theta, integrator="mala", jumps=0.1, radial=1.0,
                                  block=b)
        ms = {}
        for k, impl in impls.items():
            best, _ = time_per_step(lambda impl=impl, k=steps: impl.run(k), steps,
                                    budget_s=args.budget, min_reps=3)
            ms[k] = best
            per[k][N] = best * 1e6 / N
        print(f"| {N} | {ms['euler']:.3f} | {ms['seq']:.3f} | "
              + " | ".join(f"{ms[f'b{b}']:.3f}" for b in args.blocks)
              + " | " + ", ".join(f"{per[k][N]:.0f}" for k in names)
              + " | " + ", ".join(f"{ms[k] / ms['euler']:.1f}" for k in names[1:]) + " |",
              flush=True)
    print("\ncost per particle, largest / smallest over N: "
          + ", ".join(f"{k} {max(v.values()) / min(v.values()):.2f}" for k, v in per.items())
          + " (target for the passes: <= 1.15)")


if __name__ == "__main__":
    main()
