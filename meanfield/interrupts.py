"""A termination signal that must not be lost.

The command line turns SIGTERM and SIGHUP into :class:`Terminated`, raised from the signal
handler wherever the main thread is. Python cannot raise it everywhere: a signal that arrives
while a ``__del__`` method or a weakref callback runs is printed as "Exception ignored" and the
program goes on (measured: 1 in about 30 signals during ``meanfield analyze``, which then
finished and exited 0). The handler therefore also records the signal here, and every commit
point of an output (:mod:`meanfield.atomic`: the renames of a file or a folder into place)
calls :func:`raise_pending` first, so that a swallowed signal stops the command before it
publishes anything, with the exit code of the signal.

A signal that arrives between creating a resource (a lock file, a scratch file or folder) and
entering the ``try`` that removes it would leave the resource behind. Such windows run between
:func:`hold` and :func:`release` (or under :func:`deferred`): the termination signals are
recorded, and delivered when the window ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_pending: int | None = None


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP outside ``meanfield run`` (which checkpoints on them): unwinds like
    Ctrl-C, so that temporary files and folders are removed on the way out."""

    def __init__(self, signum):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class AbortedRun(KeyboardInterrupt):
    """A second SIGINT/SIGTERM/SIGHUP during ``meanfield run``, while the first one's request
    to stop at the next observation boundary (with a checkpoint) was pending: the run stops at
    once, its last checkpoint written before kept."""


def note(signum: int) -> None:
    """Record that termination signal ``signum`` arrived."""
    global _pending
    _pending = int(signum)


def clear() -> None:
    """Forget a recorded signal (the command that handled it is over)."""
    global _pending
    _pending = None


def raise_pending() -> None:
    """Raise :class:`Terminated` if a signal was recorded and its exception was swallowed.

    Raises
    ------
    Terminated
        A termination signal arrived since the last :func:`clear`.
    """
    if _pending is not None:
        raise Terminated(_pending)


#: The signals :func:`hold` holds back.
DEFERRED = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGINT")
                 if hasattr(signal, n))


def hold():
    """Hold :data:`DEFERRED` back until :func:`release`: their handlers only record them.

    A signal mask would not do: a process-directed signal goes to any thread that does not
    block it (the BLAS and numba worker threads), and Python then runs its handler in the main
    thread all the same. So the handlers themselves are swapped, in the main thread; elsewhere
    this does nothing. A signal that is ignored stays ignored.

    Returns
    -------
    tuple
        The token for :func:`release`: the previous handlers and the signals recorded.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}, []
    got: list[int] = []

    def record(signum, frame):
        got.append(signum)

    old = {}
    for sig in DEFERRED:
        h = signal.getsignal(sig)
        if h is signal.SIG_IGN or h is None:
            continue
        old[sig] = signal.signal(sig, record)
    return old, got


def release(token) -> None:
    """End :func:`hold`: the handlers are put back and the first signal that arrived
    meanwhile is delivered to its own handler now (which may raise, e.g. :class:`Terminated`
    or :class:`KeyboardInterrupt`; a default disposition then ends the process)."""
    old, got = token
    for sig, h in old.items():
        signal.signal(sig, h)
    if got:
        sig = got[0]
        h = old[sig]
        if callable(h):
            h(sig, None)
        elif h == signal.SIG_DFL:
            signal.raise_signal(sig)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """:func:`hold` for the block: a termination signal that arrives is delivered when the
    block ends (also when it raises)."""
    token = hold()
    try:
        yield
    finally:
        release(token)
