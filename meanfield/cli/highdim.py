"""``meanfield highdim``: GD on 1–2 (or more) ReLU neurons against the minimum-norm solution.

Runs the [LWTM26] study of THEORY §10 over a grid of ``(n, d)`` and writes, into ``-o DIR``,
``STEM.h5`` (layout in :mod:`meanfield.highdim.output`) and ``STEM.png`` (log-log gap against
``d``), where ``STEM = highdim-m<M>-<init>-c<c>-seed<S>`` unless ``--name`` is given. With
``--json`` it prints the summary document of :func:`meanfield.highdim.experiment.summarize`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from meanfield.errors import InputError, one_line

# Deferred on purpose: the modules behind this command load numba, h5py, SciPy, POT or
# Matplotlib, so they are imported when the command runs, not when `meanfield --help` or
# a usage error is answered.

_SOURCE = "command line"


def _int_list(text: str, opt: str) -> tuple:
    try:
        return tuple(int(s) for s in text.split(","))
    except ValueError:
        raise InputError(_SOURCE, opt, f"expected comma-separated integers, got {text!r}") from None


def _int(text: str, opt: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(_SOURCE, opt, f"expected an integer, got {text!r}") from None


def _float(text: str, opt: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(_SOURCE, opt, f"expected a number, got {text!r}") from None


def register(sub):
    """Add the ``highdim`` command to the subparsers ``sub``."""
    p = sub.add_parser(
        "highdim", help="GD on few ReLU neurons vs the minimum-norm solution ([LWTM26])",
        description="For each (n, d) and trial: draw Gaussian data with random-sign labels, run "
                    "GD with step c / tr(Sigma) on f(x) = sum_j a_j relu(w_j.x) (a = +1, -1, "
                    "+1, ...) to its limit, solve the minimum-norm QP and report the gap, the "
                    "relative gap, the frozen-pattern fraction and log-log slopes in d and n.",
        epilog="example: meanfield highdim --neurons 2 --n 20 --d 200,400,800 --trials 10 "
               "--c 0.5 --init zero --json -o out/")
    p.add_argument("--neurons", default="1", metavar="M",
                   help="number of neurons m, signs (+1, -1, +1, ...) (default 1)")
    p.add_argument("--n", default="20", metavar="N[,N...]", help="sample sizes (default 20)")
    p.add_argument("--d", default="200,400,800,1600,3200,6400,12800", metavar="D[,D...]",
                   help="input dimensions, each >= every n (default 200,...,12800)")
    p.add_argument("--trials", default="10", help="trials per (n, d) (default 10)")
    p.add_argument("--c", default="0.5",
                   help="step constant: eta = c / tr(Sigma), 0 < c < 2 (default 0.5)")
    p.add_argument("--init", default="zero",
                   help="zero (first step with relu'(0) = 1), all_active, random or "
                        "disconnected (default zero)")
    p.add_argument("--eps", default="1e-3",
                   help="scale of the all_active/random/disconnected starts (default 1e-3)")
    p.add_argument("--labels", default="sign",
                   help="labels +-1 (sign) or +-U[0.5, 1.5] (uniform) (default sign)")
    p.add_argument("--spectrum-a", default="0", metavar="A",
                   help="covariance spectrum lambda_k ~ k^-A (default 0: isotropic)")
    p.add_argument("--normalize", default="trace",
                   help="spectrum scaled to tr(Sigma) = d (trace) or lambda_1 = 1 (top)")
    p.add_argument("--tol", default="1e-12",
                   help="GD stops when |dW| <= tol |W| with an unchanged pattern (default 1e-12)")
    p.add_argument("--max-steps", default="100000", help="GD step limit (default 1e5)")
    p.add_argument("--seed", default="0", help="base seed (default 0)")
    p.add_argument("-o", "--output", default=".", metavar="DIR",
                   help="output folder (default: current)")
    p.add_argument("--name", default=None, help="file stem (default highdim-m<M>-<init>-c<c>-"
                                                "seed<S>)")
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (default: a bar on a terminal, else a line every "
                        "10 s)")
    p.set_defaults(func=main)


def main(args) -> int:
    """Run ``meanfield highdim`` with the parsed ``args``; returns the exit code."""
    from meanfield import figures, ownership
    from meanfield.highdim import output as report
    from meanfield.highdim.experiment import StudyParams, run_study, summarize

    params = StudyParams(neurons=_int(args.neurons, "--neurons"), ns=_int_list(args.n, "--n"),
                         ds=_int_list(args.d, "--d"), trials=_int(args.trials, "--trials"),
                         c=_float(args.c, "--c"), init=args.init, eps=_float(args.eps, "--eps"),
                         a=_float(args.spectrum_a, "--spectrum-a"), normalize=args.normalize,
                         labels=args.labels, tol=_float(args.tol, "--tol"),
                         max_steps=_int(args.max_steps, "--max-steps"),
                         seed=_int(args.seed, "--seed"))
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(_SOURCE, "-o", f"cannot create output folder {out}: "
                                        f"{exc.strerror or exc}") from None
    stem = args.name or f"highdim-m{params.neurons}-{params.init}-c{params.c:g}-seed{params.seed}"
    if not stem or "/" in stem or stem.startswith("."):
        raise InputError(_SOURCE, "--name", f"not a plain file stem: {stem!r}")
    h5, png = out / f"{stem}.h5", out / f"{stem}.png"
    with ownership.claim(out / stem, "-o"):
        for path in (h5, png):
            if path.exists() and not args.overwrite:
                raise InputError(_SOURCE, "-o", f"{path} exists (use --overwrite)")
        from meanfield.progress import progress_bar
        with progress_bar(len(params.cells) * params.trials, "highdim", "trial",
                          enabled=not args.quiet) as bar:
            cells = run_study(params, progress=bar)
        summary = summarize(params, cells)
        if not summary["converged_cells"]:
            sys.stderr.write(f"meanfield: error: gradient descent converged in no trial of any "
                             f"cell within --max-steps {params.max_steps} (tolerance "
                             f"{params.tol:g}); nothing written: raise --max-steps or --c\n")
            return 1
        had_png = png.exists()
        try:
            # the figure first: a failure leaves no data file behind, and a data file that
            # cannot be written takes the new figure with it
            figures.highdim_figure(png, summary)
            try:
                report.write_h5(h5, params, cells, summary)
            except OSError:
                if not had_png:
                    png.unlink(missing_ok=True)
                raise
        except OSError as exc:
            from meanfield.io_failures import describe
            what, reason = describe(exc, h5, within=out)
            raise InputError(what, "", f"cannot write ({reason})") from None
    summary["files"] = {"h5": str(h5), "figure": str(png)}
    if args.json:
        print(report.dumps(summary, indent=2))
    else:
        _print_table(summary)
    sys.stdout.flush()
    sys.stderr.write(f"meanfield: wrote {one_line(h5)} and {one_line(png)}\n")
    return 0


def _fmt(x, spec=".3e"):
    return "-" if x is None else format(x, spec)


#: What the columns of the table mean (printed under it).
COLUMNS = """\
columns (means over the converged trials of each cell; [LWTM26] notation, THEORY §10):
  conv         converged trials / trials ('*': none converged, cell left out of the slopes)
  gap mean     ‖W_∞ − W*‖_F, GD's limit to the minimum-norm interpolant; 95% interval:
               Student-t interval of that mean over the trials
  rel gap      gap / ‖W*‖_F
  frozen       per neuron j, the fraction of trials whose activation pattern froze at
               1[a_j y > 0]
  step1        fraction of trials frozen from the first step on (no pattern change after it)
  fit+ max     largest |f(x_i) − y_i| over the positive examples, any trial
  unfit+       mean number of positive examples with |f(x_i) − y_i| > 1e-6
  cf res max   largest ‖W_∞ − W_cf‖_F to the closed-form limit of the frozen pattern
               ('-' when no trial froze)"""


def _print_table(summary: dict) -> None:
    print(f"{'n':>4} {'d':>6} {'conv':>5} {'gap mean':>10} {'95% interval':>23} {'rel gap':>8} "
          f"{'frozen':>11} {'step1':>5} {'fit+ max':>9} {'unfit+':>6} {'cf res max':>10}")
    for r in summary["cells"]:
        g = r["gap"]
        ci = f"[{_fmt(g['ci95'][0])}, {_fmt(g['ci95'][1])}]"
        fr = ",".join(f"{f:.2f}" for f in r["frozen_fraction"])
        conv = f"{r['converged_trials']}/{r['trials']}" + ("" if r["in_fit"] else "*")
        print(f"{r['n']:>4} {r['d']:>6} {conv:>5} {_fmt(g['mean']):>10} {ci:>23} "
              f"{_fmt(r['rel_gap']['mean'], '.3f'):>8} {fr:>11} "
              f"{r['frozen_from_step1_fraction']:>5.2f} "
              f"{_fmt(r['fit_residual_pos_max'], '.1e'):>9} "
              f"{r['unfit_positives_mean']:>6.2f} "
              f"{_fmt(r['closed_form_residual_max'], '.1e'):>10}")
    for c in summary.get("excluded_cells", []):
        print(f"n={c['n']} d={c['d']}: no trial converged; left out of the slopes")
    print(COLUMNS)
    for key, fit in summary["slopes"].items():
        for var in ("d", "n"):
            if var in fit:
                s = fit[var]
                print(f"slope of log mean {key} in log {var}: {s['slope']:.3f} "
                      f"[{_fmt(s['ci95'][0], '.3f')}, {_fmt(s['ci95'][1], '.3f')}]")
