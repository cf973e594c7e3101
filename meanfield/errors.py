"""Exceptions that the command line turns into exit codes.

``InputError`` (and its subclasses) means *bad input*: the CLI prints one line naming the
file, the field and the reason, and exits with code 2 without a traceback.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input: a config, a data file or a run file that cannot be used.

    Parameters
    ----------
    source : str
        The file (or other origin, e.g. ``"<embedded default>"``) the bad value came from.
    field : str
        The offending field, e.g. ``"dynamics.lam"`` or ``"X"``; empty when the whole file is bad.
    reason : str
        Why it is rejected, phrased for a person.
    """

    def __init__(self, source: str, field: str, reason: str):
        self.source = str(source)
        self.field = field
        self.reason = reason
        super().__init__(self.line())

    def line(self) -> str:
        """The one-line message printed by the CLI: ``FILE: FIELD: REASON``."""
        parts = [self.source]
        if self.field:
            parts.append(self.field)
        parts.append(self.reason)
        return ": ".join(parts)


class ConfigError(InputError):
    """A config file (TOML) that is malformed or holds an invalid value."""


class DataError(InputError):
    """A data set that cannot be loaded or is unusable (empty, NaN, inconsistent shapes)."""


class RunFileError(InputError):
    """A run file (HDF5) that is missing, truncated, foreign or of an unsupported schema."""


class CheckpointError(InputError):
    """A checkpoint (``RUN.h5.ckpt``) that is unreadable, damaged, or belongs to another config."""


class Interrupted(Exception):
    """The run stopped on SIGINT/SIGTERM after writing a checkpoint (CLI exit code 130).

    Parameters
    ----------
    step : int
        Global step of the checkpoint.
    checkpoint : str
        Path of the checkpoint written.
    message : str
        The one-line message for the user.
    """

    def __init__(self, step: int, checkpoint: str, message: str):
        self.step = step
        self.checkpoint = checkpoint
        super().__init__(message)


class DivergenceError(RuntimeError):
    """The particle dynamics produced NaN/Inf (CLI exit code 1); carries the step and
    temperature. The message is one line naming both and the likely cause."""

    def __init__(self, step: int, tau: float, message: str):
        self.step = step
        self.tau = tau
        super().__init__(message)


class UnstableStepError(DivergenceError):
    """The Euler step became linearly unstable on the data mode (``η h ≥ 2``, docs/theory.md,
    "Stability of the step"): the predictor would oscillate with period 2. CLI exit code 1,
    one line naming ``η``, the limit, ``τ`` and the step."""


class StudyError(InputError):
    """A study file (TOML with a ``[sweep]`` table) or a study directory that cannot be used."""


class MissingDependencyError(RuntimeError):
    """An optional dependency (an extra of the package) is needed but not installed; the message
    says how to install it."""
