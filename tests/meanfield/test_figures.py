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
    rep = meanfield.analyze_run(out, d / "rep", w2=True, fmt="svg")
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
    c = convex(run.X, run.y, float(run.config["dynamics"]["lam"]))
    fig = meanfield.plot_directions(rep, run, convex=(c.directions, c.signs))
    assert fig._suptitle.get_text().startswith("τ = 1e-04: J = ")
    assert "thermal halo" in fig._suptitle.get_text()
    maps = [ax for ax in fig.axes if ax.name == "mollweide"]
    assert len(maps) == 2
    # one '+' per ray of the exact limit, in the panel of its sign
    crosses = sum(1 for ax in maps for ln in ax.lines if ln.get_marker() == "+")
    assert crosses == len(c.weights)
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
    axes = [ax for ax in fig.axes if ax.has_data()]
    assert len(axes) == len(fig.axes) == 3          # no reference in this analysis
    with_ref = dict(rep, ladder=[dict(r, dist_to_reference=0.01 / (i + 1))
                                 for i, r in enumerate(rep["ladder"])])
    four = meanfield.plot_ladder(with_ref, run)
    assert len(four.axes) == 4 and all(ax.has_data() for ax in four.axes)
    texts = _texts(fig)
    assert f"2P−1 = {2 * rep['P'] - 1}" in texts and f"P−1 = {rep['P'] - 1}" in texts
    # the risk panel shows the time average with error bars from the observables
    from analysis.time_average import time_average_observable
    m, e = time_average_observable(run, "risk", 2)
    b = axes[1]
    line = b.lines[0]
    assert line.get_ydata()[-1] == pytest.approx(m)
    assert e > 0


def test_trajectory_marks_stages_and_frames(analysed):
    run, rep, _ = analysed
    fig = meanfield.plot_trajectory(rep, run)
    top = fig.axes[0]
    assert [t.get_text() for t in top.texts] == ["τ = 1e-02", "τ = 1e-03", "τ = 1e-04"]
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
    assert rep.to_dataframe("rays").shape[0] == sum(r.get("J_measured", r["J"]) for r in rep["ladder"])
    with pytest.raises(ValueError, match="unknown table"):
        rep.to_dataframe("nope")


def test_analyze_format_pdf_from_the_cli(analysed, tmp_path):
    from meanfield import cli
    run, _, _ = analysed
    assert cli.main(["analyze", run.path, "-o", str(tmp_path / "r"), "--format", "pdf",
                     "--no-references", "--no-w2", "--quiet"]) == 0
    pdfs = sorted(p.name for p in (tmp_path / "r").glob("*.pdf"))
    assert pdfs == ["directions.pdf", "ladder.pdf", "predictor.pdf", "trajectory.pdf"]
    assert (tmp_path / "r" / "ladder.pdf").read_bytes()[:5] == b"%PDF-"
