"""A disk cache of the exact references (Gibbs fixed points, the convex ``τ → 0`` solution).

The references are deterministic functions of their inputs and take seconds to minutes each;
``meanfield analyze``, its ``--csv`` rerun, a study's analyses and the tutorial ask for the same
ones again and again. Each solver call is stored once, under the SHA-256 of everything that
determines its result:

* the solver (``"gibbs"``, ``"gibbs_qmc"``, ``"convex"``) and its options (tolerances, QMC
  ``rtol``), with the temperatures in the order they are solved (a ladder is solved by
  continuation, hot to cold, so the sequence is part of the input);
* the data: shape and bytes (as float64) of ``X`` and ``y``; ``λ`` and every ``τ`` as exact
  floats; the activation (``"relu"``, the only one the references solve);
* the code: the bytes of every source file of the ``solvers`` package and of the analysis
  modules behind cached results (``references``, ``transport``, this one), and the versions of
  NumPy, SciPy, Clarabel and POT.

The exact ``W2`` between two snapshots (:func:`analysis.transport.w2_snapshots`, a network
simplex on ``N × N`` costs that takes tens of seconds at ``N = 4000``) is cached the same way,
keyed by the bytes of both particle clouds.

So an entry is never stale: any change to an input, to the code or to a dependency gives another
key (old entries are simply never read again; delete the folder to reclaim the space).

Entries are ``.npz`` archives of plain arrays (read with ``allow_pickle=False``) plus a JSON
header that repeats the key's inputs; they are written to a temporary file, ``fsync``-ed and
renamed into place, so a reader sees a whole entry or none. An entry that does not load, or
whose header does not match, is ignored (and replaced by the recomputed result). A cache that
cannot be written (read-only or full disk) is skipped silently: the result is computed as
without a cache.

Location: ``$MEANFIELD_CACHE_DIR``, else ``$XDG_CACHE_HOME/meanfield/references``, else
``~/.cache/meanfield/references``; with no home folder (``HOME`` unset and a user id without a
passwd entry, as in containers) ``meanfield-cache-UID/references`` under the temporary folder,
said once by a :class:`CacheLocationWarning` (the command line prints it as a note). Disabled by ``MEANFIELD_NO_CACHE=1`` (``meanfield analyze
--no-cache``) or :func:`disable`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

#: Version of the entry layout; part of every key.
FORMAT = 1
#: Environment variables: the cache folder, and the switch that turns the cache off.
ENV_DIR = "MEANFIELD_CACHE_DIR"
ENV_OFF = "MEANFIELD_NO_CACHE"

_state = {"disabled": False, "code": None, "fallback": None}


class CacheLocationWarning(UserWarning):
    """The cache is not where the module docstring says (no home folder): one line, printed
    by the command line as a ``meanfield: note:``."""


def disable(off: bool = True) -> None:
    """Turn the disk cache off (``off=True``) or back on for this process."""
    _state["disabled"] = bool(off)


def enabled() -> bool:
    """Whether results are read from and written to the disk cache."""
    return not _state["disabled"] and os.environ.get(ENV_OFF, "").strip() in ("", "0")


def cache_dir() -> Path:
    """The cache folder (see the module docstring); not created here (but for the fallback
    without a home folder, :func:`_temporary_cache`)."""
    explicit = os.environ.get(ENV_DIR, "").strip()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join("~", ".cache")
    try:
        if explicit:
            return Path(explicit).expanduser()
        return Path(base).expanduser() / "meanfield" / "references"
    except RuntimeError:        # no home folder: no HOME, no passwd entry for this user
        pass
    if _state.get("fallback") is None:
        _state["fallback"] = _temporary_cache()
        import warnings
        warnings.warn(CacheLocationWarning(
            f"no home folder (HOME is unset and user id {_uid()} has no passwd entry): the "
            f"reference cache is in {_state['fallback']}; set {ENV_DIR} to keep it elsewhere"),
            stacklevel=2)
    return _state["fallback"]


def _uid():
    return os.getuid() if hasattr(os, "getuid") else "user"


def _temporary_cache() -> Path:
    """The cache folder without a home folder: ``meanfield-cache-UID/references`` under the
    temporary folder, when that folder is this user's own (made here with mode 0700); else, as
    one another user could fill, a fresh folder for this process only."""
    top = Path(tempfile.gettempdir()) / f"meanfield-cache-{_uid()}"
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(top, 0o700)
        st = os.lstat(top)
        import stat
        if stat.S_ISDIR(st.st_mode) and (not hasattr(os, "getuid") or st.st_uid == os.getuid()):
            return top / "references"
    except OSError:
        pass
    try:
        return Path(tempfile.mkdtemp(prefix="meanfield-cache-")) / "references"
    except OSError:
        return top / "references"       # unwritable: every write is skipped (module docstring)


#: Source files outside the ``solvers`` package whose code shapes a cached result.
_ANALYSIS_SOURCES = ("references.py", "transport.py", "refcache.py")


def _code_fingerprint() -> dict:
    """SHA-256 of the ``solvers`` package's source files and of the analysis modules that
    produce cached results, and the numerical dependencies' versions (computed once per
    process)."""
    if _state["code"] is None:
        import scipy

        import solvers
        h = hashlib.sha256()
        root = Path(solvers.__file__).resolve().parent
        here = Path(__file__).resolve().parent
        files = sorted(root.rglob("*.py")) + [here / name for name in _ANALYSIS_SOURCES]
        for path in files:
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        _state["code"] = {"source": h.hexdigest(), "numpy": np.__version__,
                          "scipy": scipy.__version__, "clarabel": _version("clarabel"),
                          "pot": _version("POT")}
    return _state["code"]


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:          # noqa: BLE001 - not installed: part of the key as such
        return "none"


def _array_id(a) -> dict:
    a = np.ascontiguousarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest()}


def _exact(v):
    """Parameters as JSON with every float exact (``float.hex``)."""
    if isinstance(v, dict):
        return {str(k): _exact(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_exact(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return {"float": float(v).hex()}
    if isinstance(v, np.integer):
        return int(v)
    return v


def key(kind: str, arrays: dict, params: dict) -> tuple[str, dict]:
    """The cache key of one computation: ``(hex digest, the inputs it hashes)``.

    Parameters
    ----------
    kind : str
        What is computed: ``"gibbs"``, ``"gibbs_qmc"``, ``"convex"``, ``"w2_exact"``.
    arrays : dict of str -> array-like
        The array inputs (hashed as float64: shape and bytes), e.g. ``X`` (n, d), ``y`` (n,).
    params : dict
        Every other input (``lam``, the temperatures in the order solved, the solver's options,
        the activation), JSON-serialisable; floats are taken exactly.
    """
    inputs = {"format": FORMAT, "kind": str(kind),
              "arrays": {k: _array_id(v) for k, v in sorted(arrays.items())},
              "params": _exact(params), "code": _code_fingerprint()}
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), inputs


# --- entries ----------------------------------------------------------------------------------

#: Exceptions a solver may return in place of a solution (the QMC reference's accuracy limits),
#: by name, and the attributes kept of each.
_ERRORS = {"GibbsAccuracyError": ("tau", "error", "target", "coldest"),
           "GibbsBarrierError": ("tau", "delta", "kinks", "coldest"),
           "GibbsConvergenceError": ()}


def _error_classes():
    from solvers.gibbs import GibbsConvergenceError
    from solvers.gibbsqmc import GibbsAccuracyError, GibbsBarrierError
    return {"GibbsAccuracyError": GibbsAccuracyError, "GibbsBarrierError": GibbsBarrierError,
            "GibbsConvergenceError": GibbsConvergenceError}


def _solution_classes():
    from solvers.convex import ConvexSolution
    from solvers.gibbs import GibbsSolution
    from solvers.gibbsqmc import QMCGibbsSolution
    return {c.__name__: c for c in (GibbsSolution, QMCGibbsSolution, ConvexSolution)}


def _scalar(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return {"float": float(v).hex()}
    if v is None or isinstance(v, str):
        return v
    raise TypeError(f"cannot store {type(v).__name__}")


def _unscalar(v):
    return float.fromhex(v["float"]) if isinstance(v, dict) else v


def _encode(items) -> tuple[list, dict]:
    """Header records and arrays of a list of solutions and errors."""
    records, arrays = [], {}
    errors = _error_classes()
    for i, item in enumerate(items):
        if isinstance(item, (float, np.floating)) and not isinstance(item, bool):
            records.append({"value": _scalar(item)})
            continue
        if isinstance(item, BaseException):
            name = type(item).__name__
            if name not in _ERRORS or type(item) is not errors[name]:
                raise TypeError(f"cannot store {name}")
            records.append({"error": name, "message": str(item),
                            "attrs": {a: _scalar(getattr(item, a, None)) for a in _ERRORS[name]}})
            continue
        if type(item).__name__ not in _solution_classes():
            raise TypeError(f"cannot store {type(item).__name__}")
        fields = {}
        for f in dataclasses.fields(item):
            if f.name.startswith("_"):
                continue
            v = getattr(item, f.name)
            if isinstance(v, np.ndarray):
                if v.dtype == object:
                    raise TypeError(f"cannot store {f.name} (object array)")
                arrays[f"{i}.{f.name}"] = v
                fields[f.name] = {"array": f"{i}.{f.name}"}
            else:
                fields[f.name] = _scalar(v)
        records.append({"solution": type(item).__name__, "fields": fields})
    return records, arrays


def _decode(records, z):
    out = []
    errors, solutions = _error_classes(), _solution_classes()
    for rec in records:
        if "value" in rec:
            out.append(float(_unscalar(rec["value"])))
            continue
        if "error" in rec:
            cls = errors[rec["error"]]
            exc = cls.__new__(cls)
            RuntimeError.__init__(exc, rec["message"])
            for a, v in rec["attrs"].items():
                setattr(exc, a, _unscalar(v))
            if rec["error"] != "GibbsConvergenceError":
                exc.solved = []
                for a in ("error", "target"):
                    if not hasattr(exc, a):
                        setattr(exc, a, float("nan"))
            out.append(exc)
            continue
        cls = solutions[rec["solution"]]
        kw = {name: (np.array(z[v["array"]]) if isinstance(v, dict) and "array" in v
                     else _unscalar(v)) for name, v in rec["fields"].items()}
        out.append(cls(**kw))
    return out


def _path(digest: str) -> Path:
    return cache_dir() / digest[:2] / f"{digest}.npz"


def load(digest: str, inputs: dict):
    """The cached list of results under ``digest``, or ``None`` (absent, disabled, unreadable,
    or its header does not repeat ``inputs``)."""
    if not enabled():
        return None
    path = _path(digest)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"][()]))
            if header.get("inputs") != json.loads(json.dumps(inputs)):
                return None
            return _decode(header["records"], z)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, EOFError, AttributeError,
            zipfile.BadZipFile, json.JSONDecodeError):
        return None              # damaged or foreign: recomputed and replaced


def store(digest: str, inputs: dict, items) -> bool:
    """Write ``items`` (solutions and supported errors) under ``digest`` atomically; ``False``
    when disabled, not storable, or the folder cannot be written."""
    if not enabled():
        return False
    try:
        records, arrays = _encode(items)
    except TypeError:
        return False
    header = json.dumps({"inputs": inputs, "records": records}, sort_keys=True)
    buf = io.BytesIO()
    np.savez(buf, header=np.array(header), **arrays)
    path = _path(digest)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{digest[:16]}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError:
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return True


def cached(kind: str, arrays: dict, params: dict, compute):
    """``compute()`` (a list of results: solutions, supported errors or floats), read from the
    cache when an entry of the same inputs (:func:`key`) exists, stored otherwise."""
    digest, inputs = key(kind, arrays, params)
    hit = load(digest, inputs)
    if hit is not None:
        return hit
    out = compute()
    store(digest, inputs, out)
    return out
