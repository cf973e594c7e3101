"""Training data sets: loaders (CSV, ``.npy``, ``.npz``) and generators.

A data set is ``X`` of shape ``(n, d)`` and ``y`` of shape ``(n,)``, float64. Lifted inputs are
``x̃_j = (x_j, 1)`` (THEORY §1). Nothing read from a file is unpickled or evaluated.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from meanfield.config import RunConfig
from meanfield.errors import DataError
from meanfield.schema import FileData, GaussianData, GridData, InlineData, TwoPointData
from solvers.geometry import lifted
from solvers.inputs import check_xy


@dataclass(frozen=True)
class Dataset:
    """Training inputs and targets.

    Attributes
    ----------
    X : ndarray of shape (n, d)
        Inputs.
    y : ndarray of shape (n,)
        Targets.
    name : str
        A short description (file name or generator and parameters).
    """

    X: np.ndarray
    y: np.ndarray
    name: str = ""

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])

    def lifted(self) -> np.ndarray:
        """Lifted inputs ``x̃ = (x, 1)``, ndarray of shape (n, d+1)."""
        return lifted(self.X)

    def hash(self) -> str:
        """:func:`data_hash` of ``X`` and ``y``: the data set's identity, whatever its source."""
        return data_hash(self.X, self.y)


def data_hash(X, y) -> str:
    """Hash of the values of a data set: first 16 hex digits of the SHA-256 of
    ``b"meanfield-data:n,d;"`` (``n`` and ``d`` in decimal), then the bytes of ``X`` and of
    ``y`` as little-endian float64 in C order (``docs/format.md``, ``data_hash``).

    Parameters
    ----------
    X : array_like of shape (n, d)
        Inputs (as loaded and validated).
    y : array_like of shape (n,)
        Targets.

    Returns
    -------
    str
        16 lowercase hex digits. Equal for equal values (any file, format, column order of
        the source or path), different as soon as one bit of one value or the shape differs.
    """
    X = np.ascontiguousarray(X, dtype="<f8")
    y = np.ascontiguousarray(y, dtype="<f8")
    n, d = X.shape
    h = hashlib.sha256(f"meanfield-data:{n},{d};".encode())
    h.update(X.tobytes())
    h.update(y.tobytes())
    return h.hexdigest()[:16]


def values_differ(X, y, X_ref, y_ref) -> str | None:
    """Where the data set ``(X, y)`` differs from ``(X_ref, y_ref)``, in words, or ``None``.

    Values are compared bit for bit (as float64), so ``0.0`` and ``-0.0`` differ.

    Parameters
    ----------
    X, y : array_like of shapes (n, d) and (n,)
        The data set now.
    X_ref, y_ref : array_like of shapes (n', d') and (n',)
        The reference (e.g. the values stored in a run file).

    Returns
    -------
    str or None
        E.g. ``"y[3] 0.5 -> 0.7 (1 of 5 entries of y differ)"`` (reference value first),
        ``"X has shape (5, 2), (6, 2) before"``; ``None`` when bitwise equal.
    """
    for name, a, ref in (("X", X, X_ref), ("y", y, y_ref)):
        a = np.asarray(a, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if a.shape != ref.shape:
            return f"{name} has shape {a.shape}, {ref.shape} before"
    for name, a, ref in (("X", X, X_ref), ("y", y, y_ref)):
        a = np.ascontiguousarray(a, dtype=np.float64)
        ref = np.ascontiguousarray(ref, dtype=np.float64)
        diff = a.view(np.uint64) != ref.view(np.uint64)
        if diff.any():
            first = tuple(int(i) for i in np.argwhere(diff)[0])
            where = ", ".join(str(i) for i in first)
            return (f"{name}[{where}] {float(ref[first])!r} -> {float(a[first])!r} "
                    f"({int(diff.sum())} of {diff.size} entries of {name} differ)")
    return None


def check_arrays(X, y, source: str = "<data>", rows=None) -> Dataset:
    """Validate and normalise ``X`` (n, d) and ``y`` (n,) into a :class:`Dataset`.

    A 1-D ``X`` is read as ``d = 1``. ``rows`` (optional) gives the 1-based file line of each
    row, used in messages instead of the 0-based row index.

    Raises
    ------
    DataError
        Empty data, non-numeric values, NaN/Inf, or ``len(X) != len(y)``.
    """
    X, y = check_xy(X, y, source, rows=rows)
    return Dataset(X, y, Path(source).name)


def _is_number(s: str, sep: str = ",") -> bool:
    try:
        _number(s, sep)
    except ValueError:
        return False
    return True


#: Field separators a CSV file may use; the first content line decides (the one of these it
#: holds most often outside quotes; a file with none of them has one column).
SEPARATORS = (",", ";", "\t")


def _separator(line: str) -> str:
    """The separator of a CSV file whose first content line is ``line``."""
    counts, quoted = dict.fromkeys(SEPARATORS, 0), False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in counts:
            counts[ch] += 1
    best = max(SEPARATORS, key=lambda c: counts[c])
    return best if counts[best] else ","


def _number(field: str, sep: str) -> float:
    """The value of one CSV field; with ``;`` separators a decimal comma (``1,5``) is read
    as a decimal point, as spreadsheet programs write it in many locales."""
    try:
        return float(field)
    except ValueError:
        if sep == ";" and field.count(",") == 1 and "." not in field:
            return float(field.replace(",", "."))
        raise


def _read_csv(path: Path):
    """The header (list of names, or ``None``), the numeric rows (ndarray) and their 1-based
    line numbers in the file, of a CSV file.

    Fields are separated by ``,``, ``;`` or a tab (:func:`_separator`) and may be quoted
    (``"x1","x2","y"``, RFC 4180); blank lines and lines starting with ``#`` are skipped.
    """
    import csv

    rows, lines = [], []
    ncol = None
    names = None
    sep = None
    # utf-8-sig: a byte-order mark (as spreadsheet programs write) is not part of the first field
    with open(path, encoding="utf-8-sig", newline="") as fh:
        for lineno, line in enumerate(fh, start=1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            if sep is None:
                sep = _separator(s)
            if '"' in s:
                try:
                    parts = next(csv.reader([s], delimiter=sep, skipinitialspace=True))
                except csv.Error as exc:
                    raise DataError(str(path), f"line {lineno}",
                                    f"not valid CSV ({exc})") from None
            else:
                parts = s.split(sep)
            parts = [p.strip() for p in parts]
            try:
                vals = [_number(p, sep) for p in parts]
            except ValueError:
                numeric = [_is_number(p, sep) for p in parts]
                if not rows and ncol is None and not any(numeric):
                    ncol = len(parts)              # a header line: no field is a number
                    names = parts
                    continue
                bad = parts[numeric.index(False)]
                hint = ""
                if sep == "," and ";" in bad:
                    hint = " (';' inside a field: separate every field by ';' or by ',')"
                raise DataError(str(path), f"line {lineno}",
                                f"not a number {bad!r} in {s!r}{hint}") from None
            if ncol is None:
                ncol = len(vals)
            if len(vals) != ncol:
                raise DataError(str(path), f"line {lineno}",
                                f"expected {ncol} columns, got {len(vals)}"
                                + (f" (fields separated by {sep!r})" if sep != "," else ""))
            rows.append(vals)
            lines.append(lineno)
    if not rows:
        raise DataError(str(path), "", "empty data set (no numeric rows)")
    return names, np.array(rows, dtype=np.float64), lines


#: The first bytes of the binary formats (``.npz`` is a zip archive).
#: Suffixes of the data files ``kind = "file"`` reads (docs/cli.md, ``[data]``).
DATA_SUFFIXES = (".csv", ".npy", ".npz")

_MAGIC = {".npy": b"\x93NUMPY", ".npz": b"PK\x03\x04"}


def _check_magic(p: Path, suffix: str, src: str) -> None:
    with open(p, "rb") as fh:
        head = fh.read(len(_MAGIC[suffix]))
    if head != _MAGIC[suffix]:
        kind = "NumPy .npy file" if suffix == ".npy" else "NumPy .npz archive (zip)"
        raise DataError(src, "", f"not a {kind}: it starts with {head!r}")


def _columns(path: Path, names, target, features):
    """Column indices ``(inputs, target)`` of a CSV file with header ``names``.

    Raises
    ------
    DataError
        A header not used by name, names without a header, unknown or repeated names.
    """
    src = str(path)
    if names is None:
        if target is not None or features is not None:
            raise DataError(src, "data.target" if target is not None else "data.features",
                            "the file has no header line to name its columns; add one "
                            "(e.g. x1,x2,y) or leave out data.target and data.features "
                            "(last column y)")
        return None
    listed = ", ".join(names)
    if len(set(names)) != len(names):
        dup = sorted({c for c in names if names.count(c) > 1})
        raise DataError(src, "header", f"repeated column name(s) {', '.join(dup)} in: {listed}")
    if target is None:
        raise DataError(src, "header", f"has named columns ({listed}); say which is y with "
                                       f"data.target = NAME, one of: {listed} (and the inputs "
                                       f"with data.features = [NAMES], default: the others)")
    if target not in names:
        raise DataError(src, "data.target", f"no column {target!r}; columns: {listed}")
    if features is None:
        features = [c for c in names if c != target]
        if not features:
            raise DataError(src, "header", f"has only the target column {target!r}; the "
                                           "inputs need at least one more column")
    for c in features:
        if c not in names:
            raise DataError(src, "data.features", f"no column {c!r}; columns: {listed}")
    if target in features:
        raise DataError(src, "data.features", f"holds the target {target!r}")
    if len(set(features)) != len(features) or not features:
        raise DataError(src, "data.features", "must name distinct columns, at least one")
    return [names.index(c) for c in features], names.index(target)


def _load_csv(path: Path, target=None, features=None) -> Dataset:
    names, A, lines = _read_csv(path)
    cols = _columns(path, names, target, features)
    if cols is None:
        if A.shape[1] < 2:
            raise DataError(str(path), "", "need at least 2 columns (inputs..., y)")
        return check_arrays(A[:, :-1], A[:, -1], str(path), rows=lines)
    inputs, t = cols
    return check_arrays(A[:, inputs], A[:, t], str(path), rows=lines)


def load_file(path: str | os.PathLike, target: str | None = None,
              features: list | None = None) -> Dataset:
    """Load a data file.

    Parameters
    ----------
    path : path-like
        ``.csv`` (comma separated; ``#`` comments allowed; without a header line the last
        column is ``y``, with one the columns are chosen by name), ``.npy`` (one 2-D array,
        last column ``y``) or ``.npz`` (arrays ``X`` and ``y``).
    target : str, optional
        The name of the ``y`` column of a CSV file with a header line (required there).
    features : list of str, optional
        The names of the input columns, in order (default: every column but ``target``).

    Returns
    -------
    Dataset

    Raises
    ------
    DataError
        Missing/unreadable file, unknown extension, pickled arrays (refused), bad shapes or
        values; a CSV header without ``target``, or names that are not its columns.
    """
    p = Path(path)
    src = str(path)
    if not p.exists():
        raise DataError(src, "", "no such file")
    if p.is_dir():
        raise DataError(src, "", "is a directory, expected a data file")
    suffix = p.suffix.lower()
    if suffix != ".csv" and (target is not None or features is not None):
        raise DataError(src, "data.target" if target is not None else "data.features",
                        "columns are chosen by name only in a .csv file with a header line")
    try:
        if suffix == ".csv":
            ds = _load_csv(p, target, features)
        elif suffix == ".npy":
            _check_magic(p, suffix, src)
            A = np.load(p, allow_pickle=False)
            if A.ndim != 2 or A.shape[1] < 2:
                raise DataError(src, "", f"expected a 2-D array with >= 2 columns, got {A.shape}")
            ds = check_arrays(A[:, :-1], A[:, -1], src)
        elif suffix == ".npz":
            _check_magic(p, suffix, src)
            with np.load(p, allow_pickle=False) as z:
                for k in ("X", "y"):
                    if k not in z.files:
                        raise DataError(src, k, f"array missing; found {', '.join(z.files) or 'none'}")
                ds = check_arrays(z["X"], z["y"], src)
        else:
            raise DataError(src, "", f"unknown data file type '{suffix}' (use .csv, .npy or .npz)")
    except DataError:
        raise
    except UnicodeDecodeError:
        raise DataError(src, "", "not a UTF-8 text file") from None
    except ValueError as exc:
        msg = str(exc)
        if "pickle" in msg.lower():
            raise DataError(src, "", "holds pickled objects, which are refused "
                                     "(save plain numeric arrays)") from None
        raise DataError(src, "", f"cannot read: {msg.splitlines()[0] if msg else exc!r}") \
            from None
    except PermissionError:
        raise DataError(src, "", "permission denied") from None
    except OSError as exc:
        raise DataError(src, "", f"cannot read: {exc.strerror or exc}") from None
    except (EOFError, TypeError, IndexError, KeyError, zipfile.BadZipFile) as exc:
        # truncated or damaged archives, structured or odd dtypes
        raise DataError(src, "", f"damaged or unusable array file ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0][:80] if str(exc) else ''})") \
            from None
    return Dataset(ds.X, ds.y, p.name)


def two_point(d: int = 2, norm: float = 2.5, labels: str = "even", y: float = 1.0) -> Dataset:
    """Symmetric two-point data of [LJM26] Proposition 7 (THEORY §8).

    ``x_1 = x̄ = norm·e_1``, ``x_2 = −x̄``; ``y = (ȳ, ȳ)`` (even) or ``(ȳ, −ȳ)`` (odd).
    """
    xbar = np.zeros(d)
    xbar[0] = norm
    X = np.stack([xbar, -xbar])
    yy = np.array([y, y if labels == "even" else -y])
    return Dataset(X, yy, f"two_point(d={d}, norm={norm}, {labels}, y={y})")


def gaussian(n: int = 10, d: int = 2, seed: int = 0) -> Dataset:
    """``x_j ~ N(0, I_d)`` and ``y_j ~ N(0, 1)`` i.i.d., seeded (NumPy ``default_rng``)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = rng.standard_normal(n)
    return Dataset(X, y, f"gaussian(n={n}, d={d}, seed={seed})")


def grid(d: int = 2, points_per_axis: int = 3, extent: float = 1.0, seed: int = 0) -> Dataset:
    """A regular grid on ``[−extent, extent]^d`` (degenerate: many collinear points), with
    ``y ~ N(0, 1)`` i.i.d. seeded targets."""
    axes = [np.linspace(-extent, extent, points_per_axis)] * d
    X = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, d)
    y = np.random.default_rng(seed).standard_normal(X.shape[0])
    return Dataset(X, y, f"grid(d={d}, k={points_per_axis}, extent={extent}, seed={seed})")


def from_config(cfg: RunConfig) -> Dataset:
    """Build the data set described by a validated config's ``[data]`` table.

    Parameters
    ----------
    cfg : meanfield.config.RunConfig

    Returns
    -------
    Dataset
        ``X`` of shape (n, d) and ``y`` of shape (n,), float64.

    Raises
    ------
    DataError
        When the file cannot be loaded or the data is unusable.
    """
    dat = cfg.data
    if isinstance(dat, FileData):
        if not Path(dat.path).exists():
            raise DataError(cfg.source, "data.path", f"no such file {dat.path}")
        return load_file(dat.path, dat.target or None, list(dat.features) or None)
    if isinstance(dat, TwoPointData):
        return two_point(dat.d, dat.norm, dat.labels, dat.y)
    if isinstance(dat, GaussianData):
        return gaussian(dat.n, dat.d, dat.seed)
    if isinstance(dat, GridData):
        return grid(dat.d, dat.points_per_axis, dat.extent, dat.seed)
    if isinstance(dat, InlineData):
        widths = {len(r) for r in dat.X}
        if len(widths) != 1:
            raise DataError(cfg.source, "data.X", f"rows have different lengths {sorted(widths)}")
        try:
            ds = check_arrays(dat.X, dat.y, cfg.source)
        except DataError as exc:
            raise DataError(cfg.source, f"data.{exc.field}" if exc.field else "data",
                            exc.reason) from None
        return Dataset(ds.X, ds.y, "inline")
    raise DataError(cfg.source, "data.kind", f"unknown kind {dat!r}")  # pragma: no cover
