"""Solvers ([LJM26], [SKM22], [LWTM26]; THEORY §2, §4, §5, §10).

- :func:`simulate`: the mean-field Langevin particle solver over a temperature ladder (numba
  kernels in ``solvers._kernels``; :func:`meanfield.run` wraps it with the run file);
- :func:`gibbs`: the exact stationary (Gibbs) measure at ``τ > 0`` for ``d ≤ 2``, by quadrature
  over the sphere of directions (THEORY §5); :func:`gibbs_qmc`: the same for any ``d`` by
  importance-sampled randomized quasi-Monte Carlo, with an error bar;
- :func:`convex`: the exact ``τ → 0`` limit, a convex problem over activation patterns
  (THEORY §4);
- :func:`gd`: finite-step GD on few ReLU neurons in high dimension (THEORY §10).

Imports are lazy: numba, scipy and Clarabel load on first use.
"""

from solvers.lazy import exports

_EXPORTS = {
    "simulate": "solvers.langevin:simulate",
    "SolverState": "solvers.langevin:SolverState",
    "gibbs": "solvers.gibbs:gibbs",
    "GibbsSolution": "solvers.gibbs:GibbsSolution",
    "gibbs_qmc": "solvers.gibbsqmc:gibbs_qmc",
    "QMCGibbsSolution": "solvers.gibbsqmc:QMCGibbsSolution",
    "convex": "solvers.convex:convex",
    "ConvexSolution": "solvers.convex:ConvexSolution",
    "activation_patterns": "solvers.activation_regions:activation_patterns",
    "gd": "solvers.highdim_gd:gd",
    "GDResult": "solvers.highdim_gd:GDResult",
    "step_size": "solvers.highdim_gd:step_size",
    "initial_weights": "solvers.highdim_gd:initial_weights",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = exports(__name__, _EXPORTS)
