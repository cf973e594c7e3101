"""The public figure functions on a real run file: each takes the analysis and the run, draws
into given Axes or a new single-column figure, and returns the figure; the report writes them
in the chosen format, with the trajectory figure."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import plane8_toml, run_one_thread

import meanfield
from meanfield import figures


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    d = tmp_path_factory.mktemp("figs")
    out = run_one_thread(plane8_toml({"dynamics.taus": [1e-2, 1e-3, 1e-4],
                                      "output.snapshots_per_tau": 1}), d)
    rep = meanfield.analyze_run(out, d / "rep", w2=True, fmt="svg", references=False,
                                 sensitivity=False)
    return meanfield.open_run(out), rep, d / "rep"


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_predictor_one_panel_per_temperature_and_labelled_kinks(analysed):
    run, rep, _ = analysed
    fig = meanfield.plot_predictor(rep, run)
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert len(panels) == 3                                   # one heat map per τ
    assert fig.get_size_inches()[0] == pytest.approx(figures.WIDTH)   # single column
    # every kink line carries the numbers of its rays, as in report.md
    last = rep["snapshots"][-1]
    labels = _texts(fig)
    for kk in last["kinks"]:
        assert ",".join(f"r{r}" for r in kk["rays"]) in labels
    # the data points are drawn over every panel, filled with y on the predictor's scale
    for ax in panels:
        pts = ax.collections[-1]
        np.testing.assert_array_equal(pts.get_offsets(), run.X)
        np.testing.assert_array_equal(pts.get_array(), run.y)
        assert pts.norm.vmin == -pts.norm.vmax                  # zero is white
    # six stages: a grid two panels wide, not a strip
    many = dict(rep, snapshots=[dict(s, stage=2 * s["stage"] + k, tau=t) for s in rep["snapshots"]
                                for k, t in enumerate((s["tau"], s["tau"] * 1.01))])
    w, h = meanfield.plot_predictor(many, run).get_size_inches()
    assert w == pytest.approx(figures.WIDTH) and h > 4


def test_figures_draw_into_given_axes(analysed):
    from matplotlib.figure import Figure
    run, rep, _ = analysed
    fig = Figure()
    axes = fig.subplots(1, 3)
    assert meanfield.plot_predictor(rep, run, axes=axes) is fig
    assert all(ax.get_images() for ax in axes)
    fig2 = Figure()
    ax4 = fig2.subplots(2, 2)
    assert meanfield.plot_ladder(rep, run, axes=ax4) is fig2
    fig3 = Figure()
    ax3 = fig3.subplots(3, 1, sharex=True)
    assert meanfield.plot_trajectory(rep, run, axes=ax3) is fig3
    fig4 = Figure()
    moll = [fig4.add_subplot(1, 2, i + 1, projection="mollweide") for i in range(2)]
    assert meanfield.plot_directions(rep, run, axes=moll) is fig4


def test_directions_seam_title_and_exact_rays(analysed):
    from solvers.convex import convex
    run, rep, _ = analysed
    c = convex(run.X, run.y, run.lam)
    fig = meanfield.plot_directions(rep, run, convex=(c.directions, c.signs))
    assert fig._suptitle.get_text().startswith("τ = 1e-04: J = ")
    assert "thermal halo" in fig._suptitle.get_text()
    maps = [ax for ax in fig.axes if ax.name == "mollweide"]
    assert len(maps) == 2
    # one open square per ray of the exact limit given, in the panel of its sign
    squares = sum(1 for ax in maps for ln in ax.lines if ln.get_marker() == "s")
    assert squares == len(c.weights)
    with pytest.raises(ValueError, match="no snapshot at tau"):
        meanfield.plot_directions(rep, run, tau=0.5)


def test_seam_goes_into_the_widest_gap():
    deg = np.deg2rad
    # rays at ±179°: a map centred at 0 splits them; the seam must move away from them
    seam = figures.seam_longitude(deg([179.0, -179.0, 10.0]))
    assert min(abs(np.rad2deg(figures.directions._wrap(seam - deg(a)))) for a in (179, -179, 10)) > 60
    assert figures.seam_longitude(deg([0.0, 90.0])) == pytest.approx(deg(-135.0))


def test_ladder_has_the_bounds_and_no_empty_panel(analysed):
    run, rep, _ = analysed
    fig = meanfield.plot_ladder(rep, run)
    # the panels carry a title; (c)'s second y axis (the rays' W2) is a twin without one
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    axes = [ax for ax in panels if ax.has_data()]
    assert len(axes) == len(panels) == 3          # no reference in this analysis
    assert all(ax.has_data() for ax in fig.axes)
    with_ref = dict(rep, ladder=[dict(r, dist_to_reference=0.01 / (i + 1))
                                 for i, r in enumerate(rep["ladder"])])
    four = meanfield.plot_ladder(with_ref, run)
    panels4 = [ax for ax in four.axes if ax.get_title(loc="left")]
    assert len(panels4) == 4 and all(ax.has_data() for ax in four.axes)
    texts = _texts(fig)
    assert f"2P−1 = {2 * rep['P'] - 1}" in texts and f"P−1 = {rep['P'] - 1}" in texts
    # the risk panel shows the time average with error bars from the observables
    from analysis.time_average import time_average_observable
    m, e = time_average_observable(run, "risk", 2)
    b = axes[1]
    line = b.lines[0]
    assert line.get_ydata()[-1] == pytest.approx(m)
    assert e > 0


def test_ladder_without_w2_says_why_its_panel_is_blank(analysed):
    """``analyze --no-w2`` (or one temperature) drew panel (c) as an empty frame."""
    run, rep, _ = analysed
    none = dict(rep, ladder=[dict(r, w2_to_previous=None, w2_rays_to_previous=None)
                             for r in rep["ladder"]])
    fig = meanfield.plot_ladder(none, run)
    c = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("(c)"))
    assert not c.lines and [t.get_gid() for t in c.texts] == ["no-w2"]
    assert "--no-w2" in c.texts[0].get_text()
    full = meanfield.plot_ladder(rep, run)         # with W2: no such text
    assert "no-w2" not in [t.get_gid() for ax in full.axes for t in ax.texts]


def test_trajectory_marks_stages_and_frames(analysed):
    run, rep, _ = analysed
    fig = meanfield.plot_trajectory(rep, run)
    top = fig.axes[0]
    assert [t.get_text() for t in top.texts if t.get_gid() != "off-scale"] == [
        "τ = 1e-02", "τ = 1e-03", "τ = 1e-04"]
    np.testing.assert_allclose(top.lines[0].get_xdata(), run.observables["risk"]["time"])
    frame_lines = [ln for ln in top.lines[1:]]
    assert len(frame_lines) == run.n_frames


def test_every_figure_of_the_table_takes_the_analysis_then_the_run(analysed):
    import inspect
    run, rep, _ = analysed
    assert list(figures.RUN_FIGURES) == ["predictor", "directions", "ladder", "trajectory"]
    for name, fig in figures.RUN_FIGURES.items():
        params = list(inspect.signature(fig.draw).parameters.values())
        assert [p.name for p in params[:2]] == ["rep", "run"], name
        assert params[2].name == "axes" and params[2].kind is inspect.Parameter.KEYWORD_ONLY
        assert fig.draw(rep, run) is not None, name      # d = 2: every figure draws
        assert fig.caption.endswith("."), name
    with pytest.raises(TypeError, match="the analysis comes first and the run second"):
        meanfield.plot_trajectory(run, rep)             # the order before every figure had one


def test_report_writes_the_figures_in_the_chosen_format(analysed):
    _, rep, outdir = analysed
    names = sorted(p.name for p in outdir.iterdir() if p.suffix == ".svg")
    assert names == ["directions.svg", "ladder.svg", "predictor.svg", "trajectory.svg"]
    md = (outdir / "report.md").read_text()
    assert "![trajectory.svg](trajectory.svg)" in md and "thermal halo" in md
    assert not list(outdir.glob("*.png"))
    assert rep.to_dataframe("rays").shape[0] == sum(r["J"] for r in rep["ladder"])
    with pytest.raises(ValueError, match="unknown table"):
        rep.to_dataframe("nope")


@pytest.mark.slow
def test_analyze_format_pdf_from_the_cli(analysed, tmp_path):
    from meanfield import cli
    run, _, _ = analysed
    assert cli.main(["analyze", run.path, "-o", str(tmp_path / "r"), "--format", "pdf",
                     "--no-references", "--no-w2", "--quiet"]) == 0
    pdfs = sorted(p.name for p in (tmp_path / "r").glob("*.pdf"))
    assert pdfs == ["directions.pdf", "ladder.pdf", "predictor.pdf", "trajectory.pdf"]
    assert (tmp_path / "r" / "ladder.pdf").read_bytes()[:5] == b"%PDF-"


# --- single column, read back from the Figure: sizes, legends, tick labels, plotted arrays ---

def _drawn(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    if fig.canvas is None or not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _visible_texts(fig):
    from matplotlib.text import Text
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
            and (t.axes is None or t.axes.get_visible())]


def _legends(fig):
    return list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]


def _legend_texts(fig):
    return [t.get_text() for leg in _legends(fig) for t in leg.get_texts()]


def _assert_readable(fig, width=None):
    """Text at least 7 pt, the figure one column wide, every text inside it (a title wider
    than the column was cut at both ends), and no plotted point under a legend."""
    r = _drawn(fig)
    small = [(t.get_text(), t.get_fontsize()) for t in _visible_texts(fig)
             if t.get_fontsize() < 7]
    assert not small, small
    assert fig.get_size_inches()[0] == pytest.approx(width or figures.WIDTH)
    drawn, page = fig.get_tightbbox(r), fig.bbox_inches      # what is drawn, in inches
    assert drawn.x0 >= page.x0 - 0.01 and drawn.x1 <= page.x1 + 0.01, (drawn, page)
    boxes = [leg.get_window_extent(r) for leg in _legends(fig)]
    for ax in fig.axes:
        for ln in ax.lines:
            xy = ax.transData.transform(np.c_[ln.get_xdata(), ln.get_ydata()].astype(float))
            for bb in boxes:
                inside = [p for p in xy if np.isfinite(p).all() and bb.contains(*p)]
                assert not inside, (ax.get_title(), ln.get_label())
        for col in ax.collections:
            off = col.get_offsets()
            if len(off) and col.get_transform() is not None and hasattr(col, "get_sizes"):
                xy = col.get_offset_transform().transform(off)
                for bb in boxes:
                    assert not any(bb.contains(*p) for p in xy), ax.get_title()


@pytest.fixture(scope="module")
def with_convex(analysed, tmp_path_factory):
    """The same run analysed with its convex reference (the report's τ → 0 counts)."""
    run, _, _ = analysed
    rep = meanfield.analyze_run(run.path, None, w2=True, convex=True, references=False,
                                 sensitivity=False)
    return run, rep


def test_ladder_legend_units_and_separate_axes(with_convex):
    run, rep = with_convex
    assert rep.get("convex_counts")
    # the convex reference's comparison, as analyze_run(references=True) adds it (its Gibbs
    # references are too slow for this test); values distinct from every other series
    cvx = {"n_rays": rep["convex_counts"]["J"], "rms_diff": 0.0123, "max_abs_diff": 0.0456,
           "f_reference": list(np.asarray(run.y) + 0.01)}
    rep = dict(rep, references={"convex": cvx})
    fig = meanfield.plot_ladder(rep, run)
    _assert_readable(fig)
    labels = _legend_texts(fig)
    # one entry per series drawn in (a), (b), (d), named by panel; the exact τ → 0 J and K
    # share one entry; (c)'s two series are named by their own (coloured) axes
    assert "(a) exact τ → 0 J, K" in labels
    assert "(a) rays J" in labels and "(a) kinks K" in labels
    assert not any("τ → 0 (exact)" == lab for lab in labels)
    assert len(labels) == len(set(labels))
    main = [ax for ax in fig.axes if ax.get_title(loc="left")]
    a, b, c, d = main
    t0 = a.get_xticks()[-1]                             # where the τ → 0 limit is drawn
    exact = [ln for ln in a.lines if list(ln.get_xdata()) == [t0]]
    assert len(exact) == 2 and {ln.get_marker() for ln in exact} == {"o", "s"}
    bands = [h for ax in (a, b, d) for h in ax.get_legend_handles_labels()[0]
             if getattr(h, "get_gid", lambda: None)() == figures.common.NOT_STATIONARY_GID]
    others = sum(1 for ax in (a, b, d) for h in ax.get_legend_handles_labels()[0]
                 if h not in exact and h not in bands)
    # + the τ → 0 J and K, + one entry for the bands of a stage not stationary (every panel)
    assert len(fig.legends[0].get_texts()) == others + 1 + bool(bands)
    assert not any(lab.startswith("(c)") for lab in labels)
    from matplotlib.colors import same_color
    assert same_color(c.yaxis.label.get_color(), c.lines[0].get_color())
    # the bound labels: 2P−1 above its line, P−1 below its own, so no line crosses either
    r = _drawn(fig)
    lines_y = [a.transData.transform((1.0, v))[1] for v in (2 * rep["P"] - 1, rep["P"] - 1)]
    for t in a.texts:
        box = t.get_window_extent(r)
        assert not any(box.y0 < ly < box.y1 for ly in lines_y), t.get_text()
    assert len(a.texts) == 2
    # (c): particle W2 and ray W2 on two labelled axes, each its own series
    twin = [ax for ax in fig.axes if ax not in main]
    assert len(twin) == 1 and twin[0].get_ylabel() == "W2 of rays [chord]"
    assert c.get_ylabel() == "W2 of particles [θ]"
    w2r = [np.nan if x["w2_rays_to_previous"] is None else x["w2_rays_to_previous"]
           for x in rep["ladder"]]
    np.testing.assert_allclose(twin[0].lines[0].get_ydata(), w2r)
    # (d): one distance, the RMS over the data
    assert d.get_ylabel() == "RMS distance [y]"
    plus = [ln for ln in d.lines if ln.get_marker() == "+"]
    assert len(plus) == 1 and plus[0].get_ydata()[0] == pytest.approx(cvx["rms_diff"])
    dist = [x["dist_to_reference"] for x in rep["ladder"]]
    assert any(np.allclose(ln.get_ydata(), dist) for ln in d.lines)
    assert not any("max" in lab for lab in labels)
    for ax in main:
        assert ax.get_ylabel()
    for ax in (c, d):                                   # the bottom row carries the τ axis
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks == ["$10^{-2}$", "$10^{-3}$", "$10^{-4}$", "→0"]
        np.testing.assert_allclose(ax.get_xticks()[:3], [1e-2, 1e-3, 1e-4])
    assert all("[" in ax.get_xlabel() for ax in (c, d))


def test_directions_longitudes_exact_rays_and_key(with_convex):
    run, rep = with_convex
    fig = meanfield.plot_directions(rep, run)
    _assert_readable(fig)
    maps = [ax for ax in fig.axes if ax.name == "mollweide"]
    cc = rep["convex_counts"]
    # the exact markers are the report's τ → 0 rays (its floor), each in its sign's map
    squares = [ln for ax in maps for ln in ax.lines if ln.get_marker() == "s"]
    assert len(squares) == cc["J"]
    for ax, s in zip(maps, (1, -1)):
        n = sum(1 for ln in ax.lines if ln.get_marker() == "s")
        assert n == sum(1 for q in cc["rays"] if np.sign(q["weight"]) == s)
    assert _legend_texts(fig) == ["ray found (r0 heaviest)",
                                  f"exact τ → 0 ray (weight ≥ {100 * cc['floor']:g} % of Σ|c|)"]
    for ax in maps:
        lons = [t.get_text() for t in ax.texts if t.get_text().endswith("°")]
        assert "0°" in lons and set(lons) <= {"−120°", "−60°", "0°", "60°", "120°", "180°"}
        assert not any(t.get_text() for t in ax.get_xticklabels())
        marks = [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in ax.lines]
        for t in ax.texts:
            if t.get_text().endswith("°"):
                x, yv = t.get_position()
                assert all(np.hypot(x - mx, yv - my) > np.deg2rad(20) for mx, my in marks)
    assert "arcsin(b / |(w, b)|)" in maps[-1].get_xlabel()


def test_predictor_key_lists_only_what_is_drawn_and_one_tick_format(analysed):
    import re
    run, rep, _ = analysed
    fig = meanfield.plot_predictor(rep, run)
    _assert_readable(fig)
    drawn = {(ln.get_color(), ln.get_linestyle()) for ax in fig.axes for ln in ax.lines}
    labels = _legend_texts(fig)
    names = {1: "kink of rays with a > 0", -1: "kink of rays with a < 0",
             0: "kink of rays of both signs"}
    for sg, name in names.items():
        colour = figures.SIGN_COLOURS[sg]
        style = {"-": "-", "--": "--", "-.": "-."}[figures.SIGN_STYLES[sg]]
        assert (name in labels) == ((colour, style) in drawn), name
    assert "training point, fill = y" in labels
    titles = [leg.get_title().get_text() for leg in _legends(fig)]
    has_labels = any(t.get_text().startswith("r") for ax in fig.axes for t in ax.texts)
    assert ("r0, r1, …: the rays of report.md" in titles) == has_labels
    number = re.compile(r"^−?\d+(\.\d+)?$")
    for ax in (ax for ax in fig.axes if ax.get_images()):
        ticks = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        assert ticks and all(number.match(t) for t in ticks), ticks
        assert "[" in ax.get_xlabel()


def _one_d_run():
    """A stub run of 1-D data (what the 1-D figures read), two clusters of particles."""
    rng = np.random.default_rng(0)
    X = np.array([[-5.0], [-4.0], [4.0], [5.0]])
    y = np.array([4.0, 1.0, 1.0, 4.0])
    dirs = np.array([[1.0, 3.5], [-1.0, 3.5]]) / np.hypot(1.0, 3.5)
    theta = np.concatenate([np.c_[np.full(50, 2.0), dirs[k] + 0.01 * rng.normal(size=(50, 2))]
                            for k in range(2)])

    class Run:
        frame_step = np.array([100])

        def frame(self, k):
            return theta
    run = Run()
    run.X, run.y = X, y
    kinks = [{"normal": [1.0], "offset": -3.5, "rays": [0]},
             {"normal": [1.0], "offset": 3.5, "rays": [1]}]
    rays = [{"direction": list(dirs[0]), "sign": 1}, {"direction": list(dirs[1]), "sign": 1}]
    rep = {"snapshots": [{"tau": 1e-4, "stage": 0, "step": 100, "rays": rays, "kinks": kinks,
                          "thresholds": {"halo_mass_fraction": 0.1}}],
           "convex_counts": {"J": 2, "K": 2, "floor": 0.01,
                             "rays": [{"direction": list(v), "weight": 1.0} for v in dirs]}}
    return run, rep


def test_one_d_figures_keep_the_key_off_the_data():
    run, rep = _one_d_run()
    fig = meanfield.plot_predictor(rep, run)
    _assert_readable(fig)
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.collections[0].get_offsets(), np.c_[run.X[:, 0], run.y])
    r = _drawn(fig)
    # the key lies under the axes, where its marker cannot read as a training point
    assert ax.get_legend().get_window_extent(r).y1 <= ax.get_window_extent(r).y0
    assert _legend_texts(fig) == ["τ = 1e-04 (K = 2)", "training points (x, y)"]
    polar = meanfield.plot_directions(rep, run)
    _assert_readable(polar)
    pax = polar.axes[0]
    leg = pax.get_legend().get_window_extent(_drawn(polar))
    assert leg.y1 <= pax.get_window_extent(_drawn(polar)).y0 + 1     # under the disc
    # every particle has a > 0: no entry for the (undrawn) a < 0 mass
    assert sorted(_legend_texts(polar)) == sorted([
        "mass of a > 0", "ray found (r0 heaviest)", "exact τ → 0 ray (weight ≥ 1 % of Σ|c|)"])
    # each ray's label lies clear of the exact squares (a ray found where the limit has one
    # put its label under the square) and of the angle labels
    r = _drawn(polar)
    labels = [t for t in pax.texts if t.get_text() in ("r0", "r1")]
    assert len(labels) == 2
    squares = [ln for ln in pax.lines if ln.get_marker() == "s"]
    half = squares[0].get_markersize() / 2 * polar.dpi / 72          # pixels
    centres = pax.transData.transform(np.c_[squares[0].get_xdata(), squares[0].get_ydata()])
    angles = [t.get_window_extent(r) for t in pax.get_xticklabels() if t.get_text()]
    for t in labels:
        bb = t.get_window_extent(r)
        for cx, cy in centres:
            assert bb.x1 < cx - half or bb.x0 > cx + half or bb.y1 < cy - half \
                or bb.y0 > cy + half, t.get_text()
        assert not any(bb.overlaps(a) for a in angles), t.get_text()


def test_trajectory_log_risk_and_the_verdicts_threshold(analysed):
    run, rep, _ = analysed
    fig = meanfield.plot_trajectory(rep, run)
    _assert_readable(fig)
    risk, _, stat = fig.axes[:3]
    assert risk.get_yscale() == "log" and stat.get_yscale() == "log"
    dashed = [ln for ln in stat.lines if ln.get_linestyle() == "--"]
    rows = [r for r in rep["ladder"] if (r.get("stationarity") or {}).get("mcse")]
    assert rows and len(dashed) == len(rows)
    for ln, r in zip(dashed, rows):
        v = r["stationarity"]
        np.testing.assert_allclose(ln.get_ydata(), 2 * v["z_crit"] * v["mcse"])
    assert _legend_texts(fig) == ["verdict's threshold z·2·MCSE"]
    assert all("[" in ax.get_ylabel() for ax in fig.axes[:3])


def test_highdim_figure_is_one_column():
    from meanfield.figures.highdim import draw_highdim
    from meanfield.highdim.experiment import StudyParams, run_study, summarize
    p = StudyParams(neurons=2, ns=(6, 8), ds=(40, 80), trials=3, seed=0)
    fig = draw_highdim(summarize(p, run_study(p, progress=False)))
    _assert_readable(fig, width=figures.WIDTH)
    top, bottom = fig.axes
    r = _drawn(fig)
    assert top.get_window_extent(r).y0 > bottom.get_window_extent(r).y1     # stacked


def test_ladder_draws_a_count_of_zero(analysed):
    run, rep, _ = analysed
    zero = dict(rep, ladder=[dict(r, K=0, K_measured=0) if i == len(rep["ladder"]) - 1 else r
                             for i, r in enumerate(rep["ladder"])])
    a = meanfield.plot_ladder(zero, run).axes[0]
    k_line = next(ln for ln in a.lines if ln.get_label() == "kinks K")
    assert k_line.get_ydata()[-1] == 0
    lo, hi = a.get_ylim()
    assert lo < 0 < hi and a.get_yscale() == "symlog"     # a log axis could not show it


def test_ladder_draws_each_visit_of_a_temperature_at_its_own_abscissa(analysed):
    run, rep, _ = analysed
    # the run's three stages relabelled as a reheating ladder: 1e-2, 1e-3, then 1e-2 again
    taus = [1e-2, 1e-3, 1e-2]
    reheat = dict(rep, ladder=[dict(r, tau=t) for r, t in zip(rep["ladder"], taus)])
    fig = meanfield.plot_ladder(reheat, run)
    _assert_readable(fig)
    a, b, c = [ax for ax in fig.axes if ax.get_title(loc="left")][:3]
    j_line = next(ln for ln in a.lines if ln.get_label() == "rays J")
    x = np.asarray(j_line.get_xdata(), float)
    assert len(set(x.tolist())) == 3                       # no two stages share an abscissa
    assert list(x) == sorted(x)                            # in the order run
    np.testing.assert_array_equal(j_line.get_ydata(), [r["J"] for r in rep["ladder"]])
    risk = b.lines[0]
    np.testing.assert_array_equal(risk.get_xdata(), x)
    from analysis.time_average import time_average_observable
    assert risk.get_ydata()[2] == pytest.approx(time_average_observable(run, "risk", 2)[0])
    for ax in (a, b, c):
        np.testing.assert_array_equal(ax.get_xticks()[:3], x)
        assert ax.get_xticks()[-1] > x.max()               # the τ → 0 limit on the right
    labels = c.get_xticklabels()                        # the bottom row's: every τ
    assert [t.get_text().strip() for t in labels] == ["$10^{-2}$", "$10^{-3}$", "$10^{-2}$",
                                                      "→0"]
    assert "x: the stages in the order run" in fig.legends[0].get_title().get_text()
    assert c.get_xlabel() == "τ [units of risk]"
    r = _drawn(fig)
    for p, q in zip(labels, labels[1:]):        # neighbours apart, or one of them a line lower
        assert not p.get_window_extent(r).overlaps(q.get_window_extent(r))
    # a reference row names its stage: the second visit's is drawn at the second visit
    g = [{"stage": s, "tau": t, "rms_diff": 0.01 * (s + 1), "f_reference": list(run.y)}
         for s, t in enumerate(taus)]
    with_ref = dict(reheat, references={"gibbs": g})
    d = [ax for ax in meanfield.plot_ladder(with_ref, run).axes
         if ax.get_title(loc="left").startswith("(d)")][0]
    line = next(ln for ln in d.lines if ln.get_label().startswith("f̄ to exact Gibbs"))
    np.testing.assert_array_equal(line.get_xdata(), x)


def _lon_label_positions(ax):
    """``{label: (x, y)}`` of a map's longitude labels, in degrees of map coordinates."""
    return {t.get_text(): tuple(np.rad2deg(t.get_position()))
            for t in ax.texts if t.get_text().endswith("°")}


def test_directions_longitude_labels_sit_in_one_row(with_convex):
    from matplotlib.figure import Figure

    from meanfield.figures import directions as dirs
    run, rep = with_convex
    fig = meanfield.plot_directions(rep, run)
    for ax in (ax for ax in fig.axes if ax.name == "mollweide"):
        pos = _lon_label_positions(ax)
        rows = {round(y, 9) for _, y in pos.values()}
        assert len(rows) == 1, pos                      # no label off its map's row
        marks = [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in ax.lines]
        equator_clear = all(np.hypot(np.deg2rad(x) - mx, my) > np.deg2rad(20)
                            for x, _ in pos.values() for mx, my in marks)
        assert (rows == {0.0}) == equator_clear
    # a marker next to the 120° label's place on the equator: the whole row moves to the
    # first clear parallel, -30°; without markers it is the equator
    ax = Figure().add_subplot(projection="mollweide")
    texts = dirs._lon_labels(ax, 0.0, [(np.deg2rad(114), np.deg2rad(16))])
    assert {t.get_text(): round(np.rad2deg(t.get_position()[1]), 9) for t in texts} == {
        "−120°": -30, "−60°": -30, "0°": -30, "60°": -30, "120°": -30}
    ax = Figure().add_subplot(projection="mollweide")
    assert [np.rad2deg(t.get_position()[1]) for t in dirs._lon_labels(ax, 0.0, [])] == [0] * 5


def test_trajectory_says_why_each_stage_is_or_is_not_stationary(analysed):
    from meanfield.figures.trajectory import verdict_note
    run, rep, _ = analysed
    fig = meanfield.plot_trajectory(rep, run)
    _assert_readable(fig)
    stat = fig.axes[2]
    notes = [t for t in stat.texts]
    assert len(notes) == len(rep["ladder"]) == 3
    eta = run.eta
    for t, r in zip(notes, rep["ladder"]):
        v = r["stationarity"]
        lo, hi = run.schedule.stage_bounds(r["stage"])
        assert lo * eta < t.get_position()[0] < hi * eta          # over its own stage
        head, rhat, ess, per = t.get_text().split("\n")
        assert rhat == f"R̂ {v['rhat']:.3f}"
        assert v["n_chains"] == 1          # one chain: per chain is all of it
        assert (ess, per) == ("ESS/chain", f"{v['ess_bulk']:.0f}/{v['ess_tail']:.0f}")
        assert (head == "stationary") == bool(r["stationary"])
    # made-up verdicts: each reason in one word, in the stage of its row (matched by stage,
    # not by tau: a reheating ladder has two rows of one tau)
    made = [{"stationary": False, "rhat": 1.0512, "ess_bulk": 40.2, "ess_tail": 55.0,
             "mcse": 1e-3, "z_crit": 3.0,
             "reasons": ["drift: late and early windows differ by 5 standard errors (> 3)",
                         "R-hat 1.051 >= 1.01 at f(x_2) (rank-normalised split-R-hat)",
                         "too few effective samples (bulk ESS 40.2 at risk, at least 100 "
                         "needed; autocorrelation time too long for the stage)"]},
            {"stationary": True, "rhat": 1.002, "ess_bulk": 900.0, "ess_tail": 850.0,
             "mcse": 1e-3, "z_crit": 3.0, "reasons": [], "n_chains": 4},
            {"stationary": False, "rhat": None, "ess_bulk": None, "ess_tail": None,
             "reasons": ["too few observations (3) for a verdict"]}]
    rows = [dict(r, tau=1e-2 if r["stage"] != 1 else 1e-3, stationarity=v,
                 stationary=v["stationary"]) for r, v in zip(rep["ladder"], made)]
    fig = meanfield.plot_trajectory(dict(rep, ladder=rows), run)
    texts = [t.get_text() for t in fig.axes[2].texts]
    assert texts == ["no: drift, R̂, ESS\nR̂ 1.051\nESS/chain\n40/55",
                     "stationary\nR̂ 1.002\nESS/chain\n225/212",      # 4 chains: per chain
                     "no: few\u00a0obs.\nR̂ –\nESS/chain\n–/–"]      # one word
    assert [verdict_note(v) for v in made] == texts
    colours = [t.get_color() for t in fig.axes[2].texts]
    assert colours[0] == colours[2] != colours[1]               # not stationary: in red
    # the notes sit above the data: the highest value lies under the lowest note
    r = _drawn(fig)
    ax = fig.axes[2]
    v = np.asarray(run.observables["stationarity"]["value"], float)
    top = ax.transData.transform((0, np.nanmax(v)))[1]
    assert all(t.get_window_extent(r).y0 > top for t in ax.texts)


def test_trajectory_notes_of_long_verdicts_wrap_within_their_stages(analysed):
    """A stage not stationary for four reasons (the default run's coldest: R̂, ESS, drift,
    budget) gave a note wider than its stage, over its neighbour's: the reasons wrap at the
    stage's width, and no two notes overlap."""
    run, rep, _ = analysed
    reasons = ["R-hat 1.032 >= 1.01 at f(x_4)", "too few effective samples (bulk ESS 53.62)",
               "drift: late and early windows differ by 4.09 standard errors (> 3.74)",
               "budget spent: max_steps_per_tau = 320000 steps run"]
    v = {"stationary": False, "rhat": 1.032, "ess_bulk": 54.0, "ess_tail": 529.0,
         "mcse": 1e-4, "z_crit": 3.74, "reasons": reasons}
    rows = [dict(r, stationarity=v, stationary=False) for r in rep["ladder"]]
    fig = meanfield.plot_trajectory(dict(rep, ladder=rows), run)
    _assert_readable(fig)
    r = _drawn(fig)
    ax = fig.axes[2]
    boxes = sorted((t.get_window_extent(r) for t in ax.texts), key=lambda b: b.x0)
    assert len(boxes) == 3
    assert all(p.x1 <= q.x0 for p, q in zip(boxes, boxes[1:]))           # side by side
    panel = ax.get_window_extent(r)
    assert panel.x0 <= boxes[0].x0 and boxes[-1].x1 <= panel.x1
    from meanfield.figures.trajectory import verdict_note
    assert verdict_note(v, 20) == "no: R̂, ESS, drift,\nbudget\nR̂ 1.032\nESS/chain\n54/529"
    assert verdict_note(v, 40).startswith("no: R̂, ESS, drift, budget\n")
    # the stationarity axis labels only the data's decades, not the notes' headroom
    lo = min(t.get_window_extent(r).y0 for t in ax.texts)
    ticks = [t for t in ax.get_yticklabels() if t.get_text()
             and ax.get_ylim()[0] <= t.get_position()[1] <= ax.get_ylim()[1]]
    assert ticks and all(t.get_window_extent(r).y1 <= lo for t in ticks)


def test_trajectory_axis_keeps_the_settled_range_and_says_what_is_off_scale():
    """The default run's first observation (risk 0.167) stretched the risk axis over 0.11-0.17
    while every stage after its start stayed within 0.113-0.122: the axis shows the settled
    range, labelled in distinct numbers, and a note gives the value left off scale."""
    from matplotlib.figure import Figure

    from meanfield.figures import trajectory as tr
    steps = np.arange(100, 30001, 100)
    rng = np.random.default_rng(0)
    v = 0.115 + 0.003 * rng.standard_normal((1, steps.size))
    v[0, :3] = [0.167, 0.14, 0.13]                      # the relaxation from the start
    bounds = [(0, 10000), (10000, 20000), (20000, 30000)]
    ax = Figure().add_subplot()
    ax.plot(steps, v[0])
    note = tr._settled_limits(ax, v, steps, bounds, True)
    tr._log_axis(ax)
    settled = v[0, 5:]
    lo, hi = ax.get_ylim()
    assert lo < settled.min() and settled.max() < hi < 0.14       # 0.14 and 0.167 off scale
    span = np.log(settled.max() / settled.min())                  # room above for the note
    assert np.log(hi / settled.max()) > 0.2 * span
    assert note == "off scale at a stage's start: 0.167"
    ticks = [t for t in ax.get_yticks() if lo <= t <= hi]
    labels = ax.yaxis.get_major_formatter().format_ticks(ticks)
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    for tick, label in zip(ticks, labels):                # each label is its tick's value
        assert float(label.replace("−", "-")) == pytest.approx(tick, rel=1e-9)
    # no transient: the axis is left to Matplotlib, and no note
    calm = Figure().add_subplot()
    calm.plot(steps, settled.repeat(2)[:steps.size])
    before = calm.get_ylim()
    assert tr._settled_limits(calm, settled.repeat(2)[None, :steps.size], steps, bounds,
                              True) is None
    assert calm.get_ylim() == before


def test_predictor_of_one_temperature_fills_the_column(analysed):
    """A run of one temperature (or an interrupted one with one stage analysed) drew its one
    panel a third of the column wide in a figure 1.7 in tall, its colour bar's label cut."""
    run, rep, _ = analysed
    last = rep["snapshots"][-1]
    one = dict(rep, snapshots=[s for s in rep["snapshots"] if s["stage"] == last["stage"]])
    fig = meanfield.plot_predictor(one, run)
    _assert_readable(fig)
    r = _drawn(fig)
    panel = next(ax for ax in fig.axes if ax.get_title().startswith("τ = "))
    assert panel.get_window_extent(r).width >= 0.5 * fig.get_window_extent(r).width
    drawn, page = fig.get_tightbbox(r), fig.bbox_inches
    assert drawn.y0 >= page.y0 - 0.01 and drawn.y1 <= page.y1 + 0.01       # nothing cut


def test_predictor_box_of_data_on_a_line_is_not_flat():
    """The symmetric two-point sets lie on the x₁ axis: the plotted box gets half the x₁ range
    (widened by the pad) in x₂, centred on the data; data spread on both axes keep their own
    ranges widened by 30 %."""
    from meanfield.figures.predictor import _box
    lo, hi = _box(np.array([[2.5, 0.0], [-2.5, 0.0]]))
    np.testing.assert_allclose(lo, [-2.5 - 1.5, -0.5 * 5 * 0.8])
    np.testing.assert_allclose(hi, [2.5 + 1.5, 0.5 * 5 * 0.8])
    lo, hi = _box(np.array([[0.0, 0.0], [4.0, 3.0]]))
    np.testing.assert_allclose(lo, [-1.2, -0.9])
    np.testing.assert_allclose(hi, [5.2, 3.9])


def test_tau_labels_use_one_format_per_axis():
    """Powers of ten as 10⁻ᵏ only when every temperature of the axis is one; a ladder with
    5e-3 labels all its temperatures as 5e-3, 1e-3, 1e-4 (it read 5e-3 next to 10⁻⁴)."""
    from meanfield.figures.ladder import _power_of_ten, _tau_label
    taus = [5e-3, 1e-3, 1e-4]
    powers = all(_power_of_ten(t) for t in taus)
    assert not powers
    assert [_tau_label(t, powers) for t in taus] == ["5e-3", "1e-3", "1e-4"]
    assert [_tau_label(t) for t in (1e-2, 1e-4, 0.0)] == ["$10^{-2}$", "$10^{-4}$", "0"]


# --- issue #43 (reports) and #42 (the exact Gibbs measure's counts and rays), read back ---

def _marker_reach(ln, dpi):
    """Half the extent (pixels) of ``ln``'s marker: from matplotlib's own marker path."""
    from matplotlib.markers import MarkerStyle
    m = MarkerStyle(ln.get_marker())
    ext = m.get_path().transformed(m.get_transform()).get_extents()
    reach = max(abs(ext.x0), abs(ext.x1), abs(ext.y0), abs(ext.y1))
    return (ln.get_markersize() * reach + ln.get_markeredgewidth() / 2) * dpi / 72


def _marker_points(ln):
    """Display positions of ``ln``'s markers (its own transform: an offset one included)."""
    xy = np.c_[ln.get_xdata(), ln.get_ydata()].astype(float)
    return ln.get_transform().transform(xy)


def _has_marker(ln):
    return ln.get_marker() not in (None, "None", "", " ") and ln.get_visible()


def _near_rays(rep):
    """The coldest snapshot with two rays added next to found ones (3° apart): their labels
    printed over their neighbours' ("r.r4")."""
    snaps = list(rep["snapshots"])
    k = max(i for i, x in enumerate(snaps) if x["tau"] == min(y["tau"] for y in snaps))
    snap = dict(snaps[k])
    rays = list(snap["rays"])
    v = np.asarray(rays[0]["direction"], float)
    c, s = np.cos(np.deg2rad(3)), np.sin(np.deg2rad(3))
    rays.append(dict(rays[0], direction=[c * v[0] - s * v[1], s * v[0] + c * v[1], v[2]]))
    w = np.asarray(rays[-2 if len(rays) > 2 else 0]["direction"], float) + [0, 0, 0.05]
    rays.append(dict(rays[-2 if len(rays) > 2 else 0], direction=list(w / np.linalg.norm(w))))
    snap["rays"] = rays
    snaps[k] = snap
    return dict(rep, snapshots=snaps), rays


def test_directions_labels_of_nearby_rays_do_not_overlap(with_convex):
    import re
    run, rep = with_convex
    near, rays = _near_rays(rep)
    fig = meanfield.plot_directions(near, run)
    _assert_readable(fig)
    r = _drawn(fig)
    maps = [ax for ax in fig.axes if ax.name == "mollweide"]
    labels = [t for ax in maps for t in ax.texts if re.fullmatch(r"r\d+", t.get_text())]
    assert sorted(t.get_text() for t in labels) == sorted(f"r{i}" for i in range(len(rays)))
    boxes = {t.get_text(): t.get_window_extent(r) for t in labels}
    names = sorted(boxes)
    for i, p in enumerate(names):                    # no two labels print over each other
        for q in names[i + 1:]:
            assert not boxes[p].overlaps(boxes[q]), (p, q)
    for t in labels:
        ax = t.axes
        # each label names the circle it is anchored at, and stays near it
        circles = [ln for ln in ax.lines if ln.get_marker() == "o"]
        anchor = ax.transData.transform(t.xy)
        centres = np.vstack([_marker_points(ln) for ln in circles])
        assert np.min(np.hypot(*(centres - anchor).T)) < 1e-6, t.get_text()
        bb = boxes[t.get_text()]
        far = np.hypot(bb.x0 - anchor[0], bb.y0 - anchor[1]) * 72 / fig.dpi
        assert far < 60, t.get_text()
        # a label set off from its marker has a line to it
        off = min(np.hypot(x - anchor[0], y - anchor[1]) for x in (bb.x0, bb.x1)
                  for y in (bb.y0, bb.y1)) * 72 / fig.dpi
        assert off < 20 or t.arrow_patch is not None, t.get_text()
        # and covers no marker: no ray circle, exact square, Gibbs diamond
        for ln in (ln for ln in ax.lines if _has_marker(ln)):
            h = _marker_reach(ln, fig.dpi)
            for x, y in _marker_points(ln):
                assert (bb.x1 <= x - h or bb.x0 >= x + h or bb.y1 <= y - h
                        or bb.y0 >= y + h), (t.get_text(), ln.get_marker())


def _with_gibbs(rep, drop=()):
    """``rep`` with the keys the analysis adds for the exact Gibbs reference on every ladder
    row but those of the stages ``drop`` (``None`` there): ``J_gibbs``, ``K_gibbs`` (one more
    ray than measured at the first stage, so that the two differ) and ``gibbs_rays`` (the
    stage's found rays, and one more at the south pole of the a > 0 map)."""
    rows = []
    for i, row in enumerate(rep["ladder"]):
        snap = [s for s in rep["snapshots"] if s["stage"] == row["stage"]][-1]
        g = [{"direction": list(q["direction"]), "sign": int(q["sign"]),
              "weight": float(q["weight"]), "mass_fraction": float(q["mass_fraction"]),
              "G": 1.0, "gap": 0.1, "pattern": list(q["pattern"])} for q in snap["rays"]]
        g.append({"direction": [0.0, 0.0, -1.0], "sign": 1, "weight": 0.01,
                  "mass_fraction": 0.01, "G": 1.0, "gap": 0.1, "pattern": []})
        none = row["stage"] in drop
        rows.append(dict(row, J_gibbs=None if none else row["J"] + (i == 0),
                         K_gibbs=None if none else row["K"], gibbs_rays=None if none else g))
    return dict(rep, ladder=rows)


def test_ladder_marks_a_stage_not_stationary_without_covering_its_counts(analysed):
    run, rep, _ = analysed
    rows = [dict(r, stationary=(i != 1)) for i, r in enumerate(rep["ladder"])]
    bad_tau = rows[1]["tau"]
    fig = meanfield.plot_ladder(_with_gibbs(dict(rep, ladder=rows)), run)
    _assert_readable(fig)
    _drawn(fig)                         # the layout in place: display positions final
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    a = panels[0]
    counts = [ln for ln in a.lines if ln.get_label() in ("rays J", "kinks K")]
    assert len(counts) == 2
    others = [ln for ln in a.lines if _has_marker(ln) and ln not in counts]
    for ln in counts:                       # no other marker on any measured count
        h = _marker_reach(ln, fig.dpi)
        for p in _marker_points(ln):
            for other in others:
                ho = _marker_reach(other, fig.dpi)
                for q in _marker_points(other):
                    assert np.hypot(*(p - q)) > h + ho, (ln.get_label(), other.get_label())
    # the stage is marked, in every panel, by a band across its τ and no other
    from matplotlib.colors import to_rgb
    taus = [row["tau"] for row in rows]
    for ax in panels:
        bands = [p for p in ax.patches if p.get_gid() == figures.common.NOT_STATIONARY_GID]
        assert len(bands) == 1, ax.get_title(loc="left")
        x0, x1 = sorted(bands[0].get_bbox().intervalx)
        assert [x0 < t < x1 for t in taus] == [t == bad_tau for t in taus]
        red, green, blue = to_rgb(bands[0].get_facecolor())
        assert red > 0.6 and green < 0.3 and blue < 0.3
        assert bands[0].get_zorder() < min(ln.get_zorder() for ln in ax.lines)
    assert "stage not stationary" in _legend_texts(fig)


def test_ladder_labels_every_temperature(analysed):
    run, rep, _ = analysed
    fig = meanfield.plot_ladder(rep, run)
    r = _drawn(fig)
    taus = [row["tau"] for row in rep["ladder"]]
    from meanfield.figures.ladder import _tau_label
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_visible()]
        if not ax.xaxis.get_tick_params()["labelbottom"] or not labels:
            continue                    # the top row shares the bottom row's axis
        texts = [t.get_text().strip() for t in labels]
        assert texts == [_tau_label(t) for t in taus] + ["→0"], texts
        np.testing.assert_allclose(ax.get_xticks()[:len(taus)], taus)
        boxes = [t.get_window_extent(r) for t in labels]
        for p, q in zip(boxes, boxes[1:]):            # every label legible on its own
            assert not p.overlaps(q)
    bottom = [ax for ax in fig.axes if ax.get_xlabel()]
    assert bottom


def test_ladder_legend_takes_at_most_15_percent_of_the_figure(with_convex):
    run, rep = with_convex
    # every series the ladder can draw: the references, the Gibbs counts, a band
    g = [{"stage": row["stage"], "tau": row["tau"], "rms_diff": 1e-3 * (i + 1),
          "f_reference": list(np.asarray(run.y) + 0.01 * (i + 1))}
         for i, row in enumerate(rep["ladder"])]
    cvx = {"rms_diff": 0.0123, "f_reference": list(np.asarray(run.y) + 0.01)}
    rows = [dict(row, stationary=(i != 0), dist_to_reference=0.01 / (i + 1))
            for i, row in enumerate(rep["ladder"])]
    full = _with_gibbs(dict(rep, ladder=rows, references={"gibbs": g, "convex": cvx}))
    fig = meanfield.plot_ladder(full, run)
    _assert_readable(fig)
    r = _drawn(fig)
    (leg,) = fig.legends
    box = leg.get_window_extent(r)
    share = box.width * box.height / (fig.bbox.width * fig.bbox.height)
    assert share <= 0.15, share
    # compact, not by leaving series out: every labelled series of (a), (b), (d) has an entry
    labels = _legend_texts(fig)
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    for ax in (panels[0], panels[1], panels[3]):
        for ln in ax.lines:
            lab = ln.get_label()
            if lab.startswith("_"):
                continue
            assert any(lab in t or (ax is panels[0] and ("Gibbs" in t or "τ → 0" in t))
                       for t in labels), lab
    assert {"(a) exact Gibbs J, K", "(b) exact Gibbs", "stage not stationary"} <= set(labels)


def test_ladder_draws_the_gibbs_counts_beside_the_measured(analysed):
    run, rep, _ = analysed
    last = rep["ladder"][-1]["stage"]
    rows = _with_gibbs(rep, drop=(last,))["ladder"]          # no Gibbs reference there
    fig = meanfield.plot_ladder(dict(rep, ladder=rows), run)
    _assert_readable(fig)
    _drawn(fig)                         # the layout in place: display positions final
    a = [ax for ax in fig.axes if ax.get_title(loc="left")][0]
    j = next(ln for ln in a.lines if ln.get_label() == "rays J")
    have = [i for i, row in enumerate(rows) if row["J_gibbs"] is not None]
    assert len(have) == len(rows) - 1
    for key, measured in (("J_gibbs", j),
                          ("K_gibbs", next(ln for ln in a.lines if ln.get_label() == "kinks K"))):
        want = [rows[i][key] for i in have]
        line = [ln for ln in a.lines if _has_marker(ln) and list(ln.get_ydata()) == want
                and ln not in (j, measured)]
        assert len(line) == 1, key
        g = line[0]
        # at the stages that have one, drawn beside the measured count (a few points over)
        np.testing.assert_allclose(g.get_xdata(), np.asarray(measured.get_xdata())[have])
        shown = _marker_points(g)
        at = _marker_points(measured)[have]
        dx = (shown[:, 0] - at[:, 0]) * 72 / fig.dpi
        assert np.all((dx > 3) & (dx < 12)), dx
        assert g.get_marker() not in (j.get_marker(), measured.get_marker())
    assert "(a) exact Gibbs J, K" in _legend_texts(fig)
    # an older report, without the keys: no Gibbs counts, no entry
    old = meanfield.plot_ladder(rep, run)
    assert not any("Gibbs J" in t for t in _legend_texts(old))
    a_old = [ax for ax in old.axes if ax.get_title(loc="left")][0]
    assert len([ln for ln in a_old.lines if _has_marker(ln)]) < len(
        [ln for ln in a.lines if _has_marker(ln)])


def test_directions_draw_the_gibbs_rays_of_the_stage(with_convex):
    run, rep = with_convex
    full = _with_gibbs(rep)
    fig = meanfield.plot_directions(full, run)
    _assert_readable(fig)
    maps = [ax for ax in fig.axes if ax.name == "mollweide"]
    coldest = min(rep["ladder"], key=lambda row: row["tau"])
    g = next(row for row in full["ladder"] if row["stage"] == coldest["stage"])["gibbs_rays"]
    markers = {ln.get_marker() for ax in maps for ln in ax.lines if _has_marker(ln)}
    new = markers - {"o", "s"}
    assert len(new) == 1                    # one marker of their own, neither circle nor square
    (m,) = new
    for ax, s in zip(maps, (1, -1)):
        gl = [ln for ln in ax.lines if ln.get_marker() == m]
        assert len(gl) == sum(1 for q in g if q["sign"] == s)
        assert all(ln.get_markerfacecolor() == "none" for ln in gl)            # open
        circles = [ln for ln in ax.lines if ln.get_marker() == "o"]
        # the Gibbs rays copied from the found ones sit on their circles
        cpts = np.vstack([_marker_points(ln) for ln in circles]) if circles else np.zeros((0, 2))
        gpts = np.vstack([_marker_points(ln) for ln in gl]) if gl else np.zeros((0, 2))
        on = sum(1 for p in gpts if len(cpts) and np.min(np.hypot(*(cpts - p).T)) < 1e-6)
        assert on == sum(1 for q in g[:-1] if q["sign"] == s)
    labels = _legend_texts(fig)
    assert any(t.startswith("exact Gibbs ray") for t in labels), labels
    legend_markers = {h.get_marker() for leg in _legends(fig) for h in leg.legend_handles}
    assert m in legend_markers
    # an older report: nothing of the kind, no entry
    old = meanfield.plot_directions(rep, run)
    assert not any(ln.get_marker() == m for ax in old.axes for ln in ax.lines)
    assert not any("Gibbs" in t for t in _legend_texts(old))
    # d = 1: the same marker on the polar figure, at the Gibbs rays' angles
    run1, rep1 = _one_d_run()
    dirs = [q["direction"] for q in rep1["snapshots"][0]["rays"]]
    rep1["ladder"] = [{"stage": 0, "tau": 1e-4, "J_gibbs": 2, "K_gibbs": 2,
                       "gibbs_rays": [{"direction": d, "sign": 1} for d in dirs]}]
    polar = meanfield.plot_directions(rep1, run1)
    _assert_readable(polar)
    gl = [ln for ln in polar.axes[0].lines if ln.get_marker() == m]
    assert len(gl) == 1
    np.testing.assert_allclose(sorted(gl[0].get_xdata()),
                               sorted(np.arctan2([d[1] for d in dirs], [d[0] for d in dirs])))


def _study_result(taus=(1e-2, 1e-3, 1e-4)):
    """A study summary as :func:`meanfield.sweep.summary.analyze_study` returns it: two values
    of lam × three temperatures, two seeds; lam=0.05's middle stage is stationary in one
    run of two, every other stage in both."""
    table = []
    for lam in (0.02, 0.05):
        for i, t in enumerate(taus):
            table.append({"dynamics.lam": lam, "stage": i, "tau": t, "n_seeds": 2,
                          "risk_mean": 0.1 / (i + 1) + lam, "risk_std": 0.01,
                          "J_mean": 3.0 + i, "J_std": 0.5, "K_mean": 2.0 + i, "K_std": 0.0,
                          "w2_mean": float("nan"), "w2_std": float("nan"),
                          "bound_2P_minus_1": 63, "runs_chains_disagree": None,
                          "runs_stationary": 1 if (lam, i) == (0.05, 1) else 2})
    return {"study_dir": "s", "axes": {"dynamics.lam": [0.02, 0.05], "dynamics.seed": [0, 1]},
            "seed_axis": "dynamics.seed", "width_axis": "model.n_particles",
            "jobs": {"done": 4}, "runs": [], "table": table, "width": []}


def test_study_figures_in_the_run_style_with_stages_not_stationary_marked(tmp_path):
    from PIL import Image

    from meanfield.figures import study_figures
    res = _study_result()
    # written one column wide at the run figures' resolution (the PNG's own dpi and size)
    paths = study_figures(res, tmp_path)
    assert sorted(p.name for p in paths) == ["J_tau.png", "K_tau.png", "risk_tau.png"]
    for p in paths:
        with Image.open(p) as im:
            dpi = im.info["dpi"][0]
            assert dpi == pytest.approx(figures.RUN_STYLE["savefig.dpi"], abs=1)
            assert im.size[0] / dpi == pytest.approx(figures.WIDTH, rel=0.05), p.name
    from meanfield.figures.study import draw_study
    figs = draw_study(res)
    assert sorted(figs) == ["J_tau.png", "K_tau.png", "risk_tau.png"]
    taus = [1e-2, 1e-3, 1e-4]
    for name, fig in figs.items():
        _assert_readable(fig)                      # one column, 7 pt text at least
        (ax,) = [ax for ax in fig.axes if ax.has_data()]
        assert ax.get_xlabel() == "τ [units of risk]" and ax.get_ylabel()
        # hot on the left, every temperature labelled, as on the run's ladder figure
        lo, hi = ax.get_xlim()
        assert lo > hi and ax.get_xscale() == "log"
        assert [t.get_text().strip() for t in ax.get_xticklabels()] == [
            "$10^{-2}$", "$10^{-3}$", "$10^{-4}$"]
        # the stage not stationary in some run: one band, across its τ only
        bands = [p for p in ax.patches if p.get_gid() == figures.common.NOT_STATIONARY_GID]
        assert len(bands) == 1, name
        x0, x1 = sorted(bands[0].get_bbox().intervalx)
        assert [x0 < t < x1 for t in taus] == [False, True, False]
        assert any("not stationary" in t for t in _legend_texts(fig))
        # the run figures' text sizes
        assert ax.xaxis.label.get_fontsize() == figures.RUN_STYLE["axes.labelsize"]
    # no verdict (older study): no band
    plain = _study_result()
    for row in plain["table"]:
        row["runs_stationary"] = None
    ax = draw_study(plain)["J_tau.png"].axes[0]
    assert not [p for p in ax.patches if p.get_gid() == figures.common.NOT_STATIONARY_GID]
