"""Wall time until the time-averaged predictor is within ε of the exact stationary measure.

    python benchmarks/time_to_accuracy.py --problem plane8 --threads 1
    python benchmarks/time_to_accuracy.py --problem d12 --budget 120
    python benchmarks/time_to_accuracy.py --quick                       # smoke run
    python benchmarks/time_to_accuracy.py --integrators mala@0.5 em@0.1 --Ns 4000 --starts convex

For every configuration (integrator, η, N, start; ``NAME@ETA`` runs an integrator at its own
step only, every other one runs at each of ``--etas``) one run is made at temperature ``--tau``,
recording the predictor on the training points every ``--sample-dt`` time units. Whenever the
record has grown by 10 % the time average over its second half (the first half is burn-in) is
compared with the reference (the Gibbs measure of THEORY §5, exact for d ≤ 2): the accuracy ε
counts as reached at the first such check where

    max_j ( |f̄_j − f_ref,j| + 2 MCSE_j ) ≤ ε     and the window holds ≥ 20 τ_int samples,

with the autocorrelation-aware MCSE of ``benchmarks.accuracy`` (so a lucky crossing of a noisy
average does not count). A run stops early once ``|f̄ − f_ref| − 3 MCSE`` exceeds twice every
ε not yet reached while the record is judged stationary by the analysis's verdict
(``analysis.stationarity.verdict``, as ``meanfield analyze`` prints it) after at least ``--min-time`` time units (the slow modes of the
stationary measure take 10³–10⁴ time units, THEORY §2): its bias is then established. The time is the stepping wall time
from the start (the convex solve of the warm start included; checks excluded), ``--threads``
threads.

Starts: ``hot``: i.i.d. ``N(0, 1)`` particles (the default initialisation) straight at ``τ``;
``convex``: the warm start of ``solvers.warmstart`` (the convex ``τ → 0`` solution's rays plus
the thermal spread at ``τ``).

Integrators: ``em``, ``lm`` (``solvers.stepper.Stepper``) and ``em-richardson``: two
Euler–Maruyama chains from the same start at ``η`` and ``η/2`` (independent noise, equal
simulated time, both counted in the wall time and the steps), whose averages are combined by
Richardson extrapolation to ``η → 0`` (``analysis.ladders.extrapolate_ladders``, THEORY §2.3),
as ``meanfield analyze FINE.h5 --extrapolate COARSE.h5`` does with two runs. ``mala``,
``mala-nojump`` and ``mala-noradial``: the Metropolis-adjusted passes of
``integrator = "mala"`` (docs/theory.md §2.6; jump share 0.1 with radial moves, jump share 0
with radial moves, jump share 0.1 without radial moves), which have no step bias; one pass
counts as one step.

``mala-bB`` (``--blocks B``): the blocked pass of block size ``B`` (``Stepper(block=B)``,
docs/theory.md §2.6; jump share 0.1 with radial moves), beside the sequential ``mala``.
``fullmala``: the full-vector MALA peer of ``benchmarks/peer_full_mala.py`` (all of ``Θ`` at
once, NumPy), its step tuned to acceptance 0.574 over ``--peer-tune`` steps whose wall time is
counted; its ``η`` only sets how often it is recorded (every ``sample-dt/η`` steps).

Every row also gives the effective samples per second of the recorded predictor over the
second half of its run (the worst point; ArviZ's bulk ESS, ``benchmarks.peer_full_mala.ess``).

Every integrator also has a ``+n`` variant (``mala+n``, ``mala-nojump+n``, ``em+n``,
``em-richardson+n``): a pair of independent systems of the same integrator at ``N`` and
``N/r`` (``--n-ratio r``, default 2; both started from their own start, both counted in the
wall time and the steps, equal simulated time), whose averages are combined linearly in
``1/N`` to remove the leading ``O(1/N)`` distance of the ``N``-particle law from the
mean-field Gibbs reference (``analysis.ladders.extrapolate_ladders`` with ``1/N`` as the
variable, as ``meanfield analyze BIG.h5 --extrapolate-n SMALL.h5`` does with two runs,
THEORY §2.3): ``f̄ = (r f̄_N − f̄_{N/r})/(r − 1)``, MCSE ``√(r² s_N² + s_{N/r}²)/(r − 1)``.
``em-richardson+n`` is four chains: each of the two systems is a Richardson pair.

The peer is what a researcher would otherwise write: noisy full-batch gradient descent in
vectorised NumPy (``benchmarks.bench_step.NumpyStep``: Euler–Maruyama, the same update), its η
tuned over the same range, in the same process and the same time-averaging. Printed: one row
per configuration, then per ε the best configuration, the best Euler–Maruyama configuration,
the best peer, and the ratios of their times. A peer that does not reach an ε within its
budget is estimated as the steps of the best Euler–Maruyama run (the same chain with another
noise stream) times the peer's measured time per step, and labelled as an estimate.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.accuracy import (  # noqa: E402
    add_problem_arguments,
    integrator_etas,
    load,
    time_average,
)
from benchmarks.common import set_threads  # noqa: E402

EPS = (3e-3, 1e-3, 3e-4)
#: The exact sampler's variants: name -> (jump share, radial-move probability).
MALA_VARIANTS = {"mala": (0.1, 1.0), "mala-nojump": (0.0, 1.0), "mala-noradial": (0.1, 0.0)}
#: Steps of the full-vector MALA peer's tuning (``--peer-tune``).
PEER_TUNE = 2000


def mala_block(who):
    """The block size of a ``mala-bB`` name, else None."""
    if who.startswith("mala-b") and who[6:].isdigit():
        return int(who[6:])
    return None


class FullMALAPeer:
    """``benchmarks.peer_full_mala.FullMALA`` with this benchmark's interface; its tuning is
    done (and timed) when made (:attr:`t_tune`)."""

    def __init__(self, X, y, theta, lam, tau, seed, tune=PEER_TUNE):
        from benchmarks.peer_full_mala import FullMALA
        t0 = time.perf_counter()
        self.s = FullMALA(X, y, theta, lam, tau, h=0.01, seed=seed)
        self.s.tune(tune)
        self.t_tune = time.perf_counter() - t0

    def run(self, k, tau):
        self.s.step(k)

    def predictor(self):
        return self.s.f


def start_particles(kind, X, y, lam, tau, N, seed):
    """``(theta, seconds)`` of a start: ``"hot"`` or ``"convex"``."""
    t0 = time.perf_counter()
    if kind == "hot":
        from solvers.langevin import initial_particles
        th = initial_particles(N, X.shape[1], 1.0, seed)
    elif kind == "convex":
        from solvers.convex import convex
        from solvers.warmstart import convex_particles
        sol = convex(X, y, lam)
        th = convex_particles(sol.directions, sol.weights, N, tau=tau, lam=lam, seed=seed)
    else:
        raise ValueError(f"unknown start {kind!r}")
    return th, time.perf_counter() - t0


class RichardsonPair:
    """Two Euler–Maruyama chains from one start, at ``η`` and ``η/2`` with independent noise,
    advanced over equal simulated time; their predictors are recorded side by side and
    combined by ``analysis.ladders.extrapolate_ladders`` (``meanfield analyze FINE.h5
    --extrapolate COARSE.h5``)."""

    #: steps of both chains per step of the coarse one
    steps_factor = 3

    def __init__(self, X, y, theta, seed, lam, eta):
        from benchmarks.bench_step import Ours
        self.coarse = Ours(X, y, theta, seed=seed, lam=lam, eta=eta)
        self.fine = Ours(X, y, theta, seed=seed + 7919, lam=lam, eta=eta / 2)

    def run(self, k, tau):
        self.coarse.run(k, tau=tau)
        self.fine.run(2 * k, tau=tau)

    def predictor(self):
        return np.concatenate([self.fine.predictor(), self.coarse.predictor()])

    @staticmethod
    def combine(m, se):
        """Extrapolated mean and MCSE from the side-by-side averages."""
        from analysis.ladders import extrapolate_ladders
        n = len(m) // 2
        (row,) = extrapolate_ladders([(1.0, m[:n], se[:n])], [(1.0, m[n:], se[n:])], 2.0)
        return row.mean, row.mcse


class NPair:
    """Two independent systems of one integrator at ``N`` (``big``) and ``N/r`` (``small``),
    advanced over equal simulated time; their predictors are recorded side by side and
    combined linearly in ``1/N`` by ``analysis.ladders.extrapolate_ladders`` (``meanfield
    analyze BIG.h5 --extrapolate-n SMALL.h5``). Either system may itself combine its record
    (a ``RichardsonPair``): that combination is applied first."""

    def __init__(self, big, small, ratio):
        self.big, self.small, self.ratio = big, small, float(ratio)
        self.steps_factor = (getattr(big, "steps_factor", 1)
                             + getattr(small, "steps_factor", 1))
        self._n = None

    def run(self, k, tau):
        self.big.run(k, tau=tau)
        self.small.run(k, tau=tau)

    def predictor(self):
        fb = np.asarray(self.big.predictor(), dtype=float)
        self._n = len(fb)
        return np.concatenate([fb, np.asarray(self.small.predictor(), dtype=float)])

    def combine(self, m, se):
        """Extrapolated (``1/N → 0``) mean and MCSE from the side-by-side averages."""
        from analysis.ladders import extrapolate_ladders
        n = self._n if self._n is not None else len(m) // 2
        parts = []
        for impl, sl in ((self.big, slice(0, n)), (self.small, slice(n, None))):
            mi, si = m[sl], se[sl]
            if hasattr(impl, "combine"):
                mi, si = impl.combine(mi, si)
            parts.append((1.0, mi, si))
        (row,) = extrapolate_ladders([parts[0]], [parts[1]], self.ratio)
        return row.mean, row.mcse


def make_impl(who, X, y, theta, lam, eta, seed, theta_small=None, n_ratio=2.0):
    """The stepper of a configuration; a ``+n`` integrator needs ``theta_small``, the start of
    its ``N/n_ratio`` system."""
    from benchmarks.bench_step import NumpyStep, Ours
    if who.endswith("+n"):
        if theta_small is None:
            raise ValueError(f"{who!r} needs the start of its N/{n_ratio:g} system")
        base = who[:-2]
        return NPair(make_impl(base, X, y, theta, lam, eta, seed),
                     make_impl(base, X, y, theta_small, lam, eta, seed + 104729), n_ratio)
    if who == "numpy":
        return NumpyStep(X, y, theta, seed=seed, lam=lam, eta=eta)
    if who == "em-richardson":
        return RichardsonPair(X, y, theta, seed, lam, eta)
    if who in MALA_VARIANTS:
        jumps, radial = MALA_VARIANTS[who]
        return Ours(X, y, theta, seed=seed, lam=lam, eta=eta, integrator="mala", jumps=jumps,
                    radial=radial)
    if mala_block(who) is not None:
        impl = Ours(X, y, theta, seed=seed, lam=lam, eta=eta, integrator="mala", jumps=0.1,
                    radial=1.0)
        impl.st.block = mala_block(who)      # 1 included: the blocked kernel, one a block
        return impl
    return Ours(X, y, theta, seed=seed, lam=lam, eta=eta, integrator=who)


def time_to_accuracy(impl, ref, tau, eta, eps, budget_s, t_start=0.0, sample_dt=0.5,
                     min_time=2e4):
    """Run ``impl`` until every ``eps`` is reached or ``budget_s`` of stepping wall time
    (or, after ``min_time`` time units, its bias is established).

    Returns
    -------
    dict
        ``{eps: (wall seconds, steps) or None}``, ``"final"``: the last check's
        ``(max error, max MCSE, simulated time)``, ``"biased"``: stopped early because
        the error's lower bound exceeded every remaining ε twice, and ``"wall"``,
        ``"steps"``: stepping time and steps of the whole run.
    """
    from analysis.stationarity import verdict
    every = max(1, int(round(sample_dt / eta)))
    F = []
    walls = []
    wall = t_start
    steps, t_sim = 0, 0.0
    hit = {e: None for e in eps}
    next_check = 20
    final = (math.nan, math.nan, 0.0)
    biased = False
    while wall < budget_s and any(v is None for v in hit.values()):
        t0 = time.perf_counter()
        impl.run(every, tau=tau)
        f = np.array(impl.predictor(), dtype=float)
        wall += time.perf_counter() - t0
        steps += every * getattr(impl, "steps_factor", 1)
        t_sim += every * eta
        F.append(f)
        walls.append(wall)
        if len(F) >= next_check:
            next_check = int(len(F) * 1.1) + 1
            W = np.asarray(F[len(F) // 2:])
            m, se, tint = time_average(W)
            if hasattr(impl, "combine"):
                m, se = impl.combine(m, se)
            err = np.abs(m - ref)
            final = (float(err.max()), float(se.max()), t_sim)
            ess = len(W) / float(tint.max())
            if ess < 20:
                continue
            ub = float(np.max(err + 2 * se))
            for e in eps:
                if hit[e] is None and ub <= e:
                    hit[e] = (wall, steps)
            # give up on an ε the bias clearly exceeds (twice, with 3 standard errors to spare)
            # once the record is judged stationary by the analysis's verdict
            lb = float(np.max(err - 3 * se))
            if (t_sim >= min_time and all(lb > 2 * e for e in eps if hit[e] is None)
                    and verdict(np.arange(1, len(F) + 1) * every, F).stationary):
                biased = True
                break
    hit["final"] = final
    hit["biased"] = biased
    hit["ess_s"] = math.nan
    if len(F) >= 40 and not hasattr(impl, "combine"):
        from benchmarks.peer_full_mala import ess
        h = len(F) // 2
        span = walls[-1] - walls[h - 1]
        if span > 0:
            hit["ess_s"] = float(ess(np.asarray(F[h:])).min()) / span
    hit["wall"], hit["steps"] = wall - t_start, steps
    return hit


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_problem_arguments(ap)
    ap.set_defaults(integrators=["em", "lm", "em-richardson"])
    ap.add_argument("--Ns", type=int, nargs="+", default=[1000, 4000])
    ap.add_argument("--starts", nargs="+", default=["hot", "convex"])
    ap.add_argument("--peer-Ns", type=int, nargs="+", default=None,
                    help="N of the NumPy peer (default: the smallest of --Ns)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--peer-budget", type=float, default=None,
                    help="wall seconds per peer run (default: --budget)")
    ap.add_argument("--budget", type=float, default=60.0, help="wall seconds per run (60)")
    ap.add_argument("--sample-dt", type=float, default=0.5, help="time units between samples")
    ap.add_argument("--min-time", type=float, default=2e4,
                    help="time units before a run may stop as biased (2e4)")
    ap.add_argument("--n-ratio", type=float, default=2.0,
                    help="r of the '+n' integrators (e.g. mala+n): their second system has "
                         "N/r particles (2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blocks", type=int, nargs="+", default=[],
                    help="block sizes B of the blocked pass: the names mala-bB (e.g. --blocks 4 "
                         "16 --integrators mala@0.2 mala-b4@0.2 mala-b16@0.2)")
    ap.add_argument("--peer-tune", type=int, default=PEER_TUNE,
                    help=f"tuning steps of the fullmala peer ({PEER_TUNE})")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="one small configuration each (the first of --etas and --Ns), 5 s a "
                         "run: overrides --budget")
    args = ap.parse_args(argv)
    if args.quick:
        args.etas, args.Ns, args.budget = args.etas[:1], args.Ns[:1], 5.0
    from solvers.integrators import INTEGRATORS  # the names Stepper takes (light import)
    # each also as NAME+n (the 1/N pair) and as NAME@ETA, and the two of this benchmark
    blocked = [f"mala-b{b}" for b in args.blocks]
    known = [w + pair for pair in ("", "+n")
             for w in (*INTEGRATORS, "em-richardson", *MALA_VARIANTS, *blocked)] + ["fullmala"]
    runs = integrator_etas(args.integrators, args.etas, known)
    set_threads(args.threads)
    X, y, lam = load(args.problem)
    from solvers.gibbs import gibbs
    from solvers.reference_methods import QUADRATURE_MAX_D, choose
    if choose(X.shape[1]) != "quadrature":
        raise SystemExit(f"the quadrature Gibbs reference needs d <= {QUADRATURE_MAX_D}")
    ref = gibbs(X, y, lam, args.tau).f_train
    print(f"{args.problem}: n={len(y)} d={X.shape[1]} lam={lam} tau={args.tau:g}; budget "
          f"{args.budget:g} s per run, {args.threads} thread(s); load average at start "
          f"{os.getloadavg()[0]:.2f}")
    configs = [(w, e, N, s) for w, e in runs for N in args.Ns for s in args.starts]
    if not args.no_peer:
        peer_Ns = args.peer_Ns or [min(args.Ns)]
        configs += [("numpy", e, N, s) for e in args.etas for N in peer_Ns
                    for s in args.starts]
    results = []
    peer_ms = {}
    head = " | ".join(f"eps={e:g}: s (steps)" for e in EPS)
    print(f"\n| who | eta | N | start | {head} | last max err / MCSE / time units | "
          "ESS f / s | load |")
    print("|---" * (7 + len(EPS)) + "|")
    for who, eta, N, start in configs:
        th, t_start = start_particles(start, X, y, lam, args.tau, N, args.seed)
        th_small, ratio = None, args.n_ratio
        if who.endswith("+n"):
            N_small = int(round(N / args.n_ratio))
            th_small, t_small = start_particles(start, X, y, lam, args.tau, N_small,
                                                args.seed + 1)
            t_start += t_small
            ratio = N / N_small                  # the ratio of the widths actually run
        if who == "fullmala":           # its tuning is counted
            impl = FullMALAPeer(X, y, th, lam, args.tau, args.seed, args.peer_tune)
            t_start += impl.t_tune
        else:
            impl = make_impl(who, X, y, th, lam, eta, args.seed, th_small, ratio)
            impl.run(1, tau=args.tau)     # compile / warm up outside the clock
        budget = args.peer_budget if who == "numpy" and args.peer_budget else args.budget
        try:
            hit = time_to_accuracy(impl, ref, args.tau, eta, EPS, budget, t_start,
                                   args.sample_dt, args.min_time)
        except FloatingPointError:
            print(f"| {who} | {eta:g} | {N} | {start} | diverged |")
            continue
        results.append(((who, eta, N, start), hit))
        if who == "numpy" and hit["steps"]:
            peer_ms[(eta, N, start)] = hit["wall"] / hit["steps"] * 1e3
        miss = "biased" if hit["biased"] else "–"
        cells = " | ".join(miss if hit[e] is None else f"{hit[e][0]:.1f} ({hit[e][1]})"
                           for e in EPS)
        fe, fs, ft = hit["final"]
        print(f"| {who} | {eta:g} | {N} | {start} | {cells} | {fe:.1e} / {fs:.1e} / {ft:.0f} "
              f"| {hit['ess_s']:.3g} | {os.getloadavg()[0]:.1f} |", flush=True)
    print("\n('–': not reached within the budget; 'biased': stopped early, the error's lower "
          "bound |f̄ − f_ref| − 3 MCSE exceeded twice every remaining ε in a stationary window)")
    def best(e, pred):
        cand = [(h[e][0], c) for c, h in results if pred(c) and h[e] is not None]
        return min(cand) if cand else None

    def fmt(b):
        return ("not reached" if b is None else
                f"{b[0]:.1f} s ({b[1][0]}, eta={b[1][1]:g}, N={b[1][2]}, {b[1][3]})")

    for e in EPS:
        b_all = best(e, lambda c: c[0] != "numpy")
        b_em = best(e, lambda c: c[0] == "em")
        b_peer = best(e, lambda c: c[0] == "numpy")
        line = f"eps={e:g}: best {fmt(b_all)}; best EM {fmt(b_em)}"
        if not args.no_peer:
            line += f"; NumPy peer {fmt(b_peer)}"
        if b_all and b_em:
            line += f"; EM/best = {b_em[0] / b_all[0]:.1f}x"
        if b_all and b_peer:
            line += f"; peer/best = {b_peer[0] / b_all[0]:.1f}x"
        elif b_em and peer_ms:
            # the peer is the same Euler–Maruyama chain (another noise stream): its expected
            # step count is EM's; estimate its time from its measured time per step
            c = b_em[1]
            steps = dict(results)[c][e][1]
            ms = peer_ms.get((c[1], c[2], c[3]))
            if ms:
                est = steps * ms / 1e3
                line += (f"; peer (estimated: EM's {steps} steps x its {ms:.3f} ms/step) "
                         f"{est:.0f} s, peer/best = {est / b_all[0]:.1f}x")
        print(line)
    # the families with and without the 1/N pair: MALA (either jump share), the Richardson
    # pair, Euler–Maruyama
    fams = (("MALA", tuple(MALA_VARIANTS)), ("blocked MALA", tuple(blocked)),
            ("Richardson", ("em-richardson",)), ("EM", ("em",)), ("full-vector MALA",
                                                                 ("fullmala",)))
    for e in EPS:
        bs = {name: best(e, lambda c, ws=ws: c[0].removesuffix("+n") in ws)
              for name, ws in fams}
        line = f"eps={e:g}: " + "; ".join(f"best {k} {fmt(b)}" for k, b in bs.items())
        for k in ("blocked MALA", "Richardson", "EM", "full-vector MALA"):
            if bs["MALA"] and bs[k]:
                line += f"; {k}/MALA = {bs[k][0] / bs['MALA'][0]:.2f}x"
        print(line)
    return results


if __name__ == "__main__":
    main()
