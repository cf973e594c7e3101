"""``meanfield analyze``: rays, kink hyperplanes, patterns and P for each snapshot of a run,
and the low-temperature limit across its ladder."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from meanfield.errors import InputError, one_line
from solvers.integrators import INTEGRATORS

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.


def register(sub):
    """Add the ``analyze`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "analyze", help="count rays and kink hyperplanes against 2P-1; write a report",
        description="Cluster into rays (direction of (w, b), sign of a) the particles of each "
                    "temperature's stationary measure: the snapshot frames of the stage's "
                    "second half, every chain, pooled, grouped by the basins of the maxima "
                    "of |G| (docs/theory.md 6.1); count rays J and "
                    "distinct kink hyperplanes K, with single snapshots' counts beside them; "
                    "with the references, the exact Gibbs measure's own rays at each "
                    "temperature (6.7); compute P (affine dichotomies of the data) and write "
                    "report.md, report.json and figures.")
    p.add_argument("run", help="run file (.h5), or a study directory made by 'meanfield sweep'")
    p.add_argument("-o", "--outdir", help="report directory (default: <run>-report)")
    p.add_argument("--json", action="store_true",
                   help="print the report JSON to stdout (the files are still written)")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--format", choices=("png", "pdf", "svg"), default="png",
                   help="file format of the figures (default png)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (default: a bar on a terminal, else a line "
                        "every 10 s)")
    p.add_argument("--csv", action="store_true",
                   help="also write the tables as CSV next to the report: ladder.csv (one row "
                        "per tau), rays.csv (per ray), kinks.csv (per kink hyperplane)")
    p.add_argument("--min-mass", type=float, default=1e-2,
                   help="mass fraction below which a cluster is thermal halo (default 0.01)")
    p.add_argument("--g-ray", type=float, default=0.5,
                   help="a ray's mean direction needs -sign(a) G >= G_RAY, G the certificate "
                        "of the zero-temperature problem at the stage's time-averaged "
                        "residuals (1 on every ray at the optimum; default 0.5)")
    p.add_argument("--halo-ratio", type=float, default=3.0,
                   help="a ray's mean particle mass |a||u| is at least HALO_RATIO times the "
                        "free-particle baseline (d+1) tau/lam (default 3)")
    p.add_argument("--rule", choices=("auto", "linkage"), default="auto",
                   help="how a stage's particles are grouped into rays: 'auto' by the basins "
                        "of the exact maxima of |G| at its time-averaged residuals, the rule "
                        "the exact Gibbs measure's rays get (single linkage where G is not "
                        "available or the data have too many activation cells); 'linkage' the "
                        "single-linkage plateau everywhere, to compare (docs/theory.md §6.1; "
                        "default auto)")
    p.add_argument("--max-regions", type=float, default=None, metavar="N",
                   help="most regions the count of P may enumerate, judged by its upper bound "
                        "(Cover's count of the distinct data points); a larger count is "
                        "refused with its estimated time (default 1e9, about a minute)")
    p.add_argument("--no-w2", action="store_true",
                   help="skip the Wasserstein distances between successive temperatures "
                        "(exact W2 takes about 40 s at 10^4 particles)")
    p.add_argument("--no-sensitivity", action="store_true",
                   help="skip the table of J and K over a range of each threshold at the "
                        "coldest tau (about 15 ray analyses; 20 s of CPU at 10^5 particles)")
    p.add_argument("--no-references", action="store_true",
                   help="skip the comparison with the exact references (Gibbs fixed point at "
                        "each tau: quadrature for d <= 2, randomized QMC up to d = 5; the convex "
                        "tau -> 0 limit at the coldest tau)")
    p.add_argument("--no-cache", action="store_true",
                   help="compute the exact references afresh, neither reading nor writing "
                        "the reference cache ($MEANFIELD_CACHE_DIR, default "
                        "~/.cache/meanfield/references; or set MEANFIELD_NO_CACHE=1)")
    p.add_argument("--against", metavar="OTHER.h5",
                   help="instead of the report: compare with another run of the same data "
                        "temperature by temperature (the difference of the time-averaged "
                        "predictors over the second half of each stage, in units of their "
                        "combined autocorrelation-aware MCSE; e.g. a hot-to-cold ladder "
                        "against a cold-to-hot one from model.init = \"convex\"); the report "
                        "options are not used")
    p.add_argument("--extrapolate", metavar="OTHER.h5",
                   help="instead of the report: Richardson extrapolation to eta -> 0 with a run "
                        "that differs only in dynamics.eta (Euler-Maruyama, e.g. eta and "
                        "2 eta, other seeds): per tau the step bias of the finer run, the "
                        "predictor with that bias removed and its MCSE, and their distances "
                        "to the Gibbs reference (d <= 5; --no-references skips it); the other "
                        "report options are not used")
    p.add_argument("--extrapolate-n", metavar="OTHER.h5",
                   help="instead of the report: extrapolation to N -> infinity with a run that "
                        "differs only in model.n_particles (e.g. N and 4 N, other seeds): the "
                        "N-particle law is O(1/N) from the mean-field Gibbs measure, and the "
                        "combination in 1/N removes that term; per tau the finite-N bias of "
                        "the larger run, the extrapolated predictor and its MCSE, and their "
                        "distances to the Gibbs reference (d <= 5)")
    p.set_defaults(func=main)


def _check_outdir(outdir: Path, inputs=()) -> None:
    """Refuse a report folder that is a file, or that is or holds one of ``inputs`` (the run
    file or study folder analysed; links resolved): the folder is replaced as a whole."""
    import os
    real = os.path.realpath(outdir)
    for src in inputs:
        where = os.path.realpath(src)
        if where == real or where.startswith(real.rstrip(os.sep) + os.sep):
            what = "is" if where == real else "holds"
            raise InputError(str(outdir), "-o", f"{what} the input {src} (the report folder is "
                                                "replaced as a whole); choose another folder")
    if outdir.exists() and not outdir.is_dir():
        raise InputError(str(outdir), "-o", "is a file, expected a report directory")


def _holds_only(names):
    """Whether a folder holds only files named in ``names`` (or matching ``*.png``, for
    ``"*.png"`` in ``names``): a previous report that may be replaced."""
    def check(folder: Path) -> bool:
        return all(p.is_file() and (p.name in names or ("*.png" in names
                                                         and p.suffix == ".png"))
                   for p in folder.iterdir())
    return check


@contextlib.contextmanager
def _writing_report(outdir: Path, names, inputs=()):
    """Own ``outdir`` and write the report into a temporary folder (yielded) that replaces
    it when complete (a failure leaves ``outdir`` as it was and names the file it could not
    write); ``outdir`` may not be or hold one of ``inputs``. The checks run on entering. An
    ``outdir`` that is a symbolic link is written through, as ``run -o LINK`` is: the report
    replaces the folder it points to, and the link stays."""
    import os

    from meanfield import atomic, ownership
    _check_outdir(outdir, inputs)
    if outdir.is_symlink():
        outdir = Path(os.path.realpath(outdir))
    from meanfield.store.leftovers import remove_stale_folders
    # nested ``with``s: the lock and the folder are released whenever a signal arrives
    with ownership.claim(outdir, "-o"):
        remove_stale_folders(outdir)        # of an analyze killed by SIGKILL: owned now
        with atomic.replacing_dir(outdir, "-o", _holds_only(names)) as tmp:
            yield tmp


def _study(args) -> int:
    from meanfield.sweep.summary import analyze_study, format_markdown, to_json, write_report
    outdir = Path(args.outdir) if args.outdir else Path(str(Path(args.run).resolve()) + "-report")
    from analysis.dichotomies import TooManyRegions
    with _writing_report(outdir, {"study.json", "study.md", "*.png"}, [args.run]) as tmp:
        try:
            res = analyze_study(args.run, w2=not args.no_w2)
        except TooManyRegions as exc:     # a study's runs are counted with the default limit
            raise InputError(args.run, "", exc.reason("the limit (analyse the runs one by one "
                                                      "with --max-regions)")) from None
        write_report(res, tmp, figures=not args.no_figures)
    print(to_json(res) if args.json else format_markdown(res))
    if not args.json:
        sys.stderr.write(f"meanfield: report in {one_line(outdir)}/study.md\n")
    return 0


def _ladder(run):
    """``[(tau, mean (n,), mcse (n,), stage)]`` over the stages of ``run`` that have
    observations in their second half, pooled over the run's chains
    (:func:`analysis.time_average.pooled_predictor`); a stage with fewer than ``MIN_ESS``
    effective samples there in a chain gets a warning on stderr (its MCSE, hence every ``z``
    built on it, is not to be trusted)."""
    from analysis.stationarity import MIN_ESS
    from analysis.time_average import chains_of, pooled_predictor
    out = []
    for s, tau in enumerate(run.taus):
        try:
            m, se, ess, M = pooled_predictor(run, s)
        except ValueError:      # stage not reached (an unfinished run)
            continue
        if ess < MIN_ESS:
            which = " in its weakest chain" if len(chains_of(run)) > 1 else ""
            sys.stderr.write(f"meanfield: warning: {one_line(run.path)}: tau={tau:g}: "
                             f"{ess:.1f} effective samples{which} ({M} observations) in "
                             f"the second half of stage {s}, fewer than the {MIN_ESS:g} its MCSE needs: its z values are not "
                             "to be trusted (observe more often or run longer)\n")
        out.append((float(tau), m, se, s))
    return out


def _not_a_config(path, then: str = "analyse") -> None:
    """Refuse a config given where a run file belongs, saying how to make one (``then``: what
    to do with the run file afterwards)."""
    from meanfield.data import DATA_SUFFIXES
    suffix = Path(path).suffix.lower()
    if suffix == ".toml":
        raise InputError(path, "", "is a config, not a run file: run it first "
                                   f"(meanfield run {path} -o RUN.h5), then {then} RUN.h5")
    if suffix in DATA_SUFFIXES:
        raise InputError(path, "", "is a data file, not a run file: name it in a config's "
                                   "[data] table (kind = \"file\", path = ...), run that "
                                   f"config (meanfield run CONFIG.toml -o RUN.h5), then {then} "
                                   "RUN.h5")


def _two_runs(args, option):
    """The run files of ``--against``/``--extrapolate``: both readable run files of the same
    training data; a warning for each incomplete one."""
    import numpy as np

    from meanfield.store import open_run
    other = getattr(args, option)
    for path in (args.run, other):
        _not_a_config(path)
    a, b = open_run(args.run), open_run(other)
    if a.X.shape != b.X.shape or not (np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)):
        raise InputError(other, "", f"not the same training data as {args.run}")
    for run in (a, b):
        if not run.complete:
            sys.stderr.write(f"meanfield: warning: {one_line(run.path)} is an incomplete run "
                             "(its last stage is averaged as far as it got)\n")
    return a, b


def _unmatched(la, lb, name_b):
    """Note on stderr the temperatures of ``la`` with no partner in ``lb``."""
    from analysis.ladders import unmatched
    lone = unmatched(la, lb)
    if lone:
        sys.stderr.write(f"meanfield: note: tau = {', '.join(f'{t:g}' for t in lone)} not in "
                         f"{name_b} (with observations): skipped\n")


def _against(args) -> int:
    """``meanfield analyze A.h5 --against B.h5``: the two ladders' difference per τ."""
    from analysis.ladders import compare_ladders
    a, b = _two_runs(args, "against")
    la, lb = _ladder(a), _ladder(b)
    rows = compare_ladders(la, lb)
    if not rows:
        raise InputError(args.against, "", f"no temperature with observations in common with "
                                           f"{args.run}")
    _unmatched(la, lb, args.against)
    _unmatched(lb, la, args.run)
    if args.json:
        print(json.dumps({"run": str(args.run), "against": str(args.against),
                          "taus": [r.to_dict() for r in rows]}))
        return 0
    print(f"A = {args.run}\nB = {args.against}")
    print(f"{'tau':>9s} {'stage A':>7s} {'stage B':>7s} {'max|fA - fB|':>13s} "
          f"{'MCSE A':>8s} {'MCSE B':>8s} {'z':>7s}")
    for r in rows:
        print(f"{r.tau:9.2e} {r.stage_a:7d} {r.stage_b:7d} {r.max_abs_diff:13.3e} "
              f"{r.mcse_a:8.1e} {r.mcse_b:8.1e} {r.z:7.1f}")
    print("(z = largest difference over the training points in units of the combined MCSE; "
          "z of a few or more: at least one run is not stationary there, or their biases "
          "differ)")
    return 0


#: Config fields two runs must share to be extrapolated (all but the extrapolated one, the seed
#: and the schedule), and the activations for which each matters (None: all).
_SAME_PHYSICS = ((("model", "activation"), None), (("model", "n_particles"), None),
                 (("model", "sharpness"), ("softplus", "capped")),
                 (("model", "cap"), ("capped",)), (("dynamics", "lam"), None),
                 (("dynamics", "eta"), None),
                 (("dynamics", "integrator"), None), (("dynamics", "batch_size"), None))


@dataclass(frozen=True)
class _Extrapolation:
    """One kind of Richardson extrapolation: the option, the config field the two runs differ
    in, and ``h(value)``, the variable in which the bias is linear (``η``, or ``1/N``)."""

    option: str
    field: tuple
    h: object
    bias: str            # what the combination removes, for the table and the JSON keys
    key: str
    flag: str


_EXTRAPOLATE = {
    "eta": _Extrapolation("extrapolate", ("dynamics", "eta"), float, "step bias",
                          "step_bias", "--extrapolate"),
    "n": _Extrapolation("extrapolate_n", ("model", "n_particles"), lambda v: 1.0 / float(v),
                        "finite-N bias", "finite_n_bias", "--extrapolate-n"),
}


def _field(run, table, key):
    return getattr(getattr(run.config, table), key)


def _extrapolate(args, kind: str) -> int:
    """``meanfield analyze A.h5 --extrapolate B.h5`` (Richardson extrapolation in ``eta``,
    Euler-Maruyama runs) or ``--extrapolate-n B.h5`` (in ``1/N``: the leading ``O(1/N)``
    distance of the N-particle law from the mean-field Gibbs measure, docs/theory.md §2.3)."""
    import numpy as np

    from analysis.ladders import extrapolate_ladders
    from analysis.references import extrapolation_distance
    spec = _EXTRAPOLATE[kind]
    other = getattr(args, spec.option)
    a, b = _two_runs(args, spec.option)
    act = _field(a, "model", "activation")
    table, key = spec.field
    for (t, k), where in _SAME_PHYSICS:
        if (t, k) == spec.field:
            continue
        va, vb = _field(a, t, k), _field(b, t, k)
        if va != vb and (where is None or act in where):
            raise InputError(other, f"{t}.{k}",
                             f"{vb!r}, but {va!r} in {args.run}: the runs may differ only in "
                             f"{table}.{key} (and the seed and schedule)")
    if kind == "eta" and not INTEGRATORS[_field(a, "dynamics", "integrator")].extrapolable:
        able = ", ".join(f"{k!r}" for k, v in INTEGRATORS.items() if v.extrapolable)
        raise InputError(args.run, "dynamics.integrator",
                         f"{_field(a, 'dynamics', 'integrator')!r}: extrapolation in eta needs "
                         f"an integrator whose step bias is linear in eta ({able})")
    va, vb = _field(a, table, key), _field(b, table, key)
    if va == vb:
        raise InputError(other, f"{table}.{key}",
                         f"{vb:g}, the same as {args.run}: the runs must differ in {key}")
    # fine: the smaller h (smaller eta, larger N); r = h_coarse / h_fine > 1
    (fine, vf), (coarse, vc) = sorted([(a, va), (b, vb)], key=lambda p: spec.h(p[1]))
    r = spec.h(vc) / spec.h(vf)
    gain = math.sqrt(r * r + 1) / (r - 1)
    if gain > 5:
        sys.stderr.write(f"meanfield: warning: {key} {vc:g} and {vf:g} are close (ratio "
                         f"{r:.4g}): the extrapolation multiplies the Monte Carlo error by "
                         f"{gain:.3g}; a ratio of 2 gives 2.2\n")
    lf, lc = _ladder(fine), _ladder(coarse)
    rows = extrapolate_ladders(lf, lc, r)
    if not rows:
        raise InputError(other, "", f"no temperature with observations in common with "
                                    f"{args.run}")
    _unmatched(lf, lc, coarse.path)
    _unmatched(lc, lf, fine.path)
    by_f, by_c = {x[3]: x for x in lf}, {x[3]: x for x in lc}
    docs = []
    for row in rows:
        doc = row.to_dict()
        doc[spec.key], doc[spec.key + "_z"] = doc.pop("step_bias"), doc.pop("step_bias_z")
        doc["gibbs"] = ({"skipped": "--no-references"} if args.no_references else
                        extrapolation_distance(fine, row, by_f[row.stage_fine][1],
                                               by_c[row.stage_coarse][1]))
        docs.append(doc)
    if args.json:
        print(json.dumps({"fine": str(fine.path), "coarse": str(coarse.path),
                          f"{key}_fine": vf, f"{key}_coarse": vc, "taus": docs}))
        return 0
    print(f"fine   = {fine.path}  ({key} = {vf:g})\ncoarse = {coarse.path}  ({key} = {vc:g}; "
          f"r = {r:.4g}: the extrapolation's MCSE is about {gain:.2f} x a single run's)")
    print(f"{'tau':>9s} {'max|bias fine|':>14s} {'z(bias)':>8s} {'MCSE extrap':>11s} "
          f"{'|fine-Gibbs|':>12s} {'|extrap-Gibbs|':>14s} {'z':>6s}")
    for row, doc in zip(rows, docs, strict=True):
        g = doc["gibbs"]
        tail = (f"{g['fine']:12.3e} {g['extrapolated']:14.3e} {g['z']:6.1f}" if "z" in g else
                f"  (Gibbs reference skipped: {g['skipped']})")
        print(f"{row.tau:9.2e} {np.max(np.abs(row.step_bias)):14.3e} {row.step_bias_z:8.1f} "
              f"{np.max(row.mcse):11.1e} {tail}")
    ratio = "eta_coarse/eta_fine" if kind == "eta" else "N_fine/N_coarse"
    print(f"(bias fine = the fine run's {spec.bias}, (f_coarse - f_fine)/(r - 1); z(bias) in "
          f"units of the combined MCSE: below ~3 the {spec.bias} is not resolved. extrap = "
          f"(r f_fine - f_coarse)/(r - 1), r = {ratio}; maxima over the training "
          "points; z = |extrap - Gibbs| / sqrt(MCSE^2 + reference error^2). "
          "docs/theory.md §2.3)")
    return 0


def main(args) -> int:
    """Run ``meanfield analyze`` with the parsed ``args``; returns the exit code."""
    # first: the analysis stack and its compiled libraries load here, so one that cannot
    # (too little address space, tests/faults/test_faults_env.py) fails before any work
    from analysis.frozen import frozen_note
    from analysis.run_analysis import count_text
    from meanfield.report import FIGURES, analyze_run
    from meanfield.sweep.summary import is_study_dir
    if getattr(args, "no_cache", False):
        from analysis import refcache
        refcache.disable()
    if args.outdir is not None and not args.outdir.strip():
        raise InputError("-o/--outdir", "", "empty path: name a report folder, or leave "
                                            "-o out for <run>-report")
    given = [f for f, v in (("--against", args.against), ("--extrapolate", args.extrapolate),
                            ("--extrapolate-n", args.extrapolate_n)) if v]
    if len(given) > 1:
        raise InputError("meanfield analyze", given[1],
                         f"give one of --against, --extrapolate and --extrapolate-n, not "
                         f"both {given[0]} and {given[1]}")
    if args.against:
        return _against(args)
    if args.extrapolate:
        return _extrapolate(args, "eta")
    if args.extrapolate_n:
        return _extrapolate(args, "n")
    if is_study_dir(args.run):
        return _study(args)
    if Path(args.run).is_dir():
        from meanfield.sweep import manifest
        if manifest.manifest_path(args.run).is_file():
            manifest.read(args.run)         # a manifest it cannot read: its own reason
        raise InputError(args.run, "", "is a directory, expected a run file (.h5) or a study "
                                       "directory of 'meanfield sweep' (this one has no "
                                       f"{manifest.MANIFEST})")
    _not_a_config(args.run)
    if not 0 <= args.min_mass < 1:
        raise InputError("--min-mass", "", f"must be in [0, 1), got {args.min_mass}")
    if not -1 <= args.g_ray <= 1:
        raise InputError("--g-ray", "", f"must be in [-1, 1], got {args.g_ray}")
    if not 0 <= args.halo_ratio < math.inf:
        raise InputError("--halo-ratio", "", f"must be finite and >= 0, got {args.halo_ratio}")
    from analysis.dichotomies import TooManyRegions
    from meanfield.cli.dichotomies import max_regions_of
    limit = max_regions_of(args.max_regions)
    outdir = Path(args.outdir) if args.outdir else Path(str(Path(args.run).with_suffix("")) + "-report")
    # a previous report (any figure format, with or without its tables) may be replaced
    names = {"report.json", "report.md", "ladder.csv", "rays.csv", "kinks.csv",
             *(f"{stem}.{ext}" for stem in FIGURES for ext in ("png", "pdf", "svg"))}
    with _writing_report(outdir, names, [args.run]) as tmp:
        try:
            rep = analyze_run(args.run, tmp, figures=not args.no_figures, w2=not args.no_w2,
                              references=not args.no_references, min_mass_frac=args.min_mass,
                              sensitivity=not args.no_sensitivity,
                              g_ray=args.g_ray, halo_ratio=args.halo_ratio, rule=args.rule,
                              fmt=args.format,
                              progress=False if args.quiet else None, max_regions=limit)
        except TooManyRegions as exc:
            raise InputError(args.run, "--max-regions", exc.reason("--max-regions")) from None
        if args.csv:
            from meanfield.tidy import write_csv
            write_csv(rep, tmp)
    if not rep["complete"]:
        sys.stderr.write(f"meanfield: warning: {one_line(args.run)} is an incomplete run "
                         f"({len(rep['snapshots'])} snapshot frames so far)\n")
    if args.json:
        print(json.dumps(rep))
    else:
        unit = rep.get("step_unit", "step")          # "pass" for the exact sampler
        print(f"P = {rep['P']}  2P-1 = {rep['bound_2P_minus_1']}  P-1 = {rep['bound_P_minus_1']}"
              f"  general position: {rep['general_position']}")
        for r in rep["ladder"]:
            w2 = "" if r["w2_to_previous"] is None else \
                f" W2 to previous tau={r['w2_to_previous']:.3e} ({r['w2_method']})"
            ref = ("" if r.get("matched") is None else
                   f" (matched to tau->0: {r['matched']})")
            if r.get("J_gibbs") is not None:        # the exact Gibbs measure's own rays
                ref += (f" Gibbs J={r['J_gibbs']} K={r['K_gibbs']} "
                        f"(matched: {r['gibbs_matched']})")
            st = "" if r.get("stationary") is not False else \
                f"  NOT STATIONARY: {'; '.join(r['stationarity']['reasons'])}"
            print(f"tau={r['tau']:.2e} {unit}={r['step']:>8d} risk={r['risk']:.4e} "
                  f"rays J={_pad(r['J'], count_text(r, 'J'))} "
                  f"hyperplanes K={_pad(r['K'], count_text(r, 'K'))}"
                  f"{ref}{w2}{st}")
        cc = rep.get("convex_counts")
        if cc:      # the tau -> 0 limit, once
            print(f"tau -> 0 (convex reference)        rays J={cc['J']:>3} "
                  f"hyperplanes K={cc['K']:>3}")
        for r in rep["ladder"]:
            if r.get("gibbs_note"):
                print(f"tau={r['tau']:.2e} Gibbs rays: {r['gibbs_note']}")
        for r in rep["ladder"]:
            note = frozen_note(r.get("frozen"), unit)
            if note:
                print(f"tau={r['tau']:.2e} frozen: {note}")
        snaps = {sn["step"]: sn for sn in rep["snapshots"]}
        for r in rep["ladder"]:
            hot = (snaps.get(r["step"]) or {}).get("thermal_mass") or []
            if hot:
                print(f"tau={r['tau']:.2e} thermal mass (not rays; weight signed as a): "
                      + ", ".join(f"weight {h['weight']:+.3g} at |G| = "
                                  f"{_abs_or_dash(h['G'])}" for h in hot))
        th = rep["theorem6"]
        if th is not None and th.get("status", "checked") != "checked":
            print(f"Theorem 6 (lowest tau): {th['status']}")
        elif th is not None and not th.get("decided", True):
            print(f"Theorem 6 (lowest tau): not decided, {th['undecided_reason']}")
        elif th is not None:
            conf = th.get("cell_conflicts") or []
            print(f"Theorem 6 (lowest tau): distinct={th['distinct']} antichain={th['antichain']} "
                  f"max per binary pattern={th['max_per_binary']}"
                  + (f" (rays sharing an activation cell: {conf})" if conf else ""))
        if rep.get("two_point"):        # [LJM26] Proposition 7's closed forms, coldest tau
            r = rep["two_point"][-1]
            p, m = r["predicted"], r["measured"]
            print(f"Proposition 7 (tau={r['tau']:.2e}, {r['labels']} labels): kinks "
                  f"<x_1, x> = c at c = {_values(p['kinks'])} predicted, {_values(m['kinks'])} "
                  f"measured; fitted value {p['phi']:.4f} predicted, {m['phi']:.4f} measured")
        refs = rep.get("references")
        if refs and "skipped" in refs:
            print(f"exact references skipped: {refs['skipped']}")
        elif refs:
            moving = {r["stage"] for r in rep["ladder"] if r.get("stationary") is False}
            for g in refs["gibbs"]:
                if "skipped" in g:
                    print(f"tau={g['tau']:.2e} Gibbs reference skipped: {g['skipped']}")
                else:
                    print(gibbs_line(g, args.run) + (NOT_STATIONARY_NOTE if g["stage"] in moving
                                                     else ""))
            c = refs["convex"]
            if "skipped" in c:
                print(f"convex tau->0 reference skipped: {c['skipped']}")
            else:
                print(f"tau={c['tau']:.2e} particles vs convex tau->0 reference: max |diff| = "
                      f"{c['max_abs_diff']:.3e}")
        sys.stderr.write(f"meanfield: report in {one_line(outdir)}/report.md\n")
    return 0


#: Added to the Gibbs line of a stage whose stationarity verdict failed: its time average is
#: of a run still moving, so no verdict of the comparison is a test of the stationary law.
NOT_STATIONARY_NOTE = " (the stage is NOT STATIONARY: this compares a run still moving)"


def gibbs_line(g: dict, run_path: str = "RUN.h5") -> str:
    """The line of one Gibbs comparison (a row of :func:`analysis.references.gibbs_distance`):
    the distance, its errors and allowance (none is stated for the exact sampler, whose
    allowance is 0), ``z`` (with the step-bias allowance, and without it where there is one)
    and the verdict with what it needs said
    (:func:`analysis.references.verdict_text`); without an MCSE, no allowance and no ``z``."""
    from analysis.references import VERDICT_TOO_FEW, verdict_text
    head = (f"tau={g['tau']:.2e} particles vs Gibbs reference: max |diff| = "
            f"{g['max_abs_diff']:.3e} (std. error {g['max_stderr']:.1e}")
    if g["verdict"] == VERDICT_TOO_FEW:
        return f"{head}): {verdict_text(g, run_path)}"
    if not g.get("step_bias_allowance"):       # the exact sampler: no allowance to state
        return (f"{head}; combined error {g['combined_error']:.1e}) z = {g['z']:.2g}: "
                f"{verdict_text(g, run_path)}")
    return (f"{head}; allowance: combined error {g['combined_error']:.1e} + step bias "
            f"{g['step_bias_allowance']:.1e}) z = {g['z']:.2g}" + _z_raw(g)
            + f": {verdict_text(g, run_path)}")


def _z_raw(g) -> str:
    """`` (… without the allowance)`` where a step-bias allowance was applied."""
    z0 = g.get("z_without_allowance")
    if z0 is None or not g.get("step_bias_allowance"):
        return ""
    return f" ({z0:.2g} without the allowance)"


def _values(cs) -> str:
    return ", ".join(f"{c:.3f}" for c in cs) or "none"


def _abs_or_dash(G) -> str:
    return "—" if G is None else f"{abs(G):.3f}"


def _pad(count: int, text: str) -> str:
    """``text`` (:func:`analysis.run_analysis.count_text` of a ladder row) with the integer
    ``count`` it starts with right-aligned in three columns, as the stationary rows print it
    (``J=  2``; a row not stationary printed ``J=1 (not stationary)``, out of line)."""
    return " " * max(0, 3 - len(str(count))) + text
