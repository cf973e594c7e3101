"""Does a kink in the drift, on its own, cost the Leimkuhler–Matthews step its second order?

On the ReLU network the Leimkuhler–Matthews (LM) step's invariant-measure bias in the
time-averaged predictor scales like ``η^1.10`` against Euler–Maruyama's (EM) ``η^1.00``
(THEORY §2.1, §2.3), although for smooth potentials LM is second order. The suspected cause is
that the ReLU drift jumps across every kink hyperplane. This control takes the network out and
keeps the kink: one-dimensional overdamped Langevin dynamics

    dθ = −U'(θ) dt + sqrt(2τ) dW,        invariant density ∝ exp(−U/τ),

    EM:  θ_{k+1} = θ_k − η U'(θ_k) + sqrt(2ητ) ξ_{k+1}
    LM:  θ_{k+1} = θ_k − η U'(θ_k) + sqrt(2ητ) (ξ_k + ξ_{k+1})/2

on potentials of one scale (``λ = 1``, ``τ = 0.1``, ``c = 0``: the kink sits in the bulk of the
measure, at its mode):

- ``kinked κ``: ``U = λθ²/2 + κ max(θ − c, 0)``, the drift jumps by ``κ`` at ``θ = c`` (one ReLU
  unit); ``κ = 1`` and a strong kink ``κ = 10`` (``--strong-kappa``);
- ``smooth s``: ``U = λθ²/2 + κ s softplus((θ − c)/s)``, ``κ = 1``, the same potential with the
  kink rounded over a width ``s``; ``s = sqrt(τ/λ)`` (the thermal width) and ``0.1 sqrt(τ/λ)``;
- ``OU``: ``κ = 0``, where LM is exact (THEORY §2.1), a sanity row.

Observables: ``E[θ]`` and ``E[max(θ − c, 0)]`` (a ReLU feature); exact values by
``scipy.integrate.quad`` of the density. The bias of each scheme at each ``η`` is computed twice,
independently:

1. *Grid*: the invariant law of the discrete chain itself. Both schemes are Markov in a
   pre-noise variable ``y`` with ``θ = y + aξ`` and ``y' = y'(θ, ξ) = θ − ηU'(θ) + bξ``, the same
   ``ξ`` twice: ``(a, b) = (σ, 0)`` for EM (``y_k = θ_{k−1} − ηU'(θ_{k−1})``) and ``(σ/2, σ/2)`` for
   LM (``y_k = θ_k − σξ_k/2``, independent of ``ξ_k``), ``σ = sqrt(2ητ)``. The transition of
   ``y`` is discretised on a grid of spacing ``σ/per_sigma`` (Gauss–Legendre in ``ξ`` on both
   sides of the kink's ``ξ* = (c − y)/a``, cubic Lagrange deposit onto the nodes, exact for
   cubics) and its stationary vector solved for; ``E[f(θ)]`` then follows from Gaussian closed
   forms in ``ξ``. Its error is estimated as the change from a run at half the resolution (a
   bound: doubling the resolution again changes the result about 15 times less) and printed per
   row. With it the ``O(η²)`` bias of LM on the smooth potentials (down to 1e-9) is resolved,
   which no affordable Monte Carlo run resolves.
2. *Monte Carlo*: many independent chains, vectorised, started from the exact Gibbs law (inverse
   CDF), ``--burn`` time units of burn-in, then time-averaged over ``--time`` time units. All
   potentials and both schemes share the random numbers, and the Ornstein–Uhlenbeck chain's time
   average of θ (exact mean 0 by symmetry, either scheme) is a control variate for the others.
   The standard error is that of the mean of independent chain averages. It checks the grid's
   biases (``z = (MC − grid)/s.e.``).

Orders: ``p`` from the least-squares fit of ``log|bias| = p log η + const`` over the ``η`` whose
bias is resolved (grid: above 10 times its error estimate; MC: above 3 s.e.) and of one sign;
``p_last`` is the slope between the two smallest such ``η``. ``EM extrapolated``: what the
Richardson extrapolation to ``η → 0`` of Euler–Maruyama (THEORY §2.3, ``meanfield analyze
FINE.h5 --extrapolate COARSE.h5``) leaves of the bias at the two smallest grid steps.

    python benchmarks/lm_kink_control.py               # about 2.5 min single-threaded
    python benchmarks/lm_kink_control.py --quick       # < 30 s
    python benchmarks/lm_kink_control.py --chains 32768 --time 40 --strong-kappa 3

Reading. Second order on the smooth potentials and exactness on OU check the schemes; the
kinked rows then isolate the kink. One number sets the kinked rows' regime: the drift jump per
step ``ηκ`` against the width ``τ/κ`` of the Gibbs density's boundary layer on the kink's steep
side, i.e. ``ηκ²/τ``. Where it is small (``κ = 1``: 0.03–2) LM's bias approaches ``η^{3/2}``
and stays well below EM's; where it is large (``κ = 10``: 3–200) LM is about first order and
barely better than EM, as measured on the ReLU network (THEORY §2.1). For the network this
suggests that its drift jumps alone can explain LM's lost order, and that LM ≈ EM there places it
in the large-``ηκ²/τ`` regime, with ``κ = |a R_j x̃_j|`` the jump across the kink hyperplane of
data point ``j`` (THEORY §2.1): at ``τ = 10⁻³``, ``η = 0.05`` any ``κ`` above about 0.15. Even
a much smaller ``η`` would, by this control, bring LM no closer to second order than ``η^{3/2}``.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.integrate import quad
from scipy.sparse.linalg import spsolve
from scipy.special import expit, ndtr

LAM, TAU, KAPPA, C = 1.0, 0.1, 1.0, 0.0
OBSERVABLES = ("E[θ]", "E[relu(θ−c)]")
INTEGRATORS = ("EM", "LM")


@dataclass(frozen=True)
class Potential:
    """``U(θ) = λθ²/2 + κ k(θ − c)`` with ``k = max(·, 0)`` (``width = 0``), its softplus
    rounding ``s softplus(·/s)`` (``width = s > 0``), or ``κ = 0`` (Ornstein–Uhlenbeck)."""

    name: str
    lam: float
    kappa: float
    c: float
    width: float

    def energy(self, t):
        """``U(t)`` for an array ``t``."""
        t = np.asarray(t, dtype=float)
        if self.kappa == 0:
            k = 0.0
        elif self.width == 0:
            k = np.maximum(t - self.c, 0.0)
        else:
            k = self.width * np.logaddexp(0.0, (t - self.c) / self.width)
        return 0.5 * self.lam * t * t + self.kappa * k

    def drift(self, t):
        """``U'(t)`` for an array ``t``; at the kink the right-hand value is taken for
        ``t > c`` only."""
        if self.kappa == 0:
            return self.lam * t
        if self.width == 0:
            return self.lam * t + self.kappa * (t > self.c)
        return self.lam * t + self.kappa * expit((t - self.c) / self.width)


def potentials(lam=LAM, tau=TAU, kappa=KAPPA, c=C, strong_kappa=10.0):
    """Kinked (``κ`` and, unless 0, ``strong_kappa``), two roundings of the ``κ`` kink, and
    Ornstein–Uhlenbeck."""
    s = np.sqrt(tau / lam)
    pots = [Potential(f"kinked κ={kappa:g}", lam, kappa, c, 0.0)]
    if strong_kappa:
        pots.append(Potential(f"kinked κ={strong_kappa:g}", lam, strong_kappa, c, 0.0))
    return pots + [Potential(f"smooth s={0.1 * s:.3g}", lam, kappa, c, 0.1 * s),
                   Potential(f"smooth s={s:.3g}", lam, kappa, c, s),
                   Potential("OU", lam, 0.0, c, 0.0)]


def support(pot, tau, level):
    """``(lo, hi)``: where ``(U − min U)/τ ≤ level`` (``U`` is convex)."""
    half = abs(pot.c) + abs(pot.kappa) / pot.lam + 4 * np.sqrt(level * tau / pot.lam) + 1.0
    t = np.linspace(-half, half, 400_001)
    e = (pot.energy(t) - pot.energy(t).min()) / tau
    inside = t[e <= level]
    return inside[0], inside[-1]


def exact(pot, tau):
    """Gibbs expectations ``{observable: value}`` by adaptive quadrature, split at the kink."""
    lo, hi = support(pot, tau, 80.0)
    umin = pot.energy(np.linspace(lo, hi, 100_001)).min()

    def integral(f):
        def g(t):
            return f(t) * np.exp(-(float(pot.energy(t)) - umin) / tau)
        return sum(quad(g, a, b, epsabs=0.0, epsrel=1e-13, limit=400)[0]
                   for a, b in ((lo, pot.c), (pot.c, hi)))

    z = integral(lambda t: 1.0)
    return {OBSERVABLES[0]: integral(lambda t: t) / z,
            OBSERVABLES[1]: integral(lambda t: max(t - pot.c, 0.0)) / z}


def gaussian_observables(y, a, c):
    """``E[f(y + aξ)]``, ``ξ ~ N(0, 1)``, for each observable; arrays of the shape of ``y``."""
    m = (y - c) / a
    relu = a * (m * ndtr(m) + np.exp(-0.5 * m * m) / np.sqrt(2 * np.pi))
    return {OBSERVABLES[0]: y, OBSERVABLES[1]: relu}


def grid_expectations(pot, tau, eta, integrator, per_sigma=20, nodes=48, cut=8.5):
    """Stationary expectations of the discrete chain (EM or LM) by its Markov operator on a grid.

    Parameters
    ----------
    pot : Potential
    tau, eta : float
        Temperature and step.
    integrator : {"EM", "LM"}
    per_sigma : int
        Grid nodes per ``σ = sqrt(2ητ)``.
    nodes : int
        Gauss–Legendre nodes in ``ξ`` on each side of the kink, over ``|ξ| ≤ cut``.

    Returns
    -------
    dict
        ``{observable: E[f(θ)]}`` under the chain's invariant law.
    """
    sigma = np.sqrt(2 * eta * tau)
    a, b = (sigma, 0.0) if integrator == "EM" else (sigma / 2, sigma / 2)
    lo, hi = support(pot, tau, 40.0)
    lo, hi = lo - 8 * sigma, hi + 8 * sigma
    h = sigma / per_sigma
    y = lo + h * np.arange(int(np.ceil((hi - lo) / h)) + 1)
    n = len(y)
    gx, gw = np.polynomial.legendre.leggauss(nodes)
    split = np.clip((pot.c - y) / a, -cut, cut)
    rows, cols, vals = [], [], []
    index = np.repeat(np.arange(n), nodes)
    for left, right in ((np.full(n, -cut), split), (split, np.full(n, cut))):
        mid, half = (left + right)[:, None] / 2, (right - left)[:, None] / 2
        xi = mid + half * gx
        w = half * gw * np.exp(-0.5 * xi * xi) / np.sqrt(2 * np.pi)
        th = y[:, None] + a * xi
        target = th - eta * pot.drift(th) + b * xi
        u = np.clip((target - lo) / h, 1.0, n - 3 - 1e-9)
        j = np.floor(u).astype(np.int64)
        f = u - j
        deposit = (-f * (f - 1) * (f - 2) / 6, (f + 1) * (f - 1) * (f - 2) / 2,
                   -(f + 1) * f * (f - 2) / 2, (f + 1) * f * (f - 1) / 6)
        for offset, d in zip((-1, 0, 1, 2), deposit):
            rows.append(index)
            cols.append((j + offset).ravel())
            vals.append((w * d).ravel())
    P = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(n, n))
    P = sparse.diags(1.0 / np.asarray(P.sum(axis=1)).ravel()) @ P   # quadrature mass 1 − 1e-15
    A = (P.T - sparse.identity(n)).tolil()
    A[0, :] = 1.0                                                       # normalisation
    rhs = np.zeros(n)
    rhs[0] = 1.0
    pi = spsolve(A.tocsc(), rhs)
    return {k: float(pi @ v) for k, v in gaussian_observables(y, a, pot.c).items()}


def _inverse_cdf_sampler(pot, tau):
    lo, hi = support(pot, tau, 60.0)
    t = np.linspace(lo, hi, 400_001)
    p = np.exp(-(pot.energy(t) - pot.energy(t).min()) / tau)
    cdf = np.concatenate([[0.0], np.cumsum((p[1:] + p[:-1]) / 2)])
    cdf /= cdf[-1]
    return lambda u: np.interp(u, cdf, t)


def monte_carlo(pots, tau, eta, chains, burn, horizon, seed, block=16384):
    """Time averages of independent EM and LM chains on every potential, common random numbers.

    Returns
    -------
    dict
        ``{(potential name, integrator, observable): (mean, standard error)}`` over ``chains``
        chain averages, each over ``round(horizon/η)`` steps after ``round(burn/η)``.
    """
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(2 * eta * tau)
    n_burn, n_avg = int(round(burn / eta)), int(round(horizon / eta))
    samplers = [_inverse_cdf_sampler(p, tau) for p in pots]
    keys = [(p, i) for p in range(len(pots)) for i in INTEGRATORS]
    sums = {(k, o): np.empty(chains) for k in keys for o in OBSERVABLES}
    for start in range(0, chains, block):
        m = min(block, chains - start)
        u = rng.random(m)
        theta = {(p, i): samplers[p](u) for p, i in keys}
        acc = {k: (np.zeros(m), np.zeros(m)) for k in keys}
        buf = np.empty(m)
        noise = {"EM": np.empty(m), "LM": np.empty(m)}
        xi = rng.standard_normal(m)
        for step in range(n_burn + n_avg):
            xn = rng.standard_normal(m)
            np.multiply(xn, sigma, out=noise["EM"])
            np.add(xi, xn, out=noise["LM"])
            noise["LM"] *= sigma / 2
            xi = xn
            for (p, i), th in theta.items():
                pot = pots[p]
                if pot.kappa != 0:              # buf = η κ k'(θ − c)
                    if pot.width == 0:
                        np.greater(th, pot.c, out=buf, casting="unsafe")
                    else:
                        np.subtract(th, pot.c, out=buf)
                        buf *= 1.0 / pot.width
                        expit(buf, out=buf)
                    buf *= eta * pot.kappa
                    th *= 1.0 - eta * pot.lam
                    th -= buf
                else:
                    th *= 1.0 - eta * pot.lam
                th += noise[i]
                if step >= n_burn:
                    s1, s2 = acc[(p, i)]
                    s1 += th
                    np.subtract(th, pot.c, out=buf)
                    np.maximum(buf, 0.0, out=buf)
                    s2 += buf
        for k in keys:
            for o, s in zip(OBSERVABLES, acc[k]):
                sums[(k, o)][start:start + m] = s / n_avg
    ou = next((p for p, pot in enumerate(pots) if pot.kappa == 0), None)
    out = {}
    for ((p, i), o), v in sums.items():
        trivial = ou is None or (p == ou and o == OBSERVABLES[0])
        x = None if trivial else sums[((ou, i), OBSERVABLES[0])]
        out[(pots[p].name, i, o)] = control_variate_mean(v, x)
    return out


def control_variate_mean(v, x=None):
    """``(mean, standard error)`` of ``E[v]`` from independent samples ``v`` (chains,), less
    ``β x`` with ``β`` the regression coefficient of ``v`` on a control ``x`` whose exact mean
    is 0 (here the Ornstein–Uhlenbeck chain's time average of θ, driven by the same numbers)."""
    if x is not None:
        xc = x - x.mean()
        v = v - (xc @ (v - v.mean())) / (xc @ xc) * x
    return v.mean(), v.std(ddof=1) / np.sqrt(len(v))


def fit_order(etas, bias, err, factor):
    """Order of the bias in ``η``.

    Of the ``η`` with ``|bias| > factor·err``, take the smallest and every larger one up to the
    first change of sign (a pre-asymptotic bias may cross zero). Returns ``(p, p_last)``: the
    least-squares slope of ``log|bias|`` on ``log η`` over them, and the slope between the two
    smallest; ``None`` where fewer than two remain.
    """
    etas, bias, err = map(np.asarray, (etas, bias, err))
    order = np.argsort(etas)
    e, b = etas[order], bias[order]
    ok = np.abs(b) > factor * err[order]
    e, b = e[ok], b[ok]
    if len(b) < 2:
        return None, None
    keep = np.cumprod(np.sign(b) == np.sign(b[0])).astype(bool)
    e, b = e[keep], b[keep]
    if len(b) < 2:
        return None, None
    x, yv = np.log(e), np.log(np.abs(b))
    return np.polyfit(x, yv, 1)[0], (yv[1] - yv[0]) / (x[1] - x[0])


def _extrapolated(etas, bias, err):
    """What Richardson extrapolation (``analysis.ladders.extrapolate_ladders``) leaves of the
    bias at the two smallest steps ``η`` and ``2η``: ``2 b(η) − b(2η)``, and as a fraction of
    ``b(η)``; ``—`` where ``b(η)`` is not resolved or the steps are not in ratio 2."""
    order = np.argsort(etas)
    (e1, b1, s1), (e2, b2, s2) = [(etas[k], bias[k], err[k]) for k in order[:2]]
    if not (math.isclose(e2, 2 * e1) and abs(b1) > 10 * s1):
        return "—"
    left, floor = 2 * b1 - b2, 10 * (2 * s1 + s2)
    if abs(left) > floor:
        return f"{left:.1e} ({abs(left / b1):.2f} of b(η={e1:g}))"
    return f"<{floor:.0e} (< {floor / abs(b1):.2g} of b(η={e1:g}))"


def _fmt(p):
    return "—" if p is None else f"{p:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chains", type=int, default=131072, help="Monte Carlo chains per η")
    ap.add_argument("--time", type=float, default=75.0,
                    help="averaging window per chain, time units (default 75)")
    ap.add_argument("--burn", type=float, default=5.0,
                    help="burn-in from the exact Gibbs law, time units (default 5)")
    ap.add_argument("--etas", type=float, nargs="+", default=[0.2, 0.1, 0.05, 0.025, 0.0125],
                    help="steps for both computations")
    ap.add_argument("--grid-etas", type=float, nargs="*", default=[0.00625, 0.003125],
                    help="further, smaller steps for the grid computation only")
    ap.add_argument("--per-sigma", type=int, default=20, help="grid nodes per σ (default 20)")
    ap.add_argument("--strong-kappa", type=float, default=10.0,
                    help="drift jump of the second kinked potential; 0 leaves it out (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes: 4096 chains, 10 time units, coarser grid (< 30 s)")
    args = ap.parse_args(argv)
    if args.quick:
        args.chains, args.time, args.per_sigma, args.grid_etas = 4096, 10.0, 10, []
    if args.chains < 2 or args.time <= 0 or args.burn < 0 or args.per_sigma < 4:
        ap.error("need --chains ≥ 2, --time > 0, --burn ≥ 0, --per-sigma ≥ 4")
    if any(e <= 0 or e * LAM >= 1 for e in args.etas + args.grid_etas):
        ap.error("every η must lie in (0, 1/λ)")
    t_start = time.perf_counter()
    pots = potentials(strong_kappa=args.strong_kappa)
    mc_etas = sorted(args.etas, reverse=True)
    grid_etas = sorted(set(mc_etas) | set(args.grid_etas), reverse=True)
    print(f"λ = {LAM}, τ = {TAU}, κ = {KAPPA}, c = {C}; grid: {args.per_sigma} nodes per σ "
          f"(error from {args.per_sigma // 2}); Monte Carlo: {args.chains} chains, burn-in "
          f"{args.burn}, average over {args.time} time units, seed {args.seed}")

    ref = {p.name: exact(p, TAU) for p in pots}
    grid = {}
    for p in pots:
        for i in INTEGRATORS:
            for e in grid_etas:
                fine = grid_expectations(p, TAU, e, i, per_sigma=args.per_sigma)
                coarse = grid_expectations(p, TAU, e, i, per_sigma=args.per_sigma // 2,
                                           nodes=32)
                for o in OBSERVABLES:
                    grid[(p.name, i, o, e)] = (fine[o] - ref[p.name][o],
                                               abs(fine[o] - coarse[o]) + 1e-13)
    t_grid = time.perf_counter() - t_start

    print("\n### Bias of the chain's invariant law (grid), exact in all but the printed error\n")
    head = "| potential | integrator | observable | exact | " + " | ".join(
        f"η={e:g}" for e in grid_etas) + " | max grid error | p | p_last | EM extrapolated |"
    print(head)
    print("|" + "---|" * (len(grid_etas) + 8))
    for p in pots:
        for i in INTEGRATORS:
            for o in OBSERVABLES:
                b = [grid[(p.name, i, o, e)][0] for e in grid_etas]
                err = [grid[(p.name, i, o, e)][1] for e in grid_etas]
                cells = [f"{v:.3e}" if abs(v) > 10 * s else f"<{10 * s:.0e}"
                         for v, s in zip(b, err)]
                pf, pl = fit_order(grid_etas, b, err, 10.0)
                print(f"| {p.name} | {i} | {o} | {ref[p.name][o]:.6f} | " + " | ".join(cells)
                      + f" | {max(err):.0e} | {_fmt(pf)} | {_fmt(pl)} | "
                      + f"{_extrapolated(grid_etas, b, err) if i == 'EM' else '—'} |")
    print(f"\n(grid and quadrature: {t_grid:.1f} s)")

    mc = {}
    for k, e in enumerate(mc_etas):
        res = monte_carlo(pots, TAU, e, args.chains, args.burn, args.time, args.seed + k)
        for key, (m, s) in res.items():
            name, _, o = key
            mc[key + (e,)] = (m - ref[name][o], s)
    print(f"\n### Monte Carlo check: bias ± s.e. ({time.perf_counter() - t_start - t_grid:.1f} s)\n")
    head = "| potential | integrator | observable | " + " | ".join(
        f"η={e:g}" for e in mc_etas) + " | p (> 3 s.e.) | max \\|z\\| vs grid |"
    print(head)
    print("|" + "---|" * (len(mc_etas) + 5))
    zmax_all = 0.0
    for p in pots:
        for i in INTEGRATORS:
            for o in OBSERVABLES:
                b = [mc[(p.name, i, o, e)][0] for e in mc_etas]
                s = [mc[(p.name, i, o, e)][1] for e in mc_etas]
                z = max(abs(bv - grid[(p.name, i, o, e)][0]) / sv
                        for bv, sv, e in zip(b, s, mc_etas))
                zmax_all = max(zmax_all, z)
                pf, _ = fit_order(mc_etas, b, s, 3.0)
                print(f"| {p.name} | {i} | {o} | "
                      + " | ".join(f"{bv:.2e}±{sv:.0e}" for bv, sv in zip(b, s))
                      + f" | {_fmt(pf)} | {z:.1f} |")
    n_cmp = len(pots) * len(INTEGRATORS) * len(OBSERVABLES) * len(mc_etas)
    print(f"\nlargest |MC − grid|/s.e. over {n_cmp} comparisons: {zmax_all:.2f}")
    print(f"wall time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
