"""``meanfield analyze``: rays, kink hyperplanes and P for each snapshot of a run."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def register(sub):
    p = sub.add_parser(
        "analyze", help="count rays and kink hyperplanes against 2P-1; write a report",
        description="Cluster each snapshot's particles into rays (direction of (w, b), sign of "
                    "a), count rays J and distinct kink hyperplanes K, compute P (affine "
                    "dichotomies of the data) and write report.md, report.json and figures.")
    p.add_argument("run", help="run file (.h5)")
    p.add_argument("-o", "--outdir", help="report directory (default: <run>-report)")
    p.add_argument("--json", action="store_true",
                   help="print the report JSON to stdout (the files are still written)")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument("--min-mass", type=float, default=1e-2,
                   help="mass fraction below which a cluster is thermal halo (default 0.01)")
    p.set_defaults(func=main)


def main(args) -> int:
    from analysis.report import analyze_run
    from meanfield.errors import InputError
    if not 0 <= args.min_mass < 1:
        raise InputError("--min-mass", "", f"must be in [0, 1), got {args.min_mass}")
    outdir = Path(args.outdir) if args.outdir else Path(str(Path(args.run).with_suffix("")) + "-report")
    rep = analyze_run(args.run, outdir, figures=not args.no_figures, min_mass_frac=args.min_mass)
    if args.json:
        print(json.dumps(rep))
    else:
        print(f"P = {rep['P']}  2P-1 = {rep['bound_2P_minus_1']}  P-1 = {rep['bound_P_minus_1']}"
              f"  general position: {rep['general_position']}")
        for s in rep["snapshots"]:
            print(f"tau={s['tau']:.2e} step={s['step']:>8d} risk={s['risk']:.4e} "
                  f"rays J={s['n_rays']:>3d} hyperplanes K={s['n_hyperplanes']:>3d}")
        sys.stderr.write(f"meanfield: report in {outdir}/report.md\n")
    return 0
