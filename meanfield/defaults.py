"""The embedded default config used by ``meanfield run`` when no config is given.

It is ``data/plane8.toml`` with the data of ``data/plane8.csv`` inlined, so that it works from
an installed package as well as from a checkout (a test checks the two stay equal). It asks the
question the tool exists for, the stationary law at three temperatures, and so runs the exact
sampler (``integrator = "mala"``, ``eta = 0.2``, half its Langevin moves at fine steps,
docs/theory.md §2.6) with two independent chains stepping in parallel; each temperature runs
in chunks of 5 000 passes until the stationarity verdict between the chains holds
(docs/theory.md §2.5), at most 40 000 passes, with an observation every 5 passes (the most
effective samples per second of the spacings measured). Measured on two idle cores (before
the fine steps): the run reaches the verdict at every temperature in 32 s once its kernel is
compiled (benchmarks/README.md, "The default run"). Beyond that it
keeps the field defaults of :mod:`meanfield.config` (N = 4000, lam = 0.05, taus = 1e-2,
1e-3, 1e-4). Euler-Maruyama (``"em"``) is for questions about SGD's trajectory.
"""

DEFAULT_TOML = """\
# Embedded default: eight points in the plane in general position (data/plane8.csv).
[data]
kind = "inline"
X = [[-1.5, -1.0], [-0.5, 1.2], [0.8, -1.3], [1.6, 0.4],
     [-1.1, 0.3], [0.2, 0.1], [1.0, 1.5], [-0.3, -1.8]]
y = [1.0, -0.5, 0.5, 1.2, -0.8, 0.3, -1.0, 0.9]

[dynamics]
integrator = "mala"
eta = 0.2
fine = 0.5
steps_per_tau = "auto"
max_steps_per_tau = 40000
chains = 2

[output]
observe_every = 5
snapshots_per_tau = 4
"""
