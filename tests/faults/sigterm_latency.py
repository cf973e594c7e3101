"""How long each command takes to end after SIGTERM: a measurement script (not collected by
pytest; ``tests/faults/test_sigterm_latency.py`` runs a short version of it).

    python tests/faults/sigterm_latency.py              # every command, several times each
    python tests/faults/sigterm_latency.py --quick      # one time per command
    python tests/faults/sigterm_latency.py --only run,sweep

Each command is started in a session of its own (``python -m meanfield ...``, one numba
thread, SIGINT/SIGHUP at their defaults), sent SIGTERM after a delay, and timed until it has
exited *and* every process of its session has (a sweep's local Dask workers, an inspect's
reader child): the latency. Its exit code (130 expected; 0 when it finished first) and the
last line of its stderr are shown. Inputs are built in a temporary folder: a run long enough
to be stopped (one chain of Euler-Maruyama and the embedded default: the exact sampler with
two chains), a run file to analyze (with its figures and exact references), inspect
``--follow`` of a run in progress, a study on a 2-worker local cluster, ``dichotomies`` of 60
points in 6 dimensions (about 2e8 regions), and ``highdim``.

Prints one line per try and the worst latency per command; exits 1 if any exceeds
``--limit`` seconds (default 2).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

LONG_EM = """\
[data]
kind = "gaussian"
n = 8
d = 2
seed = 1
[model]
n_particles = 400
[dynamics]
lam = 0.05
eta = 0.05
taus = [1e-2, 1e-3]
steps_per_tau = 400000
seed = 3
[output]
checkpoint_every = 2000
"""

STUDY = """\
[data]
kind = "gaussian"
n = 8
d = 2
[model]
n_particles = 100
[dynamics]
taus = [1e-2]
steps_per_tau = 400000
[sweep]
"dynamics.seed" = [0, 1, 2, 3]
"""

SHORT = """\
[data]
kind = "file"
path = "{plane8}"
target = "y"
[model]
n_particles = 300
[dynamics]
lam = 0.05
eta = 0.05
taus = [0.01, 0.001]
steps_per_tau = 1500
seed = 2
[output]
observe_every = 100
snapshots_per_tau = 3
"""


def _env():
    return dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")


def _defaults():
    for name in ("SIGINT", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def _cli(args, cwd, **kw):
    return subprocess.Popen([sys.executable, "-m", "meanfield", *map(str, args)], cwd=cwd,
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_defaults, **kw)


def _group_alive(pgid) -> bool:
    """Whether a process of the session ``pgid`` still runs (a zombie, dead and waiting to be
    reaped by whoever inherited it, does not count)."""
    proc = Path("/proc")
    if not proc.is_dir():                       # not Linux: any process of the group
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()     # after "pid (comm) "
        if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
            return True
    return False


def measure(args, cwd, delay, setup=None, teardown=None, timeout=120.0, when=None) -> dict:
    """Start ``meanfield ARGS``, SIGTERM it ``delay`` s after it started (after ``when()``
    first held, when given: a moment of the command, e.g. a job running).

    Returns
    -------
    dict
        ``latency``: seconds from the signal until every process of its session has ended
        (``None`` when it ended before the signal); ``own``: until the command itself
        exited; ``code``: its exit code; ``err``: its stderr.
    """
    ctx = setup() if setup else None
    p = _cli(args, cwd)
    try:
        t_end = time.monotonic() + timeout
        while when is not None and p.poll() is None and time.monotonic() < t_end:
            try:
                if when():
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        t_end = time.monotonic() + delay
        while time.monotonic() < t_end and p.poll() is None:
            time.sleep(0.01)
        if p.poll() is not None:
            _, err = p.communicate()
            return {"latency": None, "own": None, "code": p.returncode, "err": err}
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            return {"latency": float("inf"), "own": float("inf"), "code": p.returncode,
                    "err": err + "\ndid not end: killed"}
        own = time.monotonic() - t0
        while _group_alive(p.pid) and time.monotonic() - t0 < timeout:
            time.sleep(0.01)
        return {"latency": time.monotonic() - t0, "own": own, "code": p.returncode, "err": err}
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if teardown:
            teardown(ctx)


def _clean(folder: Path, keep=()):
    for q in folder.iterdir():
        if q.name in keep:
            continue
        if q.is_dir():
            import shutil
            shutil.rmtree(q, ignore_errors=True)
        else:
            q.unlink()


def build(root: Path):
    """The inputs; returns ``{command: (args, cwd, setup, teardown, total delays)}``."""
    (root / "long.toml").write_text(LONG_EM)
    (root / "study.toml").write_text(STUDY)
    (root / "short.toml").write_text(SHORT.format(plane8=REPO / "data" / "plane8.csv"))
    import numpy as np
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 6)), rng.standard_normal(60)
    np.savetxt(root / "big.csv", np.c_[X, y], delimiter=",",
               header="x1,x2,x3,x4,x5,x6,y", comments="")
    r = subprocess.run([sys.executable, "-m", "meanfield", "run", "short.toml", "-o", "short.h5",
                        "--quiet"], cwd=root, env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    work = root / "work"
    work.mkdir()

    def fresh():
        _clean(work)

    def writer():
        fresh()
        w = _cli(["run", root / "long.toml", "-o", work / "w.h5", "--quiet"], root)
        part = work / "w.h5.part"
        t_end = time.monotonic() + 120
        while not part.exists() and time.monotonic() < t_end:
            time.sleep(0.01)
        return w

    def stop_writer(w):
        if w.poll() is None:
            w.kill()
            w.wait()

    return {
        "run (em, 1 chain)": (["run", root / "long.toml", "-o", work / "r.h5", "--quiet"],
                              fresh, None),
        "run (default: mala, 2 chains)": (["run", "-o", work / "d.h5", "--quiet"], fresh, None),
        "analyze": (["analyze", root / "short.h5", "-o", work / "rep", "--quiet"], fresh, None),
        "inspect --follow": (["inspect", work / "w.h5.part", "--follow", "--interval", "0.5"],
                             writer, stop_writer),
        "sweep (local cluster)": (["sweep", root / "study.toml", "-o", work / "study",
                                   "--workers", "2", "--quiet"], fresh, None),
        "dichotomies": (["dichotomies", root / "big.csv", "--target", "y", "--quiet",
                         "--max-regions", "1e9"], fresh, None),
        "highdim": (["highdim", "--neurons", "2", "--n", "20", "--d", "200,800,3200",
                     "--trials", "20", "-o", work / "hd", "--quiet"], fresh, None),
    }


DELAYS = {"run (em, 1 chain)": [0.3, 1.0, 2.5, 5.0], "run (default: mala, 2 chains)": [1.0, 3.0, 8.0],
          "analyze": [0.5, 1.5, 3.0, 5.0], "inspect --follow": [0.5, 1.5, 3.0],
          "sweep (local cluster)": [0.5, 2.0, 5.0, 10.0], "dichotomies": [0.5, 1.5, 3.0, 6.0],
          "highdim": [0.5, 1.5, 3.0, 6.0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one delay per command")
    ap.add_argument("--only", default="", help="comma-separated command name prefixes")
    ap.add_argument("--limit", type=float, default=2.0)
    args = ap.parse_args(argv)
    worst = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases = build(root)
        for name, (cmd, setup, teardown) in cases.items():
            if args.only and not any(name.startswith(o) for o in args.only.split(",")):
                continue
            delays = DELAYS[name][1:2] if args.quick else DELAYS[name]
            for delay in delays:
                got = measure(cmd, root, delay, setup, teardown)
                lat, own, code = got["latency"], got["own"], got["code"]
                last = (got["err"].strip().splitlines() or [""])[-1]
                shown = ("ended before the signal" if lat is None else
                         f"{lat:6.2f} s (itself {own:5.2f} s)")
                print(f"{name:32s} SIGTERM at {delay:4.1f} s: {shown}  exit {code}  {last[:110]}",
                      flush=True)
                if lat is not None:
                    worst[name] = max(worst.get(name, 0.0), lat)
    print()
    for name, lat in worst.items():
        print(f"worst {name:32s} {lat:6.2f} s")
    over = {n: v for n, v in worst.items() if v > args.limit}
    print(f"worst of all: {max(worst.values(), default=0.0):.2f} s (limit {args.limit:g} s)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
