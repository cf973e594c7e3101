"""The observation the particle solver reports at a boundary: the columns of a run file."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Observation:
    """What the solver reports at an observation boundary: one row of a run file.

    The fields after ``step``, ``time``, ``stage`` and ``step_in_stage`` (the row's place in
    the run, :data:`PLACE`) are the run file's observables (:meth:`columns`), in this order.

    Attributes
    ----------
    step : int
        Global step count.
    time : float
        Mean-field time ``step · η``.
    stage : int
        Index of the stage on the temperature ladder (0 = the first;
        :class:`solvers.schedule.Schedule`), whatever its temperature.
    step_in_stage : int
        Steps of that stage done at the observation (1-based: its last step is the stage's
        length).
    tau : float
        Temperature of the stage.
    risk : float
        ``(1/n) Σ_j (f(x_j) − y_j)²`` (THEORY §1).
    regulariser : float
        ``(λ/2) (1/N) Σ_i |θ_i|²``.
    mean_sq_norm : float
        ``(1/N) Σ_i |θ_i|²``.
    stationarity : float
        :func:`solvers.langevin.stationarity` of the stage's residuals so far.
    residuals : ndarray of shape (n,)
        Scaled residuals ``(f(x_j) − y_j)/n``.
    residuals_previous : ndarray of shape (n,)
        The residuals one step earlier (parity test of the stationarity verdict).
    eta_lambda_max : float
        Stability number ``η h`` of the step on the data mode (:mod:`solvers.stability`);
        ``nan`` for ``"mala"`` (a Metropolis-adjusted sweep has no such limit).
    acceptance : float
        ``"mala"``: share of the Langevin moves accepted since the previous observation
        (``nan`` for the other integrators, or when there were none).
    jump_acceptance : float
        ``"mala"``: share of the jump moves accepted since the previous observation (``nan``
        for the other integrators, or when there were none).
    cell_exchange : float
        ``"mala"``: mass moved between activation patterns by accepted jumps per unit of time
        since the previous observation, ``(jumps accepted that changed the particle's
        activation pattern) / (N · steps · η)`` (``nan`` for the other integrators, or
        without jumps).
    radial_acceptance : float
        ``"mala"``: share of the radial moves accepted since the previous observation
        (``nan`` for the other integrators, or without radial moves).
    exchange_acceptance : float
        ``"mala"``: share of the exchange moves (``dynamics.exchange``) accepted since the
        previous observation (``nan`` for the other integrators, or without exchange moves).
    """

    step: int
    time: float
    stage: int
    step_in_stage: int
    tau: float
    risk: float
    regulariser: float
    mean_sq_norm: float
    stationarity: float
    residuals: np.ndarray
    residuals_previous: np.ndarray
    eta_lambda_max: float
    acceptance: float = float("nan")
    jump_acceptance: float = float("nan")
    cell_exchange: float = float("nan")
    radial_acceptance: float = float("nan")
    exchange_acceptance: float = float("nan")

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """Names of the observables (every field but those of :data:`PLACE`)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in PLACE)


#: The fields of an :class:`Observation` that place it in the run rather than measure it.
PLACE = ("step", "time", "stage", "step_in_stage")
