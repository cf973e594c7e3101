"""The run file writer (:class:`RunWriter`): rows allocated up front, observations buffered
and committed in blocks, commit counters written last."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import h5py
import numpy as np

from meanfield.errors import RunFileError
from meanfield.store.disk import _fallocate, _reserve
from meanfield.store.layout import (
    CREATOR,
    FRAME_ELEMENTS,
    OBSERVABLES,
    PLACE,
    SCHEMA_VERSION,
    _elements,
    _shrink,
    _time_element,
    _write_rows,
    chain_root,
    estimate_size,
    set_text,
    stored_chains,
    text,
    write_data,
)
from meanfield.store.locks import (
    _is_open_for_write,
    _rebuild,
    _take_writer_lock,
    writer_alive,
)
from meanfield.store.provenance import provenance
from meanfield.store.reader import _h5_reason, check_schema, opened_untrusted

#: Buffered observations are written and committed as one block once this many are waiting
#: (a commit costs about 5-10 ms whatever its size: one write per dataset of every observable,
#: and two flushes); a writer killed with SIGKILL loses at most this many rows...
FLUSH_ROWS = 4096
#: ... or fewer, when the buffered rows' arrays (residuals of both parities, every chain) reach
#: this many bytes (a large data set: ``n = 10⁴`` points commit every 200 rows)...
FLUSH_BYTES = 32 << 20
#: ... or the rows of the last this many seconds: an observation arriving this long after the
#: last commit is committed at once (with every row waiting before it).
FLUSH_SECONDS = 2.0


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

    def _rebuild(self) -> None:
        """:func:`meanfield.store.locks._rebuild` of this file; a copy that cannot be written
        (full disk, file-size limit) is one line naming the file, and nothing is left of it.

        Raises
        ------
        RunFileError
            The copy could not be written; the file is as it was, and can be resumed once
            there is space.
        """
        from meanfield.io_failures import reason
        try:
            _rebuild(self.path)
        except (OSError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and "write failed" not in str(exc) \
                    and "unable to extend" not in str(exc):
                raise
            raise RunFileError(str(self.path), "", f"cannot write the copy that reopens it "
                                                   f"for appending ({reason(exc)}); nothing "
                                                   "was changed: free space and continue with "
                                                   "--resume") from None

    def __init__(self, path, cfg=None, dataset=None, mode="w", capacity=(0, 0), *,
                 flush_rows=FLUSH_ROWS, flush_seconds=FLUSH_SECONDS):
        self.path = Path(path)
        self.f = None
        self._lock = None
        self._pending = []          # observations not yet written
        self._broken = False        # a write failed: HDF5 may be inconsistent, write no more
        self.flush_rows = max(1, int(flush_rows))
        self._row_limit = None      # flush_rows, or fewer by FLUSH_BYTES (at the first append)
        self._handles = {}          # (chain, observable) -> its (step, time, value) datasets
        self.flush_seconds = float(flush_seconds)
        self._last_commit = time.monotonic()
        if mode == "w":
            # Reserve the space first: a full disk or a file-size limit then fails here with a
            # plain OSError, before HDF5 writes anything (HDF5 does not survive failed writes).
            need = estimate_size(cfg.n_particles, dataset.d, dataset.n, capacity,
                                 chains=cfg.dynamics.chains)
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
            _check_before_append(self.path)
            try:
                try:
                    self.f = h5py.File(self.path, "a", libver="latest")
                except OSError as exc:
                    if not _is_open_for_write(exc):
                        raise
                    self._rebuild()            # its SWMR writer was killed
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
        #: The root group of each chain (``docs/format.md``, "Chains"): the file's root for
        #: chain 0, ``/chains/<k>`` for the others.
        self.roots = [self.f] + [self.f[chain_root(k)]
                                 for k in range(1, stored_chains(self.f["parameters"]))]

    def _create(self, cfg, dataset, capacity):
        f = self.f
        d, n, N = dataset.d, dataset.n, cfg.n_particles
        cap_frames, cap_obs = (int(c) for c in capacity)
        h = f.create_group("h5md")
        h.attrs["version"] = np.array([1, 1], dtype=np.int32)
        set_text(h.create_group("author"), "name", os.environ.get("USER", "unknown"))
        cr = h.create_group("creator")
        prov = provenance()
        set_text(cr, "name", CREATOR)
        set_text(cr, "version", prov["meanfield"] + (f"+{prov['git_commit'][:12]}"
                                                     if "git_commit" in prov else ""))
        p = f.create_group("parameters")
        p.attrs["schema_version"] = SCHEMA_VERSION
        set_text(p, "config_json", cfg.canonical_json())
        set_text(p, "config_hash", cfg.hash())
        set_text(p, "physics_hash", cfg.physics_hash())
        set_text(p, "data_hash", dataset.hash())
        p.attrs["lam"] = cfg.dynamics.lam
        p.attrs["eta"] = cfg.dynamics.eta
        p.attrs["taus"] = np.asarray(cfg.taus, dtype=np.float64)
        if isinstance(cfg.dynamics.steps_per_tau, str):
            set_text(p, "steps_per_tau", cfg.dynamics.steps_per_tau)
        else:
            p.attrs["steps_per_tau"] = cfg.dynamics.steps_per_tau
        p.attrs["n_particles"] = N
        p.attrs["d"] = d
        p.attrs["n"] = n
        p.attrs["seed"] = cfg.dynamics.seed
        p.attrs["chains"] = cfg.dynamics.chains
        set_text(p, "activation", cfg.model.activation)
        set_text(p, "provenance", json.dumps(prov, sort_keys=True))
        g = f.create_group("data")
        write_data(g, dataset.X, dataset.y)
        set_text(g, "name", dataset.name)
        rows = {"n_frames": cap_frames, "n_observations": cap_obs}
        for k in range(cfg.dynamics.chains):
            root = f if k == 0 else f.create_group(chain_root(k))
            neu = root.create_group("particles").create_group("neurons")
            box = neu.create_group("box")
            box.attrs["dimension"] = d + 2
            box.attrs["boundary"] = np.array(["none"] * (d + 2), dtype="S4")
            root.create_group("observables")
            for path, shape, counter, crows, dtype in _elements(N, d, n):
                parent, name = path.rsplit("/", 1)
                _time_element(root[parent], name, shape, rows=rows[counter], dtype=dtype,
                              chunk_rows=crows)
            set_text(root["particles/neurons/position/value"], "columns",
                     "a," + ",".join(f"w{j + 1}" for j in range(d)) + ",b")
        f.attrs["n_frames"] = 0
        f.attrs["n_observations"] = 0
        f.attrs["complete"] = False
        f.flush()

    @property
    def n_chains(self) -> int:
        """Independent particle systems the file holds (``dynamics.chains``)."""
        return len(self.roots)

    def append_frame(self, theta, step, time, tau, stage, step_in_stage):
        """Append one snapshot frame at ``step``/``time``, temperature ``tau``, ladder stage
        ``stage`` and step ``step_in_stage`` of it (1-based); the buffered observations are
        committed first, the frame right after them.

        ``theta`` is the particles, shape (N, d+2), or with several chains one such array
        per chain (a sequence of :attr:`n_chains` arrays, or shape (K, N, d+2))."""
        thetas = [theta] if self.n_chains == 1 else list(theta)
        if len(thetas) != self.n_chains:
            raise ValueError(f"{len(thetas)} frames for {self.n_chains} chains")
        self.commit()
        with self._writing():
            k = self.n_frames
            for root, th in zip(self.roots, thetas):
                neu = root["particles/neurons"]
                _write_rows(neu["position"], k, [step], [time], np.asarray(th)[None])
                _write_rows(neu["temperature"], k, [step], [time], [tau])
                if self._place:
                    _write_rows(neu["stage"], k, [step], [time], [int(stage)])
                    _write_rows(neu["step_in_stage"], k, [step], [time], [int(step_in_stage)])
            self.f.flush()
            self.n_frames = k + 1
            self.f.attrs.modify("n_frames", self.n_frames)
            self.f.flush()

    def stage_frames(self, stage: int, min_step: int):
        """The committed snapshot frames of ladder stage ``stage`` at global steps
        ``>= min_step``, per chain: a list of :attr:`n_chains` lists of arrays (N, d+2), in step
        order; ``None`` for a file written before the stages were stored (the stop test of an
        ``"auto"`` stage then goes without them)."""
        if not self._place:
            return None
        k = self.n_frames
        out = []
        for root in self.roots:
            neu = root["particles/neurons"]
            steps = np.asarray(neu["position/step"][:k])
            stages = np.asarray(neu["stage/value"][:k])
            idx = np.flatnonzero((stages == int(stage)) & (steps >= int(min_step)))
            out.append([np.asarray(neu["position/value"][int(i)]) for i in idx])
        return out

    def append_observations(self, rows):
        """Append observations: a sequence of :class:`solvers.observation.Observation`, or
        with several chains a sequence of boundaries, each a sequence of :attr:`n_chains`
        observations (chain 0 first).

        They are buffered and committed by :meth:`commit` when ``flush_rows`` rows wait or
        ``flush_seconds`` have passed since the last commit."""
        self._pending.extend(rows)
        if self._pending and self._row_limit is None:
            first = self._pending[0]
            chains = [first] if self.n_chains == 1 else list(first)
            row_bytes = sum(16 * np.size(o.residuals) + 128 for o in chains)
            self._row_limit = max(1, min(self.flush_rows, FLUSH_BYTES // row_bytes))
        if self._pending and (len(self._pending) >= self._row_limit
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
        K = self.n_chains
        rows = [[r] if K == 1 else list(r) for r in self._pending]
        if any(len(r) != K for r in rows):
            raise ValueError(f"each observation row needs one observation per chain ({K})")
        with self._writing():
            k = self.n_observations
            for c, root in enumerate(self.roots):
                mine = [r[c] for r in rows]
                steps = np.fromiter((r.step for r in mine), dtype=np.int64, count=len(mine))
                times = np.fromiter((r.time for r in mine), dtype=np.float64, count=len(mine))
                for name in (PLACE if self._place else ()) + OBSERVABLES:
                    _write_rows(self._element(c, root, name), k, steps, times,
                                np.asarray([getattr(r, name) for r in mine]))
            self.f.flush()
            self.n_observations = k + len(rows)
            self.f.attrs.modify("n_observations", self.n_observations)
            self.f.flush()
        self._pending = []

    def _element(self, chain, root, name):
        """The ``{step, time, value}`` datasets of observable ``name`` of ``chain``, looked up
        once per open file (an HDF5 lookup costs about 80 µs; a commit writes a dozen)."""
        key = (chain, name)
        handles = self._handles.get(key)
        if handles is None:
            g = root["observables"][name]
            handles = self._handles[key] = {part: g[part] for part in ("step", "time", "value")}
        return handles

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
        for root in self.roots:
            neu = root["particles/neurons"]
            for name in FRAME_ELEMENTS:
                if name in neu:
                    _shrink(neu[name], self.n_frames)
            for name in (PLACE if self._place else ()) + OBSERVABLES:
                _shrink(root["observables"][name], self.n_observations)
        self.f.flush()
        self.f.attrs.modify("complete", True)
        self.f.flush()

    @property
    def physics_hash(self) -> str:
        """The ``physics_hash`` of the config that created the file."""
        return text(self.f["parameters"].attrs.get("physics_hash", ""))

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


def _check_before_append(path) -> None:
    """The checks :func:`meanfield.store.open_run` makes of a file from someone else
    (:func:`meanfield.store.reader.opened_untrusted`), before HDF5 opens it for appending."""
    with opened_untrusted(path):
        pass


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
