"""Iterations to a target error under simulated networks, over seeds: what `pdmm-bridge network-sweep` computes
and the Markdown of its tables (its figure is experiments.plots.plot_network_sweep).

One cell = one method under one network setting: for each seed s, a random geometric graph
(seed s), averaging data a ~ N(0, 1) (seed s) and network draws (seed s); the count is the first
iteration k with ||x^k - x*||_F / ||x*||_F <= target, x* = mean(a) exact
(docs/theory/pdmm.md section 8), or None if not reached within max_iter.
"""

import numpy as np

from bridge.statistics import paired_interval
from pdmm.network import Network
from pdmm.problem import averaging
from pdmm.solve import solve
from pdmm.topologies import topology

AXES = {"drop": (0.1, 0.3, 0.5), "wake": (0.9, 0.7, 0.5), "bits": (16, 20, 24, 32)}
METHODS = {"pdmm": ("pdmm", {}), "averaged pdmm": ("pdmm", {"theta": 0.5}), "admm": ("admm", {})}


def network(axis, value, seed):
    """The Network of one setting: drop or wake probability, or b bits with subtractive dither; None: ideal."""
    if axis is None:
        return Network(seed=seed)
    if axis == "bits":
        return Network(bits=value, dither=True, seed=seed)
    return Network(**{axis: value}, seed=seed)


def iterations_to_target(problem, x_star, method, params, net, target, max_iter, rho):
    """The first iteration whose relative error is <= target, or None within max_iter; KeyboardInterrupt when
    Ctrl-C stopped the solve (pdmm.solve returns what ran then), so an interrupted run is never counted as one
    that did not reach the target."""
    result = solve(
        problem,
        method=method,
        rho=rho,
        max_iter=max_iter,
        tol=0,
        reference=x_star,
        network=net,
        target=target,
        history=("error",),
        record_every=1,
        **params,
    )
    if result.interrupted:
        raise KeyboardInterrupt
    hit = np.flatnonzero(result.history["error"] <= target)
    return int(result.history["iteration"][hit[0]]) if hit.size else None


def network_sweep(
    axes=AXES, methods=METHODS, seeds=(0, 1, 2), n=100, dim=3, rho=1.0, target=1e-6, max_iter=3000, progress=None
):
    """[{"axis", "value", "method", "iterations": [per seed, None = not reached]}], the ideal network first
    (axis None)."""
    if not (isinstance(n, int) and n >= 2 and isinstance(dim, int) and dim >= 1):
        raise ValueError(f"n must be >= 2 and dim >= 1 integers, got n={n!r}, dim={dim!r}")
    if not (0 < target < 1):
        raise ValueError(f"target must be in (0, 1), got {target!r}")
    unknown = sorted(set(axes) - set(AXES))
    if unknown:
        raise ValueError(f"unknown axes {unknown}; choose from {sorted(AXES)}")
    settings = [(None, None)] + [(axis, value) for axis, values in axes.items() for value in values]
    instances = []
    for seed in seeds:
        a = np.random.default_rng(seed).normal(size=(n, dim))
        instances.append((averaging(topology("random_geometric", n=n, seed=seed), a), np.tile(a.mean(0), (n, 1))))
    rows = []
    for axis, value in settings:
        for label, (method, params) in methods.items():
            counts = [
                iterations_to_target(problem, x_star, method, params, network(axis, value, seed), target, max_iter, rho)
                for seed, (problem, x_star) in zip(seeds, instances, strict=False)
            ]
            rows.append({"axis": axis, "value": value, "method": label, "iterations": counts})
            if progress:
                progress(rows[-1])
    return rows


AXIS_TITLES = {"drop": "loss probability p", "wake": "wake probability q", "bits": "bits b (subtractive dither)"}


def count_cell(counts):
    """ "mean [min, max]" of one cell's iteration counts over seeds, with how many seeds did not reach the target."""
    reached = [c for c in counts if c is not None]
    if len(reached) < len(counts):
        return (
            f"not reached ({len(counts) - len(reached)}/{len(counts)})"
            if not reached
            else f"{np.mean(reached):.0f} [{min(reached)}, {max(reached)}], {len(counts) - len(reached)} not reached"
        )
    return f"{np.mean(counts):.0f} [{min(counts)}, {max(counts)}]"


def interval_cell(first, second):
    """ "mean [low, high]" of the paired differences first - second (bridge.statistics.paired_interval), or "—"."""
    found = paired_interval(first, second)
    return "—" if found is None else f"{found[0]:+.0f} [{found[1]:+.0f}, {found[2]:+.0f}]"


def markdown(rows, command, figure, *, target, dim, nodes, rho, seeds, iters):
    """Tables per axis: mean [min, max] iterations per method, and paired 95 % t intervals between methods; the
    sweep ran with `nodes`, `dim`, `rho`, `seeds` seeds, `target` and `iters` (network_sweep's arguments)."""
    labels = list(METHODS)
    by = {(r["axis"], r["value"], r["method"]): r["iterations"] for r in rows}
    lines = [
        f"## Iterations to {target:g} under simulated networks",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Averaging (f_i = 1/2 ||x - a_i||^2, d = {dim}, a ~ N(0, 1)) on random geometric graphs with "
        f"n = {nodes} (radius sqrt(2 ln n / n)), rho = {rho:g}, x^0 = 0, seeds 0-{seeds - 1} "
        "(each seed its own graph, data and network draws). A cell is the first iteration with "
        f"||x - x*||_F / ||x*||_F <= {target:g} (x* = mean(a), exact): mean [min, max] over the seeds, "
        f"or not reached within {iters} iterations. The differences are paired by seed: mean and "
        f"95 % t interval (t with {seeds - 1} d.f.); an interval containing 0 shows no difference "
        "at this number of seeds. Quantised runs use subtractive dither and an adaptive range. The figure "
        "shows the mean with min-max bars over the seeds that reached the target (the tables count the others).",
        "",
    ]
    for axis in ["ideal", *AXES]:
        values = [None] if axis == "ideal" else AXES[axis]
        key = None if axis == "ideal" else axis
        title = "ideal network" if axis == "ideal" else AXIS_TITLES[axis]
        lines += [
            f"**{title}**",
            "",
            "| setting | " + " | ".join(labels) + " | pdmm − admm | averaged pdmm − admm |",
            "|---|" + "---:|" * (len(labels) + 2),
        ]
        for value in values:
            counts = [by[(key, value, label)] for label in labels]
            lines.append(
                f"| {'—' if value is None else value} | "
                + " | ".join(count_cell(c) for c in counts)
                + f" | {interval_cell(counts[0], counts[2])} | {interval_cell(counts[1], counts[2])} |"
            )
        lines.append("")
    lines += [f"![iterations to {target:g} against loss, wake probability and bits]({figure})", ""]
    return "\n".join(lines)
