"""The embedded default config used by ``meanfield run`` when no config is given.

It is ``data/plane8.toml`` with the data of ``data/plane8.csv`` inlined, so that it works from
an installed package as well as from a checkout (a test checks the two stay equal).
"""

DEFAULT_TOML = """\
# Embedded default: eight points in the plane in general position (data/plane8.csv).
[data]
kind = "inline"
X = [[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4],
     [-1.1, 0.3], [0.2, 0.1], [1.0, 1.5], [-0.3, -1.8]]
y = [1.0, -0.5, 0.5, 1.2, -0.8, 0.3, -1.0, 0.9]

[model]
activation = "relu"
n_particles = 4000
init_scale = 1.0

[dynamics]
lam = 0.05
eta = 0.05
taus = [1e-2, 1e-3, 1e-4]
steps_per_tau = 40000
batch_size = 0
seed = 0

[output]
observe_every = 100
snapshots_per_tau = 1
"""
