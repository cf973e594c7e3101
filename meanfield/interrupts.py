"""A termination signal that must not be lost.

The command line turns SIGTERM and SIGHUP into :class:`Terminated`, raised from the signal
handler wherever the main thread is. Python cannot raise it everywhere: a signal that arrives
while a ``__del__`` method or a weakref callback runs is printed as "Exception ignored" and the
program goes on (measured: 1 in about 30 signals during ``meanfield analyze``, which then
finished and exited 0). The handler therefore also records the signal here, and every commit
point of an output (:mod:`meanfield.atomic`: the renames of a file or a folder into place)
calls :func:`raise_pending` first, so that a swallowed signal stops the command before it
publishes anything, with the exit code of the signal.
"""

from __future__ import annotations

import signal

_pending: int | None = None


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP outside ``meanfield run`` (which checkpoints on them): unwinds like
    Ctrl-C, so that temporary files and folders are removed on the way out."""

    def __init__(self, signum):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


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
