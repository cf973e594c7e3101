"""The blocked pass against its block size: acceptance by particle mass, cost, ESS per second.

    python benchmarks/mala_blocks.py                              # plane8, D7, 3-D set; tau 1e-4
    python benchmarks/mala_blocks.py --problems plane8 --blocks 1 4 16 --passes 400
    python benchmarks/mala_blocks.py --quick

The blocked pass (``Stepper(block=b)``, ``solvers._mala_block``; docs/theory.md §2.6) proposes
each member's move from the errors without the members of its block processed before it.
The risk (issue 44): at low ``τ`` a heavy particle whose block holds a heavy partner of the
same ray processed before it gets a drift error larger than its proposal noise, and its moves
are rejected. So the acceptance is printed for all particles and for the heaviest decile
apart (by ``|θ_i|²`` at the start of each pass), for the Langevin moves and
the radial moves, against ``b``. ``b = 1`` is the blocked kernel with one member a block: the
field of every proposal is the current errors, as in the sequential pass (same law, another
order and another summation: the baseline of the table). ``seq`` is the sequential pass
itself (its mean acceptance only).

Per problem: the convex warm start (``solvers.langevin.convex_start``) at ``--tau``, the
config's ``η`` with the default jump share and radial moves, ``--burn`` passes, then
``--passes`` passes one at a time (per-particle counters, ``Stepper.pcounts``). Then, for the
ESS, ``--budget`` wall seconds of passes recording ``f(x_j)`` and ``(1/N) Σ |θ_i|²`` after
each (bulk ESS by ArviZ, as ``benchmarks/peer_full_mala.py``; a short window at low ``τ``
gives an ESS that is an upper bound). One thread (the pass is sequential within a system).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.accuracy import load  # noqa: E402
from benchmarks.common import set_threads  # noqa: E402
from benchmarks.peer_full_mala import ess  # noqa: E402


def three_d():
    """A 3-D set (no 3-D set is shipped): 12 Gaussian inputs, labels of two ReLU neurons."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((12, 3))
    y = np.maximum(X @ np.array([1.0, 0.5, -0.3]), 0.0) \
        - 0.7 * np.maximum(X @ np.array([-0.4, 1.0, 0.6]) + 0.2, 0.0)
    return X, y, 0.01


#: name -> (loader of (X, y, λ), N, η)
PROBLEMS = {"plane8": (lambda: load("plane8"), 4000, 0.2),
            "d7": (lambda: load("d7"), 1000, 0.2),
            "3d": (three_d, 1000, 0.2)}


def stepper(X, y, N, lam, eta, block, seed):
    from solvers.stepper import Stepper
    st = Stepper(X, y, N, lam=lam, eta=eta, seed=seed, integrator="mala",
                 block=max(block, 0))
    if block == 1:          # the blocked kernel with one member a block (Stepper maps 1 to 0)
        st.block = 1
    return st


def acceptance(X, y, lam, eta, tau, N, block, seed, burn, passes):
    """Langevin and radial acceptance, all particles and the heaviest decile; ms per pass."""
    from solvers.langevin import convex_start
    th = convex_start(X, y, N, lam, tau, seed)
    st = stepper(X, y, N, lam, eta, block, seed)
    if block == 0:
        st.advance(th, tau, 0, burn)
        st.reset_counts()
        t0 = time.perf_counter()
        st.advance(th, tau, burn, passes)
        ms = (time.perf_counter() - t0) / passes * 1e3
        c = st.counts
        return {"acc": c[1] / max(c[0], 1), "acc_heavy": np.nan,
                "racc": c[6] / max(c[5], 1), "racc_heavy": np.nan,
                "jacc": c[3] / max(c[2], 1), "ms": ms}, st, th
    st.advance(th, tau, 0, burn)
    st.pcounts = np.zeros((4, N), dtype=np.int64)
    tot = np.zeros((2, 4))
    wall = 0.0
    c0 = st.counts.copy()
    for k in range(passes):
        heavy = np.sum(th * th, axis=1)
        heavy = heavy >= np.quantile(heavy, 0.9)
        before = st.pcounts.copy()
        t0 = time.perf_counter()
        st.advance(th, tau, burn + k, 1)
        wall += time.perf_counter() - t0
        inc = st.pcounts - before
        tot[0] += inc.sum(axis=1)
        tot[1] += inc[:, heavy].sum(axis=1)
    c = st.counts - c0
    st.pcounts = np.zeros((4, 0), dtype=np.int64)
    return {"acc": tot[0, 1] / tot[0, 0], "acc_heavy": tot[1, 1] / tot[1, 0],
            "racc": tot[0, 3] / max(tot[0, 2], 1), "racc_heavy": tot[1, 3] / max(tot[1, 2], 1),
            "jacc": c[3] / max(c[2], 1), "ms": wall / passes * 1e3}, st, th


def ess_rate(st, th, tau, step0, budget):
    """Min-over-points ESS of ``f`` and ESS of the regulariser per wall second."""
    F, reg = [], []
    wall, k = 0.0, step0
    while wall < budget:
        t0 = time.perf_counter()
        st.advance(th, tau, k, 1)
        wall += time.perf_counter() - t0
        k += 1
        F.append(st.f.copy())
        reg.append(st.sum_sq / th.shape[0])
    return float(ess(np.asarray(F)).min()) / wall, float(ess(np.asarray(reg)[:, None])[0]) / wall, \
        len(F)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    ap.add_argument("--tau", type=float, default=1e-4)
    ap.add_argument("--blocks", type=int, nargs="+", default=[0, 1, 2, 4, 8, 16, 64],
                    help="block sizes; 0 = the sequential pass (default 0 1 2 4 8 16 64)")
    ap.add_argument("--burn", type=int, default=300, help="passes of burn-in (300)")
    ap.add_argument("--passes", type=int, default=300, help="passes counted (300)")
    ap.add_argument("--budget", type=float, default=0.0,
                    help="wall seconds of the ESS window per row (0: no ESS)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.problems, args.blocks, args.burn, args.passes = ["d7"], [0, 1, 8], 50, 50
    set_threads(1)
    print(f"tau={args.tau:g}; {args.burn} passes of burn-in, {args.passes} counted; one thread; "
          f"load {os.getloadavg()[0]:.2f}")
    head = "| set | N | b | ms/pass | Langevin acc. | heaviest decile | radial acc. | heaviest decile | jump acc. |"
    if args.budget:
        head += " ESS f / s | ESS reg / s | passes |"
    print("\n" + head)
    print("|---" * (head.count("|") - 1) + "|")
    for name in args.problems:
        loader, N, eta = PROBLEMS[name]
        X, y, lam = loader()
        for b in args.blocks:
            r, st, th = acceptance(X, y, lam, eta, args.tau, N, b, args.seed, args.burn,
                                   args.passes)
            line = (f"| {name} | {N} | {'seq' if b == 0 else b} | {r['ms']:.2f} | "
                    f"{r['acc']:.3f} | {r['acc_heavy']:.3f} | {r['racc']:.3f} | "
                    f"{r['racc_heavy']:.3f} | {r['jacc']:.3f} |")
            if args.budget:
                ef, er, m = ess_rate(st, th, args.tau, args.burn + args.passes, args.budget)
                line += f" {ef:.3g} | {er:.3g} | {m} |"
            print(line.replace("nan", "–"), flush=True)


if __name__ == "__main__":
    main()
