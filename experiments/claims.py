"""The reproductions' claims checked against their runs: the [report] table of a config under
experiments/configs/repro/ (its keys: experiments/repro_report.py), each claim tested per condition.

Paired differences match each run with the run of the same seed whose config differs only in the
compared keys; a pair counts only when both runs trained the same full step budget (an early-stopped
run's last value is not at the budget). A claim is tested separately under each condition, i.e. each
combination of the variant keys it leaves free (block size, fraction x operation), never pooled: a
two-sided paired t-test, or for probe claims a one-sample t-test across seeds of the per-seed quantity
(bridge.statistics). The p-values of all tests of a section are Holm-corrected; a verdict ("agrees" /
"disagrees") needs Holm p < 0.05 and at least 5 seeds, anything else is "inconclusive (p = ..., n = ...)"
(docs/theory/reproductions.md section 1). The Markdown of the verdicts is experiments/repro_report.py's.
"""

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bridge.probe import STATISTICS
from bridge.statistics import holm, one_sample_test, paired_test, significant

from .checkpoint_stats import run_probe
from .errors import UsageError
from .runs import differing_keys, flat_config, label, relevant
from .stopping import lower_is_better

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


def lower_better(metric):
    """Losses, errors and seconds per step are minimised; accuracies maximised."""
    return lower_is_better(metric) or metric == "seconds_per_step"


def full_budget(run):
    """Whether the run trained its whole step budget (no early stop), so its final values are at the budget."""
    return run.summary.get("steps") == run.config.get("train", {}).get("max_iters")


def first_step(run, metric, threshold):
    """The first evaluated step where `metric` reaches `threshold` (<= for losses, >= otherwise); None if never."""
    steps, _, values = run.series(metric)
    reached = values <= threshold if lower_is_better(metric) else values >= threshold
    return int(steps[np.argmax(reached)]) if reached.any() else None


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


def variant_keys(spec, runs):
    """The config keys that name a variant: [report] label_keys, else those that differ between runs."""
    return spec.get("label_keys") or differing_keys(runs)


@dataclass
class ClaimTest:
    """One hypothesis of a section: a claim under one condition, its t-test, and notes on what was left out."""

    claim: str
    condition: str
    quantity: str
    test: dict[str, float]  # bridge.statistics.paired_test / one_sample_test's summary
    favours: bool  # whether the mean points the claim's way
    notes: list[str] = field(default_factory=list)
    early: str = ""  # early_training's note
    outcome: str = ""  # replaces the verdict when no test can decide (no run reached the threshold)


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


def comparison_tests(claim: dict[str, Any], runs: list[Any], keys: list[str]) -> list[ClaimTest]:
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


def probe_tests(claim: dict[str, Any], runs: list[Any], keys: list[str]) -> list[ClaimTest]:
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
            layers: Any = np.arange(1, curves.shape[1] + 1) if len(curves) else []
            values = [np.polyfit(layers, curve, 1)[0] for curve in curves]
            quantity = f"slope of {claim['statistic']} per layer"
        test = one_sample_test(values)
        tests.append(ClaimTest(claim_text(claim), condition, quantity, test, bool(test["mean"] < 0)))
    return tests


def section_tests(spec: dict[str, Any], runs: list[Any]) -> list[ClaimTest]:
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


def verdict(test: dict[str, float], adjusted_p: float, favours: bool) -> str:
    """ "agrees" / "disagrees" (favours: the mean difference points the claim's way) when the Holm-adjusted p
    is below ALPHA over at least MIN_PAIRS pairs, else "inconclusive (p = ..., n = ...)"."""
    if significant(adjusted_p, int(test["n"]), ALPHA, MIN_PAIRS):
        return "agrees" if favours else "disagrees"
    return f"inconclusive (p = {format_p(test['p'])}, n = {test['n']})"


def format_p(p: float) -> str:
    """A p-value as the tables show it: two significant digits, scientific below 0.001, "—" for NaN."""
    return "—" if not np.isfinite(p) else f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def judge(tests: list[ClaimTest]) -> list[tuple[ClaimTest, float, str]]:
    """[(test, Holm-adjusted p, verdict text)] of a section's tests: Holm over all of them, then verdict (or the
    test's outcome where no test can decide, "no paired runs" without pairs), with its early-training note."""
    adjusted = holm([test.test["p"] for test in tests])
    judged: list[tuple[ClaimTest, Any, str]] = []
    for test, p in zip(tests, adjusted, strict=False):
        text = test.outcome or (verdict(test.test, p, test.favours) if test.test["n"] else "no paired runs")
        if test.early:
            text += f" ({test.early})"
        judged.append((test, p, text))
    return judged
