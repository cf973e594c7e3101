"""Every figure of meanfield (matplotlib, Agg backend), and their writer :func:`save`.

The figures of one run's analysis take the analysis (the report dict of ``analyze_run``) and
the run (:func:`meanfield.open_run`), draw into the given matplotlib ``Axes`` (or a new figure)
and return the ``Figure``: :func:`plot_predictor`, :func:`plot_directions`,
:func:`plot_ladder`, :func:`plot_trajectory`. They are sized for a single journal column
(3.4 in wide, 8 pt text). The study and highdim figures use :data:`STYLE` and :func:`_plt`.

One module per figure; :mod:`meanfield.figures.common` holds the styles, the Matplotlib import
and the writer they share.
"""

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

__all__ = ["RUN_STYLE", "SIGN_COLOURS", "SIGN_STYLES", "STYLE", "WIDTH", "_plt",
           "highdim_figure", "import_matplotlib", "plot_directions", "plot_ladder",
           "plot_predictor", "plot_trajectory", "save", "seam_longitude", "study_figures"]
