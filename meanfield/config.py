"""Run configuration: TOML schema, defaults, validation and canonical form.

A config has four tables (the public interface, documented in ``docs/cli.md``)::

    [data]      kind = "file" | "two_point" | "gaussian" | "grid" | "inline"
    [model]     activation = "relu" | "softplus" | "capped"; n_particles = 4000;
                init_scale = 1.0; sharpness = 10.0; cap = 3.0
    [dynamics]  lam = 0.05; eta = 0.05; taus = [1e-2, 1e-3, 1e-4]; steps_per_tau = 40000
                batch_size = 0; seed = 0
    [output]    observe_every = 100; snapshots_per_tau = 1; checkpoint_every = 10000

Every problem is reported as :class:`meanfield.errors.ConfigError` naming the file, the field
and the reason, before any work is done.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from meanfield import defaults
from meanfield.errors import ConfigError

#: Activations the kernels implement (THEORY §3).
ACTIVATIONS = ("relu", "softplus", "capped")

# Per data kind: allowed keys and their defaults (None = required).
DATA_KINDS: dict[str, dict[str, Any]] = {
    "file": {"path": None},
    "two_point": {"d": 2, "norm": 2.5, "labels": "even", "y": 1.0},
    "gaussian": {"n": 10, "d": 2, "seed": 0},
    "grid": {"d": 2, "points_per_axis": 3, "extent": 1.0, "seed": 0},
    "inline": {"X": None, "y": None},
}

DEFAULTS: dict[str, dict[str, Any]] = {
    "model": {"activation": "relu", "n_particles": 4000, "init_scale": 1.0,
              "sharpness": 10.0, "cap": 3.0},
    "dynamics": {"lam": 0.05, "eta": 0.05, "taus": [1e-2, 1e-3, 1e-4],
                 "steps_per_tau": 40000, "max_steps_per_tau": 0, "batch_size": 0, "seed": 0},
    "output": {"observe_every": 100, "snapshots_per_tau": 1, "checkpoint_every": 10000},
}

SECTIONS = ("data", "model", "dynamics", "output")

#: Largest generated data set (``gaussian`` n, ``grid`` points_per_axis**d).
MAX_POINTS = 10**6


@dataclass
class RunConfig:
    """A validated run configuration.

    Attributes
    ----------
    data : dict
        The ``[data]`` table with defaults filled in (``path`` resolved to an absolute path).
    model, dynamics, output : dict
        The other tables with defaults filled in.
    source : str
        Where the config came from (a path, or ``"<embedded default>"``).
    """

    data: dict
    model: dict
    dynamics: dict
    output: dict
    source: str = "<config>"
    base_dir: str = field(default=".", repr=False)

    def as_dict(self) -> dict:
        """The canonical config as a plain dict (the four tables)."""
        return {"data": copy.deepcopy(self.data), "model": copy.deepcopy(self.model),
                "dynamics": copy.deepcopy(self.dynamics), "output": copy.deepcopy(self.output)}

    def canonical_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace): equal configs give equal strings."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        """First 12 hex digits of the SHA-256 of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:12]

    def physics_hash(self) -> str:
        """Hash of everything that changes the trajectory (``output`` excluded).

        Used to refuse a resume under a config that would not reproduce the same run.
        """
        d = self.as_dict()
        d["output"] = {k: v for k, v in d["output"].items() if k != "checkpoint_every"}
        s = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(s.encode()).hexdigest()[:12]

    @property
    def n_particles(self) -> int:
        return int(self.model["n_particles"])

    @property
    def taus(self) -> list[float]:
        return [float(t) for t in self.dynamics["taus"]]


def _suggest(key: str, allowed) -> str:
    near = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.5)
    return f" (did you mean '{near[0]}'?)" if near else ""


def _type_name(v) -> str:
    return type(v).__name__


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool))


def _check(cond: bool, src: str, fld: str, reason: str) -> None:
    if not cond:
        raise ConfigError(src, fld, reason)


def _num(tbl, key, src, sec, *, positive=False, nonneg=False, integer=False, minimum=None):
    v = tbl[key]
    fld = f"{sec}.{key}"
    if integer:
        _check(_is_int(v), src, fld, f"must be an integer, got {_type_name(v)} {v!r}")
    else:
        _check(_is_num(v), src, fld, f"must be a number, got {_type_name(v)} {v!r}")
        _check(math.isfinite(float(v)), src, fld, f"must be finite, got {v!r}")
    if positive:
        _check(v > 0, src, fld, f"must be > 0, got {v!r}")
    if nonneg:
        _check(v >= 0, src, fld, f"must be >= 0, got {v!r}")
    if minimum is not None:
        _check(v >= minimum, src, fld, f"must be >= {minimum}, got {v!r}")
    return v


def validate(raw: dict, source: str = "<config>", base_dir: str | os.PathLike = ".") -> RunConfig:
    """Validate a parsed config dict and fill in defaults.

    Parameters
    ----------
    raw : dict
        The parsed TOML document.
    source : str
        Name of the file, used in error messages.
    base_dir : path-like
        Directory against which a relative ``data.path`` is resolved.

    Returns
    -------
    RunConfig

    Raises
    ------
    ConfigError
        Unknown table or key (with the nearest valid name), wrong type, or out-of-range value
        (``lam <= 0``, ``tau < 0``, ``eta <= 0``, ``n_particles < 1``, ...).
    """
    src = str(source)
    _check(isinstance(raw, dict), src, "", "config must be a TOML table")
    for sec in raw:
        _check(sec in SECTIONS, src, str(sec), f"unknown table{_suggest(sec, SECTIONS)}; "
               f"valid tables: {', '.join(SECTIONS)}")
    for sec in SECTIONS:
        if sec in raw:
            _check(isinstance(raw[sec], dict), src, sec, f"must be a table ([{sec}])")

    # [data]
    _check("data" in raw, src, "data", "missing table [data]")
    data_raw = dict(raw["data"])
    _check("kind" in data_raw, src, "data.kind",
           f"missing; one of {', '.join(DATA_KINDS)}")
    kind = data_raw["kind"]
    _check(isinstance(kind, str) and kind in DATA_KINDS, src, "data.kind",
           f"must be one of {', '.join(repr(k) for k in DATA_KINDS)}, got {kind!r}"
           + (_suggest(kind, DATA_KINDS) if isinstance(kind, str) else ""))
    allowed = DATA_KINDS[kind]
    for k in data_raw:
        if k == "kind":
            continue
        _check(k in allowed, src, f"data.{k}", f"unknown key for kind '{kind}'"
               f"{_suggest(k, allowed)}; valid keys: {', '.join(allowed) or '(none)'}")
    data = {"kind": kind}
    for k, dflt in allowed.items():
        if k not in data_raw:
            _check(dflt is not None, src, f"data.{k}", f"missing (required for kind '{kind}')")
            data[k] = copy.deepcopy(dflt)
        else:
            data[k] = copy.deepcopy(data_raw[k])
    if kind == "file":
        p = data["path"]
        _check(isinstance(p, str) and p != "", src, "data.path", "must be a non-empty string")
        path = Path(p)
        if not path.is_absolute():
            path = Path(base_dir) / path
        data["path"] = str(path.resolve())
    elif kind == "two_point":
        _num(data, "d", src, "data", integer=True, minimum=1)
        _num(data, "norm", src, "data", positive=True)
        _check(data["labels"] in ("even", "odd"), src, "data.labels",
               f"must be 'even' or 'odd', got {data['labels']!r}")
        _num(data, "y", src, "data")
        data["norm"] = float(data["norm"])
        data["y"] = float(data["y"])
    elif kind == "gaussian":
        _num(data, "n", src, "data", integer=True, minimum=1)
        _num(data, "d", src, "data", integer=True, minimum=1)
        _num(data, "seed", src, "data", integer=True, nonneg=True)
        _check(data["n"] * data["d"] <= MAX_POINTS * 10, src, "data.n",
               f"n*d = {data['n'] * data['d']} exceeds {MAX_POINTS * 10} values")
    elif kind == "grid":
        _num(data, "d", src, "data", integer=True, minimum=1)
        _num(data, "points_per_axis", src, "data", integer=True, minimum=1)
        _num(data, "extent", src, "data", positive=True)
        _num(data, "seed", src, "data", integer=True, nonneg=True)
        _check(data["points_per_axis"] ** data["d"] <= MAX_POINTS, src, "data.points_per_axis",
               f"points_per_axis**d = {data['points_per_axis']}**{data['d']} exceeds "
               f"{MAX_POINTS} points")
        data["extent"] = float(data["extent"])
    elif kind == "inline":
        _check(isinstance(data["X"], list) and len(data["X"]) > 0, src, "data.X",
               "must be a non-empty list of rows")
        _check(isinstance(data["y"], list), src, "data.y", "must be a list of numbers")
        rows = [r if isinstance(r, list) else [r] for r in data["X"]]
        for i, r in enumerate(rows):
            for v in r:
                _check(_is_num(v), src, f"data.X[{i}]", f"must hold numbers, got {v!r}")
        for i, v in enumerate(data["y"]):
            _check(_is_num(v), src, f"data.y[{i}]", f"must be a number, got {v!r}")
        data["X"] = [[float(v) for v in r] for r in rows]
        data["y"] = [float(v) for v in data["y"]]

    tables = {"data": data}
    for sec in ("model", "dynamics", "output"):
        tbl_raw = raw.get(sec, {})
        for k in tbl_raw:
            _check(k in DEFAULTS[sec], src, f"{sec}.{k}", f"unknown key{_suggest(k, DEFAULTS[sec])}"
                   f"; valid keys: {', '.join(DEFAULTS[sec])}")
        tbl = copy.deepcopy(DEFAULTS[sec])
        tbl.update(copy.deepcopy(tbl_raw))
        tables[sec] = tbl

    m, dyn, out = tables["model"], tables["dynamics"], tables["output"]
    _check(isinstance(m["activation"], str) and m["activation"] in ACTIVATIONS, src,
           "model.activation", f"must be one of {', '.join(ACTIVATIONS)}, got {m['activation']!r}")
    _num(m, "n_particles", src, "model", integer=True, minimum=1)
    _num(m, "init_scale", src, "model", positive=True)
    _num(m, "sharpness", src, "model", positive=True)
    _num(m, "cap", src, "model", positive=True)
    for k in ("init_scale", "sharpness", "cap"):
        m[k] = float(m[k])

    _num(dyn, "lam", src, "dynamics", positive=True)
    _num(dyn, "eta", src, "dynamics", positive=True)
    taus = dyn["taus"]
    if _is_num(taus):
        taus = [taus]
    _check(isinstance(taus, list) and len(taus) > 0, src, "dynamics.taus",
           "must be a non-empty list of temperatures")
    for i, t in enumerate(taus):
        _check(_is_num(t) and math.isfinite(float(t)), src, f"dynamics.taus[{i}]",
               f"must be a finite number, got {t!r}")
        _check(t >= 0, src, f"dynamics.taus[{i}]", f"temperature must be >= 0, got {t!r}")
    dyn["taus"] = [float(t) for t in taus]
    if dyn["steps_per_tau"] == "auto":
        _num(dyn, "max_steps_per_tau", src, "dynamics", integer=True, minimum=16)
        _check(dyn["max_steps_per_tau"] < 2**31 // max(1, len(taus)), src,
               "dynamics.max_steps_per_tau", "the whole ladder must stay below 2**31 steps")
    else:
        _check(_is_int(dyn["steps_per_tau"]), src, "dynamics.steps_per_tau",
               f"must be an integer or \"auto\", got {_type_name(dyn['steps_per_tau'])} "
               f"{dyn['steps_per_tau']!r}")
        _num(dyn, "steps_per_tau", src, "dynamics", integer=True, minimum=1)
        _check(dyn["max_steps_per_tau"] == 0, src, "dynamics.max_steps_per_tau",
               "only with steps_per_tau = \"auto\"")
    _num(dyn, "batch_size", src, "dynamics", integer=True, nonneg=True)
    _num(dyn, "seed", src, "dynamics", integer=True, nonneg=True)
    _check(dyn["seed"] < 2**63, src, "dynamics.seed", "must be < 2**63")
    dyn["lam"] = float(dyn["lam"])
    dyn["eta"] = float(dyn["eta"])
    _check(dyn["eta"] * dyn["lam"] < 2.0, src, "dynamics.eta",
           f"eta*lam = {dyn['eta'] * dyn['lam']:g} >= 2 makes the weight-decay step unstable")

    _num(out, "observe_every", src, "output", integer=True, minimum=1)
    _num(out, "snapshots_per_tau", src, "output", integer=True, minimum=1)
    _num(out, "checkpoint_every", src, "output", integer=True, minimum=1)
    if dyn["steps_per_tau"] != "auto":
        _check(out["snapshots_per_tau"] <= dyn["steps_per_tau"], src,
               "output.snapshots_per_tau",
               f"must be <= dynamics.steps_per_tau ({dyn['steps_per_tau']})")

    return RunConfig(data=data, model=m, dynamics=dyn, output=out, source=src,
                     base_dir=str(base_dir))


def loads(text: str, source: str = "<string>", base_dir: str | os.PathLike = ".") -> RunConfig:
    """Parse and validate a config given as TOML text.

    Raises
    ------
    ConfigError
        Malformed TOML (with line and column) or any validation failure.
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "", f"malformed TOML: {exc}") from None
    return validate(raw, source, base_dir)


def load(path: str | os.PathLike) -> RunConfig:
    """Read, parse and validate a TOML config file.

    Parameters
    ----------
    path : path-like
        The TOML file. A relative ``data.path`` inside it is resolved against its directory.

    Returns
    -------
    RunConfig
        Validated, with every default filled in (keys, defaults and units: ``docs/cli.md``).

    Raises
    ------
    ConfigError
        Missing or unreadable file, malformed TOML, or invalid values.
    """
    p = Path(path)
    return validate(read_toml(p), str(path), p.resolve().parent)


def read_toml(path, err=ConfigError) -> dict:
    """Parse a TOML file into a dict.

    Raises
    ------
    err (default ConfigError)
        Missing, unreadable or non-UTF-8 file, or malformed TOML, naming the file.
    """
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise err(str(path), "", "no such file") from None
    except IsADirectoryError:
        raise err(str(path), "", "is a directory, expected a TOML file") from None
    except UnicodeDecodeError:
        raise err(str(path), "", "not a UTF-8 text file (expected TOML)") from None
    except OSError as exc:
        raise err(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise err(str(path), "", f"malformed TOML: {exc}") from None


def from_dict(raw: dict, source: str = "<dict>", base_dir: str | os.PathLike = ".") -> RunConfig:
    """Validate a config given as a nested dict (same schema as the TOML file).

    Parameters
    ----------
    raw : dict
        ``{"data": {...}, "model": {...}, "dynamics": {...}, "output": {...}}``; missing
        tables and keys take their defaults (``docs/cli.md``). Not modified.
    source : str
        Name used in error messages.
    base_dir : path-like
        Directory against which a relative ``data.path`` is resolved (default: the current one).

    Returns
    -------
    RunConfig

    Raises
    ------
    ConfigError
        Unknown tables or keys (with the nearest valid name), wrong types, out-of-range values.
    """
    return validate(copy.deepcopy(raw), source, base_dir)


def from_canonical_json(text: str, source: str = "<run file>") -> RunConfig:
    """Rebuild a :class:`RunConfig` from the canonical JSON stored in a run file."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(source, "parameters/config", f"not valid JSON: {exc}") from None
    return validate(raw, source, "/")


def embedded_default() -> RunConfig:
    """The embedded default config: the 2-D eight-point set ``data/plane8.csv``, inlined.

    Parameters
    ----------
    None

    Returns
    -------
    RunConfig
        ``N = 4000``, ``λ = 0.05``, ``η = 0.05``, ``τ = 10⁻², 10⁻³, 10⁻⁴``, 40 000 steps per ``τ``
        (what ``meanfield run`` runs without a config).

    Raises
    ------
    Nothing (the embedded text is tested).
    """
    return loads(defaults.DEFAULT_TOML, "<embedded default>")
