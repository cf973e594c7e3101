"""The figures of a study summary (:func:`study_figures`, ``meanfield analyze STUDY_DIR``)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

from meanfield.figures.common import _plt, save


def _label(params: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in params.items()) or "all"


def _tau_axis(ax, taus):
    pos = [t for t in taus if t > 0]
    if pos and len(pos) < len(taus):
        ax.set_xscale("symlog", linthresh=min(pos))
    elif pos:
        ax.set_xscale("log")
    ax.set_xlabel("τ")
    ax.invert_xaxis()


def study_figures(result: dict, outdir) -> list:
    """Figures of a study summary (:func:`meanfield.sweep.summary.analyze_study`).

    Write ``J_tau.png``, ``K_tau.png``, ``risk_tau.png`` (mean ± std over seeds, one line
    per parameter point) and ``w2_width.png`` (``W_2`` to the widest run against ``N``, log-log,
    with an ``N^{-1/2}`` guide). Figures with no finite data are skipped. Returns the paths."""
    plt = _plt()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    lines: OrderedDict[str, list] = OrderedDict()
    axes = [a for a in result["axes"] if a != result["seed_axis"]]
    for r in result["table"]:
        lines.setdefault(_label({a: r[a] for a in axes}), []).append(r)
    written = []
    for name, ylabel, fname in (("J", "rays J", "J_tau.png"), ("K", "kink hyperplanes K",
                                                               "K_tau.png"),
                                ("risk", "risk (time average)", "risk_tau.png")):
        if not any(np.isfinite(r[f"{name}_mean"]) for r in result["table"]):
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for lab, rows in lines.items():
            t = np.array([r["tau"] for r in rows])
            m = np.array([r[f"{name}_mean"] for r in rows])
            s = np.nan_to_num(np.array([r[f"{name}_std"] for r in rows]))
            ax.errorbar(t, m, yerr=s, marker="o", capsize=3, label=lab)
        _tau_axis(ax, sorted({r["tau"] for r in result["table"]}))
        if name == "risk":
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        fig.tight_layout()
        save(fig, outdir / fname, dpi=120)
        plt.close(fig)
        written.append(outdir / fname)
    if result["width"]:
        fig, ax = plt.subplots(figsize=(6, 4))
        other = [a for a in axes if a != result["width_axis"]]
        for g in result["width"]:
            n = np.asarray(g["n_particles"], float)
            m = np.asarray(g["w2_mean"], float)
            lab = _label({**{a: g[a] for a in other}, "tau": g["tau"]})
            slope = (f"slope {g['slope']:.2f}" if np.isfinite(g["slope"]) else
                     "no slope: needs two widths below the reference")
            ax.errorbar(n, m, yerr=np.nan_to_num(np.asarray(g["w2_std"], float)),
                        marker="o", capsize=3, label=f"{lab} ({slope})")
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
            ax.plot(nn, m0 * (nn / n0) ** -0.5, "k--", lw=1,
                    label="N^(-1/2) guide (propagation of chaos)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("width N")
        ax.set_ylabel(f"W2 to N = {result['width'][0]['reference_n_particles']}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        save(fig, outdir / "w2_width.png", dpi=120)
        plt.close(fig)
        written.append(outdir / "w2_width.png")
    return written
