"""Aggregated analysis of a study directory (``meanfield analyze STUDY_DIR``).

For every finished job, a per-run summary (:func:`run_summary`) gives, per stage of the
ladder (its index: a ladder may visit a temperature twice), the risk, the number of rays ``J`` and of kink hyperplanes ``K`` (THEORY §6). The study
analysis groups the runs by their axis values, treats ``dynamics.seed`` as repetitions (mean and
spread over seeds) and ``model.n_particles`` as the width:

* ``table``: per parameter point (all axes but the seed) and stage (with its ``τ``): number
  of seeds, mean and sample standard deviation of the risk, ``J``, ``K`` and ``W_2`` to the
  widest run;
* ``width``: ``W_2`` between the last particles of a stage of width ``N`` and of the widest
  run of the study with the same other axis values (same seed), and the slope of
  ``log W_2`` against ``log N`` per parameter point and stage.

For i.i.d. samples of a fixed law in ``D`` dimensions, ``E W_2 ~ N^{-1/4}`` for ``D < 4``
and ``N^{-1/D}`` for ``D > 4`` (Fournier & Guillin, PTRF 162, 2015), while measures
concentrated on few rays approach the ``N^{-1/2}`` of propagation of chaos. The fitted slope is
reported as measured; it is not forced to ``-1/2``.

Only run files are read; nothing is written into them.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.transport import w2_snapshots
from meanfield import atomic, report
from meanfield import figures as figures_
from meanfield.errors import RunFileError, StudyError
from meanfield.store import open_run
from meanfield.sweep import manifest

SEED_AXIS = "dynamics.seed"
WIDTH_AXIS = "model.n_particles"
#: Fraction of a stage over which the risk is time-averaged (its last half).
RISK_WINDOW = 0.5


# --- per-run summaries: the single coupling to the per-run analysis -------------------------

def _per_run_analysis():
    """The per-run analysis (:func:`meanfield.report.analyze_run` without the exact
    references and the threshold sensitivity: the summary reads ``J``, ``K`` and the bound
    only); tests replace it."""
    return functools.partial(report.analyze_run, references=False, sensitivity=False)


def _observable_summary(run) -> dict:
    """Per-stage risk (time average over the last :data:`RISK_WINDOW` of the stage, pooled
    over the run's chains) and the index of the stage's last snapshot frame, from the run file
    alone."""
    from analysis.time_average import chains_of
    taus = run.taus
    steps = run.observables["risk"]["step"]
    risk_v = np.stack([c.observables["risk"]["value"] for c in chains_of(run)])   # (K, M)
    risk, frames = [], []
    for s in range(len(taus)):
        cut, hi = run.schedule.last_part(s, RISK_WINDOW)
        sel = (steps > cut) & (steps <= hi)
        risk.append(float(np.mean(risk_v[:, sel])) if np.any(sel) else float("nan"))
        last = run.last_frame(s)
        frames.append(-1 if last is None else last)
    n = len(taus)
    return {"taus": taus, "risk": risk, "n_rays": [float("nan")] * n,
            "n_hyperplanes": [float("nan")] * n, "frames": frames, "bound_2P_minus_1": None,
            "source": "observables", "n_chains": int(run.n_chains),
            "chains_agree": [None] * n, "stationary": [None] * n}


def _jk_from_report(rep: dict, n_stages: int) -> tuple[list, list]:
    """``J`` and ``K`` per stage from a per-run report: the last snapshot of each stage
    (``rep["snapshots"] = [{"stage", "step", "tau", "n_rays", "n_hyperplanes"}]``, in ladder
    order)."""
    from analysis.snapshots import last_of_stages
    J = [float("nan")] * n_stages
    K = [float("nan")] * n_stages
    for snap in last_of_stages(rep.get("snapshots", []) or []):
        i = snap["stage"]
        if 0 <= i < n_stages:
            if snap.get("n_rays") is not None:
                J[i] = float(snap["n_rays"])
            if snap.get("n_hyperplanes") is not None:
                K[i] = float(snap["n_hyperplanes"])
    return J, K


def _ladder_field(rep: dict, n_stages: int, key: str) -> list:
    """Field ``key`` of each stage's ladder row of a per-run report (``None`` where the row
    or the field is missing), e.g. ``"stationary"`` or ``"chains_agree"`` (``None`` for one
    chain)."""
    out: list = [None] * n_stages
    for row in rep.get("ladder", []) or []:
        i = row.get("stage")
        if i is not None and 0 <= i < n_stages:
            out[i] = row.get(key)
    return out


def _stage_item(summ: dict, key: str, i: int):
    """Item ``i`` of the per-stage list ``summ[key]``; ``None`` where a summary has no such
    list (a custom ``summarize``) or it is shorter."""
    items = summ.get(key) or []
    return items[i] if i < len(items) else None


def run_summary(path) -> dict:
    """Per-run summary used by the study analysis.

    This is the one place that couples the study analysis to the per-run analysis: the risk
    and the snapshot frames come from the run file's observables; ``J`` (rays) and ``K`` (kink
    hyperplanes) come from ``meanfield.report.analyze_run(path)`` when that function exists and
    are ``nan`` otherwise.

    Parameters
    ----------
    path : path-like
        A complete run file.

    Returns
    -------
    dict
        ``{"taus": [τ per stage], "risk": [...], "n_rays": [...], "n_hyperplanes": [...],
        "frames": [last frame index per stage or -1], "bound_2P_minus_1": int or None,
        "source": "observables" | "meanfield.report", "n_chains": K, "chains_agree": [bool
        or None per stage], "stationary": [bool or None per stage]}``; the lists are aligned
        with the ladder: item ``s`` is stage ``s``. ``J`` and ``K`` are chain 0's (as in ``meanfield analyze``), the risk is pooled
        over the chains; ``chains_agree`` says whether every chain's last snapshot of the
        stage has chain 0's ``J`` and ``K`` (``None``: one chain, or no per-run analysis);
        ``stationary`` is the report's stationarity verdict of the stage (``None`` without a
        per-run analysis): a ``J``, ``K`` of a stage that is not stationary is not a result.

    Raises
    ------
    meanfield.errors.RunFileError
        Unreadable run file.
    """
    run = open_run(path)
    out = _observable_summary(run)
    analyze_run = _per_run_analysis()
    if analyze_run is not None:
        rep = analyze_run(str(path))
        out["n_rays"], out["n_hyperplanes"] = _jk_from_report(rep, len(out["taus"]))
        out["chains_agree"] = _ladder_field(rep, len(out["taus"]), "chains_agree")
        out["stationary"] = _ladder_field(rep, len(out["taus"]), "stationary")
        out["bound_2P_minus_1"] = rep.get("bound_2P_minus_1")
        out["source"] = "meanfield.report"
    return out


# --- study directory ------------------------------------------------------------------------

def is_study_dir(path) -> bool:
    """Whether ``path`` is a study directory (holds a meanfield study ``manifest.json``)."""
    p = Path(path)
    if not (p.is_dir() and manifest.manifest_path(p).is_file()):
        return False
    try:
        manifest.read(p)
    except StudyError:
        return False
    return True


def _collect(study_dir, summarize):
    """Manifest and ``[(job entry, summary or None)]`` for every job of the study."""
    doc = manifest.read(study_dir)
    records = []
    for entry in sorted(doc["jobs"], key=lambda j: j["index"]):
        summ = None
        path = Path(study_dir) / entry["run_file"]
        if entry.get("status") == "done" and path.exists():
            try:
                summ = summarize(path)
            except RunFileError:
                summ = None
        records.append((entry, summ))
    return doc, records


def _key(values: dict, drop) -> tuple:
    return tuple((k, json.dumps(v, sort_keys=True)) for k, v in values.items() if k not in drop)


def _stats(xs) -> dict:
    x = np.asarray([v for v in xs if v is not None and np.isfinite(v)], dtype=float)
    if x.size == 0:
        return {"mean": float("nan"), "std": float("nan"), "n": 0}
    return {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if x.size > 1 else float("nan"),
            "n": int(x.size)}


def _frame(path, k):
    return open_run(path).frame(k)


def _width_distances(study_dir, records, axes, w2_kwargs):
    """``{(job id, stage): (W_2, method, N_ref)}`` against the widest run with the same other
    axis values (the same stage at the same temperature)."""
    if WIDTH_AXIS not in axes or len(axes[WIDTH_AXIS]) < 2:
        return {}
    n_max = max(axes[WIDTH_AXIS])
    ref = {}
    for entry, summ in records:
        if summ is not None and entry["axis_values"][WIDTH_AXIS] == n_max:
            ref[_key(entry["axis_values"], {WIDTH_AXIS})] = (entry, summ)
    out = {}
    for entry, summ in records:
        if summ is None or entry["axis_values"][WIDTH_AXIS] == n_max:
            continue
        partner = ref.get(_key(entry["axis_values"], {WIDTH_AXIS}))
        if partner is None:
            continue
        pe, ps = partner
        for i, tau in enumerate(summ["taus"]):
            if i >= len(ps["taus"]) or ps["taus"][i] != tau:
                continue
            k1, k2 = summ["frames"][i], ps["frames"][i]
            if k1 < 0 or k2 < 0:
                continue
            X = _frame(Path(study_dir) / entry["run_file"], k1)
            Y = _frame(Path(study_dir) / pe["run_file"], k2)
            res = w2_snapshots(X, Y, **w2_kwargs)
            val, method = res["w2"], res["method"]
            out[(entry["id"], i)] = (val, method, n_max)
    return out


def _slope(ns, ys) -> float:
    ns, ys = np.asarray(ns, float), np.asarray(ys, float)
    ok = np.isfinite(ys) & (ys > 0)
    if ok.sum() < 2 or len(set(ns[ok])) < 2:
        return float("nan")
    return float(np.polyfit(np.log(ns[ok]), np.log(ys[ok]), 1)[0])


def analyze_study(study_dir: str | os.PathLike, *, summarize: Callable | None = None,
                  w2: bool = True, **w2_kwargs) -> dict:
    """Aggregate a study's runs into per-axis tables.

    Parameters
    ----------
    study_dir : path-like
        A study directory (see :func:`is_study_dir`).
    summarize : callable(path) -> dict, optional
        Per-run summary (default :func:`run_summary`).
    w2 : bool
        Compute ``W_2`` between widths (needs the particles of the snapshot frames).
    **w2_kwargs
        Passed to :func:`analysis.transport.w2_snapshots` (``max_exact``, ``n_projections``).

    Returns
    -------
    dict
        ``{"study_dir", "axes", "seed_axis", "width_axis", "jobs": {status: count},
        "runs": [{"id", "axis_values", "taus", "risk", "n_rays", "n_hyperplanes",
        "source"}], "table": [{<axis values but the seed>, "stage", "tau", "n_seeds",
        "risk_mean", "risk_std", "J_mean", "J_std", "K_mean", "K_std", "w2_mean", "w2_std",
        "bound_2P_minus_1", "runs_chains_disagree", "runs_stationary"}],
        "width": [{<axis values but seed and width>, "stage", "tau", "n_particles": [...],
        "w2_mean": [...], "w2_std": [...], "reference_n_particles", "method", "slope"}]}``;
        ``nan`` marks what is unknown (``J``/``K`` without a per-run analysis).

    Raises
    ------
    meanfield.errors.StudyError
        Not a study directory.
    """
    summarize = summarize or run_summary
    doc, records = _collect(study_dir, summarize)
    axes = doc.get("axes", {})
    counts = {s: 0 for s in ("pending", "running", "done", "failed")}
    for entry, _ in records:
        counts[entry.get("status", "pending")] = counts.get(entry.get("status", "pending"), 0) + 1
    dists = _width_distances(study_dir, records, axes, w2_kwargs) if w2 else {}

    runs = []
    groups: OrderedDict[tuple, dict] = OrderedDict()
    for entry, summ in records:
        if summ is None:
            continue
        runs.append({"id": entry["id"], "axis_values": entry["axis_values"],
                     **{k: summ.get(k) for k in ("taus", "risk", "n_rays", "n_hyperplanes",
                                                 "bound_2P_minus_1", "source", "n_chains",
                                                 "chains_agree", "stationary")}})
        params = {k: v for k, v in entry["axis_values"].items() if k != SEED_AXIS}
        for i, tau in enumerate(summ["taus"]):      # item i is stage i
            g = groups.setdefault((_key(params, ()), i, tau),
                                  {"params": params, "stage": i, "tau": tau, "risk": [], "J": [],
                                   "K": [], "w2": [], "bound": None, "disagree": None,
                                   "stationary": None})
            g["risk"].append(summ["risk"][i])
            g["J"].append(summ["n_rays"][i])
            g["K"].append(summ["n_hyperplanes"][i])
            agree, verdict = (_stage_item(summ, k, i) for k in ("chains_agree", "stationary"))
            if agree is not None:
                g["disagree"] = (g["disagree"] or 0) + (not agree)
            if verdict is not None:
                g["stationary"] = (g["stationary"] or 0) + bool(verdict)
            if summ.get("bound_2P_minus_1") is not None:
                g["bound"] = summ["bound_2P_minus_1"]
            if (entry["id"], i) in dists:
                g["w2"].append(dists[(entry["id"], i)][0])
    table = []
    for g in groups.values():
        row = dict(g["params"])
        row["stage"], row["tau"] = g["stage"], g["tau"]
        rs = _stats(g["risk"])
        row["n_seeds"] = rs["n"]
        for name in ("risk", "J", "K", "w2"):
            st = _stats(g[name])
            row[f"{name}_mean"], row[f"{name}_std"] = st["mean"], st["std"]
        row["bound_2P_minus_1"] = g["bound"]
        row["runs_chains_disagree"] = g["disagree"]
        row["runs_stationary"] = g["stationary"]
        table.append(row)

    width = []
    if dists:
        n_ref = max(axes[WIDTH_AXIS])
        methods = sorted({m for _, m, _ in dists.values()})
        wgroups: OrderedDict[tuple, dict] = OrderedDict()
        for row in table:
            if WIDTH_AXIS not in row or row[WIDTH_AXIS] == n_ref:
                continue
            params = {k: v for k, v in row.items()
                      if k in axes and k not in (SEED_AXIS, WIDTH_AXIS)}
            g = wgroups.setdefault((_key(params, ()), row["stage"], row["tau"]),
                                   {**params, "stage": row["stage"], "tau": row["tau"],
                                    "n_particles": [], "w2_mean": [], "w2_std": []})
            g["n_particles"].append(row[WIDTH_AXIS])
            g["w2_mean"].append(row["w2_mean"])
            g["w2_std"].append(row["w2_std"])
        for g in wgroups.values():
            g["reference_n_particles"] = n_ref
            g["method"] = "/".join(methods)
            g["slope"] = _slope(g["n_particles"], g["w2_mean"])
            width.append(g)

    return {"study_dir": str(study_dir), "axes": axes,
            "seed_axis": SEED_AXIS if SEED_AXIS in axes else None,
            "width_axis": WIDTH_AXIS if WIDTH_AXIS in axes else None,
            "jobs": counts, "runs": runs, "table": table, "width": width}


# --- arrays for scripting -------------------------------------------------------------------

@dataclass
class StudyArrays:
    """Per-run results laid out on the study grid.

    Attributes
    ----------
    axes : dict
        Axis name -> list of values (the grid coordinates, in order).
    shape : tuple of int
        Grid shape, one entry per axis.
    stages : ndarray of int, shape (T,)
        The ladder stage of each of the ``T`` positions: the union over the runs of their
        ``(stage, τ)`` pairs, by stage, then by descending ``τ`` (one position per stage when
        every run has the same ladder; a temperature visited twice is two positions).
    taus : ndarray of shape (T,)
        The temperature of each position.
    status : ndarray of str, shape ``shape``
    run_files : ndarray of str, shape ``shape``
    risk, n_rays, n_hyperplanes : ndarray of shape ``shape + (T,)``
        ``nan`` where a run is not done, lacks that stage or the quantity is unknown.
    """

    axes: dict
    shape: tuple
    stages: np.ndarray
    taus: np.ndarray
    status: np.ndarray
    run_files: np.ndarray
    risk: np.ndarray
    n_rays: np.ndarray
    n_hyperplanes: np.ndarray


def study_arrays(study_dir, *, summarize=None) -> StudyArrays:
    """Load a study's per-run summaries as arrays over its grid (see :class:`StudyArrays`)."""
    summarize = summarize or run_summary
    doc, records = _collect(study_dir, summarize)
    axes = doc.get("axes", {})
    shape = tuple(len(v) for v in axes.values())
    places = sorted({(i, t) for _, s in records if s for i, t in enumerate(s["taus"])},
                    key=lambda p: (p[0], -p[1]))
    T = len(places)
    pos = {p: i for i, p in enumerate(places)}
    n = len(records)
    status = np.empty(n, dtype=object)
    files = np.empty(n, dtype=object)
    arrs = {k: np.full((n, T), np.nan) for k in ("risk", "n_rays", "n_hyperplanes")}
    for entry, summ in records:
        i = int(entry["index"])
        status[i] = entry.get("status")
        files[i] = str(Path(study_dir) / entry["run_file"])
        if summ is None:
            continue
        for s, tau in enumerate(summ["taus"]):
            for k in arrs:
                arrs[k][i, pos[(s, tau)]] = summ[k][s]
    return StudyArrays(axes=axes, shape=shape,
                       stages=np.asarray([p[0] for p in places], dtype=np.int64),
                       taus=np.asarray([p[1] for p in places], dtype=float),
                       status=status.astype(str).reshape(shape),
                       run_files=files.astype(str).reshape(shape),
                       **{k: v.reshape(shape + (T,)) for k, v in arrs.items()})


# --- output: JSON, Markdown, figures --------------------------------------------------------

def _jsonable(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    return obj


def to_json(result: dict) -> str:
    """The analysis as JSON (``nan`` -> ``null``)."""
    return json.dumps(_jsonable(result), indent=1)


def _fmt(m, s=float("nan")) -> str:
    if m is None or not np.isfinite(m):
        return "—"
    txt = f"{m:.4g}"
    return txt + (f" ± {s:.2g}" if s is not None and np.isfinite(s) else "")


def format_markdown(result: dict) -> str:
    """Markdown tables: jobs, the per-axis table and the width dependence of ``W_2``."""
    axes = [a for a in result["axes"] if a != SEED_AXIS]
    c = result["jobs"]
    lines = [f"# Study {result['study_dir']}", "",
             f"Jobs: {c.get('done', 0)} done, {c.get('failed', 0)} failed, "
             f"{c.get('pending', 0) + c.get('running', 0)} not finished. "
             + (f"Mean ± sample std over `{SEED_AXIS}`." if result["seed_axis"] else
                "One seed per point (no spread)."), ""]
    head = axes + ["stage", "tau", "seeds", "risk", "J (rays)", "K (hyperplanes)"]
    has_verdict = any(r.get("runs_stationary") is not None for r in result["table"])
    if has_verdict:
        head.append("stationary runs")
    has_w2 = any(np.isfinite(r.get("w2_mean", float("nan"))) for r in result["table"])
    has_bound = any(r.get("bound_2P_minus_1") is not None for r in result["table"])
    if has_bound:
        head.append("2P-1")
    if has_w2:
        head.append("W2 to widest")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["table"]:
        cells = [json.dumps(r[a]) for a in axes] + [str(r["stage"]), f"{r['tau']:.3g}",
                                                     str(r["n_seeds"]),
                                                     _fmt(r["risk_mean"], r["risk_std"]),
                                                     _fmt(r["J_mean"], r["J_std"]),
                                                     _fmt(r["K_mean"], r["K_std"])]
        if has_verdict:
            v = r.get("runs_stationary")
            cells.append("—" if v is None else f"{v} of {r['n_seeds']}")
        if has_bound:
            b = r.get("bound_2P_minus_1")
            cells.append("—" if b is None else str(b))
        if has_w2:
            cells.append(_fmt(r["w2_mean"], r["w2_std"]))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"risk: time average over the last {RISK_WINDOW:.0%} of each stage (pooled over "
                  "a run's chains), not a snapshot's value."]
    if has_verdict and any(r.get("runs_stationary") is not None
                           and r["runs_stationary"] < r["n_seeds"] for r in result["table"]):
        lines.append("Where a stage is not stationary in every run, its `J` and `K` are not "
                     "results: `meanfield analyze RUN.h5` gives each run's verdict and why.")
    chains = sorted({int(r.get("n_chains") or 1) for r in result["runs"]})
    if chains and chains != [1]:
        bad = [r for r in result["table"] if r.get("runs_chains_disagree")]
        lines += ["", f"Runs of {', '.join(map(str, chains))} chains: `J` and `K` are chain "
                      "0's of each run, the risk is pooled over its chains; "
                  + ("the chains of every run agree on `J` and `K` at every stage."
                     if not bad else "the chains disagree on `J` or `K` at "
                     + "; ".join(f"stage {r['stage']} (tau {r['tau']:.3g}"
                                 + "".join(f", {a} {json.dumps(r[a])}" for a in axes)
                                 + f": {r['runs_chains_disagree']} of {r['n_seeds']} runs)"
                                 for r in bad) + ".")]
    if result["width"]:
        lines += ["", f"W2 between width N and the widest run (N = "
                      f"{result['width'][0]['reference_n_particles']}), same seed; slope of "
                      f"log W2 against log N (mean-field: shrinks with N):", ""]
        other = [a for a in axes if a != WIDTH_AXIS]
        head = other + ["stage", "tau", "N", "W2", "slope", "method"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for g in result["width"]:
            cells = [json.dumps(g[a]) for a in other] + [
                str(g["stage"]), f"{g['tau']:.3g}", ", ".join(str(n) for n in g["n_particles"]),
                ", ".join(_fmt(m) for m in g["w2_mean"]), _fmt(g["slope"]), g["method"]]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(result: dict, outdir, figures: bool = True) -> list:
    """Write ``study.json``, ``study.md`` and (``figures``) the PNG figures into ``outdir``;
    returns the paths."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(outdir / "study.json", to_json(result) + "\n")
    atomic.write_text(outdir / "study.md", format_markdown(result))
    files = [outdir / "study.json", outdir / "study.md"]
    return files + (figures_.study_figures(result, outdir) if figures else [])
