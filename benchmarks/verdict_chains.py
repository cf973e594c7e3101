"""False alarms and cost of the stationarity verdict with independent chains (docs/theory.md §2.5).

- ``alarms``: relaxed Ornstein–Uhlenbeck particle systems (the data term off, started from their
  stationary law, so every stage is stationary by construction), ``--chains`` independent
  systems per seed, ``--seeds`` seeds: how many verdicts fail, and on which test.
- ``plane8``: the same on plane8 at ``τ = 1e-2`` after a burn-in (``--burn`` steps), full
  dynamics.
- ``cost``: the verdict's wall time on one stage of ``--draws`` observations of ``n = 8`` points
  and the two scalar observables, per chain count.

    python benchmarks/verdict_chains.py alarms --seeds 20 --chains 4 --obs 4000
    python benchmarks/verdict_chains.py plane8 --seeds 5 --chains 4
    python benchmarks/verdict_chains.py cost --draws 1600
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analysis.stationarity import stage_observables, verdict  # noqa: E402
from solvers.stepper import Stepper  # noqa: E402


def _chains(X, y, N, lam, eta, tau, seed, chains, obs, every, burn=0, data_term=True):
    rng = np.random.default_rng([seed, 77])
    F, R, reg = [], [], []
    for c in range(chains):
        st = Stepper(X, y, N, lam=lam, eta=eta, seed=1000 * seed + c)
        theta = np.ascontiguousarray(rng.standard_normal((N, X.shape[1] + 2))
                                     * np.sqrt(tau / lam))
        if burn:
            st.advance(theta, tau, 0, burn, data_term=data_term)
        f, r, g = [], [], []
        for k in range(obs):
            st.advance(theta, tau, burn + every * k, every, data_term=data_term)
            f.append(st.f.copy())
            r.append(st.R.copy())
            g.append(0.5 * lam * float(np.mean(np.einsum("ij,ij->i", theta, theta))))
        F.append(f)
        R.append(r)
        reg.append(g)
    steps = burn + every * np.arange(1, obs + 1)
    return steps, np.array(F), stage_observables(np.array(R), np.array(reg))


def _tally(label, verdicts):
    kinds = Counter(r.split(" ")[0] for v in verdicts for r in v.reasons)
    fails = sum(not v.stationary for v in verdicts)
    rh = [v.rhat for v in verdicts]
    eb = [v.ess_bulk / v.n_chains for v in verdicts]
    print(f"{label}: {fails}/{len(verdicts)} not stationary; reasons {dict(kinds)}; "
          f"R-hat median {np.median(rh):.4f} max {np.max(rh):.4f}; bulk ESS per chain "
          f"median {np.median(eb):.0f}")


def alarms(a):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((6, 2)), rng.standard_normal(6)
    vs = []
    for s in range(a.seeds):
        steps, F, ob = _chains(X, y, 200, 1.0, 0.05, 0.1, s, a.chains, a.obs, 11,
                               data_term=False)
        vs.append(verdict(steps, F, observables=ob))
    _tally(f"OU, {a.chains} chains x {a.obs} observations", vs)


def plane8(a):
    data = np.loadtxt(Path(__file__).resolve().parents[1] / "data" / "plane8.csv",
                      delimiter=",", skiprows=3)
    X, y = data[:, :2], data[:, 2]
    vs = []
    for s in range(a.seeds):
        steps, F, ob = _chains(X, y, a.N, 0.05, 0.05, 1e-2, s, a.chains, a.obs, 101,
                               burn=a.burn)
        vs.append(verdict(steps, F, observables=ob))
        print(s, vs[-1].stationary, vs[-1].reasons, flush=True)
    _tally(f"plane8 tau=1e-2 N={a.N}, {a.chains} chains x {a.obs} observations", vs)


def cost(a):
    rng = np.random.default_rng(1)
    for K in (1, 4):
        F = rng.standard_normal((K, a.draws, 8))
        ob = {"risk": rng.standard_normal((K, a.draws)),
              "regulariser": rng.standard_normal((K, a.draws))}
        verdict(np.arange(1, a.draws + 1), F, observables=ob)          # imports
        t = time.perf_counter()
        for _ in range(5):
            verdict(np.arange(1, a.draws + 1), F, F_previous=F, observables=ob)
        print(f"K={K}: {(time.perf_counter() - t) / 5 * 1e3:.1f} ms per verdict "
              f"({a.draws} observations, n = 8)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["alarms", "plane8", "cost"])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--obs", type=int, default=4000)
    p.add_argument("--N", type=int, default=400)
    p.add_argument("--burn", type=int, default=50000)
    p.add_argument("--draws", type=int, default=1600)
    a = p.parse_args()
    {"alarms": alarms, "plane8": plane8, "cost": cost}[a.what](a)


if __name__ == "__main__":
    main()
