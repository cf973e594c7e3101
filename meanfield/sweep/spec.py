"""Study files: a base run config plus ``[sweep]`` axes, expanded into independent jobs.

A study file is TOML with the tables of a run config (``[data]``, ``[model]``, ``[dynamics]``,
``[output]``, see :mod:`meanfield.config`), or ``base = "run.toml"`` naming one, plus a
``[sweep]`` table whose keys are dotted config names and whose values are lists::

    base = "plane8.toml"            # optional; relative to this file

    [dynamics]                      # optional overrides of the base
    steps_per_tau = 20000

    [sweep]
    "dynamics.lam" = [0.02, 0.05]
    "model.n_particles" = [250, 1000, 4000]
    "dynamics.seed" = [0, 1, 2]

The jobs are the cartesian product of the axes, in the order written, the last axis varying
fastest. Each job is a complete, validated :class:`meanfield.config.RunConfig`, identified by its
config hash (the run file is ``run-<hash>.h5``). Every problem raises
:class:`meanfield.errors.StudyError` naming the file, the field and the reason before any job runs.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meanfield import config as _config
from meanfield import schema
from meanfield.errors import ConfigError, StudyError

#: Top-level keys of a study file besides the run-config tables.
STUDY_KEYS = ("base", "sweep")
#: Axis names that are studied as repetitions (mean and spread), not as a parameter.
SEED_AXIS = "dynamics.seed"
#: Axis name of the width ``N``.
WIDTH_AXIS = "model.n_particles"


@dataclass(frozen=True)
class Job:
    """One point of the study grid.

    Attributes
    ----------
    index : int
        Position in the cartesian product (row-major over the axes as written).
    id : str
        The config hash (:meth:`meanfield.config.RunConfig.hash`), 12 hex digits.
    axis_values : dict
        Dotted axis name -> the value of this job.
    config : meanfield.config.RunConfig
        The complete, validated run config.
    """

    index: int
    id: str
    axis_values: dict
    config: Any = field(repr=False)

    @property
    def run_file(self) -> str:
        """Name of the job's run file inside the study directory."""
        return run_file_name(self.id)


def run_file_name(job_id: str) -> str:
    """``run-<config hash>.h5``, the same name ``meanfield run`` uses by default."""
    return f"run-{job_id}.h5"


def _suggest(key: str, allowed) -> str:
    near = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.5)
    return f" (did you mean '{near[0]}'?)" if near else ""


def _flatten(tbl: dict, prefix: str = ""):
    """Yield ``(dotted name, value)``; nested tables (unquoted dotted keys) are walked, lists
    are leaves."""
    for k, v in tbl.items():
        name = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            yield from _flatten(v, name)
        else:
            yield name, v


def _check_axis(src: str, name: str, values) -> list:
    fld = f"sweep.{name}"
    parts = name.split(".")
    if len(parts) != 2 or not all(parts):
        home = schema.home_table(name) if len(parts) == 1 else None
        example = f"{home}.{name}" if home is not None else "dynamics.lam"
        raise StudyError(src, fld, f"axis names are 'table.key', e.g. \"{example}\"")
    sec, key = parts
    if sec not in schema.SECTIONS:
        raise StudyError(src, fld, f"unknown table '{sec}'{_suggest(sec, schema.SECTIONS)}; "
                                   f"valid tables: {', '.join(schema.SECTIONS)}")
    allowed = schema.table_keys(sec)
    if key not in allowed:
        full = [f"{sec}.{k}" for k in allowed]
        hint = schema.misplaced_hint(key, sec, prefix="sweep.") or _suggest(name, full)
        raise StudyError(src, fld, f"unknown key{hint}; valid keys of [{sec}]: "
                                   f"{', '.join(allowed)}")
    if not isinstance(values, list):
        raise StudyError(src, fld, f"must be a list of values, got {type(values).__name__} "
                                   f"{values!r} (write [{json.dumps(values)}] for one value)")
    if not values:
        raise StudyError(src, fld, "must list at least one value")
    seen = {}
    for i, v in enumerate(values):
        key_v = json.dumps(v, sort_keys=True)
        if key_v in seen:
            raise StudyError(src, f"{fld}[{i}]", f"repeats value {v!r} of {fld}[{seen[key_v]}]")
        seen[key_v] = i
    return copy.deepcopy(values)


def _merge_tables(base: dict, over: dict) -> dict:
    """Table-wise merge of run-config tables; a ``[data]`` table that names another ``kind``
    replaces the base's ``[data]`` instead of merging into it."""
    out = copy.deepcopy(base)
    for sec in schema.SECTIONS:
        if sec not in over:
            continue
        tbl = over[sec]
        if sec == "data" and "kind" in tbl and tbl["kind"] != out.get("data", {}).get("kind"):
            out["data"] = copy.deepcopy(tbl)
        else:
            out.setdefault(sec, {}).update(copy.deepcopy(tbl))
    return out


def _absolute_data_path(raw: dict, base_dir: Path) -> dict:
    data = raw.get("data")
    if isinstance(data, dict) and isinstance(data.get("path"), str) and data["path"]:
        p = Path(data["path"])
        if not p.is_absolute():
            data["path"] = str((base_dir / p).resolve())
    return raw


@dataclass
class StudySpec:
    """A parsed study file: its axes and expanded jobs.

    Attributes
    ----------
    source : str
        The study file (or ``"<dict>"``).
    axes : dict
        Dotted axis name -> list of values, in file order.
    base : dict
        The merged run-config tables every job starts from (before the axes are applied).
    jobs : list of Job
    """

    source: str
    axes: dict
    base: dict
    jobs: list

    @property
    def shape(self) -> tuple:
        """Grid shape: the length of each axis, in order (``()`` without axes)."""
        return tuple(len(v) for v in self.axes.values())

    def hash(self) -> str:
        """First 12 hex digits of the SHA-256 over the job ids in order."""
        return hashlib.sha256("\n".join(j.id for j in self.jobs).encode()).hexdigest()[:12]


def _job_error(src: str, exc: ConfigError, names, combo, indices) -> StudyError:
    for name, v, i in zip(names, combo, indices):
        if exc.field == name or exc.field.startswith(name + "["):
            extra = "" if repr(v) in exc.reason else f" (value {v!r})"
            return StudyError(src, f"sweep.{name}[{i}]", exc.reason + extra)
    where = ", ".join(f"{n}={v!r}" for n, v in zip(names, combo))
    return StudyError(src, exc.field, exc.reason + (f" (in the job with {where})" if where else ""))


def expand(raw: dict, source: str = "<dict>", base_dir: str | os.PathLike = ".") -> StudySpec:
    """Validate a parsed study document and expand it into jobs.

    Parameters
    ----------
    raw : dict
        The parsed TOML document (see the module docstring).
    source : str
        Name of the study file, used in messages.
    base_dir : path-like
        Directory against which ``base`` and relative ``data.path`` values are resolved.

    Returns
    -------
    StudySpec

    Raises
    ------
    StudyError
        Unknown top-level key, table or axis name (with the nearest valid name), an axis that
        is not a non-empty list or repeats a value, an invalid base file, a job whose config is
        invalid (naming the axis value responsible), or two jobs with the same config.
    """
    src = str(source)
    base_dir = Path(base_dir)
    if not isinstance(raw, dict):
        raise StudyError(src, "", "a study must be a TOML table")
    valid_top = STUDY_KEYS + schema.SECTIONS
    for k in raw:
        if k not in valid_top:
            raise StudyError(src, str(k), f"unknown key{_suggest(str(k), valid_top)}; valid: "
                                          f"{', '.join(valid_top)}")
    for sec in schema.SECTIONS:
        if sec in raw and not isinstance(raw[sec], dict):
            raise StudyError(src, sec, f"must be a table ([{sec}])")

    merged: dict = {}
    if "base" in raw:
        b = raw["base"]
        if not isinstance(b, str) or not b:
            raise StudyError(src, "base", f"must be the path of a run config, got {b!r}")
        bpath = Path(b) if Path(b).is_absolute() else base_dir / b
        if not bpath.is_file():
            raise StudyError(src, "base", f"no such file {bpath}")
        braw = _config.read_toml(bpath, StudyError)
        if "sweep" in braw or "base" in braw:
            raise StudyError(src, "base", f"{bpath} is a study file; base must be a run config")
        _config.load(bpath)  # a base is a complete run config: its own errors name it
        merged = _absolute_data_path({k: v for k, v in braw.items()}, bpath.resolve().parent)
    own = {k: raw[k] for k in schema.SECTIONS if k in raw}
    merged = _merge_tables(merged, own)

    sweep = raw.get("sweep", {})
    if not isinstance(sweep, dict):
        raise StudyError(src, "sweep", "must be a table ([sweep]) of axis = [values]")
    axes: dict = {}
    for name, values in _flatten(sweep):
        if name in axes:
            raise StudyError(src, f"sweep.{name}", "axis given twice")
        axes[name] = _check_axis(src, name, values)

    names = list(axes)
    jobs: list = []
    seen: dict = {}
    for index, indices in enumerate(itertools.product(*(range(len(axes[n])) for n in names))):
        combo = [axes[n][i] for n, i in zip(names, indices)]
        job_raw = copy.deepcopy(merged)
        for name, v in zip(names, combo):
            sec, key = name.split(".")
            job_raw.setdefault(sec, {})[key] = copy.deepcopy(v)
        try:
            cfg = _config.from_dict(job_raw, src, base_dir)
        except ConfigError as exc:
            raise _job_error(src, exc, names, combo, indices) from None
        jid = cfg.hash()
        values = dict(zip(names, combo))
        if jid in seen:
            raise StudyError(src, "sweep", f"jobs {seen[jid]} and {values} have the same "
                                           f"config (hash {jid}); remove the duplicate value")
        seen[jid] = values
        jobs.append(Job(index=index, id=jid, axis_values=values, config=cfg))
    return StudySpec(source=src, axes=axes, base=merged, jobs=jobs)


def load(path: str | os.PathLike) -> StudySpec:
    """Read, validate and expand a study file.

    Raises
    ------
    StudyError
        Missing or unreadable file, malformed TOML, or any problem listed in :func:`expand`.
    """
    p = Path(path)
    return expand(_config.read_toml(p, StudyError), str(path), p.resolve().parent)


def loads(text: str, source: str = "<string>", base_dir: str | os.PathLike = ".") -> StudySpec:
    """Parse and expand a study given as TOML text."""
    return expand(_config.parse_toml(text, source, StudyError), source, base_dir)
