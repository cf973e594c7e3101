"""Lazy re-exports for the package roots: ``import meanfield`` (or ``solvers``, ``analysis``)
stays cheap, and the heavy dependencies (numba, POT, h5py, matplotlib, scipy) load on the first
use of a verb that needs them (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def resolve(package: str, table: dict[str, str], name: str) -> object:
    """Import and return the exported ``name`` of ``package``, cached in its namespace.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    table : dict
        Public name -> ``"module:attribute"`` (module absolute).
    name : str
        The attribute asked for.

    Returns
    -------
    object
        The exported object.

    Raises
    ------
    AttributeError
        For a name not in ``table``.
    """
    try:
        target = table[name]
    except KeyError:
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
    mod, _, attr = target.partition(":")
    value = getattr(importlib.import_module(mod), attr)
    setattr(importlib.import_module(package), name, value)
    return value


def names(package: str, table: dict[str, str]) -> list[str]:
    """What ``dir(package)`` lists: the names of ``table`` and those already bound, sorted."""
    return sorted(set(table) | set(vars(importlib.import_module(package))))


def exports(package: str, table: dict[str, str]) -> tuple[Callable, Callable]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``.

    Parameters
    ----------
    package, table
        As for :func:`resolve`.

    Returns
    -------
    (callable, callable)
        ``__getattr__(name)`` resolving a name on first use (:func:`resolve`), and
        ``__dir__()`` (:func:`names`).

    Raises
    ------
    Nothing; the returned ``__getattr__`` raises ``AttributeError`` for a name not in
    ``table``.
    """
    def __getattr__(name):
        return resolve(package, table, name)

    def __dir__():
        return names(package, table)

    return __getattr__, __dir__
