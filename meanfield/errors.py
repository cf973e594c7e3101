"""Exceptions that the command line turns into exit codes.

``InputError`` (and its subclasses) means *bad input*: the CLI prints one line naming the
file, the field and the reason, and exits with code 2 without a traceback. ``InputError``,
``DataError`` and ``DivergenceError`` are those of :mod:`solvers.errors` (the solvers raise
them); this module adds the errors of the run files, configs, checkpoints and studies.

:func:`one_line` escapes the control characters of a message (a file name may hold a newline):
every line the command line prints on stderr goes through it, so one message is one line.
"""

from __future__ import annotations

from solvers.errors import DataError, DivergenceError, InputError, UnstableStepError, one_line

__all__ = ["InputError", "ConfigError", "DataError", "RunFileError", "CheckpointError",
           "RunMismatch", "Interrupted", "DivergenceError", "UnstableStepError", "StudyError",
           "MissingDependencyError", "StoredConfigWarning", "one_line"]


class ConfigError(InputError):
    """A config file (TOML) that is malformed or holds an invalid value."""


class RunFileError(InputError):
    """A run file (HDF5) that is missing, truncated, foreign or of an unsupported schema."""


class StoredConfigWarning(UserWarning):
    """A run file whose stored config no longer validates (written by an older version): it is
    read leniently (:func:`meanfield.config.stored_config`), and the warning says why."""


class CheckpointError(InputError):
    """A checkpoint (``RUN.h5.ckpt``) that is unreadable, damaged, or belongs to another config."""


class RunMismatch(InputError):
    """An existing run file or checkpoint of the output was written from other inputs than the
    run asked for now: another physics (``physics_hash``) or other data values (``data_hash``,
    the stored ``/data/X`` and ``/data/y``). Resuming it would mix two runs."""


class Interrupted(Exception):
    """The run stopped on SIGINT/SIGTERM/SIGHUP after writing a checkpoint (CLI exit code 130).

    ``step`` is the global step of the checkpoint, ``checkpoint`` its path, ``message`` the
    one line for the user.
    """

    def __init__(self, step: int, checkpoint: str, message: str):
        self.step = step
        self.checkpoint = checkpoint
        super().__init__(message)


class StudyError(InputError):
    """A study file (TOML with a ``[sweep]`` table) or a study directory that cannot be used."""


class MissingDependencyError(RuntimeError):
    """An optional dependency (an extra of the package) is needed but not installed; the message
    says how to install it."""
