"""Which knob to turn: the step bias (η) and the finite-N bias (1/N) of the time-averaged
predictor against the exact Gibbs reference, for Euler–Maruyama and Leimkuhler–Matthews.

    python benchmarks/step_and_particle_bias.py --threads 1            # plane8, tau = 1e-3
    python benchmarks/step_and_particle_bias.py --quick                # a short smoke run

Every configuration (integrator, η, N) continues from one common equilibrated state per N
(a hot stage at 10τ, then a long stage at τ), runs ``--burn`` time units and then averages the
predictor on the training points over ``--time`` time units, with an autocorrelation-aware
MCSE. Pairs of Euler–Maruyama rows at ``η`` and ``2η`` are extrapolated to ``η → 0``
(Richardson, THEORY §2.3) and printed against the reference. The error
``e_j = f̄_j − f_Gibbs,j`` is then fitted, jointly over all configurations and
weighted by 1/MCSE², by

    e_j(η, N) = A_j^em η^p_em  or  A_j^lm η^p_lm   +   B_j / N   +   C_j,

``p`` by a grid search, ``A, B, C`` by least squares. ``C_j`` is what is left at η → 0,
N → ∞ for runs of this length from this start: the slow relaxation of the stationary measure
(THEORY §2, "Slow modes") plus Monte Carlo error; it is common to all configurations because
they share the start and the simulated time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.accuracy import (  # noqa: E402
    add_problem_arguments,
    advance,
    integrator_etas,
    load,
    sample_predictor,
    time_average,
)
from benchmarks.common import set_threads  # noqa: E402


def equilibrated(X, y, lam, tau, N, equil, seed, eta=0.05):
    """Particles after ``equil/5`` time units at ``10 τ`` and ``equil`` at ``τ`` (Euler–Maruyama,
    step ``eta``), from the default initialisation; and the global step reached."""
    from solvers.langevin import initial_particles
    from solvers.stepper import Stepper
    st = Stepper(X, y, N, lam=lam, eta=eta, seed=seed + 1000)
    th = initial_particles(N, X.shape[1], 1.0, seed)
    s = advance(st, th, 10 * tau, 0, int(equil / 5 / eta))
    s = advance(st, th, tau, s, int(equil / eta))
    return th


def measure(X, y, lam, tau, theta0, integrator, eta, burn, T, seed, sample_dt=0.5):
    """Time-averaged predictor after ``burn`` time units, over ``T`` time units.

    Returns ``(mean (n,), mcse (n,), wall seconds)``; raises FloatingPointError on divergence.
    """
    from solvers.stepper import Stepper
    t0 = time.perf_counter()
    th = theta0.copy()
    st = Stepper(X, y, len(th), lam=lam, eta=eta, seed=seed, integrator=integrator)
    s = advance(st, th, tau, 0, int(round(burn / eta)))
    every = max(1, int(round(sample_dt / eta)))
    F, _ = sample_predictor(st, th, tau, s, int(round(T / eta)), every)
    m, se, _ = time_average(F)
    return m, se, time.perf_counter() - t0


P_GRID = np.arange(0.5, 3.01, 0.05)


def fit(rows, p_grid=P_GRID):
    """Weighted least-squares fit of ``e = A_integ η^p_integ + B/N + C`` per training point.

    ``rows``: list of ``(integrator, eta, N, e (n,), se (n,))``. Returns a dict with ``p``
    (per integrator), ``A`` (per integrator, (n,)), ``B`` (n,), ``C`` (n,), ``chi2``, ``dof``.
    An integrator run at one step only (``NAME@ETA``) has no ``η^p`` term (its rows still
    enter ``B`` and ``C``): one step cannot separate a step bias from the rest.
    """
    integs = sorted({r[0] for r in rows if len({q[1] for q in rows if q[0] == r[0]}) >= 2})
    E = np.array([r[3] for r in rows])
    S = np.maximum(np.array([r[4] for r in rows]), 1e-12)
    best = None
    for ps in itertools.product(p_grid, repeat=len(integs)):
        cols = []
        for k, integ in enumerate(integs):
            cols.append([r[1] ** ps[k] if r[0] == integ else 0.0 for r in rows])
        cols.append([1.0 / r[2] for r in rows])
        cols.append([1.0] * len(rows))
        M = np.array(cols).T
        chi2, coef = 0.0, []
        for j in range(E.shape[1]):
            w = 1.0 / S[:, j]
            c, *_ = np.linalg.lstsq(M * w[:, None], E[:, j] * w, rcond=None)
            chi2 += float(np.sum(((M @ c - E[:, j]) * w) ** 2))
            coef.append(c)
        if best is None or chi2 < best[0]:
            best = (chi2, ps, np.array(coef))
    chi2, ps, coef = best
    out = {"p": dict(zip(integs, ps, strict=True)),
           "A": {i: coef[:, k] for k, i in enumerate(integs)},
           "B": coef[:, len(integs)], "C": coef[:, len(integs) + 1], "chi2": chi2,
           "dof": E.size - coef.size - len(integs)}
    return out


def richardson(rows):
    """Print the Richardson extrapolation to ``η → 0`` (``analysis.ladders.extrapolate_ladders``)
    of every pair of Euler–Maruyama rows with the same ``N`` and steps in ratio 2: its largest
    error against the Gibbs reference, that error in units of its MCSE, and the largest
    ``|e| + 2 MCSE`` (what ``benchmarks/time_to_accuracy.py`` holds against ε)."""
    from analysis.ladders import extrapolate_ladders
    em = {(r[1], r[2]): r for r in rows if r[0] == "em"}
    pairs = [(em[k], em[(2 * k[0], k[1])]) for k in sorted(em) if (2 * k[0], k[1]) in em]
    if not pairs:
        return
    print("\n| Richardson (em) | N | max\\|e\\| fine | max\\|e\\| extrapolated | max\\|e\\|/MCSE "
          "| max(\\|e\\| + 2 MCSE) |")
    print("|---|---|---|---|---|---|")
    for (_, ef, N, e_f, s_f), (_, ec, _, e_c, s_c) in pairs:
        # the errors against the reference extrapolate like the predictors (the reference is
        # the same for both)
        (row,) = extrapolate_ladders([(0.0, e_f, s_f)], [(0.0, e_c, s_c)], ec / ef)
        e, se = np.abs(row.mean), row.mcse
        print(f"| eta {ef:g} and {ec:g} | {N} | {np.max(np.abs(e_f)):.2e} | {e.max():.2e} "
              f"| {np.max(e / se):.2f} | {np.max(e + 2 * se):.2e} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_problem_arguments(ap)
    ap.add_argument("--N", type=int, default=4000, help="particles of the η sweep (4000)")
    ap.add_argument("--Ns", type=int, nargs="+", default=[1000, 16000],
                    help="further N, at --N-eta (1000 16000)")
    ap.add_argument("--N-eta", type=float, default=0.05,
                    help="step of the N sweep (0.05; an entry NAME@ETA keeps its own)")
    ap.add_argument("--equil", type=float, default=10000.0, help="time units at tau (10^4)")
    ap.add_argument("--burn", type=float, default=1000.0, help="time units (10^3)")
    ap.add_argument("--time", type=float, default=10000.0, help="averaging time units (10^4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="100x shorter (smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.equil, args.burn, args.time = args.equil / 100, args.burn / 100, args.time / 100
    # the η sweep at --N; the N sweep at --N-eta, or at an entry's own NAME@ETA
    from solvers.integrators import INTEGRATORS  # the names Stepper takes
    configs = [(i, e, args.N) for i, e in integrator_etas(args.integrators, args.etas,
                                                          tuple(INTEGRATORS))]
    configs += [(i, e, n) for i, e in integrator_etas(args.integrators, [args.N_eta])
                for n in args.Ns]
    set_threads(args.threads)
    from solvers.gibbs import gibbs
    X, y, lam = load(args.problem)
    ref = gibbs(X, y, lam, args.tau)
    load_avg = os.getloadavg()[0]
    print(f"{args.problem}: n={len(y)} d={X.shape[1]} lam={lam} tau={args.tau:g}; "
          f"max|G| = {ref.max_abs_G:.6f}; equil {args.equil:g}, burn {args.burn:g}, "
          f"average {args.time:g} time units; threads {args.threads}; load {load_avg:.2f}")
    starts = {}
    rows = []
    print("\n| integrator | eta | N | max\\|f̄ − f_Gibbs\\| | max MCSE | wall s |")
    print("|---|---|---|---|---|---|")
    for integ, eta, N in configs:
        if N not in starts:
            starts[N] = equilibrated(X, y, lam, args.tau, N, args.equil, args.seed)
        try:
            m, se, wall = measure(X, y, lam, args.tau, starts[N], integ, eta, args.burn,
                                  args.time, args.seed)
        except FloatingPointError as exc:
            print(f"| {integ} | {eta:g} | {N} | diverged ({exc}) | | |")
            continue
        e = m - ref.f_train
        rows.append((integ, eta, N, e, se))
        print(f"| {integ} | {eta:g} | {N} | {np.max(np.abs(e)):.2e} | {np.max(se):.1e} "
              f"| {wall:.0f} |", flush=True)
    richardson(rows)
    if len(rows) < 6:
        return rows, None
    res = fit(rows)
    print(f"\nfit e_j = A_j eta^p + B_j/N + C_j (chi2/dof = {res['chi2']:.1f}/{res['dof']}):")
    for integ in sorted({r[0] for r in rows}):
        if integ not in res["p"]:
            print(f"  {integ}: run at one step only, no step-bias term fitted")
            continue
        p, A = res["p"][integ], res["A"][integ]
        etas = sorted({r[1] for r in rows if r[0] == integ}, reverse=True)
        print(f"  {integ}: p = {p:.2f}; step bias max_j |A_j| eta^p = "
              + ", ".join(f"{np.max(np.abs(A)) * e ** p:.1e} (eta={e:g})" for e in etas))
    print("  finite-N bias max_j |B_j|/N = "
          + ", ".join(f"{np.max(np.abs(res['B'])) / n:.1e} (N={n})"
                      for n in sorted({args.N, *args.Ns})))
    print(f"  residual max_j |C_j| (slow relaxation + MC, common to all) = "
          f"{np.max(np.abs(res['C'])):.1e}")
    return rows, res


if __name__ == "__main__":
    main()
