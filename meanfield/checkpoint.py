"""Checkpoints: the full solver state, written atomically next to the run file.

A checkpoint ``RUN.h5.ckpt`` is a NumPy ``.npz`` archive (plain arrays, no pickles) holding
every field of :class:`solvers.langevin.SolverState` (particles, global step, ladder position,
the stage's residual history, the committed row counts of the run file) and a JSON ``meta``
record (format version, the config's ``physics_hash`` and ``config_hash``, the data's
``data_hash``). Restoring it and continuing gives bitwise the same run as never stopping,
because the noise is a function of ``(seed, step, particle, coordinate)`` only
(``docs/format.md``).

Writing goes to ``RUN.h5.ckpt.tmp``, which is flushed, ``fsync``-ed and renamed over
``RUN.h5.ckpt`` (``os.replace``, atomic on POSIX), then the directory is ``fsync``-ed: a crash
at any moment leaves either the previous or the new checkpoint, never a mixture.
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import numpy as np

from meanfield import atomic
from meanfield._version import __version__
from meanfield.errors import CheckpointError

#: Format tag and version stored in ``meta``; :func:`load` refuses anything else.
FORMAT = "meanfield-checkpoint"
VERSION = 1


def save(path, state, *, physics_hash: str, config_hash: str, data_hash: str = "") -> None:
    """Write ``state`` (a dataclass such as ``SolverState``) to ``path`` atomically.

    Fields may be ndarrays, ints, floats, or lists of equally shaped ndarrays.

    Parameters
    ----------
    path : path-like
        The checkpoint, e.g. ``RUN.h5.ckpt``. ``path + ".tmp"`` is used as scratch.
    state : dataclass instance
    physics_hash, config_hash : str
        From :class:`meanfield.config.RunConfig`; a resume under another physics is refused.
    data_hash : str
        :func:`meanfield.data.data_hash` of the run's data; a resume on other data is refused.

    Raises
    ------
    OSError
        The checkpoint cannot be written (the previous checkpoint is then still in place).
    """
    path = Path(path)
    arrays, kinds = {}, {}
    for fld in dataclasses.fields(state):
        v = getattr(state, fld.name)
        if isinstance(v, np.ndarray):
            kinds[fld.name] = "array"
            arrays[fld.name] = v
        elif isinstance(v, list):
            kinds[fld.name] = "list"
            arrays[fld.name] = np.asarray(v, dtype=np.float64) if v else np.zeros((0,))
        elif isinstance(v, (bool, np.bool_)):
            kinds[fld.name] = "bool"
            arrays[fld.name] = np.asarray(bool(v))
        elif isinstance(v, (int, np.integer)):
            kinds[fld.name] = "int"
            arrays[fld.name] = np.asarray(int(v), dtype=np.int64)
        elif isinstance(v, (float, np.floating)):
            kinds[fld.name] = "float"
            arrays[fld.name] = np.asarray(float(v), dtype=np.float64)
        else:  # pragma: no cover - a programming error, not bad input
            raise TypeError(f"cannot checkpoint field {fld.name} of type {type(v).__name__}")
    meta = {"format": FORMAT, "version": VERSION, "physics_hash": physics_hash,
            "config_hash": config_hash, "data_hash": data_hash, "fields": kinds,
            "meanfield": __version__}
    arrays["meta"] = np.asarray(json.dumps(meta, sort_keys=True))
    with atomic.replacing(path, scratch=path.with_name(path.name + ".tmp"), durable=True) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def load(path, state_cls):
    """Read a checkpoint written by :func:`save`.

    Parameters
    ----------
    path : path-like
    state_cls : dataclass type
        The state class to rebuild (``solvers.langevin.SolverState``); its field names must
        match the checkpoint's.

    Returns
    -------
    state : state_cls
    meta : dict
        ``format``, ``version``, ``physics_hash``, ``config_hash``, ``data_hash`` (absent in
        checkpoints written before it was stored), ``fields``, ``meanfield``.

    Raises
    ------
    CheckpointError
        Missing, unreadable or damaged file, another format or version, fields that do not
        match ``state_cls``, or non-finite particles.
    """
    src = str(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise CheckpointError(src, "", "no such file") from None
    except PermissionError:
        raise CheckpointError(src, "", "permission denied") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise CheckpointError(src, "", f"damaged checkpoint ({type(exc).__name__}: "
                                       f"{str(exc)[:80]})") from None
    try:
        meta = json.loads(str(data.pop("meta")))
    except (KeyError, ValueError):
        raise CheckpointError(src, "meta", "missing or not JSON; not a meanfield checkpoint") \
            from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(src, "meta.format", "not a meanfield checkpoint")
    if meta.get("version") != VERSION:
        raise CheckpointError(src, "meta.version", f"checkpoint format {meta.get('version')!r} "
                                                   f"is not supported (expected {VERSION})")
    kinds = meta.get("fields", {})
    names = {f.name for f in dataclasses.fields(state_cls)}
    if set(kinds) != names or set(data) != names:
        raise CheckpointError(src, "fields", f"holds {sorted(data)}, expected {sorted(names)}; "
                                             "written by another meanfield version")
    kw = {}
    for name, kind in kinds.items():
        a = data[name]
        if kind == "array":
            kw[name] = np.array(a)
        elif kind == "list":
            kw[name] = [np.array(r) for r in a]
        elif kind == "bool":
            kw[name] = bool(a)
        elif kind == "int":
            kw[name] = int(a)
        elif kind == "float":
            kw[name] = float(a)
        else:
            raise CheckpointError(src, name, f"unknown field kind {kind!r}")
    for name, v in kw.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" and not np.all(np.isfinite(v)):
            raise CheckpointError(src, name, "holds NaN or Inf")
        if isinstance(v, int) and v < 0:
            raise CheckpointError(src, name, f"negative ({v})")
    return state_cls(**kw), meta
