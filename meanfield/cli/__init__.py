"""Command line: ``meanfield <command> ...``.

Each command lives in its own module of this package exposing ``register(subparsers)``, which
adds a parser whose ``func(args) -> int`` does the work. To add a command, write the module and
list it in :data:`COMMANDS`.

Exit codes (README, ``docs/cli.md``): 0 success; 2 bad input (one line naming the file, the field and the
reason, no traceback); 130 interrupted (SIGINT, SIGTERM or SIGHUP; a run keeps its checkpoint,
any other command removes its temporary files); 1 the environment (stdout cannot be written, a
compiled dependency does not load, out of memory) or anything else. A closed stdout (``| head``)
ends the command quietly with 0, as ``cat`` and ``grep`` do under a shell that ignores SIGPIPE.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
import threading
import warnings

from meanfield import interrupts
from meanfield._version import __version__
from meanfield.errors import DivergenceError, InputError, Interrupted
from meanfield.interrupts import AbortedRun, Terminated

#: Modules (under ``meanfield.cli``) that each register one command, in ``--help`` order.
COMMANDS = ["run", "inspect", "analyze", "dichotomies", "reference", "sweep", "highdim"]

EPILOG = """\
examples:
  meanfield run                      # the embedded default (8 points in the plane)
  meanfield run data/skm22_d7.toml -o d7.h5
  meanfield inspect d7.h5
  meanfield analyze d7.h5 -o d7-report
  meanfield dichotomies data/skm22_d12.toml --json   # exact P, Cover, general position
  meanfield reference gibbs data/skm22_d7.toml --json   # exact stationary measure, each tau
  meanfield reference convex data/skm22_d7.toml         # the tau -> 0 convex limit
  meanfield sweep lowtemp.toml --workers 2   # a grid of runs on a local Dask cluster
  meanfield highdim --neurons 2 --n 20 --d 200,800,3200 --json -o out/

exit codes: 0 ok, 2 bad input, 130 interrupted (checkpoint kept), 1 diverged or other errors.
Run 'meanfield COMMAND --help' for the options of each command; docs/cli.md has the details.
"""


class _Parser(argparse.ArgumentParser):
    """Usage errors are bad input: exit 2 with one line that points to the ``--help`` of the
    command that refused them. Long options are never abbreviated (``--thread 1`` is a typo,
    not ``--threads``), in the top-level parser and every command's (they are this class)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


class _CommandParser(_Parser):
    """A command's parser: it refuses what it does not know itself (argparse would hand it up
    to ``meanfield``, whose error would point to 'meanfield --help')."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(extras))
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    """The ``meanfield`` argument parser with every command of :data:`COMMANDS`."""
    p = _Parser(prog="meanfield",
                description="Mean-field Langevin dynamics of wide two-layer ReLU networks, its "
                            "stationary measures and their rays; high-dimensional GD on few "
                            "ReLU neurons.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"meanfield {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    for name in COMMANDS:
        importlib.import_module(f"meanfield.cli.{name}").register(sub)
    return p


def _terminate(signum, frame):
    # recorded first: where Python swallows the exception (a signal inside a weakref callback
    # or __del__), the next commit point of an output raises it (meanfield.interrupts)
    interrupts.note(signum)
    raise Terminated(signum)


def _quiet_unraisable(previous):
    """A ``sys.unraisablehook`` that drops a :class:`Terminated` Python could not raise (it
    came inside a weakref callback or ``__del__``): :func:`_terminate` recorded it, and the
    next commit point raises it again, so its traceback would only be noise on stderr."""
    def hook(unraisable):
        if not isinstance(unraisable.exc_value, Terminated):
            previous(unraisable)
    return hook


@contextlib.contextmanager
def _signals_unwind():
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (a signal that is
    ignored, as under ``nohup``, stays ignored)."""
    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
                old[sig] = signal.signal(sig, _terminate)
    interrupts.clear()
    old_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable(old_hook)
    try:
        yield
    finally:
        sys.unraisablehook = old_hook
        for sig, handler in old.items():
            signal.signal(sig, handler)
        interrupts.clear()


class StdoutError(OSError):
    """Writing the command's standard output failed (full disk, ``/dev/full``, closed pipe)."""


class _Stdout:
    """``sys.stdout`` whose write failures are :class:`StdoutError` (told apart from the
    failures of the files a command writes)."""

    def __init__(self, stream):
        self._stream = stream

    def _call(self, name, *args):
        try:
            return getattr(self._stream, name)(*args)
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror or str(exc)) from None

    def write(self, text):
        return self._call("write", text)

    def writelines(self, lines):
        return self._call("writelines", lines)

    def flush(self):
        return self._call("flush")

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _silence_stdout(stream) -> None:
    """Drop what is left in a failed stdout so that the interpreter's exit does not write it
    again (which would print a second error)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


def _show_note(message, category, filename, lineno, file=None, line=None, _old=None):
    from solvers._numba_cache import NumbaCacheWarning
    if issubclass(category, NumbaCacheWarning):
        sys.stderr.write(f"meanfield: note: {message}\n")
        sys.stderr.flush()
    else:
        _old(message, category, filename, lineno, file, line)


def _import_failure(exc: ImportError) -> str:
    """One line for a dependency that does not load."""
    name = exc.name or getattr(exc, "path", None) or "a dependency"
    reason = (str(exc).splitlines() or [type(exc).__name__])[0]
    hint = ""
    if "failed to map segment" in reason or "cannot allocate memory" in reason.lower():
        hint = "; the address-space limit (ulimit -v) is too low for it"
    elif isinstance(exc, ModuleNotFoundError):
        hint = "; install it (pip install -e . from the checkout installs every dependency)"
    return f"cannot load the module '{name}' ({reason}){hint}"


def main(argv=None) -> int:
    """Entry point of the ``meanfield`` console script; returns the exit code."""
    out = sys.stdout
    sys.stdout = _Stdout(out)
    old_show = warnings.showwarning
    warnings.showwarning = lambda *a, **kw: _show_note(*a, **kw, _old=old_show)
    try:
        return _main(argv)
    finally:
        warnings.showwarning = old_show
        if isinstance(sys.stdout, _Stdout):
            sys.stdout = out


def _main(argv) -> int:
    stdout = sys.stdout._stream if isinstance(sys.stdout, _Stdout) else sys.stdout
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        with _signals_unwind():
            code = int(args.func(args) or 0)
            sys.stdout.flush()
        return code
    except InputError as exc:
        sys.stderr.write(f"meanfield: error: {exc.line()}\n")
        return 2
    except Interrupted as exc:
        sys.stderr.write(f"meanfield: {exc}\n")
        return 130
    except Terminated as exc:
        sys.stderr.write(f"meanfield: terminated by {exc}\n")
        return 130
    except AbortedRun:
        from meanfield.store import RESUME_HINT
        sys.stderr.write("meanfield: interrupted again, before that interrupt's checkpoint was "
                         "written; the last one written before it, if any, is kept: "
                         f"{RESUME_HINT}\n")
        return 130
    except KeyboardInterrupt:
        sys.stderr.write("meanfield: interrupted\n")
        return 130
    except DivergenceError as exc:
        sys.stderr.write(f"meanfield: error: {exc}\n")
        return 1
    except (BrokenPipeError, StdoutError) as exc:
        _silence_stdout(stdout)
        if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
            return 0              # e.g. `meanfield inspect x.h5 --json | head`
        sys.stderr.write(f"meanfield: error: cannot write the standard output "
                         f"({exc.strerror})\n")
        return 1
    except ImportError as exc:
        sys.stderr.write(f"meanfield: error: {_import_failure(exc)}\n")
        return 1
    except MemoryError:
        sys.stderr.write("meanfield: error: out of memory; use fewer particles, a smaller data "
                         "set or fewer snapshot frames\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
