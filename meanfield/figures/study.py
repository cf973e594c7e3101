"""The figures of a study summary (:func:`study_figures`, ``meanfield analyze STUDY_DIR``):
drawn by :func:`draw_study` in the style and at the width of a run's figures
(:data:`meanfield.figures.common.RUN_STYLE`, :data:`~meanfield.figures.common.WIDTH`), a
stage that is not stationary marked as the run's ladder figure marks it
(:func:`meanfield.figures.common.mark_not_stationary`)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

from meanfield.figures.common import (
    NOT_STATIONARY_GID,
    WIDTH,
    _figure,
    _rc,
    mark_not_stationary,
    save,
)
from meanfield.figures.ladder import set_tau_ticks

#: The figures of a study against τ: file name, table column, y label, log y axis.
TAU_FIGURES = (("J_tau.png", "J", "rays J", False),
               ("K_tau.png", "K", "kinks K", False),
               ("risk_tau.png", "risk", "risk, time avg. [y²]", True))
HEIGHT = 2.6


def _label(params: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in params.items()) or "all"


def _tau_axis(ax, taus):
    """The τ axis of the run's ladder figure: log (symlog with a zero τ), hot on the left,
    a tick at every τ of the study, each labelled (:func:`~meanfield.figures.ladder.
    set_tau_ticks`)."""
    taus = sorted(set(float(t) for t in taus), reverse=True)
    pos = [t for t in taus if t > 0]
    if pos and len(pos) < len(taus):
        ax.set_xscale("symlog", linthresh=min(pos), linscale=0.5)
        ax.set_xlim(max(pos) * 3, -min(pos) / 2)
    elif pos:
        ax.set_xscale("log")
        ax.set_xlim(max(pos) * 3, min(pos) / 3)
    # every other label a line lower only where neighbours are close (under 0.4 in apart)
    lx = np.log10(pos) if pos else np.zeros(1)
    lo, hi = (np.log10(v) for v in sorted(np.abs(ax.get_xlim())))
    gap = np.diff(np.sort(lx)).min() / max(hi - lo, 1e-9) * WIDTH * 0.8 if len(lx) > 1 else 1
    set_tau_ticks(ax, taus, taus, stagger=bool(gap < 0.4 or len(pos) < len(taus)))
    ax.minorticks_off()
    ax.set_xlabel("τ [units of risk]")


def not_stationary(row) -> bool:
    """A row of the study table whose stage is judged not stationary in some of its runs
    (``runs_stationary`` below ``n_seeds``; ``None``, no verdict, is not marked)."""
    v = row.get("runs_stationary")
    return v is not None and v < row.get("n_seeds", 0)


def _legend(fig, title=None):
    handles, labels, last = [], [], []
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab in labels:
                continue
            if getattr(h, "get_gid", lambda: None)() == NOT_STATIONARY_GID:
                last = [(h, lab)]           # the band's entry after the lines'
                continue
            handles.append(h)
            labels.append(lab)
    for h, lab in last:
        handles.append(h)
        labels.append(lab)
    if handles:
        leg = fig.legend(handles, labels, loc="outside lower center", frameon=False,
                         fontsize=7, ncol=2 if len(labels) > 3 else 1, title=title,
                         title_fontsize=7, labelspacing=0.25, handlelength=1.8,
                         columnspacing=1.0)
        leg._legend_box.align = "left"


def draw_study(result: dict) -> dict:
    """The study's figures, by file name: ``J_tau.png``, ``K_tau.png``, ``risk_tau.png``
    (mean ± standard deviation over seeds against τ, one line per parameter point; a stage
    not stationary in some run marked by a band behind its τ) and ``w2_width.png`` (``W_2``
    to the widest run against ``N``, log-log, with an ``N^{-1/2}`` guide). A figure with no
    finite data is left out. Each is a :class:`matplotlib.figure.Figure`, one column wide."""
    lines: OrderedDict[str, list] = OrderedDict()
    axes = [a for a in result["axes"] if a != result["seed_axis"]]
    for r in result["table"]:
        lines.setdefault(_label({a: r[a] for a in axes}), []).append(r)
    taus = [r["tau"] for r in result["table"]]
    out = {}
    with _rc():
        for fname, name, ylabel, logy in TAU_FIGURES:
            if not any(np.isfinite(r[f"{name}_mean"]) for r in result["table"]):
                continue
            fig = _figure((WIDTH, HEIGHT))
            ax = fig.add_subplot()
            for k, (lab, rows) in enumerate(lines.items()):
                t = np.array([r["tau"] for r in rows], float)
                m = np.array([r[f"{name}_mean"] for r in rows], float)
                s = np.nan_to_num(np.array([r[f"{name}_std"] for r in rows], float))
                ax.errorbar(t, m, yerr=s, fmt="o-", ms=3.5, capsize=2, lw=1, color=f"C{k}",
                            label=lab, zorder=3)
            bad = np.array([not_stationary(r) for r in result["table"]])
            mark_not_stationary(ax, taus, bad, log=True,
                                label="stage not stationary in some run")
            _tau_axis(ax, taus)
            if logy:
                ax.set_yscale("log")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3, lw=0.5)
            _legend(fig, "mean ± std over seeds")
            out[fname] = fig
        if result["width"]:
            out["w2_width.png"] = _w2_width(result, axes)
    return out


def _w2_width(result, axes):
    from matplotlib.ticker import FuncFormatter, NullFormatter
    fig = _figure((WIDTH, HEIGHT))
    ax = fig.add_subplot()
    other = [a for a in axes if a != result["width_axis"]]
    for k, g in enumerate(result["width"]):
        n = np.asarray(g["n_particles"], float)
        m = np.asarray(g["w2_mean"], float)
        lab = _label({**{a: g[a] for a in other}, "tau": g["tau"]})
        slope = (f"slope {g['slope']:.2f}" if np.isfinite(g["slope"]) else
                 "no slope: needs two widths below the reference")
        ax.errorbar(n, m, yerr=np.nan_to_num(np.asarray(g["w2_std"], float)), fmt="o-",
                    ms=3.5, capsize=2, lw=1, color=f"C{k}", label=f"{lab} ({slope})")
    pts = [(n, m) for g in result["width"]
           for n, m in zip(np.asarray(g["n_particles"], float),
                           np.asarray(g["w2_mean"], float)) if np.isfinite(m) and m > 0]
    if pts:                     # the guide goes through the narrowest measured point
        n0, m0 = min(pts)
        ns = [n for n, _ in pts]
        lo, hi = min(ns), max(ns)
        if hi <= lo:            # one point: show the guide's slope around it
            lo, hi = lo / 2, lo * 2
        nn = np.geomspace(lo, hi, 20)
        ax.plot(nn, m0 * (nn / n0) ** -0.5, "k--", lw=0.8,
                label="N^(-1/2) guide (propagation of chaos)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(sorted({float(n) for g in result["width"] for n in g["n_particles"]}))
    ax.set_xlabel("width N")
    ax.set_ylabel(f"W2 to N = {result['width'][0]['reference_n_particles']} [θ]")
    ax.grid(True, alpha=0.3, lw=0.5)
    _legend(fig, "mean ± std over seeds")
    return fig


def study_figures(result: dict, outdir) -> list:
    """Write the figures of a study summary (:func:`meanfield.sweep.summary.analyze_study`)
    into ``outdir``: those of :func:`draw_study`, as PNG. Returns the paths."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    figs = draw_study(result)
    with _rc():                 # the run figures' resolution and tight bounding box
        for fname, fig in figs.items():
            save(fig, outdir / fname)
            written.append(outdir / fname)
    return written
