"""Outside check: [SKM22]'s structural claim, at most three kinks between consecutive inputs,
on their univariate data sets D2, D4, D7, D12 (docs/theory.md §6, §9).

**Published claim.** A. Shevchenko, V. Kungurtsev, M. Mondelli, *Mean-field analysis of
piecewise linear solutions for wide ReLU networks*, JMLR 23(130), 2022: the predictor learned by
noisy SGD on wide two-layer ReLU networks in one input dimension is piecewise linear with **at
most three knots (kinks) between two consecutive training inputs**, in the limit of small
temperature.

**Expected outcome.** For every data set, at the coldest stationary temperature, the number of
kinks of the particle predictor in every interval ``[x_(i), x_(i+1)]`` between consecutive
sorted distinct inputs is at most 3; the same for the exact ``τ → 0`` reference (the convex
problem of docs/theory.md §4, ``analysis.references.convex_reference``), an independent check
of the claim that needs no sampling.

What is run: each shipped config ``data/skm22_d{2,4,7,12}.toml`` (exact sampler ``"mala"``,
``λ = 0.003``, the ladder ``τ = 5·10⁻³ … 5·10⁻⁵``, each stage until its stationarity verdict);
``--small`` shortens it (``N = 300``, one chain, the two coldest temperatures, at most 6000
passes a stage). Then ``analysis.run_analysis.analyze`` (the analysis of ``meanfield
analyze``): rays, their kink hyperplanes (``analysis.kinks``: in 1-D a kink is the point
``x = offset``) and the stationarity verdict of each stage. At the coldest stage judged
stationary (else the coldest, flagged), the kink positions are sorted into the intervals
between consecutive inputs. A kink within ``ON_POINT_TOL`` times the data's spread of an input
is *on* that input and counts in both intervals next to it (an upper bound: a kink through a
data point sits between two pieces of the predictor on either side of it); kinks outside
``[min x, max x]`` are listed apart (they are not between inputs). The convex reference's kinks
are those of its rays of weight ≥ 1 % of ``Σ|c|`` (``analysis.ray_checks.convex_counts``, as
``K_convex``) and, as a bound, of all its rays.

    python benchmarks/outside_skm22_kinks.py                 # the shipped configs, minutes
    python benchmarks/outside_skm22_kinks.py --small         # N = 300, one chain, ~1 min
    python benchmarks/outside_skm22_kinks.py --sets D7 --threads 2

Run files are kept in ``--workdir`` (default ``outside_skm22_runs``) and reused: a second call
only analyses.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

ROOT = Path(__file__).resolve().parent.parent
SETS = {"D2": "skm22_d2.toml", "D4": "skm22_d4.toml", "D7": "skm22_d7.toml",
        "D12": "skm22_d12.toml"}
#: [SKM22]'s bound on the kinks between two consecutive inputs.
MAX_KINKS = 3
#: A kink within this fraction of the data's spread (``analysis.kinks.data_spread``) of an
#: input is on it (particle rays scatter their kinks by about their angular spread times
#: ``|x̃|``, up to 4 % of the spread on D2, docs/theory.md §6.3; 1 % keeps distinct kinks near
#: a point apart and is the resolution at which "on the point" is read here).
ON_POINT_TOL = 0.01
#: ``--small``: width, chains, the ladder's coldest temperatures kept, most passes a stage.
SMALL = {"n_particles": 300, "chains": 1, "n_taus": 2, "max_steps": 6000}


def kinks_between(positions, x, tol: float) -> dict:
    """Sort 1-D kink positions into the intervals between consecutive distinct inputs.

    Parameters
    ----------
    positions : array-like of float
        Kink positions.
    x : array-like of float
        The inputs (any order, duplicates allowed).
    tol : float
        A kink within ``tol`` of an input is on it and counts in both intervals next to it
        (one only at the ends).

    Returns
    -------
    dict
        ``edges`` (sorted distinct inputs), ``per_interval`` (count per interval
        ``[edges[i], edges[i+1]]``), ``on_points`` (positions within ``tol`` of an input),
        ``outside`` (positions beyond ``[min x, max x]`` by more than ``tol``), ``max``
        (the largest count; 0 without an interval).
    """
    edges = np.unique(np.asarray(x, dtype=float).ravel())
    per = np.zeros(max(len(edges) - 1, 0), dtype=int)
    on, outside = [], []
    for p in np.asarray(positions, dtype=float).ravel():
        if p < edges[0] - tol or p > edges[-1] + tol:
            outside.append(float(p))
            continue
        near = np.nonzero(np.abs(edges - p) <= tol)[0]
        if near.size:
            on.append(float(p))
            j = int(near[0])
            for i in (j - 1, j):                 # the intervals on either side of the input
                if 0 <= i < len(per):
                    per[i] += 1
            continue
        i = int(np.searchsorted(edges, p)) - 1    # edges[i] < p < edges[i+1]
        per[i] += 1
    return {"edges": edges, "per_interval": per, "on_points": on, "outside": outside,
            "max": int(per.max()) if per.size else 0}


def kink_positions(kinks) -> list[float]:
    """The points ``x = offset / normal`` of 1-D kink hyperplanes (:class:`solvers.geometry.Kink`
    or ``(normal, offset)`` pairs)."""
    out = []
    for k in kinks:
        normal, offset = (k.normal, k.offset) if hasattr(k, "normal") else k
        out.append(float(offset) / float(np.ravel(normal)[0]))
    return sorted(out)


def cell_config(name: str, small: bool) -> dict:
    """The shipped config of a set as a dict (``data.path`` absolute); ``small``: the
    shortened version (:data:`SMALL`)."""
    from meanfield.config import read_toml
    doc = read_toml(ROOT / "data" / SETS[name])
    doc["data"]["path"] = str(ROOT / "data" / doc["data"]["path"])
    if small:
        dyn = doc["dynamics"]
        dyn["taus"] = list(dyn["taus"])[-SMALL["n_taus"]:]
        dyn["max_steps_per_tau"] = SMALL["max_steps"]
        dyn["chains"] = SMALL["chains"]
        doc["model"]["n_particles"] = SMALL["n_particles"]
    return doc


def ensure_run(workdir: Path, name: str, small: bool, threads: int | None) -> tuple[Path, float]:
    """Run the set's config unless its run file exists; returns the file and the wall time
    (0 for a reused file)."""
    import meanfield
    out = workdir / f"{name}{'-small' if small else ''}.h5"
    if out.exists():
        return out, 0.0
    cfg = meanfield.config_from_dict(cell_config(name, small), source=SETS[name])
    t0 = time.perf_counter()
    meanfield.run(cfg, out, overwrite=True, progress=False, threads=threads)
    return out, time.perf_counter() - t0


def analyse(path: Path) -> dict:
    """Kinks between consecutive inputs at the coldest stationary stage of a run, and of the
    convex reference."""
    from analysis.kinks import data_spread
    from analysis.ray_checks import convex_counts
    from analysis.references import convex_reference
    from analysis.run_analysis import analyze
    from analysis.snapshots import last_of_stages
    from meanfield.store import open_run
    run = open_run(path)
    res = analyze(run, w2=False, convex=True)
    rows = {r.stage: r for r in res.ladder}
    frames = {f.stage: f for f in last_of_stages(res.frames)}
    stat = [s for s in rows if rows[s].stationary]
    stage = min(stat, key=lambda s: (run.taus[s], -s)) if stat \
        else run.schedule.coldest_stage()
    f = frames[stage]
    x = np.asarray(run.X, dtype=float)[:, 0]
    tol = ON_POINT_TOL * data_spread(run.X)
    pos = kink_positions(f.kinks)
    conv = convex_reference(run.X, run.y, run.lam)
    cc = convex_counts(conv, run.X)
    pos_c = kink_positions(cc["kinks"])
    pos_all = kink_positions(conv.kinks())
    return {"tau": float(run.taus[stage]), "stationary": stage in stat, "J": rows[stage].J,
            "K": rows[stage].K, "J_convex": cc["J"], "K_convex": cc["K"],
            "positions": pos, "particles": kinks_between(pos, x, tol),
            "positions_convex": pos_c, "convex": kinks_between(pos_c, x, tol),
            "positions_convex_all": pos_all, "convex_all": kinks_between(pos_all, x, tol),
            "tol": tol, "n_particles": int(run.n_particles)}


def _fmt(ps) -> str:
    return "[" + ", ".join(f"{p:.3f}" for p in ps) + "]"


def format_rows(results: dict) -> str:
    L = ["| set | N | τ | stationary | J, K (convex) | kinks x (particles) | per interval | "
         "max | convex kinks x | per interval | max | all convex rays: max | ≤ 3 |",
         "|" + "---|" * 13]
    for name, r in results.items():
        p, c, ca = r["particles"], r["convex"], r["convex_all"]
        ok = max(p["max"], c["max"], ca["max"]) <= MAX_KINKS
        L.append(f"| {name} | {r['n_particles']} | {r['tau']:.0e} | "
                 f"{'yes' if r['stationary'] else '**no**'} | {r['J']}, {r['K']} "
                 f"({r['J_convex']}, {r['K_convex']}) | {_fmt(r['positions'])} | "
                 f"{' '.join(str(int(v)) for v in p['per_interval'])} | {p['max']} | "
                 f"{_fmt(r['positions_convex'])} | "
                 f"{' '.join(str(int(v)) for v in c['per_interval'])} | {c['max']} | "
                 f"{ca['max']} | {'yes' if ok else '**no**'} |")
    notes = []
    for name, r in results.items():
        for who, k in (("particles", r["particles"]), ("convex", r["convex"])):
            if k["on_points"]:
                notes.append(f"- {name} ({who}): kinks on inputs {_fmt(k['on_points'])} "
                             f"(within {r['tol']:.3g}), counted in both intervals")
            if k["outside"]:
                notes.append(f"- {name} ({who}): kinks outside the inputs' range "
                             f"{_fmt(k['outside'])}")
    return "\n".join(L + ([""] + notes if notes else []))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    ap.add_argument("--small", action="store_true",
                    help=f"N = {SMALL['n_particles']}, {SMALL['chains']} chain, the "
                         f"{SMALL['n_taus']} coldest temperatures, at most "
                         f"{SMALL['max_steps']} passes a stage")
    ap.add_argument("--workdir", default="outside_skm22_runs")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.sets:
        path, wall = ensure_run(workdir, name, args.small, args.threads)
        results[name] = {**analyse(path), "run_s": wall}
        sys.stderr.write(f"{name}: run {wall:.0f} s\n")
    print(format_rows(results))
    worst = max(max(r["particles"]["max"], r["convex"]["max"], r["convex_all"]["max"])
                for r in results.values())
    print(f"\npublished: at most {MAX_KINKS} kinks between consecutive inputs. Measured: at "
          f"most {worst} (particles and convex reference) -> "
          + ("agrees" if worst <= MAX_KINKS else "DISAGREES"))
    return results


if __name__ == "__main__":
    main()
    sys.exit(0)
