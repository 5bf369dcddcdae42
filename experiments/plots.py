"""Figures shared by the pdmm-bridge commands, drawn on a bare matplotlib Figure (Agg, no display needed)."""

import math
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

from . import rundir
from .errors import UsageError
from .options import AXES
from .rundir import save_figure
from .runs import aligned, group_runs

PANELS = {
    "residual": ("residual", "constraint residual (RMS)", "log"),
    "error": ("relative error", r"$\|x - x^\star\|_F \,/\, \|x^\star\|_F$", "log"),
    "objective": ("objective", r"$\sum_i f_i(x_i)$", "linear"),
}


DASHES = ("-", "--", ":", "-.")  # cycled with the colours, so that curves that coincide stay visible


def plot_convergence(histories, path, title, panels=("residual", "error"), x="iteration"):
    """Save each of `panels` (residual, error, objective) against `x` (iteration, or the cumulative
    "messages" delivered or "bits" sent, per instance; or several of them, each a panel of each metric),
    one line per method; returns the Figure.

    histories: {label: {"residual": (iterations,), "error": ... if a reference was given, "objective": ...,
    and "messages" / "bits" when x is one of them}}. Line k has colour k and dash pattern k of DASHES.
    Panels that draw the same methods share one legend, to the right of them; otherwise each has its own.
    """
    axes = (x,) if isinstance(x, str) else tuple(x)
    pairs = [(key, axis) for key in panels for axis in axes]
    fig = Figure(figsize=(5.5 * len(pairs), 4.2), layout="constrained")
    for ax, (key, axis) in zip(fig.subplots(1, len(pairs), squeeze=False)[0], pairs, strict=False):
        name, ylabel, scale = PANELS[key]
        for k, (label, history) in enumerate(histories.items()):
            if len(history.get(key, ())):
                ax.plot(
                    history[axis] if axis != "iteration" else range(1, len(history[key]) + 1),
                    history[key],
                    label=label,
                    color=f"C{k % 10}",
                    linestyle=DASHES[k % len(DASHES)],
                )
        ax.set(title=f"{name} against {AXES[axis]}" if len(axes) > 1 else name)
        if ax.lines:
            ax.set(yscale=scale, xlabel=AXES[axis], ylabel=ylabel)
            ax.grid(True, alpha=0.4)
        else:
            ax.axis("off")
            ax.text(
                0.5,
                0.5,
                "no reference solution" if key == "error" else f"no {name}",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
    _legends(fig)
    fig.suptitle(title)
    save_figure(fig, path, dpi=120)
    return fig


def _legends(fig):
    """One legend right of the panels when several panels draw the same labelled lines, else one per panel."""
    drawn = [ax for ax in fig.axes if ax.lines]
    labels = {tuple(line.get_label() for line in ax.lines) for ax in drawn}
    if len(drawn) > 1 and len(labels) == 1:
        fig.set_figwidth(fig.get_figwidth() + 0.07 * max(map(len, labels.pop())) + 0.8)  # room for the legend
        fig.legend(handles=drawn[0].lines, loc="outside center right")
    else:
        for ax in drawn:
            ax.legend()


def plot_runs(curves, metric, path, title=None):
    """Save `metric` against step and against wall-clock seconds, one line per variant; returns the Figure.

    curves: {label: experiments.runs.Curve}: the mean over seeds is the line, the shaded band spans
    min..max over seeds. A loss that falls more than 3-fold is drawn on a log y-axis (the late
    differences between variants would otherwise be squeezed flat); anything else is linear.
    """
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    by_step, by_time = fig.subplots(1, 2, sharey=True)
    for name, curve in curves.items():
        label = f"{name} ({curve.seeds} seed{'s' if curve.seeds != 1 else ''})"
        marker = "." if len(curve.steps) <= 50 else None
        for ax, x in ((by_step, curve.steps), (by_time, curve.seconds)):
            (line,) = ax.plot(x, curve.mean, marker=marker, label=label)
            if curve.seeds > 1:
                ax.fill_between(x, curve.low, curve.high, color=line.get_color(), alpha=0.2, linewidth=0)
    values = [v for curve in curves.values() for v in (curve.low, curve.high)]
    low, high = min(v.min() for v in values), max(v.max() for v in values)
    if "loss" in metric and low > 0 and high > 3 * low:
        by_step.set_yscale("log")
        by_step.yaxis.set_minor_locator(LogLocator(subs=(2, 3, 5)))
        for ticks in (by_step.yaxis.set_major_formatter, by_step.yaxis.set_minor_formatter):
            ticks(StrMethodFormatter("{x:g}"))  # 0.5, 1, 2, 3 rather than 5 x 10^-1
    by_step.set(xlabel="step", ylabel=metric)
    by_time.set(xlabel="wall-clock seconds")
    for ax in (by_step, by_time):
        ax.grid(True, alpha=0.4)
    by_step.legend(title="mean over seeds, band min..max")
    fig.suptitle(title or metric)
    save_figure(fig, path, dpi=120)
    return fig


def plot_training(rows, path, title, best_step=None):
    """Save training loss (every logged step) and validation loss (evaluation steps) against step; returns the
    Figure. `best_step` (the plateau rule's best evaluation, whose weights are best.pt) is marked by a vertical line."""
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.plot([r["step"] for r in rows], [r["train_loss"] for r in rows], lw=0.8, alpha=0.6, label="train loss")
    evals = [r for r in rows if "val_loss" in r]
    ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", label="validation loss")
    if best_step is not None:
        ax.axvline(best_step, color="black", ls="--", lw=0.8, label=f"best (step {best_step})")
    ax.set(xlabel="step", ylabel="loss", title=title)
    ax.grid(True, alpha=0.4)
    ax.legend()
    save_figure(fig, path, dpi=120)
    return fig


def plot_groups(groups, metric, path):
    """Save the figure of `metric` for {label: [runs]} to `path`; returns the Figure (one line per variant and
    panel)."""
    curves = {name: curve for name, members in groups.items() if (curve := aligned(members, metric)) is not None}
    if not curves:
        raise UsageError(f"the seeds of each variant share no step that logs {metric!r}")
    tasks = {run.config.get("task", {}).get("name") for members in groups.values() for run in members}
    title = f"{metric}, {tasks.pop()}" if len(tasks) == 1 and None not in tasks else metric
    rundir.make_dir(Path(path).parent)
    return plot_runs(curves, metric, path, title)


# Figures of compare, the reproductions' report and the network sweep (moved from compare_report, repro_report and
# network_command); what they draw comes from bridge and experiments, imported where it is drawn.

MIN_BAND_SEEDS = 3  # fewer seeds: no bands (two seeds give a t interval 12.7 standard errors wide)
READABLE = {  # font sizes of the compare figures, in points: legible where the README shows them about 880 px wide
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 12,
}
PANEL_WIDTH = 3.5  # inches per held-out set (or per learning-curve panel)
BAND_ALPHA = 0.15
BAND_Z, MARK_Z, LINE_Z = 1, 2, 3  # bands under the quoted-round marks, both under the lines
SPARSE_POINTS = 50  # curves of at most this many points are drawn with a marker at each point


def palette(count: int) -> list[Any]:
    """`count` colours, distinct up to 28 (tab10, else tab20 then Dark2), cycled beyond."""
    if count <= 10:
        return [f"C{i}" for i in range(count)]
    colours = list(matplotlib.colormaps["tab20"].colors) + list(matplotlib.colormaps["Dark2"].colors)
    return [colours[i % len(colours)] for i in range(count)]


def shared_legend(fig: Figure, **options: Any) -> Any:
    """One legend below all panels of `fig`, outside every axes (constrained layout makes room for it): each
    label once, in the order first drawn; labels starting with "_" are left out. Its columns fit the figure's
    width. Returns the Legend."""
    handles = {}
    for ax in fig.axes:
        for artist in ax.get_lines():
            label = artist.get_label()
            if not label.startswith("_"):
                handles.setdefault(label, artist)
    longest = max(map(len, handles), default=1)
    columns = max(1, min(len(handles), int(fig.get_figwidth() // (0.075 * longest + 0.8))))
    return fig.legend(
        list(handles.values()), list(handles), loc="outside lower center", ncols=columns, frameon=False, **options
    )


def mark_rounds(ax: Any, rounds: list[int], depth: int) -> None:
    """A vertical line at each of `rounds` (the rounds the findings quote: K = `depth` and R), under the data
    lines, each with gid "quoted round r" and one legend label naming them all (no text over the data)."""
    named = " and ".join(f"{r} (depth K)" if r == depth else f"{r}" for r in rounds)
    for i, r in enumerate(rounds):
        ax.axvline(
            r,
            color="0.3",
            ls="-.",
            lw=1.1,
            zorder=MARK_Z,
            gid=f"quoted round {r}",
            label=f"rounds the findings quote: {named}" if i == 0 else "_quoted",
        )


def plot_compare(table: Any, methods: dict[str, list[str]], path: str | Path) -> Figure:
    """Save and return the compare figure: top row, error against round (1..R, log2 axis so that the first
    rounds do not crowd), one panel per set; bottom row, against numbers sent per edge (every round a row has a
    value). Mean over seeds (geometric) with the 95 % seed interval as a band (from MIN_BAND_SEEDS seeds on),
    every band under every line; the axes are set by the mean lines alone (cut below at a third of the smallest
    non-bound mean, above at 3: a diverging row runs off the top), so a wide band is clipped instead of
    squashing the lines. The rounds the findings quote (K and R) are marked by vertical lines (mark_rounds) and
    one legend lies below the panels (shared_legend), never over the data (docs/guide/bridge.md,
    "Transformers against the classical methods, round by round")."""
    with matplotlib.rc_context(READABLE):
        fig = compare_figure(table, methods)
        save_figure(fig, path, dpi=120)  # about twice the width the README shows
    return fig


def compare_figure(table: Any, methods: dict[str, list[str]]) -> Figure:
    """The Figure of plot_compare."""
    from bridge.comparison import FLOOR

    sets = table.sets
    shown = list(dict.fromkeys(m for name in sets for m in methods[name]))
    colours = dict(zip(shown, palette(len(shown)), strict=True))
    fig = Figure(figsize=(PANEL_WIDTH * len(sets) + 0.6, 7.2 + 0.2 * math.ceil(len(shown) / 2)), layout="constrained")
    axes = fig.subplots(2, len(sets), squeeze=False)
    quoted = sorted({table.depth, table.rounds})
    for column, name in enumerate(sets):
        low, high = math.inf, 0.0
        for method in methods[name]:
            spec = table.rows[method]
            rounds = np.array(table.available(method))
            cells = np.array([table.cell(method, name, r) for r in rounds])
            style = dict(
                color=colours[method],
                ls="-" if spec.is_model else ":" if spec.kind == "bound" else "--",
                lw=1.6,
                label=method,
                zorder=LINE_Z,
            )
            top = rounds <= table.rounds
            means = cells[top, 0][np.isfinite(cells[top, 0]) & (cells[top, 0] > 0)]
            if len(means) and spec.kind != "bound":
                low = min(low, means.min())
            if len(means):
                high = max(high, means.max())
            sent = spec.sent
            for row, x, keep in ((0, rounds, top), (1, None if sent is None else rounds * sent, rounds > 0)):
                if x is None:
                    continue
                ax = axes[row, column]
                ax.plot(x[keep], cells[keep, 0], marker="." if row else None, ms=4, **style)
                if len(table.seeds) >= MIN_BAND_SEEDS:
                    ax.fill_between(
                        x[keep],
                        cells[keep, 1],
                        cells[keep, 2],
                        color=colours[method],
                        alpha=BAND_ALPHA,
                        linewidth=0,
                        zorder=BAND_Z,
                    )
        top = min(high, 1.5) * 2 if high > 0 else 3.0  # a row above error 1 (diverging) runs off the top
        limits = (max(low / 3, FLOOR) if math.isfinite(low) else FLOOR, top)
        axes[0, column].set(title=name, xlabel="communication round", yscale="log", ylim=limits)
        axes[0, column].set_xscale("log", base=2)
        axes[0, column].set_xlim(1, table.rounds * 1.05)
        axes[0, column].xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
        mark_rounds(axes[0, column], quoted, table.depth)
        axes[1, column].set(xlabel="numbers sent per edge (cumulative)", xscale="log", yscale="log", ylim=limits)
        for ax in axes[:, column]:
            ax.grid(True, alpha=0.4)
    for ax in axes[:, 0]:
        ax.set(ylabel="error ||x - x*|| / ||a - x*||")
    shared_legend(fig)
    fig.suptitle(compare_title(table, methods))
    return fig


def compare_title(table: Any, methods: dict[str, list[str]]) -> str:
    """The compare figure's title: seeds, what the bands are and, when a drawn line ends at round K < R, why."""
    bands = (
        "bands: 95 % interval across seeds (clipped to the axes)"
        if len(table.seeds) >= MIN_BAND_SEEDS
        else f"no bands below {MIN_BAND_SEEDS} seeds"
    )
    drawn = {m for rows in methods.values() for m in rows}
    ends = table.depth < table.rounds and any(
        max(r for r in table.available(m) if r <= table.rounds) == table.depth for m in drawn if table.available(m)
    )
    title = f"lines: mean of {len(table.seeds)} seeds; {bands}"
    if ends:
        title += f"\na line ending at round {table.depth}: a model of {table.depth} layers has no later round"
    return title


def plot_learning_curves(curves: list[dict[str, Any]], path: str | Path) -> Figure:
    """Save and return the learning curves: validation loss (log axis) against training step, one panel per
    trained row, one line per seed (the same colour in every panel), with a marker at every evaluation when a
    run has at most SPARSE_POINTS of them; the title says how many evaluations each run has, and one legend
    lies below the panels (docs/guide/bridge.md, "Transformers against the classical methods, round by
    round")."""
    with matplotlib.rc_context(READABLE):
        fig = learning_figure(curves)
        save_figure(fig, path, dpi=120)  # about twice the width the README shows
    return fig


def learning_figure(curves: list[dict[str, Any]]) -> Figure:
    """The Figure of plot_learning_curves."""
    methods = list(dict.fromkeys(row["method"] for row in curves))
    seeds = list(dict.fromkeys(row["seed"] for row in curves))
    runs: dict[tuple[Any, Any], list[tuple[int, float]]] = {}
    for row in curves:
        runs.setdefault((row["method"], row["seed"]), []).append((int(row["step"]), float(row["val_loss"])))
    counts = sorted(len(points) for points in runs.values())
    marker = "o" if counts[-1] <= SPARSE_POINTS else None
    columns = min(3, len(methods))
    fig = Figure(figsize=(PANEL_WIDTH * columns, 2.9 * math.ceil(len(methods) / columns) + 1), layout="constrained")
    axes = np.atleast_1d(fig.subplots(math.ceil(len(methods) / columns), columns, squeeze=False)).ravel()
    colours = dict(zip(seeds, palette(len(seeds)), strict=True))
    for ax, method in zip(axes, methods, strict=False):
        for seed in seeds:
            if (method, seed) in runs:
                steps, losses = zip(*sorted(runs[method, seed]), strict=True)
                ax.plot(steps, losses, color=colours[seed], lw=1.2, marker=marker, ms=3, label=f"seed {seed}")
        ax.set(title=method, xlabel="training step", ylabel="validation loss", yscale="log")
        ax.grid(True, alpha=0.4)
    for ax in axes[len(methods) :]:
        ax.set_visible(False)
    shared_legend(fig)
    evaluations = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]} to {counts[-1]}"
    fig.suptitle(f"validation loss at each evaluation: {evaluations} evaluations per run")
    return fig


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


def plot_probe_layers(means, path):
    """Save the probe figure of the reproductions: per variant and layer, ||Delta W^o|| / ||MH W^o|| (belief Fig. 4),
    ||Phi|| / ||V|| (AttentionX) and the angles of Delta W^o and MH W^o to the token X.

    means: [(index, variant, {statistic: (layers,) mean over seeds})] (experiments.repro_report.probe_means); a
    variant's colour is C{index}.
    """

    fig = Figure(figsize=(15, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    for index, name, values in means:
        layers = np.arange(1, len(values["phi_ratio"]) + 1)
        axes[0].plot(layers, values["wdelta_ratio"], "o-", color=f"C{index}", label=name)
        axes[1].plot(layers, values["phi_ratio"], "o-", color=f"C{index}", label=name)
        axes[2].plot(layers, values["cos_delta_wo"], "o-", color=f"C{index}", label=f"{name}: Delta W^o")
        axes[2].plot(layers, values["cos_mh_wo"], "s--", color=f"C{index}", label=f"{name}: MH W^o")
    for ax, (ylabel, title) in zip(
        axes,
        (
            ("ratio", "||Delta W^o|| / ||MH W^o|| (belief Fig. 4)"),
            ("ratio", "||Phi|| / ||V|| (AttentionX)"),
            ("cos", "angle to the token X"),
        ),
        strict=False,
    ):
        ax.set(xlabel="layer", ylabel=ylabel, title=title)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.4)
        ax.legend(fontsize=7)
    save_figure(fig, path, dpi=120)


def plot_against(xs, values, seconds, short, metric, path):
    """Save the final `metric` (left) and the seconds per step (right) against a config key's values `xs` (log
    axis, named `short`), one line per variant: values and seconds {variant: [mean over seeds per x]}."""

    fig = Figure(figsize=(10, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    for name in values:
        left.plot(xs, values[name], "o-", label=name)
        right.plot(xs, seconds[name], "o-", label=name)
    left.set(xscale="log", xlabel=short, ylabel=f"final {metric}", title=f"{metric} against {short}")
    right.set(xscale="log", xlabel=short, ylabel="seconds per step", title=f"time per step against {short}")
    for ax in (left, right):
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, alpha=0.4)
        ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)


def plot_network_sweep(rows, path, target):
    """Three panels (loss, wake, bits): mean iterations per method with min-max bars; unreached seeds left out."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .network_sweep import AXES, AXIS_TITLES, METHODS

    fig, axes = plt.subplots(1, len(AXES), figsize=(4 * len(AXES), 3.4), sharey=True)
    ideal = {r["method"]: r["iterations"] for r in rows if r["axis"] is None}
    for ax, axis in zip(axes, AXES, strict=False):
        for label in METHODS:
            xs = ([0.0] if axis == "drop" else [1.0] if axis == "wake" else []) + list(AXES[axis])
            series = ([ideal[label]] if axis in ("drop", "wake") else []) + [
                next(r["iterations"] for r in rows if r["axis"] == axis and r["value"] == v and r["method"] == label)
                for v in AXES[axis]
            ]
            points = [(x, [c for c in s if c is not None]) for x, s in zip(xs, series, strict=False)]
            points = [(x, c) for x, c in points if c]
            if points:
                mean = np.array([np.mean(c) for _, c in points])
                low, high = mean - [min(c) for _, c in points], [max(c) for _, c in points] - mean
                ax.errorbar([x for x, _ in points], mean, yerr=[low, high], marker="o", capsize=3, label=label)
        ax.set_xlabel(AXIS_TITLES[axis])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"iterations to {target:g}")
    axes[0].legend()
    fig.tight_layout()
    rundir.save_figure(fig, path, dpi=110)
    plt.close(fig)


# Figures of the commands plot (plot_metric), learn-pdmm (plot_errors) and probe (plot_probe), moved out of them.


def plot_metric(runs: list[Any], metric: str, path: str | Path) -> Any:
    """Group training runs into variants (runs.group_runs) and save the figure of `metric` to `path`
    (plot_groups: the mean over seeds, a band from min to max).

    Parameters
    ----------
    runs : list of Run
        Run directories, read.
    metric : str
        A logged metric.
    path : str or Path
        The figure file.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    UsageError
        When there is no run, or no run logs `metric` (naming the metrics that exist).
    """
    if not runs:
        raise UsageError("no run directories to plot")
    if not any(metric in run.metric_names() for run in runs):
        existing = list(dict.fromkeys(name for run in runs for name in run.metric_names()))
        raise UsageError(f"no run logs the metric {metric!r}; the runs log {', '.join(existing) or 'nothing yet'}")
    return plot_groups(group_runs(runs), metric, path)


def plot_errors(curves: dict[int, tuple[Any, Any]], path: str | Path) -> None:
    """Save learned PDMM's relative error against round beside the best constant rho's, one colour per K.

    Parameters
    ----------
    curves : dict
        {K: (constant-rho errors, learned errors)}, each K numbers, geometric means over held-out instances
        (bridge.learned.learned_vs_constant).
    path : str or Path
        The figure file.
    """

    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for K, (constant, learned) in curves.items():
        (line,) = ax.plot(range(1, K + 1), constant, "--", label=f"best constant rho, K = {K}")
        ax.plot(range(1, K + 1), learned, "-", color=line.get_color(), label=f"learned rho_k, theta_k, K = {K}")
    ax.set(
        yscale="log",
        xlabel="communication round",
        ylabel="relative error (geometric mean)",
        title="learned vs constant-rho PDMM, held-out instances",
    )
    ax.grid(True, alpha=0.4)
    ax.legend()
    save_figure(fig, path, dpi=120)


PROBE_RATIOS = (
    ("phi_ratio", "||V - gamma MH|| / ||V||"),
    ("wdelta_ratio", "||Delta W^o|| / ||MH W^o||"),
    ("delta_ratio", "||Delta|| / ||MH|| (<= 1)"),
)
PROBE_COSINES = (
    ("cos_delta_wo", "cos(Delta W^o, X)"),
    ("cos_mh_wo", "cos(MH W^o, X)"),
    ("cos_update", "cos(update, X)"),
)


def plot_probe(totals: list[dict[str, float]], residual: list[float], name: str, path: str | Path) -> None:
    """Save the probe's norm ratios and cosines against layer beside PDMM's normalised residual against iteration.

    Parameters
    ----------
    totals : list of dict
        Per layer, the probe's means (PROBE_RATIOS and PROBE_COSINES keys; experiments.probing.probe_layers).
    residual : list of float
        PDMM's constraint residual divided by its first value (bridge.probe.pdmm_residual).
    name : str
        The run's residual variant, for the title.
    path : str or Path
        The figure file.
    """

    fig = Figure(figsize=(14, 4), layout="constrained")
    ratios, cosines, right = fig.subplots(1, 3)
    layers = range(1, len(totals) + 1)
    for ax, curves in ((ratios, PROBE_RATIOS), (cosines, PROBE_COSINES)):
        for key, label in curves:
            ax.plot(layers, [t[key] for t in totals], "o-", label=label)
        ax.set(xlabel="layer", xticks=list(layers))
    ratios.set(title=f"norm ratios ({name} run)")
    cosines.set(title="angles to the token X")
    right.plot(range(1, len(residual) + 1), residual, "o-", color="black", label="PDMM residual / first")
    right.set(xlabel="iteration", yscale="log", title="PDMM, averaging on a 64-node graph")
    for ax in (ratios, cosines, right):
        ax.grid(True, alpha=0.4)
        ax.legend()
    save_figure(fig, path, dpi=120)
