"""Figures shared by the pdmm-bridge commands, drawn on a bare matplotlib Figure (Agg, no display needed)."""

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, StrMethodFormatter

from . import rundir
from .errors import UsageError
from .rundir import save_figure
from .runs import aligned, group_runs

PANELS = {
    "residual": ("residual", "constraint residual (RMS)", "log"),
    "error": ("relative error", r"$\|x - x^\star\|_F \,/\, \|x^\star\|_F$", "log"),
    "objective": ("objective", r"$\sum_i f_i(x_i)$", "linear"),
}


AXES = {"iteration": "iteration", "messages": "messages delivered", "bits": "bits sent"}
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
    from matplotlib.figure import Figure

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
    from matplotlib.figure import Figure

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
