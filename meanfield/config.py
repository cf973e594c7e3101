"""Run configuration: reading TOML, the validated :class:`RunConfig` and its canonical form.

A config has four tables (the public interface, documented in ``docs/cli.md``), each a frozen
dataclass of :mod:`meanfield.schema` whose field defaults are the defaults of the tool::

    [data]      kind = "file" | "two_point" | "gaussian" | "grid" | "inline"   (DATA_KINDS)
    [model]     ModelConfig:    activation, n_particles, init_scale, sharpness, cap
    [dynamics]  DynamicsConfig: lam, eta, taus, steps_per_tau, max_steps_per_tau, batch_size, seed,
                                chains
    [output]    OutputConfig:   observe_every, snapshots_per_tau, checkpoint_every

Every problem is reported as :class:`meanfield.errors.ConfigError` naming the file, the field
and the reason, before any work is done.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from meanfield import defaults
from meanfield.errors import ConfigError
from meanfield.schema import (
    DATA_KINDS,
    DataConfig,
    DynamicsConfig,
    ModelConfig,
    OutputConfig,
    validate_tables,
)
from solvers.schedule import Schedule


def json_hash(text: str) -> str:
    """First 12 hex digits of the SHA-256 of ``text``: a config's ``config_hash`` and
    ``physics_hash`` (of their canonical JSON), and a run file's check of its stored
    ``config_json`` against its ``config_hash``."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class RunConfig:
    """A validated run configuration.

    Attributes
    ----------
    data : FileData, TwoPointData, GaussianData, GridData or InlineData
        The ``[data]`` table (a file ``path`` resolved to an absolute path).
    model : ModelConfig
    dynamics : DynamicsConfig
    output : OutputConfig
    source : str
        Where the config came from (a path, or ``"<embedded default>"``).
    """

    data: DataConfig
    model: ModelConfig = ModelConfig()
    dynamics: DynamicsConfig = DynamicsConfig()
    output: OutputConfig = OutputConfig()
    #: Where the config came from: named in messages, not part of its identity (two configs
    #: with the same tables are equal, as their hashes are).
    source: str = field(default="<config>", compare=False)
    base_dir: str = field(default=".", repr=False, compare=False)

    def as_dict(self) -> dict:
        """The canonical config as a plain dict (the four tables)."""
        dyn = dataclasses.asdict(self.dynamics)
        dyn["taus"] = list(dyn["taus"])
        for key in ("jumps", "radial", "fine", "exchange"):     # "mala" only: others keep their hash
            if dyn.get(key) is None:
                dyn.pop(key, None)
        for key in ("fine", "exchange"):    # 0: configs older than the key keep their hash
            if dyn.get(key) == 0.0:
                dyn.pop(key, None)
        if dyn.get("chains") == 1:          # one chain: configs older than the key keep theirs
            dyn.pop("chains", None)
        data = {"kind": self.data.KIND, **dataclasses.asdict(self.data)}
        for key in ("target", "features"):      # only when given: older configs keep their hash
            if key in data:
                if data[key]:
                    data[key] = list(data[key]) if key == "features" else data[key]
                else:
                    del data[key]
        return {"data": data,
                "model": dataclasses.asdict(self.model), "dynamics": dyn,
                "output": dataclasses.asdict(self.output)}

    def canonical_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace): equal configs give equal strings."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        """First 12 hex digits of the SHA-256 of :meth:`canonical_json` (:func:`json_hash`)."""
        return json_hash(self.canonical_json())

    def physics_hash(self) -> str:
        """Hash of everything in the config that changes the trajectory, except the data set.

        First 12 hex digits of the SHA-256 of the canonical JSON of ``model``, ``dynamics``
        and ``output`` without ``checkpoint_every``. The ``[data]`` table is left out: where
        the data come from (a file's path, a generator's parameters) does not matter, only
        their values, which :func:`meanfield.data.data_hash` identifies. A run is the pair
        (``physics_hash``, ``data_hash``): a resume, and a study's "already done", need both
        to match; a run folder that moves keeps both.
        """
        d = self.as_dict()
        del d["data"]
        d["output"] = {k: v for k, v in d["output"].items() if k != "checkpoint_every"}
        s = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return json_hash(s)

    @property
    def n_particles(self) -> int:
        """``model.n_particles``."""
        return self.model.n_particles

    @property
    def taus(self) -> list[float]:
        """``dynamics.taus`` as a list."""
        return list(self.dynamics.taus)

    @property
    def schedule(self) -> Schedule:
        """The temperature ladder of the run (:class:`solvers.schedule.Schedule`)."""
        return Schedule(self.dynamics.taus, self.dynamics.steps_per_tau,
                        self.output.observe_every, self.output.snapshots_per_tau,
                        self.dynamics.max_steps_per_tau)


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
    data, model, dynamics, output = validate_tables(raw, str(source), base_dir)
    return RunConfig(data=data, model=model, dynamics=dynamics, output=output,
                     source=str(source), base_dir=str(base_dir))


def check_against_data(cfg: RunConfig, n: int, d: int) -> None:
    """The limits that depend on the data set (``n`` points in dimension ``d``).

    Raises
    ------
    ConfigError
        ``dynamics.batch_size > n``, or ``n_particles * (d + 2)`` noise draws per step beyond
        the noise counter (:data:`solvers.limits.MAX_DRAWS`).
    """
    from solvers.limits import MAX_DRAWS
    b = int(cfg.dynamics.batch_size)
    if b > n:
        raise ConfigError(cfg.source, "dynamics.batch_size",
                          f"must be <= the number of samples n={n}, got {b}")
    N = cfg.n_particles
    if N * (d + 2) >= MAX_DRAWS:
        raise ConfigError(cfg.source, "model.n_particles",
                          f"n_particles * (d+2) = {N * (d + 2)} noise draws per step, must be "
                          f"< 2**32 (the noise counter's limit)")


def ladder_order_warning(cfg: RunConfig) -> str | None:
    """A one-line warning for a ladder that runs cold to hot without ``model.init = "convex"``.

    Legal, but stages usually run hot to cold, each warm-started from the previous one
    (docs/cli.md); cold to hot is meant to start from the convex ``τ → 0`` solution (THEORY
    §2.2). A ladder that only comes back to a temperature (a reheating study, ``[1e-2, 1e-3,
    1e-2]``) is not warned about.

    Parameters
    ----------
    cfg : RunConfig

    Returns
    -------
    str or None
        The warning (without a ``warning:`` prefix), or ``None``: the ladder is not ascending
        (non-decreasing with its last ``τ`` above its first), or ``model.init`` is
        ``"convex"``.
    """
    taus = cfg.taus
    ascending = (len(taus) > 1 and taus[-1] > taus[0]
                 and all(b >= a for a, b in zip(taus, taus[1:])))
    if not ascending or cfg.model.init == "convex":
        return None
    return (f"dynamics.taus runs cold to hot ({taus[0]:g} -> {taus[-1]:g}) from model.init = "
            f"\"{cfg.model.init}\"; stages usually run hot to cold, each warm-started from the "
            f"previous (cold to hot is meant after model.init = \"convex\"; docs/cli.md)")


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
        raw = Path(path).read_bytes()
        if raw.startswith(b"\x89HDF"):
            raise err(str(path), "", "is an HDF5 file (a run file?), expected a TOML config; "
                                     "'meanfield inspect' and 'meanfield analyze' read run "
                                     "files")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise err(str(path), "", "no such file") from None
    except IsADirectoryError:
        raise err(str(path), "", "is a directory, expected a TOML file") from None
    except UnicodeDecodeError:
        raise err(str(path), "", "not a UTF-8 text file (expected TOML)") from None
    except OSError as exc:
        raise err(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    hint = ""
    if Path(path).suffix.lower() in (".csv", ".npy", ".npz", ".txt"):
        hint = (" (a data file? a config names it in its [data] table: "
                "data.kind = \"file\", data.path = ...)")
    return parse_toml(text, str(path), err, hint)


#: The deepest nesting of tables and arrays a config or study file may hold (the deepest the
#: schema uses is 4: ``[data] X = [[...]]``, a sweep axis of lists).
MAX_DEPTH = 32


def parse_toml(text: str, source: str, err=ConfigError, hint: str = "") -> dict:
    """Parse TOML ``text`` (from ``source``) into a dict, within bounds.

    Nesting deeper than :data:`MAX_DEPTH` (``a = [[[[...`` would otherwise exhaust Python's
    recursion limit in the parser, or later) and integers longer than Python's limit on
    integer-string conversion (``sys.get_int_max_str_digits()``, 4300 digits) are refused.

    Raises
    ------
    err (default ConfigError)
        Malformed TOML, or either bound exceeded, naming ``source`` (one line).
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise err(source, "", f"malformed TOML: {exc}{hint}") from None
    except RecursionError:
        raise err(source, "", f"nested too deeply (tables or arrays more than {MAX_DEPTH} "
                              "levels deep)") from None
    except ValueError as exc:       # an integer beyond Python's int-string limit
        raise err(source, "", _int_limit(exc)) from None
    depth = nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise err(source, "", f"nested too deeply ({depth} levels of tables or arrays, at "
                              f"most {MAX_DEPTH})")
    return raw


def _int_limit(exc: ValueError) -> str:
    """The reason for a ``ValueError`` of Python's integer-string conversion limit."""
    if "integer string conversion" in str(exc) and hasattr(sys, "get_int_max_str_digits"):
        return (f"holds an integer of more than {sys.get_int_max_str_digits()} digits, "
                "beyond any value a config takes")
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"malformed TOML: {first}"


def nesting_depth(value) -> int:
    """How deeply dicts and lists nest in ``value`` (a scalar is 0), without recursion."""
    depth, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if items is None:
            continue
        depth = max(depth, d)
        if d <= MAX_DEPTH:                   # one level past the bound is enough to report
            stack.extend((x, d + 1) for x in items)
    return depth


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
    """Rebuild a :class:`RunConfig` from the canonical JSON stored in a run file.

    Raises
    ------
    ConfigError
        Not JSON, or a config that does not validate today (see :func:`stored_config` for the
        lenient reading of an old run file).
    """
    return validate(_stored_json(text, source), source, "/")


def _stored_json(text: str, source: str) -> dict:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(source, "parameters/config", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(source, "parameters/config", "nested too deeply") from None
    except ValueError as exc:       # an integer beyond Python's int-string limit
        raise ConfigError(source, "parameters/config", _int_limit(exc)) from None
    if nesting_depth(raw) > MAX_DEPTH:
        raise ConfigError(source, "parameters/config", "nested too deeply")
    return raw


def stored_config(text: str, source: str = "<run file>") -> tuple[RunConfig, str | None]:
    """The config stored in a run file, typed: validated, or leniently when it no longer
    validates (a file written by an older version whose keys or limits have changed since).

    The lenient reading takes each table's known keys as stored, without checking them, and
    the defaults of :mod:`meanfield.schema` for missing ones; unknown tables and keys are
    dropped. The run's data are in the file, so ``[data]`` is provenance only.

    Parameters
    ----------
    text : str
        The stored canonical JSON (``parameters.config_json``).
    source : str
        The run file, named in messages.

    Returns
    -------
    (RunConfig, str or None)
        The config, and ``None`` when it validates, else the reason it does not (the
        :class:`ConfigError` message, for the caller's warning).

    Raises
    ------
    ConfigError
        Not JSON, not a JSON object, or a ``[data]`` table without a known ``kind``.
    """
    raw = _stored_json(text, source)
    try:
        return validate(copy.deepcopy(raw), source, "/"), None
    except ConfigError as exc:
        reason = str(exc)
    if not isinstance(raw, dict):
        raise ConfigError(source, "parameters/config", "the stored config is not a JSON object")
    data = dict(raw.get("data") or {})
    kind = data.pop("kind", None)
    if kind not in DATA_KINDS:
        raise ConfigError(source, "data.kind", f"stored kind {kind!r} is not one of "
                                               f"{', '.join(DATA_KINDS)}")

    def table(sec, cls, tbl):
        tbl = tbl if isinstance(tbl, dict) else {}
        known = {f.name: tbl[f.name] for f in dataclasses.fields(cls) if f.name in tbl}
        for f in dataclasses.fields(cls):
            if f.name not in known and f.default is dataclasses.MISSING:
                raise ConfigError(source, f"{sec}.{f.name}", "missing in the stored config")
        if "taus" in known and isinstance(known["taus"], list):
            known["taus"] = tuple(known["taus"])
        return cls(**known)

    cfg = RunConfig(data=table("data", DATA_KINDS[kind], data),
                    model=table("model", ModelConfig, raw.get("model")),
                    dynamics=table("dynamics", DynamicsConfig, raw.get("dynamics")),
                    output=table("output", OutputConfig, raw.get("output")),
                    source=source, base_dir="/")
    return cfg, reason


def embedded_default() -> RunConfig:
    """The embedded default config: the 2-D eight-point set ``data/plane8.csv``, inlined.

    Returns
    -------
    RunConfig
        ``N = 4000``, ``λ = 0.05``, ``η = 0.05``, ``τ = 10⁻², 10⁻³, 10⁻⁴``, each ``τ`` until
        its stationarity verdict in chunks of 40 000 steps, at most 320 000 (what
        ``meanfield run`` runs without a config).

    Raises
    ------
    Nothing (the embedded text is tested).
    """
    return loads(defaults.DEFAULT_TOML, "<embedded default>")
