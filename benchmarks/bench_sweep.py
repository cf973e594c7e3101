"""Wall time of a study on a local Dask cluster against the same jobs run one after another.

    python benchmarks/bench_sweep.py [STUDY.toml] [--workers K] [--outdir DIR]
                                                  [--modes serial,serial1,dask]

Runs the study into fresh directories, once per mode:

* ``serial``: the jobs one after another in one process, numba on all cores (what a loop of
  ``meanfield run`` does);
* ``serial1``: the same with one numba thread per job;
* ``dask``: a local cluster of K workers (``cores // K`` numba threads each),

then prints the wall times, the machine load and the aggregated table of the last mode.
Not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# after site-packages: an installed meanfield is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from meanfield.sweep import Study  # noqa: E402

HERE = Path(__file__).resolve().parent


def _load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", nargs="?", default=str(HERE / "sweep16.toml"))
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--outdir", default=None, help="keep the study directories here")
    ap.add_argument("--modes", default="serial,serial1,dask")
    args = ap.parse_args(argv)
    root = Path(args.outdir or tempfile.mkdtemp(prefix="bench-sweep-"))
    cores = len(os.sched_getaffinity(0))
    rows = []
    modes = {"serial": {"serial": True}, "serial1": {"serial": True, "threads": 1},
             "dask": {"workers": args.workers}}
    for name in args.modes.split(","):
        kw = modes[name]
        d = root / name
        shutil.rmtree(d, ignore_errors=True)
        study = Study.from_file(args.study, d)
        load0 = _load()
        t0 = time.perf_counter()
        summary = study.run(progress=False, **kw)
        wall = time.perf_counter() - t0
        assert summary.ok, str(summary)
        rows.append((name, len(study.jobs), wall, load0, _load()))
    print(f"cores: {cores}")
    for name, n, wall, l0, l1 in rows:
        print(f"{name:>6}: {n} jobs in {wall:7.1f} s   (load average before: {l0}; after: {l1})")
    for name, _n, wall, _l0, _l1 in rows[:-1]:
        print(f"speed-up of {rows[-1][0]} over {name}: {wall / rows[-1][2]:.2f}")
    from meanfield.sweep.summary import analyze_study, format_markdown, write_report
    last = rows[-1][0]
    t0 = time.perf_counter()
    res = analyze_study(root / last)
    print(f"analysis: {time.perf_counter() - t0:.1f} s")
    write_report(res, root / f"{last}-report")
    print(format_markdown(res))
    print(f"study directories and report in {root}")


if __name__ == "__main__":
    main()
