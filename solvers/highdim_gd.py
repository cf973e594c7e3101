"""Finite-step gradient descent on few-neuron ReLU models without bias (THEORY §10, [LWTM26]).

Model ``f(x) = Σ_j a_j σ(w_j·x)`` with ``σ = ReLU``, fixed output signs ``a_j = ±1`` and trained
first-layer weights ``W = (w_1; …; w_m)`` of shape (m, d); loss ``L = ½ Σ_i (f(x_i) − y_i)²``; plain
GD ``w_j ← w_j − η ∂L/∂w_j`` with ``∂L/∂w_j = a_j Σ_i r_i σ'(w_j·x_i) x_i``, ``r = f − y`` and
``σ'(z) = 1[z > 0]``, except on the first step, where ``σ'(0) = 1`` (so that the zero start moves:
``w_{1,j} = a_j η Xᵀy``). The step is ``η = c / tr Σ`` (:func:`step_size`).

Primal–dual bookkeeping: predictions ``β_{t,j} = X w_{t,j}`` and span coefficients ``α_{t,j}`` with
``w_{t,j} = w_{0,j} + Xᵀ α_{t,j}``; every GD increment lies in the row space of ``X``, so
``α_{t+1,j} = α_{t,j} − η a_j σ'(β_{t,j}) ⊙ r_t`` exactly. The activation pattern at step ``t`` is
``1[β_{t,j} > 0]`` (shape (m, n)); its changes are recorded as events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from solvers.errors import DivergenceError, InputError
from solvers.inputs import check_xy

#: Initialisations of :func:`initial_weights`.
INITS = ("zero", "all_active", "random", "disconnected")

_SOURCE = "highdim gd"


def step_size(c: float, trace: float) -> float:
    """GD step ``η = c / tr Σ`` of THEORY §10.

    Parameters
    ----------
    c : float
        Step constant, ``0 < c < 2`` for the linear phase to be stable.
    trace : float
        ``tr Σ > 0`` of the input covariance (``d`` for isotropic inputs).

    Returns
    -------
    float
        ``η`` (inverse units of ``|x|²``).

    Raises
    ------
    InputError
        ``c`` outside ``(0, 2)`` or a non-positive trace.
    """
    if not (math.isfinite(c) and 0 < c < 2):
        raise InputError(_SOURCE, "c", f"must lie in (0, 2), got {c!r}")
    if not (math.isfinite(trace) and trace > 0):
        raise InputError(_SOURCE, "trace", f"must be positive, got {trace!r}")
    return float(c) / float(trace)


def default_signs(m: int) -> np.ndarray:
    """Output signs ``a = (+1, −1, +1, −1, …)`` of length ``m`` (``m = 1``: ``(+1,)``;
    ``m = 2``: ``(+1, −1)``), float64 of shape (m,).

    Raises
    ------
    InputError
        ``m < 1``.
    """
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise InputError(_SOURCE, "neurons", f"must be a positive integer, got {m!r}")
    return np.where(np.arange(m) % 2 == 0, 1.0, -1.0)


def _check_signs(signs) -> np.ndarray:
    a = np.atleast_1d(np.asarray(signs, dtype=np.float64))
    if a.ndim != 1 or a.size == 0 or not np.all(np.abs(a) == 1):
        raise InputError(_SOURCE, "signs", f"must be a non-empty list of +1/-1, got {signs!r}")
    return a


def _weights_for_predictions(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Minimum-norm ``W`` (m, d) with ``X w_j = B_j`` (rows of ``B``, shape (m, n))."""
    K = X @ X.T
    try:
        C = np.linalg.solve(K, B.T)
    except np.linalg.LinAlgError:
        raise InputError(_SOURCE, "X", "X Xᵀ is singular (need d >= n and rows in general "
                                       "position)") from None
    return (X.T @ C).T


def initial_weights(kind: str, X: ArrayLike, signs: ArrayLike, *, eps: float = 1e-3,
                    seed: int | tuple = 0, groups: ArrayLike | None = None) -> np.ndarray:
    """Initial weights ``W_0`` of shape (m, d).

    Parameters
    ----------
    kind : {"zero", "all_active", "random", "disconnected"}
        ``"zero"``: ``W_0 = 0`` (GD then takes its first step with ``σ'(0) = 1``).
        ``"all_active"``: the minimum-norm ``w_{0,j}`` with ``β_{0,j} = X w_{0,j} = ε·1`` for every
        neuron.
        ``"random"``: i.i.d. ``N(0, ε²/d)`` entries, so that ``β_{0,j,i} ≈ N(0, ε² tr Σ / d)``.
        ``"disconnected"``: the minimum-norm ``w_{0,j}`` with ``β_{0,j} = ε(2·1[i ∈ S_j] − 1)``,
        where the active sets ``S_j`` are disjoint: example ``i`` goes to neuron ``groups[i]``
        (``-1``: to none). Default ``groups``: uniform over ``{-1, 0, …, m−1}``, seeded.
    X : array_like of shape (n, d)
        Inputs.
    signs : array_like of shape (m,)
        Output signs (only their number is used).
    eps : float
        Scale ``ε > 0`` of the non-zero initialisations.
    seed : int or sequence of int
        Seed for ``"random"`` and the default ``groups``.
    groups : array_like of int, shape (n,), optional
        Neuron of each example for ``"disconnected"``.

    Returns
    -------
    ndarray of shape (m, d)
        The initial weights ``W_0`` (zero for ``kind = "zero"``).

    Raises
    ------
    InputError
        Unknown ``kind``, ``eps <= 0``, bad ``groups``, or a singular ``X Xᵀ`` where needed.
    """
    X = np.asarray(X, dtype=np.float64)
    m = _check_signs(signs).size
    n, d = X.shape
    if kind not in INITS:
        raise InputError(_SOURCE, "init", f"must be one of {', '.join(INITS)}, got {kind!r}")
    if kind == "zero":
        return np.zeros((m, d))
    if not (math.isfinite(eps) and eps > 0):
        raise InputError(_SOURCE, "eps", f"must be positive, got {eps!r}")
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.standard_normal((m, d)) * (eps / math.sqrt(d))
    if kind == "all_active":
        return _weights_for_predictions(X, np.full((m, n), eps))
    if groups is None:
        groups = rng.integers(-1, m, size=n)
    groups = np.asarray(groups)
    if groups.shape != (n,) or not np.issubdtype(groups.dtype, np.integer) \
            or groups.min() < -1 or groups.max() >= m:
        raise InputError(_SOURCE, "groups", f"must be {n} integers in [-1, {m - 1}]")
    B = np.where(groups[None, :] == np.arange(m)[:, None], eps, -eps)
    return _weights_for_predictions(X, B)


@dataclass
class GDResult:
    """Outcome of :func:`gd`.

    Attributes
    ----------
    W : ndarray (m, d)
        Final weights ``w_T``.
    W0 : ndarray (m, d)
        Initial weights.
    alpha : ndarray (m, n)
        Span coefficients: ``W = W0 + alpha @ X``.
    beta : ndarray (m, n)
        Final pre-activations ``β_T = X w_T`` (per neuron).
    signs : ndarray (m,)
        Output signs ``a_j``.
    eta : float
        Step size.
    n_steps : int
        GD steps taken ``T``.
    converged : bool
        Whether the stopping rule fired before ``max_steps``.
    change_steps : ndarray (k,) of int
        Steps ``t`` at which the pattern ``1[β_t > 0]`` differs from step ``t−1``; the first entry
        is 0 (the initial pattern).
    change_patterns : ndarray (k, m, n) of bool
        The pattern from each of those steps on.
    W_last_change : ndarray (m, d)
        ``w_t`` at the last change (the start of the final linear phase).
    loss : float
        Final ``½ Σ (f − y)²``.
    history : dict of ndarray, optional
        With ``record=True``: ``beta``, ``alpha`` of shape (T+1, m, n) and ``loss`` (T+1,).
    """

    W: np.ndarray
    W0: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    signs: np.ndarray
    eta: float
    n_steps: int
    converged: bool
    change_steps: np.ndarray
    change_patterns: np.ndarray
    W_last_change: np.ndarray
    loss: float
    history: dict = field(default_factory=dict)

    @property
    def pattern(self) -> np.ndarray:
        """Final activation pattern ``1[β_T > 0]``, bool (m, n)."""
        return self.beta > 0

    @property
    def last_change(self) -> int:
        """Step of the last pattern change (0: the pattern never changed)."""
        return int(self.change_steps[-1])

    def predict(self) -> np.ndarray:
        """Model outputs ``f(x_i) = Σ_j a_j σ(β_{T,j,i})`` on the training inputs, shape (n,)."""
        return self.signs @ np.maximum(self.beta, 0.0)


def gd(X: ArrayLike, y: ArrayLike, *, eta: float, signs: ArrayLike = (1.0,),
       W0: ArrayLike | None = None, tol: float = 1e-12,
       max_steps: int = 100_000, record: bool = False) -> GDResult:
    """Run full-batch GD on ``f(x) = Σ_j a_j σ(w_j·x)`` until it stalls.

    Parameters
    ----------
    X : array_like (n, d)
        Inputs.
    y : array_like (n,)
        Targets.
    eta : float
        Step size (see :func:`step_size`), ``> 0``.
    signs : array_like (m,)
        Fixed output signs ``a_j = ±1`` (:func:`default_signs`).
    W0 : array_like (m, d), optional
        Initial weights (:func:`initial_weights`); default zero.
    tol : float
        Stop after the first step with ``‖w_{t+1} − w_t‖_F <= tol · ‖w_{t+1}‖_F`` that leaves the
        pattern unchanged. In the final linear phase the distance to the limit is then at most
        ``tol·‖w‖·ρ/(1−ρ)`` with ``ρ`` the contraction factor (about ``1 − c`` for ``d ≫ n``).
    max_steps : int
        Upper bound on the number of steps.
    record : bool
        Keep ``β_t``, ``α_t`` and the loss at every step in ``history``.

    Returns
    -------
    GDResult

    Raises
    ------
    InputError
        Bad shapes, non-finite values, ``eta <= 0``, ``tol < 0`` or ``max_steps < 1``.
    DivergenceError
        Non-finite weights (step size too large).
    """
    X, y = check_xy(X, y, _SOURCE)
    a = _check_signs(signs)
    m = a.size
    n, d = X.shape
    if not (math.isfinite(eta) and eta > 0):
        raise InputError(_SOURCE, "eta", f"must be positive, got {eta!r}")
    if not (math.isfinite(tol) and tol >= 0):
        raise InputError(_SOURCE, "tol", f"must be >= 0, got {tol!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) \
            or max_steps < 1:
        raise InputError(_SOURCE, "max_steps", f"must be a positive integer, got {max_steps!r}")
    W0 = np.zeros((m, d)) if W0 is None else np.array(W0, dtype=np.float64)
    if W0.shape != (m, d):
        raise InputError(_SOURCE, "W0", f"must have shape {(m, d)}, got {W0.shape}")

    W = W0.copy()
    alpha = np.zeros((m, n))
    beta = W @ X.T
    pattern = beta > 0
    change_steps, change_patterns, W_last = [0], [pattern], W.copy()
    hist_beta, hist_alpha, hist_loss = [], [], []
    converged = False
    t = 0
    while t < max_steps:
        active = (beta >= 0) if t == 0 else pattern         # σ'(0) = 1 on the first step only
        r = a @ np.maximum(beta, 0.0) - y
        if record:
            hist_beta.append(beta.copy())
            hist_alpha.append(alpha.copy())
            hist_loss.append(0.5 * float(r @ r))
        coef = eta * a[:, None] * active * r[None, :]        # (m, n): η a_j σ'(β_ji) r_i
        alpha -= coef
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below
            dW = coef @ X
            W -= dW
        t += 1
        if not np.all(np.isfinite(W)):
            raise DivergenceError(t, float("nan"), f"GD diverged at step {t} (eta={eta:g})")
        with np.errstate(over="ignore", invalid="ignore"):
            beta = W @ X.T
        new = beta > 0
        changed = not np.array_equal(new, pattern)
        if changed:
            pattern = new
            change_steps.append(t)
            change_patterns.append(new)
            W_last = W.copy()
        elif np.linalg.norm(dW) <= tol * np.linalg.norm(W):
            converged = True
            break
    r = a @ np.maximum(beta, 0.0) - y
    history = {}
    if record:
        hist_beta.append(beta.copy())
        hist_alpha.append(alpha.copy())
        hist_loss.append(0.5 * float(r @ r))
        history = {"beta": np.array(hist_beta), "alpha": np.array(hist_alpha),
                   "loss": np.array(hist_loss)}
    return GDResult(W=W, W0=W0, alpha=alpha, beta=beta, signs=a, eta=float(eta), n_steps=t,
                    converged=converged, change_steps=np.array(change_steps, dtype=np.int64),
                    change_patterns=np.array(change_patterns), W_last_change=W_last,
                    loss=0.5 * float(r @ r), history=history)
