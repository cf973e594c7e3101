"""Steps to a stationary verdict at the coldest temperature: the warm start from the convex
τ → 0 solution against the hot ladder (the shipped D7 config by default).

    python benchmarks/warm_start.py --threads 1

Hot: i.i.d. particles through the config's ladder (every stage ``steps_per_tau`` steps, or with
``"auto"`` until its own verdict) down to
the coldest ``τ``, then on at the coldest ``τ``. Warm: ``model.init = "convex"`` straight at the
coldest ``τ``. In both, the predictor is recorded every ``observe_every`` steps of the cold
stage; whenever the record has grown by 10 % it gets the analysis's stationarity verdict
(``analysis.stationarity.verdict``, the one ``meanfield analyze`` prints: its second half is
the window, which needs enough effective samples and no drift between its halves).
Printed: the steps (ladder included) until the first pass, the distance of the window's
average to the Gibbs reference (d ≤ 2) at that point, the steps until that distance was first
within ``--eps``, the wall time, and the ratio warm / hot.

``--warm-integrator mala`` runs the warm start with the Metropolis-adjusted passes
(``integrator = "mala"``, docs/theory.md §2.6; one pass is one step) instead of the config's
integrator; ``--starts warm`` leaves out the hot ladder (its steps and time are then not
measured side by side).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.accuracy import ROOT, advance  # noqa: E402
from benchmarks.common import set_threads  # noqa: E402


def steps_to_verdict(stepper, theta, tau, step0, every, max_steps, ref=None, eps=1e-3):
    """Advance at ``tau`` until the record passes the analysis's stationarity verdict
    (``analysis.stationarity.verdict`` on the record, its first half burn-in).

    Returns ``(stage steps to the verdict or None, window mean, stage steps until the window
    mean was first within eps of ref or None, the last verdict's reasons)``."""
    from analysis.stationarity import verdict
    F, S = [], []
    step = step0
    next_check = 40
    mean, to_eps, reasons = None, None, []
    while step - step0 < max_steps:
        if stepper.advance(theta, tau, step, every):
            raise FloatingPointError(f"diverged by step {step + every}")
        step += every
        F.append(stepper.f.copy())
        S.append(step)
        if len(F) >= next_check:
            next_check = int(len(F) * 1.1) + 1
            mean = np.mean(F[len(F) // 2:], axis=0)
            if to_eps is None and ref is not None and np.max(np.abs(mean - ref)) <= eps:
                to_eps = step - step0
            v = verdict(S, F)
            if v.stationary:
                return step - step0, mean, to_eps, []
            reasons = v.reasons
    return None, mean, to_eps, reasons


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", nargs="?", default=os.path.join(ROOT, "data", "skm22_d7.toml"),
                    help="run config (default: the shipped D7 config)")
    ap.add_argument("--max-steps", type=int, default=2_000_000,
                    help="most steps at the coldest temperature (2e6)")
    ap.add_argument("--threads", type=int, default=1, help="numba threads (1)")
    ap.add_argument("--tau", type=float, default=None,
                    help="the coldest temperature instead of the config's (its hotter stages "
                         "are kept)")
    ap.add_argument("--eps", type=float, default=1e-3,
                    help="also report the steps until the window mean is within eps of the "
                         "Gibbs reference (1e-3)")
    ap.add_argument("--starts", nargs="+", choices=["hot", "warm"], default=["hot", "warm"],
                    help="which starts to run (both)")
    ap.add_argument("--warm-integrator", choices=["config", "mala"], default="config",
                    help="integrator of the warm start: the config's, or the Metropolis-"
                         "adjusted passes")
    ap.add_argument("--warm-eta", type=float, default=None,
                    help="step of the warm start with --warm-integrator mala (the config's eta; "
                         "the passes are exact at any step, their acceptance sets it)")
    ap.add_argument("--warm-radial", type=float, default=None,
                    help="probability of a radial move after each move with --warm-integrator "
                         "mala (the default of dynamics.radial; 0: none, the sampler before "
                         "radial moves)")
    ap.add_argument("--warm-observe-every", type=int, default=None,
                    help="steps between the recorded predictors of the warm start (the config's "
                         "output.observe_every; a pass of --warm-integrator mala decorrelates "
                         "far more than an Euler step, so its verdict can need far fewer steps "
                         "between observations)")
    args = ap.parse_args(argv)
    if args.warm_observe_every is not None and args.warm_observe_every < 1:
        raise SystemExit(f"--warm-observe-every must be >= 1, got {args.warm_observe_every}")
    set_threads(args.threads)
    from meanfield import config, data
    from meanfield.runner import make_stepper
    from solvers.gibbs import gibbs
    from solvers.langevin import convex_start, initial_particles
    cfg = config.load(args.config)
    ds = data.from_config(cfg)
    X, y = np.ascontiguousarray(ds.X, float), np.ascontiguousarray(ds.y, float)
    dyn = cfg.dynamics
    lam, taus = dyn.lam, list(cfg.taus)
    T = dyn.steps_per_tau if dyn.steps_per_tau == "auto" else int(dyn.steps_per_tau)
    every = int(cfg.output.observe_every)
    if args.tau is not None:
        taus = [t for t in taus if t > args.tau] + [args.tau]
    cold = int(np.argmin(taus))
    tau = taus[cold]
    ref = gibbs(X, y, lam, tau).f_train if X.shape[1] <= 2 and tau > 0 else None
    print(f"{os.path.basename(args.config)}: N={cfg.n_particles} eta={dyn.eta:g} "
          f"lam={lam:g}; coldest tau={tau:g}; threads {args.threads}; "
          f"load {os.getloadavg()[0]:.1f}")
    seed = int(dyn.seed)
    out, ladders, walls = {}, {}, {}
    for start in args.starts:
        if start == "warm" and args.warm_integrator == "mala":
            from solvers.stepper import Stepper
            mod = cfg.model
            eta = dyn.eta if args.warm_eta is None else args.warm_eta
            st = Stepper(X, y, mod.n_particles, lam=lam, eta=eta, activation=mod.activation,
                         sharpness=mod.sharpness, cap=mod.cap, seed=dyn.seed, integrator="mala",
                         radial=args.warm_radial)
        else:
            st = make_stepper(cfg, ds)
        st.prepare(np.zeros((cfg.n_particles, X.shape[1] + 2)), ahead=False)  # compile: untimed
        t0 = time.perf_counter()
        if start == "hot":
            th = initial_particles(cfg.n_particles, X.shape[1], cfg.model.init_scale, seed)
            step = 0
            for s in range(cold):
                if T == "auto":          # each stage until its verdict, as the runner does
                    n_s, _, _, _ = steps_to_verdict(st, th, taus[s], step, every,
                                                 int(dyn.max_steps_per_tau))
                    step += n_s if n_s is not None else int(dyn.max_steps_per_tau)
                else:
                    step = advance(st, th, taus[s], step, T)
        else:
            th = convex_start(X, y, cfg.n_particles, lam, tau, seed)
            step = 0
        ladder = step
        ladders[start] = ladder
        k = every if start == "hot" or args.warm_observe_every is None else \
            args.warm_observe_every
        n, mean, to_eps, reasons = steps_to_verdict(st, th, tau, step, k, args.max_steps, ref,
                                                    args.eps)
        dist = "" if ref is None or mean is None else \
            f"; max|f̄ − f_Gibbs| = {np.max(np.abs(mean - ref)):.2e}; within {args.eps:g} " + \
            (f"after {ladder + to_eps} steps in all" if to_eps is not None else "never")
        total = None if n is None else ladder + n
        out[start] = total
        print(f"{start}: ladder {ladder} steps, then "
              + (f"stationary after {n} steps at tau={tau:g}: {total} steps in all"
                 if n is not None else f"not stationary within {args.max_steps} steps ("
                 + "; ".join(reasons) + ")")
              + f"{dist} ({time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f})",
              flush=True)
        walls[start] = time.perf_counter() - t0
        if st.integrator == "mala":
            c = st.counts
            print(f"  mala eta={st.eta:g}: Langevin acceptance {c[1] / max(c[0], 1):.3f}, "
                  f"jump acceptance {c[3] / max(c[2], 1):.3f}, radial acceptance "
                  f"{c[6] / max(c[5], 1):.3f} (radial={st.radial:g})")
    if out.get("hot") and out.get("warm"):
        print(f"warm / hot steps = {out['warm'] / out['hot']:.3f}, wall time "
              f"{walls['warm'] / walls['hot']:.3f} (target <= 0.1)")
    elif out.get("warm") and "hot" in out:
        print(f"warm / hot steps < {out['warm'] / (ladder_bound := ladders['hot'] + args.max_steps):.3f}"
              f" (the hot ladder was not stationary within {ladder_bound} steps)")
    return out


if __name__ == "__main__":
    main()
