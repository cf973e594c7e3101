"""``meanfield dichotomies``: the exact number ``P`` of affine dichotomies of a data set."""

from __future__ import annotations

import json
import sys
import time
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
                        '"exact", "tol", "tol_range", "closed_form"}')
    p.add_argument("--exact", action="store_true",
                   help="exact integer arithmetic (decimals read as written); slower")
    p.add_argument("--target", metavar="NAME",
                   help="the y column of a .csv data file with a header line (required there)")
    p.add_argument("--features", metavar="NAMES",
                   help="comma-separated input columns of such a file (default: all but y)")
    p.add_argument("--tol", type=float, default=None,
                   help="chord tolerance of the float mode (default 1e-12)")
    p.add_argument("--max-regions", type=float, default=None, metavar="N",
                   help="most regions the enumeration may visit, judged by its upper bound "
                        "(Cover's count of the distinct points); a larger count is refused "
                        "with its estimated time (default 1e9, about a minute; the exact mode "
                        "allows N/40). Points certified in general position get Cover's count "
                        "without enumeration")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (default: shown when the count takes more than "
                        "a few seconds)")
    p.set_defaults(func=main)


#: Seconds of counting after which progress is shown.
PROGRESS_AFTER = 2.0


class CountProgress:
    """``progress(done, bound)`` of :func:`analysis.dichotomies.count_dichotomies` for a
    command: silent for a count that ends within :data:`PROGRESS_AFTER` seconds, then one note
    line with the bound, then a progress bar (:func:`meanfield.progress.progress_bar`) in
    regions against that upper bound. ``close()`` ends the bar."""

    def __init__(self, enabled: bool = True, desc: str = "dichotomies"):
        self.enabled, self.desc = enabled, desc
        self.t0 = time.monotonic()
        self.bar = None

    def __call__(self, done: int, bound: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.monotonic() - self.t0 < PROGRESS_AFTER:
                return
            from meanfield.progress import progress_bar
            sys.stderr.write(f"meanfield: counting P: up to {bound:.3g} regions (Cover's count "
                             "of the distinct points, an upper bound); Ctrl-C stops\n")
            sys.stderr.flush()
            self.bar = progress_bar(int(bound), self.desc, "region")
            if hasattr(self.bar, "upper_bound"):
                self.bar.upper_bound = True
        self.bar.update(int(done) - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def max_regions_of(value, option: str = "--max-regions"):
    """The ``--max-regions`` value as an int (default
    :data:`analysis.dichotomies.DEFAULT_MAX_REGIONS`); refused unless ``>= 1``."""
    from analysis.dichotomies import DEFAULT_MAX_REGIONS
    if value is None:
        return DEFAULT_MAX_REGIONS
    if not value >= 1 or value != value:
        raise InputError(option, "", f"must be >= 1, got {value:g}")
    return int(min(value, 2.0**62))


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
    from analysis.dichotomies import DEFAULT_TOL, TooManyRegions, count_dichotomies
    tol = DEFAULT_TOL if args.tol is None else args.tol
    if not 0 < tol < 1:
        raise InputError("--tol", "", f"must be in (0, 1), got {tol}")
    limit = max_regions_of(args.max_regions)
    features = None if args.features is None else [c.strip() for c in args.features.split(",")]
    X = load_inputs(args.data, args.target, features)
    bar = CountProgress(enabled=not args.quiet)
    try:
        res = count_dichotomies(X, tol, exact=args.exact, max_regions=limit, progress=bar)
    except TooManyRegions as exc:
        raise InputError(args.data, "--max-regions", exc.reason("--max-regions")) from None
    finally:
        bar.close()
    if args.json:
        print(json.dumps(res.as_dict()))
    else:
        how = ("Cover's closed form: general position checked on every "
               f"{min(res.n, res.d + 1)} lifted points" if res.closed_form
               else f"{res.method} count")
        print(f"P = {res.P}  (n = {res.n} points, {res.n_distinct} distinct, d = {res.d}; "
              f"{how})")
        print(f"Cover's general-position value {res.cover}; general position: "
              f"{res.general_position}")
        print(f"bounds: 2P-1 = {2 * res.P - 1}, P-1 = {res.P - 1}")
        if res.tol_range is not None:
            print(f"same P for any tolerance in [{res.tol_range[0]:.3g}, {res.tol_range[1]:.3g})")
    if res.ambiguous:
        sys.stderr.write("meanfield: warning: the float count is close to its tolerance "
                         "(near-degenerate data); rerun with --exact\n")
    return 0
