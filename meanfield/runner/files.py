"""The files of a run with output ``RUN.h5`` (``docs/format.md``, "File protocol"): where they
go, what an existing one means (refuse, replace or resume), and the rename that finishes a run."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from meanfield import atomic
from meanfield import io_failures as _io_failures
from meanfield.errors import (
    CheckpointError,
    InputError,
    RunFileError,
)
from meanfield.runner.identity import check_same_run
from meanfield.store import open_run, writer_alive


def default_output(cfg) -> str:
    """Default run-file name: ``run-<config hash>.h5`` in the current directory."""
    return f"run-{cfg.hash()}.h5"


@dataclass(frozen=True)
class RunPaths:
    """The files of one run: ``final`` (RUN.h5), ``part`` (RUN.h5.part), ``ckpt``
    (RUN.h5.ckpt); scratch files are ``RUN.h5.part.tmp`` and ``RUN.h5.ckpt.tmp``."""

    final: Path
    part: Path
    ckpt: Path

    @classmethod
    def of(cls, output) -> RunPaths:
        out = Path(output)
        return cls(out, out.with_name(out.name + ".part"), out.with_name(out.name + ".ckpt"))

    @property
    def creating(self) -> Path:
        """Where the empty run file is laid out before it becomes ``part``."""
        return self.part.with_name(self.part.name + ".tmp")


def _check_output_dir(path: Path) -> None:
    """Whether the run file ``path`` can be written: its folder exists and is writable, or the
    missing folders can be made (:func:`_make_output_dir`) in the nearest one that exists.
    Nothing is created here.

    Raises
    ------
    InputError
        A folder on the way is a file, the folder (or, when it is missing, the nearest one
        that exists) is not writable, or ``path`` is a directory.
    """
    parent = path.absolute().parent
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(str(path), "", f"{existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == parent:
            raise InputError(str(path), "", f"output directory {parent} is not writable")
        raise InputError(str(path), "", f"cannot create the output directory {parent}: "
                                        f"{existing} is not writable")
    if path.is_dir():
        raise InputError(str(path), "", "is a directory, expected a run file name")


def _make_output_dir(path: Path) -> None:
    """Create the missing folders above the run file ``path`` (``-o a/new/dir/run.h5``), once
    :func:`_check_output_dir` and every other check of the input passed.

    Raises
    ------
    InputError
        A folder cannot be created (named, with the reason).
    """
    parent = path.absolute().parent
    if parent.is_dir():
        return
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(str(path), "", f"cannot create the output directory {parent} "
                                        f"({exc.strerror or exc})") from None


def _through_symlink(out: Path, overwrite: bool, resume: bool) -> Path:
    """The file a symlinked output names: the run is written there and the link is kept. A
    link to nothing is followed only with ``overwrite`` (or ``resume`` of an interrupted run
    at its target).

    Raises
    ------
    InputError
        ``out`` is a dangling link and neither applies.
    """
    if not out.is_symlink():
        return out
    target = Path(os.path.realpath(out))
    if not target.exists():
        at = RunPaths.of(target)
        if not (overwrite or (resume and (at.part.exists() or at.ckpt.exists()))):
            raise InputError(str(out), "-o", f"is a symbolic link to {target}, which does not "
                                             "exist; pass --overwrite to write the run there "
                                             "(the link is kept), or remove the link")
    return target


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (symlinks resolved; hard links too)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_not_an_input(cfg, out: Path) -> None:
    """Refuse an output that is one of the run's inputs: the config file or the data file
    (any of the files the run writes: ``RUN.h5``, ``.part``, ``.ckpt`` and their scratch).

    Raises
    ------
    InputError
        Naming the output and which input it is.
    """
    from meanfield.schema import FileData
    inputs = []
    if not cfg.source.startswith("<") and Path(cfg.source).is_file():
        inputs.append(("the config", Path(cfg.source)))
    if isinstance(cfg.data, FileData):
        inputs.append(("the data file (data.path)", Path(cfg.data.path)))
    paths = RunPaths.of(out)
    written = (paths.final, paths.part, paths.ckpt, paths.creating,
               paths.ckpt.with_name(paths.ckpt.name + ".tmp"))
    for what, src in inputs:
        for p in written:
            if _same_file(p, src):
                who = "is" if p == paths.final else f"writes {p.name}, which is"
                raise InputError(str(out), "-o", f"{who} {what} of this run ({src}); a run "
                                                 "never writes over its inputs: choose another "
                                                 "output")


def _refuse_if_locked(part: Path) -> None:
    """Refuse to touch a ``.part`` that a running writer holds open (its writer lock, or an
    HDF5 file lock outside SWMR mode)."""
    if writer_alive(part):
        raise InputError(str(part), "", "locked: another process is writing this run "
                                        "(never run two 'meanfield run' with one output)")
    try:
        open_run(part)
    except RunFileError as exc:
        if exc.reason.startswith("not a readable HDF5 file (locked"):
            raise InputError(str(part), "", "locked: another process is writing this run "
                                            "(never run two 'meanfield run' with one output)") \
                from None


def _plan(paths: RunPaths, cfg, dataset, overwrite: bool, resume: bool) -> str:
    """Decide what to do: ``"fresh"``, ``"resume"``, ``"finalize"`` or ``"done"``.

    Raises
    ------
    InputError
        The output is in the way, or belongs to another config.
    """
    if paths.part.exists():
        _refuse_if_locked(paths.part)
    if overwrite:
        return "fresh"
    if not resume:
        if paths.final.exists():
            raise InputError(str(paths.final), "", "output exists; pass --overwrite to replace "
                                                   "it (or --resume to check it is complete)")
        for p in (paths.part, paths.ckpt):
            if p.exists():
                raise InputError(str(p), "", "an interrupted run of this output exists; pass "
                                             "--resume to continue it or --overwrite to start over")
        return "fresh"
    if paths.ckpt.exists():
        if not paths.part.exists():
            raise CheckpointError(str(paths.ckpt), "", f"its run file {paths.part.name} is "
                                                       "missing; pass --overwrite to start over")
        return "resume"
    if paths.part.exists():
        # no checkpoint: killed before the first one, or finished but not yet renamed
        try:
            part = open_run(paths.part)
        except RunFileError as exc:
            # RUN.h5.part only ever appears complete (it is laid out under another name), so
            # an unreadable one is not an interrupted run of ours: leave it alone
            raise RunFileError(str(paths.part), "", f"{exc.reason}; cannot resume from it; "
                                                    "pass --overwrite to start over") from None
        check_same_run(cfg, dataset, part, paths.part)
        return "finalize" if part.complete else "fresh"
    if paths.final.exists():
        done = open_run(paths.final)
        check_same_run(cfg, dataset, done, paths.final,
                       "run it with the same config and data, or pass --overwrite to replace it")
        if not done.complete:
            raise RunFileError(str(paths.final), "complete", "false and no checkpoint to "
                                                             "resume from; pass --overwrite")
        return "done"
    return "fresh"


class _Writing:
    """Turn an ``OSError`` (full disk, file-size limit, permissions) while writing ``path``
    into an :class:`InputError` naming it."""

    def __init__(self, path, hint=""):
        self.path, self.hint = path, hint

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if typ is None or isinstance(exc, InputError):
            return False
        if not (issubclass(typ, OSError)
                or (issubclass(typ, RuntimeError) and "write failed" in str(exc))):
            return False
        # h5py reports HDF5 I/O failures as RuntimeError("... error message = 'REASON' ...");
        # a failing numba cache or another file is named as itself, not as the run file
        what, reason = _io_failures.describe(exc, self.path)
        if what.startswith(str(self.path)):        # RUN.h5.part.tmp and the like
            what = str(self.path)
        hint = self.hint if what == str(self.path) else ""
        raise InputError(what, "", f"cannot write ({reason}){hint}") from None


def _finalize(paths: RunPaths) -> None:
    """Make the finished ``.part`` durable, drop the checkpoint, rename into place."""
    with _Writing(paths.final):
        atomic.fsync_path(paths.part)
        if paths.ckpt.exists():
            paths.ckpt.unlink()
        os.replace(paths.part, paths.final)
        atomic.fsync_path(paths.final.absolute().parent)
