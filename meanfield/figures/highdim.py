"""The figure of the high-dimensional GD study (:func:`highdim_figure`, ``meanfield highdim``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from meanfield.figures.common import WIDTH, import_matplotlib, save


def highdim_figure(path, summary: dict) -> Path:
    """Log-log figure of the gap and relative gap against ``d`` (one line per ``n``), with
    95 % intervals and the fitted slope, the two panels stacked in one journal column
    (:data:`meanfield.figures.common.WIDTH` wide, text ≥ 7 pt); PNG via the Agg canvas (no
    display needed)."""
    # Deferred on purpose, like _plt: Matplotlib is heavy (this figure needs no pyplot).
    path = Path(path)
    fig = draw_highdim(summary)
    save(fig, path, dpi=120)
    return path


def draw_highdim(summary: dict):
    """The figure of :func:`highdim_figure` (a ``matplotlib.figure.Figure``, Agg canvas) for
    ``summary`` (:func:`meanfield.highdim.summarize`), not written."""
    import_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fig = Figure(figsize=(WIDTH, 5.6), layout="constrained")
    FigureCanvasAgg(fig)
    rows = summary["cells"]
    ns = sorted({r["n"] for r in rows})
    p = summary["params"]
    for ax, key, label in zip(fig.subplots(2, 1), ("gap", "rel_gap"),
                              (r"$\|W_\infty - W^*\|$", r"$\|W_\infty - W^*\| / \|W^*\|$")):
        fit = summary["slopes"].get(key, {})
        for n in ns:
            sel = [r for r in rows if r["n"] == n and r[key]["mean"] is not None]
            if not sel:
                continue
            d = np.array([r["d"] for r in sel], dtype=float)
            mean = np.array([r[key]["mean"] for r in sel])
            lo = np.array([r[key]["ci95"][0] if r[key]["ci95"][0] is not None else r[key]["mean"]
                           for r in sel])
            hi = np.array([r[key]["ci95"][1] if r[key]["ci95"][1] is not None else r[key]["mean"]
                           for r in sel])
            lo = np.where(lo > 0, lo, mean)
            line = ax.errorbar(d, mean, yerr=[mean - lo, hi - mean], marker="o", ms=4, capsize=3,
                               ls="none", label=f"n = {n}")
            if "d" in fit:
                logfit = fit["intercept"] + fit["d"]["slope"] * np.log(d) \
                    + (fit["n"]["slope"] * np.log(n) if "n" in fit else 0.0)
                ax.plot(d, np.exp(logfit), color=line[0].get_color(), lw=1)
        ax.set_title("\n".join(f"slope in {v}: {fit[v]['slope']:.3f}" + (
                                   f" [{fit[v]['ci95'][0]:.3f}, {fit[v]['ci95'][1]:.3f}]"
                                   if None not in (fit[v].get("ci95") or [None])
                                   else " (no interval)")
                               for v in ("d", "n") if v in fit),
                     fontsize=7)
        if key == "gap" and rows:
            d_all = np.array(sorted({r["d"] for r in rows}), dtype=float)
            first = [r for r in rows if r["n"] == ns[0] and r[key]["mean"] is not None]
            if first and d_all.size > 1:
                d0, g0 = first[0]["d"], first[0][key]["mean"]
                ax.plot(d_all, g0 * (d_all / d0) ** -0.5, "k--", lw=0.8, label="slope −1/2")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):       # label 1-2-5 ticks: ranges are often < a decade
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("input dimension d", fontsize=8)
        ax.set_ylabel(label + " [units of W]" if key == "gap" else label + " [1]", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")   # "best": where it covers the fewest points
    fig.suptitle(f"GD on m = {p['neurons']} ReLU neuron(s), init {p['init']}, c = {p['c']:g}, "
                 f"{p['trials']} trials\npoints: mean over the trials; error bars: 95 %\n"
                 f"Student-t interval of the mean (a lower end ≤ 0\nis not drawn on the log "
                 f"axis); lines: the log-log fit", fontsize=7)
    return fig
