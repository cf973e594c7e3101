"""Particle runs against the exact references, one Markdown table row per temperature.

    python benchmarks/reference_distances.py data/skm22_d4.toml --n-particles 1000 \
        --steps 100000 --threads 1

Runs the config's ladder (optionally with fewer particles / steps), then compares the
time-averaged particle predictor on the training inputs (second half of each stage) with the
Gibbs reference (``d ≤ 2``) and, at the coldest stage, with the convex reference. Each
reference is timed on its own (single temperature, no continuation from a previous one).
Columns: ``t_relax = 1/(λ(1 − max|G|))`` is the slowest linear relaxation time of the Gibbs
reference, ``T_stage = steps·η`` the simulated time per stage; where ``t_relax ≫ T_stage`` the
stage cannot be stationary.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--n-particles", type=int)
    ap.add_argument("--steps", type=int, help="steps per temperature")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--run", help="keep the run file here (default: temporary)")
    args = ap.parse_args(argv)

    from analysis.references import _distances
    from analysis.time_average import time_average_predictor
    from meanfield import config, runner
    from meanfield.store import open_run
    from solvers.convex import convex
    from solvers.gibbs import gibbs
    from solvers.reference_methods import choose

    cfg = config.load(args.config)
    raw = cfg.as_dict()
    if args.n_particles:
        raw["model"]["n_particles"] = args.n_particles
    if args.steps:
        raw["dynamics"]["steps_per_tau"] = args.steps
        raw["output"]["observe_every"] = max(1, args.steps // 1000)
        raw["output"]["snapshots_per_tau"] = min(raw["output"]["snapshots_per_tau"], args.steps)
    cfg = config.from_dict(raw, source=args.config)
    out = args.run or os.path.join(tempfile.mkdtemp(), "run.h5")
    t0 = time.time()
    runner.run(cfg, out, overwrite=True, progress=False, threads=args.threads)
    t_run = time.time() - t0
    run = open_run(out)
    lam, eta = cfg.dynamics.lam, cfg.dynamics.eta
    T = cfg.dynamics.steps_per_tau
    name = os.path.basename(args.config)
    print(f"\n{name}: n={run.n} d={run.d} lam={lam:g} eta={eta:g} N={cfg.n_particles} "
          f"steps/tau={T} (run {t_run:.0f} s)\n")
    print("| data | tau | max\\|G\\| | t_relax | T_stage | max\\|f̄ − f_Gibbs\\| | max SE "
          "| Gibbs s | max\\|f̄ − f_convex\\| | convex s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    t0 = time.time()
    cvx = convex(run.X, run.y, lam)
    t_cvx = time.time() - t0
    taus = cfg.taus
    cold = cfg.schedule.coldest_stage()
    for s, tau in enumerate(taus):
        f, se = time_average_predictor(run, s, 0.5)
        dc = _distances(f, se, cvx.f_train)["max_abs_diff"]
        if choose(run.d) == "quadrature" and tau > 0:
            t0 = time.time()
            ref = gibbs(run.X, run.y, lam, tau)
            t_g = time.time() - t0
            dg = _distances(f, se, ref.f_train)
            row = (f"{ref.max_abs_G:.6f} | {1 / (lam * (1 - ref.max_abs_G)):.3g} | {T * eta:.3g} "
                   f"| {dg['max_abs_diff']:.2e} | {dg['max_stderr']:.1e} | {t_g:.2f}")
        else:
            row = f"– | – | {T * eta:.3g} | – | {np.max(se):.1e} | –"
        cv = f"{dc:.2e} | {t_cvx:.2f}" if s == cold else f"({dc:.2e}) | "
        print(f"| {name} | {tau:g} | {row} | {cv} |", flush=True)


if __name__ == "__main__":
    main()
