"""Symmetric two-point data: [LJM26] Proposition 7, closed forms of THEORY §8 *(derived)*.

Data ``x_1 = x̄``, ``x_2 = −x̄``, ``s = |x̄|``, targets ``(ȳ, ȳ)`` (even) or ``(ȳ, −ȳ)`` (odd),
weight decay ``λ > 0``, ``τ → 0``. Kinks are hyperplanes ``{⟨x̄, x⟩ = c}``.

* even: ``κ = max(2, sqrt(1+s²))``; for ``s < √3`` the predictor is constant (a pure-bias ray,
  no kink); for ``s > √3`` kinks at ``c = ±1`` and
  ``f(x) = φ/(1+s²) [(1+⟨x̄,x⟩)_+ + (1−⟨x̄,x⟩)_+]``.
* odd: ``κ = sqrt(1+s²)`` if ``s ≥ 1``, ``2s/sqrt(1+s²)`` if ``s ≤ 1``; kinks at
  ``c = ±min(1, s²)`` (through the data points when ``s < 1``).
* fitted value ``φ = |f(±x̄)| = |ȳ| − 2λ/κ`` if ``λ < |ȳ|κ/2``, else ``f ≡ 0`` (no kink).

The tie points ``s = √3`` (even) and ``s = 1`` (odd) have several optimal solutions; there the
kink prediction is reported as ambiguous.
"""

from __future__ import annotations

import numpy as np


def detect(X, y, tol: float = 1e-9):
    """``"even"``, ``"odd"`` or ``None``: whether ``(X, y)`` is symmetric two-point data.

    ``X`` must have two rows with ``x_2 = −x_1 ≠ 0`` and ``y_2 = ±y_1 ≠ 0``, within ``tol``
    relative to ``|x_1|`` and ``|y_1|``.
    """
    X = np.asarray(X, float).reshape(np.shape(X)[0], -1)
    y = np.asarray(y, float)
    if X.shape[0] != 2:
        return None
    s = np.linalg.norm(X[0])
    if s == 0 or np.linalg.norm(X[0] + X[1]) > tol * s or y[0] == 0:
        return None
    if abs(y[1] - y[0]) <= tol * abs(y[0]):
        return "even"
    if abs(y[1] + y[0]) <= tol * abs(y[0]):
        return "odd"
    return None


def predict(s: float, ybar: float, lam: float, labels: str) -> dict:
    """Closed-form ``τ → 0`` solution for ``|x̄| = s`` (THEORY §8, [LJM26] Proposition 7).

    Parameters
    ----------
    s : float
        ``|x̄|`` of the data ``x_1 = x̄ = −x_2`` (input units), ``> 0``.
    ybar : float
        Label ``y_1`` (``y_2 = ±ybar``).
    lam : float
        Weight decay ``λ > 0``.
    labels : {"even", "odd"}
        ``y_2 = y_1`` or ``y_2 = −y_1``.

    Returns
    -------
    dict
        ``kappa``; ``phi`` (fitted value ``|f(±x̄)|``); ``zero`` (``f ≡ 0``); ``kinks``: the
        offsets ``c`` of the kink hyperplanes ``{⟨x̄, x⟩ = c}``, sorted; ``ambiguous`` (at a tie
        point).

    Raises
    ------
    ValueError
        ``labels`` not "even"/"odd", ``s <= 0`` or ``lam <= 0``.
    """
    if labels not in ("even", "odd"):
        raise ValueError(f"labels must be 'even' or 'odd', got {labels!r}")
    if not (s > 0 and lam > 0):
        raise ValueError(f"need s > 0 and lam > 0, got s={s}, lam={lam}")
    q = np.sqrt(1.0 + s * s)
    if labels == "even":
        kappa = max(2.0, q)
        kinks = [] if s < np.sqrt(3.0) else [-1.0, 1.0]
        ambiguous = bool(np.isclose(s, np.sqrt(3.0)))
    else:
        kappa = q if s >= 1 else 2.0 * s / q
        c = min(1.0, s * s)
        kinks = [-c, c]
        ambiguous = bool(np.isclose(s, 1.0))
    zero = not lam < abs(ybar) * kappa / 2.0
    phi = 0.0 if zero else abs(ybar) - 2.0 * lam / kappa
    return {"kappa": float(kappa), "phi": float(phi), "zero": bool(zero),
            "kinks": [] if zero else [float(k) for k in kinks], "ambiguous": ambiguous}


def measured_kinks(kinks, xbar, angle_tol: float = 0.05) -> tuple:
    """Offsets ``c`` of measured kink hyperplanes in the form ``{⟨x̄, x⟩ = c}``.

    Parameters
    ----------
    kinks : list of solvers.geometry.Kink
        Hyperplanes ``{x : normal·x = offset}``.
    xbar : ndarray of shape (d,)
    angle_tol : float
        A kink counts as ``⟨x̄, x⟩ = c`` when its normal is within this angle of ``±x̄``.

    Returns
    -------
    on_axis : list of float   sorted offsets ``c``
    off_axis : int            kinks whose normal is not along ``x̄``
    """
    xbar = np.asarray(xbar, float)
    s = np.linalg.norm(xbar)
    xh = xbar / s
    on, off = [], 0
    for k in kinks:
        cosang = float(np.dot(k.normal, xh))
        if abs(cosang) >= np.cos(angle_tol):
            on.append(float(np.sign(cosang) * s * k.offset))
        else:
            off += 1
    return sorted(on), off


def compare(X, y, lam, kinks, f_train) -> dict | None:
    """Predicted (THEORY §8) next to measured kinks and fitted value, or None when the data is
    not symmetric two-point data.

    Parameters
    ----------
    X : ndarray of shape (2, d)
    y : ndarray of shape (2,)
    lam : float
    kinks : list of solvers.geometry.Kink
        Measured kink hyperplanes.
    f_train : ndarray of shape (2,)
        Measured predictor at ``x̄`` and ``−x̄``.

    Returns
    -------
    dict
        ``labels, s, ybar, lam, predicted (see predict), measured: {"kinks", "off_axis",
        "phi"}``.
    """
    labels = detect(X, y)
    if labels is None:
        return None
    X = np.asarray(X, float).reshape(2, -1)
    s = float(np.linalg.norm(X[0]))
    ybar = float(y[0])
    pred = predict(s, ybar, lam, labels)
    on, off = measured_kinks(kinks, X[0])
    f = np.asarray(f_train, float)
    return {"labels": labels, "s": s, "ybar": ybar, "lam": float(lam), "predicted": pred,
            "measured": {"kinks": on, "off_axis": off,
                         "phi": float(np.mean(np.abs(f)))}}
