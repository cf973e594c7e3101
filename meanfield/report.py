"""Analysis of a run file: per snapshot rays, kink hyperplanes, ternary patterns and the
[LJM26] Theorem 6 checks; ``P`` of the data; across the temperature ladder ``J(τ)``, ``K(τ)``,
risk, ``W2`` to the previous temperature and the distance to a zero-temperature reference; the
[LJM26] Proposition 7 comparison for symmetric two-point data. Written as ``report.json``,
``report.md`` and PNG figures. Never writes into the run file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from analysis import ternary as pat
from analysis import transport, two_point
from analysis.dichotomies import count_dichotomies
from analysis.rays import find_rays
from analysis.references import convex_reference, report_section
from meanfield import atomic
from meanfield import figures as plots
from meanfield.store import open_run
from solvers import numpy_model as model
from solvers.geometry import kink_hyperplanes


def _obs_at(run, name, step):
    o = run.observables[name]
    sel = np.nonzero(o["step"] == step)[0]
    return o["value"][sel[0]] if sel.size else None


def analyze_frame(run, k, **ray_kw) -> dict:
    """Rays, kinks, patterns and fit of frame ``k`` of a :class:`meanfield.store.Run`.

    ``ray_kw`` go to :func:`analysis.rays.find_rays` (the run's ``y`` and ``lam`` are passed,
    so the certificate filters are on).

    Returns
    -------
    dict
        Keys ``tau, step, risk, n_rays, n_hyperplanes, rays, kinks, f_train, thresholds,
        rejected, cell_conflicts, patterns, theorem6`` and the private objects ``_rays``
        (RayResult), ``_kinks`` and ``_theta``.
    """
    theta = run.frame(k)
    lam = float(run.config["dynamics"]["lam"])
    res = find_rays(theta, run.X, y=run.y, lam=lam, **ray_kw)
    kinks = kink_hyperplanes([q.direction for q in res.rays]) if res.rays else []
    step = int(run.frame_step[k])
    risk = _obs_at(run, "risk", step)
    f_train = model.predict(theta, run.X)
    pats = [q.pattern for q in res.rays]
    return {"tau": float(run.frame_tau[k]), "step": step,
            "risk": float(risk) if risk is not None else float(np.mean((f_train - run.y) ** 2)),
            "n_rays": len(res.rays), "n_hyperplanes": len(kinks),
            "rays": [q.as_dict() for q in res.rays], "kinks": [kk.as_dict() for kk in kinks],
            "f_train": [float(v) for v in f_train], "thresholds": res.thresholds_used(),
            "rejected": res.rejected, "cell_conflicts": res.cell_conflicts,
            "patterns": [[int(t) for t in p] for p in pats],
            "theorem6": pat.theorem6(pats),
            "_rays": res, "_kinks": kinks, "_theta": theta}


def _public(snap):
    return {k: v for k, v in snap.items() if not k.startswith("_")}


def _reference_values(reference, X):
    """The zero-temperature reference predictor on the training inputs, or None."""
    if reference is None:
        return None
    if callable(reference):
        return np.asarray(reference(X), dtype=float).ravel()
    ref = np.asarray(reference, dtype=float).ravel()
    if ref.shape[0] != X.shape[0]:
        raise ValueError(f"reference has {ref.shape[0]} values, the data {X.shape[0]} points")
    return ref


def ladder(run, snaps, reference=None, w2: bool = True, **w2_kw) -> list:
    """One row per temperature of the ladder (the last snapshot at each ``τ``).

    Parameters
    ----------
    run : meanfield.store.Run
    snaps : list of dict
        :func:`analyze_frame` results of every frame.
    reference : ndarray of shape (n,) or callable, optional
        Zero-temperature reference predictor on the training inputs (or a function of ``X``).
        **Hook:** the convex ``τ → 0`` solver (``solvers/convex.py``, THEORY §4) is meant to
        supply it; without it the distance is ``None``.
    w2 : bool
        Compute ``W2`` to the previous temperature (exact up to 10⁴ particles, else sliced;
        :mod:`analysis.transport`).

    Returns
    -------
    list of dict
        ``tau, step, J, K, risk, halo_mass_fraction, w2_to_previous, w2_method,
        w2_rays_to_previous, dist_to_reference``.
    """
    ref = _reference_values(reference, run.X)
    last = {}
    for i, s in enumerate(snaps):
        last[s["tau"]] = i                   # frames are in ladder order; keep the last per τ
    order = sorted(last.values())
    rows, prev = [], None
    for i in order:
        s = snaps[i]
        row = {"tau": s["tau"], "step": s["step"], "J": s["n_rays"], "K": s["n_hyperplanes"],
               "risk": s["risk"], "halo_mass_fraction": s["thresholds"]["halo_mass_fraction"],
               "w2_to_previous": None, "w2_method": None, "w2_rays_to_previous": None,
               "dist_to_reference": None}
        if prev is not None and w2:
            d = transport.w2_snapshots(snaps[prev]["_theta"], s["_theta"], **w2_kw)
            row["w2_to_previous"], row["w2_method"] = d["w2"], d["method"]
            ra, rb = snaps[prev]["_rays"].rays, s["_rays"].rays
            if ra and rb:
                row["w2_rays_to_previous"] = transport.w2_rays(
                    [q.direction for q in ra], [q.weight for q in ra],
                    [q.direction for q in rb], [q.weight for q in rb])["w2"]
        if ref is not None:
            row["dist_to_reference"] = float(np.sqrt(np.mean((np.asarray(s["f_train"]) - ref)
                                                             ** 2)))
        rows.append(row)
        prev = i
    return rows


def analyze_run(path: str | os.PathLike, outdir: str | os.PathLike | None = None,
                figures: bool = True, *, reference: ArrayLike | Callable | None = None,
                w2: bool = True, references: bool = False, **ray_kw) -> dict:
    """Analyse every snapshot frame of a run file and its temperature ladder.

    Parameters
    ----------
    path : path-like
        The run file.
    outdir : path-like, optional
        Where ``report.json``, ``report.md`` and figures go (created). ``None``: write nothing.
    figures : bool
        Write PNG figures into ``outdir``.
    reference : ndarray of shape (n,) or callable, optional
        Zero-temperature reference predictor on the training inputs (see :func:`ladder`).
    w2 : bool
        Compute ``W2`` between successive temperatures.
    references : bool
        Compare with the exact references (THEORY §4–5): the Gibbs fixed point at each ``τ``
        (``d ≤ 2``), the convex ``τ → 0`` limit at the coldest ``τ`` (also used as
        ``reference`` when that is not given), and the matching of rays to its rays; adds the
        key ``references`` (see :func:`analysis.references.report_section`).
    **ray_kw
        Passed to :func:`analysis.rays.find_rays`.

    Returns
    -------
    dict
        ``run, d, n, P, cover, general_position, P_exact, P_tol_range, bound_2P_minus_1,
        bound_P_minus_1, complete, n_rays_by_tau, ladder, w2_to_previous, patterns,
        pattern_tolerance, theorem6, two_point, snapshots``. ``patterns`` and ``theorem6`` are
        those of the last snapshot (the lowest temperature); every snapshot has its own.

    Raises
    ------
    meanfield.errors.RunFileError
        The run file is missing, damaged or foreign.
    """
    run = open_run(path)
    dc = count_dichotomies(run.X)
    if dc.ambiguous:
        dc = count_dichotomies(run.X, exact=True)
    snaps = [analyze_frame(run, k, **ray_kw) for k in range(run.n_frames)]
    P = dc.P
    cvx = None
    if references and reference is None and P <= 20000:
        cvx = convex_reference(run.X, run.y, float(run.config["dynamics"]["lam"]))
        reference = cvx.f_train
    rows = ladder(run, snaps, reference, w2)
    lam = float(run.config["dynamics"]["lam"])
    last = snaps[-1] if snaps else None
    tp = None
    if two_point.detect(run.X, run.y) is not None:
        tp = [{"tau": snaps[i]["tau"], **two_point.compare(run.X, run.y, lam, snaps[i]["_kinks"],
                                                          snaps[i]["f_train"])}
              for i in sorted({s["tau"]: i for i, s in enumerate(snaps)}.values())]
    th6 = None
    if last is not None:
        th6 = {**last["theorem6"], **pat.bounds(P, last["n_rays"])}
    rep = {"run": str(path), "d": run.d, "n": run.n, "P": P, "cover": dc.cover,
           "general_position": dc.general_position, "P_exact": dc.exact,
           "P_tol_range": None if dc.tol_range is None else list(dc.tol_range),
           "bound_2P_minus_1": 2 * P - 1, "bound_P_minus_1": P - 1,
           "complete": run.complete,
           "n_rays_by_tau": [{"tau": s["tau"], "step": s["step"], "n_rays": s["n_rays"],
                              "n_hyperplanes": s["n_hyperplanes"]} for s in snaps],
           "ladder": rows,
           "w2_to_previous": [{"tau": r["tau"], "w2": r["w2_to_previous"],
                               "method": r["w2_method"], "w2_rays": r["w2_rays_to_previous"]}
                              for r in rows[1:]],
           "patterns": last["patterns"] if last else [],
           "pattern_tolerance": (last["_rays"].pattern_tol.as_dict() if last
                                 else pat.PatternTolerance().as_dict()),
           "theorem6": th6, "two_point": tp,
           "snapshots": [_public(s) for s in snaps]}
    from analysis.stationarity import annotate_report, run_verdicts
    annotate_report(rep, run_verdicts(run), run.config["dynamics"]["taus"])
    if references:
        rep["references"] = report_section(run, rep)
    if outdir is not None:
        write_report(rep, snaps, run, outdir, figures)
    return rep


#: The figures :func:`write_report` may write (removed first when a report is rewritten).
FIGURES = ("predictor.png", "directions.png", "ladder.png")


def write_report(rep, snaps, run, outdir, figures=True):
    """Write ``report.json``, ``report.md`` and figures for :func:`analyze_run`'s result."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in FIGURES:       # a rewritten report never sits next to an older run's figures
        (out / stale).unlink(missing_ok=True)
    atomic.write_text(out / "report.json", json.dumps(rep, indent=1))
    figs = []
    if figures and snaps:
        last = snaps[-1]
        per_tau = {s["tau"]: s for s in snaps}          # the last snapshot at each τ
        preds = [(f"τ = {s['tau']:.0e}",
                  (lambda th: (lambda Xg: model.predict(th, Xg)))(s["_theta"]), s["_kinks"])
                 for s in per_tau.values()]
        if plots.plot_predictor(out / "predictor.png", run.X, run.y, preds):
            figs.append("predictor.png")
        if plots.plot_directions(out / "directions.png", last["_theta"], last["_rays"].rays):
            figs.append("directions.png")
        rows = rep["ladder"]
        if len(rows) > 1:
            series = {"rays J": [r["J_measured"] for r in rows],
                      "hyperplanes K": [r["K_measured"] for r in rows],
                      "risk (1/n)Σ(f−y)²": [r["risk"] for r in rows]}
            if any(r["w2_to_previous"] is not None for r in rows):
                series["W2(ρ_τ, ρ_previous τ)"] = [np.nan if r["w2_to_previous"] is None
                                              else r["w2_to_previous"] for r in rows]
            if any(r["dist_to_reference"] is not None for r in rows):
                series["RMS |f − f_convex| on data"] = [np.nan if r["dist_to_reference"] is None
                                                       else r["dist_to_reference"] for r in rows]
            plots.plot_ladder(out / "ladder.png", [r["tau"] for r in rows], series,
                              not_stationary=[r.get("stationary") is False for r in rows])
            figs.append("ladder.png")
    atomic.write_text(out / "report.md", markdown(rep, figs))


def _fmt(x, spec=".3e"):
    return "—" if x is None else format(x, spec)


def _pattern_str(p):
    return "".join({1: "+", 0: "0", -1: "−"}[int(t)] for t in p)


def markdown(rep, figs=()) -> str:
    """The Markdown report of :func:`analyze_run`'s result."""
    L = [f"# Ray report for `{rep['run']}`", ""]
    P = rep["P"]
    L.append(f"- data: n = {rep['n']} points in d = {rep['d']}")
    how = ("exact integer count" if rep["P_exact"] else
           f"same for any tolerance in [{rep['P_tol_range'][0]:.2g}, {rep['P_tol_range'][1]:.2g})")
    L.append(f"- P = {P} affine dichotomies ({how}); Cover's general-position value "
             f"{rep['cover']}, general position: {rep['general_position']}")
    L.append(f"- bounds on the number of rays: 2P−1 = {rep['bound_2P_minus_1']}, "
             f"P−1 = {rep['bound_P_minus_1']}")
    L.append(f"- run complete: {rep['complete']}")
    L += ["", "## Low-temperature limit", "",
          "| τ | step | stationary | rays J | hyperplanes K | risk | halo mass | "
          "W2 to previous τ | W2 of rays to previous τ | distance to τ=0 reference |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rep["ladder"]:
        w2 = "—" if r["w2_to_previous"] is None else f"{r['w2_to_previous']:.3e} ({r['w2_method']})"
        st = {True: "yes", False: "**NO**", None: "—"}[r.get("stationary")]
        L.append(f"| {r['tau']:.2e} | {r['step']} | {st} | {r['J']} | {r['K']} | "
                 f"{r['risk']:.4e} | {r['halo_mass_fraction']:.3f} | {w2} | "
                 f"{_fmt(r['w2_rays_to_previous'])} | {_fmt(r['dist_to_reference'])} |")
    L += _stationarity_markdown(rep["ladder"])
    L += ["", "Snapshots:", "", "| τ | step | risk | J | K | halo mass | threshold (chord) | "
          "plateau |", "|---|---|---|---|---|---|---|---|"]
    for s in rep["snapshots"]:
        t = s["thresholds"]
        L.append(f"| {s['tau']:.2e} | {s['step']} | {s['risk']:.4e} | {s['n_rays']} | "
                 f"{s['n_hyperplanes']} | {t['halo_mass_fraction']:.3f} | "
                 f"{t['linkage_chord']:.3g} | [{t['plateau'][0]:.3g}, {t['plateau'][1]:.3g}] |")
    if rep["snapshots"]:
        s = rep["snapshots"][-1]
        t = s["thresholds"]
        L += ["", f"## Rays at τ = {s['tau']:.2e}", "",
              "| # | sign | weight c_k | mass frac | spread (rad) | G | cells | direction (w, b) | "
              "pattern |", "|---|---|---|---|---|---|---|---|---|"]
        for k, q in enumerate(s["rays"]):
            L.append(f"| {k} | {'+' if q['sign'] > 0 else '−'} | {q['weight']:.4f} | "
                     f"{q['mass_fraction']:.3f} | {q['spread']:.3f} | {_fmt(q['G'], '.3f')} | "
                     f"{q['n_cells']} | ({', '.join(f'{x:.3f}' for x in q['direction'])}) | "
                     f"{_pattern_str(q['pattern'])} |")
        L += ["", f"Thresholds: linkage {t['linkage_chord']:.3g} (plateau "
              f"[{t['plateau'][0]:.3g}, {t['plateau'][1]:.3g}]), ray mass ≥ {t['min_mass_frac']}, "
              f"spread ≤ {t['max_spread']} rad, particle mass ≥ {t['light_frac']} × weighted "
              f"median, certificate −sign(a)G ≥ {t['g_particle']} (particles) and ≥ "
              f"{t['g_ray']} (rays) × max|G| = {_fmt(t['G_max'], '.4f')}; pattern zeros within "
              f"{t['pattern_angle_tol']} rad or straddled by ≥ {t['pattern_mass_tol']} of the "
              f"ray mass."]
        if s["rejected"]:
            L.append(f"Heavy clusters rejected by the certificate: {len(s['rejected'])} "
                     f"(mass {sum(r['mass_fraction'] for r in s['rejected']):.3f}).")
        if s["cell_conflicts"]:
            L.append(f"Rays sharing an activation cell (not stationary?): {s['cell_conflicts']}")
        L += ["", "## Kink hyperplanes {x : normal·x = offset}", ""]
        for kk in s["kinks"]:
            L.append(f"- normal ({', '.join(f'{x:.3f}' for x in kk['normal'])}), "
                     f"offset {kk['offset']:.4f} (rays {kk['rays']})")
        th = rep["theorem6"]
        L += ["", "## [LJM26] Theorem 6 on the ternary patterns", ""]
        if th.get("status", "checked") != "checked":
            why = ("the coldest stage is not stationary (see above); measured: "
                   f"{th.get('measured')}" if th["status"] == "not stationary"
                   else "no rays (J = 0): nothing to check")
            L.append(f"- {th['status']}: {why}")
        else:
            L += [f"- J = {th['J']} rays; J ≤ 2P−1 = {th['bound_2P_minus_1']}: "
                  f"{th['within_2P_minus_1']}; J ≤ P−1 = {th['bound_P_minus_1']}: "
                  f"{th['within_P_minus_1']}",
                  f"- patterns distinct: {th['distinct']}"
                  + ("" if th["distinct"] else f" (equal: {th['duplicates']})"),
                  f"- antichain under degeneration: {th['antichain']}"
                  + ("" if th["antichain"] else
                     f" (t_k ⪯ t_l for [k, l] in {th['comparable']})"),
                  f"- at most two per binary pattern: {th['at_most_two_per_binary']} (max "
                  f"{th['max_per_binary']}"
                  + ("" if th["at_most_two_per_binary"] else
                     f", rays {th['max_per_binary_rays']} below "
                     f"{_pattern_str(th['binary_witness'])}") + ")"]
    if rep.get("two_point"):
        L += ["", "## [LJM26] Proposition 7 (symmetric two-point data)", "",
              "| τ | labels | s | predicted kinks ⟨x̄,x⟩=c | measured | off-axis | "
              "predicted φ | measured φ |", "|---|---|---|---|---|---|---|---|"]
        for r in rep["two_point"]:
            p, m = r["predicted"], r["measured"]
            L.append(f"| {r['tau']:.2e} | {r['labels']} | {r['s']:.3f} | "
                     f"{', '.join(f'{c:.3f}' for c in p['kinks']) or 'none'}"
                     f"{' (tie)' if p['ambiguous'] else ''} | "
                     f"{', '.join(f'{c:.3f}' for c in m['kinks']) or 'none'} | {m['off_axis']} | "
                     f"{p['phi']:.4f} | {m['phi']:.4f} |")
    if rep.get("references"):
        L += _references_markdown(rep["references"])
    for f in figs:
        L += ["", f"![{f}]({f})"]
    L += ["", "Method: particles are grouped by sign of a and activation cell on the training "
          "set, the thermal halo is removed by particle mass and the certificate G, directions "
          "(w, b)/|(w, b)| are linked by single linkage on the mutual-reachability chord distance "
          "and the threshold is the middle of the widest plateau of the ray count "
          "(analysis/rays.py)."]
    return "\n".join(L) + "\n"


def _stationarity_markdown(rows) -> list:
    """Verdict lines under the ladder table (docs/theory.md §2.2)."""
    L = ["", "Stationarity of each stage (second half: autocorrelation-aware standard error of "
         "the time-averaged predictor, early/late drift, step parity, stability number η h, "
         "ray-weight drift between snapshots):", ""]
    for r in rows:
        v = r.get("stationarity")
        if v is None:
            L.append(f"- τ = {r['tau']:.2e}: no observations to judge")
            continue
        nums = (f"MCSE {_fmt(v['mcse'], '.1e')}, drift z {_fmt(v['drift_z'], '.2f')}, "
                f"parity z {_fmt(v['parity_z'], '.2f')} (threshold {v['z_crit']:.2f}), "
                f"η h {_fmt(v['eta_lambda_max'], '.3f')}, ESS {v['ess']:.0f}")
        if v["stationary"]:
            L.append(f"- τ = {r['tau']:.2e}: stationary ({nums})")
        else:
            L.append(f"- τ = {r['tau']:.2e}: **not stationary**: {'; '.join(v['reasons'])} "
                     f"({nums}); J, K and Theorem 6 of this stage are not results")
    return L


def _references_markdown(refs) -> list:
    L = ["", "## Exact references (THEORY §4–5)", ""]
    if "skipped" in refs:
        return L + [f"Skipped: {refs['skipped']}."]
    L += ["Time-averaged particle predictor on the training points (last half of each stage) "
          "against the Gibbs fixed point at the same τ:", "",
          "| τ | max abs diff | rms diff | max std. error | reference max abs G | seconds |",
          "|---|---|---|---|---|---|"]
    for g in refs["gibbs"]:
        if "skipped" in g:
            L.append(f"| {g['tau']:.2e} | skipped: {g['skipped']} | | | | |")
        else:
            L.append(f"| {g['tau']:.2e} | {g['max_abs_diff']:.3e} | {g['rms_diff']:.3e} | "
                     f"{g['max_stderr']:.1e} | {g['max_abs_G']:.6f} | {g['seconds']} |")
    c = refs["convex"]
    L += ["", f"Against the τ → 0 convex reference at τ = {c['tau']:.2e}: max abs diff "
          f"{c['max_abs_diff']:.3e}, rms {c['rms_diff']:.3e} (reference: {c['n_rays']} rays, "
          f"max |G| = {c['max_abs_G']:.6f}, duality gap {c['duality_gap']:.1e})."]
    r = refs.get("rays")
    if r:
        L += ["", f"Rays at the coldest τ matched one-to-one to the convex reference's rays: "
              f"{len(r['pairs'])} pairs, largest angle {_fmt(r['max_angle'], '.3g')} rad, largest "
              f"weight error {_fmt(r['max_weight_error'], '.3g')}; unmatched measured rays "
              f"{r['unmatched_measured']}, unmatched reference rays {r['unmatched_reference']}."]
    return L
