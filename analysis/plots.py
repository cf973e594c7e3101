"""Figures of the report (matplotlib, Agg backend): predictor with kink lines, particle
directions with rays marked, and ladder curves."""

from __future__ import annotations

import numpy as np

STYLE = {"figure.dpi": 120, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9,
         "axes.titlesize": 10, "savefig.bbox": "tight"}


def _plt():
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    return plt


def _box(X, pad=0.35):
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.maximum(hi - lo, 1e-9)
    return lo - pad * span, hi + pad * span


def plot_predictor(path, X, y, predictors, kinks=None, title=""):
    """Predictor over the data. ``predictors`` is a list of ``(label, f)`` where ``f`` maps an
    (m, d) array to (m,). ``d = 1``: curves; ``d = 2``: heat map of the last predictor with its
    kink lines; other ``d``: nothing is drawn and ``None`` is returned."""
    plt = _plt()
    X = np.asarray(X, float)
    d = X.shape[1]
    with plt.rc_context(STYLE):
        if d == 1:
            lo, hi = _box(X)
            xs = np.linspace(lo[0], hi[0], 600)[:, None]
            fig, ax = plt.subplots(figsize=(6, 3.6))
            cmap = plt.get_cmap("viridis")
            for k, (lab, f) in enumerate(predictors):
                ax.plot(xs[:, 0], f(xs), color=cmap(k / max(1, len(predictors) - 1)), label=lab)
            for kk in (kinks or []):
                ax.axvline(kk.offset / kk.normal[0], color="0.5", ls=":", lw=0.8)
            ax.scatter(X[:, 0], y, color="k", zorder=5, s=18, label="data")
            ax.set_xlabel("x")
            ax.set_ylabel("f(x)")
            ax.legend(fontsize=7)
        elif d == 2:
            lo, hi = _box(X)
            g0 = np.linspace(lo[0], hi[0], 160)
            g1 = np.linspace(lo[1], hi[1], 160)
            G0, G1 = np.meshgrid(g0, g1)
            lab, f = predictors[-1]
            F = f(np.c_[G0.ravel(), G1.ravel()]).reshape(G0.shape)
            fig, ax = plt.subplots(figsize=(5.4, 4.6))
            vmax = max(np.abs(F).max(), np.abs(y).max())
            im = ax.pcolormesh(G0, G1, F, cmap="RdBu_r", vmin=-vmax, vmax=vmax, shading="auto")
            fig.colorbar(im, ax=ax, label="f(x)")
            for kk in (kinks or []):
                nrm, off = kk.normal, kk.offset
                if abs(nrm[1]) > abs(nrm[0]):
                    ax.plot(g0, (off - nrm[0] * g0) / nrm[1], "k--", lw=0.9)
                else:
                    ax.plot((off - nrm[1] * g1) / nrm[0], g1, "k--", lw=0.9)
            ax.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", vmin=-vmax, vmax=vmax,
                       edgecolors="k", s=40, zorder=5)
            ax.set_xlim(lo[0], hi[0])
            ax.set_ylim(lo[1], hi[1])
            ax.set_xlabel("x1")
            ax.set_ylabel("x2")
            title = title or lab
        else:
            return None
        ax.set_title(title)
        fig.savefig(path)
        plt.close(fig)
    return path


def plot_directions(path, theta, rays=None, title=""):
    """Particle directions ``v = (w, b)/|(w, b)|`` weighted by mass ``|a||u|``; rays marked.
    ``d = 1``: polar histogram on the circle; ``d = 2``: (longitude, latitude) of ``v`` on the
    2-sphere; other ``d``: ``None``."""
    from analysis.rays import directions
    plt = _plt()
    theta = np.asarray(theta, float)
    V, _, mass = directions(theta)
    sign = np.sign(theta[:, 0])
    D = V.shape[1]
    with plt.rc_context(STYLE):
        if D == 2:
            fig = plt.figure(figsize=(4.6, 4.6))
            ax = fig.add_subplot(projection="polar")
            ang = np.arctan2(V[:, 1], V[:, 0])
            bins = np.linspace(-np.pi, np.pi, 181)
            for s, col in ((1, "tab:red"), (-1, "tab:blue")):
                h, _ = np.histogram(ang[sign == s], bins=bins, weights=mass[sign == s])
                ax.bar(bins[:-1], h / max(mass.sum(), 1e-300), width=np.diff(bins), color=col,
                       alpha=0.6, align="edge", label="a>0" if s > 0 else "a<0")
            for q in (rays or []):
                ax.plot([np.arctan2(q.direction[1], q.direction[0])] * 2, [0, ax.get_rmax()],
                        color="k", lw=0.8)
            ax.set_title(title or "directions (w, b)/|(w, b)|, mass-weighted")
            ax.legend(fontsize=7, loc="lower right")
        elif D == 3:
            fig, ax = plt.subplots(figsize=(6.4, 3.6))
            lon = np.degrees(np.arctan2(V[:, 1], V[:, 0]))
            lat = np.degrees(np.arcsin(np.clip(V[:, 2], -1, 1)))
            sz = 4 + 60 * mass / max(mass.max(), 1e-300)
            ax.scatter(lon, lat, s=sz, c=np.where(sign > 0, "tab:red", "tab:blue"), alpha=0.4,
                       linewidths=0)
            for q in (rays or []):
                v = q.direction
                ax.scatter(np.degrees(np.arctan2(v[1], v[0])), np.degrees(np.arcsin(v[2])),
                           marker="x", c="k", s=50)
            ax.set_xlim(-180, 180)
            ax.set_ylim(-90, 90)
            ax.set_xlabel("longitude of v (deg, w1-w2 plane)")
            ax.set_ylabel("latitude of v (deg, toward b)")
            ax.set_title(title or "directions on S² (red a>0, blue a<0; x = rays)")
        else:
            return None
        fig.savefig(path)
        plt.close(fig)
    return path


def plot_ladder(path, taus, series: dict, title="low-temperature limit"):
    """Curves against temperature τ (log axis): ``series`` maps a label to values per τ."""
    plt = _plt()
    taus = np.asarray(taus, float)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(series), figsize=(3.3 * len(series), 3.0),
                                 constrained_layout=True)
        axes = np.atleast_1d(axes)
        for ax, (lab, vals) in zip(axes, series.items()):
            ax.plot(taus, np.asarray(vals, float), "o-")
            if lab.startswith(("rays", "hyperplanes")):
                ax.yaxis.get_major_locator().set_params(integer=True)
            ax.set_xscale("log")
            ax.set_xlabel("temperature τ")
            ax.set_ylabel(lab)
            ax.invert_xaxis()
        fig.suptitle(title)
        fig.savefig(path)
        plt.close(fig)
    return path
