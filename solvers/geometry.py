"""Geometry shared by the solvers and the analysis: lifted inputs and kink hyperplanes.

Lifted inputs are ``x̃_j = (x_j, 1)`` (THEORY §1), so that a neuron's pre-activation is
``w·x + b = v·x̃`` with ``v = (w, b)``.

Kink hyperplanes of rays (THEORY §6): the kink of a direction ``v = (w, b)`` with ``w ≠ 0`` is the hyperplane
``{x : w·x + b = 0}``, written ``{x : normal·x = offset}`` with ``normal = w/|w|`` and
``offset = −b/|w|``. ``v`` and ``−v`` give the same hyperplane; a pure-bias direction
(``w = 0``) gives none. Hence the number of hyperplanes ``K ≤ J``, the number of rays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def lifted(X) -> np.ndarray:
    """Lifted inputs ``x̃_j = (x_j, 1)``.

    Parameters
    ----------
    X : array-like of shape (n, d), or (n,) read as ``d = 1``
        Inputs.

    Returns
    -------
    ndarray of shape (n, d+1)
        ``[X, 1]``, float64.

    Raises
    ------
    Nothing for numeric input.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    return np.hstack([X, np.ones((X.shape[0], 1))])


@dataclass
class Kink:
    """A kink hyperplane ``{x : normal·x = offset}``; ``rays`` lists the ray indices on it."""

    normal: np.ndarray
    offset: float
    rays: list

    def as_dict(self) -> dict:
        return {"normal": [float(x) for x in self.normal], "offset": float(self.offset),
                "rays": [int(k) for k in self.rays]}


def hyperplane(v, pure_bias_tol: float = 1e-6):
    """Canonical ``(normal, offset)`` of the kink of direction ``v`` (d+1,), or ``None`` when
    ``|w| ≤ pure_bias_tol`` (pure bias). The sign is fixed so that the first non-negligible
    entry of ``normal`` is positive, which identifies ``v`` and ``−v``."""
    v = np.asarray(v, dtype=float)
    w, b = v[:-1], v[-1]
    nw = np.linalg.norm(w)
    if nw <= pure_bias_tol:
        return None
    normal, offset = w / nw, -b / nw
    first = np.nonzero(np.abs(normal) > 1e-9)[0][0]
    if normal[first] < 0:
        normal, offset = -normal, -offset
    return normal, float(offset)


def kink_hyperplanes(ray_directions: ArrayLike, *, angle_tol: float = 0.05, offset_tol: float = 0.05,
                     pure_bias_tol: float = 1e-3) -> list[Kink]:
    """Distinct kink hyperplanes of a set of rays.

    Parameters
    ----------
    ray_directions : array-like of shape (J, d+1)
        Unit directions ``v_k``.
    angle_tol : float
        Normals closer than this angle (radians) may be merged …
    offset_tol : float
        … when their offsets also differ by at most this (input units).
    pure_bias_tol : float
        Directions with ``|w| ≤ pure_bias_tol`` are pure bias and give no hyperplane.

    Returns
    -------
    list of Kink
        Hyperplanes ``{x : normal·x = offset}`` with unit ``normal`` (shape (d,)), ``v`` and
        ``−v`` merged (THEORY §6); empty for no rays.

    Raises
    ------
    ValueError
        Directions that are not of shape (J, d+1).
    """
    kinks: list[Kink] = []
    dirs = np.asarray(ray_directions, dtype=float)
    if dirs.size == 0:
        return kinks
    for k, v in enumerate(dirs.reshape(-1, dirs.shape[-1])):
        h = hyperplane(v, pure_bias_tol)
        if h is None:
            continue
        normal, offset = h
        for kk in kinks:
            ang = np.arccos(np.clip(abs(float(kk.normal @ normal)), -1, 1))
            same_side = float(kk.normal @ normal) > 0
            off = offset if same_side else -offset
            if ang <= angle_tol and abs(kk.offset - off) <= offset_tol:
                kk.rays.append(k)
                break
        else:
            kinks.append(Kink(normal, offset, [k]))
    return kinks
