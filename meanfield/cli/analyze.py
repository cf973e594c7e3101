"""``meanfield analyze``: rays, kink hyperplanes and P for each snapshot of a run."""

from __future__ import annotations


def register(sub):
    p = sub.add_parser("analyze", help="count rays and kink hyperplanes against 2P-1; write a report",
                       description="Cluster each snapshot's particles into rays, count rays J "
                                   "and kink hyperplanes K, compute P and write report.md, "
                                   "report.json and figures.")
    p.add_argument("run", help="run file (.h5)")
    p.add_argument("-o", "--outdir", help="report directory (default: <run>-report)")
    p.add_argument("--json", action="store_true", help="print the report JSON to stdout")
    p.set_defaults(func=main)


def main(args) -> int:
    raise NotImplementedError
