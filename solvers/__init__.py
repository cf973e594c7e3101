"""Solvers: the Langevin particle solver (numba kernels in ``solvers._kernels``), the exact
references and finite-step GD for few-neuron models."""

from solvers.langevin import SolverState, simulate, initial_particles  # noqa: F401
