"""The predictor figure of one run's analysis (:func:`plot_predictor`)."""

from __future__ import annotations

import numpy as np

from analysis.snapshots import last_of_stages
from meanfield.figures.common import (
    SIGN_COLOURS,
    SIGN_STYLES,
    WIDTH,
    _figure,
    _frame_of,
    _rc,
)
from solvers import numpy_model


def _box(X, pad=0.3):
    """The plotted box around inputs ``X`` (n, d): their range on each axis widened by ``pad``
    of it; an axis whose range is under half the widest (data on a line, as the symmetric
    two-point sets) gets half the widest, centred on the data, so the panel is not flat."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    widest = float(np.max(hi - lo)) if X.size else 0.0
    span = np.maximum(hi - lo, 0.5 * widest if widest > 0 else 1.0)
    mid = 0.5 * (lo + hi)
    return mid - (0.5 + pad) * span, mid + (0.5 + pad) * span


def _same_ticks(ax, axes=("x", "y")):
    """One tick format on both axes: at most four ticks, printed with ``%g`` and a true minus
    sign (Matplotlib's default formatter chose a different format per axis)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    fmt = FuncFormatter(lambda v, _: f"{v:g}".replace("-", "−"))
    for name in axes:
        axis = getattr(ax, f"{name}axis")
        axis.set_major_locator(MaxNLocator(nbins=4, steps=[1, 2, 5, 10]))
        axis.set_major_formatter(fmt)


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
        fig = _figure((WIDTH, 3.0))
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
    ax.scatter(X[:, 0], y, color="k", zorder=5, s=14, label="training points (x, y)")
    ax.set_xlabel("input x [units of x]")
    ax.set_ylabel("predictor f(x) [units of y]")
    _same_ticks(ax)
    # under the axes: inside, the key's data marker read as one more training point
    ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2)
    ax.set_title("predictor at each τ; dotted: its kinks")
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
        # one temperature: a panel with the colour bar beside it and the key below (1.72 in
        # tall squeezed the panel into a third of the width, its bar's label cut)
        fig = _figure((WIDTH, 1.62 * nrow + 0.1 if m > 1 else 3.6))
        gs = fig.add_gridspec(nrow, ncol)
        axes = [fig.add_subplot(gs[i // ncol, i % ncol]) for i in range(m)]
        if m > 1:
            spare = fig.add_subplot(gs[m // ncol, m % ncol:] if m % ncol else gs[m // ncol, :])
    else:
        axes = list(np.ravel(axes))
        fig = axes[0].figure
    halo = [pe.withStroke(linewidth=3.0, foreground="white")]
    drawn, labelled = set(), False
    for i, (ax, s, F) in enumerate(zip(axes, snaps, Fs)):
        im = ax.imshow(F, origin="lower", extent=(lo[0], hi[0], lo[1], hi[1]), cmap="RdBu_r",
                       vmin=-vmax, vmax=vmax, interpolation="bilinear", rasterized=True)
        for j, kk in enumerate(s["kinks"]):
            seg = _clip_line(kk["normal"], kk["offset"], lo, hi)
            if seg is None:
                continue
            sg = _kink_sign(s, kk)
            drawn.add(sg)
            labelled = labelled or bool(kk["rays"])
            (x0, y0), (x1, y1) = sorted(seg, key=lambda q: (q[1], q[0]))  # bottom end first
            ax.plot([x0, x1], [y0, y1], color=SIGN_COLOURS[sg], ls=SIGN_STYLES[sg], lw=1.1,
                    path_effects=[pe.withStroke(linewidth=2.2, foreground="white", alpha=0.6)])
            # label at the bottom end, then the top end, alternating, pulled inside the box
            t = 0.08 if j % 2 == 0 else 0.92
            lx, ly = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
            ax.text(lx, ly, ",".join(f"r{r}" for r in kk["rays"]), fontsize=7,
                    color=SIGN_COLOURS[sg], ha="center", va="center", path_effects=halo)
        ax.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", vmin=-vmax, vmax=vmax, s=22,
                   edgecolors="k", linewidths=0.9, zorder=5,
                   path_effects=[pe.withStroke(linewidth=2.4, foreground="white")])
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal")
        ax.set_title(f"τ = {s['tau']:.0e}: J = {len(s['rays'])}, K = {len(s['kinks'])}"
                     + ("\nnot stationary" if s.get("stationary") is False else ""))
        _same_ticks(ax)
        ax.set_xlabel("x₁ [units of x₁]", labelpad=1)
        if i % 2 == 0:
            ax.set_ylabel("x₂ [units of x₂]", labelpad=1)
    names = {1: "kink of rays with a > 0", -1: "kink of rays with a < 0",
             0: "kink of rays of both signs"}
    key = [Line2D([], [], color=SIGN_COLOURS[sg], ls=SIGN_STYLES[sg], label=names[sg])
           for sg in (1, -1, 0) if sg in drawn]       # only the kinds of line drawn
    key.append(Line2D([], [], marker="o", ls="", mfc="white", mec="k",
                      label="training point, fill = y"))
    key_title = "r0, r1, …: the rays of report.md" if labelled else None
    if spare is not None:
        spare.set_axis_off()
        cax = spare.inset_axes([0.1, 0.80, 0.8, 0.07])
        fig.colorbar(im, cax=cax, orientation="horizontal")
        cax.tick_params(labelsize=7)
        cax.set_title("f(x) and y [units of y]", fontsize=7, pad=2)
        spare.legend(handles=key, loc="upper center", bbox_to_anchor=(0.5, 0.62), frameon=False,
                     title=key_title, title_fontsize=7, handlelength=2.2)
    else:
        fig.colorbar(im, ax=axes, label="f(x) and y [units of y]", shrink=0.85)
        fig.legend(handles=key, loc="outside lower center", ncol=2, frameon=False,
                   title=key_title, title_fontsize=7)
    return fig
