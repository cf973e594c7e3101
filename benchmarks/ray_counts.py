"""Ray and kink counts of particle runs against the exact ``τ → 0`` (convex) reference.

For every shipped data set × width ``N`` × seed, a run of the shipped config with a shortened
ladder (the two or three coldest temperatures, a fixed span of mean-field time per stage), then
at the coldest stationary temperature of the ladder: ``J`` (rays) and ``K`` (kink
hyperplanes) of the last snapshot next to the convex reference's counts of rays with weight at
least the stated floor (THEORY §6.4). One row per cell, and a note per
disagreement with the measured quantities that explain it.

    python benchmarks/ray_counts.py                          # everything (hours on one core)
    python benchmarks/ray_counts.py --sets D12 plane8 --N 500 --seeds 0
    python benchmarks/ray_counts.py --runs-only              # make the run files, no table
    python benchmarks/ray_counts.py --json out.json          # also write the rows

Run files are kept in ``--workdir`` (default ``ray_counts_runs``) and reused: a second call
only analyses. The configs are written next to them (``<set>-N<N>-s<seed>[-x<span scale>].toml``;
the stage length is part of the name, so cells of another ``--span-scale`` are never mixed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

#: name -> (shipped config, overrides of [dynamics], ladder, mean-field time per stage).
#: D4's shipped eta = 0.01 is beyond the Euler stability limit of its data mode (THEORY §2:
#: eta·λmax(K)/n ≈ 2.5 > 2); 0.005 is stable.
SETS = {
    "D2": ("skm22_d2.toml", {}, [1e-3, 1e-4], 400.0),
    "D4": ("skm22_d4.toml", {"eta": 0.005}, [1e-3, 1e-4], 400.0),
    "D7": ("skm22_d7.toml", {}, [1e-3, 1e-4], 400.0),
    "D12": ("skm22_d12.toml", {}, [1e-3, 1e-4], 400.0),
    "plane8": ("plane8.toml", {}, [1e-2, 1e-3, 1e-4], 300.0),
    "two_point_even": ("two_point_even.toml", {}, [1e-2, 1e-3, 1e-4], 300.0),
    "two_point_odd": ("two_point_odd.toml", {}, [1e-2, 1e-3, 1e-4], 300.0),
}
OBSERVATIONS_PER_STAGE = 400


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def dump_toml(doc: dict) -> str:
    """A two-level TOML document (tables of scalars and lists)."""
    out = []
    for table, kv in doc.items():
        out.append(f"[{table}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in kv.items()]
        out.append("")
    return "\n".join(out)


def cell_config(name: str, N: int, seed: int, span_scale: float = 1.0) -> dict:
    """The config of one cell: the shipped one with the shortened ladder (stage length
    ``span_scale`` times the default span of mean-field time)."""
    fname, over, taus, span = SETS[name]
    span *= span_scale
    with open(ROOT / "data" / fname, "rb") as fh:
        doc = tomllib.load(fh)
    if doc["data"].get("kind") == "file":
        doc["data"]["path"] = str(ROOT / "data" / doc["data"]["path"])
    dyn = doc.setdefault("dynamics", {})
    dyn.update(over)
    steps = round(span / float(dyn["eta"]))
    dyn.update({"taus": list(taus), "steps_per_tau": steps, "seed": int(seed)})
    doc.setdefault("model", {})["n_particles"] = int(N)
    doc["output"] = {"observe_every": max(1, steps // OBSERVATIONS_PER_STAGE),
                     "snapshots_per_tau": 1}
    return doc


def ensure_run(workdir: Path, name: str, N: int, seed: int, threads: int,
               span_scale: float = 1.0) -> Path:
    """Run the cell unless its run file exists; returns the run file."""
    stem = f"{name}-N{N}-s{seed}" + ("" if span_scale == 1 else f"-x{span_scale:g}")
    out = workdir / f"{stem}.h5"
    if out.exists():
        return out
    cfg = workdir / f"{stem}.toml"
    cfg.write_text(dump_toml(cell_config(name, N, seed, span_scale)))
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "meanfield", "run", str(cfg), "-o", str(out),
                    "--threads", str(threads), "--quiet", "--overwrite"], check=True,
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   stdout=subprocess.DEVNULL)
    sys.stderr.write(f"ran {stem} in {time.time() - t0:.0f} s\n")
    return out


#: Interim certificate test of a stage: max|G| ≤ 1 + G_TOL over the particles and
#: |−sign(a) G − 1| ≤ G_TOL on every ray (THEORY §4: exactly 1 at the optimum).
G_TOL = 0.1


def _stage_rays(run, stage):
    """Rays of the last snapshot of ``stage`` (with the analysis' default thresholds)."""
    from analysis.kinks import data_kinks
    from analysis.rays import find_rays
    from analysis.run_analysis import frame_ray_kw
    k = run.last_frame(stage)
    theta = run.frame(k)
    res = find_rays(theta, run.X, **frame_ray_kw(run, k))
    K = len(data_kinks([q.direction for q in res.rays], run.X,
                       [q.pattern for q in res.rays])) if res.rays else 0
    return theta, res, K


def _certified(res) -> bool:
    return (res.G_max is not None and res.G_max <= 1 + G_TOL
            and all(abs(-q.sign * q.G - 1) <= G_TOL for q in res.rays))


def analyse_cell(path: Path, name: str, N: int, seed: int, with_sensitivity: bool = False) -> dict:
    """``J``, ``K`` at the coldest stationary stage of a run against the convex counts, with
    the quantities that explain a disagreement.

    A stage counts as stationary when the analysis judges it so
    (``analysis.stationarity.run_verdicts``, the verdict ``meanfield analyze`` prints) and its
    certificate is that of a stationary state (:data:`G_TOL`)."""
    import numpy as np

    from analysis.ray_checks import convex_comparison, convex_counts
    from analysis.rays import directions
    from analysis.references import convex_reference
    from analysis.stationarity import run_verdicts
    from meanfield.store import open_run
    run = open_run(path)
    taus, lam = run.taus, run.lam
    verdicts = run_verdicts(run)
    stage_rays = [_stage_rays(run, s) for s in range(len(taus))]
    stat = [s for s in range(len(taus)) if verdicts[s].stationary and
            _certified(stage_rays[s][1])]
    stage = max(stat, key=lambda s: -taus[s]) if stat else run.schedule.coldest_stage()
    theta, res, K = stage_rays[stage]
    span = run.steps_run(stage) * run.eta
    conv = convex_reference(run.X, run.y, lam)
    cc = convex_counts(conv, run.X)
    m = convex_comparison(res.rays, cc)
    tot = float(np.abs(conv.weights).sum())
    notes = []
    for i in m["unmatched_measured"]:
        q = res.rays[i]
        g = -q.sign * q.G
        efold = 1.0 / (lam * abs(1.0 - g)) if g != 1 else float("inf")
        notes.append(f"extra ray ({', '.join(f'{x:.3f}' for x in q.direction)}), sign "
                     f"{q.sign:+d}, mass {q.mass_fraction:.3f}, n={q.n_particles}, "
                     f"-sign(a)G={g:.3f}: its mass changes at rate lam|1-G|, e-fold time "
                     f"{efold:.0f} vs stage span {span:.0f}")
    V, _, mass = directions(theta)
    Lx = np.c_[run.X, np.ones(run.n)]
    sgn = np.where(theta[:, 0] >= 0, 1, -1)
    for j in m["unmatched_reference"]:
        v = cc["directions"][j]
        # the particles acting like this ray on the data: same sign, same activation cell
        same = (sgn == cc["signs"][j]) & np.all((V @ Lx.T > 0) == (Lx @ v > 0)[None, :], axis=1)
        ang = np.arccos(np.clip(V[same] @ v, -1, 1))
        rms = float(np.sqrt(np.sum(mass[same] * ang ** 2) / mass[same].sum())) if same.any() \
            else float("nan")
        per = (float(mass[same].mean()) / res.halo_baseline
               if same.any() and res.halo_baseline else float("nan"))
        notes.append(f"missed convex ray ({', '.join(f'{x:.3f}' for x in v)}), weight "
                     f"{abs(cc['weights'][j]) / tot:.3f} of sum|c|; its cell holds "
                     f"{mass[same].sum() / mass.sum():.3f} of the particle mass "
                     f"({int(same.sum())} particles, {per:.1f} baselines (d+1)tau/lam each "
                     f"on average) at RMS angle {rms:.3f} rad from it")
    for c in res.rejected:
        if c["mass_fraction"] >= cc["floor"]:
            notes.append(f"cluster ({', '.join(f'{x:.3f}' for x in c['direction'])}), sign "
                         f"{c['sign']:+d}, mass {c['mass_fraction']:.3f} refused by the "
                         f"certificate: -sign(a)G = {-c['sign'] * c['G']:.3f}")
    below = [float(abs(w) / tot) for w in conv.weights if abs(w) < cc["floor"] * tot]
    if below and (len(res.rays) != cc["J"] or m["unmatched_measured"]):
        notes.append("convex rays below the floor: weights "
                     + ", ".join(f"{w:.4f}" for w in below) + " of sum|c|")
    cold = run.schedule.coldest_stage()
    if stage in stat and stage != cold:
        rc = stage_rays[cold][1]
        notes.append(f"coldest stage tau={taus[cold]:g} not stationary: "
                     f"{'; '.join(verdicts[cold].reasons) or 'certificate'}, max|G| "
                     f"{rc.G_max:.3f}, rays' -sign(a)G "
                     + ", ".join(f"{-q.sign * q.G:.3f}" for q in rc.rays))
    if stage not in stat:
        notes.append(f"no stage stationary; coldest tau={taus[stage]:g}: "
                     f"{'; '.join(verdicts[stage].reasons) or 'certificate'}, max|G| "
                     f"{res.G_max:.3f}, rays' -sign(a)G "
                     + ", ".join(f"{-q.sign * q.G:.3f}" for q in res.rays))
    if not res.resolved:
        notes.append(f"N too small: {len(res.small)} heavy cluster(s) under "
                     f"{res.min_particles} particles")
    agree = len(res.rays) == cc["J"] and K == cc["K"] and len(m["pairs"]) == cc["J"]
    sens = None
    if with_sensitivity:
        from analysis.ray_checks import sensitivity
        from analysis.run_analysis import frame_ray_kw
        k = run.last_frame(stage)
        sens = sensitivity(theta, run.X, frame_ray_kw(run, k), conv=conv)
    if K != cc["K"] and not notes:
        notes.append("K differs: kinks " + "; ".join(
            f"({', '.join(f'{x:.3f}' for x in q.direction)})" for q in res.rays))
    return {"set": name, "N": N, "seed": seed, "tau": taus[stage],
            "stationary": stage in stat,
            "stationary_stages": [taus[s] for s in stat], "J": len(res.rays), "K": K,
            "J_convex": cc["J"], "K_convex": cc["K"], "matched": len(m["pairs"]),
            "max_angle": None if not m["pairs"] else float(m["max_angle"]),
            "G_max": res.G_max, "resolved": res.resolved, "agree": agree, "notes": notes,
            "sensitivity": sens}


def format_table(rows) -> str:
    """The rows as a Markdown table, disagreements explained below it."""
    head = ("| set | N | seed | τ | stationary | J | K | J convex | K convex | matched | "
            "max angle | agree |")
    L = [head, "|" + "---|" * 12]
    for r in rows:
        ang = "—" if r["max_angle"] is None else f"{r['max_angle']:.3f}"
        L.append(f"| {r['set']} | {r['N']} | {r['seed']} | {r['tau']:.0e} | "
                 f"{'yes' if r['stationary'] else 'no'} | {r['J']} | {r['K']} | "
                 f"{r['J_convex']} | {r['K_convex']} | {r['matched']} | {ang} | "
                 f"{'yes' if r['agree'] else '**no**'} |")
    bad = [r for r in rows if not r["agree"] or r["notes"]]
    if bad:
        L += ["", "Notes:"]
        for r in bad:
            L.append(f"- {r['set']} N={r['N']} seed={r['seed']}: " + "; ".join(r["notes"]))
    for r in rows:
        if r.get("sensitivity"):
            sens = r["sensitivity"]
            title = (f"Sensitivity, {r['set']} N={r['N']} seed={r['seed']} tau={r['tau']:g} "
                     f"(defaults J={sens['default']['J']}, K={sens['default']['K']}; "
                     f"robust: {sens['robust']}):")
            L += ["", title, "", "| threshold | values | J | K |", "|---|---|---|---|"]
            names = list(dict.fromkeys(x["threshold"] for x in sens["rows"]))
            for nm in names:
                xs = [x for x in sens["rows"] if x["threshold"] == nm]
                vals = " / ".join(format(x["value"], ".3g") for x in xs)
                Js = " / ".join(str(x["J"]) for x in xs)
                Ks = " / ".join(str(x["K"]) for x in xs)
                L.append(f"| {nm} | {vals} | {Js} | {Ks} |")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    ap.add_argument("--N", nargs="+", type=int, default=[500, 1000, 4000])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--workdir", default="ray_counts_runs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--span-scale", type=float, default=1.0,
                    help="stage length in units of the default span of mean-field time")
    ap.add_argument("--runs-only", action="store_true", help="make the run files, no table")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--sensitivity", action="store_true",
                    help="also J and K over a range of each threshold, per cell")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # cheapest cells first: by N, then seed, then set
    cells = [(name, N, seed) for N in sorted(args.N) for seed in args.seeds for name in args.sets]
    runs = {c: ensure_run(workdir, *c, args.threads, args.span_scale) for c in cells}
    if args.runs_only:
        return 0
    rows = [analyse_cell(path, *cell, with_sensitivity=args.sensitivity)
            for cell, path in runs.items()]
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
