"""Steps to a stationary verdict at the coldest temperature: the warm start from the convex
τ → 0 solution against the hot ladder (the shipped D7 config by default).

    python benchmarks/warm_start.py --threads 1

Hot: i.i.d. particles through the config's ladder (every stage ``steps_per_tau`` steps) down to
the coldest ``τ``, then on at the coldest ``τ``. Warm: ``model.init = "convex"`` straight at the
coldest ``τ``. In both, the predictor is recorded every ``observe_every`` steps of the cold
stage; whenever the record has grown by 10 % its second half gets the stationarity tests (the
first half is burn-in): at least 20 effective samples in each half of the window
(autocorrelation-aware, ``analysis.time_average.mean_and_mcse``) and the two halves' means
within ``z_crit`` combined standard errors (Bonferroni over the training points at level 1 %).
Printed: the steps (ladder included) until the first pass, the distance of the window's
average to the Gibbs reference (d ≤ 2) at that point, and the ratio warm / hot.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.accuracy import ROOT, advance, time_average  # noqa: E402
from benchmarks.common import set_threads  # noqa: E402


def z_critical(n, alpha=0.01):
    from scipy.stats import norm
    return float(norm.isf(alpha / (4 * n)))


def stationary(W, zc, min_ess=20.0):
    """The tests on a window ``W`` (M, n): ``(passed, drift z, smallest ESS)``."""
    k = len(W) // 2
    (m1, s1, t1), (m2, s2, t2) = time_average(W[:k]), time_average(W[k:])
    ess = min(float(np.min(k / t1)), float(np.min((len(W) - k) / t2)))
    z = float(np.max(np.abs(m2 - m1) / np.sqrt(s1 ** 2 + s2 ** 2 + 1e-300)))
    return ess >= min_ess and z <= zc, z, ess


def steps_to_verdict(stepper, theta, tau, step0, every, max_steps, zc):
    """Advance at ``tau`` until the window passes; returns ``(stage steps, window mean)`` or
    ``(None, last window mean)``."""
    F = []
    step = step0
    next_check = 40
    mean = None
    while step - step0 < max_steps:
        if stepper.advance(theta, tau, step, every):
            raise FloatingPointError(f"diverged by step {step + every}")
        step += every
        F.append(stepper.f.copy())
        if len(F) >= next_check:
            next_check = int(len(F) * 1.1) + 1
            W = np.asarray(F[len(F) // 2:])
            ok, _, _ = stationary(W, zc)
            mean = W.mean(axis=0)
            if ok:
                return step - step0, mean
    return None, mean


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", nargs="?", default=os.path.join(ROOT, "data", "skm22_d7.toml"))
    ap.add_argument("--max-steps", type=int, default=2_000_000,
                    help="most steps at the coldest temperature (2e6)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    set_threads(args.threads)
    from meanfield import config, data
    from meanfield.runner import make_stepper
    from solvers.gibbs import gibbs
    from solvers.langevin import convex_start, initial_particles
    cfg = config.load(args.config)
    ds = data.from_config(cfg)
    X, y = np.ascontiguousarray(ds.X, float), np.ascontiguousarray(ds.y, float)
    dyn = cfg.dynamics
    lam, taus, T = dyn.lam, list(cfg.taus), int(dyn.steps_per_tau)
    every = int(cfg.output.observe_every)
    cold = int(np.argmin(taus))
    tau = taus[cold]
    zc = z_critical(len(y))
    ref = gibbs(X, y, lam, tau).f_train if X.shape[1] <= 2 and tau > 0 else None
    print(f"{os.path.basename(args.config)}: N={cfg.n_particles} eta={dyn.eta:g} "
          f"lam={lam:g}; coldest tau={tau:g}; z_crit={zc:.2f}; threads {args.threads}; "
          f"load {os.getloadavg()[0]:.1f}")
    seed = int(dyn.seed)
    out = {}
    for start in ("hot", "warm"):
        t0 = time.perf_counter()
        st = make_stepper(cfg, ds)
        if start == "hot":
            th = initial_particles(cfg.n_particles, X.shape[1], cfg.model.init_scale, seed)
            step = 0
            for s in range(cold):
                step = advance(st, th, taus[s], step, T)
        else:
            th = convex_start(X, y, cfg.n_particles, lam, tau, seed)
            step = 0
        ladder = step
        n, mean = steps_to_verdict(st, th, tau, step, every, args.max_steps, zc)
        dist = "" if ref is None or mean is None else \
            f"; max|f̄ − f_Gibbs| = {np.max(np.abs(mean - ref)):.2e}"
        total = None if n is None else ladder + n
        out[start] = total
        print(f"{start}: ladder {ladder} steps, then "
              + (f"stationary after {n} steps at tau={tau:g}: {total} steps in all"
                 if n is not None else f"not stationary within {args.max_steps} steps")
              + f"{dist} ({time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f})",
              flush=True)
    if out["hot"] and out["warm"]:
        print(f"warm / hot steps = {out['warm'] / out['hot']:.3f} (target <= 0.1)")
    elif out["warm"]:
        print(f"warm / hot steps < {out['warm'] / (ladder_bound := cold * T + args.max_steps):.3f}"
              f" (the hot ladder was not stationary within {ladder_bound} steps)")
    return out


if __name__ == "__main__":
    main()
