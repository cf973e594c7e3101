"""The zero-temperature certificate ``G`` (THEORY §4).

``G(v) = (1/λ) Σ_j R_j (v·x̃_j)_+`` for unit directions ``v = (w, b)/|(w, b)|``, with the scaled
residuals ``R_j = (f(x_j) − y_j)/n`` of a predictor ``f``. At the optimum of the convex
``τ → 0`` problem ``max_v |G(v)| = 1`` (when ``f ≢ 0``), learned directions maximise ``|G|`` and
carry ``sign(a) = −sign(G(v))``. At finite ``τ`` the direction marginal of the stationary measure
is ``∝ (1 − G²)^{−(d+1)/2}`` (THEORY §5), so particles with ``|G|`` well below its maximum are
the thermal halo.
"""

from __future__ import annotations

import numpy as np

from solvers.geometry import lifted


def residuals(f_train, y) -> np.ndarray:
    """Scaled residuals ``R_j = (f(x_j) − y_j)/n`` (THEORY §1): ndarray of shape (n,)."""
    f_train = np.asarray(f_train, dtype=float)
    y = np.asarray(y, dtype=float)
    return (f_train - y) / y.shape[0]


def certificate(V, X, R, lam) -> np.ndarray:
    """The certificate ``G(v) = (1/λ) Σ_j R_j (v·x̃_j)_+`` of the zero-temperature problem for
    each row of ``V`` (THEORY §4; at the optimum ``max|G| = 1`` and rays have
    ``sign(a) = −sign(G)``).

    Parameters
    ----------
    V : ndarray of shape (m, d+1)
        Unit directions ``(w, b)/|(w, b)|``.
    X : ndarray of shape (n, d)
        Training inputs.
    R : ndarray of shape (n,)
        Scaled residuals (:func:`residuals`).
    lam : float
        Weight decay ``λ > 0``.

    Returns
    -------
    ndarray of shape (m,)
        Dimensionless.

    Raises
    ------
    ValueError
        ``lam <= 0``.
    """
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    Z = np.asarray(V, dtype=float) @ lifted(X).T
    return np.maximum(Z, 0.0) @ np.asarray(R, dtype=float) / lam
