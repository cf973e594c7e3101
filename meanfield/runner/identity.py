"""Whether a stored run (a run file or a checkpoint) is the run a config asks for: the same
physics and the same data values (``docs/format.md``, "Run identity")."""

from __future__ import annotations

import json
from pathlib import Path

from meanfield import config as _config
from meanfield import data as _data
from meanfield.errors import (
    ConfigError,
    RunMismatch,
)

#: Keys the canonical config leaves out at their default, so that configs older than them keep
#: their hash (:meth:`meanfield.config.RunConfig.as_dict`); a difference names the default.
OMITTED_DEFAULTS = {"dynamics.chains": 1}


def _physics_table(d: dict) -> dict:
    """The part of a canonical config dict that ``physics_hash`` covers, flattened to
    ``{"table.key": value}``."""
    out = {}
    for table in ("model", "dynamics", "output"):
        for key, value in d.get(table, {}).items():
            if (table, key) != ("output", "checkpoint_every"):
                out[f"{table}.{key}"] = value
    return out


def _stored_physics(stored) -> tuple[str, dict]:
    """``(physics_hash, physics fields)`` of the config that wrote the run file ``stored``
    (a :class:`meanfield.store.Run`), recomputed from its ``config_json`` so that files written
    before the data path left the physics hash compare by the same rule; the stored attribute
    when that config no longer validates."""
    try:
        theirs = _config.from_canonical_json(stored.config_json, str(stored.path))
    except ConfigError:
        return stored.physics_hash, _physics_table(json.loads(stored.config_json))
    return theirs.physics_hash(), _physics_table(theirs.as_dict())


def _data_source(cfg) -> tuple[str, str]:
    """``(file, field)`` naming where the data of ``cfg`` come from, for messages."""
    from meanfield.schema import FileData
    if isinstance(cfg.data, FileData):
        return str(cfg.data.path), ""
    return cfg.source, "data"


def check_same_run(cfg, dataset, stored, path, hint: str = "resume with the same config and "
                   "data, or pass --overwrite to start over") -> None:
    """Refuse unless the run file ``stored`` was written by this run: the same physics
    (:meth:`meanfield.config.RunConfig.physics_hash`) on the same data values.

    The data are compared with the ``/data/X`` and ``/data/y`` stored in the file, bit for
    bit, which also covers files written before ``data_hash`` was stored. Paths play no part:
    a run folder that moved (config, data and run files together) still matches.

    Parameters
    ----------
    cfg : RunConfig
    dataset : meanfield.data.Dataset
        The data of ``cfg`` as loaded now.
    stored : meanfield.store.Run
        The existing run file (``RUN.h5.part`` or ``RUN.h5``).
    path : path-like
        Its path, for messages.
    hint : str
        What to do instead, appended to the message (none when empty).

    Raises
    ------
    meanfield.errors.RunMismatch
        Another physics (naming the config and the first field that differs) or other data
        (naming the data file and the first value that differs).
    """
    theirs, fields = _stored_physics(stored)
    mine = cfg.physics_hash()
    if theirs != mine:
        ours = _physics_table(cfg.as_dict())
        def value(table, k):         # a key the canonical form leaves out has its default
            return table.get(k, OMITTED_DEFAULTS.get(k))
        diff = next((f"{k} {value(fields, k)!r} -> {value(ours, k)!r}"
                     for k in sorted(set(ours) | set(fields))
                     if value(ours, k) != value(fields, k)), "")
        raise RunMismatch(cfg.source, "", f"differs from the config that wrote {path} (physics "
                                          f"hash {mine} != {theirs}"
                                          + (f"; {diff}" if diff else "") + ")"
                          + (f"; {hint}" if hint else ""))
    why = _data.values_differ(dataset.X, dataset.y, stored.X, stored.y)
    if why is not None:
        src, fld = _data_source(cfg)
        raise RunMismatch(src, fld, f"data values differ from those stored in {path}: {why}"
                                    + (f"; {hint}" if hint else ""))


def _check_checkpoint(cfg, dataset, meta: dict, stored, ckpt: Path, part: Path) -> None:
    """Refuse a checkpoint that does not belong to the run file ``stored`` (already checked
    against ``cfg`` and ``dataset``): its physics hash is neither that of ``cfg`` nor the one
    the run file stores (files and checkpoints written before the data path left the hash),
    or its data hash (absent in older checkpoints) is not that of ``dataset``."""
    ph = meta.get("physics_hash", "")
    if ph not in (cfg.physics_hash(), stored.physics_hash):
        raise RunMismatch(str(ckpt), "", f"does not belong to {part} (physics hash {ph}, "
                                         f"expected {cfg.physics_hash()}); pass --overwrite to "
                                         "start over")
    dh = meta.get("data_hash") or ""
    if dh and dh != dataset.hash():
        src, _ = _data_source(cfg)
        raise RunMismatch(str(ckpt), "", f"was written on other data (data hash {dh}, "
                                         f"{dataset.hash()} for {src} now); pass --overwrite "
                                         "to start over")
