"""Cost of each simulated-network effect (pdmm.Network) per PDMM iteration, relative to a plain step.

Plain PDMM (theta = 1) on distributed averaging, consensus constraints, one instance, float64,
on a 4-regular graph with E directed edges: the circulant graph C_n(1, 2) with its nodes
relabelled by a random permutation (built from arrays in a second, where networkx's random
regular graph takes minutes at this size; its edge lookups are as scattered), then renumbered by
reverse Cuthill-McKee as pdmm.solve runs it (pdmm.edge_index.locality_order; --as-given keeps the
scattered numbering, where a plain step is slower and each effect's share smaller). For each effect,
one iteration is `channel.draw()` (the iteration's random events) plus `PDMM.step` over the
channel; *plain* is the bare step without a channel (what pdmm.solve runs without a network).
Per-edge and per-node rows draw their probabilities once (seed 0) for the graph.
Each repetition times every row in turn (K iterations each); the table reports medians over
--repeats after one warm-up, and the ratio to plain. The allocator keeps freed memory, as pdmm-bridge does.

    python benchmarks/bench_network.py [--edges 1000000] [--dims 1 16] [--repeats 5] [--device cpu] [--as-given]
                                       [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_network.csv (table "effects"; benchmarks/results.py).
"""

import argparse
import statistics

import numpy as np
import torch
from machine import cpu_model, timed
from results import Recorder, add_arguments

from pdmm import keep_freed_memory
from pdmm.array_graph import Graph
from pdmm.constraints import Consensus
from pdmm.edge_index import CompiledGraph, locality_order
from pdmm.local import Quadratic
from pdmm.methods import PDMM
from pdmm.network import Channel, Network

EFFECTS = {
    "plain (no channel)": None,
    "ideal channel": Network(),
    "drop = 0.1": Network(drop=0.1),
    "wake = 0.9": Network(wake=0.9),
    "edge_up = 0.9": Network(edge_up=0.9),
    "drop, wake, edge_up together": Network(drop=0.1, wake=0.9, edge_up=0.9),
    "drop per edge (uniform on [0, 0.2])": lambda g: Network(
        drop=np.random.default_rng(0).uniform(0, 0.2, g.num_edges)
    ),
    "burst = (0.01, 0.1), drop = 0.01": Network(drop=0.01, burst=(0.01, 0.1)),
    "wake per node (uniform on [0.8, 1])": lambda g: Network(wake=np.random.default_rng(0).uniform(0.8, 1, g.n)),
    "wake = one": Network(wake="one"),
    "bits = 8, given range": Network(bits=8, limit=10.0),
    "bits = 8, adaptive range": Network(bits=8),
    "bits = 8, subtractive dither": Network(bits=8, dither=True),
    "bits = 8, stochastic rounding": Network(bits=8, dither="stochastic"),
}


def scattered_regular(n, seed=0):
    """C_n(1, 2) with randomly permuted node labels, compiled: 4 n directed edges."""
    label = np.random.default_rng(seed).permutation(n)
    ring = np.arange(n)
    src = np.concatenate([label[ring], label[ring]])
    dst = np.concatenate([label[(ring + 1) % n], label[(ring + 2) % n]])
    return CompiledGraph.from_graph(Graph.from_edges(src, dst, n=n))


def runner(graph, d, network, device):
    """A zero-argument function doing one iteration (draw + step) over `network` (None: the bare step)."""
    a = torch.randn(graph.n, 1, d, dtype=torch.float64, device=device)
    local = Quadratic(torch.ones(graph.n, 1, dtype=torch.float64, device=device), a, y=a)
    network = network(graph) if callable(network) else network
    channel = None if network is None else Channel(network, graph, 1, d, torch.float64)
    algorithm = PDMM(graph, local, Consensus(graph), 1.0, channel=channel)
    state = {"s": algorithm.init(torch.zeros(graph.n, 1, d, dtype=torch.float64, device=device))}

    def iteration():
        if channel is not None:
            channel.draw()
        state["s"] = algorithm.step(state["s"])

    return iteration


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--edges", type=int, default=10**6, help="directed edges E (a multiple of 4)")
    parser.add_argument("--dims", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--as-given", action="store_true", help="keep the scattered numbering (no renumbering)")
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder("bench_network", args.results_dir, args.shared)  # before any work: load at start
    device = torch.device(args.device)
    keep_freed_memory()
    graph = scattered_regular(args.edges // 4)
    order = None if args.as_given else locality_order(graph)
    if order is not None:
        graph = graph.relabelled(order)[0]
    graph = graph.to(device, torch.float64)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {cpu_model()}, device {device}, "
        f"{graph.num_edges:,} directed edges, n = {graph.n:,}, "
        f"{'numbered at random' if args.as_given else 'renumbered (reverse Cuthill-McKee)'}, "
        f"float64, B = 1, median of {args.repeats}, "
        f"load average {recorder.provenance['load_at_start']} at start\n"
    )
    print("| effect | d | ms/iteration | ratio to plain |")
    print("|---|---:|---:|---:|")
    for d in args.dims:
        k = max(3, 10**7 // (graph.num_edges * d))
        runs = {name: runner(graph, d, network, device) for name, network in EFFECTS.items()}
        samples = {name: [] for name in runs}
        for _ in range(args.repeats + 1):
            for name, run in runs.items():
                samples[name].append(timed(run, k, device))
        ms = {name: 1e3 * statistics.median(values[1:]) for name, values in samples.items()}
        plain = ms["plain (no channel)"]
        for name, value in ms.items():
            print(f"| {name} | {d} | {value:.2f} | {value / plain:.2f} |", flush=True)
            recorder.add(
                "effects",
                device=str(device),
                directed_edges=graph.num_edges,
                numbering="as given" if args.as_given else "renumbered",
                effect=name,
                d=d,
                ms=value,
                ratio_to_plain=value / plain,
            )


if __name__ == "__main__":
    main()
