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


def _key(chain: int, name: str) -> str:
    """The archive name of field ``name`` of chain ``chain`` (chain 0's fields unprefixed, as
    in checkpoints written before chains existed)."""
    return name if chain == 0 else f"chain{chain}.{name}"


def save(path, state, *, physics_hash: str, config_hash: str, data_hash: str = "") -> None:
    """Write ``state`` (a dataclass such as ``SolverState``, or a list of them, one per
    chain of the run) to ``path`` atomically.

    Fields may be ndarrays, ints, floats, or lists of equally shaped ndarrays.

    Parameters
    ----------
    path : path-like
        The checkpoint, e.g. ``RUN.h5.ckpt``. ``path + ".tmp"`` is used as scratch.
    state : dataclass instance or list of them
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
    states = list(state) if isinstance(state, (list, tuple)) else [state]
    arrays, kinds = {}, {}
    for c, st in enumerate(states):
        for fld in dataclasses.fields(st):
            v, key = getattr(st, fld.name), _key(c, fld.name)
            if isinstance(v, np.ndarray):
                kinds[fld.name] = "array"
                arrays[key] = v
            elif isinstance(v, list):
                kinds[fld.name] = "list"
                arrays[key] = np.asarray(v, dtype=np.float64) if v else np.zeros((0,))
            elif isinstance(v, (bool, np.bool_)):
                kinds[fld.name] = "bool"
                arrays[key] = np.asarray(bool(v))
            elif isinstance(v, (int, np.integer)):
                kinds[fld.name] = "int"
                arrays[key] = np.asarray(int(v), dtype=np.int64)
            elif isinstance(v, (float, np.floating)):
                kinds[fld.name] = "float"
                arrays[key] = np.asarray(float(v), dtype=np.float64)
            else:  # pragma: no cover - a programming error, not bad input
                raise TypeError(f"cannot checkpoint field {fld.name} of type "
                                f"{type(v).__name__}")
    meta = {"format": FORMAT, "version": VERSION, "physics_hash": physics_hash,
            "config_hash": config_hash, "data_hash": data_hash, "fields": kinds,
            "meanfield": __version__}
    if len(states) > 1:
        meta["chains"] = len(states)
    arrays["meta"] = np.asarray(json.dumps(meta, sort_keys=True))
    with atomic.replacing(path, scratch=path.with_name(path.name + ".tmp"), durable=True) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def load(path, state_cls):
    """Read a checkpoint of one chain written by :func:`save` (:func:`load_chains` reads
    one of several chains; this refuses those).

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
    states, meta = load_chains(path, state_cls)
    if len(states) != 1:
        raise CheckpointError(str(path), "meta.chains", f"holds {len(states)} chains, "
                                                        "expected one")
    return states[0], meta


def load_chains(path, state_cls):
    """Read a checkpoint written by :func:`save`: one state per chain of the run.

    Returns
    -------
    states : list of state_cls
        Chain 0 first (one state for a checkpoint of one chain).
    meta : dict
        As :func:`load`; ``chains`` present when there are several.

    Raises
    ------
    CheckpointError
        As :func:`load`.
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
                                       f"{str(exc)[:80]}): it cannot be resumed; start over "
                                       "with --overwrite") from None
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
    chains = meta.get("chains", 1)
    if not isinstance(chains, int) or chains < 1:
        raise CheckpointError(src, "meta.chains", f"not a positive integer ({chains!r})")
    want = {_key(c, name) for c in range(chains) for name in names}
    if set(kinds) != names or set(data) != want:
        raise CheckpointError(src, "fields", f"holds {sorted(data)}, expected {sorted(want)}; "
                                             "written by another meanfield version")
    return [_state(src, state_cls, kinds, {name: data[_key(c, name)] for name in names})
            for c in range(chains)], meta


def _state(src, state_cls, kinds, data):
    """One chain's state from its arrays ``data`` (field name -> array)."""
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
    return state_cls(**kw)
