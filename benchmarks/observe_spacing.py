"""The observation spacing of the exact sampler: effective samples per second, and the time to
the stationarity verdict, against ``output.observe_every``.

Runs the embedded default (plane8, ``"mala"``, two chains, auto stages ending on the verdict
between the chains) once per spacing, in one process, on the installed package and its numba
cache, and prints per spacing the passes each stage ran, the bulk ESS per chain of the slowest
observable at the stage's end, the wall time of the run and the effective samples per second
(the smallest bulk ESS over the stages, summed over the chains, per second of the whole run).
An observation costs a pass of the predictor and the regulariser over the particles (about a
tenth of a pass); a wider spacing wastes fewer of them but lengthens the stages whose ESS is
short of the verdict's 100 per chain.

    python benchmarks/observe_spacing.py --every 10 20 50 --threads 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=int, nargs="+", default=[10, 20, 50])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-particles", type=int, default=None,
                   help="particles per chain (default: the embedded default's)")
    a = p.parse_args()

    import meanfield
    from analysis.stationarity import run_verdicts

    base = meanfield.default_config().as_dict()
    if a.n_particles:
        base["model"]["n_particles"] = a.n_particles
    meanfield.run(meanfield.config_from_dict({**base, "dynamics": {**base["dynamics"],
                                                                    "taus": [1e-2],
                                                                    "max_steps_per_tau": 16}}),
                  Path(tempfile.mkdtemp()) / "warm.h5", progress=False, threads=a.threads)
    print(f"embedded default, N = {base['model']['n_particles']}, "
          f"{base['dynamics']['chains']} chains, {a.threads} threads")
    print("| observe_every | passes per stage | stationary | min bulk ESS per chain | "
          "wall s | ESS/s |")
    print("|---|---|---|---|---|---|")
    for every in a.every:
        cfg = meanfield.config_from_dict({**base, "output": {**base["output"],
                                                             "observe_every": every}})
        out = Path(tempfile.mkdtemp()) / "run.h5"
        t0 = time.perf_counter()
        meanfield.run(cfg, out, progress=False, threads=a.threads)
        wall = time.perf_counter() - t0
        run = meanfield.open_run(out)
        vs = run_verdicts(run)
        passes = [run.steps_run(s) for s in range(len(run.taus))]
        ess = min(v.ess_bulk for v in vs)
        print(f"| {every} | {', '.join(map(str, passes))} | "
              f"{'all' if all(v.stationary for v in vs) else 'NOT all'} | {ess:.0f} | "
              f"{wall:.1f} | {ess * run.n_chains / wall:.1f} |")


if __name__ == "__main__":
    main()
