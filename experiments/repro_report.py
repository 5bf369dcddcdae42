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

Paired differences match each run with the run of the same seed whose config differs only in the
compared keys; a pair counts only when both runs trained the same full step budget (an early-stopped
run's last value is not at the budget). A claim is tested separately under each condition, i.e. each
combination of the variant keys it leaves free (block size, fraction x operation), never pooled: a
two-sided paired t-test (scipy.stats.ttest_rel), or for probe claims a one-sample t-test across seeds
of the per-seed quantity. The p-values of all tests of a section are Holm-corrected; a verdict
("agrees" / "disagrees") needs Holm p < 0.05 and at least 5 seeds, anything else is
"inconclusive (p = ..., n = ...)". With --results, the verdict rows also feed the summary section
"What reproduces at laptop scale" at the head of the reproductions (refresh_summary).
"""

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter
from scipy import stats

from attention import MultiHeadAttention
from bridge.probe import STATISTICS

from . import rundir
from .common import UsageError
from .config import load_config
from .probing import probe_layers
from .results_doc import replace_section
from .rundir import save_figure
from .runs import differing_keys, flat_config, label, relevant
from .tasks import build_task
from .train import CHECKPOINT, load_weights, lower_is_better

KEYS = {
    "title",
    "source",
    "claim",
    "metrics",
    "baseline",
    "label_keys",
    "thresholds",
    "log_steps",
    "probe",
    "lambdas",
    "against",
    "claims",
    "probe_claims",
    "notes",
}


def checked_spec(table, source):
    """The [report] table, with unknown keys and malformed claims rejected."""
    unknown = set(table) - KEYS
    if unknown:
        raise UsageError(
            f"{source}: unknown key(s) {', '.join(sorted(unknown))} in [report]; it accepts {', '.join(sorted(KEYS))}"
        )
    if not isinstance(table.get("notes", ""), str):
        raise UsageError(f"{source}: [report] notes must be a string")
    for claim in table.get("claims", []):
        if not (
            isinstance(claim, dict)
            and isinstance(claim.get("variant"), dict)
            and isinstance(claim.get("than"), dict)
            and isinstance(claim.get("metric"), str)
        ):
            raise UsageError(f"{source}: each [[report.claims]] needs variant = {{...}}, than = {{...}} and metric")
    for claim in table.get("probe_claims", []):
        if not (
            isinstance(claim, dict)
            and isinstance(claim.get("variant"), dict)
            and claim.get("statistic") in STATISTICS
            and claim.get("expect") in EXPECTATIONS
        ):
            raise UsageError(
                f"{source}: each [[report.probe_claims]] needs variant = {{...}}, statistic (one of "
                f"{', '.join(STATISTICS)}) and expect ({' or '.join(map(repr, EXPECTATIONS))})"
            )
    return table


def matches(run, values):
    flat = flat_config(run.config)
    return all(flat.get(key) == value for key, value in values.items())


def partner(run, runs, swap, keys):
    """The finished run with run's seed and values of the variant keys `keys`, except swap's keys set to
    swap's values; or None."""
    flat = flat_config(run.config)
    want = {**{key: flat.get(key) for key in keys}, **swap, "train.seed": run.seed}
    for other in runs:
        if other is not run and other.finished and matches(other, want):
            return other
    return None


def metric_value(run, metric):
    """The metric at the run's last evaluation (summary["final"]; "seconds_per_step" from the summary), else its
    last logged value; None if never logged."""
    value = (
        run.summary.get("seconds_per_step")
        if metric == "seconds_per_step"
        else run.summary.get("final", {}).get(metric)
    )
    if value is None:
        values = run.series(metric)[2]
        value = float(values[-1]) if len(values) else None
    return value


MIN_PAIRS, ALPHA = 5, 0.05  # a verdict needs >= MIN_PAIRS pairs and Holm-adjusted p < ALPHA
EXPECTATIONS = ("below 1", "falls with depth")
SUMMARY_SECTION = "repro-summary"


def paired_test(values, baseline):
    """Paired two-sided t-test (scipy.stats.ttest_rel) of values - baseline: {mean, low, high, p, n}, with the
    95 % t interval of the mean difference; p and the interval are NaN below two pairs or with no spread."""
    a, b = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    return _test_summary(a - b, lambda: stats.ttest_rel(a, b))


def one_sample_test(values):
    """Two-sided t-test of mean(values) = 0 (scipy.stats.ttest_1samp), summarised as paired_test's."""
    values = np.asarray(values, dtype=float)
    return _test_summary(values, lambda: stats.ttest_1samp(values, 0.0))


def _test_summary(differences, test):
    n = len(differences)
    summary = {
        "mean": float(differences.mean()) if n else float("nan"),
        "low": float("nan"),
        "high": float("nan"),
        "p": float("nan"),
        "n": n,
    }
    if n >= 2 and np.ptp(differences) > 0:
        result = test()
        low, high = result.confidence_interval(0.95)
        summary.update(low=float(low), high=float(high), p=float(result.pvalue))
    return summary


def holm(pvalues):
    """Holm-adjusted p-values: the k-th smallest of the m finite p is max_{j <= k} min(1, (m - j + 1) p_(j));
    NaN stays NaN and does not count in m."""
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[index]))
        adjusted[index] = running
    return adjusted


def verdict(test, adjusted_p, favours):
    """ "agrees" / "disagrees" (favours: the mean difference points the claim's way) when the Holm-adjusted p
    is below ALPHA over at least MIN_PAIRS pairs, else "inconclusive (p = ..., n = ...)"."""
    if test["n"] >= MIN_PAIRS and adjusted_p < ALPHA:
        return "agrees" if favours else "disagrees"
    return f"inconclusive (p = {format_p(test['p'])}, n = {test['n']})"


def format_p(p):
    return "—" if not np.isfinite(p) else f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


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


@dataclass
class ClaimTest:
    """One hypothesis of a section: a claim under one condition, its t-test, and notes on what was left out."""

    claim: str
    condition: str
    quantity: str
    test: dict
    favours: bool  # whether the mean points the claim's way
    notes: list = field(default_factory=list)
    early: str = ""  # early_training's note
    outcome: str = ""  # replaces the verdict when no test can decide (no run reached the threshold)


def lower_better(metric):
    """Losses, errors and seconds per step are minimised; accuracies maximised."""
    return lower_is_better(metric) or metric == "seconds_per_step"


def full_budget(run):
    """Whether the run trained its whole step budget (no early stop), so its final values are at the budget."""
    return run.summary.get("steps") == run.config.get("train", {}).get("max_iters")


def claim_value(run, claim):
    """(value, censored): the claim's metric at the budget, or with a threshold the first evaluated step that
    reaches it (never reached: the budget, censored)."""
    if "threshold" not in claim:
        return metric_value(run, claim["metric"]), False
    step = first_step(run, claim["metric"], claim["threshold"])
    return (float(run.summary["steps"]), True) if step is None else (float(step), False)


def paired_values(runs, others, swap, value, keys):
    """(values, baseline values, pairs left out, censored runs): value(run) -> (number, censored) over `runs`
    and their partners among `others` (same seed, swap's keys swapped); a pair counts only when both runs
    trained the same full step budget."""
    values, baseline, unequal, censored = [], [], 0, 0
    for run in runs:
        other = partner(run, others, swap, keys)
        if other is None:
            continue
        if not (full_budget(run) and full_budget(other) and run.summary["steps"] == other.summary["steps"]):
            unequal += 1
            continue
        (a, censored_a), (b, censored_b) = value(run), value(other)
        if a is not None and b is not None:
            values.append(a)
            baseline.append(b)
            censored += censored_a + censored_b
    return values, baseline, unequal, censored


def conditions(runs, claim, keys):
    """{condition label: finished runs of the claim's variant}, one entry per combination of the variant keys
    the claim leaves free (block size, fraction x operation): conditions are never pooled."""
    free = [key for key in keys if key not in claim["variant"] and key not in claim.get("than", {})]
    groups = {}
    for run in runs:
        if run.finished and matches(run, claim["variant"]):
            flat = flat_config(run.config)
            groups.setdefault(label({key: flat.get(key) for key in free if relevant(key, flat)}), []).append(run)
    return groups or {"": []}


def claim_text(claim):
    """The claim in words: its `text`, else one built from its keys."""
    if claim.get("text"):
        return claim["text"]
    if "statistic" in claim:
        return f"{claim['statistic']} {claim['expect']} in {label(claim['variant'])}"
    return f"{label(claim['variant'])} better than {label(claim['than'])} on {_quantity(claim)}"


def _quantity(claim):
    metric = claim["metric"]
    if "threshold" in claim:
        return f"steps to {metric} {'≤' if lower_better(metric) else '≥'} {claim['threshold']:g}"
    return "seconds per step" if metric == "seconds_per_step" else f"final {metric}"


def comparison_tests(claim, runs, keys):
    """One ClaimTest per condition: the claim's variant minus its `than`, paired by seed (MIN_PAIRS, Holm later)."""
    finished = [run for run in runs if run.finished]
    lower = "threshold" in claim or lower_better(claim["metric"])
    tests = []
    for condition, members in conditions(finished, claim, keys).items():
        values, baseline, unequal, censored = paired_values(
            members, finished, claim["than"], lambda run: claim_value(run, claim), keys
        )
        test = paired_test(values, baseline)
        notes = ([f"{unequal} pair(s) left out: not the same full step budget"] if unequal else []) + (
            [f"{censored} run(s) never reached the threshold, counted at the budget"] if censored else []
        )
        quantity = f"{_quantity(claim)}, {label(claim['variant'])} − {label(claim['than'])}"
        never = bool(values) and censored == 2 * len(values)
        outcome = f"neither reached {claim['metric']} {claim['threshold']:g} within the budget" if never else ""
        tests.append(
            ClaimTest(
                claim_text(claim),
                condition,
                quantity,
                test,
                bool(test["mean"] < 0 if lower else test["mean"] > 0),
                notes,
                early_training(claim, members),
                outcome,
            )
        )
    return tests


def probe_tests(claim, runs, keys):
    """One ClaimTest per condition of the claim's variant, from each seed's probe (bridge.probe,
    docs/theory/residuals.md section 14):
    "below 1" tests the statistic's mean over layers minus 1, "falls with depth" its least-squares slope per
    layer, against 0 across seeds."""
    tests = []
    for condition, members in conditions(runs, claim, keys).items():
        curves = np.array(
            [
                [layer[claim["statistic"]] for layer in totals]
                for totals in (run_probe(run) for run in members)
                if totals
            ]
        )  # (seeds, layers)
        if claim["expect"] == "below 1":
            values, quantity = (
                curves.mean(1) - 1 if len(curves) else [],
                f"mean over layers of {claim['statistic']} − 1",
            )
        else:
            layers = np.arange(1, curves.shape[1] + 1) if len(curves) else []
            values = [np.polyfit(layers, curve, 1)[0] for curve in curves]
            quantity = f"slope of {claim['statistic']} per layer"
        test = one_sample_test(values)
        tests.append(ClaimTest(claim_text(claim), condition, quantity, test, bool(test["mean"] < 0)))
    return tests


def section_tests(spec, runs):
    """Every hypothesis of a section: its claims and probe claims, each per condition."""
    keys = variant_keys(spec, runs)
    return [test for claim in spec.get("claims", []) for test in comparison_tests(claim, runs, keys)] + [
        test for claim in spec.get("probe_claims", []) for test in probe_tests(claim, runs, keys)
    ]


def early_training(claim, runs):
    """ "early training (N of M steps)" when the runs trained fewer steps than the claim's full_steps, else ""."""
    steps = max((run.config.get("train", {}).get("max_iters", 0) for run in runs), default=0)
    full = claim.get("full_steps", 0)
    return f"early training: {steps:,} of the {full:,} steps of the source's regime" if steps < full else ""


def verdict_lines(spec, runs):
    """The verdict table (claim, condition, mean difference and 95 % CI, p, Holm p, n, verdict), its notes, and
    the rows as a JSON comment that the summary section of the results file reads."""
    tests = section_tests(spec, runs)
    if not tests:
        return []
    adjusted = holm([test.test["p"] for test in tests])
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
    for test, p in zip(tests, adjusted, strict=False):
        text = test.outcome or (verdict(test.test, p, test.favours) if test.test["n"] else "no paired runs")
        if test.early:
            text += f" ({test.early})"
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
    for name, title, body in pattern.findall(text):
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
            f"{sum(wall['runs'] for wall in walls.values())} runs of one thread each, so about {total / 120:.1f} h end to "
            "end as two sweeps side by side on a 2-core machine (half the sum); longest: "
            + "; ".join(f"{title} {wall['minutes']:.0f} min" for title, wall in ranked[:3])
            + ".",
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


def run_probe(run, batches=4):
    """The run's per-layer probe statistics (bridge.probe.STATISTICS), None without a checkpoint; once per file."""
    checkpoint = run.path / CHECKPOINT
    if not checkpoint.is_file():
        return None
    return _probe_totals(str(checkpoint.parent.resolve()), checkpoint.stat().st_mtime_ns, batches)


@functools.cache
def _probe_totals(path, mtime, batches):
    return probe_layers(path, batches)[1]


def first_step(run, metric, threshold):
    """The first evaluated step where `metric` reaches `threshold` (<= for losses, >= otherwise); None if never."""
    steps, _, values = run.series(metric)
    reached = values <= threshold if lower_is_better(metric) else values >= threshold
    return int(steps[np.argmax(reached)]) if reached.any() else None


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
                    [b - a if a is not None and b is not None else None for a, b in zip(steps[keys[0]], steps[keys[1]], strict=False)]
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


def plot_log_steps(groups, metrics, path):
    """One panel per variant: each seed's curve of each metric against the step, log step axis."""
    names = [name for name, members in groups.items() if any(run.finished for run in members)]
    cols = min(len(names), 4)
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(3.6 * cols, 2.9 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharey=True, squeeze=False)).ravel()
    colors = {metric: f"C{i}" for i, metric in enumerate(metrics)}
    for ax, name in zip(axes, names, strict=False):
        for run in (run for run in groups[name] if run.finished):
            for metric in metrics:
                steps, _, values = run.series(metric)
                ax.plot(
                    steps,
                    values,
                    color=colors[metric],
                    alpha=0.7,
                    lw=1,
                    label=metric if run is next(r for r in groups[name] if r.finished) else None,
                )
        ax.set(xscale="log", xlabel="step", title=name.replace(", ", "\n", 2), ylim=(-0.02, 1.02))
        ax.title.set_fontsize(8)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, alpha=0.4)
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8)
    save_figure(fig, path, dpi=110)


def run_lambdas(run):
    """Differential attention's lambda per layer from the run's checkpoint; [] for other kernels."""
    if not (run.path / CHECKPOINT).is_file():
        return []
    config = load_config(run.path / "config.toml")
    if config.model.kernel != "diff":
        return []
    model = build_task(config).build_model()
    load_weights(model, run.path / CHECKPOINT)
    with torch.no_grad():
        return [(float(m.diff_lambda()), m.lambda_init) for m in model.modules() if isinstance(m, MultiHeadAttention)]


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


def plot_probes(groups, path):
    """Per variant (mean over seeds) and layer: ||Delta W^o|| / ||MH W^o|| (belief Fig. 4, after the output
    projection), ||Phi|| / ||V|| (AttentionX) and the angles of Delta W^o and MH W^o to the token X; figure + table."""
    fig = Figure(figsize=(15, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    table = [
        "| variant | " + " | ".join(f"{title} per layer" for _, title in PROBE_COLUMNS) + " |",
        "| --- |" + " --- |" * len(PROBE_COLUMNS),
    ]
    for index, (name, members) in enumerate(groups.items()):
        totals = [t for t in (run_probe(run) for run in members if run.finished) if t]
        if not totals:
            continue
        means = {key: np.array([[layer[key] for layer in t] for t in totals]).mean(0) for key, _ in PROBE_COLUMNS}
        layers = np.arange(1, len(means["phi_ratio"]) + 1)
        axes[0].plot(layers, means["wdelta_ratio"], "o-", color=f"C{index}", label=name)
        axes[1].plot(layers, means["phi_ratio"], "o-", color=f"C{index}", label=name)
        axes[2].plot(layers, means["cos_delta_wo"], "o-", color=f"C{index}", label=f"{name}: Delta W^o")
        axes[2].plot(layers, means["cos_mh_wo"], "s--", color=f"C{index}", label=f"{name}: MH W^o")
        table.append(
            f"| {name} | " + " | ".join(", ".join(f"{v:.3f}" for v in means[key]) for key, _ in PROBE_COLUMNS) + " |"
        )
    for ax, (ylabel, title) in zip(
        axes,
        (
            ("ratio", "||Delta W^o|| / ||MH W^o|| (belief Fig. 4)"),
            ("ratio", "||Phi|| / ||V|| (AttentionX)"),
            ("cos", "angle to the token X"),
        ), strict=False,
    ):
        ax.set(xlabel="layer", ylabel=ylabel, title=title)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.4)
        ax.legend(fontsize=7)
    save_figure(fig, path, dpi=120)
    return table


def against_section(runs, key, metric, baseline, keys, path):
    """Metric and seconds per step against config key `key` (one line per other variant), figure + s/step table."""
    finished = [run for run in runs if run.finished]
    xs = sorted({flat_config(run.config).get(key) for run in finished})
    others = {}
    for run in finished:
        flat = flat_config(run.config)
        rest = {k: flat.get(k) for k in keys if k != key}
        others.setdefault(label(rest) or "runs", []).append(run)
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    seconds = {}
    for name, members in others.items():
        at = {x: [r for r in members if flat_config(r.config).get(key) == x] for x in xs}
        values = [np.mean([metric_value(r, metric) for r in at[x]]) if at[x] else np.nan for x in xs]
        seconds[name] = [np.mean([r.summary["seconds_per_step"] for r in at[x]]) if at[x] else np.nan for x in xs]
        left.plot(xs, values, "o-", label=name)
        right.plot(xs, seconds[name], "o-", label=name)
    short = key.rsplit(".", 1)[-1]
    left.set(xscale="log", xlabel=short, ylabel=f"final {metric}", title=f"{metric} against {short}")
    right.set(xscale="log", xlabel=short, ylabel="seconds per step", title=f"time per step against {short}")
    for ax in (left, right):
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, alpha=0.4)
        ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)
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
    model, train = config.model, config.train
    seeds = sorted({run.seed for run in runs})
    size = {
        "transformer": f"{model.n_layer} layer{'s' * (model.n_layer > 1)}, {model.d_model} dims, {model.n_head} heads",
        "convex": f"convex attention, fixed {model.d_model}-dim embeddings, {model.gates} gates",
        "convex_blocks": f"{model.n_layer} convex attention + FCN block{'s' * (model.n_layer > 1)}, trained "
        f"{model.d_model}-dim embeddings, {model.gates} gates",
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
        table = plot_probes(groups, path / "plot_probe.png")
        lines += [
            "",
            "Probe of the trained checkpoints on 4 training batches (mean over seeds; bridge.probe, "
            "docs/theory/residuals.md section 14): belief's Delta and MH after the output projection W^o, as in its Fig. 4, and "
            "AttentionX's Phi = V - gamma MH against V:",
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


def variant_keys(spec, runs):
    """The config keys that name a variant: [report] label_keys, else those that differ between runs."""
    return spec.get("label_keys") or differing_keys(runs)


def copy_figures(path, figures, results):
    """Copy the figures beside the results file (figures/repro/<sweep>_<file>); {file: new relative link}."""
    folder = rundir.make_dir(Path(results).parent / "figures" / "repro")
    links = {}
    for figure in figures:
        target = folder / f"{path.resolve().name}_{figure}"
        rundir.copy_file(path / figure, target)
        links[figure] = f"figures/repro/{target.name}"
    return links
