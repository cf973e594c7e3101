"""Figures of the report (matplotlib, Agg backend): predictor with kink lines, particle
directions with rays marked, and ladder curves."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

from analysis.rays import directions
from meanfield import atomic

STYLE = {"figure.dpi": 120, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9,
         "axes.titlesize": 10, "savefig.bbox": "tight"}


def save(fig, path, **kw) -> None:
    """Write ``fig`` to ``path`` atomically (:func:`meanfield.atomic.replacing`); ``kw`` go to
    ``savefig``. The format follows the suffix of ``path``."""
    with atomic.replacing(path, suffix=Path(path).suffix) as tmp:
        fig.savefig(tmp, **kw)


def import_matplotlib():
    """Import and return :mod:`matplotlib` for writing PNG files with the Agg backend.

    The figures never need the backend named by ``MPLBACKEND``; a value that matplotlib
    rejects (``MPLBACKEND=nonsense`` makes ``import matplotlib`` raise ``ValueError``) is
    set aside while importing, so that the figures are still written.
    """
    import os
    import sys
    if "matplotlib" not in sys.modules and "MPLBACKEND" in os.environ:
        try:
            import matplotlib
        except ValueError:
            for name in [m for m in sys.modules if m == "matplotlib"
                         or m.startswith("matplotlib.")]:
                del sys.modules[name]       # the half-imported package, imported again below
            saved = os.environ.pop("MPLBACKEND")
            try:
                import matplotlib
            finally:
                os.environ["MPLBACKEND"] = saved
    import matplotlib
    matplotlib.use("Agg", force=False)
    return matplotlib


def _plt():
    # Deferred on purpose: Matplotlib is heavy, and pyplot must see the Agg backend first.
    import_matplotlib()
    import matplotlib.pyplot as plt
    return plt


def _box(X, pad=0.35):
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.maximum(hi - lo, 1e-9)
    return lo - pad * span, hi + pad * span


def _unpack(item, default_kinks):
    if len(item) == 3:
        return item
    return item[0], item[1], default_kinks


def _kink_lines_2d(ax, kinks, g0, g1, **kw):
    for kk in (kinks or []):
        nrm, off = kk.normal, kk.offset
        if abs(nrm[1]) > abs(nrm[0]):
            ax.plot(g0, (off - nrm[0] * g0) / nrm[1], **kw)
        else:
            ax.plot((off - nrm[1] * g1) / nrm[0], g1, **kw)


def plot_predictor(path, X, y, predictors, kinks=None, title=""):
    """Predictor at several temperatures over the data, with training points and kink lines.

    Parameters
    ----------
    path : path-like
        PNG to write.
    X : ndarray of shape (n, d); y : ndarray of shape (n,)
        Training inputs and targets (the data's units).
    predictors : list of ``(label, f)`` or ``(label, f, kinks)``
        ``f`` maps an (m, d) array to (m,) (e.g. one snapshot's :func:`solvers.numpy_model.predict`);
        ``kinks`` are that predictor's :class:`solvers.geometry.Kink` hyperplanes
        ``{x : normal·x = offset}``. A 2-tuple uses ``kinks`` for the last predictor only.
    kinks : list of Kink, optional
        Kinks of the last predictor when the items are 2-tuples.
    title : str

    Returns
    -------
    path, or ``None`` (nothing drawn) when ``d > 2``.

    Notes
    -----
    ``d = 1``: one curve per predictor (cold = dark), kinks as dotted vertical lines in the
    curve's colour. ``d = 2``: a row of heat maps on one colour scale, one per predictor, each
    with its kink lines (dashed) and the training points coloured by ``y``.
    """
    plt = _plt()
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    d = X.shape[1]
    items = [_unpack(it, kinks if k == len(predictors) - 1 else None)
             for k, it in enumerate(predictors)]
    with plt.rc_context(STYLE):
        if d == 1:
            lo, hi = _box(X)
            xs = np.linspace(lo[0], hi[0], 600)[:, None]
            fig, ax = plt.subplots(figsize=(6, 3.6), constrained_layout=True)
            cmap = plt.get_cmap("viridis")
            for k, (lab, f, kk_list) in enumerate(items):
                col = cmap(0.85 * (1 - k / max(1, len(items) - 1)))
                ax.plot(xs[:, 0], f(xs), color=col, label=lab)
                for kk in (kk_list or []):
                    ax.axvline(kk.offset / kk.normal[0], color=col, ls=":", lw=0.9)
            ax.scatter(X[:, 0], y, color="k", zorder=5, s=18, label="data")
            ax.set_xlabel("input x")
            ax.set_ylabel("predictor f(x)")
            ax.legend(fontsize=7)
            ax.set_title(title or "predictor; dotted: kinks")
        elif d == 2:
            lo, hi = _box(X)
            g0 = np.linspace(lo[0], hi[0], 160)
            g1 = np.linspace(lo[1], hi[1], 160)
            G0, G1 = np.meshgrid(g0, g1)
            grid = np.c_[G0.ravel(), G1.ravel()]
            Fs = [f(grid).reshape(G0.shape) for _, f, _ in items]
            vmax = max(max(np.abs(F).max() for F in Fs), np.abs(y).max())
            m = len(items)
            fig, axes = plt.subplots(1, m, figsize=(3.1 * m + 0.8, 3.3), sharey=True,
                                     constrained_layout=True, squeeze=False)
            for ax, (lab, _, kk_list), F in zip(axes[0], items, Fs):
                im = ax.pcolormesh(G0, G1, F, cmap="RdBu_r", vmin=-vmax, vmax=vmax,
                                   shading="auto", rasterized=True)
                _kink_lines_2d(ax, kk_list, g0, g1, color="k", ls="--", lw=0.9)
                ax.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", vmin=-vmax, vmax=vmax,
                           edgecolors="k", s=30, zorder=5)
                ax.set_xlim(lo[0], hi[0])
                ax.set_ylim(lo[1], hi[1])
                ax.set_aspect("equal")
                ax.grid(False)
                ax.set_xlabel("x₁")
                ax.set_title(f"{lab}, K = {len(kk_list or [])}")
            axes[0, 0].set_ylabel("x₂")
            fig.colorbar(im, ax=axes[0].tolist(), label="f(x)", shrink=0.9)
            fig.suptitle(title or "predictor (colour), kink lines (dashed), data (dots, "
                                  "coloured by y)")
        else:
            return None
        save(fig, path)
        plt.close(fig)
    return path


def _sphere_density(V, mass, nlon=90, nlat=45):
    """Mass-weighted histogram of unit vectors in R³ over (longitude, latitude) cells, divided
    by each cell's solid angle (a density on the sphere, per steradian, of total mass 1)."""
    lon = np.arctan2(V[:, 1], V[:, 0])
    lat = np.arcsin(np.clip(V[:, 2], -1, 1))
    le = np.linspace(-np.pi, np.pi, nlon + 1)
    be = np.linspace(-np.pi / 2, np.pi / 2, nlat + 1)
    h, _, _ = np.histogram2d(lon, lat, bins=(le, be), weights=mass)
    area = np.outer(np.diff(le), np.diff(np.sin(be)))
    return le, be, h / area


def plot_directions(path, theta, rays=None, title=""):
    """Mass-weighted density of the particle directions ``v = (w, b)/|(w, b)|`` with the rays.

    Parameters
    ----------
    path : path-like
        PNG to write.
    theta : ndarray of shape (N, d+2)
        Particles, rows ``(a, w_1..w_d, b)``; the mass of a particle is ``|a||(w, b)|``.
    rays : list of analysis.rays.Ray, optional
        Marked at their mean direction (``Ray.direction``, ``Ray.sign``).
    title : str
        Figure title (default: what is shown).

    Returns
    -------
    path or None
        ``None`` (nothing drawn) when ``d > 2``.

    Notes
    -----
    ``d = 1``: polar histogram of the angle of ``v = (w, b)/|(w, b)|`` on the circle (fraction of
    the total mass per 2° bin), ``a > 0`` red, ``a < 0`` blue, rays as black radii.
    ``d = 2``: two equal-area (Mollweide) maps of the sphere ``S²`` of directions, one per sign of
    ``a``, longitude in the ``(w₁, w₂)`` plane and latitude toward ``b``; colour is the density
    of the mass per steradian (log scale), rays are circles. Sources: THEORY §4 (rays),
    [LJM26] (direction collapse).
    """
    plt = _plt()
    theta = np.asarray(theta, float)
    V, _, mass = directions(theta)
    sign = np.sign(theta[:, 0])
    D = V.shape[1]
    total = max(mass.sum(), 1e-300)
    with plt.rc_context(STYLE):
        if D == 2:
            fig = plt.figure(figsize=(4.6, 4.6))
            ax = fig.add_subplot(projection="polar")
            ang = np.arctan2(V[:, 1], V[:, 0])
            bins = np.linspace(-np.pi, np.pi, 181)
            for s, col in ((1, "tab:red"), (-1, "tab:blue")):
                h, _ = np.histogram(ang[sign == s], bins=bins, weights=mass[sign == s])
                ax.bar(bins[:-1], h / total, width=np.diff(bins), color=col,
                       alpha=0.6, align="edge", label="a > 0" if s > 0 else "a < 0")
            for q in (rays or []):
                ax.plot([np.arctan2(q.direction[1], q.direction[0])] * 2, [0, ax.get_rmax()],
                        color="k", lw=0.8)
            ax.set_xlabel("angle of (w, b); radius: mass fraction per 2° bin", fontsize=8)
            ax.set_title(title or f"direction density, J = {len(rays or [])} rays (black)")
            ax.legend(fontsize=7, loc="lower right")
        elif D == 3:
            fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.0), constrained_layout=True,
                                     subplot_kw={"projection": "mollweide"})
            dens = [(_sphere_density(V[sign == s], mass[sign == s] / total), s) for s in (1, -1)]
            top = max(max(dd[2].max() for dd, _ in dens), 1e-300)
            norm = plt.matplotlib.colors.LogNorm(vmin=top * 1e-3, vmax=top)
            for ax, ((le, be, rho), s) in zip(axes, dens):
                im = ax.pcolormesh(le, be, np.ma.masked_less_equal(rho.T, top * 1e-3),
                                   cmap="magma_r", norm=norm, rasterized=True)
                for q in (rays or []):
                    if np.sign(q.sign) != s:
                        continue
                    v = q.direction
                    ax.plot(np.arctan2(v[1], v[0]), np.arcsin(np.clip(v[2], -1, 1)), "o",
                            mfc="none", mec="tab:green", ms=11, mew=1.5)
                ax.set_title(f"a {'>' if s > 0 else '<'} 0", fontsize=9)
                ax.tick_params(labelsize=6)
                ax.grid(True, alpha=0.4)
                ax.set_xlabel("longitude: angle of (w₁, w₂)", fontsize=7)
                ax.set_ylabel("latitude: toward b", fontsize=7)
            fig.colorbar(im, ax=axes.tolist(), label="mass fraction per steradian", shrink=0.8)
            fig.suptitle(title or f"direction density of (w, b)/|(w, b)| on S² (equal-area), "
                                  f"J = {len(rays or [])} rays (circles)")
        else:
            return None
        save(fig, path)
        plt.close(fig)
    return path


def plot_ladder(path, taus, series: dict, title="low-temperature limit", references=None,
                not_stationary=None):
    """Curves against the temperature ``τ`` (log axis, hot on the left, cold on the right).

    Parameters
    ----------
    path : path-like
        PNG to write.
    taus : sequence of float
        Temperatures (THEORY §2 convention: stationary density ``exp(−Ψ/τ)``).
    series : dict
        Panel label -> values per ``τ`` (``nan`` for missing); labels starting with ``rays`` or
        ``hyperplanes`` get integer ticks. One panel per entry.
    title : str
    references : dict, optional
        Panel label -> ``(value, legend)``: a dashed horizontal reference line on that panel
        (e.g. the convex ``τ → 0`` reference's ray count).
    not_stationary : sequence of bool, optional
        Stages judged not stationary: drawn as red crosses and named in the legend.

    Returns
    -------
    path
    """
    plt = _plt()
    taus = np.asarray(taus, float)
    bad = np.zeros(len(taus), bool) if not_stationary is None else np.asarray(not_stationary, bool)
    m = len(series)
    ncol = min(3, m)
    nrow = -(-m // ncol)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrow, ncol, figsize=(3.3 * ncol, 2.7 * nrow), sharex=True,
                                 constrained_layout=True, squeeze=False)
        for ax, (lab, vals) in zip(axes.ravel(), series.items()):
            ax.plot(taus, np.asarray(vals, float), "o-")
            if references and lab in references and references[lab][0] is not None:
                val, legend = references[lab]
                ax.axhline(val, ls="--", color="0.4", lw=1, label=legend)
            if bad.any():
                ax.plot(taus[bad], np.asarray(vals, float)[bad], "x", color="red", ms=10,
                        mew=2, label="not stationary")
            if bad.any() or (references and lab in references and references[lab][0] is not None):
                ax.legend(fontsize=7)
            if lab.startswith(("rays", "hyperplanes")):
                ax.yaxis.get_major_locator().set_params(integer=True)
            ax.set_xscale("log")
            ax.set_xlabel("temperature τ")
            ax.set_ylabel(lab)
            ax.tick_params(labelbottom=True)
        for ax in axes.ravel()[m:]:
            ax.set_visible(False)
        axes[0, 0].set_xlim(taus.max() * 2, taus.min() / 2)     # hot on the left
        fig.suptitle(title)
        save(fig, path)
        plt.close(fig)
    return path


# --- a study over seeds and widths (meanfield analyze STUDY_DIR) ----------------------------

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
            ax.errorbar(n, m, yerr=np.nan_to_num(np.asarray(g["w2_std"], float)),
                        marker="o", capsize=3, label=f"{lab} (slope {g['slope']:.2f})")
        ok = [(np.asarray(g["n_particles"], float), np.asarray(g["w2_mean"], float))
              for g in result["width"]]
        n0, m0 = ok[0][0][0], ok[0][1][0]
        if np.isfinite(m0) and m0 > 0:
            nn = np.array([min(o[0].min() for o in ok), max(o[0].max() for o in ok)])
            ax.plot(nn, m0 * (nn / n0) ** -0.5, "k--", lw=1, label="N^-1/2")
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


# --- the high-dimensional GD study (meanfield highdim) ----------------------------------------

def highdim_figure(path, summary: dict) -> Path:
    """Log-log figure of the gap and relative gap against ``d`` (one line per ``n``), with
    95 % intervals and the fitted slope; PNG via the Agg canvas (no display needed)."""
    # Deferred on purpose, like _plt: Matplotlib is heavy (this figure needs no pyplot).
    import_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    path = Path(path)
    fig = Figure(figsize=(9, 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    rows = summary["cells"]
    ns = sorted({r["n"] for r in rows})
    p = summary["params"]
    for ax, key, label in zip(fig.subplots(1, 2), ("gap", "rel_gap"),
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
        ax.set_title("; ".join(f"slope in {v}: {fit[v]['slope']:.3f}" + (
                                   f" [{fit[v]['ci95'][0]:.3f}, {fit[v]['ci95'][1]:.3f}]"
                                   if None not in (fit[v].get("ci95") or [None])
                                   else " (no interval)")
                               for v in ("d", "n") if v in fit),
                     fontsize=8)
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
        ax.set_xlabel("input dimension d")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"GD on m = {p['neurons']} ReLU neuron(s), init {p['init']}, c = {p['c']:g}, "
                 f"{p['trials']} trials", fontsize=10)
    save(fig, path, dpi=120)
    return path
