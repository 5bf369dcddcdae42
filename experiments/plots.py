"""Figures shared by the pdmm-bridge commands, drawn on a bare matplotlib Figure (Agg, no display needed)."""
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, StrMethodFormatter


def plot_convergence(histories, path, title):
    """Save residual and relative error against iteration, log scale, one line per method.

    histories: {method: {"residual": (iterations,), "error": (iterations,) if a reference was given}}.
    """
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    residual, error = fig.subplots(1, 2)
    for method, history in histories.items():
        iterations = range(1, len(history["residual"]) + 1)
        residual.plot(iterations, history["residual"], label=method)
        if "error" in history:
            error.plot(iterations, history["error"], label=method)
    residual.set(yscale="log", xlabel="iteration", ylabel="constraint residual (RMS)", title="residual")
    error.set(title="relative error")
    for ax in (residual, error):
        if ax.lines:
            ax.grid(True, alpha=0.4)
            ax.legend()
    if error.lines:
        error.set(yscale="log", xlabel="iteration", ylabel=r"$\|x - x^\star\|_F \,/\, \|x^\star\|_F$")
    else:
        error.axis("off")
        error.text(0.5, 0.5, "no reference solution", ha="center", va="center", transform=error.transAxes)
    fig.suptitle(title)
    fig.savefig(path, dpi=120)


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
            line, = ax.plot(x, curve.mean, marker=marker, label=label)
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
    fig.savefig(path, dpi=120)
    return fig


def plot_training(rows, path, title):
    """Save training loss (every logged step) and validation loss (evaluation steps) against step."""
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.plot([r["step"] for r in rows], [r["train_loss"] for r in rows], lw=0.8, alpha=0.6, label="train loss")
    evals = [r for r in rows if "val_loss" in r]
    ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", label="validation loss")
    ax.set(xlabel="step", ylabel="loss", title=title)
    ax.grid(True, alpha=0.4)
    ax.legend()
    fig.savefig(path, dpi=120)
