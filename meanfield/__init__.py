"""meanfield: mean-field Langevin dynamics of wide two-layer ReLU networks, its stationary
measures and their rays ([LJM26], [SKM22]); high-dimensional GD on few ReLU neurons ([LWTM26]).

The verbs of a study from Python (``docs/tutorial.md``)::

    import meanfield
    cfg = meanfield.load_config("data/plane8.toml")    # or config_from_dict({...}), default_config()
    path = meanfield.run(cfg, "plane8.h5")               # integrate the temperature ladder
    run = meanfield.open_run(path)                        # read it back (X, y, frames, observables)

    meanfield.analyze_run(path, "plane8-report")          # rays, kinks, P, references; report

The analysis functions are in :mod:`analysis`, the solvers and references in :mod:`solvers`
(``meanfield`` builds on both; ``analysis`` builds on ``solvers`` only). Imports are lazy:
numba and h5py load on first use.
"""

from meanfield._version import __version__

_EXPORTS = {
    "load_config": "meanfield.config:load",
    "config_from_dict": "meanfield.config:from_dict",
    "default_config": "meanfield.config:embedded_default",
    "RunConfig": "meanfield.config:RunConfig",
    "load_data": "meanfield.data:load_file",
    "data_from_config": "meanfield.data:from_config",
    "Dataset": "meanfield.data:Dataset",
    "run": "meanfield.runner:run",
    "open_run": "meanfield.store:open_run",
    "Run": "meanfield.store:Run",
    "analyze_run": "meanfield.report:analyze_run",
    "analyze_study": "meanfield.sweep.summary:analyze_study",
    "plot_predictor": "meanfield.figures:plot_predictor",
    "plot_directions": "meanfield.figures:plot_directions",
    "plot_ladder": "meanfield.figures:plot_ladder",
    "plot_trajectory": "meanfield.figures:plot_trajectory",
    "InputError": "meanfield.errors:InputError",
    "DivergenceError": "meanfield.errors:DivergenceError",
}

__all__ = ["__version__", *_EXPORTS]


# The helper is imported when a verb is first used, not with the package: `import meanfield`
# then loads nothing of `solvers`, so `python -m meanfield` can first make sure that `solvers`
# and `analysis` are this project's packages and not a stray solvers.py in the current folder.
def __getattr__(name: str) -> object:
    from solvers.lazy import resolve
    return resolve(__name__, _EXPORTS, name)


def __dir__() -> list[str]:
    from solvers.lazy import names
    return names(__name__, _EXPORTS)
