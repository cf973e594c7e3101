"""``meanfield reference``: the exact references of a config's problem (THEORY §4–5).

``gibbs``: the stationary measure at finite temperature, by quadrature (``d ≤ 2``) or by
randomized quasi-Monte Carlo (any ``d``);
``convex``: the ``τ → 0`` limit, a convex programme over activation patterns (any ``d``).
"""

from __future__ import annotations

import json
import math
import sys
import time

from meanfield import config as _config
from meanfield import data as _data
from meanfield.errors import ConfigError, InputError, one_line

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.


def register(sub):
    """Add the ``reference`` command (``gibbs``, ``convex``) to the subparsers ``sub``."""
    p = sub.add_parser(
        "reference", help="exact references: Gibbs measure at tau > 0, convex limit",
        description="Exact references for the problem of a run config (same files as "
                    "'meanfield run'): 'gibbs' solves the finite-temperature fixed point of "
                    "docs/theory.md §5 by integration over the sphere of directions "
                    "(quadrature for d = 1, 2, randomized QMC for any d); "
                    "'convex' solves the zero-temperature convex problem of §4.")
    rs = p.add_subparsers(dest="which", metavar="{gibbs,convex}", parser_class=type(p))
    g = rs.add_parser("gibbs", help="stationary measure at finite tau (any d)",
                      description="Fixed point R = (f_R(X) - y)/n of the Gibbs measure at each "
                                  "temperature (continuation from hot to cold).")
    g.add_argument("config", help="TOML config (as for 'meanfield run')")
    g.add_argument("--tau", type=float, default=None,
                   help="one temperature (default: every tau > 0 of dynamics.taus)")
    g.add_argument("--json", action="store_true",
                   help='print {"tau", "R", "f_train", "max_abs_G", "residual", ...} '
                        "(a list without --tau)")
    g.add_argument("--method", choices=("auto", "quadrature", "qmc"), default="auto",
                   help="sphere integration: adaptive quadrature (d <= 2), importance-sampled "
                        "randomized QMC (any d); auto: quadrature for d <= 2, else qmc")
    g.add_argument("--rtol", type=float, default=1e-4,
                   help="qmc: requested standard error of f on the data, relative to max|f| "
                        "(default 1e-4); out of reach at a tau: exit 2")
    g.set_defaults(func=main_gibbs)
    c = rs.add_parser("convex", help="zero-temperature convex limit (any d)",
                      description="Signed measure on the sphere minimising "
                                  "(1/2n) sum_j (f(x_j) - y_j)^2 + lam |mu|_TV.")
    c.add_argument("config", help="TOML config (as for 'meanfield run')")
    c.add_argument("--json", action="store_true",
                   help='print {"f_train", "rays": [{"direction", "sign", "weight"}], '
                        '"kinks": [{"normal", "offset"}], "max_abs_G", "duality_gap", ...}')
    c.set_defaults(func=main_convex)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _problem(path):
    """Config, data set and weight decay; relu only."""
    cfg = _config.load(path)
    if cfg.model.activation != "relu":
        raise ConfigError(cfg.source, "model.activation",
                          f"the exact references are for relu, got {cfg.model.activation!r}")
    return cfg, _data.from_config(cfg)


def _reraise(exc, cfg):
    """Re-issue a solver's input error under the config's name."""
    field = {"X": "data", "lam": "dynamics.lam", "tau": "dynamics.taus"}.get(exc.field, exc.field)
    raise InputError(cfg.source, field, exc.reason) from None


def main_gibbs(args) -> int:
    """Run ``meanfield reference gibbs`` with the parsed ``args``; returns the exit code."""
    from solvers.gibbs import GibbsConvergenceError, GibbsInputError, GibbsReference
    from solvers.gibbsqmc import GibbsAccuracyError, QMCGibbsReference
    from solvers.numerical import numerical_failures
    from solvers.reference_methods import choose
    cfg, ds = _problem(args.config)
    method = choose(ds.d, args.method)
    if not (0 < args.rtol < 1):
        raise InputError(args.config, "--rtol", f"must be a relative tolerance in (0, 1), "
                                                f"got {args.rtol!r}")
    if args.tau is not None:
        if not (math.isfinite(args.tau) and args.tau > 0):
            raise InputError(args.config, "--tau", f"must be a finite number > 0, got "
                                                   f"{args.tau!r} (the tau -> 0 limit is "
                                                   "'meanfield reference convex')")
        from meanfield.schema import MIN_TAU
        if args.tau < MIN_TAU:
            raise InputError(args.config, "--tau", f"must be at least {MIN_TAU:g} (below it "
                                                   "the fixed point is the tau -> 0 limit to "
                                                   "float precision: 'meanfield reference "
                                                   f"convex'), got {args.tau!r}")
        taus = [args.tau]
    else:
        taus = [t for t in cfg.taus if t > 0]
        if len(taus) < len(cfg.taus):
            sys.stderr.write("meanfield: tau = 0 skipped (its reference is "
                             "'meanfield reference convex')\n")
        if not taus:
            raise InputError(cfg.source, "dynamics.taus", "no temperature > 0")
    t0 = time.monotonic()
    try:
        with numerical_failures(GibbsConvergenceError, "Gibbs reference", ds.X,
                                keep=(GibbsAccuracyError,)):
            if method == "quadrature":
                ref = GibbsReference(ds.X, ds.y, cfg.dynamics.lam)
            else:
                ref = QMCGibbsReference(ds.X, ds.y, cfg.dynamics.lam, rtol=args.rtol)
            sols = ref.solve(taus)
    except GibbsInputError as exc:
        _reraise(exc, cfg)
    except GibbsAccuracyError as exc:
        if exc.solved:                           # keep the hotter temperatures solved
            _print_gibbs(args, cfg, ds, method, exc.solved, time.monotonic() - t0)
        field = "dynamics.taus" if args.tau is None else "--tau"
        if exc.error == exc.error:               # accuracy: a larger --rtol helps
            hint = "a larger --rtol" + (" or that temperature" if exc.coldest else "")
            field = "--rtol"
        else:                                    # the barrier: no --rtol helps
            hint = "that temperature or a hotter one" if exc.coldest else "a hotter temperature"
        raise InputError(cfg.source, field, f"{exc} (ask for {hint})") from None
    except GibbsConvergenceError as exc:
        sys.stderr.write(f"meanfield: error: {one_line(f'{cfg.source}: {exc}')}\n")
        return 1
    _print_gibbs(args, cfg, ds, method, sols, time.monotonic() - t0)
    return 0


def _print_gibbs(args, cfg, ds, method, sols, secs):
    """Print the solved temperatures of ``reference gibbs`` (text or ``--json``)."""
    docs = [s.as_dict() for s in sols]
    for dct in docs:
        dct["seconds_total"] = round(secs, 3)
    if args.json:
        print(json.dumps(docs[0] if args.tau is not None else docs))
        return
    print(f"Gibbs reference  {cfg.source}  n={ds.n} d={ds.d} lam={cfg.dynamics.lam:g}  "
          f"method={method}  ({secs:.1f} s)")
    for s in sols:
        what = "quadrature error" if method == "quadrature" else \
            f"standard error ({s.randomizations} x {s.points} points)"
        print(f"tau={s.tau:.3e}  max|G|={s.max_abs_G:.12f}  residual={s.residual:.1e}  "
              f"{what}={s.quad_error:.1e}  Newton steps={s.iterations}")
        print("  f_train = " + " ".join(f"{v:.8f}" for v in s.f_train))
    sys.stdout.flush()


def main_convex(args) -> int:
    """Run ``meanfield reference convex`` with the parsed ``args``; returns the exit code."""
    from solvers.convex import ConvexInputError, ConvexSolverError, convex
    cfg, ds = _problem(args.config)
    t0 = time.monotonic()
    try:
        sol = convex(ds.X, ds.y, cfg.dynamics.lam)
    except ConvexInputError as exc:
        _reraise(exc, cfg)
    except ConvexSolverError as exc:
        sys.stderr.write(f"meanfield: error: {one_line(f'{cfg.source}: {exc}')}\n")
        return 1
    secs = time.monotonic() - t0
    doc = sol.as_dict()
    doc["seconds"] = round(secs, 3)
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"convex (tau -> 0) reference  {cfg.source}  n={ds.n} d={ds.d} "
          f"lam={cfg.dynamics.lam:g}  patterns P={sol.n_patterns}  ({secs:.1f} s)")
    print(f"max|G| = {sol.max_abs_G:.10f}   certificate error = {sol.certificate_error():.1e}   "
          f"duality gap = {sol.duality_gap:.1e}")
    print("  f_train = " + " ".join(f"{v:.8f}" for v in sol.f_train))
    print(f"rays ({len(sol.weights)}):")
    for v, c, g in zip(sol.directions, sol.weights, sol.G_rays):
        print(f"  weight {c:+.8f}  direction ({', '.join(f'{t:+.8f}' for t in v)})  G={g:+.8f}")
    ks = sol.kinks()
    print(f"kink hyperplanes normal·x = offset ({len(ks)}):")
    for nrm, off in ks:
        print(f"  normal ({', '.join(f'{t:+.8f}' for t in nrm)})  offset {off:+.8f}")
    return 0
