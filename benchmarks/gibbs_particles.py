"""Long particle runs against the QMC Gibbs reference in d = 3, 4 (THEORY §2, §5).

The particles start from the reference's own stationary measure (sampled exactly,
``QMCGibbsSolution.sample_particles``), so the run measures whether the dynamics keeps it:
the time-averaged predictor on the training inputs must agree with the reference within
3 MCSE (autocorrelation-aware: ``emcee.autocorr.integrated_time`` per data point) plus the
step-size bias, measured by halving ``eta``.

    python benchmarks/gibbs_particles.py --d 3 --tau 1e-2 [--n-particles 1000] [--steps 200000]

Prints one table row per data point and a summary line; ``--json`` prints a document.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import numpy as np

logging.getLogger("emcee").setLevel(logging.ERROR)


def time_average(X, y, lam, tau, eta, theta0, steps, observe_every, seed, burn=0.1):
    """Mean predictor, its MCSE and the integrated autocorrelation times (in observations)."""
    from emcee.autocorr import integrated_time

    from meanfield import config as _config
    from meanfield.data import Dataset
    from meanfield.runner import make_stepper
    from solvers.langevin import SolverState, simulate
    cfg = _config.from_dict({
        "data": {"kind": "inline", "X": X.tolist(), "y": y.tolist()},
        "model": {"n_particles": int(theta0.shape[0])},
        "dynamics": {"lam": lam, "eta": eta, "taus": [tau], "steps_per_tau": int(steps),
                     "seed": int(seed)},
        "output": {"observe_every": int(observe_every), "snapshots_per_tau": 1}})
    resid = [obs.residuals.copy() for _, obs, _ in
             simulate(make_stepper(cfg, Dataset(X, y, "inline")), cfg.schedule,
                      SolverState(theta=theta0.copy()), init_scale=cfg.model.init_scale)]
    F = np.asarray(resid) * len(y) + y[None, :]
    F = F[int(burn * len(F)):]
    tint = np.array([float(integrated_time(F[:, j], quiet=True)[0]) for j in range(F.shape[1])])
    mcse = F.std(axis=0, ddof=1) * np.sqrt(tint / F.shape[0])
    return F.mean(axis=0), mcse, tint


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--lam", type=float, default=0.05)
    ap.add_argument("--tau", type=float, default=1e-2)
    ap.add_argument("--eta", type=float, default=0.05, help="the larger step; also eta/2")
    ap.add_argument("--n-particles", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=200000)
    ap.add_argument("--observe-every", type=int, default=50)
    ap.add_argument("--rtol", type=float, default=1e-3, help="reference accuracy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from meanfield.data import gaussian
    from solvers.gibbsqmc import gibbs_qmc
    ds = gaussian(a.n, a.d, a.seed)
    t0 = time.time()
    # continuation from tau = 1e-2 (a cold reference from scratch may need many restarts)
    ref = gibbs_qmc(ds.X, ds.y, a.lam, sorted({1e-2, a.tau}, reverse=True), rtol=a.rtol)[-1]
    t_ref = time.time() - t0
    theta0 = ref.sample_particles(a.n_particles, seed=a.seed)
    runs = {}
    for eta in (a.eta, a.eta / 2):
        t0 = time.time()
        steps = int(a.steps * a.eta / eta)                  # same physical time
        f, se, tint = time_average(ds.X, ds.y, a.lam, a.tau, eta, theta0, steps,
                                   a.observe_every, a.seed + 1)
        runs[eta] = (f, se, tint, time.time() - t0)
    (f1, _se1, _ti1, s1), (f2, se2, ti2, s2) = runs[a.eta], runs[a.eta / 2]
    bias = np.abs(f1 - f2)                                   # bias of the eta/2 run, to O(eta)
    diff = np.abs(f2 - ref.f_train)
    allowed = 3 * se2 + bias + ref.f_stderr
    ok = bool(np.all(diff <= allowed))
    doc = {"d": a.d, "n": a.n, "lam": a.lam, "tau": a.tau, "eta": [a.eta, a.eta / 2],
           "n_particles": a.n_particles, "time": a.steps * a.eta,
           "ref_seconds": round(t_ref, 1), "run_seconds": [round(s1, 1), round(s2, 1)],
           "ref_stderr_max": float(ref.quad_error), "max_abs_G": float(ref.max_abs_G),
           "f_ref": ref.f_train.tolist(), "f_eta": f1.tolist(), "f_eta_half": f2.tolist(),
           "mcse_eta_half": se2.tolist(), "tau_int_obs": ti2.tolist(),
           "eta_bias": bias.tolist(), "diff": diff.tolist(),
           "max_diff_over_allowed": float(np.max(diff / allowed)), "agree": ok}
    if a.json:
        print(json.dumps(doc))
        return 0 if ok else 1
    print(f"d={a.d} tau={a.tau:g} N={a.n_particles} time={a.steps * a.eta:g} "
          f"ref {t_ref:.0f}s (stderr {ref.quad_error:.1e}, max|G| {ref.max_abs_G:.6f}), "
          f"runs {s1:.0f}s/{s2:.0f}s")
    print(" j   f_ref       f(eta/2)    |diff|     MCSE       eta-bias   tau_int")
    for j in range(a.n):
        print(f"{j:2d}  {ref.f_train[j]:+.6f}  {f2[j]:+.6f}  {diff[j]:.2e}  {se2[j]:.2e}  "
              f"{bias[j]:.2e}  {ti2[j]:.0f}")
    print(f"max |diff| / (3 MCSE + eta-bias + ref stderr) = {np.max(diff / allowed):.2f}  "
          f"-> {'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
