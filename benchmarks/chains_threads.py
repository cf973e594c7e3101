"""Chains as the parallel axis of the sequential sampler (``integrator = "mala"``).

A Metropolis-adjusted pass moves one particle at a time, so one particle system uses one core;
``K`` independent chains (``dynamics.chains``) step in parallel threads
(``solvers.langevin.simulate``). This times the same ``K`` chains stepped on one numba thread
(one chain after the other, the peer) and on ``--threads`` threads, in one process, checks that
the particles come out bitwise equal, and prints the ratio. Also for ``"em"``, whose kernel is
parallel within one system (its chains run one after the other on every thread).

    python benchmarks/chains_threads.py --chains 2 4 --passes 400 --N 2000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numba
import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from solvers.langevin import chain_seed, initial_state, simulate  # noqa: E402
from solvers.schedule import Schedule  # noqa: E402
from solvers.stepper import Stepper  # noqa: E402


def _go(X, y, K, N, passes, integrator, threads, reps):
    numba.set_num_threads(threads)
    best, final = np.inf, None
    for _ in range(reps):
        steppers = [Stepper(X, y, N, lam=0.05, eta=0.05, seed=chain_seed(0, k),
                            integrator=integrator) for k in range(K)]
        states = [initial_state(N, X.shape[1], 1.0, chain_seed(0, k)) for k in range(K)]
        sch = Schedule([1e-3], passes, passes // 4, 1)
        steppers[0].prepare(states[0].theta.copy(), ahead=False)
        t = time.perf_counter()
        for _ in simulate(steppers, sch, states, init_scale=1.0):
            pass
        best = min(best, time.perf_counter() - t)
        final = np.stack([s.theta for s in states])
    return best, final


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chains", type=int, nargs="+", default=[2, 4])
    p.add_argument("--N", type=int, default=2000)
    p.add_argument("--passes", type=int, default=400)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--integrators", nargs="+", default=["mala", "em"])
    a = p.parse_args()
    data = np.loadtxt(Path(__file__).resolve().parents[1] / "data" / "plane8.csv",
                      delimiter=",", skiprows=3)
    X, y = np.ascontiguousarray(data[:, :2]), np.ascontiguousarray(data[:, 2])
    print(f"plane8, N = {a.N}, {a.passes} steps at tau = 1e-3, best of {a.reps}; numba "
          f"threading layer {numba.threading_layer() if _warm(X, y) else '?'}")
    for integrator in a.integrators:
        for K in a.chains:
            t1, th1 = _go(X, y, K, a.N, a.passes, integrator, 1, a.reps)
            tn, thn = _go(X, y, K, a.N, a.passes, integrator, a.threads, a.reps)
            same = np.array_equal(th1, thn)
            print(f"{integrator:4s} K={K}: 1 thread {t1:.2f} s, {a.threads} threads {tn:.2f} s, "
                  f"speed-up {t1 / tn:.2f}x; bitwise equal: {same}")


def _warm(X, y) -> bool:
    """Run one parallel kernel so that numba has chosen its threading layer."""
    Stepper(X, y, 8, lam=0.05, eta=0.05).advance(np.ones((8, 4)), 1e-3, 0, 1)
    return True


if __name__ == "__main__":
    main()
