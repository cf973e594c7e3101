"""``meanfield run``: integrate the particle dynamics over a temperature ladder."""

from __future__ import annotations

import sys
import time

from meanfield.errors import InputError, one_line

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.


def config_keys_help() -> str:
    """One paragraph naming every key a run config's tables may hold (from the schema)."""
    from meanfield.schema import SECTIONS, table_keys
    return ("Config keys, by table (docs/cli.md gives each one's meaning, default and "
            "range): " + "; ".join(f"[{s}] " + ", ".join(table_keys(s)) for s in SECTIONS)
            + ".")


def register(sub):
    """Add the ``run`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "run", help="integrate the mean-field Langevin particles over a temperature ladder",
        description="Integrate N interacting particles (a, w, b) over the "
                    "temperatures dynamics.taus (hot to cold, each warm-started from the "
                    "previous), writing snapshot frames and observables to an HDF5 run file. "
                    "Which integrator (dynamics.integrator): for the stationary law at each "
                    "temperature (rays, counts, the Gibbs measure) use the exact sampler "
                    "'mala' (the embedded default and every shipped config use it; a config "
                    "without the key runs 'em'); for SGD's time evolution toward it, or minibatches, "
                    "use Euler-Maruyama 'em' (or Leimkuhler-Matthews 'lm'). A step of 'mala' "
                    "is one pass of Metropolis-adjusted moves over the particles, not a time "
                    "step. While running, the file is RUN.h5.part with a checkpoint RUN.h5.ckpt "
                    "(every output.checkpoint_every steps and on SIGINT/SIGTERM/SIGHUP, exit "
                    "130); it becomes RUN.h5 when complete.",
        epilog="Without CONFIG the embedded default runs: eight points in the plane "
               "(data/plane8.csv), N=4000, lam=0.05, taus=[1e-2, 1e-3, 1e-4], the exact sampler "
               "(eta=0.2) with 2 chains, each temperature until the verdict between them holds. "
               "Exit codes: 0 done, 2 bad input (nothing written), 130 interrupted "
               "(checkpoint kept, continue with --resume), 1 diverged (NaN/Inf; frames and "
               "the last good checkpoint kept) or other errors. " + config_keys_help())
    p.add_argument("config", nargs="?", help="TOML config (see docs/cli.md); default: embedded")
    p.add_argument("-o", "--output", help="run file to write (default: run-<config hash>.h5)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true",
                      help="start over even if the output or an interrupted run of it exists "
                           "(the old output stays until the new run completes)")
    mode.add_argument("--resume", action="store_true",
                      help="continue an interrupted run from its checkpoint (bitwise identical "
                           "to an uninterrupted run; the config must be the same)")
    p.add_argument("--threads", type=int, default=None, help="numba threads (default: all cores)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def main(args) -> int:
    """Run ``meanfield run`` with the parsed ``args``; returns the exit code."""
    import numba

    from meanfield import runner
    if args.threads is not None and not 1 <= args.threads <= numba.config.NUMBA_NUM_THREADS:
        raise InputError("command line", "--threads",
                         f"must be in [1, {numba.config.NUMBA_NUM_THREADS}], got {args.threads}")
    if args.output is not None and not args.output.strip():
        raise InputError("command line", "-o", "the output path is empty")
    if args.config is not None and not args.config.strip():
        raise InputError("command line", "CONFIG", "the config path is empty")

    def log(msg):
        sys.stderr.write(f"meanfield: {one_line(msg)}\n")
        sys.stderr.flush()

    t0 = time.monotonic()        # a duration: immune to a step of the wall clock
    outcome = {}
    out = runner.run(args.config, args.output, overwrite=args.overwrite, resume=args.resume,
                     progress=False if args.quiet else None, threads=args.threads, log=log,
                     outcome=outcome)
    if outcome.get("plan") != "done":       # "already complete" was said; nothing written
        log(f"wrote {out} in {time.monotonic() - t0:.1f} s")
        try:
            notes = budget_notes(out)
        except (OSError, ValueError, KeyError) as exc:    # the run is done: not its exit code
            notes = [f"note: the stages' stationarity was not judged: {exc}"]
        for line in notes:
            log(line)
    print(out)
    return 0


def budget_notes(path) -> list[str]:
    """One ``note:`` line per stage of a ``steps_per_tau = "auto"`` run whose budget
    (``max_steps_per_tau``) ran out before its stationarity verdict held (docs/theory.md
    §2.5), with the verdict's first reason; empty for fixed-length stages and for a run
    whose stages all ended on their verdict."""
    from meanfield.cli.inspect import stages
    from meanfield.store import open_run
    run = open_run(path)
    dyn = run.config.dynamics
    # a stage that stopped short of its budget stopped on its verdict (the run judged it at
    # each chunk end): the verdicts are computed again only when some stage spent it all
    if dyn.steps_per_tau != "auto" or all(run.steps_run(s) < dyn.max_steps_per_tau
                                          for s in range(len(run.taus))):
        return []
    # the exact sampler on ReLU without exchange moves: the slow split of the mass between
    # rays at low tau is what they move (docs/theory.md §2.6)
    hint = ("; with dynamics.exchange = 1 the split of the mass between rays, often the "
            "slowest mode at low tau, is resampled" if dyn.integrator == "mala" and not dyn.exchange
            and run.config.model.activation == "relu" else "")
    return [f"note: tau={st['tau']:.1e} is not stationary after the whole budget, "
            f"max_steps_per_tau = {dyn.max_steps_per_tau}: "
            f"{st['stationarity']['reasons'][0]} (its counts are of chains still moving; "
            f"'meanfield inspect {path}' shows every stage; a larger max_steps_per_tau "
            f"gives it more{hint})"
            for st in stages(run)
            if st["stationary"] is False and st["steps"] >= dyn.max_steps_per_tau]
