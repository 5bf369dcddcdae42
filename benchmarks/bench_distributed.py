"""Partitioned PDMM (pdmm.solve(..., backend="distributed")) on 1, 2 and 4 processes of one machine.

Distributed averaging, consensus, plain PDMM (rho = 1), float64, CPU, gloo, B instances of width d,
on a random geometric graph (pdmm.Graph.random_geometric, mean degree --degree) with E directed
edges. For each P the script reports:

  cut fraction      directed edges whose two ends are on different ranks, over E: METIS (pymetis, what
                    the engine uses) against a uniformly random assignment of nodes to P ranks
  sent per iter     numbers every rank sends in all, cut edges x B x d, and the bytes (8 per float64)
  ms / iteration    (time of K2 iterations - time of K1 iterations) / (K2 - K1) on rank 0, each the
                    least of TRIES runs, so set-up (partition, fingerprint, compile) cancels;
                    torchrun-style processes started with torch.multiprocessing, one thread each
  exchange ms       the same difference for the all_to_all_single alone, on the rank's own cut edges

Then a scaling model, time per iteration = E / P x (ns per edge) + exchange, fitted to these rows. Every run is
the edge form (form="edges"; the engine's default picks the node form from 2^16 directed edges).

With --shards, the memory each rank needs when it holds only its part (docs/guide/distributed.md, "Each rank holds
its part"): for each P the averaging problem (B = 1, d = 1) on the same graph is cut into P shards
(pdmm.shards.write, METIS) in a temporary directory, then P processes each record their peak resident memory
(VmHWM, Linux: peak_mib) after their imports and the process group (the baseline), load their part
(pdmm.shards.load), run pdmm.solve(part, backend="distributed", gather=False, max_iter=K2, tol=0, history=(),
form="edges"), and report the peak above the baseline; rank 0 records the largest over the ranks, its ratio to
P = 1's, and its ms / iteration (Result.seconds over the iterations: set-up excluded).

    OMP_NUM_THREADS=1 python benchmarks/bench_distributed.py [--edges 1000000] [--dims 1 16] [--procs 1 2 4]
        [--results-dir benchmarks/results] [--shared no]
    OMP_NUM_THREADS=1 python benchmarks/bench_distributed.py --shards --edges 10000000 --procs 1 2 4

Rows go to benchmarks/results/bench_distributed.csv (tables "processes" and, with --shards, "memory";
benchmarks/results.py).
"""

import argparse
import math
import os
import socket
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from machine import cpu_model
from results import Recorder, add_arguments

K1, K2, TRIES = 10, 60, 3


def graph_for(edges, degree):
    import pdmm

    n = max(edges // degree, 2)
    return pdmm.Graph.random_geometric(n, float(np.sqrt(degree / (np.pi * n))), seed=0)


def cut_fraction(compiled, owner):
    src, dst = compiled.src.numpy(), compiled.dst.numpy()
    return float(np.mean(owner[src] != owner[dst]))


def worker(rank, world, port, edges, degree, d, batch, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import pdmm
    import pdmm.distributed

    pdmm.distributed.init_process_group(rank=rank, world_size=world, timeout=600)
    graph = graph_for(edges, degree)
    a = np.random.default_rng(0).normal(size=(batch, graph.n, d))
    problem = pdmm.averaging(graph, a)
    elapsed = {K1: math.inf, K2: math.inf}
    for _ in range(TRIES):
        for iterations in (K1, K2):
            dist.barrier()
            start = time.perf_counter()
            pdmm.solve(problem, max_iter=iterations, tol=0, history=(), backend="distributed", form="edges")
            elapsed[iterations] = min(elapsed[iterations], time.perf_counter() - start)
    compiled = pdmm.CompiledGraph.from_graph(graph)
    owner = pdmm.distributed.partition(compiled, world)
    collectives = pdmm.distributed.GroupCollectives(None, world)
    part, _ = pdmm.distributed.local_part(compiled, owner, rank, world, collectives)
    v = torch.randn(part.num_edges, batch, d, dtype=torch.float64)
    swap = {K1: math.inf, K2: math.inf}
    for _ in range(TRIES):
        for iterations in (K1, K2):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iterations):
                part.exchange(v)
            swap[iterations] = min(swap[iterations], time.perf_counter() - start)
    if rank == 0:
        queue.put(
            {
                "iteration_ms": 1e3 * (elapsed[K2] - elapsed[K1]) / (K2 - K1),
                "exchange_ms": 1e3 * (swap[K2] - swap[K1]) / (K2 - K1),
            }
        )
    dist.destroy_process_group()


def peak_mib():
    """This process's peak resident memory so far, MiB: VmHWM of /proc/self/status, the high-water mark of the
    process's own memory since it started (exec). Not getrusage's ru_maxrss, which Linux carries across exec: a
    process spawned by this script would start with the parent's peak, the whole problem written into shards."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024  # kB


def memory_worker(rank, world, port, directory, queue):
    """One rank of the --shards mode: its peak resident memory above the baseline after its imports and the group,
    through loading its part and solving K2 iterations on it, and the ms per iteration (Result.seconds, the
    iterations alone); rank 0 puts the largest peak over the ranks and its own ms on the queue."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import pdmm
    import pdmm.distributed
    import pdmm.shards

    pdmm.distributed.init_process_group(rank=rank, world_size=world, timeout=1800)
    baseline = peak_mib()
    part = pdmm.shards.load(directory, rank, world)
    dist.barrier()
    result = pdmm.solve(part, backend="distributed", gather=False, max_iter=K2, tol=0, history=(), form="edges")
    above = torch.tensor([peak_mib() - baseline], dtype=torch.float64)
    dist.all_reduce(above, op=dist.ReduceOp.MAX)
    if rank == 0:
        queue.put(
            {
                "peak_mib": float(above),
                "baseline_mib": baseline,
                "iteration_ms": 1e3 * result.seconds / result.iterations,
            }
        )
    dist.destroy_process_group()


def write_shards(edges, degree, procs, root):
    """The shards of the averaging problem (B = 1, d = 1) on graph_for(edges, degree), one directory per P in
    `procs` under `root` (pdmm.shards.write, METIS); ({P: directory}, directed edges, nodes, {P: directed cut})."""
    import pdmm
    import pdmm.shards
    from pdmm.synthetic import make_problem

    graph = graph_for(edges, degree)
    data = {"a": np.random.default_rng(0).normal(size=(graph.n, 1))}
    problem = make_problem("averaging", graph, data)
    directories, cuts = {}, {}
    for world in procs:
        owner, method = pdmm.shards.owners(problem.compiled, world, "metis")
        directories[world] = os.path.join(root, f"P{world}")
        manifest = pdmm.shards.write(problem, owner, directories[world], "averaging", data, method=method)
        cuts[world] = manifest["cut"]
    return directories, problem.compiled.num_edges, problem.n, cuts


def measure_memory(args, recorder):
    """The --shards mode: for each --edges, the shards written (write_shards, the whole problem freed before any
    rank starts), then P processes per P in --procs (memory_worker); one table row each."""
    print(
        "| directed edges | n | P | cut edges | peak MiB above baseline (max over ranks) | ratio to P = 1 | "
        "ms / iteration |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for edges in args.edges:
        with tempfile.TemporaryDirectory(prefix="bench_distributed_shards_") as root:
            directories, directed, n, cuts = write_shards(edges, args.degree, args.procs, root)
            single = None
            for world in sorted(args.procs):  # P = 1 first: the ratios' base
                queue = mp.get_context("spawn").SimpleQueue()
                mp.spawn(memory_worker, args=(world, free_port(), directories[world], queue), nprocs=world, join=True)
                r = queue.get()
                single = r["peak_mib"] if world == 1 else single
                ratio = r["peak_mib"] / single if single else math.nan
                print(
                    f"| {directed:,} | {n:,} | {world} | {cuts[world]:,} | {r['peak_mib']:,.0f} | {ratio:.3f} | "
                    f"{r['iteration_ms']:.1f} |",
                    flush=True,
                )
                recorder.add(
                    "memory",
                    directed_edges=directed,
                    n=n,
                    d=1,
                    batch=1,
                    processes=world,
                    cut_edges=cuts[world],
                    peak_mib=r["peak_mib"],
                    baseline_mib=r["baseline_mib"],
                    ratio_to_one=ratio,
                    iteration_ms=r["iteration_ms"],
                )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(world, edges, degree, d, batch):
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(world, free_port(), edges, degree, d, batch, queue), nprocs=world, join=True)
    return queue.get()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--edges", type=int, nargs="+", default=[10**6], help="directed edges (about)")
    parser.add_argument("--degree", type=int, default=20, help="mean degree of the random geometric graph")
    parser.add_argument("--dims", type=int, nargs="+", default=[1, 16], help="widths d")
    parser.add_argument("--batch", type=int, default=1, help="instances B")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4], help="numbers of processes P")
    parser.add_argument(
        "--shards",
        action="store_true",
        help="measure each rank's peak memory holding only its part (B = 1, d = 1; --dims and --batch unused)",
    )
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder("bench_distributed", args.results_dir, args.shared)  # before any work: load at start
    recorder.provenance["threads"] = 1  # what each timed process runs on (worker's set_num_threads), not this one
    import pdmm
    import pdmm.distributed

    load = recorder.provenance["load_at_start"]
    print(
        f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, gloo, one thread per process, "
        f"B = {1 if args.shards else args.batch}, float64, load average {load} at start\n"
    )
    if args.shards:
        if 1 not in args.procs:
            parser.error("--shards compares each P with P = 1: include 1 in --procs")
        measure_memory(args, recorder)
        return
    print(
        "| directed edges | n | d | P | METIS cut | random cut | sent per iteration | ms / iteration | "
        "exchange ms | ns per edge x P |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    fits = []
    for edges in args.edges:
        graph = graph_for(edges, args.degree)
        compiled = pdmm.CompiledGraph.from_graph(graph)
        for d in args.dims:
            for world in args.procs:
                owner = pdmm.distributed.partition(compiled, world)
                metis = cut_fraction(compiled, owner)
                random = cut_fraction(compiled, np.random.default_rng(0).integers(world, size=compiled.n))
                numbers = metis * compiled.num_edges * args.batch * d
                r = timed(world, edges, args.degree, d, args.batch)
                per_edge = 1e6 * r["iteration_ms"] * world / compiled.num_edges
                fits.append((compiled.num_edges, d, world, r["iteration_ms"], r["exchange_ms"], numbers))
                print(
                    f"| {compiled.num_edges:,} | {compiled.n:,} | {d} | {world} | {metis:.4f} | {random:.4f} | "
                    f"{numbers:,.0f} ({8 * numbers / 1e6:.2f} MB) | {r['iteration_ms']:.2f} | "
                    f"{r['exchange_ms']:.2f} | {per_edge:.1f} |",
                    flush=True,
                )
                recorder.add(
                    "processes",
                    directed_edges=compiled.num_edges,
                    n=compiled.n,
                    d=d,
                    batch=args.batch,
                    processes=world,
                    metis_cut=metis,
                    random_cut=random,
                    numbers_sent=numbers,
                    mb_sent=8 * numbers / 1e6,
                    iteration_ms=r["iteration_ms"],
                    exchange_ms=r["exchange_ms"],
                    ns_per_edge_times_p=per_edge,
                )
    print(
        "\nScaling model: ms/iteration = c_d E / P + alpha + beta (numbers a rank sends); c_d from P = 1 (ns per "
        "directed edge), alpha and beta fitted to the exchange column of the P > 1 rows (least squares):"
    )
    for d in args.dims:
        single = [f for f in fits if f[1] == d and f[2] == 1]
        if single:
            print(f"  c_{d} = {1e6 * single[0][3] / single[0][0]:.1f} ns per edge")
    shared = [(numbers / world, exchange) for _, _, world, _, exchange, numbers in fits if world > 1]
    if len({n for n, _ in shared}) > 1:
        beta, alpha = np.polyfit([n for n, _ in shared], [e for _, e in shared], 1)
        print(f"  alpha = {alpha:.2f} ms per exchange, beta = {1e6 * beta:.2f} ns per number sent")


if __name__ == "__main__":
    main()
