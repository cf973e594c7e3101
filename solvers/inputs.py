"""The one validator of training arrays ``X`` (n, d) and ``y`` (n,)."""

from __future__ import annotations

import numpy as np

from solvers.errors import DataError

#: Largest magnitude of an input or target value (and of a config number): the squares and
#: products the dynamics and the references form from them must stay finite floats.
MAX_ABS = 1e15


def _row_name(i: int, rows=None) -> str:
    """Where row ``i`` (0-based) is, for a person: its line in the file when known."""
    if rows is not None:
        return f"line {rows[i]}"
    return f"row {i} (0-based)"


def check_xy(X, y, source: str = "<data>", rows=None) -> tuple[np.ndarray, np.ndarray]:
    """Validate and normalise training inputs and targets.

    A 1-D ``X`` is read as ``d = 1``; a ``y`` of shape (n, 1) as (n,).

    Parameters
    ----------
    X : array-like of shape (n, d) or (n,)
        Inputs.
    y : array-like of shape (n,) or (n, 1)
        Targets.
    source : str
        Origin named in the error message (a file, or e.g. ``"<convex>"``).
    rows : sequence of int, optional
        The 1-based file line of each row (a CSV file), named instead of the 0-based row.

    Returns
    -------
    X : ndarray of shape (n, d), float64, C-contiguous
    y : ndarray of shape (n,), float64, C-contiguous

    Raises
    ------
    DataError
        Complex or non-numeric values, wrong dimensions, empty data, ``len(X) != len(y)``,
        NaN or Inf, or a value of magnitude above :data:`MAX_ABS` (naming the first bad
        row).
    """
    for name, arr in (("X", X), ("y", y)):
        if np.iscomplexobj(arr):
            raise DataError(source, name, "complex values; real numbers are needed")
    try:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(source, "X", f"not numeric: {exc}") from None
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise DataError(source, "X", f"must be 2-D (n, d), got shape {X.shape}")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise DataError(source, "y", f"must be 1-D (n,), got shape {y.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise DataError(source, "X", f"empty data set (shape {X.shape})")
    if X.shape[0] != y.shape[0]:
        raise DataError(source, "y", f"inconsistent dimensions: X has {X.shape[0]} rows, "
                                     f"y has {y.shape[0]} entries")
    if not np.all(np.isfinite(X)):
        i = int(np.argwhere(~np.isfinite(X))[0, 0])
        raise DataError(source, "X", f"NaN or Inf in {_row_name(i, rows)}")
    if not np.all(np.isfinite(y)):
        i = int(np.argwhere(~np.isfinite(y))[0, 0])
        raise DataError(source, "y", f"NaN or Inf in {_row_name(i, rows)}")
    for name, arr in (("X", X), ("y", y)):
        big = np.abs(arr) > MAX_ABS
        if big.any():
            i = int(np.argwhere(big)[0, 0])
            v = float(arr.reshape(len(arr), -1)[i][big.reshape(len(arr), -1)[i]][0])
            raise DataError(source, name, f"{v:g} in {_row_name(i, rows)}: values of magnitude "
                                          f"above {MAX_ABS:g} overflow the squares and products "
                                          "the dynamics forms; rescale the data")
    return np.ascontiguousarray(X), np.ascontiguousarray(y)
