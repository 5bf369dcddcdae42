"""What `pdmm-bridge report` adds for a sweep whose config has a [report] table (the reproductions).

    [report]
    title = "AttentionX on a ViT (digits)"
    source = "AttentionX paper, MATH.md 7"
    claim = "CIFAR10: 88.15 ± 0.55 % -> 89.41 ± 0.18 %"         # the source's numbers
    metrics = ["val_acc", "val_loss"]                            # the table's metrics
    baseline = { "model.residual" = "standard" }                 # paired differences against these runs
    label_keys = ["model.kind", "task.op"]                       # optional: keys that name a variant
    thresholds = { "val_acc" = 0.99 }                            # optional: steps until each is reached
    log_steps = true                                             # optional: accuracy curves on a log step axis
    probe = true                                                 # optional: Fig. 4-style probe of each variant
    lambdas = true                                               # optional: diff attention's lambda per layer
    against = "train.block_size"                                 # optional: metric and s/step against a key
    [[report.claims]]                                            # one verdict sentence each
    variant = { "model.residual" = "attentionx" }
    than = { "model.residual" = "standard" }
    metric = "val_acc"

Paired differences match each run with the run of the same seed whose config differs only in the
compared keys. A difference counts as real when its mean over pairs exceeds twice its standard error
(|mean| > 2 std / sqrt(n)); otherwise the verdict says it is within seed noise.
"""
import shutil
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from attention import MultiHeadAttention

from .common import UsageError
from .config import load_config
from .probe_command import probe_layers
from .runs import differing_keys, flat_config, label
from .tasks import build_task
from .train import CHECKPOINT, lower_is_better

KEYS = {"title", "source", "claim", "metrics", "baseline", "label_keys", "thresholds", "log_steps", "probe",
        "lambdas", "against", "claims"}


def checked_spec(table, source):
    """The [report] table, with unknown keys and malformed claims rejected."""
    unknown = set(table) - KEYS
    if unknown:
        raise UsageError(f"{source}: unknown key(s) {', '.join(sorted(unknown))} in [report]; "
                         f"it accepts {', '.join(sorted(KEYS))}")
    for claim in table.get("claims", []):
        if not (isinstance(claim, dict) and isinstance(claim.get("variant"), dict)
                and isinstance(claim.get("than"), dict) and isinstance(claim.get("metric"), str)):
            raise UsageError(f"{source}: each [[report.claims]] needs variant = {{...}}, than = {{...}} and metric")
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
    """The metric at the run's last evaluation (summary["final"]), else its last logged value; None if never logged."""
    value = run.summary.get("final", {}).get(metric)
    if value is None:
        values = run.series(metric)[2]
        value = float(values[-1]) if len(values) else None
    return value


def paired_differences(runs, others, swap, metric, keys):
    """[metric(run) - metric(partner)] over `runs`, each partnered among `others` by `swap`."""
    diffs = []
    for run in runs:
        other = partner(run, others, swap, keys)
        if other is not None and metric_value(run, metric) is not None and metric_value(other, metric) is not None:
            diffs.append(metric_value(run, metric) - metric_value(other, metric))
    return np.array(diffs, dtype=float)


def significance(diffs):
    """(mean, std, n, real): real when |mean| > 2 std / sqrt(n) with n >= 2."""
    n = len(diffs)
    if n == 0:
        return None, None, 0, False
    mean = float(diffs.mean())
    std = float(diffs.std(ddof=1)) if n > 1 else 0.0
    return mean, std, n, n >= 2 and abs(mean) > 2 * std / np.sqrt(n)


def format_difference(mean, std, n):
    return "—" if n == 0 else (f"{mean:+.4g} ± {std:.2g}" if n > 1 else f"{mean:+.4g}")


def baseline_table(groups, runs, baseline, metrics, keys):
    """Rows: non-baseline variant x metric, with the paired difference (variant - baseline, same seed)."""
    finished = [run for run in runs if run.finished]
    lines = ["| variant | metric | variant − baseline (paired, final) | pairs | better in |", "| --- | --- | --- | --- | --- |"]
    for name, members in groups.items():
        done = [run for run in members if run.finished]
        if not done or all(matches(run, baseline) for run in done):
            continue
        for metric in metrics:
            diffs = paired_differences(done, finished, baseline, metric, keys)
            mean, std, n, real = significance(diffs)
            better = int(np.sum(diffs < 0 if lower_is_better(metric) else diffs > 0))
            lines.append(f"| {name} | {metric} | {format_difference(mean, std, n)}{' *' if real else ''} | {n} | "
                         f"{better}/{n} |")
    return lines if len(lines) > 2 else []


def claim_sentences(claims, runs, keys):
    """One sentence per claim: does `variant` beat `than` on `metric`, paired by seed?"""
    finished = [run for run in runs if run.finished]
    sentences = []
    for claim in claims:
        variant_runs = [run for run in finished if matches(run, claim["variant"])]
        diffs = paired_differences(variant_runs, finished, claim["than"], claim["metric"], keys)
        mean, std, n, real = significance(diffs)
        who, than, metric = label(claim["variant"]), label(claim["than"]), claim["metric"]
        if n == 0:
            sentences.append(f"- {who} vs {than}: no paired runs finished, no verdict.")
            continue
        better = (mean < 0) if lower_is_better(metric) else (mean > 0)
        if real and better:
            verdict = f"agrees: {who} is better than {than}"
        elif real:
            verdict = f"disagrees: {who} is worse than {than}"
        else:
            verdict = "neither agrees nor disagrees: the difference is within seed noise"
        sentences.append(f"- **{verdict}** on final {metric} ({who} − {than} = {format_difference(mean, std, n)} "
                         f"over {n} paired seed{'s' if n > 1 else ''}).")
    return sentences


def first_step(run, metric, threshold):
    """The first evaluated step where `metric` reaches `threshold` (<= for losses, >= otherwise); None if never."""
    steps, _, values = run.series(metric)
    reached = values <= threshold if lower_is_better(metric) else values >= threshold
    return int(steps[np.argmax(reached)]) if reached.any() else None


def threshold_table(groups, thresholds):
    """Steps to each threshold per variant (mean ± std over the seeds that reached it), and the delay
    between the first two thresholds (e.g. train then validation accuracy) where both were reached."""
    keys = list(thresholds)
    head = [f"steps to {key} ≥ {value:g}" if not lower_is_better(key) else f"steps to {key} ≤ {value:g}"
            for key, value in thresholds.items()]
    delay = len(keys) >= 2
    lines = ["| variant | " + " | ".join(head + ([f"delay ({keys[1]} − {keys[0]})"] if delay else [])) + " |",
             "| --- |" + " --- |" * (len(head) + delay)]
    for name, members in groups.items():
        done = [run for run in members if run.finished]
        if not done:
            continue
        steps = {key: [first_step(run, key, value) for run in done] for key, value in thresholds.items()}
        cells = [_steps_cell(values) for values in steps.values()]
        if delay:
            cells.append(_steps_cell([b - a if a is not None and b is not None else None
                                      for a, b in zip(steps[keys[0]], steps[keys[1]])]))
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
    for ax, name in zip(axes, names):
        for run in (run for run in groups[name] if run.finished):
            for metric in metrics:
                steps, _, values = run.series(metric)
                ax.plot(steps, values, color=colors[metric], alpha=0.7, lw=1,
                        label=metric if run is next(r for r in groups[name] if r.finished) else None)
        ax.set(xscale="log", xlabel="step", title=name.replace(", ", "\n", 2), ylim=(-0.02, 1.02))
        ax.title.set_fontsize(8)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, alpha=0.4)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8)
    fig.savefig(path, dpi=110)


def run_lambdas(run):
    """Differential attention's lambda per layer from the run's checkpoint; [] for other kernels."""
    if not (run.path / CHECKPOINT).is_file():
        return []
    config = load_config(run.path / "config.toml")
    if config.model.kernel != "diff":
        return []
    model = build_task(config).build_model()
    model.load_state_dict(torch.load(run.path / CHECKPOINT, map_location="cpu", weights_only=False)["model"])
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


def plot_probes(groups, path, batches=4):
    """Fig. 4 style, per variant (mean over seeds): ||Delta|| / ||MH|| and cos(update, token) against layer."""
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    table = ["| variant | \\|\\|Delta\\|\\| / \\|\\|MH\\|\\| per layer | cos(update, token) per layer |",
             "| --- | --- | --- |"]
    for name, members in groups.items():
        totals = [probe_layers(run.path, batches)[1] for run in members if run.finished and (run.path / CHECKPOINT).is_file()]
        if not totals:
            continue
        delta = np.array([[layer["delta_ratio"] for layer in t] for t in totals]).mean(0)
        cos = np.array([[layer["cos_update"] for layer in t] for t in totals]).mean(0)
        layers = np.arange(1, len(delta) + 1)
        left.set_xticks(layers)
        right.set_xticks(layers)
        left.plot(layers, delta, "o-", label=name)
        right.plot(layers, cos, "o-", label=name)
        table.append(f"| {name} | {', '.join(f'{v:.3f}' for v in delta)} | {', '.join(f'{v:.3f}' for v in cos)} |")
    left.set(xlabel="layer", ylabel="||Delta|| / ||MH||", title="discrepancy (belief's Delta) / attention output")
    right.set(xlabel="layer", ylabel="cos", title="angle of the layer's update to its token X")
    for ax in (left, right):
        ax.grid(True, alpha=0.4)
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=120)
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
    fig.savefig(path, dpi=120)
    base = next((name for name, members in others.items() if all(matches(r, baseline) for r in members)), None)
    names = list(others)
    lines = [f"| {short} | " + " | ".join(f"s/step {n}" for n in names)
             + "".join(f" | {base} ÷ {n} time" for n in names if base and n != base) + " |",
             "| --- |" + " --- |" * (len(names) + sum(1 for n in names if base and n != base))]
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
    size = (f"convex attention, {model.d_model}-dim embeddings, {model.gates} gates" if model.kind != "transformer"
            else f"{model.n_layer} layer{'s' * (model.n_layer > 1)}, {model.d_model} dims, {model.n_head} heads")
    options = ", ".join(f"{k} {v}" for k, v in config.task.options.items())
    return (f"Task {config.task.name}{f' ({options})' if options else ''}; {size}; up to {train.max_iters} steps of "
            f"batch {train.batch_size or 'full'}" + (f", block {train.block_size}" if config.task.name == "char_lm" else "")
            + f"; seeds {', '.join(map(str, seeds))}. That is the base config; the variants change the keys their "
            "labels name and whatever else the config's [sweep] table lists.")


def extra_sections(path, spec, groups, runs):
    """(Markdown lines, [figure file names]) for the [report] table's options, figures saved in `path`."""
    lines, figures = [], []
    baseline, metrics, keys = spec.get("baseline"), spec.get("metrics", []), variant_keys(spec, runs)
    if baseline:
        table = baseline_table(groups, runs, baseline, metrics, keys)
        if table:
            lines += ["", f"Paired differences against the baseline ({label(baseline)}), same seed; "
                      "* marks |mean| > 2 std / sqrt(pairs).", "", *table]
    if spec.get("thresholds"):
        lines += ["", "Steps until each threshold is first reached at an evaluation (mean ± std over the seeds "
                  "that reached it):", "", *threshold_table(groups, spec["thresholds"])]
    if spec.get("log_steps"):
        plot_log_steps(groups, list(spec.get("thresholds") or ("train_acc", "val_acc")), path / "plot_log_steps.png")
        figures.append("plot_log_steps.png")
    if spec.get("lambdas"):
        table = lambda_table(groups)
        if table:
            lines += ["", "Differential attention's learned lambda per layer (mean ± std over seeds):", "", *table]
    if spec.get("probe"):
        table = plot_probes(groups, path / "plot_probe.png")
        lines += ["", "Probe of the trained checkpoints on 4 training batches (mean over seeds; MATH.md 5):", "", *table]
        figures.append("plot_probe.png")
    if spec.get("against"):
        metric = metrics[0] if metrics else "val_loss"
        table = against_section(runs, spec["against"], metric, baseline or {}, keys, path / "plot_against.png")
        lines += ["", f"Seconds per step against {spec['against']} (mean over seeds):", "", *table]
        figures.append("plot_against.png")
    return lines, figures


def extra_figures(spec):
    """The figure files extra_sections writes for the [report] table `spec` (before it writes them)."""
    return [name for key, name in (("log_steps", "plot_log_steps.png"), ("probe", "plot_probe.png"),
                                   ("against", "plot_against.png")) if spec.get(key)]


def variant_keys(spec, runs):
    """The config keys that name a variant: [report] label_keys, else those that differ between runs."""
    return spec.get("label_keys") or differing_keys(runs)


def verdict_lines(spec, runs):
    sentences = claim_sentences(spec.get("claims", []), runs, variant_keys(spec, runs))
    return ["", "Verdict on the source's claims (paired by seed; real = |mean| > 2 std / sqrt(pairs)):", "",
            *sentences] if sentences else []


def copy_figures(path, figures, results):
    """Copy the figures beside the results file (figures/repro/<sweep>_<file>); {file: new relative link}."""
    folder = Path(results).parent / "figures" / "repro"
    folder.mkdir(parents=True, exist_ok=True)
    links = {}
    for figure in figures:
        target = folder / f"{path.resolve().name}_{figure}"
        shutil.copyfile(path / figure, target)
        links[figure] = f"figures/repro/{target.name}"
    return links
