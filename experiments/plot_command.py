"""pdmm-bridge plot: one metric of training runs against step and against wall-clock seconds.

    pdmm-bridge plot runs/sweep --metric val_acc
    pdmm-bridge plot runs/a runs/b runs/c --out compare.png

RUNS are run directories or sweep directories, which stand for every run directory inside
(runs that sweep.json marks failed are left out and named on stderr). Runs whose configs
differ only in seed (and device, compile) are one variant, labelled by the config keys that
differ (e.g. "residual=belief"); each variant is drawn as the mean over its seeds, on the
steps all of them logged, with a band from the minimum to the maximum over seeds, so a run
still going cuts its variant's curve at its last step. Rows without the metric are skipped:
val_* metrics exist only at evaluations. The figure goes to --out, by default
plot_<metric>.png in the sweep directory when the only argument is one, else in the current
directory.
"""
import argparse
import sys
from pathlib import Path

from .common import UsageError
from .plots import plot_runs
from .runs import aligned, expand, group_runs, is_sweep_dir


def add_parser(subparsers):
    p = subparsers.add_parser("plot", help="plot a metric of runs: mean and min..max over seeds",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUNS", help="run directories or sweep directories")
    p.add_argument("--metric", default="val_loss", help="a logged metric, e.g. val_loss, train_loss, val_acc, lr")
    p.add_argument("--out", metavar="FILE", help="figure file (default plot_<metric>.png, see above)")
    return p


def run(args):
    runs = expand(args.runs)
    failed = [run.name for run in runs if run.failed]
    if args.out:
        out = Path(args.out)
    elif len(args.runs) == 1 and is_sweep_dir(args.runs[0]):
        out = Path(args.runs[0]) / f"plot_{args.metric}.png"
    else:
        out = Path(f"plot_{args.metric}.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_metric([run for run in runs if not run.failed], args.metric, out)
    if failed:
        print(f"pdmm-bridge plot: left out the failed run(s) {', '.join(failed)}", file=sys.stderr)
    print(out)
    return 0


def plot_metric(runs, metric, path):
    """Group `runs` into variants and save the figure of `metric` to `path`; returns the Figure.

    UsageError when no run logs `metric` (naming the metrics that exist).
    """
    if not runs:
        raise UsageError("no run directories to plot")
    if not any(metric in run.metric_names() for run in runs):
        existing = list(dict.fromkeys(name for run in runs for name in run.metric_names()))
        raise UsageError(f"no run logs the metric {metric!r}; the runs log {', '.join(existing) or 'nothing yet'}")
    return plot_groups(group_runs(runs), metric, path)


def plot_groups(groups, metric, path):
    """Save the figure of `metric` for {label: [runs]} to `path`; returns the Figure (one line per variant and panel)."""
    curves = {name: curve for name, members in groups.items()
              if (curve := aligned(members, metric)) is not None}
    if not curves:
        raise UsageError(f"the seeds of each variant share no step that logs {metric!r}")
    tasks = {run.config.get("task", {}).get("name") for members in groups.values() for run in members}
    title = f"{metric}, {tasks.pop()}" if len(tasks) == 1 and None not in tasks else metric
    return plot_runs(curves, metric, path, title)
