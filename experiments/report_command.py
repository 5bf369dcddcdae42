"""pdmm-bridge report: a Markdown table of a sweep, one row per variant, written to SWEEP_DIR/report.md.

    pdmm-bridge report runs/sweep
    pdmm-bridge report runs/sweep --metrics val_loss,train_loss

Each row is a variant (runs that differ only in seed, labelled as by `pdmm-bridge plot`): seeds
finished / total, then for each metric its final value (at the last evaluation) and its best
(min for losses and errors, max for accuracies) as mean ± std over the finished seeds (std with ddof = 1;
one seed shows its value alone), the parameter count, seconds per step and tokens/s (mean).
Failed, pending and unfinished runs are listed below the table. Figures of val_loss and val_acc
(or of each --metrics metric) over the finished runs are saved beside report.md and linked.

When the sweep's config has a [report] table (the reproductions under experiments/configs/repro/),
the report opens with the source's claim and the setting, and adds what the table asks for: paired
differences against a baseline, steps to thresholds, probe and lambda tables, figures, and one
verdict per claim and condition (paired t-test, Holm-corrected within the section, a verdict only at
p < 0.05 with >= 5 seeds; see experiments/repro_report.py). With --results FILE the report also
becomes the section repro-<sweep directory name> of FILE, its figures copied to figures/repro/, and
the summary section "What reproduces at laptop scale" (repro-summary) is rebuilt from every section's verdicts;
the section's marker records the run's steps and seeds, and a section made from more steps or
seeds is not replaced by a smaller run's.

    pdmm-bridge report runs/repro/attentionx_digits --results docs/RESULTS.md

Without --force nothing is replaced: an existing report.md or figure in SWEEP_DIR, or a larger
run's section in FILE, is an error.
"""

import argparse
from pathlib import Path

from . import rundir
from .options import DEFAULT_METRICS
from .rundir import check_new_file


def _metric_list(text):
    metrics = [m.strip() for m in text.split(",") if m.strip()]
    if not metrics:
        raise argparse.ArgumentTypeError(f"expected metric names separated by commas, got {text!r}")
    return metrics


def add_parser(subparsers):
    p = subparsers.add_parser(
        "report",
        help="write SWEEP_DIR/report.md: a table row per variant",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sweep", metavar="SWEEP_DIR", help="a sweep directory (or a directory of run directories)")
    p.add_argument(
        "--metrics",
        type=_metric_list,
        metavar="M1,M2,...",
        help=f"metrics to tabulate and plot; when not given the [report] table's, else those of "
        f"{', '.join(DEFAULT_METRICS)} the runs log",
    )
    p.add_argument(
        "--results",
        metavar="FILE",
        help="also write the report as a section of this Markdown file (figures to figures/repro/ beside it)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an existing report.md and figures, and a --results section made from a larger run",
    )
    return p


def run(args):
    from .claims import checked_spec  # numpy, torch, matplotlib: imported only to run (report --help answers at once)
    from .plots import plot_groups
    from .repro_report import (
        SUMMARY_SECTION,
        copy_figures,
        extra_figures,
        extra_sections,
        refresh_summary,
        verdict_lines,
    )
    from .results_doc import check_section, replace_section
    from .runs import expand, read_sweep
    from .sweep_report import (
        chosen_metrics,
        figure_links,
        figure_names,
        finished_runs,
        header,
        problems,
        run_scale,
        table,
        variants,
    )

    path = Path(args.sweep)
    runs = expand([path])
    sweep = read_sweep(path) or {}
    entries = {entry["name"]: entry for entry in sweep.get("runs", [])}
    finished = finished_runs(path, runs, entries)
    spec = checked_spec(sweep.get("report") or {}, path / "sweep.json")
    requested = args.metrics or spec.get("metrics")
    metrics = chosen_metrics(requested, finished)
    groups, missing = variants(runs, spec, entries)
    figures = figure_names(requested, finished)
    for name in ["report.md", *figures, *extra_figures(spec)]:
        check_new_file(path / name, args.force)
    heading, scale = f"repro-{path.resolve().name}", run_scale(finished)
    if args.results:
        check_section(args.results, heading, scale, args.force)
    done = {name: [run for run in members if run.finished] for name, members in groups.items()}
    for figure in figures:
        plot_groups({k: v for k, v in done.items() if v}, figure[5:-4], path / figure)

    lines = header(path, sweep, finished, metrics, spec) + table(groups, missing, metrics)
    extra, more_figures = extra_sections(path, spec, groups, runs)
    lines += extra + problems(runs, missing) + figure_links(figures + more_figures)
    lines += verdict_lines(spec, runs)
    rundir.write_file(path / "report.md", "\n".join(lines) + "\n")
    print(path / "report.md")
    if args.results:
        links = copy_figures(path, figures + more_figures, args.results)
        text = "\n".join(lines)
        for figure, link in links.items():
            text = text.replace(f"]({figure})", f"]({link})")
        command = f"pdmm-bridge report {path} --results {args.results}"
        replace_section(
            args.results,
            heading,
            "#" + text + f"\n\nGenerated by `{command}`.",  # "# title" -> "## title"
            scale=scale,
            force=args.force,
        )
        refresh_summary(args.results)
        print(f"{args.results}: section {heading} and the summary {SUMMARY_SECTION}")
    return 0
