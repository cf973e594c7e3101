"""The trajectory figure of one run (:func:`plot_trajectory`): the run against time."""

from __future__ import annotations

import math

import numpy as np

from analysis.time_average import chains_of
from meanfield.figures.common import WIDTH, _figure, _rc
from solvers.integrators import integrator_named


def plot_trajectory(rep, run, *, axes=None):
    """The run against time ``t = step · η``: risk (log axis: its changes within a stage are
    small against its range across stages), mean ``|θ|²`` and the stationarity statistic
    (drift of the time-averaged residuals, THEORY §2, log axis) with the drift the stage's
    verdict allows, the temperatures' stages shaded and labelled, the snapshot frames marked.
    A run of several chains (``dynamics.chains``) draws every chain, one colour each, with a
    legend entry per chain: chains that do not overlap are what a large R̂ means.
    Over each stage with a verdict the stationarity panel says why: its R̂ and bulk/tail ESS
    and, for a stage not stationary, the verdict's reasons in one word each (``drift``,
    ``parity``, ``R̂``, ``ESS``, ``unstable``, ``rays``, ``budget``, ``few obs.``; the full
    sentences are in the report).

    Parameters
    ----------
    rep : dict or None
        The analysis (``analyze_run``): the verdicts of its ladder rows give each stage's
        threshold, ``z_crit · 2 · mcse`` (the two half-windows' means differ with standard
        error about twice the MCSE of the second half's mean, ``analysis.stationarity``),
        and the annotations (``stationary``, ``reasons``, ``rhat``, ``ess_bulk``,
        ``ess_tail``); rows are matched to stages by their ``stage`` (by ``tau`` in reports
        without it); ``None`` or rows without a verdict: no threshold or annotation drawn.
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
    taus = run.taus
    bounds = [run.schedule.stage_bounds(s) for s in range(len(taus))]   # steps (lo, hi]
    # the x axis: mean-field time t = step·η for a time-stepping integrator; passes for the
    # exact sampler, whose step is a pass of Metropolis moves and no time step
    passes = integrator_named(run.integrator).step_unit == "pass"
    eta = 1.0 if passes else run.eta
    t = np.asarray(obs["risk"]["step" if passes else "time"], float)
    frames_at = run.frame_step if passes else run.frame_time
    with _rc():
        if axes is None:
            fig = _figure((WIDTH, 3.8))
            axes = fig.subplots(3, 1, sharex=True)
        else:
            axes = list(np.ravel(axes))
            fig = axes[0].figure
        series = [("risk", "risk [y²]", True), ("mean_sq_norm", "mean |θ|² [θ²]", False),
                  ("stationarity", "drift of f̄ [y]", True)]
        chains = chains_of(run)
        values = {}
        for ax, (name, label, logy) in zip(axes, series):
            v = values[name] = np.stack([np.asarray(c.observables[name]["value"], float)
                                         for c in chains])
            for k in range(len(chains)):
                ax.plot(t, v[k], lw=0.8 if len(chains) == 1 else 0.6, color=f"C{k % 10}",
                        alpha=1.0 if len(chains) == 1 else 0.8,
                        label=f"chain {k}" if len(chains) > 1 and ax is axes[0] else "_")
            ax.set_ylabel(label)
            off_scale = (_settled_limits(ax, v, np.asarray(obs[name]["step"]), bounds, logy)
                         if name != "stationarity" else None)
            if logy and np.any(v > 0) and name != "stationarity":   # that one: after its
                _log_axis(ax)                                       # thresholds, below
            if off_scale is not None:
                ax.text(0.99, 0.96, off_scale, transform=ax.transAxes, ha="right", va="top",
                        fontsize=7, color="0.3", gid="off-scale", bbox=NOTE_GROUND)
            for s, (lo, hi) in enumerate(bounds):
                if s % 2:
                    ax.axvspan(lo * eta, hi * eta, color="0.92", lw=0)
            for fs in frames_at:
                ax.axvline(fs, color="C3", lw=0.6, ls=":")
            ax.grid(True, alpha=0.3, lw=0.5)
        verdicts = _verdicts(rep, taus)
        thr = _thresholds(verdicts, bounds, eta)
        for k, (t0, t1, level) in enumerate(thr):
            axes[2].plot([t0, t1], [level, level], color="C3", lw=1.0, ls="--",
                         label="verdict's threshold z·2·MCSE" if k == 0 else "_")
        if np.any(values["stationarity"] > 0):
            _log_axis(axes[2])          # its range includes the thresholds' lines
        handles = (axes[0].get_legend_handles_labels()[0]
                   + axes[2].get_legend_handles_labels()[0])
        if handles:             # under the panels: inside, it covered a stage's threshold
            fig.legend(handles=handles, loc="outside lower center", frameon=False, fontsize=7,
                       ncol=min(len(handles), 4))
        _annotate_verdicts(axes[2], verdicts, bounds, eta)
        top = axes[0]
        for tau, (lo, hi) in zip(taus, bounds):
            top.text((lo + hi) / 2 * eta, 1.02, f"τ = {tau:.0e}",
                     transform=top.get_xaxis_transform(), ha="center", va="bottom", fontsize=7)
        axes[-1].set_xlabel("passes (dotted: snapshot frames)" if passes
                            else "time t = step · η  (dotted: snapshot frames)")
        axes[-1].set_xlim(0, bounds[-1][1] * eta)
        if not run.complete:
            fig.suptitle(f"run in progress: {len(t)} observations so far", fontsize=7)
    return fig


#: The share of each stage, from its start, left out of the risk and mean |θ|² axes' range
#: when it would flatten the rest: the relaxation from the stage's start.
SETTLE = 0.05


def _settled_limits(ax, v, steps, bounds, logy):
    """Set the y range of ``ax`` to the values ``v`` (chains × observations, at ``steps``)
    drawn after the first :data:`SETTLE` of each stage (on a log axis: the positive ones, spans
    in log units), widened by 5 % of their span below and 30 % above (room for the note),
    when the values before would otherwise stretch the axis to more than twice that span
    (the default run's first observation is 0.17 against a risk of 0.113-0.122 after it).
    Returns the note that says so, with the values left off scale, or ``None`` when the axis
    keeps every value."""
    settled = np.zeros(len(steps), bool)
    for lo, hi in bounds:
        settled |= (steps > lo + SETTLE * (hi - lo)) & (steps <= hi)
    ok = np.isfinite(v) & (v > 0 if logy else True)
    w, allv = v[:, settled][ok[:, settled]], v[ok]
    if not w.size:
        return None
    if logy:                                   # spans compared as the axis shows them
        w, allv = np.log(w), np.log(allv)
    lo, hi = float(w.min()), float(w.max())
    span = hi - lo
    if span <= 0 or allv.max() - allv.min() <= 2 * span:
        return None
    ylo, yhi = lo - 0.05 * span, hi + 0.3 * span       # the top: room for the note
    if logy:
        ylo, yhi = math.exp(ylo), math.exp(yhi)
    ax.set_ylim(ylo, yhi)
    off = [x for x in (float(v[ok].min()), float(v[ok].max())) if not ylo <= x <= yhi]
    if not off:
        return None
    return ("off scale at a stage's start: " + " and ".join(f"{x:.3g}" for x in off)
            ).replace("-", "−")


#: The ground of the notes written over a panel: white, over the frame lines and the grid.
NOTE_GROUND = {"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85}


def _verdicts(rep, taus):
    """The verdict of each stage (``None`` without one): the ladder row of that ``stage``, or
    in a report whose rows do not name it, the row of its ``tau``."""
    rows = [r for r in (rep or {}).get("ladder", []) if isinstance(r, dict)]
    by_stage = {int(r["stage"]): r for r in rows if "stage" in r}
    by_tau = {r["tau"]: r for r in rows if "stage" not in r}
    out = []
    for s, tau in enumerate(taus):
        v = (by_stage.get(s) or by_tau.get(tau) or {}).get("stationarity")
        out.append(v if isinstance(v, dict) else None)
    return out


def _thresholds(verdicts, bounds, eta):
    """``(t_start, t_end, level)`` of each stage whose verdict has an MCSE: the drift
    ``z_crit · 2 · mcse`` above which the verdict calls the stage not stationary."""
    out = []
    for v, (lo, hi) in zip(verdicts, bounds):
        if v and v.get("mcse") and v.get("z_crit"):
            # the verdict judges the stage's second half
            out.append(((lo + hi) / 2 * eta, hi * eta, 2 * v["z_crit"] * v["mcse"]))
    return out


#: One word for each kind of reason a verdict gives (the start of its sentence,
#: ``analysis.stationarity`` and ``analysis.convergence``), in the order tried.
REASON_WORDS = (("R-hat", "R̂"), ("too few effective samples", "ESS"),
                ("too few observations", "few\u00a0obs."), ("drift", "drift"),
                ("parity", "parity"), ("unstable step", "unstable"),
                ("ray weights", "rays"), ("budget spent", "budget"))


def reason_word(reason: str) -> str:
    """The one word :func:`plot_trajectory` writes for a verdict's ``reason`` (a sentence of
    ``Verdict.reasons``); an unknown one gives its first word."""
    for start, word in REASON_WORDS:
        if reason.startswith(start):
            return word
    return (reason.split() or ["?"])[0].rstrip(":,")


def verdict_note(v: dict, width: int = 20) -> str:
    """The annotation of one stage's verdict (a report row's ``stationarity``), short lines
    (a stage is narrow at column width): ``stationary`` or ``no:`` and the reasons' words,
    wrapped at ``width`` characters, then ``R̂`` and the bulk/tail ESS per chain (as the
    report's table gives them; ``–`` for a value not computed)."""
    import textwrap
    K = max(1, int(v.get("n_chains") or 1))

    def num(x, fmt, per=1):
        return "–" if x is None or not np.isfinite(x) else format(x / per, fmt)
    words = list(dict.fromkeys(reason_word(r) for r in v.get("reasons") or []))
    if v.get("stationary"):
        head = "stationary"
    else:
        head = "\n".join(textwrap.wrap("no: " + ", ".join(words), max(width, 8),
                                       break_long_words=False, break_on_hyphens=False)) \
            if words else "not stationary"
    return (f"{head}\nR̂ {num(v.get('rhat'), '.3f')}\n"
            f"ESS/chain\n{num(v.get('ess_bulk'), '.0f', K)}/{num(v.get('ess_tail'), '.0f', K)}")


#: Characters of a verdict note's line per unit of the time axis' width (7 pt text on the
#: panel of a one-column figure: about 60 across the whole axis).
NOTE_CHARS = 60


def _annotate_verdicts(ax, verdicts, bounds, eta):
    """Each stage's :func:`verdict_note` at the top of the stationarity panel, centred on the
    stage, its lines as wide as the stage allows, on a white ground over the frame lines, red
    for a stage not stationary; the y axis gains headroom above the data so that the notes
    do not cover it, and its ticks stay within the data's range."""
    from matplotlib.ticker import FixedLocator
    notes = [(v, lo, hi) for v, (lo, hi) in zip(verdicts, bounds) if v]
    if not notes:
        return
    lo_y, hi_y = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if lo_y <= t <= hi_y]
    if ax.get_yscale() == "log" and lo_y > 0:
        ax.set_ylim(lo_y, hi_y * (hi_y / lo_y) ** 1.6)     # the data in the lower 40 %
    else:
        ax.set_ylim(lo_y, hi_y + 1.6 * (hi_y - lo_y))
    if len(ticks) > 3:                   # the data sit in 40 % of the panel: every other one
        ticks = ticks[::-2][::-1]
    if ticks:
        ax.yaxis.set_major_locator(FixedLocator(ticks))
    total = max(bounds[-1][1] - bounds[0][0], 1)
    for v, lo, hi in notes:
        ax.text((lo + hi) / 2 * eta, 0.96, verdict_note(v, int(NOTE_CHARS * (hi - lo) / total)),
                transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=7,
                linespacing=1.0, color="0.1" if v.get("stationary") else "C3",
                bbox=NOTE_GROUND)


def _log_axis(ax):
    """A log axis labelled in plain numbers: at every tick 1 to 9 times a power of ten (the
    risk spans less than a decade: Matplotlib's default labelled none or used 1.6×10⁻¹), or,
    on a range narrower than a factor 4 (a risk of 0.113-0.122 had no such tick, and the
    fallback labelled three ticks "0.12"; 0.0006-0.002 had seven labels crowded at its
    foot), at about four round values, with the digits that tell them apart."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    if hi / lo < 4:
        loc = MaxNLocator(nbins=4, steps=[1, 2, 5, 10])
        ax.yaxis.set_major_locator(loc)
        ticks = [t for t in loc.tick_values(lo, hi) if lo <= t <= hi]
        # the fewest digits at which every tick prints as its own value
        digits = next((k for k in range(12) if all(
            math.isclose(float(f"{t:.{k}f}"), t, rel_tol=1e-9, abs_tol=1e-15)
            for t in ticks)), 12)
        ax.yaxis.set_major_formatter(FuncFormatter(
            lambda v, _: f"{v:.{digits}f}".replace("-", "−")))
    else:
        subs = np.arange(1.0, 10.0) if hi / lo < 10 else (1.0,)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}".replace("-", "−")))
    ax.yaxis.set_minor_formatter(NullFormatter())
