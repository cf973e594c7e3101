"""Every figure of meanfield (matplotlib, Agg backend), and their writer :func:`save`.

The figures of one run's analysis take the analysis (the report dict of ``analyze_run``) and
the run (:func:`meanfield.open_run`), draw into the given matplotlib ``Axes`` (or a new figure)
and return the ``Figure``: :func:`plot_predictor`, :func:`plot_directions`,
:func:`plot_ladder`, :func:`plot_trajectory`. They are sized for a single journal column
(3.4 in wide, 8 pt text). The study and highdim figures use :data:`STYLE` and :func:`_plt`.
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from pathlib import Path

import numpy as np

from analysis.rays import directions
from analysis.run_analysis import last_of_stages
from analysis.time_average import time_average_observable
from meanfield import atomic
from solvers import numpy_model
from solvers.geometry import kink_hyperplanes

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


#: Single-column width (inches) and the text sizes the figures are designed for.
WIDTH = 3.4
RUN_STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
         "ytick.labelsize": 7, "legend.fontsize": 7, "figure.dpi": 150,
         "savefig.bbox": "tight", "savefig.dpi": 200, "axes.grid": False}
#: Colours of the sign of a (kink lines, rays), distinct from the red-blue predictor map.
SIGN_COLOURS = {1: "#1b7837", -1: "#762a83", 0: "#000000"}
SIGN_STYLES = {1: "-", -1: "--", 0: "-."}


def _figure(figsize):
    import_matplotlib()
    from matplotlib.figure import Figure
    return Figure(figsize=figsize, layout="constrained")


def _rc():
    return import_matplotlib().rc_context(RUN_STYLE)


def _frame_of(run, step):
    k = int(np.nonzero(np.asarray(run.frame_step) == step)[0][0])
    return run.frame(k)


def _box(X, pad=0.3):
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.maximum(hi - lo, 1e-9)
    return lo - pad * span, hi + pad * span


def _kink_sign(snap, kink):
    signs = {snap["rays"][r]["sign"] for r in kink["rays"]}
    return signs.pop() if len(signs) == 1 else 0


def _clip_line(normal, offset, lo, hi):
    """End points of ``{x : normal·x = offset}`` inside the box ``[lo, hi]`` (2-D), or None."""
    pts = []
    n0, n1 = normal
    for x in (lo[0], hi[0]):
        if abs(n1) > 1e-12:
            yv = (offset - n0 * x) / n1
            if lo[1] - 1e-12 <= yv <= hi[1] + 1e-12:
                pts.append((x, yv))
    for yv in (lo[1], hi[1]):
        if abs(n0) > 1e-12:
            x = (offset - n1 * yv) / n0
            if lo[0] - 1e-12 <= x <= hi[0] + 1e-12:
                pts.append((x, yv))
    pts = sorted({(round(p[0], 12), round(p[1], 12)) for p in pts})
    return (pts[0], pts[-1]) if len(pts) >= 2 else None


def plot_predictor(rep, run, *, axes=None, taus=None):
    """The predictor ``f(x)`` at each temperature with its kink lines and the data.

    Parameters
    ----------
    rep : dict
        The analysis (``analyze_run``); the last snapshot of each stage is drawn.
    run : meanfield.store.Run
        The run file (the particles of those snapshots).
    axes : sequence of matplotlib Axes, optional
        One per temperature drawn; default: a new figure, two panels a row.
    taus : sequence of float, optional
        Only these temperatures.

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` when ``d > 2`` (nothing to draw).

    Raises
    ------
    meanfield.errors.RunFileError
        The run file cannot be read (the particles of a snapshot load from it).

    Notes
    -----
    ``d = 2``: heat map of ``f`` (red-blue, one scale for every panel, zero white); kink lines
    ``{x : normal·x = offset}`` of the rays (THEORY §4), green solid for rays with ``a > 0``,
    purple dashed for ``a < 0``, black dash-dot when rays of both signs share the line, each
    labelled with its rays' numbers as in ``report.md`` (``r0`` the heaviest); the training
    points are circles filled with ``y`` on the predictor's scale, with a black and a white
    ring so they stand out on any background (a point whose fill matches its surroundings is
    fitted). ``d = 1``: one curve per temperature, kinks as vertical lines.
    """
    X, y = np.asarray(run.X, float), np.asarray(run.y, float)
    d = X.shape[1]
    snaps = [s for s in last_of_stages(rep.get("snapshots", []))
             if taus is None or s["tau"] in taus]
    if d > 2 or not snaps:
        return None
    with _rc():
        if d == 1:
            return _predictor_1d(snaps, run, X, y, axes)
        return _predictor_2d(snaps, run, X, y, axes)


def _predictor_1d(snaps, run, X, y, axes):
    import matplotlib
    if axes is None:
        fig = _figure((WIDTH, 2.4))
        ax = fig.add_subplot()
    else:
        ax = axes[0] if np.iterable(axes) else axes
        fig = ax.figure
    lo, hi = _box(X)
    xs = np.linspace(lo[0], hi[0], 600)[:, None]
    cmap = matplotlib.colormaps["viridis"]
    for k, s in enumerate(snaps):
        col = cmap(0.85 * (1 - k / max(1, len(snaps) - 1)))
        ax.plot(xs[:, 0], numpy_model.predict(_frame_of(run, s["step"]), xs), color=col, lw=1.2,
                label=f"τ = {s['tau']:.0e} (K = {len(s['kinks'])})")
        for kk in s["kinks"]:
            ax.axvline(kk["offset"] / kk["normal"][0], color=col, ls=":", lw=0.8)
    ax.scatter(X[:, 0], y, color="k", zorder=5, s=14, label="data")
    ax.set_xlabel("input x")
    ax.set_ylabel("predictor f(x)")
    ax.legend(frameon=False)
    ax.set_title("predictor at each τ; dotted: kinks")
    return fig


def _predict_blocks(theta, grid, block=1024):
    """``numpy_model.predict(theta, grid)`` a block of grid points at a time: the ``(N, m)``
    pre-activations of a 180 x 180 grid and 4000 particles are 1 GB, and evaluating them at
    once was four times slower than in blocks that stay in the cache."""
    return np.concatenate([numpy_model.predict(theta, grid[k:k + block])
                           for k in range(0, len(grid), block)]) if len(grid) else np.zeros(0)


def _predictor_2d(snaps, run, X, y, axes):
    import matplotlib.patheffects as pe
    from matplotlib.lines import Line2D
    lo, hi = _box(X)
    g0 = np.linspace(lo[0], hi[0], 180)
    g1 = np.linspace(lo[1], hi[1], 180)
    G0, G1 = np.meshgrid(g0, g1)
    grid = np.c_[G0.ravel(), G1.ravel()]
    Fs = [_predict_blocks(_frame_of(run, s["step"]), grid).reshape(G0.shape)
          for s in snaps]
    vmax = max(max(np.abs(F).max() for F in Fs), np.abs(y).max())
    m = len(snaps)
    spare = None
    if axes is None:
        ncol = 1 if m == 1 else 2
        nrow = -(-(m + 1) // ncol) if m > 1 else 1     # one more slot for the key
        fig = _figure((WIDTH, 1.62 * nrow + 0.1))
        gs = fig.add_gridspec(nrow, ncol)
        axes = [fig.add_subplot(gs[i // ncol, i % ncol]) for i in range(m)]
        if m > 1:
            spare = fig.add_subplot(gs[m // ncol, m % ncol:] if m % ncol else gs[m // ncol, :])
    else:
        axes = list(np.ravel(axes))
        fig = axes[0].figure
    halo = [pe.withStroke(linewidth=3.0, foreground="white")]
    for i, (ax, s, F) in enumerate(zip(axes, snaps, Fs)):
        im = ax.imshow(F, origin="lower", extent=(lo[0], hi[0], lo[1], hi[1]), cmap="RdBu_r",
                       vmin=-vmax, vmax=vmax, interpolation="bilinear", rasterized=True)
        for j, kk in enumerate(s["kinks"]):
            seg = _clip_line(kk["normal"], kk["offset"], lo, hi)
            if seg is None:
                continue
            sg = _kink_sign(s, kk)
            (x0, y0), (x1, y1) = seg
            ax.plot([x0, x1], [y0, y1], color=SIGN_COLOURS[sg], ls=SIGN_STYLES[sg], lw=1.1,
                    path_effects=[pe.withStroke(linewidth=2.2, foreground="white", alpha=0.6)])
            # label at one end, alternating, pulled inside the box
            t = 0.08 if j % 2 == 0 else 0.92
            lx, ly = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
            ax.text(lx, ly, ",".join(f"r{r}" for r in kk["rays"]), fontsize=6,
                    color=SIGN_COLOURS[sg], ha="center", va="center", path_effects=halo)
        ax.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", vmin=-vmax, vmax=vmax, s=22,
                   edgecolors="k", linewidths=0.9, zorder=5,
                   path_effects=[pe.withStroke(linewidth=2.4, foreground="white")])
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal")
        ax.set_title(f"τ = {s['tau']:.0e}: J = {len(s['rays'])}, K = {len(s['kinks'])}")
        ax.set_xlabel("x₁", labelpad=1)
        if i % 2 == 0:
            ax.set_ylabel("x₂", labelpad=1)
    key = [Line2D([], [], color=SIGN_COLOURS[1], ls=SIGN_STYLES[1], label="kink of rays a > 0"),
           Line2D([], [], color=SIGN_COLOURS[-1], ls=SIGN_STYLES[-1],
                  label="kink of rays a < 0"),
           Line2D([], [], color=SIGN_COLOURS[0], ls=SIGN_STYLES[0], label="both signs"),
           Line2D([], [], marker="o", ls="", mfc="white", mec="k", label="data, fill = y")]
    if spare is not None:
        spare.set_axis_off()
        cax = spare.inset_axes([0.1, 0.80, 0.8, 0.07])
        fig.colorbar(im, cax=cax, orientation="horizontal")
        cax.set_title("f(x) and y", fontsize=7, pad=2)
        spare.legend(handles=key, loc="upper center", bbox_to_anchor=(0.5, 0.66), frameon=False,
                     title="r3: ray 3 of report.md", title_fontsize=6, handlelength=2.2)
    else:
        fig.colorbar(im, ax=axes, label="f(x) and y", shrink=0.85)
        axes[-1].legend(handles=key, loc="upper center", bbox_to_anchor=(0.5, -0.22),
                        ncol=2, frameon=False)
    return fig


# --- directions -------------------------------------------------------------------------------

def _lonlat(V):
    return np.arctan2(V[:, 1], V[:, 0]), np.arcsin(np.clip(V[:, 2], -1, 1))


def seam_longitude(lons) -> float:
    """A centre longitude for the map that puts the ±180° seam in the widest gap between the
    given longitudes (radians), so that no marked direction is split across the edge."""
    lons = np.sort(np.mod(np.asarray(lons, float), 2 * np.pi))
    if lons.size == 0:
        return 0.0
    gaps = np.diff(np.r_[lons, lons[0] + 2 * np.pi])
    k = int(np.argmax(gaps))
    return float(_wrap(lons[k] + gaps[k] / 2))


def _wrap(x):
    return np.mod(x + np.pi, 2 * np.pi) - np.pi


def plot_directions(rep, run, *, axes=None, tau=None, stage=None, convex=None):
    """Where the neurons point at one temperature: the mass density of the directions
    ``v = (w, b)/|(w, b)|`` with the rays marked.

    Parameters
    ----------
    rep : dict
        The analysis (``analyze_run``).
    run : meanfield.store.Run
    axes : sequence of two matplotlib Axes (Mollweide projection), optional
        For ``a > 0`` and ``a < 0`` (``d = 2``); one polar Axes for ``d = 1``.
    tau : float, optional
        The temperature (default: the last stage); the last snapshot of the last stage at
        that temperature is drawn.
    stage : int, optional
        The stage instead (its last snapshot; ``tau`` is then ignored).
    convex : tuple (directions (J, d+1), signs (J,)), optional
        Rays of the ``τ → 0`` convex solution to overlay (``+``); by default those of the exact
        reference when the analysis compared with it.

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` when ``d > 2``.

    Raises
    ------
    meanfield.errors.RunFileError
        The run file cannot be read (the particles of a snapshot load from it).
    ValueError
        ``tau`` is not a temperature of the analysis, or ``stage`` has no snapshot.

    Notes
    -----
    ``d = 2``: two equal-area (Mollweide) maps of the sphere of directions, one per sign of
    ``a``: longitude is the angle of ``(w₁, w₂)`` and latitude the elevation toward ``b``;
    colour is the particle mass ``|a||(w, b)|`` per steradian (fraction of the total, log
    scale). The map is centred so that its ±180° edge falls in the widest gap between rays.
    Circles: the rays found (``r0`` the heaviest); ``+``: the rays of the exact ``τ → 0``
    limit; mass not circled is the thermal halo, not counted as rays (its fraction is in the
    title). Sources: THEORY §4, [LJM26].
    """
    X, d = np.asarray(run.X, float), run.X.shape[1]
    snaps = last_of_stages(rep.get("snapshots", []))
    if d > 2 or not snaps:
        return None
    if stage is not None:
        pick = [s for s in snaps if s["stage"] == stage]
        if not pick:
            listed = ", ".join(str(s["stage"]) for s in snaps)
            raise ValueError(f"no snapshot of stage {stage}; the analysis has stages {listed}")
    else:
        pick = [s for s in snaps if tau is None or s["tau"] == tau]
        if not pick:
            listed = ", ".join(f"{s['tau']:g}" for s in snaps)
            raise ValueError(f"no snapshot at tau={tau:g}; the analysis has {listed}")
    snap = pick[-1]
    theta = _frame_of(run, snap["step"])
    V, _, mass = directions(theta)
    mass = mass / max(mass.sum(), 1e-300)
    sign = np.sign(theta[:, 0])
    if convex is None and rep.get("references") and "skipped" not in rep["references"]:
        try:
            from analysis.references import convex_reference
            c = convex_reference(X, run.y, float(run.config["dynamics"]["lam"]))
            convex = (np.asarray(c.directions), np.asarray(c.signs))
        except (ImportError, ValueError, RuntimeError):   # the overlay is optional
            convex = None
    halo = snap.get("thresholds", {}).get("halo_mass_fraction")
    title = (f"τ = {snap['tau']:.0e}: J = {len(snap['rays'])} rays"
             + (f", thermal halo {100 * halo:.0f} % of the mass" if halo is not None else ""))
    with _rc():
        if d == 1:
            return _directions_1d(snap, V, mass, sign, convex, axes, title)
        return _directions_2d(snap, V, mass, sign, convex, axes, title)


def _directions_1d(snap, V, mass, sign, convex, axes, title):
    if axes is None:
        fig = _figure((WIDTH, WIDTH))
        ax = fig.add_subplot(projection="polar")
    else:
        ax = axes[0] if np.iterable(axes) else axes
        fig = ax.figure
    ang = np.arctan2(V[:, 1], V[:, 0])
    bins = np.linspace(-np.pi, np.pi, 181)
    for s in (1, -1):
        h, _ = np.histogram(ang[sign == s], bins=bins, weights=mass[sign == s])
        ax.bar(bins[:-1], h, width=np.diff(bins), color=SIGN_COLOURS[s], alpha=0.6,
               align="edge", label="a > 0" if s > 0 else "a < 0")
    rmax = ax.get_rmax()
    for i, q in enumerate(snap["rays"]):
        t = math.atan2(q["direction"][1], q["direction"][0])
        ax.plot([t, t], [0, rmax], color=SIGN_COLOURS[q["sign"]], lw=0.9)
        ax.text(t, rmax * 1.08, f"r{i}", fontsize=6, ha="center")
    if convex is not None:
        for v in convex[0]:
            ax.plot(math.atan2(v[1], v[0]), rmax * 0.95, "+", color="k", ms=7)
    ax.set_title(title, pad=12)
    ax.legend(loc="lower right", frameon=False)
    return fig


def _directions_2d(snap, V, mass, sign, convex, axes, title):
    from matplotlib.colors import LogNorm
    from matplotlib.lines import Line2D
    ray_lon = [math.atan2(q["direction"][1], q["direction"][0]) for q in snap["rays"]]
    if convex is not None:
        ray_lon += [math.atan2(v[1], v[0]) for v in convex[0]]
    centre = _wrap(seam_longitude(ray_lon) + np.pi) if ray_lon else 0.0   # seam opposite
    rounded = np.deg2rad(30 * round(np.rad2deg(centre) / 30))     # round tick labels if the
    if all(abs(_wrap(r - rounded - np.pi)) > np.deg2rad(12) for r in ray_lon):  # seam stays clear
        centre = rounded
    if axes is None:
        fig = _figure((WIDTH, 3.5))
        axes = [fig.add_subplot(2, 1, i + 1, projection="mollweide") for i in range(2)]
    else:
        axes = list(np.ravel(axes))
        fig = axes[0].figure
    lon, lat = _lonlat(V)
    lon = _wrap(lon - centre)
    le = np.linspace(-np.pi, np.pi, 91)
    be = np.linspace(-np.pi / 2, np.pi / 2, 46)
    area = np.outer(np.diff(le), np.diff(np.sin(be)))
    dens = {s: np.histogram2d(lon[sign == s], lat[sign == s], bins=(le, be),
                              weights=mass[sign == s])[0] / area for s in (1, -1)}
    top = max(max(h.max() for h in dens.values()), 1e-300)
    norm = LogNorm(vmin=top * 1e-3, vmax=top)
    im = None
    for ax, s in zip(axes, (1, -1)):
        im = ax.pcolormesh(le, be, np.ma.masked_less_equal(dens[s].T, top * 1e-3),
                           cmap="magma_r", norm=norm, rasterized=True)
        n_s = 0
        for i, q in enumerate(snap["rays"]):
            if q["sign"] != s:
                continue
            n_s += 1
            v = np.asarray(q["direction"])
            x, yv = _wrap(math.atan2(v[1], v[0]) - centre), math.asin(max(-1, min(1, v[2])))
            ax.plot(x, yv, "o", mfc="none", mec=SIGN_COLOURS[s], ms=9, mew=1.3)
            ax.annotate(f"r{i}", (x, yv), xytext=(6, 5), textcoords="offset points",
                        fontsize=6, color=SIGN_COLOURS[s])
        if convex is not None:
            for v, cs in zip(*convex):
                if np.sign(cs) == s:
                    ax.plot(_wrap(math.atan2(v[1], v[0]) - centre),
                            math.asin(max(-1, min(1, v[2]))), "+", color="k", ms=7, mew=1.0)
        ax.set_title(f"a {'>' if s > 0 else '<'} 0: {n_s} ray{'s' if n_s != 1 else ''}",
                     pad=3)
        ticks = np.deg2rad(np.arange(-120, 121, 60))
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{np.rad2deg(_wrap(t + centre)):.0f}°" for t in ticks],
                           fontsize=6, color="0.35")
        ax.set_yticks(np.deg2rad([-60, -30, 0, 30, 60]))
        ax.set_yticklabels(["−60°", "−30°", "0°", "30°", "60°"], fontsize=6)
        ax.grid(True, alpha=0.35, lw=0.5)
    axes[-1].set_xlabel("longitude: angle of (w₁, w₂); latitude: toward b", fontsize=7)
    fig.colorbar(im, ax=axes, label="mass fraction per steradian", shrink=0.7, pad=0.02)
    key = [Line2D([], [], marker="o", ls="", mfc="none", mec="0.3", label="ray found (r0 heaviest)")]
    if convex is not None:
        key.append(Line2D([], [], marker="+", ls="", color="k", label="ray of the τ → 0 limit"))
    axes[0].legend(handles=key, loc="upper center", bbox_to_anchor=(0.5, 1.42), ncol=2,
                   frameon=False, fontsize=6)
    fig.suptitle(title, fontsize=8)
    return fig


# --- ladder -----------------------------------------------------------------------------------

def plot_ladder(rep, run, *, axes=None):
    """The low-temperature limit against ``τ`` (log axis, hot on the left, the exact ``τ → 0``
    limit at the right end).

    Panels: (a) rays ``J`` and kink hyperplanes ``K`` with the bounds ``2P − 1`` and ``P − 1``
    of [LJM26] and the convex solution's ``J``, ``K``; (b) the risk, time-averaged over the
    second half of each temperature with its standard error, and the risk of the exact
    references (Gibbs at each ``τ``, convex at ``τ → 0``); (c) ``W2`` between the particle
    measures (and between the rays) of successive temperatures; (d) the distance of the
    predictor on the data to the references: time-averaged (max over the data, ± standard
    error) and at the last snapshot (RMS, to the convex limit).

    Parameters
    ----------
    rep : dict
        The analysis (``analyze_run``).
    run : meanfield.store.Run
    axes : four matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` with fewer than two temperatures.

    Raises
    ------
    meanfield.errors.RunFileError
        The run file cannot be read (the particles of a snapshot load from it).
    """
    rows = rep.get("ladder", [])
    if len(rows) < 2:
        return None
    taus = np.array([r["tau"] for r in rows], float)
    refs = rep.get("references") or {}
    if "skipped" in refs:
        refs = {}
    cvx = refs.get("convex") if refs else None
    t0 = taus.min() / 10                        # where the τ → 0 limit is drawn
    with _rc():
        has_refs = bool(refs) or any(r["dist_to_reference"] is not None for r in rows)
        if axes is None:
            fig = _figure((WIDTH, 3.9 if has_refs else 3.3))
            if has_refs:
                axes = list(fig.subplots(2, 2, sharex=True).ravel())
            else:                       # no reference: three panels, none left empty
                gs = fig.add_gridspec(2, 2)
                axes = [fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1]),
                        fig.add_subplot(gs[1, :])]
        else:
            axes = list(np.ravel(axes))
            fig = axes[0].figure
        a, b, c = axes[:3]
        d = axes[3] if len(axes) > 3 else None
        # (a) J, K and the bounds
        # a stage judged not stationary keeps its counts under J_measured / K_measured
        J = np.array([r.get("J_measured", r["J"]) for r in rows], float)
        K = np.array([r.get("K_measured", r["K"]) for r in rows], float)
        a.plot(taus, J, "o-", color="C0", ms=4, label="rays J")
        a.plot(taus, K, "s--", color="C1", ms=3.5, mfc="none", label="kinks K")
        bad = np.array([r.get("stationary") is False for r in rows])
        if bad.any():
            a.plot(taus[bad], J[bad], "x", color="red", ms=8, mew=1.5,
                   label="not stationary")
        P = rep.get("P")
        if P is not None:
            a.axhline(2 * P - 1, color="0.3", lw=0.8, ls="-")
            a.axhline(P - 1, color="0.3", lw=0.8, ls=":")
            a.text(0.97, 2 * P - 1, f"2P−1 = {2 * P - 1}", va="top", ha="right", fontsize=6,
                   transform=a.get_yaxis_transform())
            a.text(0.97, P - 1, f"P−1 = {P - 1}", va="top", ha="right", fontsize=6,
                   transform=a.get_yaxis_transform())
            a.set_yscale("log")
            a.set_ylim(0.7, (2 * P - 1) * 1.6)
        if cvx and cvx.get("n_rays") is not None:
            try:
                from analysis.references import convex_reference
                sol = convex_reference(run.X, run.y, float(run.config["dynamics"]["lam"]))
                a.plot([t0], [len(sol.weights)], "o", color="C0", mfc="white", ms=5,
                       label="τ → 0 (exact)")
                a.plot([t0], [len(kink_hyperplanes(sol.directions))], "s", color="C1",
                       mfc="none", ms=6)
            except (ImportError, ValueError, RuntimeError):   # the overlay is optional
                pass
        a.set_ylabel("count")
        a.legend(frameon=False, fontsize=6, loc="center left")
        a.set_title("(a) rays J, kinks K", loc="left")
        # (b) risk
        m, e = np.full(len(taus), np.nan), np.full(len(taus), np.nan)
        for i, r in enumerate(rows):
            with contextlib.suppress(ValueError):       # no observation in the window
                m[i], e[i] = time_average_observable(run, "risk", r["stage"])
        if np.isfinite(m).any():
            b.errorbar(taus, m, yerr=e, fmt="o-", ms=3.5, capsize=2, color="C0",
                       label="particles, time avg.")
        g = [x for x in refs.get("gibbs", []) if "skipped" not in x] if refs else []
        if g:
            y = np.asarray(run.y, float)
            b.plot([x["tau"] for x in g],
                   [np.mean((np.asarray(x["f_reference"]) - y) ** 2) for x in g], "x",
                   color="k", ms=5, label="exact Gibbs")
        if cvx and "f_reference" in cvx:
            b.plot([t0], [np.mean((np.asarray(cvx["f_reference"]) - np.asarray(run.y)) ** 2)],
                   "+", color="k", ms=7, label="exact τ → 0")
        b.set_ylabel("risk (1/n)Σ(f−y)²")
        if b.get_legend_handles_labels()[0]:
            b.legend(frameon=False, fontsize=6, loc="upper right")
        b.set_title("(b) risk", loc="left")
        # (c) W2
        w2 = [np.nan if r["w2_to_previous"] is None else r["w2_to_previous"] for r in rows]
        w2r = [np.nan if r.get("w2_rays_to_previous") is None else r["w2_rays_to_previous"]
               for r in rows]
        c.plot(taus, w2, "o-", ms=3.5, color="C0", label="particles")
        c.plot(taus, w2r, "s--", ms=3.5, mfc="none", color="C2", label="rays")
        c.set_ylabel("W2")
        c.legend(frameon=False, fontsize=6, loc="upper right")
        c.set_title("(c) W2 to previous τ", loc="left")
        # (d) distances to the references
        if d is not None:
            if g:
                d.errorbar([x["tau"] for x in g], [x["max_abs_diff"] for x in g],
                           yerr=[x["max_stderr"] for x in g], fmt="o-", ms=3.5, capsize=2,
                           color="C0", label="max|f̄ − f_Gibbs| at each τ")
            if cvx and "max_abs_diff" in cvx:
                d.plot([t0], [cvx["max_abs_diff"]], "+", color="k", ms=7,
                       label="max|f̄ − f_τ→0| at the coldest τ")
            dist = [np.nan if r["dist_to_reference"] is None else r["dist_to_reference"]
                    for r in rows]
            if np.isfinite(dist).any():
                d.plot(taus, dist, "s:", ms=3, mfc="none", color="C3",
                       label="RMS|f − f_τ→0|, last snapshot of each τ")
            d.set_yscale("log")
            d.set_ylabel("distance on the data")
            d.set_title("(d) vs exact", loc="left")
            fig.legend(handles=d.get_legend_handles_labels()[0], loc="outside lower center",
                       ncol=1, frameon=False, fontsize=6,
                       title="(d): f̄ averaged over the second half of each τ; error bars: "
                             "standard errors", title_fontsize=5.5)
        ticks = list(taus) + [t0]
        panels = [ax for ax in (a, b, c, d) if ax is not None]
        for ax in panels:
            ax.set_xscale("log")
            ax.set_xlim(taus.max() * 3, t0 / 3)
            ax.grid(True, alpha=0.3, lw=0.5)
        for ax in panels:
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{t:.0e}".replace("e-0", "e-") for t in taus] + ["→0"],
                               fontsize=6)
            ax.minorticks_off()
        for ax in panels[2:]:
            ax.set_xlabel("temperature τ")
    return fig


# --- trajectory ---------------------------------------------------------------------------------

def plot_trajectory(run, rep=None, *, axes=None):
    """The run against time ``t = step · η``: risk, mean ``|θ|²`` and the stationarity statistic
    (drift of the time-averaged residuals, THEORY §2), the temperatures' stages shaded and
    labelled, the snapshot frames marked.

    Parameters
    ----------
    run : meanfield.store.Run
        Complete or in progress (its committed rows).
    rep : dict, optional
        Unused except for the title (the analysis it belongs to).
    axes : three matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` before the first observation.

    Raises
    ------
    meanfield.errors.RunFileError
        The run file cannot be read (the particles of a snapshot load from it).
    """
    obs = run.observables
    if not len(obs["risk"]["step"]):
        return None
    eta = float(run.config["dynamics"]["eta"])
    taus = run.taus
    bounds = [run.schedule.stage_bounds(s) for s in range(len(taus))]   # steps (lo, hi]
    t = np.asarray(obs["risk"]["time"], float)
    with _rc():
        if axes is None:
            fig = _figure((WIDTH, 3.4))
            axes = fig.subplots(3, 1, sharex=True)
        else:
            axes = list(np.ravel(axes))
            fig = axes[0].figure
        series = [("risk", "risk", False), ("mean_sq_norm", "mean |θ|²", False),
                  ("stationarity", "stationarity", True)]
        for ax, (name, label, logy) in zip(axes, series):
            v = np.asarray(obs[name]["value"], float)
            ax.plot(t, v, lw=0.8, color="C0")
            ax.set_ylabel(label)
            if logy and np.any(v > 0):
                ax.set_yscale("log")
            for s, (lo, hi) in enumerate(bounds):
                if s % 2:
                    ax.axvspan(lo * eta, hi * eta, color="0.92", lw=0)
            for fs in run.frame_time:
                ax.axvline(fs, color="C3", lw=0.6, ls=":")
            ax.grid(True, alpha=0.3, lw=0.5)
        top = axes[0]
        for tau, (lo, hi) in zip(taus, bounds):
            top.text((lo + hi) / 2 * eta, 1.02, f"τ = {tau:.0e}",
                     transform=top.get_xaxis_transform(), ha="center", va="bottom", fontsize=6)
        axes[-1].set_xlabel("time t = step · η   (dotted: snapshot frames)")
        axes[-1].set_xlim(0, bounds[-1][1] * eta)
        if not run.complete:
            fig.suptitle(f"run in progress: {len(t)} observations so far", fontsize=7)
    return fig


# --- studies and the high-dimensional experiment ---------------------------------------------

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
                 f"{p['trials']} trials\npoints: mean over the trials; error bars: 95 % "
                 f"Student-t interval of the mean (a lower end ≤ 0 is not drawn on the log "
                 f"axis); lines: the log-log fit", fontsize=8)
    save(fig, path, dpi=120)
    return path
