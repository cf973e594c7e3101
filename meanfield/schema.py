"""The schema of a run config: its tables and their validation (the reference is ``docs/cli.md``).

Each table is a frozen dataclass whose fields are its keys and whose field defaults are the
defaults of the tool (the one place they are written): one class per ``[data]`` kind, and
:class:`ModelConfig`, :class:`DynamicsConfig`, :class:`OutputConfig`. Each validates itself;
every problem is a :class:`meanfield.errors.ConfigError` naming the file, the field and the
reason.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from meanfield.errors import ConfigError
from solvers.integrators import INTEGRATORS
from solvers.limits import (
    ACTIVATIONS,
    DEFAULT_EXCHANGE,
    DEFAULT_FINE,
    DEFAULT_JUMPS,
    DEFAULT_RADIAL,
    MAX_STEPS,
)
from solvers.schedule import AUTO_CHUNKS

#: Initialisations: i.i.d. Gaussian, or the convex τ → 0 solution's rays (THEORY §2.2).
INITS = ("random", "convex")

#: Largest generated data set (``gaussian`` n, ``grid`` points_per_axis**d).
MAX_POINTS = 10**6
#: Largest particle count (the particles of one frame, N (d+2) float64, must fit in memory).
MAX_PARTICLES = 10**8
#: Largest input dimension of a generated data set.
MAX_DIM = 10**5
#: Bound on the magnitude of the float parameters (not the temperatures), so that the
#: products and squares the dynamics forms (init_scale**2, norm**2, eta*lam) stay finite;
#: the same bound as ``solvers.inputs.MAX_ABS`` on data values (kept numpy-free here).
MAX_FLOAT = 1e15
#: Smallest lam: the stationary scale tau/lam and mean(y**2)/lam must stay finite.
MIN_LAM = 1e-15
#: Smallest positive temperature (``0`` stays allowed for ``"em"`` and ``"lm"``: plain gradient
#: descent). Below it the noise ``sqrt(2 eta tau)`` of a step (``eta <= 1``) is under the
#: rounding unit of coordinates of order 1, so the run is numerically the ``tau = 0`` one, while
#: the quantities formed from ``1/tau`` leave the floats: at ``tau = 2.2e-308`` (subnormal) the
#: radial move of ``"mala"`` divided by zero, and the Gibbs reference spent minutes in its
#: continuation ladder before giving up (docs/cli.md).
MIN_TAU = 1e-30
#: Most independent chains (``dynamics.chains``) in one run.
MAX_CHAINS = 64
#: Most snapshot frames of a run.
MAX_FRAMES = 10**6


# --- checks shared by the tables ------------------------------------------------------------

def _suggest(key: str, allowed) -> str:
    near = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.5)
    return f" (did you mean '{near[0]}'?)" if near else ""


def _type_name(v) -> str:
    return type(v).__name__


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool))


def _as_float(v) -> float:
    """``float(v)``; an integer beyond the float range (TOML integers are unbounded) is
    ``±inf``, so that the finiteness check names the field instead of raising."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _check(cond: bool, src: str, fld: str, reason: str) -> None:
    if not cond:
        raise ConfigError(src, fld, reason)


def _num(tbl, key, src, sec, *, positive=False, nonneg=False, integer=False, minimum=None,
         maximum=None, why=""):
    """Check ``tbl[key]``: type, finiteness, sign, ``[minimum, maximum]`` (the bound and
    ``why`` it exists are named in the message). Floats are bounded by :data:`MAX_FLOAT`
    and integers by :data:`MAX_STEPS` unless ``maximum`` says otherwise."""
    v = tbl[key]
    fld = f"{sec}.{key}"
    if integer:
        _check(_is_int(v), src, fld, f"must be an integer, got {_type_name(v)} {v!r}")
    else:
        _check(_is_num(v), src, fld, f"must be a number, got {_type_name(v)} {v!r}")
        _check(math.isfinite(_as_float(v)), src, fld, f"must be finite, got {v!r}")
    if positive:
        _check(v > 0, src, fld, f"must be > 0, got {v!r}")
    if nonneg:
        _check(v >= 0, src, fld, f"must be >= 0, got {v!r}")
    if minimum is not None:
        _check(v >= minimum, src, fld, f"must be >= {minimum}, got {v!r}")
    if maximum is None:
        maximum, why = ((MAX_STEPS, why or "the largest count a run can hold") if integer
                        else (MAX_FLOAT, why or "larger values overflow the dynamics"))
    bound = str(maximum) if isinstance(maximum, int) else f"{maximum:g}"
    _check(abs(v) <= maximum, src, fld, f"must be <= {bound}"
           + (f" ({why})" if why else "") + f", got {v!r}")
    return v


def _defaults(cls) -> dict[str, Any]:
    """Field name -> default (``None`` for a required field) of a table dataclass."""
    return {f.name: (None if f.default is dataclasses.MISSING else f.default)
            for f in dataclasses.fields(cls)}


def home_table(key: str, other_than: str | None = None) -> str | None:
    """The table (``"model"``, ``"dynamics"`` or ``"output"``) that has the key ``key``,
    other than ``other_than``; ``None`` if none has it."""
    return next((t for t, cls in _KEY_TABLES.items()
                 if t != other_than and key in _defaults(cls)), None)


def misplaced_hint(key: str, sec: str | None, prefix: str = "") -> str:
    """``" here: it belongs in [T] (PREFIX T.KEY)"`` when ``key``, unknown in table ``sec``,
    is a key of another table ``T``; ``""`` otherwise."""
    home = home_table(key, sec)
    return f" here: it belongs in [{home}] ({prefix}{home}.{key})" if home is not None else ""


def _elsewhere(key: str, sec: str | None, allowed) -> str:
    """The hint for an unknown ``key`` of table ``sec``: the table it belongs in, or else the
    nearest valid name."""
    return misplaced_hint(key, sec) or _suggest(key, allowed)


def _check_keys(tbl: dict, cls, src: str, sec: str) -> None:
    """Unknown keys of a table, with the table a key of another table belongs in, or else the
    nearest valid name."""
    allowed = _defaults(cls)
    for k in tbl:
        if k in allowed:
            continue
        hint = _elsewhere(k, sec, allowed)
        _check(False, src, f"{sec}.{k}", f"unknown key{hint}; valid keys: {', '.join(allowed)}")


def _filled(tbl: dict, cls) -> dict[str, Any]:
    """The table with the defaults of ``cls`` filled in (a deep copy)."""
    out = {k: copy.deepcopy(v) for k, v in _defaults(cls).items()}
    out.update(copy.deepcopy(tbl))
    return out


# --- [data] ---------------------------------------------------------------------------------

_INT1 = {"integer": True, "minimum": 1}
_POSITIVE = {"positive": True}
_SEED = {"integer": True, "nonneg": True, "maximum": 2**63 - 1, "why": "a 64-bit seed"}
_DIM = {"integer": True, "minimum": 1, "maximum": MAX_DIM, "why": "largest generated dimension"}


def _nums(table, src: str, **checks) -> None:
    """:func:`_num` on fields of a ``[data]`` table, in the order given."""
    values = dataclasses.asdict(table)
    for key, kw in checks.items():
        _num(values, key, src, "data", **kw)


def _absolute(path: Path) -> Path:
    """``path`` made absolute, its links resolved, but keeping the name the user gave when it
    is a link to a file of another suffix: the file type comes from that name (a data file in a
    content store, git-annex, DataLad or DVC, is a link to a file named by its hash, with no
    ``.csv``). A link whose target keeps the suffix resolves as before (the config's hash, which
    holds the path, is unchanged)."""
    full = path.resolve()
    if full.suffix.lower() == path.suffix.lower():
        return full
    return path.parent.resolve() / path.name


@dataclass(frozen=True)
class FileData:
    """``kind = "file"``: a CSV, ``.npy`` or ``.npz`` file (``meanfield.data.load_file``)."""

    KIND: ClassVar[str] = "file"
    path: str
    #: The ``y`` column of a CSV file with a header line (required there), by name.
    target: str = ""
    #: Its input columns, by name (default: every column but ``target``).
    features: tuple = ()

    def _validated(self, src: str, base_dir) -> FileData:
        p = self.path
        _check(isinstance(p, str) and p != "", src, "data.path", "must be a non-empty string")
        path = Path(p)
        if not path.is_absolute():
            path = Path(base_dir) / path
        _check(not path.is_dir(), src, "data.path", f"{p} is a folder, expected a data file "
                                                    "(.csv, .npy or .npz)")
        t, fs = self.target, self.features
        _check(isinstance(t, str), src, "data.target",
               f"must be a column name (a non-empty string), got {t!r}")
        _check(isinstance(fs, (list, tuple)) and all(isinstance(c, str) for c in fs)
               and (len(fs) > 0 or fs == ()), src, "data.features",
               f"must be a non-empty list of column names, got {fs!r}")
        if t or fs:
            _check(path.suffix.lower() == ".csv", src, "data.target" if t else "data.features",
                   "columns are chosen by name only in a .csv file with a header line")
        return FileData(str(_absolute(path)), t, tuple(fs))


@dataclass(frozen=True)
class TwoPointData:
    """``kind = "two_point"``: ``x = ±norm·e_1`` with even or odd labels ([LJM26] Prop. 7)."""

    KIND: ClassVar[str] = "two_point"
    d: int = 2
    norm: float = 2.5
    labels: str = "even"
    y: float = 1.0

    def _validated(self, src: str, base_dir) -> TwoPointData:
        _nums(self, src, d=_DIM, norm=_POSITIVE)
        _check(self.labels in ("even", "odd"), src, "data.labels",
               f"must be 'even' or 'odd', got {self.labels!r}")
        _nums(self, src, y={})
        return dataclasses.replace(self, norm=float(self.norm), y=float(self.y))


@dataclass(frozen=True)
class GaussianData:
    """``kind = "gaussian"``: ``x_j ~ N(0, I_d)`` and ``y_j ~ N(0, 1)``, i.i.d.

    Seeded by ``seed`` (NumPy ``default_rng``); at most ``10 · MAX_POINTS`` values ``n d``.
    """

    KIND: ClassVar[str] = "gaussian"
    n: int = 10
    d: int = 2
    seed: int = 0

    def _validated(self, src: str, base_dir) -> GaussianData:
        _nums(self, src, n={"integer": True, "minimum": 1, "maximum": MAX_POINTS * 10,
                            "why": "largest generated data set"}, d=_DIM, seed=_SEED)
        _check(self.n * self.d <= MAX_POINTS * 10, src, "data.n",
               f"n*d = {self.n * self.d} exceeds {MAX_POINTS * 10} values")
        return self


@dataclass(frozen=True)
class GridData:
    """``kind = "grid"``: a regular grid on ``[−extent, extent]^d``, ``y ~ N(0, 1)`` seeded."""

    KIND: ClassVar[str] = "grid"
    d: int = 2
    points_per_axis: int = 3
    extent: float = 1.0
    seed: int = 0

    def _validated(self, src: str, base_dir) -> GridData:
        _nums(self, src, d=_DIM, points_per_axis={"integer": True, "minimum": 1,
                                                   "maximum": MAX_POINTS,
                                                   "why": "largest generated data set"},
              extent=_POSITIVE, seed=_SEED)
        # by logarithms: points_per_axis**d itself can be astronomically large
        _check(self.points_per_axis == 1 or self.d * math.log(self.points_per_axis)
               <= math.log(MAX_POINTS) + 1e-9, src, "data.points_per_axis",
               f"points_per_axis**d = {self.points_per_axis}**{self.d} exceeds "
               f"{MAX_POINTS} points")
        return dataclasses.replace(self, extent=float(self.extent))


@dataclass(frozen=True)
class InlineData:
    """``kind = "inline"``: the points written in the config, ``X`` rows and ``y``."""

    KIND: ClassVar[str] = "inline"
    X: list
    y: list

    def _validated(self, src: str, base_dir) -> InlineData:
        _check(isinstance(self.X, list) and len(self.X) > 0, src, "data.X",
               "must be a non-empty list of rows")
        _check(isinstance(self.y, list), src, "data.y", "must be a list of numbers")
        rows = [r if isinstance(r, list) else [r] for r in self.X]
        for i, r in enumerate(rows):
            for v in r:
                _check(_is_num(v), src, f"data.X[{i}]", f"must hold numbers, got {v!r}")
                _check(not math.isinf(_as_float(v)) or isinstance(v, float), src,
                       f"data.X[{i}]", f"must hold numbers within the float range, got {v!r}")
        for i, v in enumerate(self.y):
            _check(_is_num(v), src, f"data.y[{i}]", f"must be a number, got {v!r}")
            _check(not math.isinf(_as_float(v)) or isinstance(v, float), src, f"data.y[{i}]",
                   f"must be a number within the float range, got {v!r}")
        return InlineData([[float(v) for v in r] for r in rows], [float(v) for v in self.y])


#: The ``[data]`` kinds and their tables.
DATA_KINDS: dict[str, type] = {c.KIND: c for c in (FileData, TwoPointData, GaussianData,
                                                     GridData, InlineData)}

DataConfig = FileData | TwoPointData | GaussianData | GridData | InlineData


def data_from_table(raw: Any, src: str, base_dir: str | os.PathLike = ".") -> DataConfig:
    """Validate the ``[data]`` table.

    Parameters
    ----------
    raw : dict
        The table as parsed.
    src, base_dir
        The config's name and folder (a relative ``path`` is resolved against it).

    Returns
    -------
    FileData, TwoPointData, GaussianData, GridData or InlineData

    Raises
    ------
    ConfigError
        Missing or unknown ``kind``, unknown or missing keys, invalid values.
    """
    data_raw = dict(raw)
    _check("kind" in data_raw, src, "data.kind", f"missing; one of {', '.join(DATA_KINDS)}")
    kind = data_raw.pop("kind")
    _check(isinstance(kind, str) and kind in DATA_KINDS, src, "data.kind",
           f"must be one of {', '.join(repr(k) for k in DATA_KINDS)}, got {kind!r}"
           + (_suggest(kind, DATA_KINDS) if isinstance(kind, str) else ""))
    cls = DATA_KINDS[kind]
    allowed = _defaults(cls)
    for k in data_raw:
        _check(k in allowed, src, f"data.{k}", f"unknown key for kind '{kind}'"
               f"{_elsewhere(k, 'data', allowed)}; valid keys: {', '.join(allowed) or '(none)'}")
    for k, dflt in allowed.items():
        _check(k in data_raw or dflt is not None, src, f"data.{k}",
               f"missing (required for kind '{kind}')")
    return cls(**_filled(data_raw, cls))._validated(src, base_dir)


# --- [model], [dynamics], [output] -------------------------------------------------------------

class _Table:
    """A config table: the fields of the dataclass are its keys, their defaults its defaults."""

    @classmethod
    def from_table(cls, raw: dict, src: str, **context):
        """Validate ``raw`` (keys already checked) with the defaults filled in.

        ``context`` holds the tables validated before (``dynamics`` for ``[output]``).
        Raises :class:`ConfigError`.
        """
        return cls(**cls._checked(_filled(raw, cls), src, **context))


@dataclass(frozen=True)
class ModelConfig(_Table):
    """The ``[model]`` table: the network and its initialisation.

    Attributes
    ----------
    activation : {"relu", "softplus", "capped"}
        ``σ`` (THEORY §3).
    n_particles : int
        Number of particles (neurons) ``N >= 1``.
    init : {"random", "convex"}
        Initial particles ``N(0, init_scale² I)``, or on the rays of the convex ``τ → 0``
        solution with an ``N(0, τ₁/λ)`` spread (THEORY §2.2).
    init_scale : float
        Initial particles ``N(0, init_scale² I)`` (``init = "random"``), ``> 0``.
    sharpness : float
        Softplus sharpness ``t`` (softplus and capped), ``> 0``.
    cap : float
        Cap parameter ``m`` of the capped activation, ``> 0``.
    """

    activation: str = "relu"
    n_particles: int = 4000
    init: str = "random"
    init_scale: float = 1.0
    sharpness: float = 10.0
    cap: float = 3.0

    @staticmethod
    def _checked(m: dict, src: str) -> dict:
        _check(isinstance(m["activation"], str) and m["activation"] in ACTIVATIONS, src,
               "model.activation",
               f"must be one of {', '.join(ACTIVATIONS)}, got {m['activation']!r}")
        _num(m, "n_particles", src, "model", integer=True, minimum=1, maximum=MAX_PARTICLES,
             why="particles held in memory")
        _check(isinstance(m["init"], str) and m["init"] in INITS, src, "model.init",
               f"must be one of {', '.join(INITS)}, got {m['init']!r}")
        for k in ("init_scale", "sharpness", "cap"):
            _num(m, k, src, "model", positive=True)
            m[k] = float(m[k])
        return m


@dataclass(frozen=True)
class DynamicsConfig(_Table):
    """The ``[dynamics]`` table.

    The Langevin dynamics (THEORY §2) and its temperature ladder.

    Attributes
    ----------
    lam : float
        Weight decay ``λ > 0``.
    eta : float
        Step size ``η > 0`` (``η λ < 2``).
    integrator : {"em", "lm", "mala"}
        Euler–Maruyama, Leimkuhler–Matthews (THEORY §2.1), or ``"mala"``: Metropolis-adjusted
        passes over the particles that sample ``π_N ∝ exp(−U/τ)`` exactly (full batch,
        ``τ > 0``; docs/theory.md).
    taus : tuple of float
        Temperatures ``τ = 0`` or ``τ >=`` :data:`MIN_TAU` in the order run (hot to cold; cold
        to hot from ``init = "convex"``).
    steps_per_tau : int or "auto"
        Steps per temperature, ``>= 1``; ``"auto"``: each temperature runs in chunks until its
        stationarity verdict holds, at most ``max_steps_per_tau`` steps (docs/cli.md).
    max_steps_per_tau : int
        With ``steps_per_tau = "auto"`` only: the most steps at one temperature (``>= 16``);
        ``0`` otherwise.
    batch_size : int
        ``0`` for full batch, else the minibatch size.
    seed : int
        Key of the noise, the minibatches and the initial particles, ``0 <= seed < 2**63``.
    jumps : float or None
        ``"mala"`` only: share of the moves that are jumps near another particle, in
        ``[0, 1]`` (0: none; default :data:`DEFAULT_JUMPS`). ``None`` for the other
        integrators (the key is then refused, and left out of the config's hash).
    radial : float or None
        ``"mala"`` only: probability that each particle's move is followed by a radial move
        (``|θ_i|`` resampled along its direction, docs/theory.md §2.6), in ``[0, 1]`` (0:
        none; default :data:`DEFAULT_RADIAL`). ``None`` for the other integrators, as
        ``jumps``.
    fine : float or None
        ``"mala"`` only: share of the Langevin moves made at a fine step ``eta/16^k``, ``k``
        uniform in 1..4, in ``[0, 1]`` (default :data:`DEFAULT_FINE`, 0; the embedded default
        and the shipped configs use 0.5): without them a heavy particle pinned on a data
        point's kink at low ``tau`` keeps its direction (docs/theory.md §2.6). ``None`` for
        the other integrators, as ``jumps``; left out of the config's hash when 0.
    exchange : float or None
        ``"mala"`` and ReLU only: probability that a pass ends with an exchange move, which
        resamples the masses of the stiff activation cells together (docs/theory.md §2.6:
        the split of the mass between rays at low ``tau``, slow for moves of one particle),
        in ``[0, 1]`` (default :data:`DEFAULT_EXCHANGE`, 0). ``None`` for the other
        integrators, as ``jumps``; left out of the config's hash when 0.
    chains : int
        Independent particle systems of the run, ``1 <= chains <=`` :data:`MAX_CHAINS`
        (same data, ladder and integrator; seeds and initial particles from ``seed`` and the
        chain index, :func:`solvers.langevin.chain_seed`). Chain 0 is the run of one chain.
        The stationarity verdict compares them (split-R̂ across chains; docs/theory.md §11).
        Left out of the config's hash when 1, so one-chain configs keep theirs.
    """

    lam: float = 0.05
    eta: float = 0.05
    integrator: str = "em"
    taus: tuple[float, ...] = (1e-2, 1e-3, 1e-4)
    steps_per_tau: int | str = 40000
    max_steps_per_tau: int = 0
    batch_size: int = 0
    seed: int = 0
    jumps: float | None = None
    radial: float | None = None
    fine: float | None = None
    exchange: float | None = None
    chains: int = 1

    @staticmethod
    def _checked(dyn: dict, src: str) -> dict:
        _num(dyn, "lam", src, "dynamics", positive=True)
        _check(dyn["lam"] >= MIN_LAM, src, "dynamics.lam", f"must be >= {MIN_LAM:g} (tau/lam "
               f"and mean(y^2)/lam must stay finite), got {dyn['lam']!r}")
        _num(dyn, "eta", src, "dynamics", positive=True)
        _check(isinstance(dyn["integrator"], str) and dyn["integrator"] in INTEGRATORS, src,
               "dynamics.integrator",
               f"must be one of {', '.join(INTEGRATORS)}, got {dyn['integrator']!r}")
        taus = dyn["taus"]
        if _is_num(taus):
            taus = [taus]
        _check(isinstance(taus, (list, tuple)) and len(taus) > 0, src, "dynamics.taus",
               "must be a non-empty list of temperatures")
        for i, t in enumerate(taus):
            _check(_is_num(t) and math.isfinite(_as_float(t)), src, f"dynamics.taus[{i}]",
                   f"must be a finite number, got {t!r}")
            _check(t >= 0, src, f"dynamics.taus[{i}]", f"temperature must be >= 0, got {t!r}")
            _check(t == 0 or t >= MIN_TAU, src, f"dynamics.taus[{i}]",
                   f"must be 0 or at least {MIN_TAU:g} (below it a step's noise is under the "
                   f"rounding of the particles and 1/tau leaves the floats; 0 is plain gradient "
                   f"descent), got {t!r}")
            # the noise variance 2*eta*tau and the stationary scale tau/lam are formed: both
            # must be finite floats (a noise that overflows later is reported as a divergence)
            _check(math.isfinite(2.0 * float(dyn["eta"]) * t) and math.isfinite(t / dyn["lam"]),
                   src, f"dynamics.taus[{i}]", f"2*eta*tau and tau/lam must be finite floats "
                   f"(below {sys.float_info.max:.3g}), got tau={t!r}")
        dyn["taus"] = tuple(float(t) for t in taus)
        if dyn["steps_per_tau"] == "auto":
            _num(dyn, "max_steps_per_tau", src, "dynamics", integer=True, minimum=16,
                 maximum=MAX_STEPS // len(taus), why=f"max_steps_per_tau * {len(taus)} "
                 f"temperatures must not exceed the noise counter's {MAX_STEPS} steps")
        else:
            _check(_is_int(dyn["steps_per_tau"]), src, "dynamics.steps_per_tau",
                   f"must be an integer or \"auto\", got {_type_name(dyn['steps_per_tau'])} "
                   f"{dyn['steps_per_tau']!r}")
            _num(dyn, "steps_per_tau", src, "dynamics", integer=True, minimum=1,
                 maximum=MAX_STEPS // len(taus), why=f"steps_per_tau * {len(taus)} "
                 f"temperatures must not exceed the noise counter's {MAX_STEPS} steps")
            _check(dyn["max_steps_per_tau"] == 0, src, "dynamics.max_steps_per_tau",
                   "only with steps_per_tau = \"auto\"")
        _num(dyn, "batch_size", src, "dynamics", integer=True, nonneg=True)
        _num(dyn, "chains", src, "dynamics", integer=True, minimum=1, maximum=MAX_CHAINS,
             why="independent particle systems in one run")
        _num(dyn, "seed", src, "dynamics", integer=True, nonneg=True, maximum=2**63 - 1,
             why="a 64-bit seed")
        dyn["lam"] = float(dyn["lam"])
        dyn["eta"] = float(dyn["eta"])
        spec = INTEGRATORS[dyn["integrator"]]
        name = dyn["integrator"]
        if not spec.minibatch:
            _check(dyn["batch_size"] == 0, src, "dynamics.batch_size",
                   f"must be 0 with integrator = \"{name}\" (it samples the full-batch "
                   f"N-particle law; minibatches are not supported), got {dyn['batch_size']!r}")
        if spec.exact:
            for i, t in enumerate(dyn["taus"]):
                _check(t > 0, src, f"dynamics.taus[{i}]", "must be > 0 with integrator = "
                       f"\"{name}\" (it samples exp(-U/tau)), got {t!r}")
        if dyn["integrator"] == "mala":
            if dyn["jumps"] is None:
                dyn["jumps"] = DEFAULT_JUMPS
            _num(dyn, "jumps", src, "dynamics", nonneg=True, maximum=1.0,
                 why="a share of the moves")
            dyn["jumps"] = float(dyn["jumps"])
            if dyn["radial"] is None:
                dyn["radial"] = DEFAULT_RADIAL
            _num(dyn, "radial", src, "dynamics", nonneg=True, maximum=1.0,
                 why="the probability of a radial move after each move")
            dyn["radial"] = float(dyn["radial"])
            if dyn["fine"] is None:
                dyn["fine"] = DEFAULT_FINE
            _num(dyn, "fine", src, "dynamics", nonneg=True, maximum=1.0,
                 why="the share of the Langevin moves made at a fine step")
            dyn["fine"] = float(dyn["fine"])
            if dyn["exchange"] is None:
                dyn["exchange"] = DEFAULT_EXCHANGE
            _num(dyn, "exchange", src, "dynamics", nonneg=True, maximum=1.0,
                 why="the probability that a pass ends with an exchange move")
            dyn["exchange"] = float(dyn["exchange"])
        else:
            for key in ("jumps", "radial", "fine", "exchange"):
                _check(dyn[key] is None, src, f"dynamics.{key}",
                       "only with integrator = \"mala\"")
        _check(spec.exact or dyn["eta"] * dyn["lam"] < 2.0, src, "dynamics.eta",
               f"eta*lam = {dyn['eta'] * dyn['lam']:g} >= 2 makes the weight-decay step unstable")
        return dyn


@dataclass(frozen=True)
class OutputConfig(_Table):
    """The ``[output]`` table.

    What the run file records, and how often a checkpoint is taken.

    Attributes
    ----------
    observe_every : int
        An observation every this many steps, ``>= 1``.
    snapshots_per_tau : int
        Snapshot frames per temperature, ``1 <= snapshots_per_tau <= steps_per_tau``; with
        ``steps_per_tau = "auto"`` frames per chunk of ``max_steps_per_tau / 8`` steps, evenly
        spaced, the last at the chunk's end (the analysis pools the frames of a stage's
        stationary part, docs/theory.md §6.1).
    checkpoint_every : int
        A checkpoint every this many steps, ``>= 1``.
    """

    observe_every: int = 100
    snapshots_per_tau: int = 1
    checkpoint_every: int = 10000

    @staticmethod
    def _checked(out: dict, src: str, dynamics: DynamicsConfig) -> dict:
        _num(out, "observe_every", src, "output", integer=True, minimum=1)
        _num(out, "snapshots_per_tau", src, "output", integer=True, minimum=1)
        _num(out, "checkpoint_every", src, "output", integer=True, minimum=1)
        per_stage = out["snapshots_per_tau"]
        if dynamics.steps_per_tau != "auto":
            _check(out["snapshots_per_tau"] <= dynamics.steps_per_tau, src,
                   "output.snapshots_per_tau",
                   f"must be <= dynamics.steps_per_tau ({dynamics.steps_per_tau})")
        else:           # frames per chunk of max_steps_per_tau // AUTO_CHUNKS steps
            chunk = dynamics.max_steps_per_tau // AUTO_CHUNKS
            _check(out["snapshots_per_tau"] <= chunk, src, "output.snapshots_per_tau",
                   f"with steps_per_tau = \"auto\" it counts frames per chunk and must be <= "
                   f"the chunk's {chunk} steps (dynamics.max_steps_per_tau / {AUTO_CHUNKS})")
            per_stage *= AUTO_CHUNKS
        n_taus = len(dynamics.taus)
        _check(n_taus * per_stage <= MAX_FRAMES, src, "output.snapshots_per_tau",
               f"{n_taus} temperatures * {per_stage} snapshots exceed "
               f"{MAX_FRAMES} frames (each frame holds every particle)")
        return out


#: The tables of a config and their dataclasses (``[data]``: :data:`DATA_KINDS`).
CONFIG_TABLES: dict[str, type] = {"model": ModelConfig, "dynamics": DynamicsConfig,
                                  "output": OutputConfig}
SECTIONS = ("data", *CONFIG_TABLES)


def table_keys(section: str) -> list[str]:
    """The keys a table may hold (``data``: those of every kind, and ``kind``).

    Parameters
    ----------
    section : {"data", "model", "dynamics", "output"}
        The table.

    Returns
    -------
    list of str
        In the order of the schema (``data``: sorted).

    Raises
    ------
    KeyError
        For an unknown table.
    """
    if section == "data":
        keys = {"kind"}
        for cls in DATA_KINDS.values():
            keys.update(_defaults(cls))
        return sorted(keys)
    return list(_defaults(CONFIG_TABLES[section]))


def validate_tables(raw: Any, src: str, base_dir: str | os.PathLike = ".") -> tuple:
    """Validate a parsed config document table by table.

    Parameters
    ----------
    raw, src, base_dir
        The parsed TOML document, its name and folder, as for
        :func:`meanfield.config.validate`.

    Returns
    -------
    (data, ModelConfig, DynamicsConfig, OutputConfig)
        The four tables, defaults filled in.

    Raises
    ------
    ConfigError
        Unknown table or key (with the nearest valid name), wrong type, or out-of-range value.
    """
    _check(isinstance(raw, dict), src, "", "config must be a TOML table")
    for sec in raw:
        _check(sec in SECTIONS, src, str(sec), f"unknown table{_suggest(sec, SECTIONS)}; "
               f"valid tables: {', '.join(SECTIONS)}")
    for sec in SECTIONS:
        if sec in raw:
            _check(isinstance(raw[sec], dict), src, sec, f"must be a table ([{sec}])")
    _check("data" in raw, src, "data", "missing table [data]")
    data = data_from_table(raw["data"], src, base_dir)
    for sec, cls in CONFIG_TABLES.items():
        _check_keys(raw.get(sec, {}), cls, src, sec)
    model = ModelConfig.from_table(raw.get("model", {}), src)
    dynamics = DynamicsConfig.from_table(raw.get("dynamics", {}), src)
    _check(not dynamics.exchange or model.activation == "relu", src, "dynamics.exchange",
           f"needs model.activation = \"relu\" (a neuron's output linear in |theta|^2), "
           f"got {model.activation!r}: set exchange = 0")
    output = OutputConfig.from_table(raw.get("output", {}), src, dynamics=dynamics)
    return data, model, dynamics, output


#: The tables whose keys a misplaced key is looked up in (:func:`_check_keys`).
_KEY_TABLES = {"model": ModelConfig, "dynamics": DynamicsConfig, "output": OutputConfig}
