"""Cost of writing observations: ``meanfield run`` with frequent against rare observations, and
the share of the run file writer in a plane8 run.

Two measurements, each an in-process :func:`meanfield.runner.run` (kernels compiled first):

* one particle, Gaussian data (n = 5, d = 2), one temperature of ``--steps`` steps, with
  ``observe_every = 10`` and ``= 1000``: the wall times, their ratio and the writer's part
  of each. In process the ratio also counts what the solver does per observation (the
  stationarity statistic, the stability number, the particle layout: about 0.8 ms, as long as
  some 80 steps of one particle) and no process start-up; ``meanfield run`` from the shell adds a
  few seconds to both;
* the plane8 data with N = 4000, three temperatures of ``--plane-steps`` steps,
  ``observe_every = 100`` (the default): the share of the wall time spent inside the
  :class:`meanfield.store.RunWriter` methods (target ≤ 3 %).

Run from the repository root: ``python benchmarks/bench_writer.py --threads 1`` (about a
minute on a quiet machine; on a loaded one two numba threads wait for each other at every
observation), ``--quick`` for shorter runs. Measured (two shared cores, one thread, main
against buffered writes): one particle 48.6 s / 0.65 s (writer 43.2 s) against 1.99 s /
0.28 s (writer 0.29 s); plane8 3 x 10 000 steps 17.9 s with the writer at 41 % against
10.5 s at 2.6 % (of which 0.04 s creating the file). Then, after one kernel call per observation,
the compiled small data mode and blocks of 4096 rows: 0.25 s / 0.08 s in process (84 µs per
observation), 2.17 s / 1.75 s from the shell (ratio 1.24); plane8 with the writer at 0.6 %.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba

sys.path.append(str(Path(__file__).resolve().parent.parent))   # after site-packages

from benchmarks.common import package_env  # noqa: E402
from meanfield import config, runner, store  # noqa: E402

GAUSS = {"data": {"kind": "gaussian", "n": 5, "d": 2, "seed": 1},
         "model": {"n_particles": 1},
         "dynamics": {"lam": 0.05, "eta": 0.05, "taus": [1e-2], "seed": 3},
         "output": {"snapshots_per_tau": 1}}

PLANE8 = {"data": {"kind": "inline",
                   "X": [[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4],
                         [-1.1, 0.3], [0.2, 0.1], [1.0, 1.5], [-0.3, -1.8]],
                   "y": [1.0, -0.5, 0.5, 1.2, -0.8, 0.3, -1.0, 0.9]},
          "model": {"n_particles": 4000},
          "dynamics": {"lam": 0.05, "eta": 0.05, "taus": [1e-2, 1e-3, 1e-4], "seed": 0},
          "output": {"observe_every": 100, "snapshots_per_tau": 1}}


class WriterClock:
    """Wraps the public methods of RunWriter and adds up the seconds spent in them (outermost
    calls only)."""

    NAMES = ("__init__", "append_observations", "append_frame", "flush", "commit", "truncate",
             "mark_complete", "close")

    def __init__(self):
        self.seconds = 0.0
        self.by_method = {}
        self._saved = {}
        self._depth = 0

    def __enter__(self):
        for name in self.NAMES:
            fn = getattr(store.RunWriter, name, None)
            if fn is None:
                continue
            self._saved[name] = fn

            def timed(*a, _fn=fn, **kw):
                if self._depth:                  # a method called by another: counted there
                    return _fn(*a, **kw)
                self._depth += 1
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **kw)
                finally:
                    dt = time.perf_counter() - t0
                    self._depth -= 1
                    self.seconds += dt
                    self.by_method[_fn.__name__] = self.by_method.get(_fn.__name__, 0.0) + dt
            setattr(store.RunWriter, name, timed)
        return self

    def __exit__(self, *exc):
        for name, fn in self._saved.items():
            setattr(store.RunWriter, name, fn)


def one_run(tables, folder, name):
    cfg = config.from_dict(tables)
    out = Path(folder) / name
    with WriterClock() as clock:
        t0 = time.perf_counter()
        runner.run(cfg, out, overwrite=True, progress=False)
        wall = time.perf_counter() - t0
    return wall, clock


def _toml(tables) -> str:
    """A config's tables as TOML text (flat tables of numbers, strings and lists)."""
    lines = []
    for table, keys in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def cli_runs(tables_by_every, folder, threads, repeats):
    """Median wall seconds of ``meanfield run CONFIG -o OUT --quiet`` in a fresh process, per
    ``observe_every`` (the runs alternate, so a change of the machine's load hits both)."""
    walls = {every: [] for every in tables_by_every}
    for r in range(repeats):
        for every, tables in tables_by_every.items():
            cfg = Path(folder) / f"cli{every}.toml"
            cfg.write_text(_toml(tables))
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "meanfield", "run", str(cfg), "-o",
                            str(Path(folder) / f"cli{every}_{r}.h5"), "--quiet",
                            "--threads", str(threads)], check=True, capture_output=True,
                           env=package_env(), cwd=folder)
            walls[every].append(time.perf_counter() - t0)
    return {every: statistics.median(w) for every, w in walls.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--plane-steps", type=int, default=40000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs of `meanfield run` from the shell per observe_every (0: none)")
    a = p.parse_args(argv)
    if a.quick:
        a.steps, a.plane_steps = 5000, 5000
    numba.set_num_threads(min(a.threads, numba.config.NUMBA_NUM_THREADS))
    with tempfile.TemporaryDirectory() as tmp:
        warm = {**GAUSS, "dynamics": {**GAUSS["dynamics"], "steps_per_tau": 100},
                "output": {**GAUSS["output"], "observe_every": 10}}
        one_run(warm, tmp, "warm.h5")
        walls = {}
        for every in (10, 1000):
            t = {**GAUSS, "dynamics": {**GAUSS["dynamics"], "steps_per_tau": a.steps},
                 "output": {**GAUSS["output"], "observe_every": every}}
            wall, w = one_run(t, tmp, f"g{every}.h5")
            walls[every] = wall
            print(f"one particle, {a.steps} steps, observe_every={every:5d}: {wall:7.2f} s "
                  f"(writer {w.seconds:6.2f} s)")
        print(f"  ratio observe_every 10 / 1000: {walls[10] / walls[1000]:.2f} (target <= 2)")
        print(f"  per observation: {(walls[10] - walls[1000]) / (a.steps / 10) * 1e6:.0f} us "
              f"(all of the solver's and the writer's work at an observation)")
        if a.repeats:
            cli = cli_runs({every: {**GAUSS, "dynamics": {**GAUSS["dynamics"],
                                                          "steps_per_tau": a.steps},
                                    "output": {**GAUSS["output"], "observe_every": every}}
                            for every in (10, 1000)}, tmp, a.threads, a.repeats)
            print(f"meanfield run from the shell (median of {a.repeats}): observe_every=10 "
                  f"{cli[10]:.2f} s, =1000 {cli[1000]:.2f} s, ratio {cli[10] / cli[1000]:.2f}")
        t = {**PLANE8, "dynamics": {**PLANE8["dynamics"], "steps_per_tau": a.plane_steps}}
        wall, w = one_run(t, tmp, "plane8.h5")
        print(f"plane8, N=4000, 3 x {a.plane_steps} steps, observe_every=100: {wall:7.2f} s, "
              f"writer {w.seconds:6.2f} s = {100 * w.seconds / wall:.1f} % (target <= 3 %)")
        print("  writer seconds by method: " + ", ".join(
            f"{k} {v:.3f}" for k, v in sorted(w.by_method.items())))


if __name__ == "__main__":
    main()
