"""Command line: ``meanfield <command> ...``.

Each command lives in its own module of this package exposing ``register(subparsers)``, which
adds a parser whose ``func(args) -> int`` does the work. To add a command, write the module and
list it in :data:`COMMANDS`.

Exit codes (README, ``docs/cli.md``): 0 success; 2 bad input (one line naming the file, the field and the
reason, no traceback); 130 interrupted (SIGINT, SIGTERM or SIGHUP; a run keeps its checkpoint,
any other command removes its temporary files); 1 the environment (stdout cannot be written, a
compiled dependency does not load, out of memory, no thread can be started) or anything else. A
closed stdout (``| head``) ends the command quietly with 0, as ``cat`` and ``grep`` do under a
shell that ignores SIGPIPE.

Standard streams: a standard descriptor (0, 1, 2) that is closed when the command starts
(``>&-``, ``2>&-``) is opened on ``os.devnull`` first, so that no file the command opens (a run's
lock file) takes its number and receives what is written there; a stderr that fails (closed
pipe, full disk) is dropped. Neither changes a command's exit code or its files. Every line
written on stderr has its control characters escaped (:func:`meanfield.errors.one_line`): a
file name holding a newline cannot split one error into two lines.
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
from meanfield.errors import DivergenceError, InputError, Interrupted, one_line
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
        sys.stderr.write(one_line(f"{self.prog}: error: {message} (see '{self.prog} --help')")
                         + "\n")
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


class _Stderr:
    """``sys.stderr`` whose write failures (closed pipe, full disk) are dropped: the messages
    are lost, the command's work and exit code are not. After the first failure the descriptor
    is pointed at ``os.devnull`` (the interpreter's flush at exit then succeeds too)."""

    def __init__(self, stream):
        self._stream = stream
        self.failed = False

    def _call(self, name, *args):
        if not self.failed:
            try:
                return getattr(self._stream, name)(*args)
            except (OSError, ValueError):
                self.failed = True
                _silence_stdout(self._stream)
        return None

    def write(self, text):
        out = self._call("write", text)
        return len(text) if out is None else out

    def writelines(self, lines):
        self._call("writelines", lines)

    def flush(self):
        self._call("flush")

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _standard_streams() -> None:
    """Open each closed standard descriptor (0, 1, 2) on ``os.devnull``, and give Python a
    stream for it, before anything else is opened: a file opened later (a lock file, a run
    file) would otherwise take descriptor 1 or 2, and what is written to stdout or stderr, by
    this process or by a child (git), would land in it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is None:
            with contextlib.suppress(OSError, ValueError):
                setattr(sys, name, open(fd, mode, closefd=False, errors="backslashreplace"))


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
    notes = [NumbaCacheWarning]
    refcache = sys.modules.get("analysis.refcache")      # loaded where it warned
    if refcache is not None and hasattr(refcache, "CacheLocationWarning"):
        notes.append(refcache.CacheLocationWarning)
    if issubclass(category, tuple(notes)):
        sys.stderr.write(f"meanfield: note: {one_line(message)}\n")
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
    _standard_streams()
    out, err = sys.stdout, sys.stderr
    sys.stdout = _Stdout(out)
    sys.stderr = _Stderr(err)
    old_show = warnings.showwarning
    warnings.showwarning = lambda *a, **kw: _show_note(*a, **kw, _old=old_show)
    try:
        return _main(argv)
    finally:
        warnings.showwarning = old_show
        if isinstance(sys.stdout, _Stdout):
            sys.stdout = out
        if isinstance(sys.stderr, _Stderr):
            sys.stderr = err


def _error(text) -> None:
    """Write ``meanfield: error: TEXT`` as one line on stderr."""
    sys.stderr.write(f"meanfield: error: {one_line(text)}\n")


def _main(argv) -> int:
    stdout = sys.stdout._stream if isinstance(sys.stdout, _Stdout) else sys.stdout
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        from meanfield.environment import check_numba_settings
        check_numba_settings()              # before any file is created
        with _signals_unwind():
            code = int(args.func(args) or 0)
            sys.stdout.flush()
        return code
    except InputError as exc:
        _error(exc.line())
        return 2
    except Interrupted as exc:
        sys.stderr.write(f"meanfield: {one_line(exc)}\n")
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
        # OpenBLAS, unable to start its threads while NumPy loads, raises SIGINT on itself:
        # a resource limit, not a Ctrl-C
        from meanfield.environment import thread_limit
        limit = thread_limit()
        if limit is not None:
            _error(limit)
            return 1
        sys.stderr.write("meanfield: interrupted\n")
        return 130
    except DivergenceError as exc:
        _error(exc)
        return 1
    except (BrokenPipeError, StdoutError) as exc:
        _silence_stdout(stdout)
        if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
            return 0              # e.g. `meanfield inspect x.h5 --json | head`
        _error(f"cannot write the standard output ({exc.strerror})")
        return 1
    except ImportError as exc:
        _error(_import_failure(exc))
        return 1
    except MemoryError:
        _error("out of memory; use fewer particles, a smaller data set or fewer snapshot "
               "frames")
        return 1
    except RuntimeError as exc:
        from meanfield.environment import thread_limit
        limit = thread_limit() if "can't start new thread" in str(exc) else None
        if limit is None:
            raise
        _error(limit)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
