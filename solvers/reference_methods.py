"""How the Gibbs reference integrates over the sphere of directions: one table of the back ends
and the one owner of the choice between them (THEORY §5; docs/theory.md, "Finite temperature").

Adaptive quadrature over the cells of the data arrangement (:mod:`solvers.gibbs`) is exact to
its tolerance but implemented for ``d ≤ 2``; importance-sampled randomized QMC
(:mod:`solvers.gibbsqmc`) takes any ``d`` and reports an error bar. :func:`choose` picks the
first back end of :data:`METHODS` that takes ``d``. numpy-free: the back ends load on use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One back end of the Gibbs reference.

    Attributes
    ----------
    name : str
        Its name (``meanfield reference gibbs --method``, the ``method`` of a report).
    title : str
        What it is, for messages.
    reference : str
        ``"module:Class"`` of its solver, a :class:`solvers.gibbs.GibbsReference`.
    max_d : int or None
        Largest input dimension it takes (None: any).
    """

    name: str
    title: str
    reference: str
    max_d: int | None

    def takes(self, d: int) -> bool:
        """True when the back end takes input dimension ``d``."""
        return self.max_d is None or d <= self.max_d


#: The back ends, in the order :func:`choose` prefers them.
METHODS = {
    "quadrature": Method("quadrature", "adaptive quadrature over the cells of S^d",
                         "solvers.gibbs:GibbsReference", 2),
    "qmc": Method("qmc", "importance-sampled randomized QMC", "solvers.gibbsqmc:QMCGibbsReference",
                  None),
}

#: Largest input dimension of the quadrature back end.
QUADRATURE_MAX_D = METHODS["quadrature"].max_d


def choose(d: int, method: str = "auto") -> str:
    """The back end of the Gibbs reference for input dimension ``d``.

    Parameters
    ----------
    d : int
        Input dimension, ``>= 1``.
    method : str
        ``"auto"`` (the first of :data:`METHODS` that takes ``d``: quadrature for ``d ≤ 2``,
        else qmc) or a name of :data:`METHODS`, returned as it is (its solver refuses a ``d``
        it does not take).

    Returns
    -------
    str
        A name of :data:`METHODS`.

    Raises
    ------
    ValueError
        An unknown method, or ``d < 1``.
    """
    if method != "auto":
        if method not in METHODS:
            raise ValueError(f"unknown Gibbs method {method!r}; one of auto, {', '.join(METHODS)}")
        return method
    d = int(d)
    if d < 1:
        raise ValueError(f"need an input dimension d >= 1, got {d}")
    return next(m.name for m in METHODS.values() if m.takes(d))


def reference_class(method: str) -> type:
    """The solver class of the back end ``method`` (imported on use)."""
    module, name = METHODS[method].reference.split(":")
    return getattr(importlib.import_module(module), name)
