"""``meanfield inspect``: summarise a run file, or follow a run in progress."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.


def register(sub):
    """Add the ``inspect`` command to the subparsers ``sub``."""
    p = sub.add_parser("inspect", help="summarise a run file (frames, config, completeness)",
                       description="Print a summary of a run file: schema version, sizes, "
                                   "frames (step, time, tau), whether the run completed.")
    p.add_argument("run", help="run file (.h5, or RUN.h5.part of a run in progress)")
    p.add_argument("--json", action="store_true",
                   help='print {"schema_version", "n_particles", "d", "n", "complete", '
                        '"frames": [{"step", "time", "tau", "stage"}], "stages": [{"stage", '
                        '"tau", "steps", "running", "stopped", "stationary", "stationarity"}], '
                        '"config"} (a stage still running has no verdict: null)')
    p.add_argument("--follow", action="store_true",
                   help="print the progress of a run in progress (read live, committed rows "
                        "only) until it ends; exit 0 when it completes, 1 when its writer "
                        "stops before the end; a run file not there yet is waited for, 60 s "
                        "at most (then exit 2)")
    p.add_argument("--interval", type=float, default=10.0,
                   help="seconds between two progress lines with --follow (default 10)")
    p.set_defaults(func=main)


def stopped_line(part) -> str:
    """The line that says no process writes the run file ``part`` (``RUN.h5.part``) and how
    to continue the run."""
    from meanfield.store import RESUME_HINT
    part = Path(part)
    return (f"stopped: no process is writing {part} (interrupted or killed); {RESUME_HINT} "
            f"(its output: {part.with_name(part.name[:-len('.part')])})")


def is_stopped(run) -> bool:
    """Whether ``run`` is an unfinished ``RUN.h5.part`` that no process writes (interrupted or
    killed); a writer that finished after the file was opened has renamed it away."""
    import os

    from meanfield.store import writer_alive
    path = str(run.path)
    return (not run.complete and path.endswith(".part")
            and not writer_alive(path) and os.path.exists(path))


def stages(run) -> list:
    """Per ladder stage: ``stage``, ``tau``, ``steps`` (run so far), ``running``, ``stopped``,
    ``stationary`` and ``stationarity`` (docs/theory.md §2.5); the last two are null for a
    stage without observations and for the stage an unfinished run is in
    (:func:`running_stage`), whose verdict would judge a stage cut short. That stage is
    ``running`` while a process writes the file, else ``stopped`` (:func:`is_stopped`)."""
    from analysis.stationarity import run_verdicts
    out = []
    now = running_stage(run)
    stopped = now is not None and is_stopped(run)
    for s, (tau, v) in enumerate(zip(run.taus, run_verdicts(run))):
        judged = v.reasons != ["stage not reached"] and s != now
        out.append({"stage": s, "tau": float(tau), "steps": run.steps_run(s),
                    "running": s == now and not stopped, "stopped": s == now and stopped,
                    "stationary": bool(v.stationary) if judged else None,
                    "stationarity": v.to_dict() if judged else None})
    return out


def running_stage(run) -> int | None:
    """The stage an unfinished run is in: the last one with observations, while it has run
    fewer steps than its length (``"auto"``: than ``max_steps_per_tau``, as long as the next
    stage has no row; it may end early). ``None`` for a complete run, before the first
    observation, and between two stages."""
    import numpy as np
    if run.complete or not len(run.stage):
        return None
    last = int(np.max(run.stage))
    sch = run.schedule
    # an "auto" stage's length is known once it has ended: until then its budget
    length = int(sch.max_steps_per_tau) if sch.auto else sch.stage_length(last)
    return last if run.steps_run(last) < length else None


def summary(run) -> dict:
    """The ``inspect --json`` document of a :class:`meanfield.store.Run`."""
    return {"schema_version": run.schema_version, "n_particles": run.n_particles, "d": run.d,
            "n": run.n, "complete": run.complete, "chains": run.n_chains,
            "frames": [{"step": int(s), "time": float(t), "tau": float(u), "stage": int(g)}
                       for s, t, u, g in zip(run.frame_step, run.frame_time, run.frame_tau,
                                             run.frame_stage)],
            "stages": stages(run), "config": json.loads(run.config_json)}


def config_lines(cfg: dict) -> list:
    """The config a run was written with, one line per table (``[data]``, ``[model]``,
    ``[dynamics]``, ``[output]``, then any other) and every field of it as ``key = value``
    (TOML-like; an inline data array as its shape, e.g. ``X = <8 x 2 array>``)."""
    order = ["data", "model", "dynamics", "output"]
    tables = order + sorted(t for t in cfg if t not in order)
    out = []
    for t in tables:
        body = cfg.get(t)
        if not isinstance(body, dict):
            continue
        fields = [f"{k} = {_value(v)}" for k, v in sorted(body.items())]
        out.append(f"[{t}] " + "  ".join(fields))
    return out


def _value(v) -> str:
    if isinstance(v, list) and v and isinstance(v[0], list):
        return f"<{len(v)} x {len(v[0])} array>"
    if isinstance(v, list) and len(v) > 8:
        return f"<{len(v)} values>"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)                      # floats exactly, as the config holds them


def _planned_total(run) -> int:
    """The steps the run plans, as its own progress bar counts them
    (:meth:`solvers.schedule.Schedule.planned_total` of the stage under way; the reader's
    schedule ends that stage at its last observation, which is no plan)."""
    sch = run.schedule
    if not sch.auto or run.complete:
        return int(sch.total_steps)
    if not len(run.observables["risk"]["step"]):
        return sch.planned_total(0, 0)
    stage = int(run.stage[-1])
    return sch.planned_total(stage, sch.stage_bounds(stage)[0])


def _progress_line(run) -> str:
    """One line on how far a run has come: step of total, temperature, risk (chain 0's, and
    the range over the chains of a run of several), the residual drift (the stationarity
    observable, :func:`solvers.langevin.stationarity`: ``n max_j |mean_2(R_j) - mean_1(R_j)|``
    over the latter half of the stage so far)."""
    taus = run.taus
    total = _planned_total(run)
    obs = run.observables
    if not len(obs["risk"]["step"]):
        return f"step 0/{total}  waiting for the first observation"
    k = -1                              # the latest committed observation
    step = int(obs["risk"]["step"][k])
    tau = float(obs["tau"]["value"][k])
    stage = int(run.stage[k]) + 1
    risk = f"risk={float(obs['risk']['value'][k]):.4e}"
    if run.n_chains > 1:                # the chains step together: the same committed rows
        m = len(obs["risk"]["step"])
        rs = [float(c.observables["risk"]["value"][m - 1]) for c in run.chains()]
        risk += f" (chain 0; {run.n_chains} chains: {min(rs):.4e} to {max(rs):.4e})"
    return (f"step {step}/{total} ({100 * step / total:.0f}%)  tau={tau:.2e} "
            f"(temperature {stage}/{len(taus)})  {risk}  "
            f"residual drift={_drift_text(float(obs['stationarity']['value'][k]))}  "
            f"frames={run.n_frames}")


def _drift_text(x: float) -> str:
    """The residual drift of a progress line; ``–`` while the stage has fewer than 4
    observations (the statistic is NaN then, ``solvers.langevin``; the first line of a run
    read ``residual drift=nan``)."""
    import math
    return f"{x:.3g}" if math.isfinite(x) else "–"


#: Seconds ``--follow`` waits for a run file that does not exist yet (the run not started).
FOLLOW_WAIT = 60.0
#: Seconds a file that exists may stay unreadable as a run file before ``--follow`` gives up
#: with its reason (a ``.part`` is unreadable only for the moment it is being created or
#: renamed; a file that is no run file stays so).
FOLLOW_UNREADABLE = 10.0


def _wait_for(shown: str, part: Path, final: Path, wait: float, poll: float, out) -> None:
    """Wait up to ``wait`` seconds for ``part`` or ``final`` to exist, after one line naming
    ``shown`` (the path as typed); refuse it in one line (exit 2) when neither appears."""
    from meanfield.errors import RunFileError
    if part.exists() or final.exists():
        return
    also = "" if shown.endswith(".part") else f" (or {part.name})"
    print(f"waiting for {shown}{also} to appear", file=out, flush=True)
    deadline = time.monotonic() + wait
    while not (part.exists() or final.exists()):
        if time.monotonic() >= deadline:
            raise RunFileError(shown, "", f"no such file: it did not appear within {wait:g} s; "
                                          f"start the run first (meanfield run CONFIG -o "
                                          f"{final}) or check the path")
        time.sleep(poll)


def follow(path, interval=10.0, out=None, poll=None, wait=None) -> int:
    """Print the progress of the run written to ``path`` until it ends.

    Each read opens the file afresh as a SWMR reader and sees the rows committed by then.
    ``path`` may name the finished file or its ``.part``; when the writer renames the
    ``.part`` into place the finished file is read once more. While neither exists (the run
    has not started yet) it waits for one, ``wait`` seconds at most (default
    :data:`FOLLOW_WAIT`), after one line saying so.

    Returns
    -------
    int
        0 when the run completes; 1 when no process writes it any more and it is incomplete
        (interrupted or killed: continue with the same ``meanfield run`` command and
        ``--resume``).
    """
    from meanfield.errors import RunFileError
    from meanfield.store import open_run, writer_alive
    out = sys.stdout if out is None else out      # looked up now: the CLI guards its stdout
    shown = str(path)                   # every message names the path as the user typed it
    path = Path(path)
    final = path.with_name(path.name[:-len(".part")]) if path.name.endswith(".part") else path
    part = final.with_name(final.name + ".part")
    poll = min(interval, 1.0) if poll is None else poll
    _wait_for(shown, part, final, FOLLOW_WAIT if wait is None else wait, poll, out)
    last_line, last_print, stopped = None, 0.0, 0
    unreadable_since = None
    while True:
        target = part if part.exists() else final
        try:
            run = open_run(target)
        except RunFileError:
            if not (part.exists() or final.exists()):
                raise RunFileError(shown, "", "no such file any more (removed or moved "
                                              "away while followed)") from None
            now = time.monotonic()
            unreadable_since = now if unreadable_since is None else unreadable_since
            if now - unreadable_since > FOLLOW_UNREADABLE:
                raise                   # no run file: its reason, in one line
            time.sleep(poll)            # being created, or renamed between check and open
            continue
        unreadable_since = None
        line = _progress_line(run)
        now = time.monotonic()
        if run.complete:
            print(line, file=out, flush=True)
            print(f"complete: {final if final.exists() else target}", file=out, flush=True)
            return 0
        if line != last_line and now - last_print >= interval:
            print(line, file=out, flush=True)
            last_line, last_print = line, now
        if target == part and not writer_alive(part):
            stopped += 1                # twice in a row: not a writer between open and lock
            if stopped >= 2:
                print(line, file=out, flush=True)
                print(stopped_line(part), file=out, flush=True)
                return 1
        else:
            stopped = 0
        time.sleep(poll)


def _convergence_text(v: dict) -> str:
    """`` (R-hat 1.005, bulk/tail ESS per chain 271/408)`` of a stage's verdict (its numbers
    as ``report.md`` shows them; the reasons of a stage not stationary carry their own)."""
    K = max(1, int(v.get("n_chains") or 1))
    if v.get("rhat") is None or v.get("ess_bulk") is None or v.get("ess_tail") is None:
        return ""
    return (f" (R-hat {v['rhat']:.3f}, bulk/tail ESS per chain {v['ess_bulk'] / K:.0f}/"
            f"{v['ess_tail'] / K:.0f})")


def _not_a_checkpoint(path) -> None:
    """Refuse ``RUN.h5.ckpt`` (the checkpoint of an interrupted run, not an HDF5 run file) in
    one line naming the run file to inspect and how to continue the run."""
    from meanfield.errors import InputError
    from meanfield.store import RESUME_HINT
    p = Path(path)
    if not p.name.endswith(".ckpt") or not p.is_file():
        return
    part = p.with_name(p.name[:-len(".ckpt")] + ".part")
    what = "is the checkpoint of an interrupted run, not a run file: "
    if part.exists():
        raise InputError(str(path), "", f"{what}inspect its run file {part}; {RESUME_HINT}")
    raise InputError(str(path), "", f"{what}its run file {part} is missing, so the run cannot "
                                    "be resumed (start it over with --overwrite)")


def main(args) -> int:
    """Run ``meanfield inspect`` with the parsed ``args``; returns the exit code."""
    from meanfield.cli.analyze import _not_a_config
    from meanfield.errors import InputError
    from meanfield.store import no_frames_yet, open_run
    _not_a_config(args.run, then="inspect")
    _not_a_checkpoint(args.run)
    if args.follow:
        if not args.interval > 0:
            raise InputError("command line", "--interval", f"must be > 0, got {args.interval}")
        try:
            return follow(args.run, args.interval)
        except KeyboardInterrupt:
            return 130
    run = open_run(args.run)
    doc = summary(run)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    obs = run.observables
    print(f"run file      {run.path}")
    print(f"schema        {run.schema_version}   complete: {run.complete}")
    print(f"data          n={run.n} d={run.d}")
    chains = (f"  chains={run.n_chains} (independent systems; the verdicts judge them together)"
              if run.n_chains > 1 else "")
    print(f"particles     N={run.n_particles}  activation={run.activation}{chains}")
    print("config")
    for line in config_lines(json.loads(run.config_json)):
        print(f"  {line}")
    print(f"observations  {len(obs['risk']['step'])}")
    print(f"frames        {run.n_frames}")
    empty = no_frames_yet(run)          # what `meanfield analyze` refuses the file with
    if empty:
        print(f"  {run.path} {empty}")
    from solvers.integrators import integrator_named
    unit = integrator_named(run.integrator).step_unit   # "pass" for the exact sampler
    units = "passes" if unit == "pass" else "steps"
    for s, t, u in zip(run.frame_step, run.frame_time, run.frame_tau):
        sel = obs["risk"]["step"] == s
        risk = obs["risk"]["value"][sel]
        r = f"  risk={risk[0]:.4e}" if risk.size else ""
        when = f"  time={t:10.2f}" if unit == "step" else ""    # a pass is no time step
        print(f"  {unit}={int(s):>9d}{when}  tau={u:.2e}{r}")
    from analysis.stationarity import MOVE_OBSERVABLES  # loaded by summary() already
    print("stages")
    for st in doc["stages"]:
        v = st["stationarity"]
        verdict = ("stopped here, no process is writing the file (no verdict)"
                   if st["stopped"] else
                   "running (no verdict yet)" if st["running"] else
                   "no observations" if v is None else
                   "stationary" + _convergence_text(v) if st["stationary"]
                   else "NOT stationary: " + "; ".join(v["reasons"]))
        moves = "" if v is None else "".join(
            f"  {k}={v[k]:.3g}" for k in MOVE_OBSERVABLES if v.get(k) is not None)
        print(f"  tau={st['tau']:.2e}  {units}={st['steps']:>9d}{moves}  {verdict}")
    if any(st["stopped"] for st in doc["stages"]):
        print(stopped_line(run.path))
    return 0
