"""Reading graph files: time and peak memory of pdmm.load_graph's readers on generated files, side by side.

The file: --nodes nodes labelled by the ints 0..n-1, --edges lines "i j" (a path through every node, then random
pairs without self loops) after one comment line; about 23 MB at the defaults. Each row runs in a fresh process,
which imports pdmm first; *peak MB* is that process's peak resident memory while reading (VmHWM, reset through
/proc/self/clear_refs after the imports) less what was resident before, and *x arrays* that over the bytes of
what the reader returns (src and dst, int64, and the labels as a list of Python ints). Rows:

  integer   pdmm.graph_files.read_edge_list, which takes integer_edge_list (numpy.loadtxt, a numbering table)
  general   pdmm.graph_files.general_edge_list, what read_edge_list ran on every file before (chunks split by
            bytes.split, numbered by sorting)
  graph     pdmm.load_graph(path, arrays=True): the integer reader, then pdmm.Graph (dedup, sort)
  graphml, networkx / graphml, expat   a GraphML file of the first --graphml-edges lines' graph (networkx's
            write_graphml): pdmm.Graph.from_networkx(networkx.Graph(networkx.read_graphml(path))), what
            load_graph(path, arrays=True) ran before, against load_graph(path, arrays=True) (graphml_edges: one
            expat pass)

    python benchmarks/bench_graph_files.py [--nodes 1000000] [--edges 1700000] [--graphml-edges 200000] [--repeats 3]
                                           [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_graph_files.csv (table "edge list"; benchmarks/results.py).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import networkx
import numpy as np
from results import Recorder, add_arguments

CHILD = """
import json, sys, time
import numpy as np
import pdmm
from pdmm.graph_files import general_edge_list, read_edge_list

def status(key):
    with open("/proc/self/status") as file:
        return next(int(line.split()[1]) for line in file if line.startswith(key + ":"))

with open("/proc/self/clear_refs", "w") as file:
    file.write("5")  # the peak (VmHWM) starts again from what is resident now
before = status("VmRSS")
start = time.perf_counter()
kind, path = sys.argv[1], sys.argv[2]
if kind in ("graph", "graphml, expat"):
    graph = pdmm.load_graph(path, arrays=True)
    made = graph.edges.nbytes
elif kind == "graphml, networkx":
    import networkx
    graph = pdmm.Graph.from_networkx(networkx.Graph(networkx.read_graphml(path)))
    made = graph.edges.nbytes
else:
    labels, src, dst = (read_edge_list if kind == "integer" else general_edge_list)(path)
    made = 8 * (len(src) + len(dst)) + 36 * len(labels)  # two int64 arrays; a list of small Python ints
seconds = time.perf_counter() - start
peak = status("VmHWM") - before
print(json.dumps({"seconds": seconds, "peak_mb": peak / 1024, "arrays_mb": made / 2**20}))
"""


def write_edge_list(path, n, m, seed=0):
    """A connected edge list of n nodes and m lines (a path, then random pairs without self loops)."""
    rng = np.random.default_rng(seed)
    pairs = np.column_stack([np.arange(n - 1), np.arange(1, n)])
    src = rng.integers(n, size=m - len(pairs))
    pairs = np.vstack([pairs, np.column_stack([src, (src + 1 + rng.integers(n - 1, size=len(src))) % n])])
    with open(path, "w") as file:
        file.write("# a generated edge list\n")
        np.savetxt(file, pairs, fmt="%d")


def measure(kind, path):
    """One fresh process reading `path` with `kind`: its seconds, peak MB over its imports and arrays MB."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(path)], capture_output=True, text=True, check=True, timeout=900
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=1_700_000)
    parser.add_argument("--graphml-edges", type=int, default=200_000, help="lines of the edge list in the GraphML file")
    parser.add_argument("--repeats", type=int, default=3)
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder("bench_graph_files", args.results_dir, args.shared)  # before any work: load at start
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "edges.txt"
        write_edge_list(path, args.nodes, args.edges)
        graphml = Path(folder) / "edges.graphml"
        with open(path) as file:
            next(file)  # the comment line
            pairs = [next(file).split() for _ in range(args.graphml_edges)]
        smaller = networkx.Graph(pairs)
        networkx.write_graphml(smaller, graphml)
        for kind in ("integer", "general", "graph", "graphml, networkx", "graphml, expat"):
            source = graphml if kind.startswith("graphml") else path
            runs = [measure(kind, source) for _ in range(args.repeats)]
            seconds = statistics.median(run["seconds"] for run in runs)
            peak = statistics.median(run["peak_mb"] for run in runs)
            arrays = runs[0]["arrays_mb"]
            row = {
                "reader": kind,
                "file_mb": f"{source.stat().st_size / 1e6:.1f}",
                "nodes": smaller.number_of_nodes() if kind.startswith("graphml") else args.nodes,
                "lines": args.graphml_edges if kind.startswith("graphml") else args.edges,
                "seconds": f"{seconds:.2f}",
                "peak_mb": f"{peak:.0f}",
                "arrays_mb": f"{arrays:.0f}",
                "peak_per_arrays": f"{peak / arrays:.2f}",
            }
            recorder.add("edge list", **row)
            print(row, flush=True)


if __name__ == "__main__":
    main()
