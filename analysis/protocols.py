"""What the analysis reads from a run: the :class:`RunLike` protocol.

:class:`meanfield.store.Run` (a run file read by ``meanfield.store.open_run``) is the run the
tool passes; anything with these attributes works (a test's stand-in, a run held in memory).
The analysis never reads a config table: the few settings it needs are attributes here, typed,
so a renamed or missing setting is an error of the type check (``.ci/run``), not a silent
default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from solvers.schedule import Schedule


class RunLike(Protocol):
    """A run as the analysis reads it.

    Attributes
    ----------
    path : str
        Where the run lives (named in reports and messages).
    X : ndarray of shape (n, d)
        The training inputs.
    y : ndarray of shape (n,)
        The training targets.
    frame_step : ndarray of shape (F,) of int
        Global step of each snapshot frame.
    frame_tau : ndarray of shape (F,)
        Temperature of each snapshot frame.
    frame_stage : ndarray of shape (F,) of int
        Ladder stage of each snapshot frame (by index: a temperature visited twice is two
        stages).
    observables : mapping of name -> {"step": (M,), "time": (M,), "value": (M, ...)}
        The stored observables (``docs/format.md``); ``residuals`` holds the scaled residuals
        ``R_j = (f(x_j) − y_j)/n``, turned back into the predictor by
        :func:`analysis.time_average.stored_predictor` only.
    complete : bool
        The run reached the end of its ladder.
    n, d, n_frames, n_particles : int
        Training points, input dimension, snapshot frames, particles ``N``.
    lam : float
        Weight decay ``λ`` (``dynamics.lam``).
    taus : list of float
        The temperature ladder, in the order run (``dynamics.taus``).
    activation : str
        ``model.activation`` (the exact references are for ``"relu"``).
    eta : float
        The step ``η`` (``dynamics.eta``).
    integrator : str
        ``dynamics.integrator`` (``"em"``, ``"lm"`` or ``"mala"``).
    schedule : solvers.schedule.Schedule
        The ladder with its stage lengths as run (``"auto"`` stages included).

    Methods
    -------
    frame(k)
        Particles of frame ``k``.
    stage_observations(stage), stage_frames(stage), steps_run(stage)
        The observations (boolean mask), the snapshot frames (indices) and the steps run of a
        ladder stage: a stage is asked of the run, never told from temperatures.
    chains()
        Every independent chain of the run (``dynamics.chains``), each a run of its own
        observables and frames, this one first; the analysis reaches it through
        :func:`analysis.time_average.chains_of`, which takes an object without it as one
        chain.
    """

    path: str
    X: np.ndarray
    y: np.ndarray
    frame_step: np.ndarray
    frame_tau: np.ndarray
    frame_stage: np.ndarray
    complete: bool

    @property
    def observables(self) -> Mapping[str, Mapping[str, np.ndarray]]: ...

    @property
    def n(self) -> int: ...

    @property
    def d(self) -> int: ...

    @property
    def n_frames(self) -> int: ...

    @property
    def n_particles(self) -> int: ...

    @property
    def lam(self) -> float: ...

    @property
    def taus(self) -> list[float]: ...

    @property
    def activation(self) -> str: ...

    @property
    def eta(self) -> float: ...

    @property
    def integrator(self) -> str: ...

    @property
    def schedule(self) -> Schedule: ...

    def frame(self, k: int) -> np.ndarray:
        """Particles of frame ``k``, shape (N, d+2), rows ``(a, w, b)``."""
        ...

    def stage_observations(self, stage: int) -> np.ndarray:
        """Boolean mask (M,) of the observations of ladder stage ``stage``."""
        ...

    def stage_frames(self, stage: int) -> np.ndarray:
        """Indices (int, increasing) of the snapshot frames of ladder stage ``stage``."""
        ...

    def steps_run(self, stage: int) -> int:
        """Steps of ladder stage ``stage`` run by its last observation (0 when not reached)."""
        ...

    def chains(self) -> Sequence[RunLike]:
        """Every chain of the run, this one (chain 0) first."""
        ...
