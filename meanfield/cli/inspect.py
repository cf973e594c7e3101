"""``meanfield inspect``: summarise a run file."""

from __future__ import annotations

import json

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.


def register(sub):
    """Add the ``inspect`` command to the subparsers ``sub``."""
    p = sub.add_parser("inspect", help="summarise a run file (frames, config, completeness)",
                       description="Print a summary of a run file: schema version, sizes, "
                                   "frames (step, time, tau), whether the run completed.")
    p.add_argument("run", help="run file (.h5)")
    p.add_argument("--json", action="store_true",
                   help='print {"schema_version", "n_particles", "d", "n", "complete", '
                        '"frames": [{"step", "time", "tau"}], "stages": [{"tau", "steps", '
                        '"stationary", "stationarity"}], "config"}')
    p.set_defaults(func=main)


def stages(run) -> list:
    """Per ladder stage: ``tau``, ``steps`` (run so far), ``stationary`` (null without
    observations) and ``stationarity`` (docs/theory.md §2.5)."""
    from analysis.stationarity import run_verdicts, stage_bounds
    out = []
    for s, (tau, v) in enumerate(zip(run.config["dynamics"]["taus"], run_verdicts(run))):
        lo, hi = stage_bounds(run, s)
        judged = v.reasons != ["stage not reached"]
        out.append({"tau": float(tau), "steps": int(hi - lo),
                    "stationary": bool(v.stationary) if judged else None,
                    "stationarity": v.to_dict() if judged else None})
    return out


def summary(run) -> dict:
    """The ``inspect --json`` document of a :class:`meanfield.store.Run`."""
    return {"schema_version": run.schema_version, "n_particles": run.n_particles, "d": run.d,
            "n": run.n, "complete": run.complete,
            "frames": [{"step": int(s), "time": float(t), "tau": float(u)}
                       for s, t, u in zip(run.frame_step, run.frame_time, run.frame_tau)],
            "stages": stages(run), "config": run.config}


def main(args) -> int:
    """Run ``meanfield inspect`` with the parsed ``args``; returns the exit code."""
    from meanfield.store import open_run
    run = open_run(args.run)
    doc = summary(run)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    obs = run.observables
    print(f"run file      {run.path}")
    print(f"schema        {run.schema_version}   complete: {run.complete}")
    print(f"data          n={run.n} d={run.d}")
    dyn = run.config["dynamics"]
    print(f"particles     N={run.n_particles}  activation={run.config['model']['activation']}")
    print(f"dynamics      lam={dyn['lam']:g} eta={dyn['eta']:g} steps_per_tau={dyn['steps_per_tau']}"
          f" seed={dyn['seed']}")
    print(f"observations  {len(obs['risk']['step'])}")
    print(f"frames        {run.n_frames}")
    for s, t, u in zip(run.frame_step, run.frame_time, run.frame_tau):
        sel = obs["risk"]["step"] == s
        risk = obs["risk"]["value"][sel]
        r = f"  risk={risk[0]:.4e}" if risk.size else ""
        print(f"  step={int(s):>9d}  time={t:10.2f}  tau={u:.2e}{r}")
    print("stages")
    for st in doc["stages"]:
        v = st["stationarity"]
        verdict = ("no observations" if v is None else "stationary" if st["stationary"]
                   else "NOT stationary: " + "; ".join(v["reasons"]))
        print(f"  tau={st['tau']:.2e}  steps={st['steps']:>9d}  {verdict}")
    return 0
