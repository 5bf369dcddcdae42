"""pdmm-bridge network-sweep: iterations to a target error against loss, wake probability and bits, written to
--out as network_sweep.md with its figure network_sweep.png and the per-seed counts network_sweep.json
(computed and tabulated by experiments/network_sweep.py, drawn by experiments/plots.py), and with --results
FILE also as section "network-sweep" of FILE (the figure copied to figures/ beside it).

    pdmm-bridge network-sweep                                   # n = 100, 5 seeds: runs/network-sweep/
    pdmm-bridge network-sweep --results docs/RESULTS.md         # and the section, docs/figures/network_sweep.png

Ctrl-C stops the sweep within the current solve, writes nothing (the counts are kept in memory until the end; an
interrupted solve is never counted as "not reached") and exits with status 130.
"""

import json
import sys
from pathlib import Path

from . import rundir
from .errors import UsageError, package_version
from .options import positive

SECTION = "network-sweep"


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "network-sweep", help="iterations to 1e-6 under loss, sleep and quantisation", description=__doc__
    )
    parser.add_argument("--nodes", type=int, default=100, help="nodes of the random geometric graphs")
    parser.add_argument("--dim", type=int, default=3, help="dimension d of each x_i")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..S-1 (graph, data and network draws)")
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
    from .network_sweep import markdown, network_sweep  # torch, matplotlib: imported only to run (--help at once)
    from .plots import plot_network_sweep
    from .results_doc import check_section, replace_section

    if args.nodes < 2 or args.dim < 1 or args.seeds < 2 or args.iters < 1:
        raise UsageError(
            f"need --nodes >= 2, --dim >= 1, --seeds >= 2, --iters >= 1; got {args.nodes}, "
            f"{args.dim}, {args.seeds}, {args.iters}"
        )
    scale = {"nodes": args.nodes, "seeds": args.seeds, "iters": args.iters}
    if args.results:
        check_section(args.results, SECTION, scale, args.force)  # refuse before the work, not after
    out = rundir.claim(
        args.out,
        "network-sweep",
        args.force,
        reusable=True,
        writes=("network_sweep.md", "network_sweep.json", "network_sweep.png"),
    )
    try:
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
    except KeyboardInterrupt:  # the cells are kept in memory until the last: nothing is written
        print(
            "pdmm-bridge network-sweep: interrupted (Ctrl-C); no results written: run the same command again",
            file=sys.stderr,
        )
        return 130
    plot_network_sweep(rows, out / "network_sweep.png", args.target)
    command = (
        " ".join(["pdmm-bridge network-sweep"] + sys.argv[2:])
        if sys.argv[1:2] == ["network-sweep"]
        else "pdmm-bridge network-sweep"
    )
    sizes = {"target": args.target, "dim": args.dim, "nodes": args.nodes, "rho": args.rho, "seeds": args.seeds}
    rundir.write_file(out / "network_sweep.md", markdown(rows, command, "network_sweep.png", **sizes, iters=args.iters))
    record = {"version": package_version(), "command": command, **sizes, "iters": args.iters, "rows": rows}
    rundir.write_file(out / "network_sweep.json", json.dumps(record, indent=2, allow_nan=False) + "\n")
    print(out / "network_sweep.md")
    if args.results:
        figures = rundir.make_dir(Path(args.results).parent / "figures")
        rundir.copy_file(out / "network_sweep.png", figures / "network_sweep.png")
        replace_section(
            args.results,
            SECTION,
            markdown(rows, command, "figures/network_sweep.png", **sizes, iters=args.iters),
            scale=scale,
            force=args.force,
        )
        print(f"wrote section {SECTION} of {args.results} and {figures / 'network_sweep.png'}")
    return 0
