"""``meanfield dichotomies``: the exact number ``P`` of affine dichotomies of a data set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from meanfield import config, data
from meanfield.data import load_file
from meanfield.errors import DataError, InputError

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.


def register(sub):
    """Add the ``dichotomies`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "dichotomies", help="count the affine dichotomies P of a data set (exact, any d)",
        description="Count P, the number of affine dichotomies of the training inputs (regions "
                    "of the central arrangement of the lifted points (x, 1)), by "
                    "deletion-restriction; exact on degenerate data (duplicates, collinear "
                    "points, grids). Also prints Cover's general-position value.")
    p.add_argument("data", help="a data file (.csv, .npy, .npz), a config (.toml) whose [data] "
                                "table is used, or a run file (.h5)")
    p.add_argument("--json", action="store_true",
                   help='print {"P", "cover", "general_position", "n", "d", "n_distinct", '
                        '"exact", "tol", "tol_range"}')
    p.add_argument("--exact", action="store_true",
                   help="exact integer arithmetic (decimals read as written); slower")
    p.add_argument("--target", metavar="NAME",
                   help="the y column of a .csv data file with a header line (required there)")
    p.add_argument("--features", metavar="NAMES",
                   help="comma-separated input columns of such a file (default: all but y)")
    p.add_argument("--tol", type=float, default=None,
                   help="chord tolerance of the float mode (default 1e-12)")
    p.set_defaults(func=main)


def load_inputs(path: str, target=None, features=None):
    """Training inputs ``X`` (n, d) of a data file, a config (``.toml``) or a run file (``.h5``);
    ``target`` and ``features`` name the columns of a CSV file with a header line.

    Raises
    ------
    meanfield.errors.InputError
        The file cannot be used.
    """
    name = Path(path).name.lower()
    suffix = Path(path).suffix.lower()
    if suffix == ".toml":
        return data.from_config(config.load(path)).X
    if suffix in (".h5", ".hdf5") or name.endswith((".h5.part", ".hdf5.part")):
        from meanfield.store import open_run
        return open_run(path).X
    if suffix not in (".csv", ".npy", ".npz"):
        raise DataError(str(path), "", f"unknown file type '{suffix}' (use a data file .csv, "
                                       ".npy or .npz, a config .toml, or a run file .h5 or "
                                       ".h5.part)")
    try:
        return load_file(path, target, features).X
    except DataError as exc:
        # the loader names the config keys; here the columns are chosen by the flags
        raise DataError(exc.source, _as_flags(exc.field), _as_flags(exc.reason)) from None


#: The config keys of the CSV column choice, and the flags that set them in this command.
_FLAGS = (("data.target = NAME", "--target NAME"), ("data.features = [NAMES]", "--features NAMES"),
          ("data.target", "--target"), ("data.features", "--features"))


def _as_flags(text: str) -> str:
    for key, flag in _FLAGS:
        text = text.replace(key, flag)
    return text


def main(args) -> int:
    """Run ``meanfield dichotomies`` with the parsed ``args``; returns the exit code."""
    from analysis.dichotomies import DEFAULT_TOL, count_dichotomies
    tol = DEFAULT_TOL if args.tol is None else args.tol
    if not 0 < tol < 1:
        raise InputError("--tol", "", f"must be in (0, 1), got {tol}")
    features = None if args.features is None else [c.strip() for c in args.features.split(",")]
    X = load_inputs(args.data, args.target, features)
    res = count_dichotomies(X, tol, exact=args.exact)
    if args.json:
        print(json.dumps(res.as_dict()))
    else:
        print(f"P = {res.P}  (n = {res.n} points, {res.n_distinct} distinct, d = {res.d}; "
              f"{res.method} count)")
        print(f"Cover's general-position value {res.cover}; general position: "
              f"{res.general_position}")
        print(f"bounds: 2P-1 = {2 * res.P - 1}, P-1 = {res.P - 1}")
        if res.tol_range is not None:
            print(f"same P for any tolerance in [{res.tol_range[0]:.3g}, {res.tol_range[1]:.3g})")
    if res.ambiguous:
        sys.stderr.write("meanfield: warning: the float count is close to its tolerance "
                         "(near-degenerate data); rerun with --exact\n")
    return 0
