"""Outside check: the width bias of the N-particle stationary law is ``O(1/N)``
(docs/theory.md §2.3, §5).

**Published claim.** G. Rotskoff and E. Vanden-Eijnden, *Trainability and accuracy of artificial
neural networks: an interacting particle system approach*, Comm. Pure Appl. Math. 75 (2022):
the fluctuations of the ``N``-particle network about its mean-field limit are
``O(N^{−1/2})``, and the error of the averaged network is ``O(1/N)``; likewise uniform-in-time
propagation of chaos for mean-field Langevin dynamics (Suzuki–Wu–Nitanda, ICLR 2023;
Chen–Ren–Wang 2022) puts the one-particle marginal of the ``N``-particle stationary law at
``O(1/N)`` from the mean-field Gibbs measure.

**Expected outcome.** The time-averaged particle predictor ``f̄_N`` on the training points,
sampled exactly from the ``N``-particle law (``integrator = "mala"``, no step bias), lies at a
distance ``‖f̄_N − f_Gibbs‖ = |B|/N + O(1/N²)`` from the Gibbs fixed point
(``analysis.references.gibbs_reference``, quadrature): on a log-log plot against ``N`` a line
of **slope −1**. The coefficient ``B`` has a closed form in the cumulants of the Gibbs measure
(docs/theory.md §2.3, *derived*), estimated from the particles by ``analysis.width_bias``; it is
printed beside the measured ``N (f̄_N − f_Gibbs)``.

Setting: five points in 1-D, ``x = (−1, −0.5, 0, 0.5, 1)``, ``y = (0.5, −0.3, 0.4, −0.2, 0.6)``,
``λ = 0.05``, ``τ = 10⁻²`` (the sampler mixes in a few passes there), ``η = 0.2``,
``N ∈ {64, 128, 256, 512, 1024}``, several independent chains (seeds) per ``N`` pooled. The
distance carries the Monte Carlo error: ``E‖f̄ − f*‖² = |B/N|² + Σ_j MCSE_j²``, so the fit uses
the debiased distance ``(‖f̄ − f*‖² − Σ_j MCSE_j²)^{1/2}``, with passes growing like ``N`` so
that ``N · MCSE`` stays about constant (``--passes-per-particle``); the slope's 95 % interval
comes from the weighted least-squares fit with the delta-method error of each log distance.
The projection of ``f̄_N − f*`` on the direction of ``B`` (unbiased, its error linear in the
MCSE) is fitted the same way.

    python benchmarks/outside_width_bias.py --out width_bias.png          # minutes, 1 core
    python benchmarks/outside_width_bias.py --small --out small.png       # N = 16..128, ~10 s
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

X = np.array([[-1.0], [-0.5], [0.0], [0.5], [1.0]])
Y = np.array([0.5, -0.3, 0.4, -0.2, 0.6])
LAM, TAU, ETA = 0.05, 1e-2, 0.2
NS = (64, 128, 256, 512, 1024)
NS_SMALL = (16, 32, 64, 128)
#: Passes (sweeps of the exact sampler) per particle after the burn-in, all seeds together.
PASSES_PER_PARTICLE = 250
#: Passes per block mean (``Stepper.f_sum``: the predictor after every pass, summed).
BLOCK = 20
BURN = 2000


def sample(N: int, passes: int, seed: int, burn: int = BURN, block: int = BLOCK):
    """Block means (``passes // block``, n) of the predictor on the training points after every
    pass of the exact sampler at ``N`` particles, after ``burn`` passes from
    ``N(0, 0.5² I)`` particles."""
    from solvers.langevin import initial_particles
    from solvers.stepper import Stepper
    st = Stepper(X, Y, N, lam=LAM, eta=ETA, seed=seed, integrator="mala")
    th = initial_particles(N, X.shape[1], 0.5, seed)
    if st.advance(th, TAU, 0, burn):
        raise FloatingPointError("the sampler reported non-finite values")
    step = burn
    out = np.empty((passes // block, len(Y)))
    frames = []
    for k in range(len(out)):
        st.reset_counts()
        if st.advance(th, TAU, step, block):
            raise FloatingPointError("the sampler reported non-finite values")
        step += block
        out[k] = st.f_sum / block
        if k % max(1, len(out) // 10) == 0:
            frames.append(th.copy())
    return out, np.concatenate(frames)


def measure(Ns, seeds, passes_per_particle: float) -> list[dict]:
    """Per ``N``: the pooled time average over the seeds, its MCSE (``analysis.time_average``
    per chain, combined), the difference to the Gibbs reference and the particles sampled."""
    from analysis.references import gibbs_reference
    from analysis.time_average import mean_and_mcse
    g = gibbs_reference(X, Y, LAM, TAU)
    ref = np.asarray(g.f_train, dtype=float)
    rows = []
    for N in Ns:
        t0 = time.perf_counter()
        passes = max(BLOCK * 20, int(passes_per_particle * N / len(seeds)))
        means, ses, parts = [], [], []
        for s in seeds:
            F, th = sample(N, passes, seed=1000 * s + 17)
            m, se, _ = mean_and_mcse(F)
            means.append(m)
            ses.append(se)
            parts.append(th)
        k = len(seeds)
        m = np.mean(means, axis=0)
        se = np.sqrt(np.sum(np.square(ses), axis=0)) / k
        diff = m - ref
        rows.append({"N": N, "passes": passes * k, "mean": m, "se": se, "diff": diff,
                     "reference": ref, "quad_error": float(g.quad_error),
                     "residual": float(g.residual), "particles": np.concatenate(parts),
                     "seconds": time.perf_counter() - t0})
    return rows


def loglog_fit(N, value, err) -> dict:
    """Weighted least squares of ``log value = c + s log N`` with ``σ_k = err_k / value_k``;
    the slope with its 95 % interval (``1.96`` standard errors, scaled up by
    ``sqrt(χ²/dof)`` when that exceeds 1). Entries with ``value <= 0`` are left out."""
    N, value, err = (np.asarray(v, dtype=float) for v in (N, value, err))
    ok = value > 0
    if ok.sum() < 2:
        nan = float("nan")
        return {"slope": nan, "lo": nan, "hi": nan, "used": int(ok.sum())}
    x, yv, sig = np.log(N[ok]), np.log(value[ok]), np.maximum(err[ok] / value[ok], 1e-12)
    w = 1.0 / sig ** 2
    A = np.vstack([np.ones_like(x), x]).T
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    c = cov @ (A.T @ (w * yv))
    dof = max(len(x) - 2, 1)
    chi2 = float(np.sum(w * (A @ c - yv) ** 2))
    scale = max(1.0, np.sqrt(chi2 / dof)) if len(x) > 2 else 1.0
    half = 1.96 * np.sqrt(cov[1, 1]) * scale
    return {"slope": float(c[1]), "intercept": float(c[0]), "lo": float(c[1] - half),
            "hi": float(c[1] + half), "chi2": chi2, "dof": dof, "used": int(ok.sum())}


def analyse(rows) -> dict:
    """Distances, debiased distances and projections on ``B`` with their errors; the fits."""
    from analysis.width_bias import width_bias_coefficient
    B = width_bias_coefficient(rows[-1]["particles"], X, TAU)
    bhat = B / np.linalg.norm(B)
    for r in rows:
        d2 = float(np.sum(r["diff"] ** 2))
        noise = float(np.sum(r["se"] ** 2))
        r["distance"] = np.sqrt(d2)
        r["debiased"] = np.sqrt(max(d2 - noise, 0.0))
        # delta method: Var(|d|²) ≈ 4 Σ d_j² se_j² + 2 Σ se_j⁴; error of the debiased distance
        var_d2 = 4 * float(np.sum(r["diff"] ** 2 * r["se"] ** 2)) + 2 * float(np.sum(r["se"] ** 4))
        r["debiased_err"] = np.sqrt(var_d2) / (2 * max(r["debiased"], 1e-300))
        r["projection"] = float(r["diff"] @ bhat)
        r["projection_err"] = float(np.sqrt(np.sum((bhat * r["se"]) ** 2)))
        r["noise"] = np.sqrt(noise)
    Ns = [r["N"] for r in rows]
    return {"B": B, "fit_distance": loglog_fit(Ns, [r["debiased"] for r in rows],
                                                [r["debiased_err"] for r in rows]),
            "fit_raw": loglog_fit(Ns, [r["distance"] for r in rows],
                                  [r["debiased_err"] for r in rows]),
            "fit_projection": loglog_fit(Ns, [r["projection"] for r in rows],
                                         [r["projection_err"] for r in rows])}


def plot(rows, fits, path):
    """Log-log plot of the distances against ``N`` with the fit and a slope −1 guide."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    N = np.array([r["N"] for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ax.errorbar(N, [r["debiased"] for r in rows], yerr=[r["debiased_err"] for r in rows],
                fmt="o", label="‖f̄_N − f_Gibbs‖, MCSE removed")
    ax.plot(N, [r["distance"] for r in rows], "x", color="grey", label="‖f̄_N − f_Gibbs‖ raw")
    ax.plot(N, [r["noise"] for r in rows], ":", color="grey", label="(Σ MCSE²)^½")
    f = fits["fit_distance"]
    if np.isfinite(f["slope"]):
        ax.plot(N, np.exp(f["intercept"]) * N ** f["slope"], "-",
                label=f"fit: slope {f['slope']:.2f} [{f['lo']:.2f}, {f['hi']:.2f}]")
    ax.plot(N, np.linalg.norm(fits["B"]) / N, "--", label="|B|/N (B from the particles)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N (particles)")
    ax.set_ylabel("distance on the training points")
    ax.set_title(f"width bias, τ = {TAU:g}, λ = {LAM:g}, exact sampler")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(rows, fits) -> str:
    L = ["| N | passes | ‖f̄ − f*‖ | (Σ MCSE²)^½ | debiased | projection on B̂ | N · projection | "
         "s |", "|" + "---|" * 8]
    for r in rows:
        L.append(f"| {r['N']} | {r['passes']} | {r['distance']:.3e} | {r['noise']:.1e} | "
                 f"{r['debiased']:.3e} ± {r['debiased_err']:.1e} | "
                 f"{r['projection']:.3e} ± {r['projection_err']:.1e} | "
                 f"{r['N'] * r['projection']:.4f} | {r['seconds']:.1f} |")
    L.append("")
    L.append(f"Gibbs reference (quadrature): error {rows[0]['quad_error']:.1e}, fixed-point "
             f"residual {rows[0]['residual']:.1e}")
    L.append("N (f̄ − f*) per point, largest N: "
             + " ".join(f"{v:+.4f}" for v in rows[-1]["N"] * rows[-1]["diff"]))
    L.append("B from the particles (analysis.width_bias): "
             + " ".join(f"{v:+.4f}" for v in fits["B"])
             + f"   |B| = {np.linalg.norm(fits['B']):.4f}")
    for name, key in (("debiased distance", "fit_distance"), ("raw distance", "fit_raw"),
                      ("projection on B", "fit_projection")):
        f = fits[key]
        L.append(f"slope of log {name} on log N: {f['slope']:.3f}, 95 % interval "
                 f"[{f['lo']:.3f}, {f['hi']:.3f}] ({f['used']} points)")
    return "\n".join(L)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="N = 16, 32, 64, 128")
    ap.add_argument("--Ns", type=int, nargs="+", default=None)
    ap.add_argument("--seeds", type=int, default=4, help="independent chains per N")
    ap.add_argument("--passes-per-particle", type=float, default=PASSES_PER_PARTICLE)
    ap.add_argument("--threads", type=int, default=None,
                    help="numba threads (default: numba's; results do not depend on it)")
    ap.add_argument("--out", default="outside_width_bias.png", help="the plot (PNG)")
    args = ap.parse_args(argv)
    if args.threads:
        import numba
        numba.set_num_threads(args.threads)
    Ns = args.Ns or (NS_SMALL if args.small else NS)
    rows = measure(Ns, list(range(args.seeds)), args.passes_per_particle)
    fits = analyse(rows)
    print(f"tau = {TAU:g}, lam = {LAM:g}, eta = {ETA:g}, {args.seeds} chains per N, "
          f"{args.passes_per_particle:g} passes per particle\n")
    print(table(rows, fits))
    plot(rows, fits, args.out)
    f = fits["fit_distance"]
    inside = f["lo"] <= -1.0 <= f["hi"]
    print(f"\npublished: slope -1 (O(1/N)). Measured: {f['slope']:.3f} "
          f"[{f['lo']:.3f}, {f['hi']:.3f}] -> "
          + ("agrees (-1 inside the interval)" if inside else "DISAGREES") + f"; plot: {args.out}")
    return {"rows": rows, **fits, "agrees": inside}


if __name__ == "__main__":
    main()
    sys.exit(0)
