"""Convergence diagnostics of one stage across chains: rank-normalised split-R̂, bulk and tail
ESS (docs/theory.md §2.5).

The statistics are ArviZ's (``arviz_stats.base.array_stats``; Vehtari, Gelman, Simpson,
Carpenter, Bürkner, *Bayesian Analysis* 16, 2021), never re-implemented here:

- **R̂**: ``rhat(method="rank")``, the larger of the bulk (rank-normalised) and the folded
  (rank-normalised ``|x − median|``) split-R̂;
- **bulk ESS**: ``ess(method="bulk")``, of the rank-normalised split chains;
- **tail ESS**: ``ess(method="tail", prob=(0.05, 0.95))``, the smaller ESS of the 5 % and 95 %
  quantiles.

The unit of a chain is a whole independent particle system, never a particle (THEORY §11).
With one chain ArviZ has no R̂; its two halves are passed as two chains (ArviZ splits each
again: R̂ over the chain's four quarters). That only tests the chain against itself, not that
the answer does not depend on where it started, and is labelled the weaker test.

Each quantity a report states is an observable: a series of shape (K, M) (chains, draws).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

#: Largest admissible rank-normalised split-R̂ (Vehtari et al. 2021; ArviZ's default).
RHAT_MAX = 1.01
#: Fewest bulk and tail effective samples per chain (Vehtari et al. 2021).
ESS_PER_CHAIN_MIN = 100.0
#: Quantiles of the tail ESS (ArviZ's default).
TAIL_PROB = (0.05, 0.95)
#: The R̂ test with several chains, and with one (the weaker test).
BETWEEN_CHAINS = "between chains"
WITHIN_CHAIN = "within one chain (weaker: split halves of one system)"


@dataclass
class Convergence:
    """R̂ and ESS of a stage's observables (JSON-ready: plain types, ``nan`` for untestable).

    Attributes
    ----------
    rhat : float
        Largest rank-normalised split-R̂ over the observables.
    ess_bulk, ess_tail : float
        Smallest bulk and tail ESS over the observables (all chains together).
    rhat_worst, ess_worst : str
        The observable with the largest R̂ and the one with the smallest ESS (bulk or tail).
    n_chains : int
    test : str
        :data:`BETWEEN_CHAINS` or :data:`WITHIN_CHAIN`.
    reasons : list of str
        Failed thresholds, one line each (empty when both hold).
    per_observable : dict
        ``{name: (rhat, ess_bulk, ess_tail)}``.
    """

    rhat: float
    ess_bulk: float
    ess_tail: float
    rhat_worst: str
    ess_worst: str
    n_chains: int
    test: str
    reasons: list = field(default_factory=list)
    per_observable: dict = field(default_factory=dict)


def _stats():
    from arviz_stats.base import array_stats
    return array_stats


def diagnostics(draws) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ArviZ's rank-normalised split-R̂, bulk ESS and tail ESS of each series.

    Parameters
    ----------
    draws : array-like, shape (P, K, M)
        ``P`` series of ``K`` chains and ``M`` draws each (``M >= 8``).

    Returns
    -------
    rhat, ess_bulk, ess_tail : ndarray, shape (P,)
        ``nan`` where a series is constant or not finite (ArviZ's convention). With ``K = 1``,
        R̂ of the chain's two halves taken as two chains (module docstring).

    Raises
    ------
    ValueError
        Not three-dimensional, or fewer than 8 draws.
    """
    a = np.asarray(draws, dtype=float)
    if a.ndim != 3:
        raise ValueError(f"draws: expected shape (series, chains, draws), got {a.shape}")
    P, K, M = a.shape
    if M < 8:
        raise ValueError(f"draws: {M} draws per chain, at least 8 needed")
    az = _stats()
    h = M // 2
    r_in = a if K > 1 else np.stack([a[:, 0, :h], a[:, 0, M - h:]], axis=1)
    with np.errstate(all="ignore"):
        rhat = np.asarray(az.rhat(r_in, chain_axis=-2, draw_axis=-1, method="rank"),
                          dtype=float).reshape(P)
        bulk = np.asarray(az.ess(a, chain_axis=-2, draw_axis=-1, method="bulk"),
                          dtype=float).reshape(P)
        tail = np.asarray(az.ess(a, chain_axis=-2, draw_axis=-1, method="tail",
                                 prob=TAIL_PROB), dtype=float).reshape(P)
    return rhat, bulk, tail


def assess(observables: Mapping[str, np.ndarray], *, rhat_max: float = RHAT_MAX,
           ess_per_chain_min: float = ESS_PER_CHAIN_MIN) -> Convergence:
    """Judge the observables of a stage (their second half) by R̂ and ESS.

    Parameters
    ----------
    observables : mapping of str to array-like of shape (K, M)
        One series per reported quantity, e.g. ``f(x_0)``, ..., ``risk``, ``regulariser``;
        the same ``K`` chains and ``M >= 8`` draws for all.
    rhat_max, ess_per_chain_min : float
        Thresholds (:data:`RHAT_MAX`, :data:`ESS_PER_CHAIN_MIN` by default): fails when the
        largest R̂ is ``>= rhat_max`` or the smallest bulk or tail ESS is below
        ``K · ess_per_chain_min``. Constant series (``nan``) are left out.

    Returns
    -------
    Convergence

    Raises
    ------
    ValueError
        No observables, or series of different shapes.
    """
    names = list(observables)
    if not names:
        raise ValueError("observables: none given")
    series = [np.asarray(observables[k], dtype=float) for k in names]
    if any(s.ndim != 2 or s.shape != series[0].shape for s in series):
        raise ValueError("observables: every series must have the same shape (chains, draws), "
                         f"got {[s.shape for s in series]}")
    K = series[0].shape[0]
    rhat, bulk, tail = diagnostics(np.stack(series))
    ess = np.fmin(bulk, tail)
    per = {k: (float(r), float(b), float(t)) for k, r, b, t in zip(names, rhat, bulk, tail)}

    def pick(vals, largest):
        ok = np.isfinite(vals)
        if not np.any(ok):
            return math.nan, ""
        i = int(np.nanargmax(vals) if largest else np.nanargmin(vals))
        return float(vals[i]), names[i]

    r, r_name = pick(rhat, True)
    e, e_name = pick(ess, False)
    test = BETWEEN_CHAINS if K > 1 else WITHIN_CHAIN
    reasons = []
    if r >= rhat_max:
        among = f"between {K} chains" if K > 1 else "within one chain, the weaker test"
        reasons.append(f"R-hat {r:.4g} >= {rhat_max:g} at {r_name} (rank-normalised split-R-hat "
                       f"{among})")
    need = K * ess_per_chain_min
    if e < need:
        kind = "bulk" if bulk[names.index(e_name)] <= tail[names.index(e_name)] else "tail"
        # with several chains each number says whether it is per chain or of all together
        got, want = ((f"{e / K:.4g} per chain ({e:.4g} for all {K} chains together)",
                      f"{ess_per_chain_min:g} per chain ({need:g} together)") if K > 1 else
                     (f"{e:.4g}", f"{need:g}"))
        reasons.append(f"too few effective samples ({kind} ESS {got} at {e_name}, at least "
                       f"{want} needed; autocorrelation time too long for the stage)")
    finite = (lambda v: float(np.nanmin(v)) if np.any(np.isfinite(v)) else math.nan)
    return Convergence(r, finite(bulk), finite(tail), r_name, e_name, K, test, reasons, per)
