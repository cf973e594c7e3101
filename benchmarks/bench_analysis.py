"""Speed of the snapshot analysis at 10⁵ particles (target: at most 10 s on two cores).

A synthetic snapshot with rays planted at the maxima of the certificate |G| of random
residuals, and a uniform halo (analysis.synthetic.planted_rays), on the embedded default data
(eight points in the plane), timed through what ``meanfield
analyze`` does per snapshot: rays with the certificate and halo-baseline tests, kink
hyperplanes, Theorem 6 checks; once per run the sensitivity table of the coldest snapshot; and
the sliced W2 between two such snapshots (used above 10⁴ particles).

    python benchmarks/bench_analysis.py [--n-particles 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

from scipy.spatial import cKDTree

from analysis.certificate import certificate
from analysis.kinks import ray_kinks
from analysis.ray_checks import sensitivity
from analysis.rays import find_rays
from analysis.synthetic import planted_rays
from analysis.ternary import theorem6
from analysis.transport import w2_sliced
from meanfield.defaults import DEFAULT_TOML

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib


def snapshot(N, seed):
    """Rays planted at the local maxima of ``|G|`` (within 10 % of the maximum, 0.3 rad apart) of
    random residuals ``R``, with ``sign(a) = −sign(G)``; ``y`` such that the snapshot's residuals are
    ``R``; ``λ`` scaled so that ``max |G| = 1`` as in a stationary state; a uniform halo.

    Returns ``X, y, lam, theta (N, 4), number of planted rays``."""
    data = tomllib.loads(DEFAULT_TOML)["data"]
    X = np.array(data["X"], float)
    XL = np.c_[X, np.ones(len(X))]
    rng = np.random.default_rng(8)                   # a seed whose |G| has two separated peaks
    R = rng.standard_normal(len(X)) / len(X)
    cand = rng.standard_normal((50_000, 3))
    cand /= np.linalg.norm(cand, axis=1, keepdims=True)
    h = np.abs(certificate(cand, X, R, 1.0))
    lam = float(h.max())
    nb = cKDTree(cand).query(cand, k=30)[1]
    peak = np.nonzero((h >= h[nb].max(axis=1)) & (h >= 0.9 * h.max()))[0]
    sel = []
    for i in peak[np.argsort(-h[peak])]:               # peaks at least 0.3 rad apart
        if all(np.arccos(min(1.0, cand[i] @ cand[j])) > 0.3 for j in sel):
            sel.append(i)
    dirs = cand[sel]
    weights = -np.sign(certificate(dirs, X, R, lam)) * np.linspace(0.5, 0.1, len(dirs))
    theta, _ = planted_rays(dirs, weights, N, noise=0.02, halo_particles=0.3, halo_mass=0.03,
                            seed=seed)
    f = np.maximum(theta[:, 1:] @ XL.T, 0).T @ theta[:, 0] / N
    return X, f - len(X) * R, lam, theta, len(dirs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-particles", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    X, y, lam, theta, planted = snapshot(args.n_particles, 1)
    theta2 = snapshot(args.n_particles, 2)[3]
    print(f"planted rays: {planted}")
    find_rays(theta[:2000], X)                        # imports, first-call overheads
    R = (np.maximum(theta[:, 1:] @ np.c_[X, np.ones(len(X))].T, 0).T @ theta[:, 0]
         / len(theta) - y) / len(X)
    full = {"R": R, "lam": lam, "tau": 1e-4}
    for label, kw in (("rays (mass filter only)", {}),
                      ("rays + certificate + baseline", full)):
        best = cpu = np.inf
        for _ in range(args.repeat):
            t, c = time.perf_counter(), time.process_time()
            res = find_rays(theta, X, **kw)
            kinks = ray_kinks(res.rays, X, res.pattern_tol.angle_tol)   # as analyze_frame
            th6 = theorem6([q.pattern for q in res.rays])
            best = min(best, time.perf_counter() - t)
            cpu = min(cpu, time.process_time() - c)
        print(f"{label:30s} N={args.n_particles}: {best:6.2f} s wall, {cpu:5.2f} s CPU  "
              f"(J={len(res.rays)}, "
              f"K={len(kinks)}, distinct={th6['distinct']}, plateau={res.plateau[0]:.3g}.."
              f"{res.plateau[1]:.3g})")
    t, c = time.perf_counter(), time.process_time()
    sens = sensitivity(theta, X, full)
    print(f"{'sensitivity table (' + str(len(sens['rows'])) + ' rows)':30s} N={args.n_particles}: "
          f"{time.perf_counter() - t:6.2f} s wall, {time.process_time() - c:5.2f} s CPU  "
          f"(robust={sens['robust']})")
    t = time.perf_counter()
    w = w2_sliced(theta, theta2)
    print(f"{'sliced W2, 200 projections':30s} N={args.n_particles}: "
          f"{time.perf_counter() - t:6.2f} s  (W2={w:.4g})")


if __name__ == "__main__":
    main()
