"""What every figure of meanfield shares: the Matplotlib import (Agg backend), the styles, the
atomic writer :func:`save`, and the look-ups of one run's analysis that several figures make."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    set aside while importing, so that the figures are still written. Without a home folder
    (``HOME`` unset, a user id with no passwd entry) matplotlib's configuration and font cache
    go to a temporary folder, as matplotlib would put them, without its multi-line warning.
    """
    import os
    import sys
    if "matplotlib" not in sys.modules and not os.environ.get("MPLCONFIGDIR"):
        try:
            Path.home()
        except RuntimeError:
            import tempfile
            os.environ["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="matplotlib-")
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


#: How a figure marks a stage judged not stationary: a light red band behind the data across
#: the stage's abscissa (a mark on the point itself hid the count under it).
NOT_STATIONARY = {"color": "#d62728", "alpha": 0.16, "lw": 0, "zorder": 0}
NOT_STATIONARY_GID = "not-stationary"


def mark_not_stationary(ax, xs, bad, *, log: bool, label: str = "stage not stationary"):
    """Mark the abscissae ``xs[bad]`` as stages judged not stationary: a light red band
    (:data:`NOT_STATIONARY`, gid :data:`NOT_STATIONARY_GID`) behind everything drawn, centred
    on the stage and narrower than the distance to its neighbours among ``xs``, so that the
    data at the stage stay readable and the band names one stage. ``log``: ``xs`` are drawn
    on a log axis (a zero there, e.g. on a symlog axis, gets a band as wide as the smallest
    positive's). The first band carries ``label`` (the legend's entry); returns the bands."""
    xs = np.asarray(xs, float)
    bad = np.asarray(bad, bool)
    out = []
    if not bad.any():
        return out
    pos = np.unique(xs[xs > 0]) if log else np.unique(xs)
    for k, x in enumerate(np.unique(xs[bad])):     # one band per abscissa, however many rows
        if log and x > 0:
            lx = np.log10(pos)
            gaps = np.abs(lx - np.log10(x))
            gaps = gaps[gaps > 0]
            h = min(0.25, 0.35 * gaps.min()) if gaps.size else 0.25
            lo, hi = x / 10 ** h, x * 10 ** h
        elif log:               # zero on a symlog axis
            m = pos.min() if pos.size else 1.0
            lo, hi = -0.3 * m, 0.3 * m
        else:
            gaps = np.abs(pos - x)
            gaps = gaps[gaps > 0]
            h = min(0.3, 0.35 * gaps.min()) if gaps.size else 0.3
            lo, hi = x - h, x + h
        band = ax.axvspan(lo, hi, **NOT_STATIONARY, label=label if k == 0 else "_")
        band.set_gid(NOT_STATIONARY_GID)
        out.append(band)
    return out


def _figure(figsize):
    import_matplotlib()
    from matplotlib.figure import Figure
    return Figure(figsize=figsize, layout="constrained")


def _rc():
    return import_matplotlib().rc_context(RUN_STYLE)


def _frame_of(run, step):
    k = int(np.nonzero(np.asarray(run.frame_step) == step)[0][0])
    return run.frame(k)
