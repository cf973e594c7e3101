"""The randomized-QMC Gibbs reference against the adaptive quadrature on the shipped data sets
(d = 1, 2) at every temperature of their ladders (docs/theory.md, "Any dimension").

    python benchmarks/gibbs_qmc_vs_quadrature.py [--rtol 1e-4] [SET ...]

One row per set and tau: the largest |f_qmc − f_quad| over the data, the reported quad_error
(one standard error), their ratio, quad_error / max|f|, the largest per-point z = |diff|/stderr,
the points per scramble, the peaks of |G| and the CPU seconds of the QMC solve.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

SETS = ["skm22_d2", "skm22_d4", "skm22_d7", "skm22_d12", "two_point_even", "two_point_odd",
        "plane8"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="*", default=SETS)
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    from meanfield import config, data
    from solvers.gibbs import gibbs
    from solvers.gibbsqmc import QMCGibbsReference
    root = Path(__file__).resolve().parent.parent / "data"
    print("| set | tau | max diff | quad_error | ratio | quad_error/max|f| | max z | points "
          "| peaks | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in a.sets:
        cfg = config.load(root / f"{name}.toml")
        ds = data.from_config(cfg)
        lam = cfg.dynamics.lam
        taus = [t for t in cfg.taus if t > 0]
        quad = gibbs(ds.X, ds.y, lam, taus)
        ref = QMCGibbsReference(ds.X, ds.y, lam, rtol=a.rtol)
        R = None
        for q in sorted(quad, key=lambda s: -s.tau):
            t0 = time.process_time()
            s = ref.solve([q.tau], R0=R)[0]
            secs = time.process_time() - t0
            R = s.R
            diff = np.abs(s.f_train - q.f_train)
            print(f"| {name} | {q.tau:.0e} | {diff.max():.2e} | {s.quad_error:.2e} | "
                  f"{diff.max() / s.quad_error:.2f} | "
                  f"{s.quad_error / np.max(np.abs(s.f_train)):.1e} | "
                  f"{np.max(diff / s.f_stderr):.2f} | {s.points} | {s.n_peaks} | {secs:.1f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
