"""Outside check: one ReLU neuron on exactly orthogonal inputs, zero-start GD against the
minimum-norm solution (docs/theory.md §10).

**Published setting.** Boursier, Pillaud-Vivien, Flammarion, *Gradient flow dynamics of shallow
ReLU networks for square loss and orthogonal inputs* (NeurIPS 2022): on orthogonal inputs the
implicit bias of gradient *flow* from a small start is exactly the minimum-ℓ2-norm solution;
[LWTM26] (docs/theory.md §10) quote it as the case their high-dimensional analysis extends, and
their finite-step GD limit has the closed form ``w_∞ = X₊ᵀ(X₊X₊ᵀ)⁻¹y₊ + η(I − P₊)X₋ᵀy₋``.

**Expected outcome (derived here, exact).** Model ``f(x) = relu(w·x)``, loss
``½ Σ_i (f(x_i) − y_i)²``, full-batch GD at step ``η`` (``solvers.gd``), rows of ``X``
pairwise orthogonal (``d > n``), labels of both signs. *Zero start* for a ReLU neuron needs a
convention for ``relu'(0)``, since every pre-activation is 0 at ``w = 0``:

- ``relu'(0) = 0`` (the convention of the mean-field solver, docs/theory.md §3): the gradient
  at ``w = 0`` vanishes and GD never moves; the distance to the minimum-norm solution stays
  ``‖w*‖`` for every ``η``;
- ``relu'(0) = 1`` on the first step (``solvers.gd``, docs/theory.md §10): ``w_1 = η Xᵀy``,
  i.e. span coefficients ``α_{1,i} = η y_i``. With orthogonal rows
  ``β_{1,i} = x_i·w_1 = η|x_i|² y_i``: the positives are active and the negatives inactive
  from step 1 on. Later steps move only the positives' coefficients (a negative's
  pre-activation stays exactly ``η|x_i|²y_i < 0``, so ``relu'(0) = 1`` at every step gives
  the same iterates), and the positives' predictions contract to ``y_i`` when
  ``0 < η|x_i|² < 2``. The negatives' coefficients **freeze at** ``α_i = η y_i``;
- the all-active start ``β_0 = ε1`` (``solvers.initial_weights("all_active")``) tends to the
  previous one as ``ε → 0``: its negatives freeze at ``α_i = ε/|x_i|² + η(y_i − ε)``.

Orthogonality makes ``w* = Σ_{y_i>0} y_i x_i/|x_i|²`` (it satisfies ``X₋w* = 0 ≤ 0``, and it
is the least-norm solution of ``X₊w = y₊``), hence

    ‖w_∞ − w*‖ = η ‖X₋ᵀ y₋‖ = η (Σ_{y_i<0} |x_i|² y_i²)^{1/2}     (relu'(0) = 1 at the start),

exactly linear in ``η`` and vanishing with it: gradient flow's exact minimum-norm bias is the
``η → 0`` limit of finite-step GD, whose bias is ``η`` times a fixed vector.

What is measured: the distance of ``solvers.gd``'s end point (run to a relative change of
``1e-15``) to the minimum-norm solution from the project's QP (``analysis.minnorm``, Clarabel +
active-set polish) and to the explicit ``w*``, against ``η‖X₋ᵀy₋‖``, for several ``η``; the
project's closed form (``analysis.closed_form_limit``); the frozen coefficients; the
``relu'(0) = 0`` and all-active variants; and the same on the data rotated by a random
orthogonal matrix (orthogonal up to rounding). Rows whose inputs have disjoint supports are
orthogonal in floating point, so the identities hold to rounding (``~1e-15`` relative).

    python benchmarks/outside_orthogonal_gd.py            # n = 20, d = 200, seven steps
    python benchmarks/outside_orthogonal_gd.py --small    # n = 6, d = 30, three steps
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

# after site-packages: an installed solvers is imported as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

#: Step constants ``c = η max_i |x_i|²`` (GD on the positives is stable for ``c < 2``).
CS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
CS_SMALL = (0.05, 0.2, 0.8)


def orthogonal_data(n: int, d: int, seed: int = 0):
    """``X`` (n, d) with pairwise orthogonal rows of disjoint supports (row ``i`` lives on
    coordinates ``[i k, (i+1) k)``, ``k = d // n``; exactly orthogonal in floating point) and
    labels ``y = ±U[0.5, 1.5]`` with both signs present (alternating signs, then shuffled)."""
    if d <= n:
        raise ValueError(f"need d > n, got n={n}, d={d}")
    rng = np.random.default_rng(seed)
    k = d // n
    X = np.zeros((n, d))
    for i in range(n):
        X[i, i * k:(i + 1) * k] = rng.standard_normal(k)
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    y = rng.permutation(sign) * rng.uniform(0.5, 1.5, n)
    return X, y


def minnorm_explicit(X, y):
    """``w* = Σ_{y_i > 0} y_i x_i / |x_i|²``: the minimum-norm solution for orthogonal rows."""
    pos = y > 0
    return (y[pos] / np.sum(X[pos] ** 2, axis=1)) @ X[pos]


def expected_gap(X, y, eta):
    """``η ‖X₋ᵀ y₋‖``: the distance of the zero-start GD limit to ``w*`` (module docstring)."""
    neg = y < 0
    return eta * float(np.linalg.norm(X[neg].T @ y[neg]))


def expected_gap_all_active(X, y, eta, eps):
    """The same from the all-active start ``β_0 = ε1``: negatives frozen at
    ``α_i = ε/|x_i|² + η(y_i − ε)``, distance ``(Σ_{y_i<0} |x_i|² α_i²)^{1/2}``."""
    neg = y < 0
    s = np.sum(X[neg] ** 2, axis=1)
    alpha = eps / s + eta * (y[neg] - eps)
    return float(np.sqrt(np.sum(s * alpha ** 2)))


def gd_zero_derivative(X, y, eta, steps: int = 100):
    """Plain GD with ``relu'(0) = 0`` at every step from ``w = 0`` (the mean-field solver's
    convention); returns the final ``w``."""
    w = np.zeros(X.shape[1])
    for _ in range(steps):
        beta = X @ w
        r = np.maximum(beta, 0.0) - y
        w = w - eta * ((beta > 0) * r) @ X
    return w


def measure(X, y, cs, max_steps: int = 200_000) -> list[dict]:
    """One row per step constant ``c`` (``η = c / max|x_i|²``): distances of GD's end point
    to ``w*`` (explicit and QP), the closed forms, and the frozen coefficients."""
    from analysis.minnorm import closed_form_limit, minnorm
    from solvers.highdim_gd import gd, initial_weights
    mn = minnorm(X, y, (1.0,))
    w_qp = mn.W[0]
    w_star = minnorm_explicit(X, y)
    norms2 = np.sum(X ** 2, axis=1)
    neg = y < 0
    rows = []
    for c in cs:
        eta = c / float(norms2.max())
        res = gd(X, y, eta=eta, tol=1e-15, max_steps=max_steps)
        w = res.W[0]
        gap = float(np.linalg.norm(w - w_star))
        want = expected_gap(X, y, eta)
        w_cf = closed_form_limit(X, y, eta)[0]
        eps = 1e-6 * float(np.abs(y).min())
        W0 = initial_weights("all_active", X, (1.0,), eps=eps)
        res_aa = gd(X, y, eta=eta, W0=W0, tol=1e-15, max_steps=max_steps)
        w_zero = gd_zero_derivative(X, y, eta)
        rows.append({
            "c": c, "eta": eta, "steps": res.n_steps, "converged": bool(res.converged),
            "pattern_frozen": bool(res.last_change <= 1
                                   and np.array_equal(res.pattern[0], y > 0)),
            "gap": gap, "expected": want, "rel_err": abs(gap - want) / want,
            "gap_qp": float(np.linalg.norm(w - w_qp)),
            "qp_vs_explicit": float(np.linalg.norm(w_qp - w_star)),
            "qp_kkt": float(mn.kkt_max),
            "closed_form_err": float(np.linalg.norm(w - w_cf)),
            "frozen_alpha_err": float(np.max(np.abs(res.alpha[0, neg] - eta * y[neg]))),
            "gap_over_eta": gap / eta,
            "eps": eps,
            "gap_all_active": float(np.linalg.norm(res_aa.W[0] - w_star)),
            "expected_all_active": expected_gap_all_active(X, y, eta, eps),
            "gap_relu0_zero": float(np.linalg.norm(w_zero - w_star)),
            "norm_w_star": float(np.linalg.norm(w_star))})
    return rows


def slope(rows) -> float:
    """Least-squares slope of ``log gap`` on ``log η`` (expected exactly 1)."""
    e = np.log([r["eta"] for r in rows])
    g = np.log([r["gap"] for r in rows])
    return float(np.polyfit(e, g, 1)[0])


def rotated(X, seed: int = 1):
    """``X Q`` for a Haar-random orthogonal ``Q`` (rows orthogonal up to rounding)."""
    rng = np.random.default_rng(seed)
    Q, R = np.linalg.qr(rng.standard_normal((X.shape[1], X.shape[1])))
    return X @ (Q * np.sign(np.diag(R)))


def table(rows, title) -> str:
    L = [title, "", "| c | eta | steps | frozen | gap | eta·‖X₋ᵀy₋‖ | rel. err | "
         "rel. err to QP's w* | closed form err | max|α₋ − ηy₋| | all-active gap / expected | relu'(0)=0 gap / ‖w*‖ |",
         "|" + "---|" * 12]
    for r in rows:
        L.append(f"| {r['c']:g} | {r['eta']:.3e} | {r['steps']} | "
                 f"{'yes' if r['pattern_frozen'] else 'no'} | {r['gap']:.6e} | "
                 f"{r['expected']:.6e} | {r['rel_err']:.1e} | "
                 f"{abs(r['gap_qp'] - r['expected']) / r['expected']:.1e} | "
                 f"{r['closed_form_err']:.1e} | {r['frozen_alpha_err']:.1e} | "
                 f"{r['gap_all_active'] / r['expected_all_active']:.12f} | "
                 f"{r['gap_relu0_zero'] / r['norm_w_star']:.3f} |")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="n = 6, d = 30, three steps")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--d", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    n = args.n or (6 if args.small else 20)
    d = args.d or (30 if args.small else 200)
    cs = CS_SMALL if args.small else CS
    X, y = orthogonal_data(n, d, args.seed)
    out = {}
    for name, XX in (("disjoint supports", X), ("rotated (orthogonal to rounding)", rotated(X))):
        rows = measure(XX, y, cs)
        print(table(rows, f"### {name}: n = {n}, d = {d}, {int(np.sum(y < 0))} negatives"))
        s = slope(rows)
        worst = max(r["rel_err"] for r in rows)
        print(f"\nslope of log gap on log eta: measured {s:.12f}, expected 1; "
              f"largest |gap − eta‖X₋ᵀy₋‖| / (eta‖X₋ᵀy₋‖): {worst:.1e} (expected 0 to "
              f"rounding); gap/eta: {min(r['gap_over_eta'] for r in rows):.12f} .. "
              f"{max(r['gap_over_eta'] for r in rows):.12f}, ‖X₋ᵀy₋‖ = "
              f"{expected_gap(XX, y, 1.0):.12f}\n")
        out[name] = {"rows": rows, "slope": s, "max_rel_err": worst}
    ok = all(v["max_rel_err"] < 1e-12 and abs(v["slope"] - 1) < 1e-10
             and all(r["pattern_frozen"] for r in v["rows"]) for v in out.values())
    print("outcome:", "as expected (gap = eta·‖X₋ᵀy₋‖, linear in eta)" if ok
          else "DIFFERS from the expected outcome")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
