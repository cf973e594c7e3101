"""Numerical failures of the reference solvers, reported as the solver's own error.

LP/QP solvers and dense linear algebra fail in their own ways on data whose magnitudes they
cannot resolve (``RuntimeError`` from an LP status, ``LinAlgError: Singular matrix``,
overflow). :func:`numerical_failures` turns each into the solver's error class with one line
that names the data's magnitude range, so callers handle one exception per solver.
"""

from __future__ import annotations

import contextlib

import numpy as np


def magnitude_range(X) -> str:
    """``"|x| from A to B"`` over the non-zero entries of ``X`` (for messages)."""
    a = np.abs(np.asarray(X, dtype=np.float64))
    a = a[np.isfinite(a) & (a > 0)]
    if a.size == 0:
        return "all inputs zero"
    return f"|x| from {a.min():.1e} to {a.max():.1e}"


@contextlib.contextmanager
def numerical_failures(error_cls, what: str, X, keep: tuple = ()):
    """Re-raise numerical failures inside the block as ``error_cls`` (one line).

    Parameters
    ----------
    error_cls : type
        The solver's error (a ``RuntimeError`` subclass taking one message).
    what : str
        The computation, e.g. ``"convex reference"``.
    X : array-like
        The inputs, whose magnitudes the message names.
    keep : tuple of exception types
        Errors of the solver that already say what went wrong, re-raised unchanged.
    """
    try:
        yield
    except (error_cls, *keep):
        raise
    except (np.linalg.LinAlgError, FloatingPointError, OverflowError, ZeroDivisionError,
            RuntimeError, ValueError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise error_cls(f"{what}: numerical failure ({type(exc).__name__}: {first}); the "
                        f"data ({magnitude_range(X)}) may be beyond what the solver resolves; "
                        "rescale the data") from None
