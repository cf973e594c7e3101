"""Gaussian designs for the high-dimensional GD study (THEORY §10, [LWTM26]).

Inputs ``x_j ~ N(0, Σ)`` with a diagonal covariance ``Σ = diag(λ_1, …, λ_d)``, either isotropic
(``λ_k = 1``) or with a power-law spectrum ``λ_k ∝ k^{−a}``; labels independent of the inputs,
``y_j = ±1`` or ``y_j = ±U[0.5, 1.5]`` with equiprobable signs. Everything is seeded: a sample is a
function of ``(seed, n, d, a, labels)`` only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from meanfield.data import Dataset
from meanfield.errors import DataError

#: Label kinds of :meth:`GaussianDesign.sample`.
LABELS = ("sign", "uniform")
#: Spectrum normalisations of :class:`GaussianDesign`.
NORMALIZE = ("trace", "top")

_SOURCE = "gaussian design"


def _positive_int(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise DataError(_SOURCE, field, f"must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class GaussianDesign:
    """Centred Gaussian inputs with a diagonal covariance.

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1``.
    a : float
        Power-law exponent: ``λ_k ∝ k^{−a}``, ``k = 1..d``; ``a = 0`` is isotropic. ``a >= 0``.
    normalize : {"trace", "top"}
        ``"trace"``: scale the spectrum so that ``tr Σ = d`` (isotropic: ``Σ = I_d``); ``"top"``:
        ``λ_1 = 1``, so that ``tr Σ = Σ_k k^{−a}`` (bounded in ``d`` for ``a > 1``).

    Raises
    ------
    DataError
        Non-positive ``d``, negative or non-finite ``a``, unknown ``normalize``.
    """

    d: int
    a: float = 0.0
    normalize: str = "trace"

    def __post_init__(self):
        _positive_int(self.d, "d")
        if not (isinstance(self.a, (int, float, np.floating)) and math.isfinite(self.a)
                and self.a >= 0):
            raise DataError(_SOURCE, "a", f"spectrum exponent must be finite and >= 0, "
                                          f"got {self.a!r}")
        if self.normalize not in NORMALIZE:
            raise DataError(_SOURCE, "normalize", f"must be one of {', '.join(NORMALIZE)}, "
                                                  f"got {self.normalize!r}")

    @cached_property
    def lam(self) -> np.ndarray:
        """The spectrum ``(λ_1, …, λ_d)``, ndarray of shape (d,), non-increasing."""
        lam = np.arange(1, self.d + 1, dtype=np.float64) ** (-float(self.a))
        if self.normalize == "trace":
            lam *= self.d / lam.sum()
        return lam

    @property
    def trace(self) -> float:
        """``tr Σ = ‖λ(Σ)‖_1`` (the step size of THEORY §10 is ``η = c / tr Σ``)."""
        return float(self.lam.sum())

    def sample(self, n: int, seed=0, labels: str = "sign") -> Dataset:
        """Draw ``n`` labelled examples.

        Parameters
        ----------
        n : int
            Number of examples, ``n >= 1``.
        seed : int or sequence of int
            Seed of NumPy's ``default_rng`` (a sequence such as ``(seed, trial)`` keys independent
            streams).
        labels : {"sign", "uniform"}
            ``"sign"``: ``y_j = ±1``; ``"uniform"``: ``y_j = s_j u_j`` with ``u_j ~ U[0.5, 1.5]``;
            signs ``s_j`` are i.i.d. equiprobable and independent of ``X``.

        Returns
        -------
        Dataset
            ``X`` of shape (n, d) with rows ``x_j ~ N(0, Σ)`` and ``y`` of shape (n,), never 0.

        Raises
        ------
        DataError
            Non-positive ``n``, unknown ``labels``.
        """
        n = _positive_int(n, "n")
        if labels not in LABELS:
            raise DataError(_SOURCE, "labels", f"must be one of {', '.join(LABELS)}, "
                                               f"got {labels!r}")
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n, self.d)) * np.sqrt(self.lam)
        s = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        y = s if labels == "sign" else s * rng.uniform(0.5, 1.5, n)
        return Dataset(X, y, f"gaussian_design(n={n}, d={self.d}, a={self.a:g}, "
                             f"normalize={self.normalize}, labels={labels}, seed={seed})")
