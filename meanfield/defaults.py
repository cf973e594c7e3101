"""The embedded default config used by ``meanfield run`` when no config is given.

It is ``data/plane8.toml`` with the data of ``data/plane8.csv`` inlined, so that it works from
an installed package as well as from a checkout (a test checks the two stay equal). Its other
tables are empty: the defaults of ``[model]``, ``[dynamics]`` and ``[output]`` are the field
defaults of :mod:`meanfield.config` (N = 4000, lam = eta = 0.05, taus = 1e-2, 1e-3, 1e-4,
40 000 steps per temperature, an observation every 100 steps).
"""

DEFAULT_TOML = """\
# Embedded default: eight points in the plane in general position (data/plane8.csv).
[data]
kind = "inline"
X = [[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4],
     [-1.1, 0.3], [0.2, 0.1], [1.0, 1.5], [-0.3, -1.8]]
y = [1.0, -0.5, 0.5, 1.2, -0.8, 0.3, -1.0, 0.9]
"""
