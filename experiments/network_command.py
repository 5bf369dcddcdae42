"""pdmm-bridge network-sweep: iterations to a target error against loss, wake probability and bits, written
to --out as network_sweep.md with its figure network_sweep.png (the computation is experiments/network_sweep.py),
and with --results FILE also as section "network-sweep" of FILE (the figure copied to figures/ beside it).

    pdmm-bridge network-sweep                                   # n = 100, 3 seeds: runs/network-sweep/
    pdmm-bridge network-sweep --results docs/RESULTS.md         # and the section, docs/figures/network_sweep.png
"""

import sys
from pathlib import Path

import numpy as np

from . import rundir
from .common import UsageError, positive
from .network_sweep import AXES, METHODS, network_sweep, paired_interval
from .results_doc import check_section, replace_section

SECTION = "network-sweep"
AXIS_TITLES = {"drop": "loss probability p", "wake": "wake probability q", "bits": "bits b (subtractive dither)"}


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "network-sweep", help="iterations to 1e-6 under loss, sleep and quantisation", description=__doc__
    )
    parser.add_argument("--nodes", type=int, default=100, help="nodes of the random geometric graphs")
    parser.add_argument("--dim", type=int, default=3, help="dimension d of each x_i")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1 (graph, data and network draws)")
    parser.add_argument("--rho", type=positive(float), default=1.0, help="penalty of every method")
    parser.add_argument("--target", type=positive(float), default=1e-6, help="relative error to reach")
    parser.add_argument("--iters", type=int, default=3000, help="iterations before a run counts as not reached")
    parser.add_argument("--out", default="runs/network-sweep", help="output directory")
    parser.add_argument(
        "--results",
        metavar="FILE",
        help="also write the tables as a section of this Markdown file (the figure to figures/ beside it)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty --out that network-sweep did not make; replace a section made from a larger run",
    )
    return parser


def run(args):
    if args.nodes < 2 or args.dim < 1 or args.seeds < 2 or args.iters < 1:
        raise UsageError(
            f"need --nodes >= 2, --dim >= 1, --seeds >= 2, --iters >= 1; got {args.nodes}, "
            f"{args.dim}, {args.seeds}, {args.iters}"
        )
    scale = {"nodes": args.nodes, "seeds": args.seeds, "iters": args.iters}
    if args.results:
        check_section(args.results, SECTION, scale, args.force)  # refuse before the work, not after
    out = rundir.claim(args.out, "network-sweep", args.force, reusable=True)
    rows = network_sweep(
        seeds=tuple(range(args.seeds)),
        n=args.nodes,
        dim=args.dim,
        rho=args.rho,
        target=args.target,
        max_iter=args.iters,
        progress=lambda row: print(
            f"{row['axis'] or 'ideal'} {row['value'] or ''} {row['method']}: {row['iterations']}", file=sys.stderr
        ),
    )
    plot(rows, out / "network_sweep.png", args.target)
    command = (
        " ".join(["pdmm-bridge network-sweep"] + sys.argv[2:])
        if sys.argv[1:2] == ["network-sweep"]
        else "pdmm-bridge network-sweep"
    )
    rundir.write_file(out / "network_sweep.md", markdown(rows, args, command, "network_sweep.png"))
    print(out / "network_sweep.md")
    if args.results:
        figures = rundir.make_dir(Path(args.results).parent / "figures")
        rundir.copy_file(out / "network_sweep.png", figures / "network_sweep.png")
        replace_section(
            args.results,
            SECTION,
            markdown(rows, args, command, "figures/network_sweep.png"),
            scale=scale,
            force=args.force,
        )
        print(f"wrote section {SECTION} of {args.results} and {figures / 'network_sweep.png'}")
    return 0


def _cell(counts):
    reached = [c for c in counts if c is not None]
    if len(reached) < len(counts):
        return (
            f"not reached ({len(counts) - len(reached)}/{len(counts)})"
            if not reached
            else f"{np.mean(reached):.0f} [{min(reached)}, {max(reached)}], {len(counts) - len(reached)} not reached"
        )
    return f"{np.mean(counts):.0f} [{min(counts)}, {max(counts)}]"


def _interval(first, second):
    found = paired_interval(first, second)
    return "—" if found is None else f"{found[0]:+.0f} [{found[1]:+.0f}, {found[2]:+.0f}]"


def markdown(rows, args, command, figure):
    """Tables per axis: mean [min, max] iterations per method, and paired 95 % t intervals between methods."""
    labels = list(METHODS)
    by = {(r["axis"], r["value"], r["method"]): r["iterations"] for r in rows}
    lines = [
        f"## Iterations to {args.target:g} under simulated networks",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Averaging (f_i = 1/2 ||x - a_i||^2, d = {args.dim}, a ~ N(0, 1)) on random geometric graphs with "
        f"n = {args.nodes} (radius sqrt(2 ln n / n)), rho = {args.rho:g}, x^0 = 0, seeds 0-{args.seeds - 1} "
        "(each seed its own graph, data and network draws). A cell is the first iteration with "
        f"||x - x*||_F / ||x*||_F <= {args.target:g} (x* = mean(a), exact): mean [min, max] over the seeds, "
        f"or not reached within {args.iters} iterations. The differences are paired by seed: mean and "
        f"95 % t interval (t with {args.seeds - 1} d.f.); an interval containing 0 shows no difference "
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
                + " | ".join(_cell(c) for c in counts)
                + f" | {_interval(counts[0], counts[2])} | {_interval(counts[1], counts[2])} |"
            )
        lines.append("")
    lines += [f"![iterations to {args.target:g} against loss, wake probability and bits]({figure})", ""]
    return "\n".join(lines)


def plot(rows, path, target):
    """Three panels (loss, wake, bits): mean iterations per method with min-max bars; unreached seeds left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
