"""Shared pieces of the accuracy benchmarks: sampling the predictor along a run and its
time average with an autocorrelation-aware Monte Carlo standard error.

The MCSE of the time average of a stationary series ``x_1..x_M`` is
``sqrt(var(x) · τ_int / M)`` with the integrated autocorrelation time ``τ_int`` in samples
(Sokal's automatic window, ``emcee.autocorr.integrated_time`` with ``c = 5``;
``analysis.time_average.mean_and_mcse``).
"""

from __future__ import annotations

import math
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Shipped data sets of the accuracy benchmarks: (csv, λ of their config).
PROBLEMS = {"plane8": ("data/plane8.csv", 0.05), "d12": ("data/skm22_d12.csv", 0.003),
            "d7": ("data/skm22_d7.csv", 0.003)}


def load(name):
    """``X`` (n, d), ``y`` (n,), ``λ`` of a shipped data set."""
    from meanfield.data import load_file
    path, lam = PROBLEMS[name]
    ds = load_file(os.path.join(ROOT, path), target="y")
    return np.ascontiguousarray(ds.X, float), np.ascontiguousarray(ds.y, float), lam


def time_average(F):
    """Mean, MCSE and ``τ_int`` per column of a (M, n) series
    (``analysis.time_average.mean_and_mcse``)."""
    from analysis.time_average import mean_and_mcse
    return mean_and_mcse(F)


def sample_predictor(stepper, theta, tau, step0, nsteps, every):
    """Advance ``theta`` by ``nsteps`` steps at temperature ``tau`` from global step ``step0``,
    recording the predictor on the training points every ``every`` steps.

    Returns
    -------
    F : ndarray (nsteps // every, n)
    step : int
        The global step after the last recorded sample.

    Raises
    ------
    FloatingPointError
        The kernel reported NaN/Inf (step size beyond the stability limit).
    """
    m = nsteps // every
    F = np.empty((m, stepper.n))
    step = step0
    for k in range(m):
        if stepper.advance(theta, tau, step, every):
            raise FloatingPointError(f"diverged by step {step + every} (eta={stepper.eta:g})")
        step += every
        F[k] = stepper.f
    return F, step


def advance(stepper, theta, tau, step0, nsteps, chunk=100_000):
    """Advance without recording (burn-in); returns the new global step."""
    step = step0
    while step < step0 + nsteps:
        k = min(chunk, step0 + nsteps - step)
        if stepper.advance(theta, tau, step, k):
            raise FloatingPointError(f"diverged by step {step + k} (eta={stepper.eta:g})")
        step += k
    return step


def add_problem_arguments(ap):
    """The options both accuracy benchmarks share: ``--problem``, ``--tau``, ``--etas``,
    ``--integrators``."""
    ap.add_argument("--problem", default="plane8", choices=sorted(PROBLEMS))
    ap.add_argument("--tau", type=float, default=1e-3)
    ap.add_argument("--etas", type=float, nargs="+", default=[0.1, 0.05, 0.025])
    ap.add_argument("--integrators", nargs="+", default=["em", "lm"],
                    help="integrators, each run at every --etas; NAME@ETA runs NAME at ETA "
                         "only (e.g. mala@0.5 em@0.1: the exact sampler is not bound by "
                         "Euler's stability limit)")


def integrator_etas(integrators, etas, known=None):
    """The ``(integrator, η)`` pairs to run: ``NAME@ETA`` is NAME at that η only, a plain name
    is run at every η of ``etas``; ``known``: the names the benchmark runs (checked before
    anything runs).

    Raises
    ------
    SystemExit
        When an ``@`` is not followed by a finite positive number, or a name is not in
        ``known`` (one line naming the entry).
    """
    pairs = []
    for entry in integrators:
        name, at, eta = entry.partition("@")
        if known is not None and name not in known:
            raise SystemExit(f"--integrators {entry}: unknown integrator {name!r}; one of "
                             f"{', '.join(known)}")
        if not at:
            pairs += [(name, e) for e in etas]
            continue
        try:
            value = float(eta)
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and value > 0):
            raise SystemExit(f"--integrators {entry}: the step after '@' must be a finite "
                             f"positive number, not {eta!r}")
        pairs.append((name, value))
    return pairs
