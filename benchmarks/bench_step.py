"""One full-batch Langevin step: our numba kernel against the usual peers, side by side.

Every implementation does the identical update (THEORY §2, relu, noise included)::

    θ_i ← θ_i − η (∇_θ Ψ(θ_i; ρ̂_N)) + sqrt(2 η τ) ξ_i

and is checked against the NumPy reference of ``solvers.numpy_model`` (noise off) before it is
timed. Peers:

- vectorised NumPy (what most theory code does), noise from ``numpy.random.Generator``;
- PyTorch CPU with hand-written gradients (float64);
- PyTorch CPU with autograd + ``torch.optim.SGD(lr=η, weight_decay=λ)`` on the loss
  ``(N/2)·mean((f − y)²)`` plus added noise (what paper scripts do).

PyTorch is optional (``pip install .[torch]``); without it those rows are skipped.

Usage::

    python benchmarks/bench_step.py                 # N=10^4, n=20, d=2, 2 threads
    python benchmarks/bench_step.py --quick         # shorter timing budget
    python benchmarks/bench_step.py --N 100000 --threads 1
    python benchmarks/bench_step.py --blocks 4 16   # rows of the blocked exact pass (default)

The `meanfield run` row's child imports the ``solvers`` this process imports (the installed
package, and so its numba cache; ``benchmarks.common.package_env``): the line above the table
says where from.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

# after site-packages: an installed solvers is imported (and its numba cache used) as by the CLI
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import (
    ETA,
    LAM,
    TAU,
    header,
    peak_traced,
    problem,
    set_threads,
    time_per_step,
)

FLOOR_MS = (0.15, 0.2)   # 2.4 MFLOP + 4·10^4 normals per step at N=10^4, n=20, d=2, 2 cores


# ---------------------------------------------------------------------------------------------
# Implementations: each has .run(k) (k steps with noise) and .theta() (N, d+2)
# ---------------------------------------------------------------------------------------------

class Ours:
    name = "meanfield numba kernel"

    def __init__(self, X, y, theta, seed=0, lam=LAM, eta=ETA, integrator="em", jumps=None,
                 radial=None, block=0):
        from solvers.stepper import Stepper
        self.th = theta.copy()
        kw = {"jumps": jumps, "radial": radial, "block": block} if integrator == "mala" else {}
        self.st = Stepper(X, y, len(theta), lam=lam, eta=eta, seed=seed, integrator=integrator,
                          **kw)
        self.step = 0

    def run(self, k, tau=TAU):
        code = self.st.advance(self.th, tau, self.step, k)
        if code:
            raise FloatingPointError(f"diverged by step {self.step + k}")
        self.step += k

    def theta(self):
        return self.th

    def predictor(self):
        """Predictor on the training points after the last :meth:`run`."""
        return self.st.f


class NumpyStep:
    name = "vectorised NumPy"

    def __init__(self, X, y, theta, seed=0, lam=LAM, eta=ETA):
        self.X, self.y, self.th = X, y, theta.copy()
        self.Xt = np.ascontiguousarray(X.T)
        self.rng = np.random.default_rng(seed)
        self.lam, self.eta = lam, eta

    def run(self, k, tau=TAU):
        X, y, th = self.X, self.y, self.th
        N, n = th.shape[0], len(y)
        ETA, LAM = self.eta, self.lam
        sd = math.sqrt(2 * ETA * tau)
        for _ in range(k):
            a, W, b = th[:, 0], th[:, 1:-1], th[:, -1]
            Z = W @ self.Xt
            Z += b[:, None]
            S = np.maximum(Z, 0.0)
            R = (S.T @ a / N - y) / n
            G = (Z > 0.0) * R
            ga = S @ R
            gw = G @ X
            gb = G.sum(axis=1)
            th[:, 1:-1] -= ETA * (a[:, None] * gw + LAM * W)
            th[:, -1] -= ETA * (a * gb + LAM * b)
            th[:, 0] -= ETA * (ga + LAM * a)
            if sd > 0:
                th += sd * self.rng.standard_normal(th.shape)
        if not np.all(np.isfinite(th)):
            raise FloatingPointError("diverged")

    def theta(self):
        return self.th

    def predictor(self):
        """Predictor on the training points (one forward pass)."""
        th = self.th
        return np.maximum(th[:, 1:-1] @ self.Xt + th[:, -1:], 0.0).T @ th[:, 0] / th.shape[0]


class TorchManual:
    name = "PyTorch CPU, hand-written gradients"

    def __init__(self, X, y, theta, seed=0):
        import torch
        self.torch = torch
        self.X = torch.tensor(X)
        self.Xt = self.X.T.contiguous()
        self.y = torch.tensor(y)
        self.th = torch.tensor(theta)
        self.g = torch.Generator().manual_seed(seed)

    def run(self, k, tau=TAU):
        torch = self.torch
        th = self.th
        N, n = th.shape[0], self.y.shape[0]
        sd = math.sqrt(2 * ETA * tau)
        with torch.no_grad():
            for _ in range(k):
                a, W, b = th[:, 0], th[:, 1:-1], th[:, -1]
                Z = torch.addmm(b[:, None], W, self.Xt)
                S = torch.relu(Z)
                R = (S.T @ a / N - self.y) / n
                G = (Z > 0) * R
                ga = S @ R
                gw = G @ self.X
                gb = G.sum(dim=1)
                W.sub_(ETA * (a[:, None] * gw + LAM * W))
                b.sub_(ETA * (a * gb + LAM * b))
                a.sub_(ETA * (ga + LAM * a))
                if sd > 0:
                    th.add_(torch.randn(th.shape, generator=self.g, dtype=th.dtype), alpha=sd)

    def theta(self):
        return self.th.numpy()


class TorchAutograd:
    name = "PyTorch CPU, autograd + optim.SGD + noise"

    def __init__(self, X, y, theta, seed=0):
        import torch
        self.torch = torch
        self.X = torch.tensor(X)
        self.y = torch.tensor(y)
        t = torch.tensor(theta)
        self.a = torch.nn.Parameter(t[:, 0].clone())
        self.W = torch.nn.Parameter(t[:, 1:-1].clone())
        self.b = torch.nn.Parameter(t[:, -1].clone())
        # SGD with weight decay: p ← p − η (∂L/∂p + λ p); L = (N/2) mean((f − y)²)
        self.opt = torch.optim.SGD([self.a, self.W, self.b], lr=ETA, weight_decay=LAM)
        self.g = torch.Generator().manual_seed(seed)

    def run(self, k, tau=TAU):
        torch = self.torch
        N = self.a.shape[0]
        sd = math.sqrt(2 * ETA * tau)
        for _ in range(k):
            self.opt.zero_grad(set_to_none=True)
            f = torch.relu(self.X @ self.W.T + self.b) @ self.a / N
            loss = 0.5 * N * ((f - self.y) ** 2).mean()
            loss.backward()
            self.opt.step()
            if sd > 0:
                with torch.no_grad():
                    for p in (self.a, self.W, self.b):
                        p.add_(torch.randn(p.shape, generator=self.g, dtype=p.dtype), alpha=sd)

    def theta(self):
        return np.column_stack([self.a.detach().numpy(), self.W.detach().numpy(),
                                self.b.detach().numpy()])


def implementations(with_torch=True):
    """Our kernel and NumPy, plus the PyTorch peers when wanted and installed."""
    impls = [Ours, NumpyStep]
    if with_torch:
        import importlib.util
        if importlib.util.find_spec("torch") is not None:
            impls += [TorchManual, TorchAutograd]
        else:
            print("PyTorch not installed: skipping the PyTorch peers "
                  "(pip install 'meanfield-relu[torch]' to include them)")
    return impls


def check_identical_update(impls, X, y, theta):
    """Max |Δθ| of one noiseless step of each implementation against solvers.numpy_model."""
    from solvers import numpy_model as model
    want = model.euler_maruyama_step(theta, X, y, LAM, ETA, 0.0, np.zeros_like(theta))
    out = {}
    for cls in impls:
        impl = cls(X, y, theta)
        impl.run(1, tau=0.0)
        out[cls.name] = float(np.max(np.abs(impl.theta() - want)))
    return out


CLI_TOML = """\
[data]
kind = "gaussian"
n = {n}
d = {d}
seed = 0

[model]
n_particles = {N}

[dynamics]
lam = {lam}
eta = {eta}
taus = [{tau}]
steps_per_tau = {steps}
seed = 0
{integrator}
[output]
observe_every = 1000
snapshots_per_tau = 1
"""


def cli_per_step(N, n, d, threads, short=5_000, long=30_000, reps=2, integrator=None):
    """``meanfield run``'s time per step, ms: the difference of a ``long``- and a
    ``short``-step run of the same config (``observe_every = 1000``), divided by
    ``long − short``, so start-up, compile-cache loading and file creation cancel. Best of
    ``reps`` of each (after one warm-up run). Returns ``(ms per step, seconds of the long run)``.
    """
    import subprocess
    import tempfile
    import time

    from benchmarks.common import check_same_package, package_env
    # the solvers this process imports (the installed one), and so its numba cache: the
    # checkout first on the child's path compiled a second cache (minutes) on a regular install
    env = package_env()
    extra = f'integrator = "{integrator}"\n' if integrator else ""
    with tempfile.TemporaryDirectory() as tmp:
        print(check_same_package(env, tmp))
        def run(steps):
            cfg = os.path.join(tmp, f"cli{steps}.toml")
            with open(cfg, "w") as fh:
                fh.write(CLI_TOML.format(n=n, d=d, N=N, lam=LAM, eta=ETA, tau=TAU, steps=steps,
                                         integrator=extra))
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "meanfield", "run", cfg, "-o",
                            os.path.join(tmp, "out.h5"), "--overwrite", "--quiet",
                            "--threads", str(threads)], check=True, env=env, cwd=tmp,
                           capture_output=True)
            return time.perf_counter() - t0
        run(short)
        t_short = min(run(short) for _ in range(reps))
        t_long = min(run(long) for _ in range(reps))
    return (t_long - t_short) / (long - short) * 1e3, t_long


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--N", type=int, default=10_000, help="particles (default 10^4)")
    ap.add_argument("--n", type=int, default=20, help="samples (default 20)")
    ap.add_argument("--d", type=int, default=2, help="input dimension (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every library (2)")
    ap.add_argument("--steps", type=int, default=50, help="steps per timed call (50)")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timing per row (3)")
    ap.add_argument("--quick", action="store_true", help="short run: 0.5 s per row")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch peers")
    ap.add_argument("--no-cli", action="store_true", help="skip the `meanfield run` row")
    ap.add_argument("--blocks", type=int, nargs="*", default=[4, 16],
                    help="block sizes of the blocked pass's rows (default 4 16)")
    args = ap.parse_args(argv)
    budget = 0.5 if args.quick else args.budget
    N, n, d = args.N, args.n, args.d

    set_threads(args.threads)
    X, y, theta = problem(N, n, d)
    impls = implementations(not args.no_torch)
    print("\n".join(header(args.threads)))
    print(f"problem: N={N} particles, n={n} samples, d={d}; lam={LAM} eta={ETA} tau={TAU}; "
          f"relu, full batch, noise included; {args.steps} steps per timed call")

    dev = check_identical_update(impls, X, y, theta)
    print("identical update (one noiseless step vs solvers.numpy_model): max |dtheta| = "
          + ", ".join(f"{k}: {v:.1e}" for k, v in dev.items()))
    bad = [k for k, v in dev.items() if not v < 1e-10]
    if bad:
        raise SystemExit(f"implementations disagree with the reference: {bad}")

    rows = []
    for cls in impls:
        impl = cls(X, y, theta)
        best, med = time_per_step(lambda impl=impl: impl.run(args.steps), args.steps, budget_s=budget)
        rows.append((cls.name, best, med))
    if args.threads > 1:
        set_threads(1)
        impl = Ours(X, y, theta)
        best, med = time_per_step(lambda impl=impl: impl.run(args.steps), args.steps, budget_s=budget)
        rows.append((Ours.name + ", 1 thread", best, med))
        set_threads(args.threads)
    # one Metropolis-adjusted pass over all particles (integrator = "mala"): sequential within
    # the system, so it is compared with the Euler step on the same threads
    mala = {}
    for jumps, radial in ((0.1, 1.0), (0.1, 0.0), (0.0, 0.0)):
        impl = Ours(X, y, theta, integrator="mala", jumps=jumps, radial=radial)
        best, med = time_per_step(lambda impl=impl: impl.run(args.steps), args.steps, budget_s=budget)
        mala[jumps, radial] = best
        c = impl.st.counts
        racc = f", radial acc. {c[6] / c[5]:.2f}" if c[5] else ""
        rows.append((f"mala pass (jumps={jumps:g}, radial={radial:g}; acc. {c[1] / c[0]:.2f}"
                     f"{racc})", best, med))
    for b in args.blocks:       # the blocked pass with the defaults (docs/theory.md §2.6)
        impl = Ours(X, y, theta, integrator="mala", jumps=0.1, radial=1.0, block=b)
        best, med = time_per_step(lambda impl=impl: impl.run(args.steps), args.steps, budget_s=budget)
        mala["block", b] = best
        c = impl.st.counts
        rows.append((f"mala pass, block {b} (acc. {c[1] / c[0]:.2f}, radial "
                     f"{c[6] / max(c[5], 1):.2f})", best, med))

    cli = None
    if not args.no_cli:
        cli, t_long = cli_per_step(N, n, d, args.threads)
        rows.append((f"`meanfield run` (30k - 5k steps), {args.threads} thr.", cli, cli))

    ours = rows[0][1]
    print()
    print(f"{'implementation':44s} {'ms/step':>8s} {'median':>8s} "
          f"{'ns/(particle.sample.step)':>26s} {'x ours':>7s}")
    for name, best, med in rows:
        print(f"{name:44s} {best:8.3f} {med:8.3f} {best * 1e6 / (N * n):26.2f} {best / ours:7.1f}")
    print("(ms/step = best of repeated timed calls; median alongside)")
    if cli is not None:
        print(f"`meanfield run` per step: {cli:.3f} ms (the 30 000-step run took {t_long:.1f} s); "
              f"{cli - ours:+.3f} ms/step over the kernel alone = per-observation work "
              f"(layout conversion, residuals, stationarity statistic, HDF5 append, progress) "
              f"spread over observe_every = 1000 steps, and the machine's load")

    print(f"mala pass / Euler step: {mala[0.1, 1.0] / ours:.2f} (the default: jumps 0.1, radial "
          f"1), {mala[0.1, 0.0] / ours:.2f} (no radial moves), {mala[0.0, 0.0] / ours:.2f} "
          f"(Langevin moves only); target <= 3 at N=10^4, n=20, d=2")
    if args.blocks:
        print("blocked pass / Euler step (defaults): " + ", ".join(
            f"block {b}: {mala['block', b] / ours:.2f}" for b in args.blocks)
              + "; / the sequential pass: " + ", ".join(
            f"{mala['block', b] / mala[0.1, 1.0]:.2f}" for b in args.blocks))

    if (N, n, d) == (10_000, 20, 2):
        lo, hi = FLOOR_MS
        print(f"\nfloor ({lo}-{hi} ms: 2.4 MFLOP + 4e4 normals per step on 2 cores): ours is "
              f"{ours / hi:.2f}-{ours / lo:.2f} x the floor")
        ratios = {r[0]: r[1] / ours for r in rows}
        checks = [("ours <= 0.3 ms/step", ours <= 0.3),
                  ("NumPy >= 8 x ours", ratios.get(NumpyStep.name, 0) >= 8)]
        if TorchAutograd.name in ratios:
            checks.append(("PyTorch autograd >= 20 x ours", ratios[TorchAutograd.name] >= 20))
        busy = any(line.startswith("WARNING") for line in header(args.threads))
        print(("targets (unreliable: busy machine): " if busy else "targets: ")
              + "; ".join(f"{c}: {'met' if ok else 'NOT met'}" for c, ok in checks))

    st, peak = peak_traced(lambda: Ours(X, y, theta))
    print(f"\npeak memory of our stepper (traced NumPy allocations, theta included): "
          f"{peak / 2**20:.2f} MiB = {peak / N:.0f} B/particle")
    _, peak_np = peak_traced(lambda: NumpyStep(X, y, theta).run(1))
    print(f"peak memory of one NumPy step (theta included): {peak_np / 2**20:.2f} MiB")
    return rows


if __name__ == "__main__":
    main()
