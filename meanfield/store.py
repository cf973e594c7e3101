"""HDF5 run files (H5MD 1.1 layout); the only module that touches run files.

Layout (documented in ``docs/format.md``)::

    /h5md                         attrs version=[1, 1]; groups author (name), creator (name, version)
    /parameters                   attrs schema_version, config_json, config_hash, physics_hash,
                                  data_hash, lam, eta, taus, n_particles, d, n, seed, activation, provenance
    /data/X (n, d), /data/y (n,)  the training set
    /particles/neurons/box        attrs dimension = d+2, boundary = ['none'] * (d+2)
    /particles/neurons/position/{step (F,), time (F,), value (F, N, d+2)}   rows (a, w_1..w_d, b)
    /particles/neurons/temperature/{step, time, value (F,)}                 tau of each frame
    /particles/neurons/{stage, step_in_stage}/{step, time, value (F,) int} where each frame is
    /observables/<name>/{step (M,), time (M,), value (M, ...)}
        stage, step_in_stage (int: where the row is on the ladder), tau, risk, regulariser,
        mean_sq_norm, residuals (M, n), stationarity, residuals_previous (M, n),
        eta_lambda_max, acceptance, jump_acceptance, cell_exchange
    root attrs  n_frames, n_observations (commit counters, written last), complete (bool)

Readers trust only the first ``n_frames`` / ``n_observations`` rows, so a killed writer leaves a
readable file holding every committed row. The writer allocates every row of the run (and the
disk space for it) when it creates the file, so appends never change the file's structure.
Observations are buffered in memory and written as blocks (:data:`FLUSH_ROWS`,
:data:`FLUSH_SECONDS`, and with every frame, checkpoint and the end of the run), each block
committed by one counter update.

The writer works in HDF5's single-writer/multiple-reader (SWMR) mode, so a run in progress can
be read without disabling file locking: :func:`open_run` (and ``h5py.File(path, "r",
libver="latest", swmr=True)``) sees the committed rows at the moment it opens the file. In SWMR
mode HDF5 drops its own lock, so the writer holds a POSIX record lock on the file instead
(:func:`writer_alive`), which tells a live writer from a killed one.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import platform
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numba
import numpy as np
import scipy

from meanfield._version import __version__
from meanfield.errors import RunFileError
from solvers.observation import Observation
from solvers.schedule import Schedule

SCHEMA_VERSION = 1
CREATOR = "meanfield"
#: The observables of a run file: the columns of :class:`solvers.observation.Observation`.
OBSERVABLES = Observation.columns()
#: Observables added after the first files of schema 1 were written; absent from those files.
LATER_OBSERVABLES = ("residuals_previous", "eta_lambda_max", "acceptance", "jump_acceptance",
                     "cell_exchange")
#: Where each row is on the temperature ladder (stage index, 1-based step within it): stored
#: beside the observables and the frames, as int64 elements of those names, and read into
#: :attr:`Run.stage`, :attr:`Run.step_in_stage`, :attr:`Run.frame_stage`,
#: :attr:`Run.frame_step_in_stage`. Files written before they were stored lack them; the
#: stages of those are told once by :meth:`solvers.schedule.Schedule.stages_of_rows`.
PLACE = ("stage", "step_in_stage")
#: The time-dependent elements of ``/particles/neurons``, one row per frame.
FRAME_ELEMENTS = ("position", "temperature") + PLACE
#: Observables with one value per training point.
PER_POINT = ("residuals", "residuals_previous")
#: Buffered observations are written and committed as one block once this many are waiting
#: (a row costs about 20 ms written alone: one write per dataset of every observable, and two
#: flushes); a writer killed with SIGKILL loses at most this many rows...
FLUSH_ROWS = 256
#: ... or the rows of the last this many seconds: an observation arriving this long after the
#: last commit is committed at once (with every row waiting before it).
FLUSH_SECONDS = 2.0


def provenance() -> dict:
    """Versions of the package and its numerical dependencies, and the git commit if any."""
    info = {"meanfield": __version__, "numpy": np.__version__, "numba": numba.__version__,
            "scipy": scipy.__version__, "h5py": h5py.__version__,
            "python": platform.python_version()}
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        if out.returncode == 0:
            info["git_commit"] = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def _value_chunk_rows(value_shape, chunk_rows):
    """Rows per chunk of a ``value`` dataset: ``chunk_rows``, capped at about 1 MiB a chunk."""
    if not value_shape:
        return chunk_rows
    return max(1, min(chunk_rows, 2**20 // (8 * int(np.prod(value_shape)))))


def _elements(N, d, n):
    """The time-dependent elements of a run file: ``(path, value_shape, counter, chunk_rows,
    dtype)``."""
    return ([("particles/neurons/position", (N, d + 2), "n_frames", 1, np.float64),
             ("particles/neurons/temperature", (), "n_frames", 64, np.float64)]
            + [(f"particles/neurons/{name}", (), "n_frames", 64, np.int64) for name in PLACE]
            + [(f"observables/{name}", (), "n_observations", 64, np.int64) for name in PLACE]
            + [(f"observables/{name}", (n,) if name in PER_POINT else (), "n_observations", 64,
                np.float64) for name in OBSERVABLES])


def estimate_size(n_particles, d, n, capacity) -> int:
    """Upper bound, in bytes, of a new run file holding ``capacity = (n_frames,
    n_observations)`` rows (raw data of every allocated chunk, plus 2 KiB of metadata per
    dataset and 64 KiB for the rest)."""
    rows = {"n_frames": int(capacity[0]), "n_observations": int(capacity[1])}
    total = 8 * n * (d + 1) + 65536
    for _, shape, counter, crows, _ in _elements(n_particles, d, n):
        r = rows[counter]
        for shp, cr in (((), crows), ((), crows), (shape, _value_chunk_rows(shape, crows))):
            total += -(-r // cr) * cr * 8 * int(np.prod(shp, dtype=np.int64)) + 2048
    return int(total)


def _reserve(path, nbytes) -> None:
    """Fail early and cleanly (``OSError``: ENOSPC, EFBIG) if ``nbytes`` cannot be written at
    ``path``; HDF5 itself does not recover from a failed write. Leaves an empty file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        _fallocate(fd, nbytes)
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _fallocate(fd, nbytes) -> None:
    """Allocate disk blocks for the first ``nbytes`` of ``fd`` (no-op where unsupported)."""
    if nbytes <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


def _time_element(group, name, value_shape, rows=0, dtype=np.float64, chunk_rows=64):
    """Create an H5MD time-dependent element ``{step, time, value}`` with ``rows`` rows
    allocated up front (early allocation, no fill): appends then only write raw data into space
    that already exists, so a crash never leaves half-updated chunk indices or dataset shapes."""
    g = group.create_group(name)
    value_shape = tuple(value_shape)
    for key, shape, dt, crows in (("step", (), np.int64, chunk_rows),
                                  ("time", (), np.float64, chunk_rows),
                                  ("value", value_shape, dtype,
                                   _value_chunk_rows(value_shape, chunk_rows))):
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        g.create_dataset(key, shape=(rows,) + shape, maxshape=(None,) + shape, dtype=dt,
                         chunks=(crows,) + shape, dcpl=dcpl)
    return g


def _write_rows(g, start, steps, times, values):
    """Write rows ``start:start+k`` of an element, growing it only if the preallocated rows
    are exhausted."""
    k = len(steps)
    for name, arr in (("step", steps), ("time", times), ("value", values)):
        ds = g[name]
        if ds.shape[0] < start + k:
            ds.resize(start + k, axis=0)
        ds[start:start + k] = arr


def _shrink(g, rows):
    for name in ("step", "time", "value"):
        if g[name].shape[0] != rows:
            g[name].resize(rows, axis=0)


def _is_open_for_write(exc) -> bool:
    """Whether an HDF5 open failed because the file is marked as open by a (SWMR) writer."""
    return "already open for write" in str(exc)


def _open_read(path):
    """Open a run file for reading, live or not.

    A file written in SWMR mode (running, or its writer killed) refuses a plain open; it is
    then opened as a SWMR reader, which sees every row committed when it opens.

    Raises
    ------
    OSError
        From h5py: not HDF5, unreadable, or locked by a writer outside SWMR mode.
    """
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        if not _is_open_for_write(exc):
            raise
    return h5py.File(path, "r", libver="latest", swmr=True)


def _record_lock(fd, kind) -> None:
    """Take a non-blocking record lock (``fcntl.F_RDLCK`` or ``F_WRLCK``) on all of ``fd``.

    Open-file-description locks where the system has them (Linux): unlike classic POSIX
    record locks, closing another descriptor of the same file in the process keeps them.

    Raises
    ------
    OSError
        EAGAIN/EACCES when a conflicting lock is held.
    """
    if hasattr(fcntl, "F_OFD_SETLK"):
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, 0, 0, 0, 0))
    else:  # pragma: no cover
        fcntl.lockf(fd, (fcntl.LOCK_EX if kind == fcntl.F_WRLCK else fcntl.LOCK_SH)
                    | fcntl.LOCK_NB)


def _take_writer_lock(path):
    """A record write lock on ``path`` for as long as the returned descriptor is open.

    HDF5 releases its own (``flock``) lock when SWMR writing starts, and SWMR readers take a
    shared ``flock``; a record lock is independent of both. Returns ``None`` where record
    locks are not supported.

    Raises
    ------
    RunFileError
        Another process holds the lock.
    """
    fd = os.open(path, os.O_RDWR)
    try:
        _record_lock(fd, fcntl.F_WRLCK)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            raise RunFileError(str(path), "", "locked: another process is writing this run "
                                              "(never run two 'meanfield run' with one output)") \
                from None
        return None
    return fd


def writer_alive(path) -> bool:
    """Whether a process is writing the run file ``path`` now (holds its writer lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        _record_lock(fd, fcntl.F_RDLCK)
    except OSError as exc:
        return exc.errno in (errno.EACCES, errno.EAGAIN)
    finally:
        os.close(fd)       # closing drops the probe's own shared lock
    return False


def _rebuild(path) -> None:
    """Rewrite a run file whose SWMR writer was killed, so it can be opened for appending.

    HDF5 marks a file open by a SWMR writer and refuses to open it for writing until the mark
    is cleared (``h5clear -s``); h5py offers no way to clear it. The file's objects are copied
    (as a SWMR reader, committed or not) into a fresh file that then replaces it atomically.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(path, "r", libver="latest", swmr=True) as src, \
            h5py.File(tmp, "w", libver="latest") as dst:
        for name in src:
            src.copy(src[name], dst, name=name)
        for key, value in src.attrs.items():
            dst.attrs[key] = value
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class RunWriter:
    """Writes one run file in SWMR mode; every commit writes rows, flushes, and bumps the commit
    counters last.

    The datasets are allocated for ``capacity`` rows when the file is created; row ``k`` of a
    time-dependent element is valid only if ``k < n_frames`` (particles) or
    ``k < n_observations`` (observables), the root attributes written after the rows.
    :meth:`mark_complete` trims the datasets to the committed rows, so a complete file is a
    plain H5MD file.

    Observations are buffered (:meth:`append_observations`) and committed as one block by
    :meth:`commit`: when ``flush_rows`` rows wait, at the first append ``flush_seconds`` or more
    after the last commit, before every frame (so a reader never sees a frame without the
    observations before it), and by :meth:`truncate`, :meth:`mark_complete` and :meth:`close`.
    The owner of a checkpoint calls :meth:`commit` before saving it, so the rows it counts are
    in the file. ``n_observations`` counts committed rows; ``pending`` the buffered ones.

    Parameters
    ----------
    path : path-like
        The run file. Created (``mode="w"``) or reopened for appending (``mode="a"``).
    cfg : meanfield.config.RunConfig
        Needed when creating.
    dataset : meanfield.data.Dataset
        Needed when creating.
    capacity : tuple (n_frames, n_observations), optional
        Rows to allocate when creating (see :meth:`solvers.schedule.Schedule.row_counts`); appends
        beyond it grow the datasets.
    flush_rows : int
        Observations buffered before a block is committed (default :data:`FLUSH_ROWS`; 1 writes
        every row at once).
    flush_seconds : float
        An append this long after the last commit commits (default :data:`FLUSH_SECONDS`).

    Raises
    ------
    RunFileError
        ``mode="a"`` on a file that is not a run file of a supported schema.
    OSError
        The file cannot be created or written (permissions, full disk, file-size limit).
    """

    def __init__(self, path, cfg=None, dataset=None, mode="w", capacity=(0, 0), *,
                 flush_rows=FLUSH_ROWS, flush_seconds=FLUSH_SECONDS):
        self.path = Path(path)
        self.f = None
        self._lock = None
        self._pending = []          # observations not yet written
        self._broken = False        # a write failed: HDF5 may be inconsistent, write no more
        self.flush_rows = max(1, int(flush_rows))
        self.flush_seconds = float(flush_seconds)
        self._last_commit = time.monotonic()
        if mode == "w":
            # Reserve the space first: a full disk or a file-size limit then fails here with a
            # plain OSError, before HDF5 writes anything (HDF5 does not survive failed writes).
            need = estimate_size(cfg.n_particles, dataset.d, dataset.n, capacity)
            try:
                _reserve(self.path, need)
            except OSError as exc:
                raise OSError(exc.errno, f"{exc.strerror}; the run file needs about "
                                         f"{need / 1e6:.3g} MB", str(self.path)) from None
            self.f = h5py.File(self.path, "w", libver="latest")
            self._create(cfg, dataset, capacity)
            # The preallocated rows are holes in a sparse file: give them blocks now, so that
            # appends never meet a full disk.
            fd = os.open(self.path, os.O_WRONLY)
            try:
                _fallocate(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
        elif mode == "a":
            if writer_alive(self.path):
                raise RunFileError(str(self.path), "", "locked: another process is writing "
                                                       "this run")
            try:
                try:
                    self.f = h5py.File(self.path, "a", libver="latest")
                except OSError as exc:
                    if not _is_open_for_write(exc):
                        raise
                    _rebuild(self.path)        # its SWMR writer was killed
                    self.f = h5py.File(self.path, "a", libver="latest")
            except OSError as exc:
                raise RunFileError(str(self.path), "",
                                   f"not a readable HDF5 file ({_h5_reason(exc)})") from None
            try:
                check_schema(self.f, str(self.path))
            except BaseException:
                self.close()
                raise
        else:  # pragma: no cover
            raise ValueError(mode)
        try:
            # From here on no object is created: appends write rows and modify attributes.
            self.f.swmr_mode = True
        except (ValueError, OSError, RuntimeError):
            pass                    # a file of an older HDF5 format: no live readers
        try:
            self._lock = _take_writer_lock(self.path)
        except BaseException:
            self.close()
            raise
        self.n_frames = int(self.f.attrs.get("n_frames", 0))
        self.n_observations = int(self.f.attrs.get("n_observations", 0))
        # a file written before the stages were stored keeps its layout when resumed (SWMR
        # creates nothing); its readers tell the stages from the rows
        self._place = all(name in self.f["observables"] for name in PLACE)

    def _create(self, cfg, dataset, capacity):
        f = self.f
        d, n, N = dataset.d, dataset.n, cfg.n_particles
        cap_frames, cap_obs = (int(c) for c in capacity)
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1], dtype=np.int32)
        h.create_group("author").attrs["name"] = os.environ.get("USER", "unknown")
        cr = h.create_group("creator")
        prov = provenance()
        cr.attrs["name"] = CREATOR
        cr.attrs["version"] = prov["meanfield"] + (f"+{prov['git_commit'][:12]}"
                                                   if "git_commit" in prov else "")
        p = f.create_group("parameters")
        p.attrs["schema_version"] = SCHEMA_VERSION
        p.attrs["config_json"] = cfg.canonical_json()
        p.attrs["config_hash"] = cfg.hash()
        p.attrs["physics_hash"] = cfg.physics_hash()
        p.attrs["data_hash"] = dataset.hash()
        p.attrs["lam"] = cfg.dynamics.lam
        p.attrs["eta"] = cfg.dynamics.eta
        p.attrs["taus"] = np.asarray(cfg.taus, dtype=np.float64)
        p.attrs["steps_per_tau"] = cfg.dynamics.steps_per_tau
        p.attrs["n_particles"] = N
        p.attrs["d"] = d
        p.attrs["n"] = n
        p.attrs["seed"] = cfg.dynamics.seed
        p.attrs["activation"] = cfg.model.activation
        p.attrs["provenance"] = json.dumps(prov, sort_keys=True)
        g = f.create_group("data")
        g.create_dataset("X", data=dataset.X)
        g.create_dataset("y", data=dataset.y)
        g.attrs["name"] = dataset.name
        neu = f.create_group("particles").create_group("neurons")
        box = neu.create_group("box")
        box.attrs["dimension"] = d + 2
        box.attrs["boundary"] = np.array(["none"] * (d + 2), dtype="S4")
        f.create_group("observables")
        rows = {"n_frames": cap_frames, "n_observations": cap_obs}
        for path, shape, counter, crows, dtype in _elements(N, d, n):
            parent, name = path.rsplit("/", 1)
            _time_element(f[parent], name, shape, rows=rows[counter], dtype=dtype,
                          chunk_rows=crows)
        f["particles/neurons/position/value"].attrs["columns"] = (
            "a," + ",".join(f"w{k + 1}" for k in range(d)) + ",b")
        f.attrs["n_frames"] = 0
        f.attrs["n_observations"] = 0
        f.attrs["complete"] = False
        f.flush()

    def append_frame(self, theta, step, time, tau, stage, step_in_stage):
        """Append one snapshot frame ``theta`` (N, d+2) at ``step``/``time``, temperature
        ``tau``, ladder stage ``stage`` and step ``step_in_stage`` of it (1-based); the
        buffered observations are committed first, the frame right after them."""
        self.commit()
        with self._writing():
            neu = self.f["particles/neurons"]
            k = self.n_frames
            _write_rows(neu["position"], k, [step], [time], np.asarray(theta)[None])
            _write_rows(neu["temperature"], k, [step], [time], [tau])
            if self._place:
                _write_rows(neu["stage"], k, [step], [time], [int(stage)])
                _write_rows(neu["step_in_stage"], k, [step], [time], [int(step_in_stage)])
            self.f.flush()
            self.n_frames = k + 1
            self.f.attrs.modify("n_frames", self.n_frames)
            self.f.flush()

    def append_observations(self, rows):
        """Append observations: a sequence of :class:`solvers.observation.Observation`.

        They are buffered and committed by :meth:`commit` when ``flush_rows`` rows wait or
        ``flush_seconds`` have passed since the last commit."""
        self._pending.extend(rows)
        if self._pending and (len(self._pending) >= self.flush_rows
                              or time.monotonic() - self._last_commit >= self.flush_seconds):
            self.commit()

    @property
    def pending(self) -> int:
        """Observations buffered, not yet in the file."""
        return len(self._pending)

    def commit(self):
        """Write the buffered observations as one block, flush, then bump ``n_observations``
        (readers see all of the block or none of it)."""
        self._last_commit = time.monotonic()
        if not self._pending:
            return
        rows = self._pending
        with self._writing():
            obs = self.f["observables"]
            steps = np.fromiter((r.step for r in rows), dtype=np.int64, count=len(rows))
            times = np.fromiter((r.time for r in rows), dtype=np.float64, count=len(rows))
            k = self.n_observations
            for name in (PLACE if self._place else ()) + OBSERVABLES:
                _write_rows(obs[name], k, steps, times,
                            np.asarray([getattr(r, name) for r in rows]))
            self.f.flush()
            self.n_observations = k + len(rows)
            self.f.attrs.modify("n_observations", self.n_observations)
            self.f.flush()
        self._pending = []

    def _writing(self):
        """Context of a write: a failure marks the writer broken (nothing more is written)."""
        return _WriteGuard(self)

    def truncate(self, n_frames, n_observations):
        """Forget rows beyond the given counts (used when resuming from a checkpoint).

        Only the commit counters move back; the rows behind them are overwritten by the next
        appends.

        Raises
        ------
        RunFileError
            The file holds fewer committed rows than requested.
        """
        self.commit()
        if n_frames > self.n_frames or n_observations > self.n_observations:
            raise RunFileError(str(self.path), "n_frames",
                               f"holds {self.n_frames} frames and {self.n_observations} "
                               f"observations, fewer than the checkpoint's {n_frames} and "
                               f"{n_observations}; the run file does not belong to it")
        self.n_frames, self.n_observations = int(n_frames), int(n_observations)
        self.f.attrs.modify("n_frames", self.n_frames)
        self.f.attrs.modify("n_observations", self.n_observations)
        self.f.attrs.modify("complete", False)
        self.f.flush()

    def mark_complete(self):
        """Commit the buffered rows, trim the datasets to the committed rows and set
        ``complete``."""
        self.commit()
        neu = self.f["particles/neurons"]
        for name in FRAME_ELEMENTS:
            if name in neu:
                _shrink(neu[name], self.n_frames)
        for name in (PLACE if self._place else ()) + OBSERVABLES:
            _shrink(self.f["observables"][name], self.n_observations)
        self.f.flush()
        self.f.attrs.modify("complete", True)
        self.f.flush()

    @property
    def physics_hash(self) -> str:
        """The ``physics_hash`` of the config that created the file."""
        return str(self.f["parameters"].attrs.get("physics_hash", ""))

    def close(self, commit=True):
        """Commit the buffered rows (unless ``commit`` is false or a write failed), close the
        file and drop the writer lock.

        Raises
        ------
        OSError, RuntimeError
            From h5py, the commit failed (the file is closed all the same).
        """
        try:
            if commit and getattr(self, "f", None) is not None and not self._broken:
                self.commit()
        finally:
            if getattr(self, "f", None) is not None:
                self.f.close()
                self.f = None
            if getattr(self, "_lock", None) is not None:
                os.close(self._lock)          # drops the writer lock
                self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if typ is None:
            self.close()
            return
        # leaving on an error or a signal: keep the rows computed so far (a failing commit must
        # not hide the error in flight)
        try:
            self.close()
        except Exception:           # noqa: BLE001
            self.close(commit=False)


class _WriteGuard:
    """Marks a :class:`RunWriter` broken when a write inside it raises."""

    def __init__(self, writer):
        self.writer = writer

    def __enter__(self):
        if self.writer._broken:
            raise RuntimeError(f"{self.writer.path}: an earlier write failed; nothing more is "
                               "written (write failed)")
        return self

    def __exit__(self, typ, exc, tb):
        if typ is not None:
            self.writer._broken = True
        return False


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
    if isinstance(exc, RuntimeError) and len(msg) < 200:
        return msg.strip()           # e.g. "Unable to ... (bad local heap signature)"
    msg = msg.split("(")[0].strip().strip("'\"")
    return (msg[msg.index("]") + 1:] if msg.startswith("[Errno") else msg).strip() \
        or type(exc).__name__


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
    config : dict              the canonical config
    X : ndarray (n, d); y : ndarray (n,)
    frame_step : ndarray (F,) int; frame_time : ndarray (F,); frame_tau : ndarray (F,)
    observables : dict of name -> dict(step, time, value)
    stage : ndarray (M,) int   ladder stage of each observation (0 = the first), by index, so
                               a temperature visited twice is two stages
    step_in_stage : ndarray (M,) int   its step within that stage (1-based)
    frame_stage, frame_step_in_stage : ndarray (F,) int   the same for each frame
    schedule : Schedule        the ladder the run was written with, ``"auto"`` stage lengths
                               as run (:meth:`solvers.schedule.Schedule.as_run`)
    complete : bool            the run reached the end of its ladder

    The stage arrays are read from the file, or for a file written before they were stored
    told once from its rows (:meth:`solvers.schedule.Schedule.stages_of_rows`); every reader
    asks them (:meth:`stage_observations`, :meth:`stage_frames`, :meth:`last_frame`,
    :meth:`steps_run`) or :attr:`schedule` (stage bounds, :meth:`Schedule.last_part`), never
    the temperatures.
    physics_hash : str         ``RunConfig.physics_hash()`` of the config that wrote it
    data_hash : str            ``meanfield.data.data_hash(X, y)``; ``""`` in files written
                               before it was stored
    """

    path: str
    config: dict
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
    def n_particles(self):
        return int(self.config["model"]["n_particles"])

    @property
    def lam(self) -> float:
        """Weight decay ``λ`` of the run."""
        return float(self.config["dynamics"]["lam"])

    @property
    def taus(self) -> list[float]:
        """The temperatures of the ladder."""
        return [float(t) for t in self.config["dynamics"]["taus"]]

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
            non-finite particle (the message names the frame and the particle).
        """
        if not -self.n_frames <= k < self.n_frames:
            raise IndexError(f"frame {k} out of range ({self.n_frames} frames)")
        k %= self.n_frames
        name = "particles/neurons/position/value"
        try:
            with _open_read(self._current_path(k)) as f:
                theta = np.asarray(_need(f, name, self.path)[k], dtype=np.float64)
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
            raise RunFileError(self.path, f"frame {k}",
                               f"particle {i} is not finite ({cols[c]} = {theta[i, c]}; "
                               f"{count} of {theta.shape[0]} particles); the file is damaged")
        return theta

    def to_xarray(self, frames: bool = True):
        """The run as an ``xarray.Dataset``: observables over ``time`` (coordinates ``step``,
        ``tau``, ``stage``), frames over ``frame``, ``particle``, ``coord``; the committed
        rows only. See :func:`meanfield.tidy.run_dataset`."""
        from meanfield.tidy import run_dataset
        return run_dataset(self, frames=frames)


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


def _written_schedule(config: dict) -> Schedule:
    """The :class:`Schedule` of a stored config (its ``dynamics`` and ``output`` tables)."""
    dyn, out = config["dynamics"], config["output"]
    spt = dyn["steps_per_tau"]
    return Schedule(tuple(float(t) for t in dyn["taus"]), spt if spt == "auto" else int(spt),
                    int(out["observe_every"]), int(out["snapshots_per_tau"]),
                    int(dyn.get("max_steps_per_tau", 0) or 0))


def _place(f, obs: dict, frame_step, nf: int, no: int, config: dict, src: str):
    """Stage and step within it of every observation and frame, and the schedule as run.

    Read from the file, or for one written before they were stored told from its rows
    (:meth:`solvers.schedule.Schedule.stages_of_rows`; frames lie at observations)."""
    sch = _written_schedule(config)
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
                got[where + name] = np.asarray(ds[:rows], dtype=np.int64)
        return got, sch.as_run(got["stage"], obs["tau"]["step"])
    stage, in_stage = sch.stages_of_rows(obs["tau"]["step"], obs["tau"]["value"])
    sch = sch.as_run(stage, obs["tau"]["step"])
    fstage, fin_stage = sch.stages_of_steps(frame_step)
    return ({"stage": stage, "step_in_stage": in_stage, "frame_stage": fstage,
             "frame_step_in_stage": fin_stage}, sch)


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
        schema version.
    """
    src = str(path)
    p = Path(path)
    if not p.exists():
        raise RunFileError(src, "", "no such file")
    if p.is_dir():
        raise RunFileError(src, "", "is a directory, expected a run file (.h5)")
    try:
        f = _open_read(path)
    except OSError as exc:
        raise RunFileError(src, "", f"not a readable HDF5 file ({_h5_reason(exc)})") from None
    try:
        with f:
            check_schema(f, src)
            p = f["parameters"]
            cfg_json = str(_need_attr(p, "config_json", src))
            nf = int(f.attrs.get("n_frames", 0))
            no = int(f.attrs.get("n_observations", 0))
            pos = _need(f, "particles/neurons/position", src)
            temp = _need(f, "particles/neurons/temperature", src)
            observables = _need(f, "observables", src)
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
                g = f["observables"][name]
                obs[name] = {k: np.asarray(g[k][:no]) for k in ("step", "time", "value")}
            config = json.loads(cfg_json)
            frame_step = np.asarray(pos["step"][:nf])
            place, schedule = _place(f, obs, frame_step, nf, no, config, src)
            return Run(path=src, config=config, config_json=cfg_json,
                       X=np.asarray(_need(f, "data/X", src)),
                       y=np.asarray(_need(f, "data/y", src)),
                       frame_step=frame_step,
                       frame_time=np.asarray(pos["time"][:nf]),
                       frame_tau=np.asarray(temp["value"][:nf]),
                       observables=obs, **place, schedule=schedule,
                       complete=bool(f.attrs.get("complete", False)),
                       provenance=json.loads(str(p.attrs.get("provenance", "{}"))),
                       schema_version=int(p.attrs["schema_version"]),
                       physics_hash=str(p.attrs.get("physics_hash", "")),
                       data_hash=str(p.attrs.get("data_hash", "")),
                       identity=_identity(f, src))
    except RunFileError:
        raise
    except READ_ERRORS as exc:
        raise RunFileError(src, "", f"damaged or incomplete run file ({_h5_reason(exc)})") from None
