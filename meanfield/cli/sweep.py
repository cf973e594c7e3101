"""``meanfield sweep``: expand a study file into jobs and run them with Dask distributed."""

from __future__ import annotations

import sys

from meanfield.errors import InputError, MissingDependencyError, one_line

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.


def register(sub):
    """Add the ``sweep`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "sweep", help="run a grid of jobs (a study) on a local or remote Dask cluster",
        description="Expand STUDY.toml (a run config plus a [sweep] table of axes) into one job "
                    "per grid point and run them: one run file per job (run-<config hash>.h5) "
                    "and a manifest.json in the study directory. Finished jobs are skipped, so "
                    "rerunning the command completes an interrupted or partly failed study.",
        epilog="By default a local cluster of worker processes (spawned, bound to 127.0.0.1) "
               "runs the jobs, each with cores/workers numba threads. See docs/sweep.md for the "
               "study file, a SLURM recipe (dask-jobqueue) and the Python API.")
    p.add_argument("study", help="study file (TOML)")
    p.add_argument("-o", "--outdir", help="study directory (default: the study file's name "
                                          "without .toml, in the current directory)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes of the local cluster (default: min(cores, jobs))")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="attach to an existing Dask scheduler (e.g. tcp://10.0.0.5:8786) "
                        "instead of starting a local cluster")
    p.add_argument("--threads", type=int, default=None,
                   help="numba threads per job (default: cores // workers)")
    p.add_argument("--serial", action="store_true",
                   help="run the jobs one after another in this process (no Dask)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the study and list its jobs without running anything")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def _check_args(args):
    if args.workers is not None and args.workers < 1:
        raise InputError("--workers", "", f"must be >= 1, got {args.workers}")
    if args.threads is not None and args.threads < 1:
        raise InputError("--threads", "", f"must be >= 1, got {args.threads}")
    if args.scheduler and (args.workers or args.serial):
        raise InputError("--scheduler", "", "cannot be combined with --workers or --serial")


def _untouched(study) -> str:
    """The state of a study that nothing was run for: its manifest's counts, if it has one."""
    from meanfield.sweep import manifest
    try:
        doc = manifest.read(study.directory)
    except InputError:
        return f"nothing was run and {study.directory} was not touched"
    c = doc.get("counts") or {}
    return (f"nothing was run; {manifest.manifest_path(study.directory)} keeps "
            f"{c.get('done', 0)} done, {c.get('pending', 0)} pending, {c.get('failed', 0)} "
            f"failed")


def main(args) -> int:
    """Run ``meanfield sweep`` with the parsed ``args``; returns the exit code."""
    from meanfield.sweep import Study
    _check_args(args)
    study = Study.from_file(args.study, args.outdir)
    if args.dry_run:
        print(f"{len(study.jobs)} jobs in {study.directory}; axes: "
              + (", ".join(f"{k} = {v}" for k, v in study.axes.items()) or "(none)"))
        for job in study.jobs:
            vals = " ".join(f"{k}={v}" for k, v in job.axis_values.items())
            print(f"  {job.run_file}  {vals}")
        return 0
    from meanfield.sweep.execute import ClusterError, DaskConfigError
    if not args.serial:
        from meanfield.sweep.execute import require_distributed
        try:                  # before the study folder is made: a refusal leaves nothing
            require_distributed()
        except MissingDependencyError as exc:
            sys.stderr.write(f"meanfield: error: {one_line(exc)}\n")
            return 2
        except DaskConfigError as exc:        # a malformed Dask config file: nothing run
            raise DaskConfigError(exc.source, exc.field,
                                  f"{exc.reason}; {_untouched(study)}") from None
    try:
        summary = study.run(args.workers, scheduler=args.scheduler, serial=args.serial,
                            threads=args.threads, progress=False if args.quiet else None)
    except MissingDependencyError as exc:     # the environment, not a failed job: exit 2
        sys.stderr.write(f"meanfield: error: {one_line(exc)}\n")
        return 2
    except ClusterError as exc:               # Dask failed under the study: the environment
        sys.stderr.write(f"meanfield: error: {one_line(exc.line)}\n")
        return 1
    except KeyboardInterrupt as exc:          # Ctrl-C, or Terminated (SIGTERM, SIGHUP)
        from meanfield.interrupts import Terminated
        if not args.serial:
            # the command ends: what Dask's processes report while they exit (a worker
            # whose start was cut short, at interpreter exit) is not for the user
            import logging

            from meanfield.sweep.execute import silence_distributed
            silence_distributed()
            # a nanny whose start the signal cut short ends as an asyncio task whose
            # exception nobody retrieves; asyncio reports it at exit, after the line below
            logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
        how = f"terminated by {exc}" if isinstance(exc, Terminated) else "interrupted"
        sys.stderr.write(f"meanfield: {how}; the finished jobs are kept in {study.directory}: "
                         "run the same command again to continue\n")
        return 130
    sys.stderr.write(str(summary) + "\n")
    print(summary.directory)
    return 0 if summary.ok else 1
