"""The limits and codes shared by the kernels and the config schema (numba-, numpy-free).

The numba kernels (``solvers._kernels``, ``solvers._mala``) and the schema of a run config
(``meanfield.schema``) both import these, so that a bound the kernels can key and the bound
the config accepts are one number.
"""

from __future__ import annotations

#: Activation names of the config and their kernel codes (THEORY §3; docs/theory.md).
ACT_CODES = {"relu": 0, "softplus": 1, "capped": 2}
#: Activations the kernels implement.
ACTIVATIONS = tuple(ACT_CODES)

#: Largest global step index the noise counter can key: a run's steps (``steps_per_tau``
#: times the temperatures) must not exceed it; also the bound of the other counts.
MAX_STEPS = 2**31 - 1
#: Noise draws per step must stay below this: ``n_particles * (d + 2) < MAX_DRAWS``.
MAX_DRAWS = 2**32

#: Default share of jump moves of ``integrator = "mala"`` (:mod:`solvers._mala`).
DEFAULT_JUMPS = 0.1
#: Default probability of a radial move after each move of ``integrator = "mala"``
#: (:mod:`solvers._mala`, docs/theory.md §2.6).
DEFAULT_RADIAL = 1.0
#: Default share of the Langevin moves of ``integrator = "mala"`` made at a fine step
#: (:mod:`solvers._mala`, docs/theory.md §2.6): none, so that configs written before the key
#: keep their sampler and hash; the embedded default and the shipped configs ask for 0.5.
DEFAULT_FINE = 0.0
#: Default probability that a pass of ``integrator = "mala"`` ends with an exchange move of the
#: heavy particles' masses (:mod:`solvers._exchange`, docs/theory.md §2.6): none, so that configs
#: written before the key keep their sampler and hash.
DEFAULT_EXCHANGE = 0.0
