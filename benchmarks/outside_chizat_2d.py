"""Outside check: Chizat's two-layer weight-decay setting in 2-D, gradient descent against the
convex ``τ → 0`` reference (docs/theory.md §1, §4, §6).

**Published setting** (L. Chizat and F. Bach, *On the global convergence of gradient descent for
over-parameterized models using optimal transport*, NeurIPS 2018; L. Chizat, *Sparse
optimization on measures with over-parameterized gradient descent*, Math. Program. 2022):
``n = 10`` points uniform in ``[−1, 1]²`` with labels ``±1``, mean-field scaling
``f(x) = (1/m) Σ_i a_i relu(w_i·x + b_i)``, weight decay ``(λ/2) Σ_i |θ_i|²/m`` with
``λ = 5·10⁻⁵``, ``m = 1000`` neurons, gradient descent with step 0.1, 20 000 iterations. The data
are drawn here with a fixed seed (``DATA_SEED``; the paper's draw is not available).

**Expected outcome** (published): over-parameterised gradient descent on this objective, from
an initialisation whose directions cover the sphere, converges to the global minimiser, the
sparse measure of the convex problem; so the end point should match the convex reference in
objective, predictor and ray/kink counts.

**Scaling, checked against the project's** (docs/theory.md §1, ``solvers.numpy_model``). With
``R = (1/n) Σ_j (f(x_j) − y_j)²`` (no ½) the project's zero-temperature free energy at the
particle measure is

    F₀(θ_1..θ_m) = ½ R + (λ/2m) Σ_i |θ_i|² = (1/2n) Σ_j (f(x_j) − y_j)² + (λ/2m) Σ_i |θ_i|²,

the setting's objective with the loss ``(1/2n) Σ (f − y)²``. Its infimum over measures is the
convex problem ``min (1/2n) Σ_j (∫(v·x̃_j)_+ dμ − y_j)² + λ‖μ‖_TV`` that
``solvers.convex.convex`` solves (``(λ/2)(a² + |u|²) ≥ λ|a||u|``, equality for balanced
neurons, docs/theory.md §4): the same ``λ``, no rescaling. The step: ``θ_i ← θ_i − η m ∇_{θ_i} F₀
= θ_i − η ∇_θ Ψ(θ_i; ρ_m)`` with ``η = 0.1``, i.e. the project's Euler step at ``τ = 0``
(``solvers.numpy_model.drift``), mean-field time ``η`` per iteration, 2000 time units in all
(the step on ``F₀`` itself would be ``η/m``: 0.2 time units, nothing would move). A paper whose
loss has no ½ (``R + (λ/m)Σ|θ|² = 2F₀``) has the same minimisers at the same ``λ`` and its step
0.1 is ``η = 0.2`` here (``--eta 0.2``): twice the time, but beyond Euler's stability limit on
the data mode of the convex optimum (``η h = 2.33 > 2`` at 0.2, 1.16 at 0.1; ``solvers.stability``).

Initialisation (not fixed by the setting): balanced neurons ``|a_i| = |u_i| = r₀`` with
directions ``v_i = u_i/|u_i|`` uniform on ``S²`` and random signs of ``a_i``; ``r₀ = 1``
(``--init-scale``). Measured (``benchmarks/README.md``, "Outside checks"), ``m = 1000``,
20 000 iterations: from ``r₀ = 1`` the predictor is within ``1.2·10⁻²`` of the convex one on
the training points and the objective 26 % above its minimum, still falling (18.6 % after
2·10⁵ iterations: the weight decay acts on the time scale ``1/λ = 2·10⁴``, ten times the
run); from ``r₀ = 0.1`` and ``0.01`` GD stalls with three points unfit (risk 0.09, 0.038;
at ``r₀ = 0.01`` the objective is the same to 0.1 % after 10⁵ iterations): the activation cell
where the certificate ``|G|`` is largest (550, 300; 1 at the optimum) holds no neuron, so no
neuron can grow there. Our reading: the small-initialisation phase aligns the neurons into few
directions before the fit and empties that cell; global convergence is a statement about the
mean-field flow from a measure of full support, which 1000 neurons no longer are.

Measured against the convex reference (``analysis.references.convex_reference``): ``F₀`` and
the convex objective at the particles' own measure (a feasible point, so at least the
optimum; ``benchmarks.ray_counts.particle_objective``), the risk, the predictor on the training
points and on a grid of ``[−1, 1]²``, the exact ``max|G|`` at the end point
(``solvers.convex.max_abs_G``; 1 at the optimum), and ``J``, ``K``: rays of the end point
(``analysis.rays.find_rays`` with ``lam`` and ``y``; also with the certificate filter off,
``g_ray = −∞``) and their kinks (``analysis.kinks.ray_kinks``) against
``analysis.ray_checks.convex_counts``.

    python benchmarks/outside_chizat_2d.py                 # the published setting, ~10 s
    python benchmarks/outside_chizat_2d.py --init-scale 0.01
    python benchmarks/outside_chizat_2d.py --small         # m = 200, λ = 0.1, 3000 iterations
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

#: The published setting.
N_POINTS, LAM, ETA, WIDTH, ITERS = 10, 5e-5, 0.1, 1000, 20000
#: Seed of the data draw (the convex optimum's data mode is stable at η = 0.1 for this draw:
#: η h = 1.16).
DATA_SEED = 0
#: The small version: the same data, ``λ = 0.1`` (relaxation time ``1/λ`` = 10 time units,
#: so that 3000 iterations reach the optimum), ``m = 200``.
SMALL = {"lam": 0.1, "width": 200, "iters": 3000}


def data(seed: int = DATA_SEED, n: int = N_POINTS):
    """``X`` (n, 2) uniform in ``[−1, 1]²`` and labels ``y = ±1`` (fair coin), seeded."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n, 2))
    y = rng.choice([-1.0, 1.0], n)
    return X, y


def initial(m: int, scale: float, seed: int = 1, d: int = 2):
    """Balanced neurons: ``a_i = ±scale``, ``u_i = scale · v_i`` with ``v_i`` uniform on
    ``S^d``; rows ``(a, w, b)``."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((m, d + 1))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    theta = np.empty((m, d + 2))
    theta[:, 0] = scale * rng.choice([-1.0, 1.0], m)
    theta[:, 1:] = scale * v
    return theta


def objective(theta, X, y, lam) -> float:
    """``F₀ = ½R + (λ/2m) Σ|θ_i|²`` (docs/theory.md §1 at ``τ = 0``)."""
    from solvers import numpy_model
    return 0.5 * numpy_model.risk(theta, X, y) + numpy_model.regulariser(theta, lam)


def gd(theta, X, y, lam, eta, iters, record_every: int = 1000):
    """``iters`` steps ``θ ← θ − η ∇Ψ(θ; ρ_m)`` (plain NumPy, ``solvers.numpy_model.drift``).
    Returns the end point and ``[(iteration, F₀)]`` every ``record_every`` iterations."""
    from solvers import numpy_model
    theta = np.array(theta, dtype=float)
    trace = [(0, objective(theta, X, y, lam))]
    for k in range(1, iters + 1):
        theta -= eta * numpy_model.drift(theta, X, y, lam)
        if k % record_every == 0 or k == iters:
            trace.append((k, objective(theta, X, y, lam)))
    return theta, trace


def counts(theta, X, y, lam, g_ray: float = 0.5):
    """``J``, ``K`` of a zero-temperature end point: :func:`analysis.rays.find_rays` with
    ``lam`` and ``y`` (the end point's own residuals for ``G``), kinks by
    :func:`analysis.kinks.ray_kinks`."""
    from analysis.kinks import ray_kinks
    from analysis.rays import find_rays
    res = find_rays(theta, X, y=y, lam=lam, g_ray=g_ray)
    return len(res.rays), len(ray_kinks(res.rays, X, res.pattern_tol.angle_tol)), res


def grouped(rays, cc: dict) -> list[dict]:
    """Each measured ray assigned to the nearest convex ray of its sign (angle between the
    directions); per convex ray: how many measured rays, their summed weight against the
    convex weight, and the largest angle. At ``τ = 0`` a ray whose kink passes through a data
    point may end GD as several clusters a few ``10⁻³`` rad apart on both sides of the point's
    cell boundary (docs/theory.md §6.6): their summed weight is what the data determine."""
    dirs = np.asarray(cc["directions"], dtype=float)
    out = [{"direction": dirs[k], "weight": float(cc["weights"][k]), "members": 0,
            "weight_sum": 0.0, "max_angle": 0.0} for k in range(len(dirs))]
    unassigned = []
    for q in rays:
        same = [k for k in range(len(dirs)) if int(cc["signs"][k]) == int(q.sign)]
        if not same:
            unassigned.append(q)
            continue
        ang = [float(np.arccos(np.clip(np.dot(q.direction, dirs[k])
                                       / np.linalg.norm(q.direction), -1, 1))) for k in same]
        k = same[int(np.argmin(ang))]
        out[k]["members"] += 1
        out[k]["weight_sum"] += float(q.weight)
        out[k]["max_angle"] = max(out[k]["max_angle"], min(ang))
    for q in unassigned:
        out.append({"direction": None, "weight": 0.0, "members": 1, "weight_sum": q.weight,
                    "max_angle": float("nan")})
    return out


def empty_cell(theta, X, y, lam) -> dict:
    """The activation cell where ``|G|`` (the end point's certificate) is largest: its value
    and the neurons in it with the sign that would grow there (``sign(a) = −sign(G)``; a
    neuron of that sign in that cell has ``d|θ|/dt > 0``). None there: GD cannot lower the
    objective along that direction; the mean-field flow from a measure of full support
    could."""
    from solvers import numpy_model
    from solvers.activation_regions import activation_patterns
    from solvers.convex import cell_maxima
    from solvers.geometry import lifted
    R = (numpy_model.predict(theta, X) - y) / len(y)
    pats, _ = activation_patterns(X)
    vals, _, _ = cell_maxima(R, X, lam, pats)
    k, i = np.unravel_index(int(np.argmax(vals)), vals.shape)
    need = -1.0 if i == 0 else 1.0            # column 0: max of +G, column 1: max of −G
    inside = np.all((theta[:, 1:] @ lifted(X).T > 0) == pats[k][None, :], axis=1)
    return {"value": float(vals[k, i]), "pattern": pats[k].astype(int).tolist(),
            "neurons": int(inside.sum()),
            "neurons_growing": int(np.sum(inside & (np.sign(theta[:, 0]) == need)))}


def compare(theta, X, y, lam) -> dict:
    """The end point against the convex reference (module docstring)."""
    from analysis.ray_checks import convex_counts
    from analysis.references import convex_reference
    from benchmarks.ray_counts import particle_objective
    from solvers import numpy_model
    from solvers.convex import max_abs_G
    conv = convex_reference(X, y, lam)
    cc = convex_counts(conv, X)
    f = numpy_model.predict(theta, X)
    g = np.linspace(-1.0, 1.0, 41)
    grid = np.array([(s, t) for s in g for t in g])
    J, K, res = counts(theta, X, y, lam)
    J_all, K_all, res_all = counts(theta, X, y, lam, g_ray=-np.inf)
    a, u = theta[:, 0], np.linalg.norm(theta[:, 1:], axis=1)
    F = objective(theta, X, y, lam)
    return {"F": F, "F_convex": float(conv.primal), "rel_gap": F / conv.primal - 1.0,
            "particle_objective": particle_objective(theta, X, y, lam),
            "risk": numpy_model.risk(theta, X, y),
            "risk_convex": float(np.mean((conv.f_train - y) ** 2)),
            "max_abs_diff_train": float(np.max(np.abs(f - conv.f_train))),
            "rms_diff_train": float(np.sqrt(np.mean((f - conv.f_train) ** 2))),
            "max_abs_diff_grid": float(np.max(np.abs(numpy_model.predict(theta, grid)
                                                     - conv.predict(grid)))),
            "max_abs_G": float(max_abs_G((f - y) / len(y), X, lam)[0]),
            "max_abs_G_convex": float(conv.max_abs_G),
            "tv": float(np.mean(np.abs(a) * u)), "tv_convex": float(np.abs(conv.weights).sum()),
            "imbalance": float(np.max(np.abs(a ** 2 - u ** 2))),
            "J": J, "K": K, "J_no_certificate": J_all, "K_no_certificate": K_all,
            "J_convex": cc["J"], "K_convex": cc["K"], "rays": res.rays,
            "groups": grouped(res_all.rays, cc), "cell": empty_cell(theta, X, y, lam),
            "f": f, "f_convex": conv.f_train}


def report(r: dict, trace, wall: float) -> str:
    L = ["| quantity | GD end point | convex τ → 0 reference |", "|---|---|---|",
         f"| objective F₀ | {r['F']:.6g} | {r['F_convex']:.6g} (relative gap {r['rel_gap']:.3g}) |",
         f"| convex objective at the particles' measure | {r['particle_objective']:.6g} | "
         f"{r['F_convex']:.6g} |",
         f"| risk (1/n)Σ(f−y)² | {r['risk']:.4g} | {r['risk_convex']:.4g} |",
         f"| ‖μ‖_TV | {r['tv']:.4g} | {r['tv_convex']:.4g} |",
         f"| max\\|G\\| (1 at the optimum) | {r['max_abs_G']:.4g} | {r['max_abs_G_convex']:.6g} |",
         f"| neurons in its cell (of the sign that grows there) | {r['cell']['neurons']} "
         f"({r['cell']['neurons_growing']}) | |",
         f"| J (rays), K (kinks) | {r['J']}, {r['K']} (certificate off: {r['J_no_certificate']}, "
         f"{r['K_no_certificate']}) | {r['J_convex']}, {r['K_convex']} |",
         f"| max\\|f − f_convex\\| on the training points | {r['max_abs_diff_train']:.3g} | 0 |",
         f"| RMS on the training points | {r['rms_diff_train']:.3g} | 0 |",
         f"| max\\|f − f_convex\\| on a 41×41 grid of [−1,1]² | {r['max_abs_diff_grid']:.3g} | 0 |",
         f"| max\\|a² − \\|u\\|²\\| (0: balanced) | {r['imbalance']:.3g} | 0 |",
         "", "measured rays (certificate filter off: far from the optimum G is no "
         "guide) grouped by the nearest convex ray of their sign:", "",
         "| convex ray direction | convex weight | measured rays | their summed weight | "
         "largest angle (rad) |", "|---|---|---|---|---|"]
    for gr in r["groups"]:
        v = "none of this sign" if gr["direction"] is None else \
            "(" + ", ".join(f"{t:.3f}" for t in gr["direction"]) + ")"
        L.append(f"| {v} | {gr['weight']:+.4f} | {gr['members']} | {gr['weight_sum']:+.4f} | "
                 f"{gr['max_angle']:.4f} |")
    L += ["", "f on the training points: " + " ".join(f"{v:+.4f}" for v in r["f"]),
         "convex:                   " + " ".join(f"{v:+.4f}" for v in r["f_convex"]),
         "", "F₀ along GD: " + ", ".join(f"{k}: {v:.5g}" for k, v in trace),
         f"GD wall time: {wall:.1f} s"]
    return "\n".join(L)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true",
                    help=f"m = {SMALL['width']}, lam = {SMALL['lam']}, {SMALL['iters']} "
                         "iterations (GD reaches the convex optimum there)")
    ap.add_argument("--lam", type=float, default=None)
    ap.add_argument("--m", type=int, default=None, help="neurons")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--eta", type=float, default=ETA)
    ap.add_argument("--init-scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1, help="seed of the initialisation")
    ap.add_argument("--data-seed", type=int, default=DATA_SEED)
    args = ap.parse_args(argv)
    lam = args.lam if args.lam is not None else (SMALL["lam"] if args.small else LAM)
    m = args.m or (SMALL["width"] if args.small else WIDTH)
    iters = args.iters or (SMALL["iters"] if args.small else ITERS)
    X, y = data(args.data_seed)
    from analysis.references import convex_reference
    from solvers.stability import convex_data_mode
    eh = convex_data_mode(convex_reference(X, y, lam), X, lam).eta_lambda_max(args.eta)
    print(f"n = {len(y)}, lam = {lam:g}, m = {m}, eta = {args.eta:g}, {iters} iterations "
          f"({args.eta * iters:g} time units), init scale {args.init_scale:g}; "
          f"eta·h at the convex optimum {eh:.2f} (stable below 2)\n")
    t0 = time.perf_counter()
    theta, trace = gd(initial(m, args.init_scale, args.seed), X, y, lam, args.eta, iters,
                      record_every=max(1, iters // 10))
    wall = time.perf_counter() - t0
    r = compare(theta, X, y, lam)
    print(report(r, trace, wall))
    reached = r["rel_gap"] < 1e-2 and r["max_abs_diff_train"] < 1e-2
    print(f"\npublished outcome: GD reaches the convex optimum. Measured: objective "
          f"{r['rel_gap']:.3g} above it, predictor within {r['max_abs_diff_train']:.3g}, "
          f"J, K = {r['J']}, {r['K']} against {r['J_convex']}, {r['K_convex']}: "
          + ("reached (to 1 %)" if reached else "NOT reached after these iterations"))
    return {**r, "trace": trace, "eta_h": eh, "reached": reached}


if __name__ == "__main__":
    main()
    sys.exit(0)
