"""Analysis of a run file: rays, kink hyperplanes and ``P`` per snapshot, written as
``report.json``, ``report.md`` and PNG figures. Never writes into the run file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from analysis.dichotomies import count_dichotomies
from analysis.kinks import kink_hyperplanes
from analysis.rays import find_rays
from meanfield import model


def _obs_at(run, name, step):
    o = run.observables[name]
    sel = np.nonzero(o["step"] == step)[0]
    return o["value"][sel[0]] if sel.size else None


def analyze_frame(run, k, **ray_kw) -> dict:
    """Rays, kinks and fit of frame ``k`` of a :class:`meanfield.store.Run`.

    Returns a dict with keys ``tau, step, risk, n_rays, n_hyperplanes, rays, kinks, f_train,
    thresholds`` and the private objects ``_rays`` (RayResult), ``_kinks`` and ``_theta``.
    """
    theta = run.frame(k)
    res = find_rays(theta, run.X, **ray_kw)
    kinks = kink_hyperplanes([q.direction for q in res.rays]) if res.rays else []
    step = int(run.frame_step[k])
    risk = _obs_at(run, "risk", step)
    f_train = model.predict(theta, run.X)
    return {"tau": float(run.frame_tau[k]), "step": step,
            "risk": float(risk) if risk is not None else float(np.mean((f_train - run.y) ** 2)),
            "n_rays": len(res.rays), "n_hyperplanes": len(kinks),
            "rays": [q.as_dict() for q in res.rays], "kinks": [kk.as_dict() for kk in kinks],
            "f_train": [float(v) for v in f_train], "thresholds": res.thresholds_used(),
            "_rays": res, "_kinks": kinks, "_theta": theta}


def _public(snap):
    return {k: v for k, v in snap.items() if not k.startswith("_")}


def analyze_run(path, outdir=None, figures: bool = True, **ray_kw) -> dict:
    """Analyse every snapshot frame of a run file.

    Parameters
    ----------
    path : path-like
        The run file.
    outdir : path-like, optional
        Where ``report.json``, ``report.md`` and figures go (created). ``None``: write nothing.
    figures : bool
        Write PNG figures into ``outdir``.

    Returns
    -------
    dict
        ``{"run", "d", "n", "P", "cover", "bound_2P_minus_1", "bound_P_minus_1",
        "general_position", "n_rays_by_tau", "snapshots": [...]}``.

    Raises
    ------
    meanfield.errors.RunFileError
        The run file is missing, damaged or foreign.
    """
    from meanfield.store import open_run
    run = open_run(path)
    dc = count_dichotomies(run.X)
    snaps = [analyze_frame(run, k, **ray_kw) for k in range(run.n_frames)]
    P = dc.P
    rep = {"run": str(path), "d": run.d, "n": run.n, "P": P, "cover": dc.cover,
           "bound_2P_minus_1": (2 * P - 1) if P is not None else None,
           "bound_P_minus_1": (P - 1) if P is not None else None,
           "general_position": dc.general_position, "complete": run.complete,
           "n_rays_by_tau": [{"tau": s["tau"], "step": s["step"], "n_rays": s["n_rays"],
                              "n_hyperplanes": s["n_hyperplanes"]} for s in snaps],
           "snapshots": [_public(s) for s in snaps]}
    if outdir is not None:
        write_report(rep, snaps, run, outdir, figures)
    return rep


def write_report(rep, snaps, run, outdir, figures=True):
    """Write ``report.json``, ``report.md`` and figures for :func:`analyze_run`'s result."""
    from analysis import plots
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(rep, indent=1))
    os.replace(tmp, out / "report.json")
    figs = []
    if figures and snaps:
        last = snaps[-1]
        preds = [(f"τ={s['tau']:.0e}", (lambda th: (lambda Xg: model.predict(th, Xg)))(s["_theta"]))
                 for s in snaps]
        if plots.plot_predictor(out / "predictor.png", run.X, run.y, preds, last["_kinks"],
                                title=f"predictor at τ={last['tau']:.1e} with kink lines"):
            figs.append("predictor.png")
        if plots.plot_directions(out / "directions.png", last["_theta"], last["_rays"].rays,
                                 title=None or ""):
            figs.append("directions.png")
        if len(snaps) > 1:
            plots.plot_ladder(out / "ladder.png", [s["tau"] for s in snaps],
                              {"rays J": [s["n_rays"] for s in snaps],
                               "hyperplanes K": [s["n_hyperplanes"] for s in snaps],
                               "risk": [s["risk"] for s in snaps]})
            figs.append("ladder.png")
    (out / "report.md").write_text(markdown(rep, figs))


def markdown(rep, figs=()) -> str:
    """The Markdown report of :func:`analyze_run`'s result."""
    L = [f"# Ray report for `{rep['run']}`", ""]
    P = rep["P"]
    gp = rep["general_position"]
    L.append(f"- data: n = {rep['n']} points in d = {rep['d']}")
    if P is not None:
        L.append(f"- P = {P} affine dichotomies ({'general position: Cover' if gp else 'exact count'}); "
                 f"bounds 2P−1 = {rep['bound_2P_minus_1']}, P−1 = {rep['bound_P_minus_1']}")
    else:
        L.append(f"- P: not computed (data not in general position; Cover's value {rep['cover']} "
                 f"is an upper bound)")
    L.append(f"- run complete: {rep['complete']}")
    L += ["", "| τ | step | risk | rays J | hyperplanes K | halo mass | threshold (chord) |",
          "|---|---|---|---|---|---|---|"]
    for s in rep["snapshots"]:
        t = s["thresholds"]
        L.append(f"| {s['tau']:.2e} | {s['step']} | {s['risk']:.4e} | {s['n_rays']} | "
                 f"{s['n_hyperplanes']} | {t['halo_mass_fraction']:.3f} | {t['linkage_chord']:.3g} |")
    if rep["snapshots"]:
        s = rep["snapshots"][-1]
        L += ["", f"## Rays at τ = {s['tau']:.2e}", "",
              "| # | sign | weight c_k | mass frac | spread (rad) | direction (w, b) | pattern |",
              "|---|---|---|---|---|---|---|"]
        for k, q in enumerate(s["rays"]):
            pat = "".join({1: "+", 0: "0", -1: "−"}[t] for t in q["pattern"])
            L.append(f"| {k} | {'+' if q['sign'] > 0 else '−'} | {q['weight']:.4f} | "
                     f"{q['mass_fraction']:.3f} | {q['spread']:.3f} | "
                     f"({', '.join(f'{x:.3f}' for x in q['direction'])}) | {pat} |")
        L += ["", "## Kink hyperplanes {x : normal·x = offset}", ""]
        for kk in s["kinks"]:
            L.append(f"- normal ({', '.join(f'{x:.3f}' for x in kk['normal'])}), "
                     f"offset {kk['offset']:.4f} (rays {kk['rays']})")
    for f in figs:
        L += ["", f"![{f}]({f})"]
    L += ["", "Method: rays = single-linkage clusters of directions (w, b)/|(w, b)| per sign of a, "
          "threshold at the middle of the widest plateau of the ray count; clusters below the "
          "mass filter are the thermal halo (see docs/theory.md)."]
    return "\n".join(L) + "\n"
