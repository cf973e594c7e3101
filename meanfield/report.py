"""The report of ``meanfield analyze``: the analysis of a run file
(:func:`analysis.run_analysis.analyze`) written as ``report.json``, ``report.md`` and PNG
figures. Never writes into the run file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from numpy.typing import ArrayLike

from analysis.references import (
    VERDICT_CONSISTENT,
    VERDICT_INCONSISTENT,
    VERDICT_TOO_FEW,
    VERDICT_WITHIN_STEP_BIAS,
    Z_CONSISTENT,
    verdict_text,
)
from analysis.run_analysis import RunAnalysis, analyze, count_text, upgrade_report
from analysis.snapshots import coldest
from analysis.time_average import MIN_TAU_SAMPLES
from meanfield import atomic
from meanfield import figures as plots
from meanfield.errors import InputError, RunFileError
from meanfield.store import no_frames_yet, open_run


class Report(dict):
    """The report of :func:`analyze_run`: the JSON document as a dict, with its tables as
    pandas DataFrames (:meth:`to_dataframe`)."""

    def to_dataframe(self, table: str = "ladder"):
        """One of the report's tables as a ``pandas.DataFrame``.

        Parameters
        ----------
        table : {"ladder", "rays", "kinks"}
            ``"ladder"``: one row per temperature (``tau, step, J, K, risk, ...``);
            ``"rays"``: one row per ray at each temperature's last snapshot (sign, weight,
            mass fraction, spread, certificate ``G``, pattern, direction ``v1..v{d+1}``);
            ``"kinks"``: one row per kink hyperplane (``offset``, unit normal ``n1..nd``, its
            rays and their signs of ``a``). See :mod:`meanfield.tidy`.

        Raises
        ------
        ValueError
            An unknown table name.
        """
        from meanfield.tidy import REPORT_TABLES
        if table not in REPORT_TABLES:
            raise ValueError(f"unknown table {table!r}; one of {', '.join(REPORT_TABLES)}")
        return REPORT_TABLES[table](self)


def analyze_run(path: str | os.PathLike, outdir: str | os.PathLike | None = None,
                figures: bool = True, *, reference: ArrayLike | Callable | None = None,
                w2: bool = True, references: bool = True, convex: bool | None = None,
                sensitivity: bool = True, fmt: str = "png", progress=False,
                max_regions: int | None = None, **ray_kw) -> Report:
    """Analyse every snapshot frame of a run file and its temperature ladder.

    The defaults are those of ``meanfield analyze`` (``w2``, ``references`` and
    ``sensitivity`` on; its ``--no-w2``, ``--no-references`` and ``--no-sensitivity`` are
    ``False`` here), so that the report of a call and of the command are the same. The exact
    references are the slow part (the Gibbs fixed point at each ``τ``, cached on disk,
    :mod:`analysis.refcache`): pass ``references=False`` for a quick look.

    Parameters
    ----------
    path : path-like
        The run file.
    outdir : path-like, optional
        Where ``report.json``, ``report.md`` and figures go (created). ``None``: write nothing.
    figures : bool
        Write the figures into ``outdir`` (:data:`FIGURES`).
    fmt : {"png", "pdf", "svg"}
        Their file format.
    reference : ndarray of shape (n,) or callable, optional
        Zero-temperature reference predictor on the training inputs (see :func:`analysis.run_analysis.ladder`).
    w2 : bool
        Compute ``W2`` between successive temperatures.
    references : bool
        Default ``True``. Compare with the exact references (THEORY §4–5): the Gibbs fixed point at each ``τ``
        (``d ≤ 2``), the convex ``τ → 0`` limit at the coldest ``τ`` (also used as
        ``reference`` when that is not given), and the matching of rays to its rays; adds the
        key ``references`` (see :func:`analysis.references.report_section`) and the convex
        counts per ``τ`` (``J_convex``, ``K_convex``, ``matched``; THEORY §6.4).
    convex : bool, optional
        The convex counts only, without the Gibbs references (default: ``references``).
    sensitivity : bool
        Default ``True``. Add ``sensitivity``: ``J`` and ``K`` of the coldest snapshot over a
        range of each threshold (THEORY §6.4).
    progress : bool or None
        Progress on stderr (:func:`meanfield.progress.progress_bar`; default none).
    max_regions : int, optional
        Limit on the regions the count of ``P`` may enumerate (default
        :data:`analysis.dichotomies.DEFAULT_MAX_REGIONS`; ``meanfield analyze --max-regions``).
    **ray_kw
        Passed to :func:`analysis.rays.find_rays`.

    Returns
    -------
    Report
        The report document (:meth:`analysis.run_analysis.RunAnalysis.as_dict`): ``run, d, n, P, cover, general_position, P_exact, P_tol_range, bound_2P_minus_1,
        bound_P_minus_1, complete, n_rays_by_tau, ladder, w2_to_previous, patterns,
        pattern_tolerance, theorem6, two_point, snapshots``. ``patterns`` and ``theorem6`` are
        those of the last snapshot (the lowest temperature); every snapshot has its own.

    Raises
    ------
    meanfield.errors.RunFileError
        The run file is missing, damaged or foreign, or holds no frame yet
        (:func:`meanfield.store.no_frames_yet`).
    analysis.dichotomies.TooManyRegions
        Counting ``P`` would exceed ``max_regions`` (a ``ValueError``; the command line
        reports it as bad input).
    """
    from analysis.dichotomies import DEFAULT_MAX_REGIONS
    from meanfield.progress import progress_bar
    run = open_run(path)
    empty = no_frames_yet(run)
    if empty:
        raise RunFileError(str(path), "", empty)
    n_stages = len({int(s) for s in run.frame_stage})      # one part per stage's pooled rays
    parts = n_stages + 1 + bool(references)
    if outdir is not None:      # the report files, and each figure: no work after 100 %
        parts += 1 + (len(plots.RUN_FIGURES) if figures else 0)
    with progress_bar(parts, "analyze", "part", enabled=progress) as bar:
        result = analyze(run, reference=reference, w2=w2, references=references,
                         convex=convex, sensitivity=sensitivity, progress=bar,
                         max_regions=DEFAULT_MAX_REGIONS if max_regions is None else max_regions,
                         **ray_kw)
        rep = Report(result.as_dict())
        if outdir is not None:
            write_report(rep, result, outdir, figures, fmt=fmt, run=run, progress=bar)
    return rep


#: The figures :func:`write_report` may write, by name (removed first, in every format, when
#: a report is rewritten): those of :data:`meanfield.figures.RUN_FIGURES`.
FIGURES = tuple(plots.RUN_FIGURES)
#: Their file formats.
FORMATS = ("png", "pdf", "svg")


def load_report(path: str | os.PathLike) -> dict:
    """Read a ``report.json`` written by ``meanfield analyze`` (any version), as the current
    document (:func:`analysis.run_analysis.upgrade_report`).

    Raises
    ------
    InputError
        Missing or unreadable file, not JSON, or a report version this one does not read
        (naming the file).
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(path), "", "no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(path), "", f"not a readable report.json ({exc})") from None
    if not isinstance(doc, dict):
        raise InputError(str(path), "", "not a report document (a JSON object)")
    try:
        return upgrade_report(doc)
    except ValueError as exc:
        raise InputError(str(path), "schema_version" if "schema_version" in str(exc)
                         else "ladder", str(exc)) from None


def write_report(rep: dict, result: RunAnalysis, outdir: str | os.PathLike,
                 figures: bool = True, fmt: str = "png", run=None, progress=None) -> None:
    """Write ``report.json`` (``rep``), ``report.md`` and the figures (:data:`FIGURES`, as
    ``fmt``) of ``result``; ``run`` (default: reopened from ``rep["run"]``) gives the
    particles. ``progress`` (a tqdm-like bar, optional) is told of each figure
    (``set_postfix(doing=...)`` before, ``update(1)`` after; one part per figure when
    ``figures``) and of the report files (one part)."""
    def tell(doing=None, done=0):
        if progress is not None:
            if doing:
                progress.set_postfix(doing=doing)
            if done:
                progress.update(done)
    if fmt not in FORMATS:
        raise ValueError(f"unknown figure format {fmt!r}; one of {', '.join(FORMATS)}")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in FIGURES:       # a rewritten report never sits next to an older run's figures
        for ext in FORMATS:
            (out / f"{stale}.{ext}").unlink(missing_ok=True)
    atomic.write_text(out / "report.json", json.dumps(rep, indent=1))
    figs = []
    if figures:
        run = run if run is not None or not result.frames else open_run(rep["run"])
        for name, figure in plots.RUN_FIGURES.items():
            tell(f"figure {name}.{fmt}")
            fig = figure.draw(rep, run) if result.frames else None
            if fig is not None:
                plots.save(fig, out / f"{name}.{fmt}")
                figs.append(f"{name}.{fmt}")
            tell(done=1)
    tell("report.md")
    atomic.write_text(out / "report.md", markdown(rep, figs))
    tell(done=1)


def _gibbs_text(row: dict) -> str:
    """The Gibbs counts of a ladder row, ``"J, K (matched)"``, or "—"."""
    if row.get("J_gibbs") is None:
        return "—"
    return f"{row['J_gibbs']}, {row['K_gibbs']} ({row.get('gibbs_matched')})"


def _fmt(x, spec=".3e"):
    return "—" if x is None else format(x, spec)


def _pattern_str(p):
    return "".join({1: "+", 0: "0", -1: "−"}[int(t)] for t in p)


def _ladder_table(rep) -> list[str]:
    """The ladder table's lines: a row per stage, and the convex ``τ → 0`` counts' row. A
    column of what was not computed (the references, ``W2``) is left out, not shown empty."""
    def w2(r):
        return None if r["w2_to_previous"] is None else \
            f"{r['w2_to_previous']:.3e} ({r['w2_method']})"

    # (header, cell of a stage, shown only where some stage has it)
    cols = [("τ", lambda r: f"{r['tau']:.2e}", None),
            (rep.get("step_unit", "step"), lambda r: f"{r['step']}", None),
            ("stationary", lambda r: {True: "yes", False: "**NO**", None: "—"}[
                r.get("stationary")], None),
            ("R̂ (worst observable)", _rhat_text, None),
            (_ess_header(rep["ladder"]), _ess_text, None),
            ("rays J", lambda r: count_text(r, "J"), None),
            ("hyperplanes K", lambda r: count_text(r, "K"), None),
            ("Gibbs J, K (matched)", _gibbs_text, "J_gibbs"),
            ("matched to τ → 0", lambda r: _fmt(r.get("matched"), "d"), "matched"),
            ("risk", lambda r: f"{r['risk']:.4e}", None),
            ("halo mass", lambda r: f"{r['halo_mass_fraction']:.3f}", None),
            ("W2 to previous τ", lambda r: w2(r) or "—", "w2_to_previous"),
            ("W2 of rays to previous τ", lambda r: _fmt(r["w2_rays_to_previous"]),
             "w2_rays_to_previous"),
            ("RMS \\|f − f_τ→0\\| on the data, last snapshot",
             lambda r: _fmt(r["dist_to_reference"]), "dist_to_reference")]
    cols = [c for c in cols
            if c[2] is None or any(r.get(c[2]) is not None for r in rep["ladder"])]
    L = ["| " + " | ".join(h for h, _, _ in cols) + " |", "|" + "---|" * len(cols)]
    L += ["| " + " | ".join(cell(r) for _, cell, _ in cols) + " |" for r in rep["ladder"]]
    if rep.get("convex_counts"):        # the τ → 0 limit: one row, not a column of every τ
        c = rep["convex_counts"]
        conv = {"τ": "τ → 0 (convex)", "rays J": f"{c['J']}", "hyperplanes K": f"{c['K']}"}
        L.append("| " + " | ".join(conv.get(h, "—") for h, _, _ in cols) + " |")
    return L


def markdown(rep, figs=()) -> str:
    """The Markdown report of :func:`analyze_run`'s result."""
    L = [f"# Ray report for `{rep['run']}`", ""]
    P = rep["P"]
    L.append(f"- data: n = {rep['n']} points in d = {rep['d']}")
    how = ("exact integer count" if rep["P_exact"] else
           "Cover's closed form, general position checked" if rep.get("P_closed_form") else
           f"same for any tolerance in [{rep['P_tol_range'][0]:.2g}, {rep['P_tol_range'][1]:.2g})")
    L.append(f"- P = {P} affine dichotomies ({how}); Cover's general-position value "
             f"{rep['cover']}, general position: {rep['general_position']}")
    L.append(f"- bounds on the number of rays: 2P−1 = {rep['bound_2P_minus_1']}, "
             f"P−1 = {rep['bound_P_minus_1']}")
    L.append(f"- run complete: {rep['complete']}")
    K = max((len(r.get("J_chains") or []) for r in rep["ladder"]), default=0)
    if K > 1:
        L.append(f"- chains: {K} independent particle systems (`dynamics.chains`); the "
                 "verdicts judge them together and the time averages (the Gibbs comparisons) "
                 "pool them; `J`, `K`, the rays and kinks tables, the sensitivity and "
                 "Theorem 6 are of every chain's frames pooled, with each chain's last "
                 "snapshot alone in `report.json` (`J_chains`, `K_chains`); the risk and halo "
                 "columns and the figures but the trajectory figure (every chain) are chain "
                 "0's")
    L += ["", "## Low-temperature limit", ""] + _ladder_table(rep)
    L += _stationarity_markdown(rep["ladder"], rep.get("step_unit", "step"))
    if any(r.get("replicas") for r in rep["ladder"]):
        L += ["", "Rays J and kink hyperplanes K of a stage are those of its stationary "
              "measure: the frames of the stage's second half, every chain, pooled, each "
              "particle weighted by its mass (docs/theory.md §6.1); in brackets the range of "
              "single snapshots' counts where it differs."]
    if any(r.get("J_gibbs") is not None for r in rep["ladder"]):
        L += ["", "Gibbs J, K: the rays of the exact mean-field Gibbs measure at the stage's τ "
              "(the local maxima of |G| at the reference's fixed point, each basin's mass "
              "under the same ray rule as the particles', docs/theory.md §6.7), and how many "
              "of the stage's rays match them one to one (same sign, within 0.2 rad)."]
        notes = [(r["tau"], r["gibbs_note"]) for r in rep["ladder"] if r.get("gibbs_note")]
        L += [f"- τ = {t:.2e}: {n}" for t, n in notes]
    if rep.get("convex_counts"):
        c = rep["convex_counts"]
        L += ["", f"τ → 0 (convex): rays of the convex τ → 0 reference with weight "
              f"|c_k| ≥ {c['floor']} Σ|c| (the ray mass floor) and their kink hyperplanes; "
              f"matched to τ → 0: measured rays paired one to one with them (same sign, within "
              f"0.2 rad)."]
    L += ["", "Snapshots (a frame of chain 0 counted alone, but a stage's last row: its "
          "stationary frames of every chain pooled, the ladder's J, K):", "", f"| τ | {rep.get('step_unit', 'step')} | risk | J | K | halo mass | thermal mass "
          "(clusters, Σ\\|c\\|) | threshold (chord) | plateau |",
          "|---|---|---|---|---|---|---|---|---|"]
    for s in rep["snapshots"]:
        t = s["thresholds"]
        hot = s.get("thermal_mass") or []
        hot_s = f"{len(hot)}, {sum(abs(h['weight']) for h in hot):.3g}" if hot else "—"
        if t.get("rule") == "basins":
            chord = plateau = "— (basins of \\|G\\|)"
        else:
            chord = f"{t['linkage_chord']:.3g}"
            plateau = f"[{t['plateau'][0]:.3g}, {t['plateau'][1]:.3g}]"
        L.append(f"| {s['tau']:.2e} | {s['step']} | {s['risk']:.4e} | {s['n_rays']} | "
                 f"{s['n_hyperplanes']} | {t['halo_mass_fraction']:.3f} | {hot_s} | "
                 f"{chord} | {plateau} |")
    if rep["snapshots"]:
        s = coldest(rep["snapshots"])
        t = s["thresholds"]
        L += ["", f"## Rays at τ = {s['tau']:.2e}", "",
              "| # | sign | weight c_k | mass frac | spread (rad) | G | cells | direction (w, b) | "
              "pattern |", "|---|---|---|---|---|---|---|---|---|"]
        for k, q in enumerate(s["rays"]):
            L.append(f"| {k} | {'+' if q['sign'] > 0 else '−'} | {q['weight']:.4f} | "
                     f"{q['mass_fraction']:.3f} | {q['spread']:.3f} | {_fmt(q['G'], '.3f')} | "
                     f"{q['n_cells']} | ({', '.join(f'{x:.3f}' for x in q['direction'])}) | "
                     f"{_pattern_str(q['pattern'])} |")
        halo = ("" if t.get("halo_ratio") is None else
                f"mean particle mass ≥ {t['halo_ratio']:g} × (d+1)τ/λ = "
                f"{t['halo_ratio'] * t['halo_baseline']:.3g}, ")
        cert = ("" if t.get("g_ray") is None else
                f"certificate −sign(a)G ≥ {t['g_ray']} at the ray's direction (G from the "
                f"{t['G_source']}; max|G| over the particles {_fmt(t['G_max'], '.4f')}), ")
        L += _thermal_markdown(s)
        gap = ("" if t.get("gap_threshold") is None else
               f"certificate gap 1 − |G| ≤ ε(τ) = κ(d+1)τ/(λ c_y) = {t['gap_threshold']:.3g} "
               f"(κ = {t['thermal_gap']:g}, c_y = {t['weight_scale']:.3g}; the larger of the "
               f"gap of G and the gap its mean particle mass implies), ")
        if t.get("rule") == "basins":
            L += ["", f"Rule: the basins of the exact local maxima of |G| (docs/theory.md "
                  f"§6.1), a basin's particles a ray when they "
                  f"hold ≥ {t['min_mass_frac']} of the total mass, {halo}{cert}{gap}at least "
                  f"{t['min_particles']} particles; a ray's direction, spread and pattern are "
                  f"its particles' (mass-weighted mean; pattern zeros within "
                  f"{t['pattern_angle_tol']} rad or straddled by ≥ {t['pattern_mass_tol']} of "
                  f"the ray mass)."]
        else:
            L += ["", f"Thresholds: linkage {t['linkage_chord']:.3g} (plateau "
                  f"[{t['plateau'][0]:.3g}, {t['plateau'][1]:.3g}]), ray mass ≥ "
                  f"{t['min_mass_frac']} of the total, {halo}{cert}{gap}at least "
                  f"{t['min_particles']} particles, spread ≤ {t['max_spread']} rad, particle "
                  f"mass ≥ {t['light_frac']} × weighted median; pattern zeros within "
                  f"{t['pattern_angle_tol']} rad or straddled by ≥ {t['pattern_mass_tol']} of "
                  f"the ray mass."]
        if s.get("small"):
            L.append(f"Heavy clusters with fewer than {t['min_particles']} particles (not "
                     f"counted): {len(s['small'])}.")
        if s["rejected"]:
            L.append(f"Heavy clusters rejected by the certificate: {len(s['rejected'])} "
                     f"(mass {sum(r['mass_fraction'] for r in s['rejected']):.3f}).")
        if s.get("merged_across_data_points"):
            L.append("Rays joined across a data point's cell boundary (one ray whose kink lies "
                     "on a data point): " + "; ".join(
                         f"ray {m['ray']} from {m['parts']} clusters at data point(s) "
                         f"{m['data_points']}" for m in s["merged_across_data_points"]) + ".")
        if s["cell_conflicts"]:
            L.append(f"Rays sharing an activation cell (not stationary?): {s['cell_conflicts']}")
        L += ["", "## Kink hyperplanes {x : normal·x = offset}", ""]
        for kk in s["kinks"]:
            L.append(f"- normal ({', '.join(f'{x:.3f}' for x in kk['normal'])}), "
                     f"offset {kk['offset']:.4f} (rays {kk['rays']})")
        if rep.get("sensitivity"):
            L += _sensitivity_markdown(rep["sensitivity"])
        th = rep["theorem6"]
        L += ["", "## [LJM26] Theorem 6 on the ternary patterns", ""]
        if th.get("status", "checked") != "checked":
            why = ("the coldest stage is not stationary (see above); measured: "
                   + _measured_text(th.get("measured")) if th["status"] == "not stationary"
                   else "no rays (J = 0): nothing to check")
            L.append(f"- {th['status']}: {why}")
        else:
            if not th.get("decided", True):
                L += [f"**Not decided:** {th['undecided_reason']}; the checks below describe the "
                      f"clusters found, not a verdict.", ""]
            L += [
                  f"- J = {th['J']} rays; J ≤ 2P−1 = {th['bound_2P_minus_1']}: "
                  f"{th['within_2P_minus_1']}; J ≤ P−1 = {th['bound_P_minus_1']}: "
                  f"{th['within_P_minus_1']}",
                  f"- patterns distinct: {th['distinct']}"
                  + ("" if th["distinct"] else f" (equal: {th['duplicates']})"),
                  f"- antichain under degeneration: {th['antichain']}"
                  + ("" if th["antichain"] else f" (t_k ⪯ t_l for [k, l] in {th['comparable']})")
                  + _conflict_note(th),
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
        L += _references_markdown(rep["references"], rep.get("run") or "RUN.h5")
    for f in figs:
        L += ["", f"![{f}]({f})", "", plots.RUN_FIGURES[f.rsplit(".", 1)[0]].caption]
    basins = bool(rep["snapshots"]) and coldest(rep["snapshots"])["thresholds"].get(
        "rule") == "basins"
    tests = ("it holds enough mass, its mean particle mass is well above the free-particle "
             "baseline (d+1)τ/λ, it passes the certificate G of the stage's time-averaged "
             "residuals, its certificate gap 1 − |G| is at most ε(τ) ∝ τ (else it is thermal "
             "mass, whose weight vanishes with τ; docs/theory.md §6.5) and it holds enough "
             "particles")
    if basins:
        method = ("Method: each particle heavier than the baseline (d+1)τ/λ goes to the basin "
                  "of a local maximum of |G| (G of the stage's time-averaged residuals), the "
                  "partition the exact Gibbs measure's rays get; a basin is a ray when " + tests
                  + " (docs/theory.md §6.1, §6.7).")
    else:
        method = ("Method: directions (w, b)/|(w, b)| of one sign of a are linked by single "
                  "linkage on the mutual-reachability chord distance; a cluster is a ray when "
                  + tests + "; rays of one sign cut by a data point's cell boundary are joined "
                  "(§6.6); the linkage threshold is the middle of the widest plateau of the ray "
                  "count (analysis/rays.py).")
    L += ["", method + " Two rays share a kink hyperplane only when they split the training "
          "inputs alike and their hyperplanes coincide within a fraction of the data's spread "
          "(analysis/kinks.py; docs/theory.md)."]
    return "\n".join(L) + "\n"


def _conflict_note(th) -> str:
    """The cell conflicts next to the Theorem 6 verdict: failing pairs whose rays share an
    activation cell are a split ray or an unsettled stage, not a counterexample."""
    conf = th.get("cell_conflicts") or []
    if not conf:
        return "; rays sharing an activation cell: none"
    hit = th.get("conflicts_in_failures") or []
    return (f"; rays sharing an activation cell: {conf}"
            + (f" (the failing pairs {hit} among them: not a verdict)" if hit else ""))


def _thermal_markdown(s) -> list:
    """The thermal-mass table of a snapshot: concentrations refused as rays because their
    certificate gap stays away from 0 (docs/theory.md §6.5)."""
    hot = s.get("thermal_mass") or []
    if not hot:
        return []
    L = ["", "Thermal mass (not rays: weight ∝ τ by the radial law, docs/theory.md §6.5):", "",
         "| sign | weight | mass frac | particles | spread (rad) | G | gap 1−\\|G\\| | ε(τ) | "
         "radial-law weight | reason | direction (w, b) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for h in hot:
        L.append(f"| {'+' if h['sign'] > 0 else '−'} | {h['weight']:.3g} | "
                 f"{h['mass_fraction']:.3f} | {h['n_particles']} | {h['spread']:.3f} | "
                 f"{_fmt(h['G'], '.3f')} | {_fmt(h['gap'], '.3g')} | "
                 f"{_fmt(h['gap_threshold'], '.3g')} | {_fmt(h['radial_weight'], '.3g')} | "
                 f"{h['reason']} | ({', '.join(f'{x:.3f}' for x in h['direction'])}) |")
    return L


def _rhat_text(row) -> str:
    """The stage's split-R̂ for the ladder table: the value and its observable, "(within one
    chain)" when the run has one chain (the weaker test); "—" without a verdict."""
    v = row.get("stationarity") or {}
    if v.get("rhat") is None:
        return "—"
    one = " within one chain" if v.get("n_chains", 1) == 1 else ""
    return f"{v['rhat']:.3f} ({v.get('rhat_worst', '')}{one})"


def _ess_header(rows) -> str:
    """The ladder table's ESS header: which ESS its cells give (:func:`_ess_text`), from the
    chains of the rows' verdicts."""
    K = max((int((r.get("stationarity") or {}).get("n_chains") or 1) for r in rows), default=1)
    if K > 1:
        return f"ESS bulk, tail per chain (all {K} chains together)"
    return "ESS bulk, tail (one chain)"


def _ess_text(row) -> str:
    """The stage's smallest bulk and tail ESS for the ladder table, as its header says
    (:func:`_ess_header`): with several chains per chain (ArviZ's ESS of all chains together
    over their number) and then the total in parentheses; "—" without a verdict."""
    v = row.get("stationarity") or {}
    if v.get("ess_bulk") is None or v.get("ess_tail") is None:
        return "—"
    K = max(1, int(v.get("n_chains", 1)))
    total = f"{v['ess_bulk']:.0f}, {v['ess_tail']:.0f}"
    if K == 1:
        return total
    return f"{v['ess_bulk'] / K:.0f}, {v['ess_tail'] / K:.0f} ({total})"


def _stationarity_markdown(rows, unit: str = "step") -> list:
    """Verdict lines under the ladder table (docs/theory.md §2.5), each with the share of its
    mass whose direction the sampler did not move (:func:`analysis.frozen.frozen_note`)."""
    from analysis.frozen import frozen_note
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
                f"η h {_fmt(v['eta_lambda_max'], '.3f')}, ESS of the MCSE {v['ess']:.0f}"
                + (" per chain (the smallest chain's)" if v.get("n_chains", 1) > 1 else "")
                + _moves_text(v))
        if v["stationary"]:
            L.append(f"- τ = {r['tau']:.2e}: stationary ({nums})")
        else:
            L.append(f"- τ = {r['tau']:.2e}: **not stationary**: {'; '.join(v['reasons'])} "
                     f"({nums}); J, K and Theorem 6 of this stage are not results")
        note = frozen_note(r.get("frozen"), unit)
        if note:
            L[-1] += f". Frozen: {note}"
    return L


def _moves_text(v) -> str:
    """``integrator = "mala"``: its acceptance rates (second half of the stage); else ''."""
    parts = [f"{label} {v[k]:.3g}" for k, label in
             (("acceptance", "acceptance"), ("jump_acceptance", "jump acceptance"),
              ("cell_exchange", "cell exchange per unit time"),
              ("radial_acceptance", "radial acceptance"),
              ("exchange_acceptance", "exchange acceptance")) if v.get(k) is not None]
    return (", " + ", ".join(parts)) if parts else ""


def _measured_text(measured) -> str:
    """The Theorem 6 checks of a stage that is not stationary as ``name yes/no`` items (a
    dict of booleans and numbers), not Python's repr."""
    if not isinstance(measured, dict):
        return "—" if measured is None else str(measured)

    def one(v):
        if isinstance(v, bool):
            return "yes" if v else "no"
        return "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
    return ", ".join(f"{k.replace('_', ' ')} {one(v)}" for k, v in measured.items())


def _sensitivity_markdown(sens) -> list:
    L = ["", f"## Sensitivity of J and K to the thresholds (τ = {sens['tau']:.2e})", "",
         f"Defaults give J = {sens['default']['J']}, K = {sens['default']['K']}; "
         + ("every threshold row below agrees." if sens["robust"] else
            "**some thresholds change the counts.**"), "",
         "| threshold | value | J | K |", "|---|---|---|---|"]
    for r in sens["rows"]:
        L.append(f"| {r['threshold']} | {r['value']:.4g} | {r['J']} | {r['K']} |")
    L += ["", "min_mass_frac: ray mass floor; halo_ratio: mean particle mass over (d+1)τ/λ; "
          "particle_halo: particles lighter than this × (d+1)τ/λ are halo; "
          "g_ray: certificate level; min_particles; max_spread: compactness (rad); "
          "linkage_chord: fixed linkage threshold "
          "(chord); rel_tol: kink tolerance (fraction of the data's spread); "
          "pattern_angle_tol, pattern_mass_tol: the tolerances of a pattern's 0 entries (they "
          "also decide joins across data points and kink identity); thermal_gap: κ of the "
          "certificate-gap threshold ε(τ) = κ(d+1)τ/(λ c_y); convex_floor: the "
          "weight floor of the convex reference's rays (J, K there are the reference's)."]
    return L


def _z_cell(z) -> str:
    """A ``z`` of the Gibbs table: "—" where there is none (no MCSE: ``nan``, or an old report
    without it)."""
    return "—" if z is None or z != z else format(z, ".2g")


def _references_markdown(refs, run_path: str = "RUN.h5") -> list:
    L = ["", "## Exact references (docs/theory.md §4–5)", ""]
    if "skipped" in refs:
        return L + [f"Skipped: {refs['skipped']}."]
    L += ["Time-averaged particle predictor on the training points (last half of each stage) "
          "against the Gibbs fixed point at the same τ:", "",
          "| τ | max abs diff | rms diff | max std. error | combined error | step-bias "
          "allowance | z | z without the allowance | verdict | reference max abs G |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for g in refs["gibbs"]:
        if "skipped" in g:
            L.append(f"| {g['tau']:.2e} | skipped: {g['skipped']} | | | | | | | | |")
        else:
            L.append(f"| {g['tau']:.2e} | {g['max_abs_diff']:.3e} | {g['rms_diff']:.3e} | "
                     f"{g['max_stderr']:.1e} | {g['combined_error']:.1e} | "
                     f"{g['step_bias_allowance']:.1e} | {_z_cell(g.get('z'))} | "
                     f"{_z_cell(g.get('z_without_allowance'))} | "
                     f"{verdict_text(g, run_path)} | {g['max_abs_G']:.6f} |")
    L += ["", f"Combined error: sqrt(MCSE² + the reference's quad_error²) per point (the "
          f"largest shown); z: the largest (|diff| − step-bias allowance)₊ / combined error "
          f"over the points; z without the allowance: the largest |diff| / combined error. "
          f"\"{VERDICT_CONSISTENT}\" when z without the allowance ≤ {Z_CONSISTENT:g}; "
          f"\"{VERDICT_WITHIN_STEP_BIAS}\" when only the allowance, a bound on the step's "
          f"bias and not a measurement of it, brings z there; \"{VERDICT_INCONSISTENT}\" "
          f"beyond both; \"{VERDICT_TOO_FEW}\" when the MCSE is no estimate (fewer than "
          f"{MIN_TAU_SAMPLES} observations per chain in the window, or an MCSE of zero or not "
          f"finite at a point), with no z (docs/theory.md §2.4). The allowance has no term for "
          f"the O(1/N) width bias of the N-particle law (docs/theory.md §2.3): with the exact "
          f"sampler (`integrator = \"mala\"`, no step bias) an inconsistent row gives its "
          f"estimate from the particles of the stage's frames, an estimate and not a test; "
          f"`--extrapolate-n` with a run at another N removes it."]
    c = refs["convex"]
    L += ["", f"Against the τ → 0 convex reference at τ = {c['tau']:.2e}: max abs diff "
          f"{c['max_abs_diff']:.3e}, rms {c['rms_diff']:.3e} (reference: {c['n_rays']} rays, "
          f"max |G| = {c['max_abs_G']:.6f}, duality gap {c['duality_gap']:.1e}). This distance "
          "is of the time-averaged predictor; the ladder table's last column is of the last "
          "snapshot alone, hence two different values."]
    r = refs.get("rays")
    if r:
        L += ["", f"Rays at the coldest τ matched one-to-one to the convex reference's rays: "
              f"{len(r['pairs'])} pairs, largest angle {_fmt(r['max_angle'], '.3g')} rad, largest "
              f"weight error {_fmt(r['max_weight_error'], '.3g')}; unmatched measured rays "
              f"{r['unmatched_measured']}, unmatched reference rays {r['unmatched_reference']}."]
    return L
