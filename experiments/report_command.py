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

import numpy as np

from . import rundir
from .claims import checked_spec, metric_value
from .common import UsageError
from .plots import plot_groups
from .repro_report import (
    SUMMARY_SECTION,
    copy_figures,
    extra_figures,
    extra_sections,
    refresh_summary,
    setting,
    verdict_lines,
)
from .results_doc import check_section, replace_section
from .rundir import check_new_file
from .runs import IGNORED_KEYS, differing_keys, expand, flat_config, group_runs, label, read_sweep
from .train import lower_is_better

DEFAULT_METRICS = ("val_loss", "val_acc", "train_acc")
DEFAULT_FIGURES = ("val_loss", "val_acc")


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
    path = Path(args.sweep)
    runs = expand([path])
    sweep = read_sweep(path) or {}
    entries = {entry["name"]: entry for entry in sweep.get("runs", [])}
    finished, loaded = [run for run in runs if run.finished], {run.name for run in runs}
    if not finished:
        statuses = [_status(run)[0] for run in runs]
        statuses += [entry.get("status", "pending") for name, entry in entries.items() if name not in loaded]
        counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses)) or "no runs"
        raise UsageError(f"no finished run in {path} ({counts})")

    spec = checked_spec(sweep.get("report") or {}, path / "sweep.json")
    logged = {name for run in finished for name in [*run.metric_names(), *run.summary.get("final", {})]}
    requested = args.metrics or spec.get("metrics")
    if requested:
        unknown = [m for m in requested if m not in logged]
        if unknown:
            raise UsageError(f"no finished run logs {', '.join(unknown)}; they log {', '.join(sorted(logged))}")
    metrics = requested or [m for m in DEFAULT_METRICS if m in logged]

    groups = group_runs(runs, spec.get("label_keys"))
    mixed = [name for name, members in groups.items() if differing_keys(members)]
    if mixed:
        raise UsageError(
            f"[report] label_keys {spec['label_keys']} leave runs with different configs in one variant "
            f"({mixed[0]}: they differ in {', '.join(differing_keys(groups[mixed[0]]))}); add those keys"
        )
    missing = {name: [] for name in groups}  # sweep entries with no run directory, by variant
    for name, entry in entries.items():
        if name not in loaded:
            missing.setdefault(_variant_of(entry, groups), []).append(entry)

    figures = [
        f"plot_{metric}.png"
        for metric in requested or [m for m in DEFAULT_FIGURES if m in logged]
        if any(metric in run.metric_names() for run in finished)
    ]
    for name in ["report.md", *figures, *extra_figures(spec)]:
        check_new_file(path / name, args.force)
    heading, scale = f"repro-{path.resolve().name}", run_scale(finished)
    if args.results:
        check_section(args.results, heading, scale, args.force)
    done = {name: [run for run in members if run.finished] for name, members in groups.items()}
    for figure in figures:
        plot_groups({k: v for k, v in done.items() if v}, figure[5:-4], path / figure)

    lines = _header(path, sweep, finished, metrics, spec)
    lines += _table(groups, missing, metrics)
    extra, more_figures = extra_sections(path, spec, groups, runs)
    lines += extra + _problems(runs, missing)
    lines += [line for figure in figures + more_figures for line in ("", f"![{figure[5:-4]}]({figure})")]
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


def run_scale(finished):
    """{"steps": the most steps a finished run was set to train, "seeds": how many distinct seeds finished}."""
    return {
        "steps": max(run.config.get("train", {}).get("max_iters", 0) for run in finished),
        "seeds": len({run.seed for run in finished}),
    }


def _variant_of(entry, groups):
    """The label of the variant whose runs all have the entry's overrides, else a label built from them."""
    overrides = {key: value for key, value in entry.get("overrides", {}).items() if key not in IGNORED_KEYS}
    for name, members in groups.items():
        if all(flat_config(run.config).get(key) == value for run in members for key, value in overrides.items()):
            return name
    return label(overrides) or entry["name"]


def _status(run):
    """(status, detail) of a run: "finished", or the sweep's "failed" / "pending", else "unfinished"."""
    if run.finished:
        return "finished", None
    entry = run.entry or {}
    status = entry.get("status") if entry.get("status") in ("failed", "pending") else "unfinished"
    last = max((row["step"] for row in run.metrics), default=None)
    detail = [f"last step {last}" if last is not None else "no step logged", entry.get("error")]
    return status, "; ".join(_one_line(d) for d in detail if d)


def _header(path, sweep, finished, metrics, spec):
    lines = [f"# {spec.get('title', path.resolve().name)}", ""]
    if spec.get("claim"):
        lines += [f"**Source claim** ({spec.get('source', 'source not named')}): {spec['claim']}", ""]
        lines += [f"**Our setting**: {setting(finished)}", ""]
        lines += [f"**Notes**: {spec['notes']}", ""] if spec.get("notes") else []
    if sweep:
        grid = "; ".join(f"{key} = {', '.join(map(str, values))}" for key, values in sweep.get("grid", {}).items())
        lines.append(
            f"Config `{sweep.get('config')}`, grid {grid or '(none)'}, seeds "
            f"{', '.join(map(str, sweep.get('seeds', [])))}."
        )
    metas = [run.meta for run in finished if run.meta]
    unknown = {"git_commit": "none (trained outside a git checkout)"}
    versions = [
        f"{key} {', '.join(sorted({str(meta.get(key) or unknown.get(key)) for meta in metas}))}"
        for key in ("version", "git_commit", "torch", "device")
        if metas
    ]
    if versions:
        lines.append(f"Finished runs: {'; '.join(versions)}.")
    lines += [
        "",
        "Mean ± std over finished seeds (std with ddof = 1; one seed: its value). Final: at the last "
        "evaluation; best: min over evaluations for losses and errors, max for accuracies.",
        "",
    ]
    return lines


def _table(groups, missing, metrics):
    finished = {name: [run for run in members if run.finished] for name, members in groups.items()}
    tokens = any(run.summary.get("tokens_per_second") is not None for runs in finished.values() for run in runs)
    head = ["variant", "seeds"] + [f"{kind} {m}" for m in metrics for kind in ("final", "best")]
    head += ["params", "s/step"] + (["tokens/s"] if tokens else [])
    rows = [head, ["---"] * len(head)]
    for name in dict.fromkeys([*groups, *missing]):
        runs = finished.get(name, [])
        total = len(groups.get(name, [])) + len(missing.get(name, []))
        row = [name.replace("|", "\\|"), f"{len(runs)}/{total}"]
        for metric in metrics:
            row += [
                mean_std([metric_value(run, metric) for run in runs]),
                mean_std([best(run, metric) for run in runs]),
            ]
        params = sorted({run.summary.get("params") for run in runs} - {None})
        row += [
            f"{params[0]:,}" + (f"–{params[-1]:,}" if len(params) > 1 else "") if params else "—",
            _mean([run.summary.get("seconds_per_step") for run in runs], "{:.3g}"),
        ]
        if tokens:
            row.append(_mean([run.summary.get("tokens_per_second") for run in runs], "{:,.0f}"))
        rows.append(row)
    return ["| " + " | ".join(row) + " |" for row in rows]


def _problems(runs, missing):
    lines = []
    for run in runs:
        status, detail = _status(run)
        if status != "finished":
            lines.append(f"- `{run.name}`: {status} ({detail})")
    for entry in (entry for group in missing.values() for entry in group):
        error = entry.get("error")
        lines.append(
            f"- `{entry['name']}`: {entry.get('status', 'pending')}, no run directory"
            + (f" ({_one_line(error)})" if error else "")
        )
    return ["", "Runs not finished:", "", *lines] if lines else []


def _one_line(text, limit=300):
    """The last non-blank line of `text` (a traceback's exception), cut to `limit` characters."""
    text = ([line.strip() for line in str(text).splitlines() if line.strip()] or [""])[-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def best(run, metric):
    """summary["best"][metric], else min over the logged rows for a loss, max for an accuracy, else None."""
    value = run.summary.get("best", {}).get(metric)
    if value is None:
        _, _, values = run.series(metric)
        pick = np.min if lower_is_better(metric) else np.max if "acc" in metric else None
        value = pick(values) if pick and len(values) else None
    return value


def mean_std(values):
    """ "1.234 ± 0.056" over the values that are not None (std with ddof = 1); one value alone; none: "—"."""
    values = np.array([v for v in values if v is not None], dtype=float)
    if len(values) == 0:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{values.mean():.4g} ± {values.std(ddof=1):.2g}"


def _mean(values, fmt):
    values = [v for v in values if v is not None]
    return fmt.format(float(np.mean(values))) if values else "—"
