"""Figures shared by the pdmm-bridge commands, drawn on a bare matplotlib Figure (Agg, no display needed)."""
from matplotlib.figure import Figure


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
