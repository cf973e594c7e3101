"""Lazy re-exports for the package roots: ``import meanfield`` (or ``solvers``, ``analysis``)
stays cheap, and the heavy dependencies (numba, POT, h5py, matplotlib, scipy) load on the first
use of a verb that needs them (PEP 562)."""

from __future__ import annotations

import importlib


def exports(package: str, table: dict):
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    table : dict
        Public name -> ``"module:attribute"`` (module absolute).

    Returns
    -------
    (callable, callable)
        ``__getattr__(name)`` resolving a name on first use (then cached in the package's
        namespace), and ``__dir__()``.

    Raises
    ------
    AttributeError
        From ``__getattr__``, for a name not in ``table``.
    """
    def __getattr__(name):
        try:
            target = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        mod, _, attr = target.partition(":")
        value = getattr(importlib.import_module(mod), attr)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__():
        return sorted(set(table) | set(globals_of(package)))

    return __getattr__, __dir__


def globals_of(package: str) -> list:
    """Names already bound in ``package``'s namespace."""
    return list(vars(importlib.import_module(package)))
