"""A low-temperature limit study from a script.

Runs the mean-field Langevin particles over a temperature ladder on the shipped eight points in
the plane (``data/plane8.csv``), analyses every snapshot (rays ``J``, kink hyperplanes ``K``,
``P`` and the ``2P - 1`` bound of [LJM26], Theorem 6, ``W2`` between temperatures), compares the
particles with the exact references (the Gibbs measure at each ``τ``, THEORY §5; the convex
``τ → 0`` limit at the coldest ``τ``, THEORY §4), and saves the report and figures.

    python examples/low_temperature_study.py                 # writes ./lowtemp-study/
    python examples/low_temperature_study.py out/ --threads 1

Two chains of 2000 particles sampled exactly (``integrator = "mala"``, docs/theory.md §2.6),
each temperature run until it is judged stationary; under a minute on two cores once the
kernel is compiled (about 15 s more the first time; docs/tutorial.md has the measured times).
``docs/tutorial.md`` walks through it. It uses the installed ``meanfield`` (``pip install .``),
so its numba cache is the one every other command uses.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "plane8.csv"


def study_config(n_particles: int, max_steps_per_tau: int, seed: int) -> dict:
    """The run config as a dict: ``docs/cli.md`` lists every key with its default and unit.

    The exact sampler of the N-particle stationary law (``integrator = "mala"``: a step is one
    pass of Metropolis-adjusted moves over the particles, no step bias); two independent
    particle systems (``chains = 2``), so that the stationarity verdict can compare them
    (split-R-hat between chains, docs/theory.md §2.5), and every temperature runs until that
    verdict holds (``steps_per_tau = "auto"``, in chunks of an eighth of the budget) or
    ``max_steps_per_tau`` passes are spent; an observation every 5 passes. Half the Langevin
    moves at fine steps (``fine = 0.5``), so that heavy particles pinned on kinks at low
    temperature still move (docs/theory.md §2.6)."""
    return {
        "data": {"kind": "file", "path": str(DATA), "target": "y"},
        "model": {"activation": "relu", "n_particles": n_particles},
        "dynamics": {"lam": 0.05, "integrator": "mala", "eta": 0.2, "fine": 0.5,
                     "taus": [1e-2, 1e-3, 1e-4], "chains": 2, "steps_per_tau": "auto",
                     "max_steps_per_tau": max_steps_per_tau, "seed": seed},
        # four frames per chunk of 5000 passes: a stage's rays are counted on its second
        # half's frames, both chains pooled (docs/theory.md §6.1)
        "output": {"observe_every": 5, "snapshots_per_tau": 4},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", default="lowtemp-study",
                    help="output directory for the run file, report and figures "
                         "(default ./lowtemp-study)")
    ap.add_argument("--n-particles", type=int, default=2000,
                    help="particles N in each chain (default 2000)")
    ap.add_argument("--max-steps", type=int, default=40000,
                    help="the most passes at one temperature (max_steps_per_tau; default "
                         "40000): each temperature runs until its stationarity verdict holds "
                         "or this budget is spent")
    ap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    ap.add_argument("--threads", type=int, default=None,
                    help="numba threads (default: numba's default, all cores; use 1 on a "
                         "busy machine)")
    args = ap.parse_args(argv)

    import meanfield
    from analysis.references import verdict_text
    from meanfield import analyze_run

    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = meanfield.config_from_dict(study_config(args.n_particles, args.max_steps, args.seed))

    t0 = time.perf_counter()
    # progress: a bar on a terminal, a plain line every 10 s in a log
    run_file = meanfield.run(cfg, out / "run.h5", overwrite=True, threads=args.threads)
    t1 = time.perf_counter()
    print(f"run: {run_file} ({t1 - t0:.0f} s)")

    rep = analyze_run(run_file, out, references=True, sensitivity=True)
    t2 = time.perf_counter()
    print(f"analysis and references: {t2 - t1:.0f} s")

    print(f"\nP = {rep['P']} affine dichotomies, bound 2P-1 = {rep['bound_2P_minus_1']}")
    run = meanfield.open_run(run_file)
    print(" tau    passes    risk      J  K  Gibbs J K  W2 to previous tau  stationary")
    for r in rep["ladder"]:
        w2 = "" if r["w2_to_previous"] is None else f"{r['w2_to_previous']:.3f}"
        # J, K of the stage's second half, both chains pooled (docs/theory.md §6.1), beside the
        # exact Gibbs measure's at that tau (§6.7); "stationary" says whether the stage's
        # counts are a result (the verdict of both chains together)
        st = {True: "yes", False: "no", None: "-"}[r["stationary"]]
        gj = "-" if r["J_gibbs"] is None else f"{r['J_gibbs']:2d} {r['K_gibbs']:2d}"
        line = (f" {r['tau']:.0e}  {run.steps_run(r['stage']):6d}  {r['risk']:.4f}  "
                f"{r['J']:2d} {r['K']:2d}  {gj:>7}  {w2:>5}  {st}")
        if set(r["J_frames"]) != {r["J"]} or set(r["K_frames"]) != {r["K"]}:
            line += (f"  (one snapshot: J {min(r['J_frames'])}-{max(r['J_frames'])}, "
                     f"K {min(r['K_frames'])}-{max(r['K_frames'])})")
        print(line)
        if r["gibbs_note"]:
            print(f"   Gibbs rays: {r['gibbs_note']}")
    refs = rep["references"]
    for g in refs.get("gibbs", []):
        if "skipped" not in g:
            # the distance, its combined error (Monte Carlo and quadrature), z and the verdict
            # in the words of `meanfield analyze` (docs/theory.md §2.4); an integrator with a
            # step bias adds its allowance (the exact sampler has none)
            bias, z, z0 = g["step_bias_allowance"], g["z"], g["z_without_allowance"]
            allow = "" if not bias else f", step-bias allowance {bias:.1e}"
            z = ("" if z != z else f", z = {z0:.2g}" if not bias     # nan: too few observations
                 else f", z = {z:.2g} ({z0:.2g} without the allowance)")
            print(f" tau={g['tau']:.0e}: max |f_particles - f_Gibbs| = {g['max_abs_diff']:.2e}"
                  f" (error {g['combined_error']:.1e}{allow}{z}): "
                  f"{verdict_text(g, str(run_file))}")
    c = refs.get("convex")
    if c and "skipped" not in c:
        print(f" tau={c['tau']:.0e}: max |f_particles - f_convex| = {c['max_abs_diff']:.2e}")
    th = rep["theorem6"]
    print(f" Theorem 6 at the coldest tau: distinct={th['distinct']} antichain={th['antichain']}"
          f" max per binary pattern={th['max_per_binary']}")
    print(f"\nreport: {out / 'report.md'}; figures: "
          + ", ".join(sorted(p.name for p in out.glob("*.png"))))
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
