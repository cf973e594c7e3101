"""SIGINT, SIGTERM and SIGHUP during a run: a request to stop at the next observation boundary,
with a checkpoint (a second signal aborts)."""

from __future__ import annotations

import signal
import threading

from meanfield.interrupts import AbortedRun


class _StopRequest:
    """SIGINT/SIGTERM/SIGHUP handlers (main thread only) that ask the solver to stop at the next
    observation boundary; a second signal aborts at once
    (:class:`meanfield.interrupts.AbortedRun`, a ``KeyboardInterrupt``). A signal the
    process ignores (SIGHUP under ``nohup``) stays ignored."""

    def __init__(self, log):
        self.requested = False
        self._log = log
        self._old = {}

    def __call__(self) -> bool:
        return self.requested

    def _handler(self, signum, frame):
        if self.requested:
            raise AbortedRun(signal.Signals(signum).name)
        self.requested = True
        self._log(f"{signal.Signals(signum).name}: writing a checkpoint at the next observation "
                  "boundary (signal again to abort)")

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
                if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
                    self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}
