"""pdmm-bridge plot: one metric of training runs against step and wall-clock seconds, or solve runs' convergence.

    pdmm-bridge plot runs/sweep --metric val_acc
    pdmm-bridge plot runs/a runs/b runs/c --out compare.png
    pdmm-bridge plot runs/avg runs/lasso --out solves.png

RUNS are run directories or sweep directories, which stand for every run directory inside
(runs that sweep.json marks failed are left out and named on stderr). Runs whose configs
differ only in seed (and device, compile) are one variant, labelled by the config keys that
differ (e.g. "residual=belief"); each variant is drawn as the mean over its seeds, on the
steps all of them logged, with a band from the minimum to the maximum over seeds, so a run
still going cuts its variant's curve at its last step. Rows without the metric are skipped:
val_* metrics exist only at evaluations.

Solve directories (`pdmm-bridge solve --out`) are drawn as residual, relative error and objective
against iteration (or the one --metric of those), one line per method, labelled
"<directory>: <method>" when there are several directories. --x messages or --x bits draws them
against the cumulative messages delivered or bits sent instead (runs on the ideal network,
which history.csv does not count, send the same number every iteration: config.json's totals
over the iterations); several axes, --x iteration,bits, draw each metric against each of them,
side by side.

The figure goes to --out, or else to plot_<metric>.png (plot_convergence.png for all solve panels)
in the directory when there is one argument (a run, sweep or solve directory); several need --out,
so nothing is written into the current directory unasked. An existing file is not replaced
without --force.
"""

import argparse
import sys
from pathlib import Path

from . import rundir
from .errors import UsageError
from .options import AXES
from .rundir import check_new_file


def add_parser(subparsers):
    p = subparsers.add_parser(
        "plot",
        help="plot a metric of runs: mean and min..max over seeds",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", metavar="RUNS", help="run directories or sweep directories, or solve directories")
    p.add_argument(
        "--metric",
        help="a logged metric, e.g. val_loss (training runs when not given), train_loss, "
        "val_acc, lr; for solve runs residual, error or objective (all three when not given)",
    )
    p.add_argument(
        "--x",
        type=_axes,
        default=("iteration",),
        metavar="AXIS[,AXIS...]",
        help="x axis of solve "
        "runs: iteration, messages (delivered) or bits (sent), or several separated by commas, a panel "
        "per axis and metric (default: iteration)",
    )
    p.add_argument("--out", metavar="FILE", help="figure file; plot_<metric>.png when not given, see above")
    p.add_argument("--force", action="store_true", help="replace an existing figure file")
    return p


def _axes(text):
    """--x "iteration,bits" -> ("iteration", "bits"): distinct names from AXES."""
    axes = tuple(part.strip() for part in text.split(","))
    if not all(axis in AXES for axis in axes) or len(set(axes)) != len(axes):
        raise argparse.ArgumentTypeError(
            f"expected distinct axes from {', '.join(AXES)} separated by commas, got {text!r}"
        )
    return axes


def run(args):
    from .plots import plot_metric  # numpy and matplotlib: imported only to run (plot --help answers at once)
    from .runs import expand, is_solve_dir

    solves = [is_solve_dir(path) for path in args.runs]
    if any(solves) and not all(solves):
        raise UsageError("give either solve directories or training runs, not both")
    if all(solves):
        return plot_solves(args)
    if args.x != ("iteration",):
        raise UsageError("--x applies to solve directories; training runs are drawn against step and seconds")
    metric = args.metric or "val_loss"
    runs = expand(args.runs)
    failed = [run.name for run in runs if run.failed]
    out = output_file(args, metric)
    plot_metric([run for run in runs if not run.failed], metric, out)
    if failed:
        print(f"pdmm-bridge plot: left out the failed run(s) {', '.join(failed)}", file=sys.stderr)
    print(out)
    return 0


def output_file(args, name):
    """--out, else plot_<name>.png in the only directory argument; checked with --force (its directory is made
    when the figure is saved, so a refused plot leaves none behind)."""
    if args.out:
        out = Path(args.out)
    elif len(args.runs) == 1:
        out = Path(args.runs[0]) / f"plot_{name}.png"
    else:
        raise UsageError(f"{len(args.runs)} directories: name the figure with --out FILE")
    check_new_file(out, args.force)
    return out


def plot_solves(args):
    """Residual, error and objective (or --metric) of solve directories against iteration, one line per method."""
    from .plots import PANELS, plot_convergence
    from .runs import load_solve
    from .solve_curves import solve_curves, solves_title

    runs = [load_solve(path) for path in args.runs]
    if args.metric and args.metric not in PANELS:
        raise UsageError(f"solve runs record {', '.join(PANELS)}, not {args.metric!r}")
    curves = solve_curves(runs, args.x)
    panels = [args.metric] if args.metric else [key for key in PANELS if any(key in c for c in curves.values())]
    out = output_file(args, args.metric or "convergence")
    rundir.make_dir(out.parent)
    plot_convergence(curves, out, solves_title(runs), panels, args.x)
    print(out)
    return 0
