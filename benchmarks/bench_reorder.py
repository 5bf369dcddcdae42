"""What pdmm.solve's node renumbering (reorder=None, reverse Cuthill-McKee) costs and saves in one call.

Distributed averaging (d = 1, float64, B = 1) on a randomly numbered graph of about E directed
edges (bench_pdmm.build), solved for K iterations with tol = 0, once with the default renumbering
and once with reorder=False, each in a fresh process so that its peak resident memory is its own:
the whole solve call's seconds (renumbering and compiling included), the iterations' seconds
(Result.seconds), and the process's peak resident set (graph sampling included, the same in both).
The break-even is the number of iterations at which the renumbering has paid for itself.

    python benchmarks/bench_reorder.py [--edges 10000000] [--graph random_geometric] [--iterations 20]
                                     [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_reorder.csv (table "numbering"; benchmarks/results.py).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from bench_pdmm import GRAPHS, build
from machine import cpu_model
from results import Recorder, add_arguments

import pdmm


def child(args):
    G = build(args.graph, args.edges)
    problem = pdmm.averaging(G, np.random.default_rng(0).standard_normal(G.n))
    start = time.perf_counter()
    result = pdmm.solve(problem, max_iter=args.iterations, tol=0, reorder=None if args.child == "renumbered" else False)
    print(
        json.dumps(
            {
                "call": time.perf_counter() - start,
                "iterations": result.seconds,
                "edges": problem.compiled.num_edges,
                "n": problem.n,
            }
        )
    )


def run(mode, args):
    """(measurements, peak resident MB) of a child process solving with `mode`."""
    command = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--edges",
        str(args.edges),
        "--graph",
        args.graph,
        "--iterations",
        str(args.iterations),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise RuntimeError(f"{mode} run failed with status {status}")
    return json.loads(out.strip().splitlines()[-1]), usage.ru_maxrss / 1024  # ru_maxrss: kB on Linux


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--edges", type=int, default=10**7, help="directed edges E (about)")
    parser.add_argument("--graph", default="random_geometric", choices=GRAPHS)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--child", choices=("renumbered", "as given"), help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        return child(args)
    recorder = Recorder("bench_reorder", args.results_dir, args.shared)  # before any work: load at start
    print(
        f"CPU: {cpu_model()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {args.graph}, "
        f"{args.iterations} iterations, load average {recorder.provenance['load_at_start']} at start\n"
    )
    rows = {mode: run(mode, args) for mode in ("as given", "renumbered")}
    print("| numbering | directed edges | n | solve call s | iterations s | ms / iteration | peak resident MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, (m, peak) in rows.items():
        print(
            f"| {mode} | {m['edges']:,} | {m['n']:,} | {m['call']:.2f} | {m['iterations']:.2f} "
            f"| {1e3 * m['iterations'] / args.iterations:.1f} | {peak:,.0f} |"
        )
    (given, _), (renumbered, _) = rows["as given"], rows["renumbered"]
    setup = (renumbered["call"] - renumbered["iterations"]) - (given["call"] - given["iterations"])
    saved = (given["iterations"] - renumbered["iterations"]) / args.iterations
    pays = setup > 0 and saved > 0  # a break-even only where renumbering costs time and saves some
    for mode, (m, peak) in rows.items():
        recorder.add(
            "numbering",
            graph=args.graph,
            iterations=args.iterations,
            numbering=mode,
            directed_edges=m["edges"],
            n=m["n"],
            call_s=m["call"],
            iterations_s=m["iterations"],
            ms_per_iteration=1e3 * m["iterations"] / args.iterations,
            peak_mb=peak,
            renumber_s=setup if mode == "renumbered" else None,
            saved_ms_per_iteration=1e3 * saved if mode == "renumbered" else None,
            break_even_iterations=setup / saved if mode == "renumbered" and pays else None,
        )
    print(
        f"\nrenumbering adds {setup:.2f} s before the first iteration and saves {1e3 * saved:.1f} ms per iteration"
        + (f": it pays for itself after {setup / saved:.0f} iterations" if pays else "")
    )


if __name__ == "__main__":
    main()
