"""Every figure of meanfield (matplotlib, Agg backend), and their writer :func:`save`.

The figures of one run's analysis take the analysis (the report dict of ``analyze_run``) and
the run (:func:`meanfield.open_run`), draw into the given matplotlib ``Axes`` (or a new figure)
and return the ``Figure``: :func:`plot_predictor`, :func:`plot_directions`,
:func:`plot_ladder`, :func:`plot_trajectory`. They are sized for a single journal column
(3.4 in wide, 8 pt text), and so are the study's (:func:`study_figures`) and the highdim
figure. :data:`STYLE` and :func:`_plt` remain for code drawing with pyplot.

One module per figure; :mod:`meanfield.figures.common` holds the styles, the Matplotlib import
and the writer they share. :data:`RUN_FIGURES` is the table of a run's figures: every one is
drawn by ``draw(rep, run, *, axes=None)``. Adding a figure to the report is one module with its
function and one entry in that table (its file name is the key, its caption the entry's).
"""

from collections.abc import Callable
from typing import NamedTuple

from meanfield.figures.common import (
    RUN_STYLE,
    SIGN_COLOURS,
    SIGN_STYLES,
    STYLE,
    WIDTH,
    _plt,
    import_matplotlib,
    save,
)
from meanfield.figures.directions import plot_directions, seam_longitude
from meanfield.figures.highdim import highdim_figure
from meanfield.figures.ladder import plot_ladder
from meanfield.figures.predictor import plot_predictor
from meanfield.figures.study import study_figures
from meanfield.figures.trajectory import plot_trajectory

__all__ = ["RUN_FIGURES", "RUN_STYLE", "SIGN_COLOURS", "SIGN_STYLES", "STYLE", "WIDTH",
           "RunFigure", "_plt", "highdim_figure", "import_matplotlib", "plot_directions",
           "plot_ladder", "plot_predictor", "plot_trajectory", "save", "seam_longitude",
           "study_figures"]


class RunFigure(NamedTuple):
    """One figure of a run's report.

    Attributes
    ----------
    draw : callable ``(rep, run, *, axes=None) -> matplotlib.figure.Figure | None``
        ``rep`` the analysis (``analyze_run``), ``run`` the run (:func:`meanfield.open_run`);
        draws into ``axes`` (or a new figure) and returns the figure, ``None`` when the run
        has nothing to draw (the report then leaves the figure out).
    caption : str
        The line under the figure in ``report.md``.
    """

    draw: Callable
    caption: str


#: The figures of a run's report by name (the file is ``NAME.png``, ``.pdf`` or ``.svg``), in
#: the order ``report.md`` shows them.
RUN_FIGURES: dict[str, RunFigure] = {
    "predictor": RunFigure(
        plot_predictor,
        "Predictor f(x) at each temperature (last snapshot) with its kink lines, labelled "
        "with their rays' numbers (green solid: rays with a > 0, purple dashed: a < 0, black "
        "dash-dot: rays of both signs on one line); the training points are filled with y on "
        "the same colour scale."),
    "directions": RunFigure(
        plot_directions,
        "Directions (w, b)/|(w, b)| of the neurons at the coldest temperature, one equal-area "
        "map per sign of a, coloured by mass per steradian: circles are the rays found, "
        "squares the rays of the exact τ → 0 limit that the table counts (weight above its "
        "floor), blue diamonds the rays of the exact Gibbs measure at that τ (when the "
        "analysis has it); uncircled mass is the thermal halo (not counted as rays)."),
    "ladder": RunFigure(
        plot_ladder,
        "Against τ (exact τ → 0 limit at the right): (a) rays J and kinks K with the bounds "
        "2P−1, P−1, the exact Gibbs measure's J, K beside them (triangles) and the exact "
        "limit's; (b) risk averaged over the second half of each τ (± standard error) and "
        "the exact references'; (c) W2 to the previous τ of the particles (left axis) and of "
        "the rays (chord on the sphere, right axis); (d) RMS distances on the data to the "
        "exact references of f̄, the predictor averaged over the second half of each τ, and "
        "of f at the last snapshot. A red band marks a stage judged not stationary."),
    "trajectory": RunFigure(
        plot_trajectory,
        "The run against time (passes for the exact sampler): risk (log axis), mean |θ|² and the stationarity statistic "
        "(drift of the time-averaged predictor, with the drift each stage's verdict allows "
        "dashed), temperatures shaded, snapshot frames dotted."),
}
