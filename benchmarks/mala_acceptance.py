"""Acceptance of the Metropolis-adjusted passes (``integrator = "mala"``) on every shipped config.

    python benchmarks/mala_acceptance.py                 # every data/*.toml, 400 passes per τ
    python benchmarks/mala_acceptance.py data/plane8.toml --passes 2000

For each config: the particles of the convex ``τ → 0`` warm start (``solvers.langevin.
convex_start``; the hot start where the convex limit has no ray) at every ``τ`` of its ladder, ``--passes`` passes at the config's ``η`` with the
default jump share and radial moves (``solvers.stepper.DEFAULT_JUMPS``, ``DEFAULT_RADIAL``);
the first half is burn-in. Printed per ``τ``: the acceptance of the Langevin moves, of the jumps
and of the radial moves over the second half, the share of accepted jumps that changed the
particle's activation cell, and the time per pass relative to one Euler–Maruyama step of the
same config (both on ``--threads`` threads, one process). ``--eta`` runs the passes at another
step than the config's (the Euler step stays the config's).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.accuracy import ROOT  # noqa: E402
from benchmarks.common import set_threads  # noqa: E402


def acceptance(cfg_path, passes, threads, eta=None):
    """Rows ``(τ, Langevin acceptance, jump acceptance, cell-changing share, radial
    acceptance, pass/EM)``."""
    from meanfield import config, data
    from solvers.langevin import convex_start, initial_particles
    from solvers.stepper import DEFAULT_JUMPS, Stepper
    cfg = config.load(cfg_path)
    ds = data.from_config(cfg)
    X, y = np.ascontiguousarray(ds.X, float), np.ascontiguousarray(ds.y, float)
    mod, dyn = cfg.model, cfg.dynamics
    kw = dict(lam=dyn.lam, eta=dyn.eta, activation=mod.activation, sharpness=mod.sharpness,
              cap=mod.cap, seed=dyn.seed)
    rows = []
    for tau in cfg.taus:
        try:
            th = convex_start(X, y, mod.n_particles, dyn.lam, tau, int(dyn.seed))
        except ValueError:          # the convex limit has no ray (f = 0): the hot start
            th = initial_particles(mod.n_particles, X.shape[1], mod.init_scale, int(dyn.seed))
        st = Stepper(X, y, mod.n_particles, integrator="mala", jumps=DEFAULT_JUMPS,
                     **{**kw, "eta": dyn.eta if eta is None else eta})
        em = Stepper(X, y, mod.n_particles, integrator="em", **kw)
        half = max(passes // 2, 1)
        if st.advance(th, tau, 0, half):
            rows.append((tau, None, None, None, None, None))
            continue
        st.reset_counts()
        t0 = time.perf_counter()
        code = st.advance(th, tau, half, passes - half)
        t_mala = (time.perf_counter() - t0) / (passes - half)
        the = th.copy()
        em.advance(the, tau, 0, 1)
        k = max(10, min(2000, int(0.2 / max(t_mala, 1e-6))))
        t0 = time.perf_counter()
        em.advance(the, tau, 1, k)
        t_em = (time.perf_counter() - t0) / k
        c = st.counts
        rows.append((tau, c[1] / max(c[0], 1), c[3] / max(c[2], 1), c[4] / max(c[3], 1),
                     c[6] / c[5] if c[5] else float("nan"), t_mala / t_em if not code else None))
    return cfg, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="*",
                    default=sorted(glob.glob(os.path.join(ROOT, "data", "*.toml"))))
    ap.add_argument("--passes", type=int, default=400, help="passes per tau (400)")
    ap.add_argument("--threads", type=int, default=1, help="numba threads (1)")
    ap.add_argument("--eta", type=float, default=None,
                    help="step of the passes (default: each config's eta)")
    args = ap.parse_args(argv)
    if args.eta is not None and not args.eta > 0:
        raise SystemExit(f"--eta must be > 0, got {args.eta}")
    set_threads(args.threads)
    print(f"{args.passes} passes per tau (second half counted), {args.threads} thread(s), "
          f"load {os.getloadavg()[0]:.1f}")
    print("\n| config | N | eta | tau | Langevin acc. | jump acc. | jumps changing cell | "
          "radial acc. | pass / EM step |")
    print("|---" * 9 + "|")
    for path in args.configs:
        cfg, rows = acceptance(path, args.passes, args.threads, args.eta)
        eta = cfg.dynamics.eta if args.eta is None else args.eta
        for tau, acc, jacc, cell, racc, ratio in rows:
            name = os.path.basename(path)
            if acc is None:
                print(f"| {name} | {cfg.n_particles} | {eta:g} | {tau:g} | "
                      f"diverged | | | | |")
                continue
            print(f"| {name} | {cfg.n_particles} | {eta:g} | {tau:g} | "
                  f"{acc:.3f} | {jacc:.3f} | {cell:.2f} | {racc:.3f} | "
                  + ("–" if ratio is None else f"{ratio:.1f}") + " |", flush=True)


if __name__ == "__main__":
    main()
