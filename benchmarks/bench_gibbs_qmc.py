"""Cost of the randomized-QMC Gibbs reference (solvers/gibbsqmc.py): wall time to reach a
requested standard error of f, against the input dimension d and the temperature tau, with the
adaptive quadrature (solvers/gibbs.py) side by side where it applies (d <= 2).

Gaussian data (x_j ~ N(0, I_d), y_j ~ N(0, 1), seed 0), n = 10, lam = 0.05; each temperature
is solved from scratch and alone, as `meanfield reference gibbs CONFIG --tau T` does (the
reference continues from hotter temperatures internally where Newton needs it, and that is
in the time). CPU seconds count both cores where NumPy uses them; the wall time is what a user
waits. `--log` prints each growth of the sample (points, standard error).

    python benchmarks/bench_gibbs_qmc.py                      # headline: d=3, tau=1e-3, 1e-4
    python benchmarks/bench_gibbs_qmc.py --grid               # growth in d (3..6) and 1/tau
    python benchmarks/bench_gibbs_qmc.py --d 2 --tau 1e-2     # with the quadrature alongside

A case that exceeds --limit seconds is reported as such (where the method stops being usable
at that accuracy).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import numpy as np


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def one(d, tau, rtol, n=10, lam=0.05, seed=0, limit=600):
    """Solve one case; returns a dict (``seconds``, ``quad_error_rel``, ``points`` ...) or
    ``{"timeout": limit}``."""
    from meanfield.data import gaussian
    from solvers.gibbs import GibbsConvergenceError
    from solvers.gibbsqmc import GibbsAccuracyError, QMCGibbsReference
    ds = gaussian(n, d, seed)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(limit))
    t0 = time.process_time()
    w0 = time.time()
    try:
        ref = QMCGibbsReference(ds.X, ds.y, lam, rtol=rtol)
        s = ref.solve([tau])[-1]
    except _Timeout:
        return {"d": d, "tau": tau, "rtol": rtol, "timeout": limit}
    except GibbsAccuracyError as exc:
        return {"d": d, "tau": tau, "rtol": rtol, "out_of_reach": str(exc),
                "barrier": exc.error != exc.error, "coldest": exc.coldest,
                "wall_seconds": time.time() - w0}
    except GibbsConvergenceError:
        return {"d": d, "tau": tau, "rtol": rtol, "diverged": time.time() - w0}
    finally:
        signal.alarm(0)
    return {"d": d, "tau": tau, "rtol": rtol, "cpu_seconds": time.process_time() - t0,
            "wall_seconds": time.time() - w0,
            "quad_error_rel": s.quad_error / float(np.max(np.abs(s.f_train))),
            "points": s.points, "randomizations": s.randomizations, "n_peaks": s.n_peaks,
            "newton": s.iterations, "one_minus_max_G": 1 - s.max_abs_G}


def quadrature(d, tau, n=10, lam=0.05, seed=0):
    from meanfield.data import gaussian
    from solvers.gibbs import gibbs
    ds = gaussian(n, d, seed)
    t0 = time.process_time()
    gibbs(ds.X, ds.y, lam, [tau])
    return time.process_time() - t0


def _row(r):
    if "timeout" in r:
        return f"| {r['d']} | {r['tau']:.0e} | {r['rtol']:.0e} | over {r['timeout']} s | | | | |"
    if "diverged" in r:
        return (f"| {r['d']} | {r['tau']:.0e} | {r['rtol']:.0e} | no convergence after "
                f"{r['diverged']:.0f} s | | | | |")
    if "out_of_reach" in r:
        why = "barrier" if r["barrier"] else "accuracy"
        cold = f"{r['coldest']:.2g}" if r["coldest"] is not None else "none"
        return (f"| {r['d']} | {r['tau']:.0e} | {r['rtol']:.0e} | refused ({why}; coldest "
                f"solvable tau {cold}) after {r['wall_seconds']:.0f} s wall | | | | |")
    return (f"| {r['d']} | {r['tau']:.0e} | {r['rtol']:.0e} | {r['cpu_seconds']:.1f} "
            f"({r['wall_seconds']:.0f} wall) | {r['quad_error_rel']:.1e} | "
            f"{r['randomizations']} x {r['points']} | {r['n_peaks']} | "
            f"{r['one_minus_max_G']:.1e} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--d", type=int, default=3, help="input dimension of the Gaussian data")
    ap.add_argument("--tau", type=float, default=1e-3, help="temperature")
    ap.add_argument("--rtol", type=float, default=1e-4,
                    help="requested standard error of f, relative to max|f|")
    ap.add_argument("--grid", action="store_true",
                    help="d = 3..6 at tau = 1e-2, d = 4 at 1e-3, tau = 1e-3 and 1e-4 at d = 3 "
                         "(rtol 1e-3), and d = 3 at tau = 1e-2 with rtol 1e-4")
    ap.add_argument("--limit", type=float, default=600,
                    help="seconds per case; a case past it is reported as such")
    ap.add_argument("--log", action="store_true", help="log the growth of the sample")
    a = ap.parse_args(argv)
    from solvers.reference_methods import choose
    if a.log:
        import logging
        logging.basicConfig(format="%(relativeCreated)8.0f ms  %(message)s")
        logging.getLogger("solvers.gibbsqmc").setLevel(logging.DEBUG)
    print("| d | tau | rtol | CPU s | stderr / max|f| | points | peaks | 1 - max|G| |")
    print("|---|---|---|---|---|---|---|---|")
    cases = [(a.d, a.tau, a.rtol)]
    if a.grid:
        cases = [(d, 1e-2, 1e-3) for d in (3, 4, 5, 6)] + [(4, 1e-3, 1e-3)] + \
                [(3, t, 1e-3) for t in (1e-3, 1e-4)] + [(3, 1e-2, 1e-4)]
    for d, tau, rtol in cases:
        print(_row(one(d, tau, rtol, limit=a.limit)), flush=True)
        if choose(d) == "quadrature":
            print(f"|   quadrature (peer) | | | {quadrature(d, tau):.1f} | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
