"""What `pdmm-bridge report` adds for a sweep whose config has a [report] table (the reproductions).

    [report]
    title = "AttentionX on a ViT (digits)"
    source = "AttentionX paper (docs/theory/reproductions.md section 2)"
    claim = "CIFAR10: 88.15 ± 0.55 % -> 89.41 ± 0.18 %"         # the source's numbers
    metrics = ["val_acc", "val_loss"]                            # the table's metrics
    baseline = { "model.residual" = "standard" }                 # paired differences against these runs
    label_keys = ["model.kind", "task.op"]                       # optional: keys that name a variant
    thresholds = { "val_acc" = 0.99 }                            # optional: steps until each is reached
    log_steps = true                                             # optional: accuracy curves on a log step axis
    probe = true                                                 # optional: Fig. 4-style probe of each variant
    lambdas = true                                               # optional: diff attention's lambda per layer
    against = "train.block_size"                                 # optional: metric and s/step against a key
    notes = "The convex model's settings were not tuned."        # optional: a paragraph under our setting
    [[report.claims]]                                            # one verdict per condition
    variant = { "model.residual" = "attentionx" }
    than = { "model.residual" = "standard" }
    metric = "val_acc"                                           # or "seconds_per_step"
    threshold = 0.99                                             # optional: compare steps to reach it instead
    full_steps = 2000                                            # optional: fewer steps mark its verdict early training
    text = "AttentionX beats standard attention"                 # optional: the claim in words
    [[report.probe_claims]]                                      # a claim on the probe (bridge.probe)
    variant = { "model.residual" = "belief" }
    statistic = "wdelta_ratio"                                   # one of bridge.probe.STATISTICS
    expect = "below 1"                                           # or "falls with depth"

The claims are tested by experiments/claims.py (paired by seed, per condition, Holm-corrected within
the section; a verdict "agrees" / "disagrees" needs Holm p < 0.05 and at least 5 seeds); this module
writes the Markdown: the verdict table, the baseline, threshold, lambda and probe tables, and the
section's figures (drawn by experiments/plots.py). With --results, the verdict rows also feed the
summary section "What reproduces at laptop scale" at the head of the reproductions (refresh_summary).
"""

import json
import re
from pathlib import Path

import numpy as np

from bridge.statistics import paired_test

from . import rundir
from .checkpoint_stats import run_lambdas, run_probe
from .claims import (
    ALPHA,
    MIN_PAIRS,
    first_step,
    format_p,
    full_budget,
    judge,
    lower_better,
    matches,
    metric_value,
    paired_values,
    section_tests,
    variant_keys,
)
from .config import load_config
from .plots import plot_against, plot_log_steps, plot_probe_layers
from .results_doc import replace_section
from .runs import flat_config, label
from .stopping import lower_is_better

SUMMARY_SECTION = "repro-summary"


def format_interval(test):
    """ "+0.012 [-0.003, +0.027]": mean difference and its 95 % t interval, in the metric's units."""
    if test["n"] == 0:
        return "—"
    if not np.isfinite(test["low"]):
        return f"{test['mean']:+.4g}"
    return f"{test['mean']:+.4g} [{test['low']:+.3g}, {test['high']:+.3g}]"


def baseline_table(groups, runs, baseline, metrics, keys):
    """Rows: non-baseline variant x metric, with the paired difference at the budget (variant - baseline, same
    seed), its 95 % t interval and p (no verdict: the claims table gives those, Holm-corrected)."""
    finished = [run for run in runs if run.finished]
    lines = [
        "| variant | metric | variant − baseline at the budget [95 % CI] | p | pairs | better in |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, members in groups.items():
        done = [run for run in members if run.finished]
        if not done or all(matches(run, baseline) for run in done):
            continue
        for metric in metrics:
            values, base, _, _ = paired_values(
                done, finished, baseline, lambda run, m=metric: (metric_value(run, m), False), keys
            )
            test = paired_test(values, base)
            diffs = np.subtract(values, base)
            better = int(np.sum(diffs < 0 if lower_better(metric) else diffs > 0))
            lines.append(
                f"| {name} | {metric} | {format_interval(test)} | {format_p(test['p'])} | {test['n']} | "
                f"{better}/{test['n']} |"
            )
    return lines if len(lines) > 2 else []


def verdict_lines(spec, runs):
    """The verdict table (claim, condition, mean difference and 95 % CI, p, Holm p, n, verdict), its notes, and
    the rows as a JSON comment that the summary section of the results file reads."""
    tests = section_tests(spec, runs)
    if not tests:
        return []
    lines = [
        "",
        f"Verdicts: per claim and condition, a two-sided t-test across seeds (paired by seed for "
        f"comparisons), Holm-corrected over the {len(tests)} test{'s' * (len(tests) > 1)} of this section; "
        f"agrees or disagrees only at Holm p < {ALPHA:g} with at least {MIN_PAIRS} seeds.",
        "",
        "| claim | condition | compared (metric units) | mean difference [95 % CI] | p | Holm p | n | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows, notes = [], []
    for test, p, text in judge(tests):
        difference = "—" if test.outcome else format_interval(test.test)
        cells = [
            test.claim,
            test.condition or "—",
            test.quantity,
            difference,
            format_p(test.test["p"]),
            format_p(p),
            str(test.test["n"]),
            f"**{text}**",
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        notes += [f"- {test.claim}{f' ({test.condition})' if test.condition else ''}: {note}." for note in test.notes]
        rows.append(
            {
                "claim": test.claim,
                "condition": test.condition,
                "result": f"{test.quantity}: {difference}",
                "verdict": text,
                "p": format_p(p),
                "n": test.test["n"],
            }
        )
    return lines + (["", *notes] if notes else []) + ["", f"<!-- claims {json.dumps(rows)} -->"]


def budget_line(runs):
    """One sentence on the step budgets: the same for every run and trained in full, or what is left out."""
    finished = [run for run in runs if run.finished]
    budgets = sorted({run.config.get("train", {}).get("max_iters") for run in finished})
    stopped = sum(not full_budget(run) for run in finished)
    text = f"Step budget: {' / '.join(f'{b:,}' for b in budgets)} steps"
    text += " (variants differ; only pairs with the same budget are compared)" if len(budgets) > 1 else " for every run"
    if stopped:
        return text + (
            f"; {stopped} run(s) stopped early, so their final values are not at the budget and "
            "they are left out of paired tests."
        )
    return (
        text + "; every run trained in full, so final values are at the budget (steps to a threshold, where "
        "shown, are read off the evaluations)."
    )


def wall_lines(runs):
    """One sentence on the section's training time (summed wall_seconds of its finished runs, and the longest
    run), and a comment the summary section reads to total all reproductions."""
    timed = [run for run in runs if run.finished and run.summary.get("wall_seconds") is not None]
    if not timed:
        return []
    total = sum(run.summary["wall_seconds"] for run in timed)
    longest = max(timed, key=lambda run: run.summary["wall_seconds"])
    return [
        "",
        f"Wall time: {total / 60:.0f} min of training summed over {len(timed)} runs (one thread each; "
        f"evaluation included); the longest run took {longest.summary['wall_seconds'] / 60:.1f} min "
        f"({longest.path.name}).",
        f"<!-- wall {json.dumps({'minutes': round(total / 60, 1), 'runs': len(timed)})} -->",
    ]


def summary_lines(results):
    """The "what reproduces at laptop scale" table from the claims comments of every repro section in `results`."""
    text = Path(results).read_text()
    lines = [
        "## What reproduces at laptop scale",
        "",
        "One row per claim and condition, from the sections below (Holm p within each section; seeds = "
        "paired seeds, or seeds probed).",
        "",
        "| section | claim | condition | our result | verdict | Holm p | seeds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    pattern = re.compile(r"<!-- begin (repro-[\w.-]+)[^\n]*-->\n## ([^\n]*)\n(.*?)<!-- end \1 -->", re.S)
    walls = {}
    for _name, title, body in pattern.findall(text):
        for found in re.findall(r"<!-- wall (\{.*?\}) -->", body):
            walls[title] = json.loads(found)
        for found in re.findall(r"<!-- claims (\[.*?\]) -->", body):
            for row in json.loads(found):
                cells = [
                    title,
                    row["claim"],
                    row["condition"] or "—",
                    row["result"],
                    row["verdict"],
                    row["p"],
                    str(row["n"]),
                ]
                lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    if walls:
        ranked = sorted(walls.items(), key=lambda item: -item[1]["minutes"])
        total = sum(wall["minutes"] for wall in walls.values())
        lines += [
            "",
            f"Training time of the {len(walls)} reproductions: {total:.0f} min ({total / 60:.1f} h) summed over "
            f"{sum(wall['runs'] for wall in walls.values())} runs of one thread each, as measured; longest: "
            + "; ".join(f"{title} {wall['minutes']:.0f} min" for title, wall in ranked[:3])
            + ". The runs shared the CPU with whatever else the machine ran, so a quiet machine is faster; "
            "two sweeps side by side on 2 cores take about half the sum.",
        ]
    return lines


def refresh_summary(results):
    """Rewrite the summary section of `results` (created just before the first repro section)."""
    path = Path(results)
    text = rundir.read_text(path)
    if f"<!-- begin {SUMMARY_SECTION} -->" not in text:
        first = text.find("<!-- begin repro-")
        empty = f"<!-- begin {SUMMARY_SECTION} -->\n<!-- end {SUMMARY_SECTION} -->\n\n"
        rundir.write_file(path, text[:first] + empty + text[first:] if first >= 0 else text + "\n" + empty)
    replace_section(path, SUMMARY_SECTION, "\n".join(summary_lines(path)), force=True)


def threshold_table(groups, thresholds):
    """Steps to each threshold per variant (mean ± std over the seeds that reached it), and the delay
    between the first two thresholds (e.g. train then validation accuracy) where both were reached."""
    keys = list(thresholds)
    head = [
        f"steps to {key} ≥ {value:g}" if not lower_is_better(key) else f"steps to {key} ≤ {value:g}"
        for key, value in thresholds.items()
    ]
    delay = len(keys) >= 2
    lines = [
        "| variant | " + " | ".join(head + ([f"delay ({keys[1]} − {keys[0]})"] if delay else [])) + " |",
        "| --- |" + " --- |" * (len(head) + delay),
    ]
    for name, members in groups.items():
        done = [run for run in members if run.finished]
        if not done:
            continue
        steps = {key: [first_step(run, key, value) for run in done] for key, value in thresholds.items()}
        cells = [_steps_cell(values) for values in steps.values()]
        if delay:
            cells.append(
                _steps_cell(
                    [
                        b - a if a is not None and b is not None else None
                        for a, b in zip(steps[keys[0]], steps[keys[1]], strict=False)
                    ]
                )
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _steps_cell(values):
    reached = [v for v in values if v is not None]
    if not reached:
        return f"not reached (0/{len(values)})"
    text = f"{np.mean(reached):.0f} ± {np.std(reached, ddof=1):.0f}" if len(reached) > 1 else f"{reached[0]}"
    return text + (f" ({len(reached)}/{len(values)} reached)" if len(reached) < len(values) else "")


def lambda_table(groups):
    """Per diff variant and layer: the learned lambda (mean ± std over seeds) and its initial value."""
    lines = []
    for name, members in groups.items():
        per_run = [values for values in (run_lambdas(run) for run in members if run.finished) if values]
        if not per_run:
            continue
        learned = np.array([[value for value, _ in values] for values in per_run])  # (seeds, layers)
        inits = [init for _, init in per_run[0]]
        if not lines:
            lines = ["| variant | layer | lambda_init | learned lambda |", "| --- | --- | --- | --- |"]
        for layer, init in enumerate(inits):
            column = learned[:, layer]
            value = f"{column.mean():.3f} ± {column.std(ddof=1):.3f}" if len(column) > 1 else f"{column[0]:.3f}"
            lines.append(f"| {name} | {layer + 1} | {init:.3f} | {value} |")
    return lines


PROBE_COLUMNS = (
    ("wdelta_ratio", "\\|\\|Delta W^o\\|\\| / \\|\\|MH W^o\\|\\|"),
    ("phi_ratio", "\\|\\|Phi\\|\\| / \\|\\|V\\|\\| (the run's gamma)"),
    ("cos_delta_wo", "cos(Delta W^o, X)"),
    ("cos_mh_wo", "cos(MH W^o, X)"),
)


def probe_means(groups):
    """[(index, variant, {statistic: (layers,) mean over seeds})] of the variants whose finished runs have a
    checkpoint to probe (index: the variant's place among all groups, its figure colour)."""
    out = []
    for index, (name, members) in enumerate(groups.items()):
        totals = [t for t in (run_probe(run) for run in members if run.finished) if t]
        if totals:
            means = {key: np.array([[layer[key] for layer in t] for t in totals]).mean(0) for key, _ in PROBE_COLUMNS}
            out.append((index, name, means))
    return out


def probe_table(groups, path):
    """Per variant (mean over seeds) and layer: ||Delta W^o|| / ||MH W^o|| (belief Fig. 4, after the output
    projection), ||Phi|| / ||V|| (AttentionX) and the angles of Delta W^o and MH W^o to the token X: the table's
    lines, the figure (plots.plot_probe_layers) saved to `path`."""
    means = probe_means(groups)
    plot_probe_layers(means, path)
    return [
        "| variant | " + " | ".join(f"{title} per layer" for _, title in PROBE_COLUMNS) + " |",
        "| --- |" + " --- |" * len(PROBE_COLUMNS),
    ] + [
        f"| {name} | " + " | ".join(", ".join(f"{v:.3f}" for v in values[key]) for key, _ in PROBE_COLUMNS) + " |"
        for _, name, values in means
    ]


def against_section(runs, key, metric, baseline, keys, path):
    """Metric and seconds per step against config key `key` (one line per other variant): the s/step table's
    lines, the figure (plots.plot_against) saved to `path`."""
    finished = [run for run in runs if run.finished]
    xs = sorted({flat_config(run.config).get(key) for run in finished})
    others = {}
    for run in finished:
        flat = flat_config(run.config)
        rest = {k: flat.get(k) for k in keys if k != key}
        others.setdefault(label(rest) or "runs", []).append(run)
    values, seconds = {}, {}
    for name, members in others.items():
        at = {x: [r for r in members if flat_config(r.config).get(key) == x] for x in xs}
        values[name] = [np.mean([metric_value(r, metric) for r in at[x]]) if at[x] else np.nan for x in xs]
        seconds[name] = [np.mean([r.summary["seconds_per_step"] for r in at[x]]) if at[x] else np.nan for x in xs]
    short = key.rsplit(".", 1)[-1]
    plot_against(xs, values, seconds, short, metric, path)
    base = next((name for name, members in others.items() if all(matches(r, baseline) for r in members)), None)
    names = list(others)
    lines = [
        f"| {short} | "
        + " | ".join(f"s/step {n}" for n in names)
        + "".join(f" | {base} ÷ {n} time" for n in names if base and n != base)
        + " |",
        "| --- |" + " --- |" * (len(names) + sum(1 for n in names if base and n != base)),
    ]
    for i, x in enumerate(xs):
        cells = [f"{seconds[n][i]:.3g}" for n in names]
        cells += [f"{seconds[base][i] / seconds[n][i]:.2f}" for n in names if base and n != base]
        lines.append(f"| {x} | " + " | ".join(cells) + " |")
    return lines


def setting(runs):
    """One sentence on the runs' shared setting: task, model size, steps, batch, seeds."""
    config = load_config(runs[0].path / "config.toml")
    model, train, d_model = config.model, config.train, config.model.attention.d_model
    seeds = sorted({run.seed for run in runs})
    size = {
        "transformer": f"{model.n_layer} layer{'s' * (model.n_layer > 1)}, {d_model} dims, "
        f"{model.attention.n_head} heads",
        "convex": f"convex attention, fixed {d_model}-dim embeddings, {model.gates} gates",
        "convex_blocks": f"{model.n_layer} convex attention + FCN block{'s' * (model.n_layer > 1)}, trained "
        f"{d_model}-dim embeddings, {model.gates} gates",
    }[model.kind]
    options = ", ".join(f"{k} {v}" for k, v in config.task.options.items())
    return (
        f"Task {config.task.name}{f' ({options})' if options else ''}; {size}; up to {train.max_iters} steps of "
        f"batch {train.batch_size or 'full'}"
        + (f", block {train.block_size}" if config.task.name == "char_lm" else "")
        + f"; seeds {', '.join(map(str, seeds))}. That is the base config; the variants change the keys their "
        "labels name and whatever else the config's [sweep] table lists."
    )


def extra_sections(path, spec, groups, runs):
    """(Markdown lines, [figure file names]) for the [report] table's options, figures saved in `path`."""
    lines, figures = [], []
    baseline, metrics, keys = spec.get("baseline"), spec.get("metrics", []), variant_keys(spec, runs)
    lines += ["", budget_line(runs), *wall_lines(runs)]
    if baseline:
        table = baseline_table(groups, runs, baseline, metrics, keys)
        if table:
            lines += [
                "",
                f"Paired differences against the baseline ({label(baseline)}), same seed, with the 95 % t "
                "interval and the paired t-test's p (no correction; the verdicts below are corrected):",
                "",
                *table,
            ]
    if spec.get("thresholds"):
        lines += [
            "",
            "Steps until each threshold is first reached at an evaluation (mean ± std over the seeds that reached it):",
            "",
            *threshold_table(groups, spec["thresholds"]),
        ]
    if spec.get("log_steps"):
        plot_log_steps(groups, list(spec.get("thresholds") or ("train_acc", "val_acc")), path / "plot_log_steps.png")
        figures.append("plot_log_steps.png")
    if spec.get("lambdas"):
        table = lambda_table(groups)
        if table:
            lines += ["", "Differential attention's learned lambda per layer (mean ± std over seeds):", "", *table]
    if spec.get("probe"):
        table = probe_table(groups, path / "plot_probe.png")
        lines += [
            "",
            "Probe of the trained checkpoints on 4 training batches (mean over seeds; bridge.probe, "
            "docs/theory/residuals.md section 14): belief's Delta and MH after the output projection W^o, as in its "
            "Fig. 4, and AttentionX's Phi = V - gamma MH against V:",
            "",
            *table,
        ]
        figures.append("plot_probe.png")
    if spec.get("against"):
        metric = metrics[0] if metrics else "val_loss"
        table = against_section(runs, spec["against"], metric, baseline or {}, keys, path / "plot_against.png")
        lines += ["", f"Seconds per step against {spec['against']} (mean over seeds):", "", *table]
        figures.append("plot_against.png")
    return lines, figures


def extra_figures(spec):
    """The figure files extra_sections writes for the [report] table `spec` (before it writes them)."""
    return [
        name
        for key, name in (
            ("log_steps", "plot_log_steps.png"),
            ("probe", "plot_probe.png"),
            ("against", "plot_against.png"),
        )
        if spec.get(key)
    ]


def copy_figures(path, figures, results):
    """Copy the figures beside the results file (figures/repro/<sweep>_<file>); {file: new relative link}."""
    folder = rundir.make_dir(Path(results).parent / "figures" / "repro")
    links = {}
    for figure in figures:
        target = folder / f"{path.resolve().name}_{figure}"
        rundir.copy_file(path / figure, target)
        links[figure] = f"figures/repro/{target.name}"
    return links
