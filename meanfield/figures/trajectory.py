"""The trajectory figure of one run (:func:`plot_trajectory`): the run against time."""

from __future__ import annotations

import numpy as np

from analysis.time_average import chains_of
from meanfield.figures.common import WIDTH, _figure, _rc


def plot_trajectory(rep, run, *, axes=None):
    """The run against time ``t = step · η``: risk (log axis: its changes within a stage are
    small against its range across stages), mean ``|θ|²`` and the stationarity statistic
    (drift of the time-averaged residuals, THEORY §2, log axis) with the drift the stage's
    verdict allows, the temperatures' stages shaded and labelled, the snapshot frames marked.
    A run of several chains (``dynamics.chains``) draws every chain, one colour each, with a
    legend entry per chain: chains that do not overlap are what a large R̂ means.

    Parameters
    ----------
    rep : dict or None
        The analysis (``analyze_run``): the verdicts of its ladder rows give each stage's
        threshold, ``z_crit · 2 · mcse`` (the two half-windows' means differ with standard
        error about twice the MCSE of the second half's mean, ``analysis.stationarity``);
        ``None`` or rows without a verdict: no threshold drawn.
    run : meanfield.store.Run
        Complete or in progress (its committed rows).
    axes : three matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` before the first observation.

    Raises
    ------
    meanfield.errors.RunFileError
        The run file cannot be read (the particles of a snapshot load from it).
    TypeError
        The run is given first (the order of this function before it took ``rep, run``).
    """
    if hasattr(rep, "observables") or isinstance(run, dict):
        raise TypeError("plot_trajectory(rep, run): the analysis comes first and the run "
                        "second, as in every figure; got the run first")
    obs = run.observables
    if not len(obs["risk"]["step"]):
        return None
    eta = run.eta
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
        series = [("risk", "risk [y²]", True), ("mean_sq_norm", "mean |θ|² [θ²]", False),
                  ("stationarity", "drift of f̄ [y]", True)]
        chains = chains_of(run)
        for ax, (name, label, logy) in zip(axes, series):
            v = np.stack([np.asarray(c.observables[name]["value"], float) for c in chains])
            for k in range(len(chains)):
                ax.plot(t, v[k], lw=0.8 if len(chains) == 1 else 0.6, color=f"C{k % 10}",
                        alpha=1.0 if len(chains) == 1 else 0.8,
                        label=f"chain {k}" if len(chains) > 1 and ax is axes[0] else "_")
            ax.set_ylabel(label)
            if logy and np.any(v > 0):
                _log_axis(ax)
            for s, (lo, hi) in enumerate(bounds):
                if s % 2:
                    ax.axvspan(lo * eta, hi * eta, color="0.92", lw=0)
            for fs in run.frame_time:
                ax.axvline(fs, color="C3", lw=0.6, ls=":")
            ax.grid(True, alpha=0.3, lw=0.5)
        thr = _thresholds(rep, taus, bounds, eta)
        for k, (t0, t1, level) in enumerate(thr):
            axes[2].plot([t0, t1], [level, level], color="C3", lw=1.0, ls="--",
                         label="verdict's threshold z·2·MCSE" if k == 0 else "_")
        handles = (axes[0].get_legend_handles_labels()[0]
                   + axes[2].get_legend_handles_labels()[0])
        if handles:             # under the panels: inside, it covered a stage's threshold
            fig.legend(handles=handles, loc="outside lower center", frameon=False, fontsize=7,
                       ncol=min(len(handles), 4))
        top = axes[0]
        for tau, (lo, hi) in zip(taus, bounds):
            top.text((lo + hi) / 2 * eta, 1.02, f"τ = {tau:.0e}",
                     transform=top.get_xaxis_transform(), ha="center", va="bottom", fontsize=7)
        axes[-1].set_xlabel("time t = step · η  (dotted: snapshot frames)")
        axes[-1].set_xlim(0, bounds[-1][1] * eta)
        if not run.complete:
            fig.suptitle(f"run in progress: {len(t)} observations so far", fontsize=7)
    return fig


def _thresholds(rep, taus, bounds, eta):
    """``(t_start, t_end, level)`` of each stage whose ladder row has a verdict with an MCSE:
    the drift ``z_crit · 2 · mcse`` above which the verdict calls the stage not stationary."""
    rows = {r["tau"]: r for r in (rep or {}).get("ladder", []) if isinstance(r, dict)}
    out = []
    for tau, (lo, hi) in zip(taus, bounds):
        v = (rows.get(tau) or {}).get("stationarity")
        if isinstance(v, dict) and v.get("mcse") and v.get("z_crit"):
            # the verdict judges the stage's second half
            out.append(((lo + hi) / 2 * eta, hi * eta, 2 * v["z_crit"] * v["mcse"]))
    return out


def _log_axis(ax):
    """A log axis labelled in plain numbers at every tick, 1 to 9 times a power of ten (the
    risk spans less than a decade: Matplotlib's default labelled none or used 1.6×10⁻¹)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    subs = np.arange(1.0, 10.0) if hi / lo < 10 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}".replace("-", "−")))
    ax.yaxis.set_minor_formatter(NullFormatter())
