"""The directions figure of one run's analysis (:func:`plot_directions`): where the neurons
point, on equal-area maps of the sphere of directions."""

from __future__ import annotations

import math

import numpy as np

from analysis.rays import directions
from analysis.snapshots import coldest, last_of_stages
from meanfield.figures.common import SIGN_COLOURS, WIDTH, _figure, _frame_of, _rc


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
        The temperature (default: the coldest stage, :func:`analysis.snapshots.coldest`);
        the last snapshot of the last stage at that temperature is drawn.
    stage : int, optional
        The stage instead (its last snapshot; ``tau`` is then ignored).
    convex : tuple (directions (J, d+1), signs (J,)), optional
        Rays of the ``τ → 0`` convex solution to overlay (squares); by default the rays the
        report counts at ``τ → 0`` (``rep["convex_counts"]``: weight at least its floor times
        ``Σ|c|``, :func:`analysis.ray_checks.convex_counts`), none when the analysis has no
        convex reference.

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
    Circles: the rays found (``r0`` the heaviest); squares: the rays of the exact ``τ → 0``
    limit counted by the report (a circle in a square: a ray found where the limit has one);
    blue diamonds: the rays of the exact Gibbs measure at the drawn stage (its ``ladder``
    row's ``gibbs_rays``; none without them); all are open, so the density at their centre
    stays visible. Each ray's label goes where it overlaps no other label, marker or
    longitude label, next to its circle, or farther with a thin line to it
    (:func:`_place_labels`). Mass not circled is the
    thermal halo, not counted as rays (its fraction is in the title). Longitudes are labelled
    every 60° from 0°, in one row per map: on the equator, or when a marker is near one of
    them, on the first parallel (∓30°, ∓55°) where no marker is near any. Sources: THEORY
    §4, [LJM26].
    """
    d = run.X.shape[1]
    snaps = last_of_stages(rep.get("snapshots", []))
    if d > 2 or not snaps:
        return None
    if stage is not None:
        pick = [s for s in snaps if s["stage"] == stage]
        if not pick:
            listed = ", ".join(str(s["stage"]) for s in snaps)
            raise ValueError(f"no snapshot of stage {stage}; the analysis has stages {listed}")
    elif tau is None:
        pick = [coldest(snaps)]
    else:
        pick = [s for s in snaps if s["tau"] == tau]
        if not pick:
            listed = ", ".join(f"{s['tau']:g}" for s in snaps)
            raise ValueError(f"no snapshot at tau={tau:g}; the analysis has {listed}")
    snap = pick[-1]
    theta = _frame_of(run, snap["step"])
    V, _, mass = directions(theta)
    mass = mass / max(mass.sum(), 1e-300)
    sign = np.sign(theta[:, 0])
    cc = rep.get("convex_counts")
    floor = None
    if convex is None and cc and cc.get("rays"):    # the report's τ → 0 rays, by its rule
        convex = (np.array([q["direction"] for q in cc["rays"]], float),
                  np.sign([q["weight"] for q in cc["rays"]]).astype(int))
        floor = cc.get("floor")
    gibbs = _gibbs_rays(rep, snap)
    halo = snap.get("thresholds", {}).get("halo_mass_fraction")
    J = len(snap["rays"])
    title = (f"τ = {snap['tau']:.0e}: J = {J} ray{'' if J == 1 else 's'}"      # two lines:
             + (" (not stationary)" if snap.get("stationary") is False else "")  # one column
             + (f"\nthermal halo {100 * halo:.0f} % of the mass" if halo is not None else ""))
    with _rc():
        if d == 1:
            return _directions_1d(snap, V, mass, sign, convex, axes, title, floor, gibbs)
        return _directions_2d(snap, V, mass, sign, convex, axes, title, floor, gibbs)


def _gibbs_rays(rep, snap):
    """``(directions (J, d+1), signs (J,))`` of the exact Gibbs measure's rays at the drawn
    stage (its ``ladder`` row's ``gibbs_rays``, matched by stage, else by ``τ``), ``None``
    when the row has none (no Gibbs reference, or a report written before the key)."""
    rows = rep.get("ladder") or []
    row = next((r for r in rows if "stage" in r and r["stage"] == snap.get("stage")), None)
    if row is None:
        row = next((r for r in rows if r.get("tau") == snap.get("tau")), None)
    g = (row or {}).get("gibbs_rays")
    if not g:
        return None
    return (np.array([q["direction"] for q in g], float),
            np.array([int(np.sign(q["sign"])) for q in g], int))


def _gibbs_label(snap):
    return f"exact Gibbs ray at τ = {snap['tau']:.0e}"


def _exact_label(floor):
    return "exact τ → 0 ray" + (f" (weight ≥ {100 * floor:g} % of Σ|c|)" if floor else "")


EXACT = {"marker": "s", "ls": "", "mfc": "none", "mec": "k", "ms": 12, "mew": 0.8}
#: The exact Gibbs measure's rays at the drawn τ: open diamonds (an eight-pointed star with a
#: square where the Gibbs and the τ → 0 rays coincide), blue, apart from both signs' colours.
GIBBS = {"marker": "D", "ls": "", "mfc": "none", "mec": "#2166ac", "ms": 11, "mew": 0.8}
GIBBS_GID = "gibbs-ray"
FOUND_MS = 8
#: Where a ray's label may go: distances (points) from its marker's centre, nearest first, and
#: directions (degrees, counter-clockwise from east), the first preferred. A label farther
#: than LEADER_FROM points gets a thin line to its marker.
LABEL_RADII = (8, 12, 17, 23, 30, 38, 47)
LABEL_ANGLES = (35, 145, -35, -145, 60, 120, -60, -120, 90, -90, 0, 180)
LEADER_FROM = 15
RAY_LABEL_GID = "ray-label"


def _marker_boxes(fig, axes):
    """The display boxes (pixels) of every marker drawn on ``axes``."""
    from matplotlib.markers import MarkerStyle
    from matplotlib.transforms import Bbox
    px = fig.dpi / 72
    out = []
    for ax in axes:
        for ln in ax.lines:
            if ln.get_marker() in (None, "None", "", " ") or not ln.get_visible():
                continue
            m = MarkerStyle(ln.get_marker())
            ext = m.get_path().transformed(m.get_transform()).get_extents()
            reach = max(abs(ext.x0), abs(ext.x1), abs(ext.y0), abs(ext.y1))    # unit size
            h = (ln.get_markersize() * reach + ln.get_markeredgewidth() / 2) * px
            xy = ln.get_transform().transform(
                np.c_[ln.get_xdata(), ln.get_ydata()].astype(float))
            out += [Bbox.from_extents(x - h, y - h, x + h, y + h) for x, y in xy
                    if np.isfinite(x) and np.isfinite(y)]
    return out


def _place_labels(fig, items, obstacles_of, bounds_of, angles_of=None):
    """Label each ray where its label overlaps no other label and nothing of
    ``obstacles_of()`` (display boxes: the markers, the texts), inside ``bounds_of(ax)``: the first clear place of
    :data:`LABEL_RADII` × :data:`LABEL_ANGLES` (``angles_of(item)`` instead, if given), with a
    leader line beyond :data:`LEADER_FROM` points; where none is clear, the least overlapped.

    ``items``: ``(ax, (x, y) in data coordinates, text, colour)``. The layout is computed
    first (the labels stay out of it, so that it does not move them once placed)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.transforms import Bbox
    fig.draw_without_rendering()
    renderer = fig._get_renderer()
    obstacles = obstacles_of()
    px = fig.dpi / 72
    placed, out = [], []
    pad = 1.0 * px
    for item in items:
        ax, (x, y), text, colour = item
        w, h, _ = renderer.get_text_width_height_descent(text, FontProperties(size=7), False)
        ax_, ay_ = ax.transData.transform((x, y))
        bounds = bounds_of(ax)
        best = None
        for r in LABEL_RADII:
            for ang in (angles_of(item) if angles_of else LABEL_ANGLES):
                c, s = math.cos(math.radians(ang)), math.sin(math.radians(ang))
                px0, py0 = ax_ + r * c * px, ay_ + r * s * px
                ha = "left" if c > 0.3 else "right" if c < -0.3 else "center"
                va = "bottom" if s > 0.3 else "top" if s < -0.3 else "center"
                x0 = {"left": px0, "right": px0 - w, "center": px0 - w / 2}[ha]
                y0 = {"bottom": py0, "top": py0 - h, "center": py0 - h / 2}[va]
                box = Bbox.from_extents(x0, y0, x0 + w, y0 + h)
                big = box.padded(pad)
                hit = sum(_area(big, o) for o in obstacles + placed)
                inside = (box.x0 >= bounds.x0 and box.x1 <= bounds.x1
                          and box.y0 >= bounds.y0 and box.y1 <= bounds.y1)
                score = (not inside, hit)
                if best is None or score < best[0]:
                    best = (score, box, r, c, s, ha, va)
                if inside and hit == 0:
                    break
            if best[0] == (False, 0):
                break
        _, box, r, c, s, ha, va = best
        placed.append(box)
        arrow = (dict(arrowstyle="-", color=colour, lw=0.5, shrinkA=0,
                      shrinkB=FOUND_MS / 2 + 0.5) if r > LEADER_FROM else None)
        t = ax.annotate(text, (x, y), xytext=(r * c, r * s), textcoords="offset points",
                        fontsize=7, ha=ha, va=va, color=colour, annotation_clip=False,
                        arrowprops=arrow)
        t.set_gid(RAY_LABEL_GID)
        t.set_in_layout(False)
        out.append(t)
    return out


def _area(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _directions_1d(snap, V, mass, sign, convex, axes, title, floor=None, gibbs=None):
    if axes is None:
        fig = _figure((WIDTH, WIDTH))
        ax = fig.add_subplot(projection="polar")
    else:
        ax = axes[0] if np.iterable(axes) else axes
        fig = ax.figure
    ang = np.arctan2(V[:, 1], V[:, 0])
    bins = np.linspace(-np.pi, np.pi, 181)
    for s in (1, -1):
        if not np.any(sign == s):       # no bar, no entry in the key
            continue
        h, _ = np.histogram(ang[sign == s], bins=bins, weights=mass[sign == s])
        ax.bar(bins[:-1], h, width=np.diff(bins), color=SIGN_COLOURS[s], alpha=0.6,
               align="edge", label="mass of a > 0" if s > 0 else "mass of a < 0")
    rmax = ax.get_rmax()
    labels = []
    for i, q in enumerate(snap["rays"]):
        t = math.atan2(q["direction"][1], q["direction"][0])
        ax.plot([t, t], [0, rmax], color=SIGN_COLOURS[q["sign"]], lw=0.9,
                label="ray found (r0 heaviest)" if i == 0 else "_")
        # outside the disc, at the end of its line (placed last, clear of everything)
        labels.append((ax, (t, rmax), f"r{i}", SIGN_COLOURS[q["sign"]]))
    if convex is not None and len(convex[0]):
        ts = [math.atan2(v[1], v[0]) for v in convex[0]]
        ax.plot(ts, [rmax * 0.95] * len(ts), **dict(EXACT, ms=8), label=_exact_label(floor))
    if gibbs is not None and len(gibbs[0]):
        ts = [math.atan2(v[1], v[0]) for v in gibbs[0]]
        ax.plot(ts, [rmax * 0.8] * len(ts), **dict(GIBBS, ms=7), gid=GIBBS_GID,
                label=_gibbs_label(snap))
    marked = [math.atan2(q["direction"][1], q["direction"][0]) for q in snap["rays"]]
    for extra in (convex, gibbs):
        if extra is not None:
            marked += [math.atan2(v[1], v[0]) for v in extra[0]]
    # the radial scale along the widest gap between the marked directions, clear of them
    ax.set_rlabel_position(np.rad2deg(seam_longitude(marked)) if marked else 90)
    ax.tick_params(labelsize=7)
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(nbins=3))     # three radii labelled, not seven
    ax.set_title(title + "\nangle of (w, b); radius: mass fraction per 2° bin", pad=14)
    # under the disc, not over the angle labels (315° sat under a legend in the corner)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1, frameon=False)

    def obstacles():
        return (_marker_boxes(fig, [ax]) + [t.get_window_extent() for t in ax.texts]
                + [t.get_window_extent() for t in ax.get_xticklabels() + ax.get_yticklabels()
                   if t.get_text()]
                + [ax.title.get_window_extent()]
                + [leg.get_window_extent() for leg in [ax.get_legend()] if leg is not None])

    def outward(item):          # away from the centre first, then turning either way
        (x, y), (cx, cy) = item[0].transData.transform(item[1]), item[0].bbox.corners(
            ).mean(0)
        out = math.degrees(math.atan2(y - cy, x - cx))
        return [out + k for k in (0, 25, -25, 50, -50, 75, -75, 100, -100)]
    _place_labels(fig, labels, obstacles, lambda _: fig.bbox, outward)
    return fig


#: The parallels a map's row of longitude labels may sit on, in the order tried.
LABEL_PARALLELS = (0, -30, 30, -55, 55)
#: The least angle (degrees, in map coordinates) between a label's anchor and a marker.
LABEL_CLEARANCE = 20


def _lon_labels(ax, centre, marks):
    """Meridians every 60° of absolute longitude (0° among them), labelled in one row: on the
    first parallel of :data:`LABEL_PARALLELS` (the equator first) where no marker
    (``marks``: map coordinates) lies within :data:`LABEL_CLEARANCE` of any label; if no
    parallel is clear for all, each label on the first one clear for it."""
    import matplotlib.patheffects as pe
    absolute = np.deg2rad(np.arange(-120, 181, 60))
    pos = _wrap(absolute - centre)
    keep = np.abs(np.abs(pos) - np.pi) > np.deg2rad(15)      # not on the seam
    ax.set_xticks(np.sort(pos[keep]))
    ax.set_xticklabels([])
    parallels = np.deg2rad(LABEL_PARALLELS)

    def clear(x, lat):
        return all(math.hypot(x - mx, lat - my) > np.deg2rad(LABEL_CLEARANCE)
                   for mx, my in marks)
    row = next((lat for lat in parallels if all(clear(x, lat) for x in pos[keep])), None)
    out = []
    for lon_abs, x in zip(absolute[keep], pos[keep]):
        lat = row if row is not None else next(
            (lat for lat in parallels if clear(x, lat)), parallels[-1])
        deg = int(round(np.rad2deg(_wrap(lon_abs))))
        deg = 180 if deg == -180 else deg          # the seam's meridian reads 180°
        out.append(ax.text(x, lat, f"{deg}°".replace("-", "−"), fontsize=7, color="0.25",
                           ha="center", va="center", path_effects=[
                               pe.withStroke(linewidth=2, foreground="white")]))
    return out


def _directions_2d(snap, V, mass, sign, convex, axes, title, floor=None, gibbs=None):
    from matplotlib.colors import LogNorm
    from matplotlib.lines import Line2D
    ray_lon = [math.atan2(q["direction"][1], q["direction"][0]) for q in snap["rays"]]
    for extra in (convex, gibbs):
        if extra is not None:
            ray_lon += [math.atan2(v[1], v[0]) for v in extra[0]]
    centre = _wrap(seam_longitude(ray_lon) + np.pi) if ray_lon else 0.0   # seam opposite
    rounded = np.deg2rad(30 * round(np.rad2deg(centre) / 30))     # round tick labels if the
    if all(abs(_wrap(r - rounded - np.pi)) > np.deg2rad(12) for r in ray_lon):  # seam stays clear
        centre = rounded
    if axes is None:
        fig = _figure((WIDTH, 4.1))
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
    labels = []
    for ax, s in zip(axes, (1, -1)):
        im = ax.pcolormesh(le, be, np.ma.masked_less_equal(dens[s].T, top * 1e-3),
                           cmap="magma_r", norm=norm, rasterized=True)
        n_s, marks = 0, []
        for i, q in enumerate(snap["rays"]):
            if q["sign"] != s:
                continue
            n_s += 1
            v = np.asarray(q["direction"])
            x, yv = _wrap(math.atan2(v[1], v[0]) - centre), math.asin(max(-1, min(1, v[2])))
            marks.append((x, yv))
            ax.plot(x, yv, "o", mfc="none", mec=SIGN_COLOURS[s], ms=FOUND_MS, mew=1.0)
            labels.append((ax, (x, yv), f"r{i}", SIGN_COLOURS[s]))
        for extra, style, gid in ((convex, EXACT, None), (gibbs, GIBBS, GIBBS_GID)):
            if extra is None:
                continue
            for v, cs in zip(*extra):
                if np.sign(cs) == s:
                    x = _wrap(math.atan2(v[1], v[0]) - centre)
                    yv = math.asin(max(-1, min(1, v[2])))
                    marks.append((x, yv))
                    ax.plot(x, yv, **style, gid=gid)
        ax.set_title(f"a {'>' if s > 0 else '<'} 0: {n_s} ray{'s' if n_s != 1 else ''}",
                     pad=3)
        _lon_labels(ax, centre, marks)
        ax.set_yticks(np.deg2rad([-60, -30, 0, 30, 60]))
        ax.set_yticklabels(["−60°", "−30°", "0°", "30°", "60°"], fontsize=7)
        ax.grid(True, alpha=0.35, lw=0.5)
    axes[-1].set_xlabel("longitude: angle of (w₁, w₂); latitude: arcsin(b / |(w, b)|)",
                        fontsize=7)
    fig.colorbar(im, ax=axes, label="mass fraction per steradian [1/sr]", shrink=0.7,
                 pad=0.02)
    key = []
    if snap["rays"]:
        key.append(Line2D([], [], marker="o", ls="", mfc="none", mec="0.3", ms=FOUND_MS,
                          label="ray found (r0 heaviest)"))
    if any(any(ln.get_marker() == EXACT["marker"] for ln in ax.lines) for ax in axes):
        key.append(Line2D([], [], **dict(EXACT, ms=9), label=_exact_label(floor)))
    if any(ln.get_gid() == GIBBS_GID for ax in axes for ln in ax.lines):
        key.append(Line2D([], [], **dict(GIBBS, ms=8), label=_gibbs_label(snap)))
    if key:
        fig.legend(handles=key, loc="outside lower center", ncol=1, frameon=False, fontsize=7)
    fig.suptitle(title, fontsize=8)
    # last, once the layout is known: every label clear of the others and of the markers
    def obstacles():
        return _marker_boxes(fig, axes) + [t.get_window_extent() for ax in axes
                                           for t in ax.texts]
    _place_labels(fig, labels, obstacles, lambda ax: ax.bbox)
    return fig
