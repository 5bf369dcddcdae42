"""The Markdown report of a sweep, `pdmm-bridge report`: which runs finished, the metrics and figures, the variants
(runs that differ only in seed) and the lines of report.md: header, the table of variants (mean ± std over
seeds) and the runs not finished (docs/guide/training.md).

The claims, verdicts and extra tables of a [report] table are experiments/repro_report.py's.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .claims import metric_value
from .errors import UsageError
from .options import DEFAULT_METRICS
from .repro_report import setting
from .runs import IGNORED_KEYS, differing_keys, flat_config, group_runs, label
from .stopping import lower_is_better

Run = Any  # an experiments.runs.Run (its summary and config are read as the JSON they hold)
DEFAULT_FIGURES = ("val_loss", "val_acc")


def finished_runs(path: Path, runs: list[Run], entries: dict[str, dict[str, Any]]) -> list[Run]:
    """The finished runs of a sweep.

    Parameters
    ----------
    path : Path
        The sweep directory, named in the error.
    runs : list of Run
        Its run directories.
    entries : dict
        {name: entry} of sweep.json's runs ({} without one).

    Returns
    -------
    list of Run

    Raises
    ------
    UsageError
        When no run finished, counting the runs by status.
    """
    finished, loaded = [run for run in runs if run.finished], {run.name for run in runs}
    if not finished:
        statuses = [status(run)[0] for run in runs]
        statuses += [entry.get("status", "pending") for name, entry in entries.items() if name not in loaded]
        counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses)) or "no runs"
        raise UsageError(f"no finished run in {path} ({counts})")
    return finished


def logged_metrics(finished: list[Run]) -> set[str]:
    """The metrics the finished runs log or summarise.

    Parameters
    ----------
    finished : list of Run

    Returns
    -------
    set of str
    """
    return {name for run in finished for name in [*run.metric_names(), *run.summary.get("final", {})]}


def chosen_metrics(requested: list[str] | None, finished: list[Run]) -> list[str]:
    """The metrics to tabulate: those requested (--metrics, else the [report] table's), else those of
    DEFAULT_METRICS the runs log.

    Parameters
    ----------
    requested : list of str or None
        The metrics asked for.
    finished : list of Run
        The finished runs.

    Returns
    -------
    list of str

    Raises
    ------
    UsageError
        When no finished run logs a requested metric, naming those they log.
    """
    logged = logged_metrics(finished)
    if requested:
        unknown = [m for m in requested if m not in logged]
        if unknown:
            raise UsageError(f"no finished run logs {', '.join(unknown)}; they log {', '.join(sorted(logged))}")
    return requested or [m for m in DEFAULT_METRICS if m in logged]


def figure_names(requested: list[str] | None, finished: list[Run]) -> list[str]:
    """The figure files of the report: plot_<metric>.png for each requested metric (else DEFAULT_FIGURES) that a
    finished run logs row by row.

    Parameters
    ----------
    requested : list of str or None
        The metrics asked for.
    finished : list of Run
        The finished runs.

    Returns
    -------
    list of str
    """
    logged = logged_metrics(finished)
    return [
        f"plot_{metric}.png"
        for metric in requested or [m for m in DEFAULT_FIGURES if m in logged]
        if any(metric in run.metric_names() for run in finished)
    ]


def variants(
    runs: list[Run], spec: dict[str, Any], entries: dict[str, dict[str, Any]]
) -> tuple[dict[str, list[Run]], dict[str, list[dict[str, Any]]]]:
    """The variants of a sweep (runs.group_runs, by the [report] table's label_keys) and its entries that have no
    run directory, by variant.

    Parameters
    ----------
    runs : list of Run
        The run directories.
    spec : dict
        The checked [report] table.
    entries : dict
        {name: entry} of sweep.json's runs.

    Returns
    -------
    groups : dict
        {variant label: its runs}.
    missing : dict
        {variant label: sweep entries with no run directory}.

    Raises
    ------
    UsageError
        When label_keys leave runs with different configs in one variant.
    """
    groups = group_runs(runs, spec.get("label_keys"))
    mixed = [name for name, members in groups.items() if differing_keys(members)]
    if mixed:
        raise UsageError(
            f"[report] label_keys {spec['label_keys']} leave runs with different configs in one variant "
            f"({mixed[0]}: they differ in {', '.join(differing_keys(groups[mixed[0]]))}); add those keys"
        )
    loaded = {run.name for run in runs}
    missing: dict[str, list[dict[str, Any]]] = {name: [] for name in groups}  # by variant
    for name, entry in entries.items():
        if name not in loaded:
            missing.setdefault(variant_of(entry, groups), []).append(entry)
    return groups, missing


def figure_links(figures: list[str]) -> list[str]:
    """The Markdown lines that show the figures: a blank line, then ![metric](plot_metric.png), for each.

    Parameters
    ----------
    figures : list of str
        Figure file names, plot_<name>.png.

    Returns
    -------
    list of str
    """
    return [line for figure in figures for line in ("", f"![{figure[5:-4]}]({figure})")]


def run_scale(finished: list[Run]) -> dict[str, int]:
    """The scale of a report, recorded in its --results section's marker.

    Parameters
    ----------
    finished : list of Run
        The finished runs.

    Returns
    -------
    dict
        {"steps": the most steps a finished run was set to train, "seeds": how many distinct seeds finished}.
    """
    return {
        "steps": max(run.config.get("train", {}).get("max_iters", 0) for run in finished),
        "seeds": len({run.seed for run in finished}),
    }


def variant_of(entry: dict[str, Any], groups: dict[str, list[Run]]) -> str:
    """The variant a sweep entry with no run directory belongs to.

    Parameters
    ----------
    entry : dict
        An entry of sweep.json's runs.
    groups : dict
        {variant label: its runs}.

    Returns
    -------
    str
        The label of the variant whose runs all have the entry's overrides, else a label built from them.
    """
    overrides = {key: value for key, value in entry.get("overrides", {}).items() if key not in IGNORED_KEYS}
    for name, members in groups.items():
        if all(flat_config(run.config).get(key) == value for run in members for key, value in overrides.items()):
            return name
    return label(overrides) or entry["name"]


def status(run: Run) -> tuple[Any, str | None]:
    """A run's status and what to say about it.

    Parameters
    ----------
    run : Run
        A run directory, read.

    Returns
    -------
    (status, detail)
        "finished" (detail None), or the sweep's "failed" / "pending", else "unfinished", with the last step and
        the error.
    """
    if run.finished:
        return "finished", None
    entry = run.entry or {}
    status = entry.get("status") if entry.get("status") in ("failed", "pending") else "unfinished"
    last = max((row["step"] for row in run.metrics), default=None)
    detail = [f"last step {last}" if last is not None else "no step logged", entry.get("error")]
    return status, "; ".join(_one_line(d) for d in detail if d)


def header(
    path: Path, sweep: dict[str, Any], finished: list[Run], metrics: list[str], spec: dict[str, Any]
) -> list[str]:
    """The report's opening lines: title, the source's claim and our setting (a [report] table's), the config,
    grid and seeds, the versions of the finished runs, and what the table's numbers are.

    Parameters
    ----------
    path : Path
        The sweep directory.
    sweep : dict
        Its sweep.json ({} for a directory of runs).
    finished : list of Run
        The finished runs.
    metrics : list of str
        The metrics tabulated.
    spec : dict
        The checked [report] table.

    Returns
    -------
    list of str
    """
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


def table(groups: dict[str, list[Run]], missing: dict[str, list[dict[str, Any]]], metrics: list[str]) -> list[str]:
    """The Markdown table: a row per variant with seeds finished / total, final and best of each metric as
    mean ± std over the finished seeds, the parameter count, seconds per step and tokens/s.

    Parameters
    ----------
    groups : dict
        {variant label: its runs}.
    missing : dict
        {variant label: sweep entries with no run directory}.
    metrics : list of str
        The metrics tabulated.

    Returns
    -------
    list of str
        The table's lines.
    """
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


def problems(runs: list[Run], missing: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The list of runs not finished, with their status and last line of error.

    Parameters
    ----------
    runs : list of Run
        Every run directory.
    missing : dict
        {variant label: sweep entries with no run directory}.

    Returns
    -------
    list of str
        Its lines, none when every run finished.
    """
    lines = []
    for run in runs:
        state, detail = status(run)
        if state != "finished":
            lines.append(f"- `{run.name}`: {state} ({detail})")
    for entry in (entry for group in missing.values() for entry in group):
        error = entry.get("error")
        lines.append(
            f"- `{entry['name']}`: {entry.get('status', 'pending')}, no run directory"
            + (f" ({_one_line(error)})" if error else "")
        )
    return ["", "Runs not finished:", "", *lines] if lines else []


def _one_line(text: Any, limit: int = 300) -> str:
    """The last non-blank line of `text` (a traceback's exception), cut to `limit` characters."""
    text = ([line.strip() for line in str(text).splitlines() if line.strip()] or [""])[-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def best(run: Run, metric: str) -> Any:
    """The best value of a metric in a run.

    Parameters
    ----------
    run : Run
        A finished run.
    metric : str
        A logged metric.

    Returns
    -------
    float or None
        summary["best"][metric], else min over the logged rows for a loss, max for an accuracy, else None.
    """
    value = run.summary.get("best", {}).get(metric)
    if value is None:
        _, _, values = run.series(metric)
        pick = np.min if lower_is_better(metric) else np.max if "acc" in metric else None
        value = pick(values) if pick and len(values) else None
    return value


def mean_std(values: Iterable[float | None]) -> str:
    """Mean ± std of the values that are not None, std with ddof = 1: "1.234 ± 0.056"; one value alone; none: "—".

    Parameters
    ----------
    values : iterable of float or None

    Returns
    -------
    str
    """
    values = np.array([v for v in values if v is not None], dtype=float)
    if len(values) == 0:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{values.mean():.4g} ± {values.std(ddof=1):.2g}"


def _mean(values: Iterable[Any], fmt: str) -> str:
    """The mean of the values that are not None, formatted by `fmt`; none: "—"."""
    values = [v for v in values if v is not None]
    return fmt.format(float(np.mean(values))) if values else "—"
