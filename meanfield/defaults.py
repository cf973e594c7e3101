"""The embedded default config used by ``meanfield run`` when no config is given.

It is ``data/plane8.toml`` with the data of ``data/plane8.csv`` inlined, so that it works from
an installed package as well as from a checkout (a test checks the two stay equal). Beyond the
field defaults of :mod:`meanfield.config` (N = 4000, lam = eta = 0.05, taus = 1e-2, 1e-3, 1e-4,
an observation every 100 steps) it sets automatic stage lengths: each temperature runs in
chunks of 40 000 steps until its stationarity verdict holds, at most 320 000 steps. Measured
with the R̂/ESS verdict (docs/theory.md §2.5): every temperature spends its 320 000 steps and
is judged not stationary (R̂ 1.021, 1.020, 1.032 within the one chain, bulk ESS 164, 139, 54);
the earlier floor of 20 effective samples ended them at 120 000, 120 000 and 80 000 steps.
"""

DEFAULT_TOML = """\
# Embedded default: eight points in the plane in general position (data/plane8.csv).
[data]
kind = "inline"
X = [[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4],
     [-1.1, 0.3], [0.2, 0.1], [1.0, 1.5], [-0.3, -1.8]]
y = [1.0, -0.5, 0.5, 1.2, -0.8, 0.3, -1.0, 0.9]

[dynamics]
steps_per_tau = "auto"
max_steps_per_tau = 320000
"""
