"""The peer a reviewer would name: full-vector MALA on all of Θ at once, against our exact pass.

    python benchmarks/peer_full_mala.py                          # plane8 and D7, 60 s a run
    python benchmarks/peer_full_mala.py --problems plane8 --budget 30 --Ns 1000 4000 16000
    python benchmarks/peer_full_mala.py --quick                  # smoke run

BlackJAX's or NumPyro's MALA, run out of the box on the N-particle law of docs/theory.md §2.6,

    π_N(Θ) ∝ exp(−U(Θ)/τ),   U(Θ) = N·(1/(2n)) Σ_j (f_Θ(x_j) − y_j)² + (λ/2) Σ_i |θ_i|²,

moves all of ``Θ`` (``N (d+2)`` coordinates) at once: ``Θ' = Θ − h ∇U(Θ) + sqrt(2hτ) ξ``,
accepted with ``min(1, exp(−ΔU/τ) q(Θ|Θ')/q(Θ'|Θ))``. :class:`FullMALA` is that, written here
in NumPy without the project's kernels (its test: ``tests/integration/test_peer_full_mala.py``,
the Gaussian law's second moment and the one-particle law by quadrature). Its step ``h`` is
tuned to the acceptance ``0.574`` (the optimal scaling of Roberts & Rosenthal, J. R. Stat.
Soc. B 60, 1998) by Robbins–Monro on ``log h`` during the burn-in only, then frozen (so the
recorded chain is a fixed MALA kernel).

Side by side in one process, from the same convex warm start (``solvers.langevin.
convex_start``) at ``--tau``: our pass (``integrator = "mala"``, its defaults: jump share 0.1,
radial moves, ``η`` of the config) and the peer. Each gets ``--budget`` wall seconds, the first
``--burn`` share of them burn-in (the peer's tuning); over the rest the predictor on the
training points ``f(x_j)`` and the regulariser ``(1/N) Σ_i |θ_i|²`` are recorded after every
step (peer) or pass (ours), and their effective sample sizes computed by ArviZ
(``arviz_stats``, bulk ESS of one chain; else ``analysis.time_average.integrated_time``).
Printed per run: ms per step or pass, acceptance, the ESS of the worst ``f(x_j)`` and of the
regulariser, and both per wall second; then the ratios ours / peer. ``--Ns`` gives the scaling
of both in ``N``. ``--blocks`` adds rows of the blocked pass (``Stepper(block=b)``) when the
installed solvers has it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from functools import partial

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.accuracy import load  # noqa: E402
from benchmarks.common import set_threads  # noqa: E402

#: The optimal acceptance of MALA in high dimension (Roberts & Rosenthal 1998).
TARGET_ACCEPTANCE = 0.574
#: name -> (data set of benchmarks.accuracy, τ, η of our pass: the config's)
PROBLEMS = {"plane8": ("plane8", 1e-3, 0.2), "d7": ("d7", 5e-4, 0.2)}


class FullMALA:
    """Metropolis-adjusted Langevin on the whole particle system at once (NumPy).

    Parameters
    ----------
    X, y : ndarray (n, d), (n,)
    theta : ndarray (N, d+2)
        Start, rows ``(a, w_1..w_d, b)``; copied.
    lam, tau : float
    h : float
        Initial step.
    seed : int
    data_term : bool
        False: ``U = (λ/2) Σ |θ_i|²`` (a Gaussian; for the test).
    """

    def __init__(self, X, y, theta, lam, tau, h=0.01, seed=0, data_term=True):
        self.X = np.ascontiguousarray(X, float)
        self.Xt = np.ascontiguousarray(self.X.T)
        self.y = np.asarray(y, float)
        self.th = np.array(theta, dtype=float)
        self.lam, self.tau, self.h = float(lam), float(tau), float(h)
        self.rng = np.random.default_rng(seed)
        self.data_term = data_term
        self.U, self.g, self.f = self.terms(self.th)
        self.proposed = 0
        self.accepted = 0

    def terms(self, th):
        """``(U, ∇U, f)`` at ``th``."""
        N, n = th.shape[0], len(self.y)
        a, W, b = th[:, 0], th[:, 1:-1], th[:, -1]
        g = self.lam * th
        U = 0.5 * self.lam * float(np.sum(th * th))
        if not self.data_term:
            return U, g, np.zeros(n)
        Z = W @ self.Xt + b[:, None]                 # (N, n) pre-activations
        S = np.maximum(Z, 0.0)
        f = a @ S / N
        e = f - self.y
        U += 0.5 * N / n * float(e @ e)
        # ∂U/∂a_i = Σ_j e_j s_ij / n; ∂U/∂u_i = a_i Σ_j e_j 1[z_ij > 0] x̃_j / n
        Ge = (Z > 0.0) * (e / n)
        g[:, 0] += S @ (e / n)
        g[:, 1:-1] += a[:, None] * (Ge @ self.X)
        g[:, -1] += a * Ge.sum(axis=1)
        return U, g, f

    def step(self, k=1, adapt=None):
        """``k`` MALA steps; with ``adapt = (k0, rate)``, Robbins–Monro on ``log h`` towards
        :data:`TARGET_ACCEPTANCE` (burn-in only: an adapted chain is not a Markov chain)."""
        h, tau = self.h, self.tau
        for _ in range(k):
            sd = math.sqrt(2.0 * h * tau)
            prop = self.th - h * self.g + sd * self.rng.standard_normal(self.th.shape)
            Up, gp, fp = self.terms(prop)
            fwd = prop - self.th + h * self.g
            bwd = self.th - prop + h * gp
            log_a = -(Up - self.U) / tau - (np.sum(bwd * bwd) - np.sum(fwd * fwd)) / (4 * h * tau)
            self.proposed += 1
            if log_a >= 0 or math.log(self.rng.random()) < log_a:
                self.th, self.U, self.g, self.f = prop, Up, gp, fp
                self.accepted += 1
            if adapt is not None:
                k0, rate = adapt
                alpha = math.exp(min(0.0, log_a)) if math.isfinite(log_a) else 0.0
                h *= math.exp(rate / (1.0 + self.proposed / k0) ** 0.6
                              * (alpha - TARGET_ACCEPTANCE))
                self.h = h

    def tune(self, steps, until=None, k0=50.0, rate=1.0):
        """``steps`` steps adapting ``h`` (:meth:`step` with ``adapt``; more until the
        ``time.perf_counter()`` value ``until``), then ``h`` frozen at the geometric mean of its
        values over their second half (the averaged iterate of stochastic approximation: the
        last value carries the adaptation's noise)."""
        logs = []
        while len(logs) < steps or (until is not None and time.perf_counter() < until):
            self.step(1, adapt=(k0, rate))
            logs.append(math.log(self.h))
        self.h = math.exp(float(np.mean(logs[len(logs) // 2:])))
        self.proposed = self.accepted = 0

    def regulariser(self):
        """``(1/N) Σ_i |θ_i|²``."""
        return float(np.sum(self.th * self.th)) / self.th.shape[0]


class Ours:
    """Our pass (``Stepper(integrator="mala")``, one pass per step), the same interface."""

    def __init__(self, X, y, theta, lam, tau, eta, seed=0, block=None):
        from solvers.stepper import Stepper
        kw = {} if block is None else {"block": block}
        self.st = Stepper(X, y, theta.shape[0], lam=lam, eta=eta, seed=seed,
                          integrator="mala", **kw)
        self.th = np.array(theta, dtype=float)
        self.tau = tau
        self.k = 0

    def step(self, k=1, adapt=None):
        if self.st.advance(self.th, self.tau, self.k, k):
            raise FloatingPointError("diverged")
        self.k += k

    @property
    def f(self):
        return self.st.f

    def regulariser(self):
        return self.st.sum_sq / self.th.shape[0]

    @property
    def acceptance(self):
        c = self.st.counts
        return c[1] / max(c[0], 1)


def ess(series):
    """Effective sample size of each column of a (M, k) series: ArviZ's bulk ESS
    (``arviz_stats``) where installed, else ``M / τ_int`` (Sokal's window,
    ``analysis.time_average.integrated_time``)."""
    x = np.asarray(series, float)
    try:
        from arviz_stats.base import array_stats
    except ImportError:
        from analysis.time_average import integrated_time
        return x.shape[0] / integrated_time(x)
    out = np.empty(x.shape[1])
    for j in range(x.shape[1]):
        col = x[:, j]
        out[j] = float(array_stats.ess(col[None, :], method="bulk")) if np.ptp(col) > 0 \
            else float(len(col))
    return out


def measure(sampler, budget_s, burn, every=1, tune=False):
    """Run ``sampler`` for ``budget_s`` wall seconds: ``burn`` of them burn-in (tuning the
    peer's step), then record ``f`` and the regulariser every ``every`` steps. Returns a dict
    of ms per step, ESS and ESS per second (of the recorded window's wall time)."""
    t0 = time.perf_counter()
    t_end = t0 + burn * budget_s
    if tune:            # adapt over the first half of the burn-in (at least 200 steps)
        sampler.tune(200, until=t0 + 0.5 * burn * budget_s)
    while time.perf_counter() < t_end:
        sampler.step(10)
    if tune:
        sampler.proposed = sampler.accepted = 0
    F, reg = [], []
    steps = 0
    wall = 0.0
    while wall < (1.0 - burn) * budget_s:
        t0 = time.perf_counter()
        sampler.step(every)
        F.append(np.array(sampler.f, float))
        reg.append(sampler.regulariser())
        wall += time.perf_counter() - t0
        steps += every
    F, reg = np.asarray(F), np.asarray(reg)[:, None]
    ess_f, ess_r = ess(F), ess(reg)[0]
    acc = sampler.acceptance if isinstance(sampler, Ours) else \
        sampler.accepted / max(sampler.proposed, 1)
    return {"ms": wall / steps * 1e3, "steps": steps, "samples": len(F), "acc": acc,
            "ess_f": float(ess_f.min()), "ess_r": float(ess_r), "wall": wall,
            "h": getattr(sampler, "h", math.nan)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    ap.add_argument("--tau", type=float, default=None, help="temperature (default per problem)")
    ap.add_argument("--Ns", type=int, nargs="+", default=None,
                    help="widths (default: the config's, 4000 for plane8, 1000 for D7)")
    ap.add_argument("--budget", type=float, default=60.0, help="wall seconds per run (60)")
    ap.add_argument("--burn", type=float, default=0.3, help="burn-in share of the budget")
    ap.add_argument("--blocks", type=int, nargs="*", default=[],
                    help="also the blocked pass at these block sizes")
    ap.add_argument("--threads", type=int, default=1, help="numba and BLAS threads (1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="5 s a run, one problem")
    args = ap.parse_args(argv)
    if args.quick:
        args.budget, args.problems = 5.0, args.problems[:1]
    set_threads(args.threads)
    from solvers.langevin import convex_start
    print(f"{args.budget:g} s per run ({args.burn:.0%} burn-in), {args.threads} thread(s), "
          f"load {os.getloadavg()[0]:.2f}; ESS: "
          + ("ArviZ bulk" if _has_arviz() else "n / tau_int (Sokal)"))
    print("\n| problem | tau | N | sampler | ms/step | acc. | step | samples | ESS f (min_j) "
          "| ESS reg | ESS f / s | ESS reg / s |")
    print("|---" * 12 + "|")
    rows = {}
    for name in args.problems:
        data, tau, eta = PROBLEMS[name]
        tau = args.tau or tau
        X, y, lam = load(data)
        Ns = args.Ns or [4000 if name == "plane8" else 1000]
        for N in Ns:
            th = convex_start(X, y, N, lam, tau, args.seed)
            samplers = [("ours", partial(Ours, X, y, th, lam, tau, eta, args.seed), False)]
            samplers += [(f"ours, block {b}", partial(Ours, X, y, th, lam, tau, eta, args.seed,
                                                      block=b), False) for b in args.blocks]
            samplers.append(("full-vector MALA", partial(FullMALA, X, y, th, lam, tau, h=0.01,
                                                         seed=args.seed), True))
            for who, make, tune in samplers:
                s = make()
                s.step(1)                           # compile / warm up
                r = measure(s, args.budget, args.burn, tune=tune)
                rows[name, N, who] = r
                step = f"h={r['h']:.2e}" if tune else f"eta={eta:g}"
                print(f"| {name} | {tau:g} | {N} | {who} | {r['ms']:.3f} | {r['acc']:.3f} | "
                      f"{step} | {r['samples']} | {r['ess_f']:.0f} | {r['ess_r']:.0f} | "
                      f"{r['ess_f'] / r['wall']:.3g} | {r['ess_r'] / r['wall']:.3g} |",
                      flush=True)
    print()
    for (name, N, who), r in rows.items():
        if who == "full-vector MALA":
            continue
        p = rows[name, N, "full-vector MALA"]
        print(f"{name} N={N} {who}: ESS/s of f {r['ess_f'] / r['wall']:.3g} vs peer "
              f"{p['ess_f'] / p['wall']:.3g} ({_ratio(r['ess_f'] / r['wall'], p['ess_f'] / p['wall'])}), "
              f"of the regulariser {r['ess_r'] / r['wall']:.3g} vs {p['ess_r'] / p['wall']:.3g} "
              f"({_ratio(r['ess_r'] / r['wall'], p['ess_r'] / p['wall'])})")
    print("(an ESS below ~50 is no estimate: the window is shorter than a few autocorrelation "
          "times, and the ESS/s an upper bound)")
    return rows


def _ratio(a, b):
    return f"{a / b:.3g}x" if b > 0 else "inf"


def _has_arviz():
    try:
        import arviz_stats  # noqa: F401
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    main()
