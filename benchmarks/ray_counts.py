"""Ray and kink counts of particle runs against the exact ``τ → 0`` (convex) reference.

For every shipped data set × width ``N`` × seed, a run of the shipped config with a shortened
ladder (the two or three coldest temperatures, a fixed span of mean-field time per stage), then
at the coldest stationary temperature of the ladder: ``J`` (rays) and ``K`` (kink
hyperplanes) of the last snapshot next to the convex reference's counts of rays with weight at
least the stated floor (``docs/theory.md`` §6.3). One row per cell, and a note per
disagreement with the measured quantities that explain it.

    python benchmarks/ray_counts.py                          # everything (hours on one core)
    python benchmarks/ray_counts.py --sets D12 plane8 --N 500 --seeds 0
    python benchmarks/ray_counts.py --runs-only              # make the run files, no table
    python benchmarks/ray_counts.py --json out.json          # also write the rows

Run files are kept in ``--workdir`` (default ``ray_counts_runs``) and reused: a second call
only analyses. The configs are written next to them (``<set>-N<N>-s<seed>.toml``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

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
    steps = int(round(span / float(dyn["eta"])))
    dyn.update({"taus": list(taus), "steps_per_tau": steps, "seed": int(seed)})
    doc.setdefault("model", {})["n_particles"] = int(N)
    doc["output"] = {"observe_every": max(1, steps // OBSERVATIONS_PER_STAGE),
                     "snapshots_per_tau": 1}
    return doc


def ensure_run(workdir: Path, name: str, N: int, seed: int, threads: int,
               span_scale: float = 1.0) -> Path:
    """Run the cell unless its run file exists; returns the run file."""
    stem = f"{name}-N{N}-s{seed}"
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
    args = ap.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # cheapest cells first: by N, then seed, then set
    cells = [(name, N, seed) for N in sorted(args.N) for seed in args.seeds for name in args.sets]
    runs = {c: ensure_run(workdir, *c, args.threads, args.span_scale) for c in cells}
    if args.runs_only:
        return 0
    from benchmarks.ray_count_table import analyse_cells, format_table
    rows = analyse_cells(runs)
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
