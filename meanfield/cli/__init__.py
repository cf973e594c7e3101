"""Command line: ``meanfield <command> ...``.

Each command lives in its own module of this package exposing ``register(subparsers)``, which
adds a parser whose ``func(args) -> int`` does the work. To add a command, write the module and
list it in :data:`COMMANDS`.

Exit codes (README, ``docs/cli.md``): 0 success; 2 bad input (one line naming the file, the field and the
reason, no traceback); 130 interrupted (checkpoint kept); 1 anything else.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from meanfield._version import __version__
from meanfield.errors import DivergenceError, InputError, Interrupted

#: Modules (under ``meanfield.cli``) that each register one command, in ``--help`` order.
COMMANDS = ["run", "inspect", "analyze", "dichotomies", "reference", "sweep", "highdim"]

EPILOG = """\
examples:
  meanfield run                      # the embedded default (8 points in the plane)
  meanfield run data/skm22_d7.toml -o d7.h5
  meanfield inspect d7.h5
  meanfield analyze d7.h5 -o d7-report
  meanfield dichotomies data/skm22_d12.csv --json   # exact P, Cover, general position
  meanfield reference gibbs data/skm22_d7.toml --json   # exact stationary measure, each tau
  meanfield reference convex data/skm22_d7.toml         # the tau -> 0 convex limit
  meanfield sweep lowtemp.toml --workers 2   # a grid of runs on a local Dask cluster
  meanfield highdim --neurons 2 --n 20 --d 200,800,3200 --json -o out/

exit codes: 0 ok, 2 bad input, 130 interrupted (checkpoint kept), 1 diverged or other errors.
Run 'meanfield COMMAND --help' for the options of each command; docs/cli.md has the details.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors are bad input: exit 2 with one line
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The ``meanfield`` argument parser with every command of :data:`COMMANDS`."""
    p = _Parser(prog="meanfield",
                description="Mean-field Langevin dynamics of wide two-layer ReLU networks, its "
                            "stationary measures and their rays; high-dimensional GD on few "
                            "ReLU neurons.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"meanfield {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"meanfield.cli.{name}").register(sub)
    return p


def main(argv=None) -> int:
    """Entry point of the ``meanfield`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        sys.stderr.write(f"meanfield: error: {exc.line()}\n")
        return 2
    except Interrupted as exc:
        sys.stderr.write(f"meanfield: {exc}\n")
        return 130
    except KeyboardInterrupt:
        sys.stderr.write("meanfield: interrupted\n")
        return 130
    except DivergenceError as exc:
        sys.stderr.write(f"meanfield: error: {exc}\n")
        return 1
    except BrokenPipeError:  # e.g. `meanfield inspect x.h5 --json | head`
        return 0
    except MemoryError:
        sys.stderr.write("meanfield: error: out of memory; use fewer particles, a smaller data "
                         "set or fewer snapshot frames\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
