"""Reading a run file (:func:`open_run`, :class:`Run`): the committed rows of a complete,
running or killed run, and one-line errors for files that cannot be read."""

from __future__ import annotations

import contextlib
import json
import numbers
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from meanfield.config import RunConfig, json_hash, stored_config
from meanfield.errors import ConfigError, RunFileError, StoredConfigWarning
from meanfield.store.layout import (
    LATER_OBSERVABLES,
    OBSERVABLES,
    PER_POINT,
    PLACE,
    SCHEMA_VERSION,
    chain_root,
    stored_chains,
    text,
)
from meanfield.store.locks import _open_read, writer_alive
from meanfield.store.trust import (
    check_dataset,
    check_shapes,
    failed_read,
    read_rows,
    vet_attributes,
    walk,
)
from solvers.schedule import Schedule

#: What h5py raises on a file it cannot read: damaged metadata (a bad local heap or object
#: header signature is a ``RuntimeError``), truncation (``OSError``), missing or mistyped
#: objects and attributes (``KeyError``, ``TypeError``, ``ValueError``, ``IndexError``).
READ_ERRORS = (KeyError, OSError, RuntimeError, ValueError, TypeError, IndexError,
               AttributeError)


def _h5_reason(exc) -> str:
    """The first clause of an HDF5 error message, e.g. ``unable to open file``, or what a
    failure to lock the file means."""
    msg = str(exc)
    if "unable to lock file" in msg:
        if "errno = 11" in msg:
            return ("locked: another process has it open for writing, e.g. a running "
                    "'meanfield run'")
        return ("file locking failed; on a network file system set "
                "HDF5_USE_FILE_LOCKING=FALSE (docs/format.md)")
    if "file signature not found" in msg:
        return "no HDF5 signature: empty, cut before its header, or not HDF5 at all"
    if "truncated file" in msg:
        m = re.search(r"eof = (\d+).*stored_eof = (\d+)", msg)
        return ("truncated: " + (f"{int(m[1])} of the {int(m[2])} bytes HDF5 recorded" if m
                                 else "shorter than HDF5 recorded")
                + "; an unfinished copy, or a disk that was full?")
    if isinstance(exc, RuntimeError) and len(msg) < 200:
        return msg.strip()           # e.g. "Unable to ... (bad local heap signature)"
    msg = msg.split("(")[0].strip().strip("'\"")
    return (msg[msg.index("]") + 1:] if msg.startswith("[Errno") else msg).strip() \
        or type(exc).__name__


#: How a stopped run is continued. A run file does not record the path of the config that
#: started it, so the hint names the command that started it rather than a placeholder.
RESUME_HINT = "to continue it, run the same 'meanfield run' command again with --resume"


def no_frames_yet(run: Run) -> str | None:
    """Why ``run`` has nothing to analyse yet, as the reason of a one-line error: it holds no
    frame (a run stopped, or still going, before its first snapshot); ``None`` when it holds
    one. ``meanfield analyze`` refuses such a file with it and ``meanfield inspect`` says it."""
    if run.n_frames:
        return None
    if writer_alive(run.path):
        return ("holds no frames yet: the run writing it has not reached its first frame "
                f"(follow it with 'meanfield inspect {run.path} --follow')")
    return f"holds no frames yet: the run was stopped before its first frame; {RESUME_HINT}"


def check_schema(f, source):
    """Raise :class:`RunFileError` unless ``f`` is a meanfield run file of a supported schema.

    A file written by a newer meanfield (``schema_version`` > :data:`SCHEMA_VERSION`) is
    refused rather than misread.
    """
    if "h5md" not in f or "parameters" not in f:
        raise RunFileError(source, "", "not a meanfield run file (no /h5md or /parameters group)")
    v = f["parameters"].attrs.get("schema_version")
    if v is None:
        raise RunFileError(source, "parameters.schema_version",
                           "missing; not a meanfield run file")
    try:
        v = int(np.asarray(v).item())
    except (TypeError, ValueError):
        raise RunFileError(source, "parameters.schema_version",
                           f"not an integer ({v!r})") from None
    if v > SCHEMA_VERSION:
        raise RunFileError(source, "parameters.schema_version",
                           f"version {v} is newer than this meanfield supports "
                           f"({SCHEMA_VERSION}); upgrade meanfield")
    if v < 1:
        raise RunFileError(source, "parameters.schema_version", f"unknown version {v}")


@dataclass
class Run:
    """A run file read into memory (all committed rows).

    Attributes
    ----------
    path : str
        The file's path.
    config : meanfield.config.RunConfig
        The config the file was written with, typed (read leniently, with a
        :class:`StoredConfigWarning`, when an older file's config no longer validates).
    config_json : str
        The stored canonical JSON, as stored.
    X, y : ndarray (n, d), ndarray (n,)
        The training data.
    frame_step, frame_time, frame_tau : ndarray (F,) int, ndarray (F,), ndarray (F,)
        Step, time and temperature of each frame.
    observables : dict
        Name -> dict(step, time, value).
    stage : ndarray (M,) int
        Ladder stage of each observation (0 = the first), by index, so a temperature visited
        twice is two stages.
    step_in_stage : ndarray (M,) int
        Its step within that stage (1-based).
    frame_stage, frame_step_in_stage : ndarray (F,) int
        The same for each frame.
    schedule : Schedule
        The ladder the run was written with, ``"auto"`` stage lengths as run
        (:meth:`solvers.schedule.Schedule.as_run`).
    complete : bool
        The run reached the end of its ladder.
    physics_hash : str
        ``RunConfig.physics_hash()`` of the config that wrote it.
    data_hash : str
        ``meanfield.data.data_hash(X, y)``; ``""`` in files written before it was stored.
    chain_runs : tuple of Run
        Chains ``1 .. K-1`` of a run of ``dynamics.chains = K`` (each a Run of its own rows;
        this Run is chain 0); read them with :meth:`chain` and :attr:`n_chains`.
    prefix : str
        The group of this chain's rows in the file (``""`` for chain 0, ``"chains/<k>/"`` for
        chain ``k``).

    Notes
    -----
    The stage arrays are read from the file, or for a file written before they were stored
    told once from its rows (:meth:`solvers.schedule.Schedule.stages_of_rows`); every reader
    asks them (:meth:`stage_observations`, :meth:`stage_frames`, :meth:`last_frame`,
    :meth:`steps_run`) or :attr:`schedule` (stage bounds, :meth:`Schedule.last_part`), never
    the temperatures.
    """

    path: str
    config: RunConfig
    config_json: str
    X: np.ndarray
    y: np.ndarray
    frame_step: np.ndarray
    frame_time: np.ndarray
    frame_tau: np.ndarray
    observables: dict
    stage: np.ndarray
    step_in_stage: np.ndarray
    frame_stage: np.ndarray
    frame_step_in_stage: np.ndarray
    schedule: Schedule
    complete: bool
    provenance: dict
    schema_version: int
    physics_hash: str = ""
    data_hash: str = ""
    #: ``(st_dev, st_ino)`` of the file when it was opened: :meth:`frame` finds it again under
    #: its final name when its writer renames ``RUN.h5.part`` into place in the meantime.
    identity: tuple = field(default=(), repr=False, compare=False)
    chain_runs: tuple = field(default=(), repr=False)
    prefix: str = ""
    #: Which chain of its file this Run holds (0 for the run itself; ``k`` for
    #: :meth:`chain` ``(k)``).
    chain_index: int = 0

    @property
    def n_chains(self) -> int:
        """Independent particle systems of the run (``dynamics.chains``; 1 for files written
        before chains existed)."""
        return 1 + len(self.chain_runs)

    def chain(self, k: int) -> Run:
        """Chain ``k`` of the run as a :class:`Run` of its own observables and frames (the
        data, config and schedule shared); ``chain(0)`` is this run. The Run of chain
        ``k >= 1`` is a run of that one chain: its :attr:`chain_index` is ``k``, its
        :attr:`n_chains` 1 (its ``chain(0)`` is itself).

        Raises
        ------
        TypeError
            ``k`` is not an integer.
        IndexError
            ``k`` not in ``[0, n_chains)``.
        """
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"chain index must be an integer, got {k!r}")
        if not 0 <= k < self.n_chains:
            raise IndexError(f"chain {k} out of range ({self.n_chains} chains)")
        return self if k == 0 else self.chain_runs[k - 1]

    def chains(self) -> list[Run]:
        """Every chain of the run, chain 0 (this run) first."""
        return [self, *self.chain_runs]

    @property
    def n(self):
        return int(self.X.shape[0])

    @property
    def d(self):
        return int(self.X.shape[1])

    @property
    def n_frames(self):
        return int(self.frame_step.shape[0])

    @property
    def n_particles(self) -> int:
        return int(self.config.model.n_particles)

    @property
    def lam(self) -> float:
        """Weight decay ``λ`` of the run."""
        return float(self.config.dynamics.lam)

    @property
    def taus(self) -> list[float]:
        """The temperatures of the ladder."""
        return [float(t) for t in self.config.dynamics.taus]

    @property
    def activation(self) -> str:
        """``model.activation`` of the run."""
        return str(self.config.model.activation)

    @property
    def eta(self) -> float:
        """The step ``η`` of the run."""
        return float(self.config.dynamics.eta)

    @property
    def integrator(self) -> str:
        """``dynamics.integrator`` of the run."""
        return str(self.config.dynamics.integrator)

    def stage_observations(self, stage: int) -> np.ndarray:
        """Boolean mask (M,) of the observations of ladder stage ``stage``."""
        return self.stage == int(stage)

    def stage_frames(self, stage: int) -> np.ndarray:
        """Indices (int, increasing) of the snapshot frames of ladder stage ``stage``."""
        return np.flatnonzero(self.frame_stage == int(stage))

    def last_frame(self, stage: int) -> int | None:
        """Index of the last snapshot frame of ladder stage ``stage`` (``None`` when the
        stage has none yet)."""
        k = self.stage_frames(stage)
        return int(k[-1]) if k.size else None

    def steps_run(self, stage: int) -> int:
        """Steps of ladder stage ``stage`` run by its last observation (0 when not reached)."""
        done = self.step_in_stage[self.stage_observations(stage)]
        return int(done.max()) if done.size else 0

    def _current_path(self, k) -> str:
        """Where the file opened as ``path`` is now: ``path`` itself, or, once its writer
        renamed ``RUN.h5.part`` to ``RUN.h5``, the final name (the same file)."""
        if os.path.exists(self.path) or not self.path.endswith(".part"):
            return self.path
        final = self.path[:-len(".part")]
        try:
            st = os.stat(final)
        except OSError:
            st = None
        if st is not None and (not self.identity or (st.st_dev, st.st_ino) == self.identity):
            return final
        raise RunFileError(self.path, f"frame {k}", "the run file was removed while being read "
                                                   "(and is not its finished run file)")

    def frame(self, k):
        """Particles of frame ``k``: ndarray of shape (N, d+2), rows (a, w, b).

        Raises
        ------
        IndexError
            ``k`` out of range.
        RunFileError
            The frame cannot be read (damaged file), has the wrong shape or holds a
            non-finite particle, or one whose squared norm overflows (the message names the
            frame and the particle).
        """
        if not -self.n_frames <= k < self.n_frames:
            raise IndexError(f"frame {k} out of range ({self.n_frames} frames)")
        k %= self.n_frames
        name = f"{self.prefix}particles/neurons/position/value"
        try:
            with _open_read(self._current_path(k)) as f:
                check_dataset(f, name, self.path)
                ds = _need(f, name, self.path)
                try:
                    theta = np.asarray(ds[k], dtype=np.float64)
                except OSError as exc:
                    raise RunFileError(self.path, f"frame {k}",
                                       f"{name}: {failed_read(ds, exc)}") from None
        except RunFileError:
            raise
        except READ_ERRORS as exc:
            raise RunFileError(self.path, f"frame {k}", f"damaged run file, cannot read "
                                                       f"({_h5_reason(exc)})") from None
        if theta.ndim != 2 or theta.shape != (self.n_particles, self.d + 2):
            raise RunFileError(self.path, f"frame {k}", f"shape {theta.shape}, expected "
                                                       f"{(self.n_particles, self.d + 2)}")
        bad = ~np.isfinite(theta)
        if bad.any():
            i, c = (int(v) for v in np.argwhere(bad)[0])
            cols = ["a"] + [f"w{j + 1}" for j in range(self.d)] + ["b"]
            count = int(bad.any(axis=1).sum())
            raise RunFileError(self.path, f"frame {k}: {name}",
                               f"particle {i} is not finite ({cols[c]} = {theta[i, c]}; "
                               f"{count} of {theta.shape[0]} particles); the file is damaged")
        with np.errstate(over="ignore"):
            sq = np.einsum("ij,ij->i", theta, theta)
        if not np.all(np.isfinite(sq)):
            i = int(np.nonzero(~np.isfinite(sq))[0][0])
            raise RunFileError(self.path, f"frame {k}: {name}",
                               f"particle {i} overflows (|theta|^2 = inf, largest entry "
                               f"{np.abs(theta[i]).max():.3g}); no run writes it (it stops as "
                               "diverged first): the file is damaged or was edited")
        return theta

    def to_xarray(self, frames: bool = True):
        """The run as an ``xarray.Dataset``: observables over ``time`` (coordinates ``step``,
        ``tau``, ``stage``), frames over ``frame``, ``particle``, ``coord``; the committed
        rows only. See :func:`meanfield.tidy.run_dataset`."""
        from meanfield.tidy import run_dataset
        return run_dataset(self, frames=frames)

    def __repr__(self) -> str:
        """One line: the path, the sizes and whether the run is complete (not the arrays);
        ``chains=K`` after the path for a run of several chains."""
        chains = (f", chains={self.n_chains}" if self.n_chains > 1 else
                  f", chain={self.chain_index}" if self.chain_index else "")
        return (f"Run({self.path!r}{chains}, n={self.n}, d={self.d}, "
                f"particles={self.n_particles}, stages={self.schedule.n_stages}, "
                f"frames={self.n_frames}, observations={len(self.stage)}, "
                f"complete={self.complete})")

    def __enter__(self) -> Run:
        """``with open_run(path) as run:``. A ``Run`` holds no open file (every read, as
        :meth:`frame`, opens the file and closes it again), so there is nothing to close:
        entering returns the run itself, leaving does nothing."""
        return self

    def __exit__(self, *exc) -> None:
        return None


def _identity(f, src: str) -> tuple:
    """``(st_dev, st_ino)`` of the open HDF5 file ``f`` (of its path if the driver has no
    descriptor); ``()`` when unknown."""
    try:
        st = os.fstat(f.id.get_vfd_handle()) if f.driver == "sec2" else os.stat(src)
    except (OSError, TypeError, ValueError, RuntimeError):
        return ()
    return (st.st_dev, st.st_ino)


def _need(group, name: str, src: str):
    """``group[name]``, or a :class:`RunFileError` naming the missing object."""
    if name not in group:
        where = f"{group.name.rstrip('/')}/{name}".lstrip("/")
        raise RunFileError(src, where, "missing (damaged or incomplete run file)")
    return group[name]


def _need_attr(obj, name: str, src: str):
    """Attribute ``name`` of ``obj``, or a :class:`RunFileError` naming it."""
    if name not in obj.attrs:
        where = f"{obj.name.strip('/')}.{name}" if obj.name.strip("/") else name
        raise RunFileError(src, where, "attribute missing (damaged or incomplete run file)")
    return obj.attrs[name]


def _place(f, obs: dict, frame_step, nf: int, no: int, config: RunConfig, src: str):
    """Stage and step within it of every observation and frame, and the schedule as run.

    Read from the file, or for one written before they were stored told from its rows
    (:meth:`solvers.schedule.Schedule.stages_of_rows`; frames lie at observations)."""
    sch = config.schedule
    neu = f["particles/neurons"]
    if all(name in f["observables"] for name in PLACE):
        got = {}
        for where, group, rows, counter in (("", f["observables"], no, "n_observations"),
                                           ("frame_", neu, nf, "n_frames")):
            for name in PLACE:
                ds = _need(_need(group, name, src), "value", src)
                if ds.shape[0] < rows:
                    raise RunFileError(src, counter, f"damaged run file: {counter}={rows} but "
                                                     f"{ds.name} holds {ds.shape[0]} rows")
                got[where + name] = np.asarray(read_rows(ds, rows, src), dtype=np.int64)
        return got, sch.as_run(got["stage"], obs["tau"]["step"])
    stage, in_stage = sch.stages_of_rows(obs["tau"]["step"], obs["tau"]["value"])
    sch = sch.as_run(stage, obs["tau"]["step"])
    fstage, fin_stage = sch.stages_of_steps(frame_step)
    return ({"stage": stage, "step_in_stage": in_stage, "frame_stage": fstage,
             "frame_step_in_stage": fin_stage}, sch)


def _chain_rows(root, nf: int, no: int, config: RunConfig, src: str) -> dict:
    """The committed rows of one chain (its group ``root``: the file for chain 0): frame
    steps, times and temperatures, observables, stages and the schedule as run."""
    pos = _need(root, "particles/neurons/position", src)
    temp = _need(root, "particles/neurons/temperature", src)
    observables = _need(root, "observables", src)
    names = [name for name in OBSERVABLES
             if name not in LATER_OBSERVABLES or name in observables]
    for g, rows, counter in ((pos, nf, "n_frames"), (temp, nf, "n_frames")) + tuple(
            (_need(observables, name, src), no, "n_observations") for name in names):
        for k in ("step", "time", "value"):
            if not 0 <= rows <= _need(g, k, src).shape[0]:
                raise RunFileError(src, counter,
                                   f"damaged run file: {counter}={rows} but "
                                   f"{g.name}/{k} holds {g[k].shape[0]} rows")
    obs = {}
    for name in names:
        g = observables[name]
        obs[name] = {k: read_rows(g[k], no, src) for k in ("step", "time", "value")}
    frame_step = read_rows(pos["step"], nf, src)
    frame_tau = read_rows(temp["value"], nf, src)
    _check_rows(root, obs, frame_step, frame_tau, src)
    place, schedule = _place(root, obs, frame_step, nf, no, config, src)
    _check_stages(root, place, frame_tau, config, src)
    return dict(frame_step=frame_step, frame_time=read_rows(pos["time"], nf, src),
                frame_tau=frame_tau, observables=obs, **place, schedule=schedule)


#: Observables every run records finite (it stops as diverged before a non-finite state is
#: observed); others are NaN where undefined (``stationarity`` early in a stage, the Euler
#: stability number of the exact sampler).
ALWAYS_FINITE = ("tau", "risk", "regulariser", "mean_sq_norm", "residuals")


#: Observables that are sums of squares.
NON_NEGATIVE = ("risk", "regulariser", "mean_sq_norm")


def _bad_row(src: str, root, where: str, k, why: str) -> RunFileError:
    """The refusal of row ``k`` of dataset ``where`` of chain group ``root``: ``why``, and
    that no run writes it."""
    prefix = root.name.strip("/") + "/" if root.name != "/" else ""
    return RunFileError(src, prefix + where, f"row {int(k)}: {why}; no run writes this (the "
                                             "file is damaged or was edited)")


def _check_stages(root, place: dict, frame_tau, config: RunConfig, src: str) -> None:
    """Refuse a stage outside the ladder, stages that go back (a run visits its ladder in
    order, so the stage of its rows, frames and observations, never decreases) and a frame
    whose temperature is not its stage's ``taus[stage]`` (the analysis reads both), naming the
    dataset, the row and the values (:class:`RunFileError`)."""
    taus = np.asarray(config.taus, dtype=float)
    for where, key in (("observables/stage/value", "stage"),
                       ("particles/neurons/stage/value", "frame_stage")):
        st = np.asarray(place[key], dtype=np.int64)
        out = np.nonzero((st < 0) | (st >= len(taus)))[0]
        if out.size:
            raise _bad_row(src, root, where, out[0], f"stage {st[out[0]]} outside the "
                                                     f"ladder's {len(taus)} temperatures")
        back = np.nonzero(np.diff(st) < 0)[0]
        if back.size:
            k = int(back[0]) + 1
            raise _bad_row(src, root, where, k, f"stage {st[k]} after stage {st[k - 1]} (a run "
                                                "visits its ladder in order)")
    fs = np.asarray(place["frame_stage"], dtype=np.int64)
    ft = np.asarray(frame_tau, dtype=float)
    ok = (fs >= 0) & (fs < len(taus))
    off = np.nonzero(ok & (ft != taus[np.where(ok, fs, 0)]))[0]
    if off.size:
        k = int(off[0])
        raise _bad_row(src, root, "particles/neurons/temperature/value", k,
                       f"tau = {float(ft[k])!r}, but the frame is of stage {fs[k]} at tau = "
                       f"{float(taus[fs[k]])!r} (dynamics.taus)")


def _check_rows(root, obs: dict, frame_step, frame_tau, src: str) -> None:
    """Refuse rows no run writes (an edited or damaged file, read as untrusted input): steps
    that do not increase, a frame's temperature that is negative or not finite, a non-finite
    value of :data:`ALWAYS_FINITE`, a negative one of :data:`NON_NEGATIVE` (the stages are
    :func:`_check_stages`').

    Raises
    ------
    RunFileError
        Naming the dataset, the row and the value.
    """
    def refuse(where, k, why):
        raise _bad_row(src, root, where, k, why)

    for where, steps in [("particles/neurons/position/step", frame_step)] + [
            (f"observables/{name}/step", o["step"]) for name, o in obs.items()]:
        steps = np.asarray(steps)
        back = np.nonzero(np.diff(steps) <= 0)[0]
        if back.size:
            k = back[0] + 1
            refuse(where, k, f"step {steps[k]} after {steps[k - 1]} (steps must increase)")
    ft = np.asarray(frame_tau, dtype=float)
    off = ~(np.isfinite(ft) & (ft >= 0))
    if off.any():
        k = np.nonzero(off)[0][0]
        refuse("particles/neurons/temperature/value", k,
               f"tau = {float(ft[k])!r} is not a temperature (finite, >= 0)")
    for name, o in obs.items():
        if name not in ALWAYS_FINITE:
            continue
        v = np.asarray(o["value"], dtype=float)
        bad = ~np.isfinite(v)
        if bad.any():
            k = np.argwhere(bad)[0]
            refuse(f"observables/{name}/value", k[0], f"{float(v[tuple(k)])!r} is not finite")
        if name in NON_NEGATIVE and np.any(v < 0):
            k = int(np.nonzero(v < 0)[0][0])
            refuse(f"observables/{name}/value", k, f"{float(v[k])!r} is negative (a sum of "
                                                   "squares)")


def check_untrusted(f, src: str):
    """The checks of a run file from someone else (:mod:`meanfield.store.trust`) on the open
    file ``f``, in the order :func:`open_run` makes them: links, storage and sizes, the
    variable-length attributes (in a child process with a deadline), the schema, the shapes.
    Returns the :class:`~meanfield.store.trust.Walk`.

    Raises
    ------
    RunFileError
        What :func:`open_run` refuses before reading data.
    """
    found = walk(f, src)
    vet_attributes(src, found)
    check_schema(f, src)
    check_shapes(f, found, src, PLACE + OBSERVABLES, PER_POINT)
    return found


def _check_parameters(p, config: RunConfig, src: str) -> None:
    """Refuse a file whose ``/parameters`` attributes ``n_particles``, ``chains``, ``lam``,
    ``eta`` or ``taus`` disagree with its stored config (the shapes of its datasets were
    checked against the attributes; the analysis reads the config)."""
    for attr, want in (("n_particles", config.model.n_particles),
                       ("chains", config.dynamics.chains)):
        if attr not in p.attrs:
            continue
        got = np.asarray(p.attrs[attr])
        if got.shape not in ((), (1,)) or got.dtype.kind not in "iu" \
                or int(got.reshape(-1)[0]) != int(want):
            raise RunFileError(src, f"parameters.{attr}",
                               f"{got.tolist()!r} disagrees with the stored config "
                               f"({want}); the file is damaged or was edited")
    floats: tuple[tuple[str, list[float]], ...] = (
        ("lam", [config.dynamics.lam]), ("eta", [config.dynamics.eta]),
        ("taus", list(config.taus)))
    for attr, values in floats:
        if attr not in p.attrs:
            continue
        got = np.asarray(p.attrs[attr])
        if got.dtype.kind not in "fiu" or got.size != len(values) \
                or not np.array_equal(got.reshape(-1).astype(float), np.asarray(values, float)):
            shown = values if attr == "taus" else values[0]
            raise RunFileError(src, f"parameters.{attr}",
                               f"{got.tolist()!r} disagrees with the stored config ({shown}); "
                               "the file is damaged or was edited")


def _check_data_hash(X, y, stored: str, src: str) -> None:
    """Refuse ``/data/X``, ``/data/y`` whose values do not give the stored ``data_hash``
    (absent in files written before it was stored: nothing to check)."""
    if not stored:
        return
    from meanfield.data import data_hash
    got = data_hash(X, y)
    if got != stored:
        raise RunFileError(src, "data/X, data/y",
                           f"the values do not match the stored data_hash ({got} != "
                           f"{stored}): the data was changed after the run wrote it; the file "
                           "is damaged or was edited")


def check_foreign(f, src: str):
    """The checks of any HDF5 file from someone else that do not depend on its layout
    (:mod:`meanfield.store.trust`): links, storage and sizes, then the variable-length
    attributes in a child process with a deadline. Returns the
    :class:`~meanfield.store.trust.Walk`; a reader of another format (the results of
    ``meanfield highdim``) adds its own schema and shape checks after it."""
    found = walk(f, src)
    vet_attributes(src, found)
    return found


@contextlib.contextmanager
def opened_untrusted(path, check=None, what: str = "run file"):
    """The run file at ``path`` opened read-only, after the checks of a file from someone else
    (:func:`check_untrusted`: its links, storage, sizes and attributes, before anything is
    read from it; docs/format.md, "Reading a file from someone else"); every HDF5 failure in
    the block is one :class:`RunFileError` line. :func:`open_run` reads through it, and the
    writer checks a file with it before opening it for appending.

    Parameters
    ----------
    path : path-like
    check : callable ``(f, src)``, optional
        The checks to make before the block (default :func:`check_untrusted`; a file of
        another format passes its own, built on :func:`check_foreign`).
    what : str
        What the file is, for the messages (``"run file"``).

    Yields
    ------
    h5py.File

    Raises
    ------
    RunFileError
        Not a readable HDF5 file, a check of ``check``, or a damaged or incomplete file.
    """
    src = str(path)
    check = check_untrusted if check is None else check
    try:
        f = _open_read(path)
    except OSError as exc:
        raise RunFileError(src, "", f"not a readable HDF5 file ({_h5_reason(exc)})") from None
    try:
        with f:
            check(f, src)
            yield f
    except RunFileError:
        raise
    except READ_ERRORS as exc:
        raise RunFileError(src, "", f"damaged or incomplete {what} ({_h5_reason(exc)})") \
            from None


def open_run(path: str | os.PathLike) -> Run:
    """Read a run file's metadata, data, frame index and observables.

    Works on a partial file (``RUN.h5.part`` of a killed or running writer) as well: only the
    rows committed when the file is opened are read (a running writer is read in HDF5's SWMR
    mode, without touching file locking). Call again to see newer rows.

    Parameters
    ----------
    path : path-like
        The run file (``.h5``, or a ``.h5.part`` of a running or killed writer).

    Returns
    -------
    Run
        ``X`` (n, d), ``y`` (n,), ``frame_step``/``frame_time``/``frame_tau`` (F,), the config,
        observables, the ladder stage of every row (``stage``, ``step_in_stage``,
        ``frame_stage``, ``frame_step_in_stage``) and the ``schedule`` as run; particles load
        per frame with :meth:`Run.frame` (shape (N, d+2)).

    Raises
    ------
    RunFileError
        Missing, unreadable, truncated or foreign file, inconsistent commit counters, or a newer
        schema version; an external, soft or user-defined link, external or virtual storage, a
        dataset whose shape disagrees with the file's parameters or declares more bytes than
        the file holds, a checksum (Fletcher-32) or ``data_hash`` that does not match, an
        attribute HDF5 does not finish reading (:mod:`meanfield.store.trust`).
    """
    src = str(path)
    p = Path(path)
    if not p.exists():
        raise RunFileError(src, "", "no such file")
    if p.is_dir():
        raise RunFileError(src, "", "is a directory, expected a run file (.h5)")
    with opened_untrusted(path) as f:
        p = f["parameters"]
        cfg_json = text(_need_attr(p, "config_json", src))
        nf = int(f.attrs.get("n_frames", 0))
        no = int(f.attrs.get("n_observations", 0))
        try:
            config, invalid = stored_config(cfg_json, src)
        except ConfigError as exc:
            # its source is this file, named once
            raise RunFileError(src, "parameters.config_json", ": ".join(
                t for t in (exc.field, exc.reason) if t)) from None
        stored_hash_of_config = text(p.attrs.get("config_hash", ""))
        if stored_hash_of_config and json_hash(cfg_json) != stored_hash_of_config:
            raise RunFileError(src, "parameters.config_json",
                               f"does not match the stored config_hash "
                               f"({stored_hash_of_config}): the config was changed after the "
                               "run wrote it; the file is damaged or was edited")
        if invalid is not None:
            warnings.warn(StoredConfigWarning(
                f"{src}: the stored config no longer validates ({invalid}); read as "
                f"stored, unchecked, with defaults for missing keys"), stacklevel=2)
        _check_parameters(p, config, src)
        rows = [_chain_rows(f if k == 0 else _need(f, chain_root(k), src), nf, no,
                            config, src) for k in range(stored_chains(p))]
        X = read_rows(_need(f, "data/X", src), None, src)
        y = read_rows(_need(f, "data/y", src), None, src)
        stored_hash = text(p.attrs.get("data_hash", ""))
        _check_data_hash(X, y, stored_hash, src)
        shared = dict(path=src, config=config, config_json=cfg_json, X=X, y=y,
                      complete=bool(f.attrs.get("complete", False)),
                      provenance=json.loads(text(p.attrs.get("provenance", "{}"))),
                      schema_version=int(p.attrs["schema_version"]),
                      physics_hash=text(p.attrs.get("physics_hash", "")),
                      data_hash=stored_hash,
                      identity=_identity(f, src))
        others = tuple(Run(**shared, **r, prefix=f"{chain_root(k)}/", chain_index=k)
                       for k, r in enumerate(rows[1:], start=1))
        return Run(**shared, **rows[0], chain_runs=others)


if TYPE_CHECKING:       # the type check of .ci/run: a Run is what the analysis reads
    from analysis.protocols import RunLike

    def _run_is_run_like(run: Run) -> RunLike:
        return run
