"""SIGINT, SIGTERM and SIGHUP during a run: a request to stop at the next observation boundary,
with a checkpoint (a second signal aborts).

The solver advances the particles a chunk at a time, from one observation boundary to the next
(every ``output.observe_every`` steps, and at each snapshot and stage end), in one call of a
compiled kernel; a stop request is seen when the chunk it arrived in ends. The note it prints
says where that is: the step the run stops at, and how far it is from the last boundary
(:attr:`_StopRequest.where`, set by :func:`meanfield.runner.loop.integrate`)."""

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
        #: ``() -> (last boundary, stop step, unit, observe_every)`` where the run stands, or
        #: ``None`` once the ladder is done (the run completes then); set while it steps.
        self.where = None

    def __call__(self) -> bool:
        return self.requested

    def _handler(self, signum, frame):
        name = signal.Signals(signum).name
        if self.requested:
            raise AbortedRun(name)
        self.requested = True
        at = self.where() if self.where is not None else False
        if at is None:
            self._log(f"{name}: the ladder is at its end; the run completes")
        elif not at:
            self._log(f"{name}: writing a checkpoint at the next observation boundary (signal "
                      "again to abort)")
        else:
            last, stop, unit, every = at
            units = unit + ("es" if unit.endswith("s") else "s")
            where = ("the observation boundary the run is at" if stop == last
                     else f"the end of the chunk the run is computing ({stop - last} {units} "
                          f"on from {unit} {last}; an observation every {every} {units}, "
                          "output.observe_every)")
            self._log(f"{name}: writing a checkpoint at {unit} {stop}, {where}, and stopping "
                      "there (signal again to abort)")

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
