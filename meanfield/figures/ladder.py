"""The ladder figure of one run's analysis (:func:`plot_ladder`): the low-temperature limit
against the temperature."""

from __future__ import annotations

import contextlib

import numpy as np

from analysis.time_average import time_average_observable
from meanfield.figures.common import (
    NOT_STATIONARY_GID,
    WIDTH,
    _figure,
    _rc,
    mark_not_stationary,
)

#: Points (1/72 in) by which the exact Gibbs counts sit beside the measured ones in (a).
GIBBS_DODGE = 7.0
GIBBS_GID = "gibbs-counts"
#: How much lower (points) every other τ label sits: a 7 pt label ``10⁻³`` is 8.5 pt tall.
STAGGER = 9.5


def _gibbs_counts(rows):
    """``(indices, J_gibbs, K_gibbs)`` of the ladder rows that carry the exact Gibbs
    measure's counts (``J_gibbs``, ``K_gibbs`` not ``None``), ``None`` when no row does (no
    Gibbs reference, or a report written before the keys existed)."""
    idx = [i for i, r in enumerate(rows)
           if r.get("J_gibbs") is not None and r.get("K_gibbs") is not None]
    if not idx:
        return None
    return (np.array(idx), np.array([rows[i]["J_gibbs"] for i in idx], float),
            np.array([rows[i]["K_gibbs"] for i in idx], float))


def plot_ladder(rep, run, *, axes=None):
    """The low-temperature limit against ``τ`` (log axis, hot on the left, the exact ``τ → 0``
    limit at the right end).

    Panels: (a) rays ``J`` and kink hyperplanes ``K`` with the bounds ``2P − 1`` and ``P − 1``
    of [LJM26], the exact Gibbs measure's ``J``, ``K`` at each ``τ`` (the rows' ``J_gibbs``,
    ``K_gibbs``; open triangles :data:`GIBBS_DODGE` points beside the measured counts, none
    where a row has none or a report predates the keys) and the convex solution's ``J``,
    ``K``; (b) the risk, time-averaged over the
    second half of each temperature with its standard error, and the risk of the exact
    references (Gibbs at each ``τ``, convex at ``τ → 0``); (c) ``W2`` to the previous
    temperature, of the particle measures (left axis, units of ``θ``) and of the rays (right
    axis, chord distance on the unit sphere of directions); (d) the RMS over the data of the
    predictor's distance to the references (units of ``y``; the risk of (b) is
    ``(1/n) Σ (f − y)²``): time-averaged, to the Gibbs
    reference at each ``τ`` and to the convex limit at the coldest, and at the last snapshot
    of each ``τ`` to the convex limit. A stage judged not stationary (its row's
    ``stationary`` is ``False``) is marked in every panel by a light red band behind its
    abscissa (:func:`meanfield.figures.common.mark_not_stationary`), never by a mark over its
    counts. Every tick is labelled (every other label a line lower). One compact legend in two
    columns sits under the panels (:func:`_legend_below`), so that no data point is covered.

    A ladder that visits a temperature more than once (``taus = [1e-2, 1e-3, 1e-2]``, a
    reheating study) is drawn against the stage instead, evenly spaced in the order run, each
    tick labelled with its ``τ`` (on a ``τ`` axis the visits would share one abscissa and hide
    each other); the ``τ → 0`` limit stays at the right end.

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
    axis = _Abscissa(rows)
    xs = axis.x                                 # where each stage is drawn
    refs = rep.get("references") or {}
    if "skipped" in refs:
        refs = {}
    cvx = refs.get("convex") if refs else None
    t0 = axis.t0                                # where the τ → 0 limit is drawn
    with _rc():
        has_refs = bool(refs) or any(r["dist_to_reference"] is not None for r in rows)
        if axes is None:
            fig = _figure((WIDTH, 5.0 if has_refs else 4.2))
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
        # the measured counts (integers); a stage judged not stationary is marked by a band
        # behind its abscissa in every panel, never by a mark over its counts
        J = np.array([r["J"] for r in rows], float)
        K = np.array([r["K"] for r in rows], float)
        a.plot(xs, J, "o-", color="C0", ms=4, label="rays J", zorder=3)
        a.plot(xs, K, "s--", color="C1", ms=4.5, mfc="none", label="kinks K", zorder=3)
        bad = np.array([r.get("stationary") is False for r in rows])
        # the exact Gibbs measure's counts at each τ, beside the measured ones (GIBBS_DODGE
        # points to the right, colder on a τ axis, so that equal counts do not hide each other)
        gibbs = _gibbs_counts(rows)
        if gibbs is not None:
            from matplotlib.transforms import ScaledTranslation
            shift = a.transData + ScaledTranslation(GIBBS_DODGE / 72, 0, fig.dpi_scale_trans)
            gx, gj, gk = gibbs
            gx = xs[gx]
            a.plot(gx, gj, "^", color="C0", ms=4, mfc="none", mew=0.9, transform=shift,
                   label="J Gibbs", gid=GIBBS_GID, zorder=3)
            a.plot(gx, gk, "v", color="C1", ms=4, mfc="none", mew=0.9, transform=shift,
                   label="K Gibbs", gid=GIBBS_GID, zorder=3)
        P = rep.get("P")
        if P is not None:
            a.axhline(2 * P - 1, color="0.3", lw=0.8, ls="-")
            a.axhline(P - 1, color="0.3", lw=0.8, ls=":")
            counts = np.concatenate([J, K] + ([gibbs[1], gibbs[2]] if gibbs else []))
            # P−1's label below its line, or above it where counts sit just below the line
            # (within a factor 2) and the label would cover their markers
            low_up = bool(np.any((counts < P - 1) & (counts >= (P - 1) / 2)))
            for val, name, up in ((2 * P - 1, "2P−1", True), (P - 1, "P−1", low_up)):
                # 2P−1 above its line: neither label is crossed by a line
                a.annotate(f"{name} = {val}", (0.03, val), xycoords=a.get_yaxis_transform(),
                           xytext=(0, 1.5 if up else -1.5), textcoords="offset points",
                           va="bottom" if up else "top", ha="left", fontsize=7, color="0.3")
            # log above 1 and linear below, so that a count of 0 is drawn (a log axis lost it)
            a.set_yscale("symlog", linthresh=1, linscale=0.4)
            a.set_ylim(-0.15, (2 * P - 1) * 4)      # room above the top bound for its label
        cc = rep.get("convex_counts")
        if cc:          # the τ → 0 counts of the report's table (its ray mass floor)
            a.plot([t0], [cc["J"]], "o", color="C0", mfc="white", ms=5, label="τ → 0 (exact)")
            a.plot([t0], [cc["K"]], "s", color="C1", mfc="none", ms=6)
        a.set_ylabel("count")
        a.set_title("(a) rays J, kinks K", loc="left")
        # (b) risk
        m, e = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
        for i, r in enumerate(rows):
            with contextlib.suppress(ValueError):       # no observation in the window
                m[i], e[i] = time_average_observable(run, "risk", r["stage"])
        if np.isfinite(m).any():
            b.errorbar(xs, m, yerr=e, fmt="o-", ms=3.5, capsize=2, color="C0",
                       label="risk, time avg.")
        g = [x for x in refs.get("gibbs", []) if "skipped" not in x] if refs else []
        if g:
            y = np.asarray(run.y, float)
            b.plot([axis.of(x) for x in g],
                   [np.mean((np.asarray(x["f_reference"]) - y) ** 2) for x in g], "x",
                   color="k", ms=5, label="exact Gibbs")
        if cvx and "f_reference" in cvx:
            b.plot([t0], [np.mean((np.asarray(cvx["f_reference"]) - np.asarray(run.y)) ** 2)],
                   "+", color="k", ms=7, label="exact τ → 0")
        b.set_ylabel("risk [y²]")                # (1/n)Σ(f − y)², in the docstring
        b.set_title("(b) risk", loc="left")
        # (c) W2
        w2 = [np.nan if r["w2_to_previous"] is None else r["w2_to_previous"] for r in rows]
        w2r = [np.nan if r.get("w2_rays_to_previous") is None else r["w2_rays_to_previous"]
               for r in rows]
        if not np.isfinite(w2).any() and not np.isfinite(w2r).any():
            # not an empty frame: say why (fewer than two stages, or analyze --no-w2)
            c.text(0.5, 0.5, "no W2 in this report:\nfewer than two stages, or analyze --no-w2",
                   ha="center", va="center", transform=c.transAxes, fontsize=8,
                   color="0.3", gid="no-w2")
            c.set_yticks([])
        else:
            c.plot(xs, w2, "o-", ms=3.5, color="C0", label="particle measures (left axis)")
        c.set_ylabel("W2 of particles [θ]", color="C0")
        c.tick_params(axis="y", colors="C0")
        cr = None
        if np.isfinite(w2r).any():      # another quantity: its own axis, its own unit
            cr = c.twinx()
            cr.plot(xs, w2r, "s--", ms=3.5, mfc="none", color="C2",
                    label="rays, chord on the sphere (right axis)")
            cr.set_ylabel("W2 of rays [chord]", color="C2")
            cr.tick_params(axis="y", colors="C2", labelsize=7)
            cr.set_ylim(bottom=0)
        c.set_ylim(bottom=0)
        c.set_title("(c) W2 to previous τ", loc="left")
        # (d) distances to the references
        if d is not None:       # one distance throughout: the RMS over the data points
            if g:
                d.plot([axis.of(x) for x in g], [x["rms_diff"] for x in g], "o-", ms=3.5,
                       color="C0", label="f̄ to exact Gibbs")
            if cvx and "rms_diff" in cvx:
                d.plot([t0], [cvx["rms_diff"]], "+", color="k", ms=7, mew=1.2,
                       label="f̄ (coldest τ) to exact τ → 0")
            dist = [np.nan if r["dist_to_reference"] is None else r["dist_to_reference"]
                    for r in rows]
            if np.isfinite(dist).any():
                d.plot(xs, dist, "s:", ms=3, mfc="none", color="C3",
                       label="f (last snapshot) to τ → 0")
            d.set_yscale("log")
            d.set_ylabel("RMS distance [y]")
            d.set_title("(d) to exact", loc="left")
        panels = [ax for ax in (a, b, c, d) if ax is not None]
        for ax in panels:
            mark_not_stationary(ax, xs, bad, log=not axis.by_stage)
        _legend_below(fig, a, b, d, t0, axis.note)
        for ax in panels:
            axis.apply(ax)
            ax.grid(True, alpha=0.3, lw=0.5)
        for ax in panels[2:]:
            ax.set_xlabel(axis.label)
        if d is not None:
            _log_ticks(d)
    return fig


class _Abscissa:
    """Where the ladder figure draws each stage: at its ``τ`` on a log axis (hot on the left),
    or, when a temperature comes back, at its stage number with its ``τ`` as the tick label,
    so that every visit has an abscissa of its own. ``t0`` is where the ``τ → 0`` limit goes
    (right of the coldest, resp. of the last stage)."""

    def __init__(self, rows):
        self.taus = np.array([r["tau"] for r in rows], float)
        self.stages = [int(r.get("stage", k)) for k, r in enumerate(rows)]
        self.by_stage = len(set(self.taus.tolist())) < len(self.taus)
        self.label = "τ [units of risk]"
        if self.by_stage:
            self.x = np.arange(len(rows), dtype=float)
            self.t0 = float(len(rows))
            self.note = "\nx: the stages in the order run (a τ comes back)"
        else:
            self.x = self.taus.copy()
            self.t0 = float(self.taus.min() / 10)
            self.note = ""

    def of(self, row) -> float:
        """The abscissa of a report row that names its ``stage`` (else its ``τ``, first
        visit)."""
        if not self.by_stage:
            return float(row["tau"])
        if "stage" in row and int(row["stage"]) in self.stages:
            return float(self.x[self.stages.index(int(row["stage"]))])
        first = np.flatnonzero(self.taus == float(row["tau"]))
        return float(self.x[first[0]]) if len(first) else np.nan

    def apply(self, ax) -> None:
        """Scale, limits and ticks: one tick per stage and one ``→0`` at ``t0``, every one
        labelled (:func:`set_tau_ticks`: with three ticks or more every other label a line
        lower, as 7 pt labels of adjacent decades touch in a half-column panel)."""
        if self.by_stage:
            ax.set_xscale("linear")
            ax.set_xlim(-0.5, self.t0 + 0.5)
        else:
            ax.set_xscale("log")
            ax.set_xlim(self.taus.max() * 3, self.t0 / 3)
        set_tau_ticks(ax, list(self.x) + [self.t0], list(self.taus) + ["→0"])
        ax.minorticks_off()


def set_tau_ticks(ax, where, taus, stagger: bool | None = None) -> None:
    """A tick at each of ``where`` labelled with the temperature of ``taus`` (a string, e.g.
    ``"→0"``, is its own label), every one labelled, in one format for the axis
    (:func:`_tau_label`); with ``stagger`` (by default with three ticks or more) every
    other label a line lower, so that neighbours never print over each other (a label left
    out lost that temperature's value)."""
    powers = all(_power_of_ten(t) for t in taus if not isinstance(t, str) and t != 0)
    ax.set_xticks(list(where))
    ax.set_xticklabels([t if isinstance(t, str) else _tau_label(t, powers) for t in taus],
                       fontsize=7)
    if stagger is None:
        stagger = len(taus) >= 3
    if stagger:
        ticks = ax.xaxis.get_major_ticks(len(where))
        base = ticks[0].get_pad()
        for k, tick in enumerate(ticks):
            tick.set_pad(base + (STAGGER if k % 2 else 0))      # one 7 pt line lower


def _power_of_ten(t) -> bool:
    k = np.log10(t)
    return bool(abs(k - round(k)) < 1e-9)


def _tau_label(t, powers: bool = True):
    """``10⁻³`` for a power of ten on an axis whose temperatures all are (short enough for
    two panels a row at 7 pt), else ``2e-3``, ``1e-3`` (one format on one axis: ``5e-3`` next
    to ``10⁻⁴`` read as two kinds of number; ``0`` for zero, a stage of a reheating ladder
    may be one)."""
    if t == 0:
        return "0"
    if powers and _power_of_ten(t):
        return f"$10^{{{int(round(np.log10(t)))}}}$"
    return f"{t:.0e}".replace("e-0", "e-")


def _log_ticks(ax):
    """Labelled 1-2-5 ticks on a log y axis (a range under a decade had no label at all)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    lo, hi = ax.get_ylim()
    subs = (1.0, 2.0, 5.0) if hi / lo < 30 else (1.0,)     # a label a decade over wide ranges
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}".replace("-", "−")))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _legend_below(fig, a, b, d, t0, note=""):
    """One compact legend under the panels, two columns: an entry per series drawn in (a),
    (b) and (d), named by its panel (the two series of (c) are named by their axes, each
    label in its series' colour); the exact ``τ → 0`` counts of (a) (the markers at ``t0``, a
    circle for ``J`` and a square for ``K``) share one entry, and so do the exact Gibbs
    counts; the band of a stage not stationary (every panel) has one entry, last. ``note``,
    when given, is the legend's title."""
    from matplotlib.legend_handler import HandlerTuple
    handles, labels = [], []
    exact = [ln for ln in a.lines if len(ln.get_xdata()) == 1 and ln.get_xdata()[0] == t0]
    gibbs = [ln for ln in a.lines if ln.get_gid() == GIBBS_GID]
    band = None
    for panel, ax in (("(a)", a), ("(b)", b), ("(d)", d)):
        if ax is None:
            continue
        hs, ls = ax.get_legend_handles_labels()
        for h, lab in zip(hs, ls):
            if getattr(h, "get_gid", lambda: None)() == NOT_STATIONARY_GID:
                band = band or (h, lab)
                continue
            if ax is a and (h in exact or h in gibbs):
                continue
            handles.append(h)
            labels.append(f"{panel} {lab}")
        if ax is a and gibbs:
            handles.append(tuple(gibbs))
            labels.append("(a) exact Gibbs J, K")
        if ax is a and exact:
            handles.append(tuple(exact))
            labels.append("(a) exact τ → 0 J, K")
    if band is not None:
        handles.append(band[0])
        labels.append(band[1])
    leg = fig.legend(handles, labels, loc="outside lower center", ncol=2, frameon=False,
                     fontsize=7, handler_map={tuple: HandlerTuple(ndivide=None)},
                     title=note.strip() or None, title_fontsize=7, handlelength=1.8,
                     handletextpad=0.5, columnspacing=1.0, labelspacing=0.2,
                     borderaxespad=0.2)
    leg._legend_box.align = "left"
