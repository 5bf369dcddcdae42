"""Time and peak memory to build and compile large graphs from arrays (pdmm.Graph), without networkx.

Random geometric graphs in the unit square with E directed edges (2 per undirected edge): n = E / k
nodes and radius sqrt(k / (pi n)) for a mean degree of about k (--degree, 20; the square's border
makes E about 1 % short). Each row runs in a fresh subprocess, so its peak RSS
(getrusage ru_maxrss) is its own; "import RSS" is the peak after `import pdmm` alone (torch,
numpy, networkx). Rows:

  random_geometric  pdmm.Graph.random_geometric (points, cKDTree pairs, sort, connectivity check),
                    then pdmm.CompiledGraph.from_graph
  from_edges        the same graph's edges handed over as unsorted arrays, both directions of every
                    edge (2 E/2 = E pairs, as read from a file): Graph.from_edges (dedup and sort),
                    then from_graph (connectivity check and compile); making the arrays is not timed
  networkx          the same graph as a networkx.Graph (made untimed, only up to --networkx-edges):
                    CompiledGraph.from_networkx, and the per-edge loop it replaced ("old loop")
  random_regular, erdos_renyi, grid   (only with --inputs) the other generators at about E directed
                    edges: degree k, G(n, k / (n - 1)), a square grid of about E / 4 nodes

--iterations K then runs K plain PDMM steps on the compiled graph (distributed averaging, d = 1,
one instance, float64) and adds ms per iteration (median) and the peak RSS including the iterations.

    python benchmarks/bench_graph_build.py [--edges 1000000 10000000] [--degree 20] [--inputs ...]
                                           [--networkx-edges 1000000] [--iterations 10]
                                           [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_graph_build.csv (table "build"; benchmarks/results.py).
"""

import argparse
import json
import math
import resource
import subprocess
import sys
import time

import numpy as np
from machine import cpu_model
from results import Recorder, add_arguments

GENERATORS = ("random_geometric", "random_regular", "erdos_renyi", "grid")
KINDS = ("random_geometric", "from_edges", "networkx", *GENERATORS[1:])


def peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def child(kind, edges, degree, iterations):
    """Build and compile one graph in this process, then run `iterations` PDMM steps on it; print a JSON row."""
    import pdmm

    row = {"kind": kind, "import_gb": peak_gb()}
    n = max(edges // degree, 2)
    radius = math.sqrt(degree / (math.pi * n))
    if kind in GENERATORS:
        side = math.isqrt(edges // 4)  # the grid: about 4 directed edges per node
        make = {
            "random_geometric": lambda: pdmm.Graph.random_geometric(n, radius, seed=0),
            "random_regular": lambda: pdmm.Graph.random_regular(n, degree, seed=0),
            "erdos_renyi": lambda: pdmm.Graph.erdos_renyi(n, degree / (n - 1), seed=0),
            "grid": lambda: pdmm.Graph.grid(side, side),
        }[kind]
        start = time.perf_counter()
        graph = make()
        row["build_s"] = time.perf_counter() - start
    else:
        pairs = pdmm.Graph.random_geometric(n, radius, seed=0).edges  # untimed input
        if kind == "from_edges":
            order = np.random.default_rng(0).permutation(2 * len(pairs))
            src, dst = (
                np.concatenate([pairs[:, 0], pairs[:, 1]])[order],
                np.concatenate([pairs[:, 1], pairs[:, 0]])[order],
            )
            del pairs
            start = time.perf_counter()
            graph = pdmm.Graph.from_edges(src, dst, n=n)
            row["build_s"] = time.perf_counter() - start
        else:
            G = pdmm.Graph(n, pairs, range(n)).to_networkx()
            start = time.perf_counter()
            loop_compiled(G)
            row["old_s"] = time.perf_counter() - start
            graph, row["build_s"] = G, 0.0
    start = time.perf_counter()
    compiled = pdmm.CompiledGraph.from_networkx(graph) if kind == "networkx" else pdmm.CompiledGraph.from_graph(graph)
    row.update(compile_s=time.perf_counter() - start, n=compiled.n, edges=compiled.num_edges, peak_gb=peak_gb())
    if iterations:
        row.update(iteration_ms=iterate(compiled, iterations), iterated_peak_gb=peak_gb())
    print(json.dumps(row))


def iterate(compiled, iterations):
    """Median ms of one plain PDMM step (averaging, d = 1, B = 1, float64) over `iterations` steps."""
    import torch

    import pdmm
    from pdmm.constraints import Consensus
    from pdmm.local import Quadratic
    from pdmm.methods import PDMM

    pdmm.keep_freed_memory()
    a = torch.randn(compiled.n, 1, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    method = PDMM(compiled, Quadratic(torch.ones(compiled.n, 1, dtype=torch.float64), a, y=a), Consensus(compiled), 1.0)
    state = method.init(torch.zeros_like(a))
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        state = method.step(state)
        times.append(time.perf_counter() - start)
    if not torch.isfinite(state["x"]).all():
        raise RuntimeError("the iterates are not finite")
    return 1e3 * float(np.median(times))


def loop_compiled(G):
    """The per-edge compilation CompiledGraph.from_networkx used before pdmm.Graph."""
    import pdmm

    nodes = list(G.nodes)
    index = {v: k for k, v in enumerate(nodes)}
    pairs = np.array([(index[u], index[v]) for u, v in G.edges if u != v], dtype=np.int64).reshape(-1, 2)
    src, dst = np.concatenate([pairs[:, 0], pairs[:, 1]]), np.concatenate([pairs[:, 1], pairs[:, 0]])
    order = np.lexsort((dst, src))
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    m = len(pairs)
    partner = np.concatenate([np.arange(m, 2 * m), np.arange(m)])
    return pdmm.CompiledGraph.build(nodes, src[order], dst[order], position[partner[order]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, nargs="+", default=[10**6, 10**7], help="directed edges per graph")
    parser.add_argument("--degree", type=int, default=20, help="mean degree k")
    parser.add_argument("--inputs", nargs="+", default=list(KINDS[:3]), choices=KINDS, help="which rows to run")
    parser.add_argument("--networkx-edges", type=int, default=10**6, help="largest graph also run through networkx")
    parser.add_argument("--iterations", type=int, default=0, help="PDMM steps to run on each compiled graph")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "EDGES"), help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), args.degree, args.iterations)
    recorder = Recorder("bench_graph_build", args.results_dir, args.shared)  # before any work: load at start
    print(f"{cpu_model()}; load average at start {recorder.provenance['load_at_start']}; one subprocess per row\n")
    iterated = " ms/iteration (d = 1) | peak RSS with iterations GB |" if args.iterations else ""
    print(
        "| input | directed edges | n | build s | compile s | total s | old loop s | peak RSS GB | import RSS GB |"
        + iterated
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.iterations else ""))
    for edges in args.edges:
        for kind in [k for k in args.inputs if k != "networkx" or edges <= args.networkx_edges]:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    kind,
                    str(edges),
                    "--degree",
                    str(args.degree),
                    "--iterations",
                    str(args.iterations),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            old = f"{r['old_s']:.2f}" if "old_s" in r else "—"
            build = f"{r['build_s']:.2f}" if kind != "networkx" else "—"  # the CSV leaves it empty too
            steps = f" {r['iteration_ms']:.0f} | {r['iterated_peak_gb']:.2f} |" if "iteration_ms" in r else ""
            print(
                f"| {kind} | {r['edges']:,} | {r['n']:,} | {build} | {r['compile_s']:.2f} | "
                f"{r['build_s'] + r['compile_s']:.2f} | {old} | {r['peak_gb']:.2f} | {r['import_gb']:.2f} |" + steps,
                flush=True,
            )
            recorder.add(
                "build",
                input=kind,
                degree=args.degree,
                directed_edges=r["edges"],
                n=r["n"],
                build_s=r["build_s"] if kind != "networkx" else None,
                compile_s=r["compile_s"],
                total_s=r["build_s"] + r["compile_s"],
                old_loop_s=r.get("old_s"),
                peak_gb=r["peak_gb"],
                import_gb=r["import_gb"],
                iteration_ms=r.get("iteration_ms"),
                iterated_peak_gb=r.get("iterated_peak_gb"),
            )


if __name__ == "__main__":
    main()
