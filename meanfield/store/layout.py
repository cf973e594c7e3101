"""The layout of a run file (H5MD 1.1, ``docs/format.md``): the schema version, the
time-dependent elements and their chunks, the size of a new file, and the row writes."""

from __future__ import annotations

import h5py
import numpy as np

from solvers.observation import Observation

#: 2: ``/parameters.chains`` and the groups ``/chains/<k>`` of chains ``k >= 1``
#: (``docs/format.md``, "Chains"); a file of version 1 holds one chain.
SCHEMA_VERSION = 2
CREATOR = "meanfield"
#: The observables of a run file: the columns of :class:`solvers.observation.Observation`.
OBSERVABLES = Observation.columns()
#: Observables added after the first files of schema 1 were written; absent from those files.
LATER_OBSERVABLES = ("residuals_previous", "eta_lambda_max", "acceptance", "jump_acceptance",
                     "cell_exchange", "radial_acceptance", "exchange_acceptance")
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


def chain_root(k: int) -> str:
    """The group of chain ``k >= 1`` (``/chains/<k>``), holding ``particles/neurons`` and
    ``observables`` laid out as the root's, which are chain 0's."""
    return f"chains/{int(k)}"


def stored_chains(parameters) -> int:
    """Chains of a run file from its ``/parameters`` group: the ``chains`` attribute, 1 in
    files written before chains existed."""
    return int(np.asarray(parameters.attrs.get("chains", 1)).item())


def set_text(obj, name: str, value: str) -> None:
    """Write the string attribute ``name`` of ``obj`` as a fixed-length UTF-8 string.

    Fixed-length strings are stored in the attribute itself. Variable-length ones (written
    before, and by h5py for a ``str``) live in HDF5's global heap, and a damaged global heap
    makes HDF5 loop forever reading them (``docs/format.md``, "Reading a file from someone
    else")."""
    raw = str(value).encode("utf-8")
    obj.attrs.create(name, np.array(raw, dtype=h5py.string_dtype("utf-8", max(1, len(raw)))))


def text(value) -> str:
    """A string attribute as read by h5py: ``bytes`` of a fixed-length string (decoded as
    UTF-8) or ``str`` of a variable-length one, as ``str``."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8")
    return str(value)


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


def estimate_size(n_particles, d, n, capacity, chains: int = 1) -> int:
    """Upper bound, in bytes, of a new run file of ``chains`` chains holding ``capacity =
    (n_frames, n_observations)`` rows each (raw data of every allocated chunk and its 4-byte
    checksum, plus 2 KiB of metadata per dataset and 64 KiB for the rest)."""
    rows = {"n_frames": int(capacity[0]), "n_observations": int(capacity[1])}
    total = 8 * n * (d + 1) + 65536 + 4 * (-(-n // _data_chunk_rows(d)) + -(-n // 2**17))
    for _, shape, counter, crows, _ in _elements(n_particles, d, n):
        r = rows[counter]
        for shp, cr in (((), crows), ((), crows), (shape, _value_chunk_rows(shape, crows))):
            chunks = -(-r // cr)
            total += chains * (chunks * (cr * 8 * int(np.prod(shp, dtype=np.int64)) + 4)
                               + 2048)
    return int(total)


def _data_chunk_rows(width: int) -> int:
    """Rows per chunk of ``/data/X`` (``width = d``) or ``/data/y`` (``width = 1``): about
    1 MiB a chunk."""
    return max(1, 2**20 // (8 * max(1, int(width))))


def write_data(group, X, y) -> None:
    """``/data/X`` and ``/data/y``, chunked (about 1 MiB a chunk) with a Fletcher-32 checksum
    per chunk."""
    for name, arr, width in (("X", X, X.shape[1]), ("y", y, 1)):
        rows = max(1, min(arr.shape[0], _data_chunk_rows(width)))
        group.create_dataset(name, data=arr, chunks=(rows,) + arr.shape[1:], fletcher32=True)


def _time_element(group, name, value_shape, rows=0, dtype=np.float64, chunk_rows=64):
    """Create an H5MD time-dependent element ``{step, time, value}`` with ``rows`` rows
    allocated up front (early allocation): appends then only write raw data into space that
    already exists, so a crash never leaves half-updated chunk indices or dataset shapes.

    Every chunk carries a Fletcher-32 checksum (HDF5 writes the allocated chunks at creation,
    zeros with their checksum, and verifies the checksum on every read)."""
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
                         chunks=(crows,) + shape, fletcher32=True, dcpl=dcpl)
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
