"""The integrators of the particle dynamics: one table, name → kernel code and properties
(numba-, numpy-free, so that the config schema reads it without compiling anything).

Every part of the project that asks something of an integrator asks this table: the stepper
(:class:`solvers.stepper.Stepper`: which kernel, which noise rule), the config schema
(``meanfield.schema``: the names, the batch and temperature rules), the step-size guard of a run
(``meanfield.runner.guard``), extrapolation in ``η`` (``meanfield analyze extrapolate``) and the
Ornstein–Uhlenbeck checks of the tests (:func:`solvers.numpy_model.ou_stationary_variance`).

Adding an integrator: a kernel (a noise rule of the parallel step kernel, ``solvers._kernels``,
keyed by a new :attr:`Integrator.noise` code; or a sequential sweep like ``solvers._mala``) and
one entry of :data:`INTEGRATORS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: Noise rules of the parallel step kernel (``solvers._kernels.run_steps``, argument ``noise``).
NOISE_EM = 0
NOISE_LM = 1


@dataclass(frozen=True)
class Integrator:
    """One integrator of the particle dynamics.

    Attributes
    ----------
    name : str
        Its name in a config (``dynamics.integrator``).
    title : str
        What it is, for messages.
    noise : int or None
        Code of its noise rule in the parallel step kernel (every particle moves at once,
        ``solvers._kernels``); None: a sequential sweep over the particles (``solvers._mala``).
    ou_variance : callable (lam, eta, tau) -> float
        Per-coordinate stationary variance of the chain with the data term off (the
        Ornstein–Uhlenbeck check; THEORY §2, docs/theory.md §2.1).
    extrapolable : bool
        Its step bias is linear in ``η``, so that two runs at different ``η`` extrapolate to
        ``η → 0`` (Richardson; docs/theory.md §2.3).
    exact : bool
        Samples the N-particle law ``π_N ∝ exp(−U/τ)`` at any step (Metropolis-adjusted): no
        step-size stability limit, and ``τ > 0`` only.
    minibatch : bool
        Takes ``batch_size > 0`` (noisy minibatch gradients).
    """

    name: str
    title: str
    noise: int | None
    ou_variance: Callable[[float, float, float], float]
    extrapolable: bool
    exact: bool
    minibatch: bool

    @property
    def step_unit(self) -> str:
        """What one step of it is called in progress lines, ``inspect``, the report and the
        figures: ``"step"`` for a time step of the dynamics (``η`` of mean-field time), and
        ``"pass"`` for the exact sampler, whose step is one pass of Metropolis-adjusted moves
        over the particles and no time step (its ``step · η`` is not a time of SGD)."""
        return "pass" if self.exact else "step"

    @property
    def parallel(self) -> bool:
        """True when one step moves every particle at once (the parallel step kernel)."""
        return self.noise is not None


def _em_ou_variance(lam, eta, tau):
    """``θ ← (1 − ηλ)θ + sqrt(2ητ) ξ_k``: ``τ / (λ (1 − ηλ/2))``."""
    return tau / (lam * (1.0 - 0.5 * eta * lam))


def _lm_ou_variance(lam, eta, tau):
    """``θ ← (1 − ηλ)θ + sqrt(2ητ)(ξ_k + ξ_{k+1})/2``: ``τ/λ`` exactly for every stable
    ``0 < ηλ < 2`` (the noise is MA(1); with ``q = 1 − ηλ`` the series gives
    ``(2ητ/4)(1 + (1+q)²/(1−q²)) = ητ/(1−q)``)."""
    return tau / lam


def _exact_ou_variance(lam, eta, tau):
    """The law ``∝ exp(−λ|θ|²/(2τ))`` itself: ``τ/λ``."""
    return tau / lam


#: The integrators by name (THEORY §2, docs/theory.md §2.1, §2.6).
INTEGRATORS = {
    "em": Integrator("em", "Euler-Maruyama", NOISE_EM, _em_ou_variance,
                     extrapolable=True, exact=False, minibatch=True),
    "lm": Integrator("lm", "Leimkuhler-Matthews", NOISE_LM, _lm_ou_variance,
                     extrapolable=False, exact=False, minibatch=True),
    "mala": Integrator("mala", "Metropolis-adjusted sweep", None, _exact_ou_variance,
                       extrapolable=False, exact=True, minibatch=False),
}


def integrator_named(name) -> Integrator:
    """The :class:`Integrator` called ``name``.

    Raises
    ------
    ValueError
        An unknown name (the message lists the known ones).
    """
    if not isinstance(name, str) or name not in INTEGRATORS:
        raise ValueError(f"unknown integrator {name!r}; one of {', '.join(INTEGRATORS)}")
    return INTEGRATORS[name]
