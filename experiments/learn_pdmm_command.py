"""pdmm-bridge learn-pdmm: learned PDMM (per-layer rho_k, theta_k) against the best constant rho.

    pdmm-bridge learn-pdmm --layers 10,20 --out runs/learned-pdmm --results docs/RESULTS.md

For each K: the best constant rho (theta 1) on the training instances, then an UnrolledPDMM
started there and trained full batch (bridge.learned.fit), both evaluated on held-out instances:
the training family with new seeds, larger graphs, and other topologies. Writes results.json,
results.md (the table: geometric-mean relative error after K rounds and the learned / constant
ratio), errors.png (error against round) and, with --results, the same table as a section of
that Markdown file. Ctrl-C stops it at once, writes nothing (every K is kept in memory until the end) and exits
with status 130.
"""

import argparse
import json
import sys
from pathlib import Path

from . import rundir
from .errors import UsageError, package_version


def layer_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive layer counts, got {text!r}")
    return values


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "learn-pdmm",
        help="learned PDMM against the best constant rho",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--layers", type=layer_list, default="10,20", help="K values, comma-separated")
    parser.add_argument("--train-graphs", type=int, default=16, help="training graphs (x 16 instances each)")
    parser.add_argument("--test-graphs", type=int, default=16, help="held-out graphs per set (x 16 instances)")
    parser.add_argument("--steps", type=int, default=150, help="full-batch Adam steps")
    parser.add_argument("--seed", type=int, default=0, help="seed of the training and held-out instances")
    parser.add_argument("--out", default="runs/learned-pdmm", help="output directory")
    parser.add_argument("--results", help="also write the table as a section of this Markdown file")
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty --out that learn-pdmm did not make; replace a --results section from a larger run",
    )
    return parser


def run(args):
    from bridge.learned import learned_vs_constant  # torch, matplotlib: imported only to run (--help answers at once)

    from .plots import plot_errors
    from .results_doc import replace_section

    if min(args.train_graphs, args.test_graphs, args.steps) < 1:
        raise UsageError("--train-graphs, --test-graphs and --steps must be >= 1")
    out = rundir.claim(
        args.out, "learn-pdmm", args.force, reusable=True, writes=("results.json", "results.md", "errors.png")
    )
    try:
        results, training, curves = learned_vs_constant(
            args.layers, args.train_graphs, args.test_graphs, args.steps, args.seed
        )
    except KeyboardInterrupt:  # every K is kept in memory until the last: nothing is written
        print(
            "pdmm-bridge learn-pdmm: interrupted (Ctrl-C); no results written: run the same command again",
            file=sys.stderr,
        )
        return 130
    command = "pdmm-bridge learn-pdmm " + " ".join(
        f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items()
        if k in ("layers", "train_graphs", "test_graphs", "steps", "seed")
    )
    rundir.write_file(
        out / "results.json",
        json.dumps(
            {"version": package_version(), "command": command, "results": results, "training": training}, indent=2
        )
        + "\n",
    )
    plot_errors(curves, out / "errors.png")
    rundir.write_file(out / "results.md", markdown(results, command, "errors.png"))
    if args.results:  # the figure goes to figures/ beside the results file
        figure = rundir.make_dir(Path(args.results).parent / "figures") / "learned_pdmm_errors.png"
        rundir.copy_file(out / "errors.png", figure)
        replace_section(
            args.results,
            "learned-pdmm",
            markdown(results, command, "figures/learned_pdmm_errors.png"),
            scale={"steps": args.steps, "train_graphs": args.train_graphs, "test_graphs": args.test_graphs},
            force=args.force,
        )
    print(out / "results.md")
    return 0


def markdown(results, command, figure):
    lines = [
        "## Learned PDMM against the best constant rho",
        "",
        f"`{command}`",
        "",
        "Distributed averaging, a_i ~ N(1, 1); training instances on random geometric graphs, n 32-64. "
        "Geometric-mean relative error ||x^K - x*|| / ||x*|| after K rounds; ratio < 1: learned PDMM is "
        "better. Both the constant rho and the learned rho_k, theta_k are fitted to the training "
        "instances only, so on the other topologies neither is tuned. One draw of instances (one seed), so "
        "no intervals: `pdmm-bridge compare` fits learned PDMM per seed and reports it over 5 seeds.",
        "",
        "| K | instances | best constant rho | constant-rho error | learned error | learned / constant |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['K']} | {r['set']} | {r['best_constant_rho']:.3g} | {r['constant_error']:.3g} | "
            f"{r['learned_error']:.3g} | {r['ratio']:.3f} |"
        )
    lines += ["", f"![error against round, same-family held-out instances]({figure})"]
    return "\n".join(lines) + "\n"
