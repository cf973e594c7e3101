"""The stability guard: one line before the first step when ``η`` is above the stability limit
that the exact references predict for the data (small data sets only; the references cached)."""

from __future__ import annotations

#: The guard skips data sets with more points than this (the convex reference enumerates
#: the dichotomies).
GUARD_MAX_N = 64
#: ... nor data sets with more activation patterns than this (Cover's bound
#: ``2 Σ_{k≤d} C(n−1, k)``): the convex reference costs seconds per hundred patterns
#: (measured: 3.5 s at n = 8, d = 50; 83 s at n = 12, d = 50 with 4096 patterns).
GUARD_MAX_PATTERNS = 512
_GUARD_CACHE: dict = {}


def _pattern_bound(n: int, d: int) -> int:
    """Cover's bound on the activation patterns of ``n`` lifted points in ``R^(d+1)``."""
    import math
    return 2 * sum(math.comb(n - 1, k) for k in range(min(d, n - 1) + 1)) if n else 0


def _stability_guard(cfg, dataset, log) -> None:
    """One-line warning when ``eta`` is above the stability limit of the data mode predicted
    by the exact references (``solvers.stability.reference_limits``; relu, ``n ≤
    GUARD_MAX_N`` and at most ``GUARD_MAX_PATTERNS`` activation patterns, else one note that
    the check is skipped; not for ``"mala"``, exact at any step). The run itself stops at the
    first observation with ``η h ≥ 2``."""
    from solvers.integrators import integrator_named
    if cfg.model.activation != "relu" or dataset.n > GUARD_MAX_N \
            or integrator_named(cfg.dynamics.integrator).exact:     # exact at any step
        return
    patterns = _pattern_bound(dataset.n, dataset.d)
    if patterns > GUARD_MAX_PATTERNS:
        log(f"note: eta is not checked against the exact references before the run (up to "
            f"{patterns} activation patterns at n={dataset.n}, d={dataset.d}; the check "
            f"handles {GUARD_MAX_PATTERNS}); the run stops if its step becomes unstable")
        return
    from solvers.stability import STABILITY_LIMIT, reference_limits
    eta = float(cfg.dynamics.eta)
    key = (dataset.X.tobytes(), dataset.y.tobytes(), dataset.X.shape, cfg.dynamics.lam,
           tuple(cfg.taus), eta)
    if key not in _GUARD_CACHE:
        try:
            _GUARD_CACHE[key] = reference_limits(dataset.X, dataset.y,
                                                 float(cfg.dynamics.lam), cfg.taus, eta=eta)
        except Exception:      # noqa: BLE001 - a failed estimate must not stop the run
            _GUARD_CACHE[key] = []
    limits = _GUARD_CACHE[key]
    if not limits:
        return
    name, tau, mode = max(limits, key=lambda t: t[2].curvature)
    if mode.eta_lambda_max(eta) >= STABILITY_LIMIT:
        at = "the tau -> 0 convex reference" if name == "convex" else \
            f"the Gibbs reference at tau={tau:g}"
        log(f"warning: eta={eta:g} is above the stability limit of the data mode (eta*h = "
            f"{mode.eta_lambda_max(eta):.3g} >= {STABILITY_LIMIT:g} at {at}); the largest "
            f"stable eta is {mode.largest_stable_eta():.3g}: the run will stop when its step "
            "becomes unstable")
