"""HDF5 run files (H5MD 1.1 layout); the only package that touches run files.

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
        eta_lambda_max, acceptance, jump_acceptance, cell_exchange, radial_acceptance,
        exchange_acceptance
    root attrs  n_frames, n_observations (commit counters, written last), complete (bool)

Every dataset is chunked with a Fletcher-32 checksum per chunk, and string attributes are
fixed-length; :func:`open_run` treats a file as untrusted input (``docs/format.md``, "Reading a
file from someone else"). Readers trust only the first ``n_frames`` / ``n_observations`` rows, so a killed writer leaves a
readable file holding every committed row. The writer allocates every row of the run (and the
disk space for it) when it creates the file, so appends never change the file's structure.
Observations are buffered in memory and written as blocks (:data:`FLUSH_ROWS`,
:data:`FLUSH_BYTES`, :data:`FLUSH_SECONDS`, and with every frame, checkpoint and the end of the run), each block
committed by one counter update.

The writer works in HDF5's single-writer/multiple-reader (SWMR) mode, so a run in progress can
be read without disabling file locking: :func:`open_run` (and ``h5py.File(path, "r",
libver="latest", swmr=True)``) sees the committed rows at the moment it opens the file. In SWMR
mode HDF5 drops its own lock, so the writer holds a POSIX record lock on the file instead
(:func:`writer_alive`), which tells a live writer from a killed one.

The package, one module per concern: :mod:`~meanfield.store.layout` (the elements, their chunks
and row writes), :mod:`~meanfield.store.writer` (:class:`RunWriter`),
:mod:`~meanfield.store.reader` (:func:`open_run`, :class:`Run`), :mod:`~meanfield.store.locks`
(SWMR opens and the writer lock), :mod:`~meanfield.store.trust` (the checks of a file from
someone else: links, storage, sizes, shapes, variable-length attributes read in a child process
with a deadline, checksums), :mod:`~meanfield.store.disk` (disk reservation),
:mod:`~meanfield.store.leftovers` (the scratch folders a killed writer of an output leaves, removed
by its next owner) and :mod:`~meanfield.store.provenance`. Its public names are imported from
``meanfield.store``.
"""

from __future__ import annotations

from meanfield.store.layout import (
    CREATOR,
    FRAME_ELEMENTS,
    LATER_OBSERVABLES,
    OBSERVABLES,
    PER_POINT,
    PLACE,
    SCHEMA_VERSION,
    estimate_size,
)
from meanfield.store.locks import writer_alive
from meanfield.store.provenance import provenance
from meanfield.store.reader import (
    READ_ERRORS,
    RESUME_HINT,
    Run,
    check_schema,
    no_frames_yet,
    open_run,
)
from meanfield.store.writer import FLUSH_BYTES, FLUSH_ROWS, FLUSH_SECONDS, RunWriter

__all__ = [
    "CREATOR", "FLUSH_BYTES", "FLUSH_ROWS", "FLUSH_SECONDS", "FRAME_ELEMENTS", "LATER_OBSERVABLES",
    "OBSERVABLES", "PER_POINT", "PLACE", "READ_ERRORS", "RESUME_HINT", "Run", "RunWriter",
    "SCHEMA_VERSION", "check_schema", "estimate_size", "no_frames_yet", "open_run", "provenance",
    "writer_alive"
]
