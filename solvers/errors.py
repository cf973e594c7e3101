"""Exceptions raised by the solvers and the analysis.

:class:`InputError` (and its subclass :class:`DataError`) means *bad input*: the message is one
line naming the origin, the field and the reason, so that a front end (``meanfield``'s command
line) can print it as is and exit with code 2. :class:`DivergenceError` means the dynamics left
the regime the step size can integrate.
"""

from __future__ import annotations

import unicodedata

#: Escapes of the control characters that have a short one.
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text) -> str:
    r"""``text`` with every control character (``\n``, ``\r``, ``\x1b``, ...) and every
    Unicode line or paragraph separator escaped: a file name holding one cannot split a message
    into lines (nor forge a second ``meanfield: error:`` line, nor redraw a terminal line).

    >>> one_line("a\nb.toml")
    'a\\nb.toml'
    """
    text = str(text)
    if text.isprintable():                    # the usual case: nothing to escape
        return text
    out = []
    for ch in text:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


class InputError(Exception):
    """Bad input: a value, an array or a file that cannot be used.

    Parameters
    ----------
    source : str
        The file (or other origin, e.g. ``"<embedded default>"``, ``"<convex>"``) the bad
        value came from.
    field : str
        The offending field, e.g. ``"dynamics.lam"`` or ``"X"``; empty when the whole input is
        bad.
    reason : str
        Why it is rejected, phrased for a person.
    """

    def __init__(self, source: str, field: str, reason: str):
        self.source = str(source)
        self.field = field
        self.reason = reason
        super().__init__(self.line())

    def line(self) -> str:
        """The one-line message printed by the CLI: ``FILE: FIELD: REASON``, its control
        characters escaped (:func:`one_line`: a file name holding a newline stays one line)."""
        parts = [self.source]
        if self.field:
            parts.append(self.field)
        parts.append(self.reason)
        return one_line(": ".join(parts))


class DataError(InputError):
    """A data set that cannot be loaded or is unusable (empty, NaN, inconsistent shapes)."""


class DivergenceError(RuntimeError):
    """The dynamics produced NaN/Inf or ran away; carries the step and temperature.

    The message is one line naming both and the likely cause.

    Parameters
    ----------
    step : int
        The step at which the divergence was detected.
    tau : float
        The temperature (``nan`` for plain GD).
    message : str
        The one-line message for the user.
    """

    def __init__(self, step: int, tau: float, message: str):
        self.step = step
        self.tau = tau
        super().__init__(message)


class UnstableStepError(DivergenceError):
    """The Euler step became linearly unstable on the data mode (``η h ≥ 2``, docs/theory.md
    §2): the predictor would oscillate with period 2. CLI exit code 1, one line naming ``η``,
    the limit, ``τ`` and the step."""
