"""``meanfield analyze``: rays, kink hyperplanes, patterns and P for each snapshot of a run,
and the low-temperature limit across its ladder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from meanfield.errors import InputError

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.


def register(sub):
    """Add the ``analyze`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "analyze", help="count rays and kink hyperplanes against 2P-1; write a report",
        description="Cluster each snapshot's particles into rays (direction of (w, b), sign of "
                    "a), count rays J and distinct kink hyperplanes K, compute P (affine "
                    "dichotomies of the data) and write report.md, report.json and figures.")
    p.add_argument("run", help="run file (.h5), or a study directory made by 'meanfield sweep'")
    p.add_argument("-o", "--outdir", help="report directory (default: <run>-report)")
    p.add_argument("--json", action="store_true",
                   help="print the report JSON to stdout (the files are still written)")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument("--min-mass", type=float, default=1e-2,
                   help="mass fraction below which a cluster is thermal halo (default 0.01)")
    p.add_argument("--g-ray", type=float, default=0.9,
                   help="a ray's mean direction needs -sign(a) G >= G_RAY * max|G| "
                        "(certificate of the zero-temperature problem; default 0.9)")
    p.add_argument("--no-w2", action="store_true",
                   help="skip the Wasserstein distances between successive temperatures "
                        "(exact W2 takes about 40 s at 10^4 particles)")
    p.add_argument("--no-references", action="store_true",
                   help="skip the comparison with the exact references (Gibbs fixed point at "
                        "each tau for d <= 2; the convex tau -> 0 limit at the coldest tau)")
    p.set_defaults(func=main)


def _check_outdir(outdir: Path) -> None:
    if outdir.exists() and not outdir.is_dir():
        raise InputError(str(outdir), "-o", "is a file, expected a report directory")


def _study(args) -> int:
    from meanfield.sweep.summary import analyze_study, format_markdown, to_json, write_report
    res = analyze_study(args.run, w2=not args.no_w2)
    outdir = Path(args.outdir) if args.outdir else Path(str(Path(args.run).resolve()) + "-report")
    _check_outdir(outdir)
    write_report(res, outdir, figures=not args.no_figures)
    print(to_json(res) if args.json else format_markdown(res))
    if not args.json:
        sys.stderr.write(f"meanfield: report in {outdir}/study.md\n")
    return 0


def main(args) -> int:
    """Run ``meanfield analyze`` with the parsed ``args``; returns the exit code."""
    from meanfield.report import analyze_run
    from meanfield.sweep.summary import is_study_dir
    if is_study_dir(args.run):
        return _study(args)
    if not 0 <= args.min_mass < 1:
        raise InputError("--min-mass", "", f"must be in [0, 1), got {args.min_mass}")
    if not 0 <= args.g_ray <= 1:
        raise InputError("--g-ray", "", f"must be in [0, 1], got {args.g_ray}")
    outdir = Path(args.outdir) if args.outdir else Path(str(Path(args.run).with_suffix("")) + "-report")
    _check_outdir(outdir)
    rep = analyze_run(args.run, outdir, figures=not args.no_figures, w2=not args.no_w2,
                      references=not args.no_references, min_mass_frac=args.min_mass,
                      g_ray=args.g_ray)
    if not rep["complete"]:
        sys.stderr.write(f"meanfield: warning: {args.run} is an incomplete run "
                         f"({len(rep['snapshots'])} snapshot frames so far)\n")
    if args.json:
        print(json.dumps(rep))
    else:
        print(f"P = {rep['P']}  2P-1 = {rep['bound_2P_minus_1']}  P-1 = {rep['bound_P_minus_1']}"
              f"  general position: {rep['general_position']}")
        for r in rep["ladder"]:
            w2 = "" if r["w2_to_previous"] is None else \
                f" W2 to previous tau={r['w2_to_previous']:.3e} ({r['w2_method']})"
            st = "" if r.get("stationary") is not False else \
                f"  NOT STATIONARY: {'; '.join(r['stationarity']['reasons'])}"
            print(f"tau={r['tau']:.2e} step={r['step']:>8d} risk={r['risk']:.4e} "
                  f"rays J={r['J']!s:>3} hyperplanes K={r['K']!s:>3}{w2}{st}")
        th = rep["theorem6"]
        if th is not None:
            if th.get("status", "checked") != "checked":
                print(f"Theorem 6 (lowest tau): {th['status']}")
            else:
                print(f"Theorem 6 (lowest tau): distinct={th['distinct']} "
                      f"antichain={th['antichain']} max per binary pattern={th['max_per_binary']}")
        refs = rep.get("references")
        if refs and "skipped" not in refs:
            for g in refs["gibbs"]:
                if "skipped" not in g:
                    print(f"tau={g['tau']:.2e} particles vs Gibbs reference: max |diff| = "
                          f"{g['max_abs_diff']:.3e} (std. error {g['max_stderr']:.1e})")
            c = refs["convex"]
            print(f"tau={c['tau']:.2e} particles vs convex tau->0 reference: max |diff| = "
                  f"{c['max_abs_diff']:.3e}")
        sys.stderr.write(f"meanfield: report in {outdir}/report.md\n")
    return 0
