"""Time to the first iteration: from edge arrays to one pdmm.solve iteration, phase by phase.

A periodic grid (a torus: every node of degree 4, numbered row-major) of about E directed edges
(side = round(sqrt(E / 4)), n = side^2, E = 4n) is given as its edge arrays (right and down
neighbours, unsorted: not timed), then timed phase by phase, each the minimum over --repeats
(the machine may be shared: the load average at the start is recorded):

    from_edges  pdmm.Graph.from_edges(src, dst, n): check, drop loops, deduplicate, sort
    averaging   pdmm.averaging(graph, a): compile the graph (pdmm.CompiledGraph.from_graph) and the problem
    plan        pdmm.plan(problem, max_iter=1, tol=0): check the settings, renumber (reorder=None), build the method
    first       plan.run(): the first iteration and its Result
    total       the four together (the least total of a pass)
    first pass  the total of the first pass alone, which also pays for first imports and first-touch memory

--profile FILE dumps a cProfile of one pass (pstats format) to FILE.

    python benchmarks/bench_first_iteration.py [--edges 10000000] [--repeats 3] [--device cpu] [--quick]
                                               [--profile FILE] [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_first_iteration.csv (table "phases"; benchmarks/results.py).
"""

import argparse
import cProfile
import math
import os
import time

import numpy as np
from machine import cpu_model
from results import Recorder, add_arguments

import pdmm

PHASES = ("from_edges", "averaging", "plan", "first")
QUICK_EDGES = 40_000


def torus_arrays(edges):
    """(n, src, dst): the torus of side round(sqrt(edges / 4)) as right and down neighbour arrays, row-major."""
    side = max(3, round(math.sqrt(edges / 4)))
    index = np.arange(side * side, dtype=np.int64).reshape(side, side)
    right, down = np.roll(index, -1, axis=1), np.roll(index, -1, axis=0)
    return side * side, np.concatenate([index.ravel(), index.ravel()]), np.concatenate([right.ravel(), down.ravel()])


def one_pass(n, src, dst, device):
    """{phase: seconds} of one pass from the arrays to the first iteration, and the directed edge count."""
    seconds = {}
    start = time.perf_counter()
    graph = pdmm.Graph.from_edges(src, dst, n)
    seconds["from_edges"], start = time.perf_counter() - start, time.perf_counter()
    problem = pdmm.averaging(graph, np.arange(n, dtype=np.float64) % 7)
    seconds["averaging"], start = time.perf_counter() - start, time.perf_counter()
    run = pdmm.plan(problem, max_iter=1, tol=0, device=device)
    seconds["plan"], start = time.perf_counter() - start, time.perf_counter()
    run.run()
    seconds["first"] = time.perf_counter() - start
    return seconds, problem.compiled.num_edges


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--edges", type=int, default=10**7, help="directed edges E (about)")
    parser.add_argument("--repeats", type=int, default=3, help="passes; each phase's minimum is reported")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK_EDGES:,} edges, 1 repeat")
    parser.add_argument("--profile", help="write a cProfile (pstats) of one extra pass to this file")
    add_arguments(parser)
    args = parser.parse_args()
    edges, repeats = (QUICK_EDGES, 1) if args.quick else (args.edges, args.repeats)
    recorder = Recorder("bench_first_iteration", args.results_dir, args.shared)  # before any work: load at start
    n, src, dst = torus_arrays(edges)
    print(
        f"CPU: {cpu_model()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, device {args.device}, "
        f"torus n={n:,}, load average {recorder.provenance['load_at_start']} at start"
    )
    passes = [one_pass(n, src, dst, args.device) for _ in range(repeats)]
    best = {phase: min(p[0][phase] for p in passes) for phase in PHASES}
    total = min(sum(p[0].values()) for p in passes)
    print(f"| phase | s (min of {repeats}) |\n|---|---:|")
    for phase in PHASES:
        print(f"| {phase} | {best[phase]:.2f} |")
    print(f"| total | {total:.2f} |\n\nfirst pass: {sum(passes[0][0].values()):.2f} s")
    recorder.add(
        "phases",
        device=args.device,
        directed_edges=passes[0][1],
        n=n,
        repeats=repeats,
        **{f"{phase}_s": best[phase] for phase in PHASES},
        total_s=total,
        first_pass_s=sum(passes[0][0].values()),
    )
    if args.profile:
        cProfile.runctx("one_pass(n, src, dst, args.device)", globals(), locals(), args.profile)


if __name__ == "__main__":
    main()
