"""Progress reports on stderr: a tqdm bar on a terminal, a plain line every ~10 s otherwise (a
log file or a pipe gets no carriage returns), nothing when silenced (``--quiet``).

Every long command (``run``, ``analyze``, ``sweep``, ``highdim``) reports through
:func:`progress_bar`.
"""

from __future__ import annotations

import sys
import time

#: Seconds between two plain progress lines.
PLAIN_EVERY = 10.0


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class PlainProgress:
    """tqdm's ``update``/``set_postfix``/``close`` interface, printing one line at most every
    ``every`` seconds (and one when done, if any was printed): ``desc: 1200/120000 steps (1%), 35 s, about 48 min
    left  tau=1.0e-02 risk=1.2e-01``.

    Parameters
    ----------
    total : int
    desc, unit : str
    initial : int
        Units already done (a resumed run): not counted in the rate.
    every : float
        Seconds between two lines.
    stream : file-like
        Default ``sys.stderr``.
    clock : callable() -> float
        Default ``time.monotonic`` (tests pass a fake one).
    """

    def __init__(self, total, desc="", unit="it", initial=0, every=PLAIN_EVERY, stream=None,
                 clock=time.monotonic):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.n = self._n0 = int(initial)
        self.every, self._clock = float(every), clock
        self.stream = stream if stream is not None else sys.stderr
        self._t0 = self._last = clock()
        self._postfix = ""
        self._closed = False
        self._printed_n = self._printed_total = None
        #: The total is a budget that may not be spent (auto stage lengths): the time left
        #: is an upper bound.
        self.upper_bound = False

    def _line(self) -> str:
        el = self._clock() - self._t0
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        units = self.unit + ("es" if self.unit.endswith("s") else "s")    # steps, passes
        txt = f"{self.desc}: {self.n}/{self.total} {units}{pct}, {_duration(el)}"
        done = self.n - self._n0
        if 0 < done and self.n < self.total and el > 0:
            left = _duration((self.total - self.n) * el / done)
            txt += f", at most {left} left" if self.upper_bound else f", about {left} left"
        return txt + (f"  {self._postfix}" if self._postfix else "")

    def _emit(self):
        self.stream.write(self._line() + "\n")
        self.stream.flush()
        self._printed_n = self.n
        self._printed_total = self.total

    def update(self, n=1):
        self.n += int(n)
        now = self._clock()
        if now - self._last >= self.every:
            self._last = now
            self._emit()

    def set_postfix(self, ordered_dict=None, refresh=False, **kw):
        items = {**(ordered_dict or {}), **kw}
        self._postfix = " ".join(f"{k}={v}" for k, v in items.items())

    def set_description(self, desc, refresh=False):
        self.desc = desc

    def close(self):
        """Print the final line, if progress was reported before (work shorter than ``every``
        stays silent, so a quick command that fails prints its one error line alone)."""
        if not self._closed:
            self._closed = True
            if self._printed_n is not None and (self._printed_n != self.n
                                                or self._printed_total != self.total):
                self._emit()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is not None:
            self._closed = True         # a failure: its own one-line message says what happened
        self.close()


class _Silent:
    """Accepts the progress calls and prints nothing."""

    n = 0

    def update(self, n=1):
        self.n += n

    def set_postfix(self, *a, **kw):
        pass

    def set_description(self, *a, **kw):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def progress_bar(total, desc, unit="it", *, enabled=None, initial=0, stream=None,
                 every=None):
    """A progress reporter for ``total`` units of work.

    Parameters
    ----------
    total : int
    desc : str
        What is progressing (``"run"``, ``"analyze"``, ``"study"``, ``"highdim"``).
    unit : str
        Singular unit name (``"step"``, ``"job"``).
    enabled : bool or None
        ``False``: silent. ``None`` or ``True``: a tqdm bar when ``stream`` is a terminal, else
        a plain line every ``every`` seconds.
    initial : int
        Units already done.
    stream : file-like, optional
        Default ``sys.stderr``.
    every : float, optional
        Seconds between plain lines (default :data:`PLAIN_EVERY`).

    Returns
    -------
    object
        With tqdm's ``update(n)``, ``set_postfix(**kw)``, ``set_description(s)``, ``close()``;
        a context manager.
    """
    if enabled is False:
        return _Silent()
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        from tqdm import tqdm
        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream,
                    dynamic_ncols=True, mininterval=0.5)
    return PlainProgress(total, desc, unit, initial=initial, stream=stream,
                         every=PLAIN_EVERY if every is None else every)
