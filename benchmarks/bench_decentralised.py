"""One iteration of every method of pdmm.solve against PDMM's, side by side in one run.

Averaging, pdmm.averaging(G, a) with a (B = 1, n, d), float64, on a random 4-regular graph with E
directed edges (n = E / 4, pdmm.Graph.random_regular) renumbered by reverse Cuthill-McKee as
pdmm.solve renumbers large graphs (pdmm.edge_index.locality_order). Each method's bare `step` (the
classes of pdmm.methods and pdmm.decentralised, as solve builds them, default parameters) is timed
over K iterations; PDMM appears twice, in the edge form (one z per directed edge) and in the node
form that solve uses on such graphs (pdmm.methods.NodeForm). Each repetition times every method in
turn, so all see the same machine state; the table gives the median ms per iteration over
--repeats after one warm-up repetition and its ratio to PDMM's node-form step. Graph building and
the methods' set-up (W, its spectrum) are not timed.

    python benchmarks/bench_decentralised.py [--edges 1000000] [--dims 1 16] [--repeats 5] [--device cpu]
                                               [--quick] [--results-dir benchmarks/results] [--shared no]

--quick is a smoke run: QUICK_EDGES directed edges, d = 1, 1 repeat.

Rows go to benchmarks/results/bench_decentralised.csv (table "methods"; benchmarks/results.py).
"""

import argparse
import statistics

import numpy as np
import torch
from machine import cpu_model, timed
from results import Recorder, add_arguments

import pdmm
from pdmm.edge_index import locality_order
from pdmm.methods import METHODS, NodeForm

QUICK_EDGES = 40_000
ROWS = ["pdmm (nodes)", "pdmm (edges)", "admm", "gossip", "chebyshev", "dgd", "extra", "nids", "gradient-tracking"]


def algorithms(E, d, device):
    """({row: method} of every method on one averaging instance of about E directed edges, x0, the directed edges)."""
    G = pdmm.Graph.random_regular(E // 4, 4, seed=0)
    a = np.random.default_rng(0).normal(size=(1, G.n, d))
    problem = pdmm.averaging(G, a)
    problem, _ = problem.relabelled(locality_order(problem.compiled))
    graph, local, edges = problem.compile(device, torch.float64)
    x0 = torch.zeros((G.n, 1, d), dtype=torch.float64, device=device)
    out = {}
    for row in ROWS:
        method = row.split()[0]
        rho = 1.0 if METHODS[method].capabilities.rho else None
        algorithm = METHODS[method](graph, local, edges, rho)
        if row == "pdmm (nodes)":
            algorithm = NodeForm(algorithm)
        out[row] = algorithm
    return out, x0, problem.compiled.num_edges


def bench(E, d, device, repeats):
    """({row: median ms per iteration}, the graph's directed edges: 4 (E // 4) on the 4-regular graph)."""
    methods, x0, edges = algorithms(E, d, device)
    states = {row: algorithm.init(x0) for row, algorithm in methods.items()}
    k = max(5, int(2e7 // (E * d)))
    samples = {row: [] for row in methods}
    with torch.no_grad():
        for repeat in range(repeats + 1):
            for row, algorithm in methods.items():
                state = {"now": algorithm.step(states[row])}  # NIDS's first step is local: time the later ones

                def run(algorithm=algorithm, state=state):
                    state["now"] = algorithm.step(state["now"])

                seconds = timed(run, k, torch.device(device))
                if repeat:
                    samples[row].append(seconds * 1e3)
    return {row: statistics.median(values) for row, values in samples.items()}, edges


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--edges", type=int, default=10**6, help="directed edges E")
    parser.add_argument("--dims", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK_EDGES:,} edges, d = 1, 1 repeat")
    add_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.edges, args.dims, args.repeats = QUICK_EDGES, [1], 1
    recorder = Recorder("bench_decentralised", args.results_dir, args.shared)  # before any work: load at start
    print(
        f"{cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
        f"E = {args.edges:,} directed edges, 4-regular, float64, B = 1"
    )
    measured = {d: bench(args.edges, d, args.device, args.repeats) for d in args.dims}
    results = {d: times for d, (times, _) in measured.items()}
    print("| method | " + " | ".join(f"ms, d = {d} | / pdmm (nodes)" for d in args.dims) + " |")
    print("|---|" + "---:|---:|" * len(args.dims))
    for row in ROWS:
        cells = [f"{results[d][row]:.2f} | {results[d][row] / results[d]['pdmm (nodes)']:.2f}x" for d in args.dims]
        print(f"| {row} | " + " | ".join(cells) + " |")
    for d in args.dims:
        for row in ROWS:
            ms, pdmm_ms = results[d][row], results[d]["pdmm (nodes)"]
            recorder.add(
                "methods",
                device=args.device,
                directed_edges=measured[d][1],
                d=d,
                method=row,
                ms=ms,
                ratio_to_pdmm_nodes=ms / pdmm_ms,
            )


if __name__ == "__main__":
    main()
