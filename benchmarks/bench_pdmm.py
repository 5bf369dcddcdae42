"""What one pdmm.solve iteration costs against its bare step, a naive torch loop and the memory it must move.

Plain PDMM (theta = 1) on pdmm.averaging(G, a), consensus constraints, float64, one instance
(B = 1), for E directed edges on two graph families, sampled as arrays and then numbered at random
(as networkx numbers a random geometric graph: neighbours far apart): random 4-regular graphs
(n = E / 4, pdmm.Graph.random_regular) and random geometric graphs (radius chosen for an average
degree of 2 ln n, pdmm.Graph.random_geometric; E is then near the size asked for). pdmm.solve
renumbers such graphs by reverse Cuthill-McKee before it runs them (its default reorder=None, from
2^16 directed edges on; pdmm.edge_index.locality_order); *renumber s* is that one-off cost. Per graph and dimension d,
milliseconds per iteration of:

    naive   the four-line loop below (docs/theory/pdmm.md section 8, worked case) on the graph as numbered: the baseline
            every row is divided by
    given   a bare `PDMM.step` (pdmm.methods: aggregate, fuse, exchange) on the graph as numbered
    edges   the same step on the renumbered graph
    step    the step as solve runs it (form=None): from 2^16 directed edges on, renumbered and with
            the edge state summed out (pdmm.methods.NodeForm: one sparse adjacency product), else
            the edge step
    solve   `pdmm.solve(problem, max_iter=K, tol=0)` with its defaults (renumbered, here once for all calls
            and passed with reorder=False, which runs the same iterations; stopping test
            every 50 iterations in the node form, 10 in the edge form; residual, messages, bits
            recorded at those tests), from Result.seconds; K = 200-2,000 iterations (the step
            column is timed over the same K), so that the residual at iteration 1 and the test at
            max_iter weigh as little as in a long run
    every   the same with record_every=1: the default history at every iteration
    lean    the same with history=(): the stopping test and the divergence test only
    copy    `copy_` of E d + 2 n d float64 values (edge state, node state, node data)

and ns per directed edge (= ms per 10^6 edges) of the given, edge-form and solve's step, the bytes
an edge-form iteration must move per directed edge at least (16 d + 8: z read and written once,
one int64 reverse-edge index; node terms left out) and the bandwidth that would mean at the step's
speed (the node form moves less: one int64 column index per edge and node-sized vectors).

    for _ in range(K):                                           # z: (E, B, d), unsigned z_{i|j}
        u = torch.zeros_like(x).index_add_(0, src, s * z)        # sum_j s_ij z_{i|j}
        x = (a - u) / (1 + rho * degree)                         # x_i^{k+1}
        z = (z + 2 * rho * s * x[src])[rev]                      # z_{j|i}^{k+1} = y_{i|j}

Each repetition times every variant in turn (solve's step and solve over K iterations, the others
over about 2 10^7 edge-values), so all see the same machine state; the table reports the median
over --repeats after one warm-up repetition. Graph building is not timed. First, at the largest
size and dimension, the step runs with glibc's default allocator and then after
pdmm.keep_freed_memory() (which pdmm.solve applies on such runs), beside a step that writes into
preallocated buffers (`out=`), to show whether buffers would make the setting moot.
--compile adds rows at the largest size with the step under torch.compile and solve(compile=True)
(the warm-up repetition compiles; the solve rows then reuse the compiled step).

    python benchmarks/bench_pdmm.py [--device cuda] [--sizes 10000 100000 1000000] [--dims 1 16]
                                    [--graphs random_regular random_geometric] [--repeats 5] [--quick]
                                    [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_pdmm.csv (tables "allocator" and "iteration"; benchmarks/results.py).
"""

import argparse
import math
import statistics
import time

import numpy as np
import torch
from machine import cpu_model, timed
from results import Recorder, add_arguments

import pdmm
from pdmm.methods import NodeForm
from pdmm.solve import LARGE_GRAPH_EDGES, _node_order

GRAPHS = ("random_regular", "random_geometric")


def build(kind, E, seed=0):
    """A connected pdmm.Graph of `kind` with about E directed edges, its nodes numbered at random."""
    if kind == "random_regular":
        if E % 4:
            raise ValueError(f"a 4-regular graph has E = 4 n directed edges; {E} is not a multiple of 4")
        G = pdmm.Graph.random_regular(E // 4, degree=4, seed=seed)
    else:
        n = 16
        while n * 2 * math.log(n) < E:  # average degree 2 ln n (connected with high probability)
            n = int(n * 1.05) + 1
        G = pdmm.Graph.random_geometric(n, radius=math.sqrt(2 * math.log(n) / (math.pi * n)), seed=seed)
    label = np.random.default_rng(seed).permutation(G.n)
    return pdmm.Graph.from_edges(label[G.edges[:, 0]], label[G.edges[:, 1]], n=G.n)


class Naive:
    """The four-line PDMM loop of the module docstring, on index tensors and nothing else."""

    def __init__(self, graph, a, rho=1.0):
        self.src, self.rev, self.rho = graph.src, graph.rev, rho
        self.s = graph.sign.view(-1, 1, 1)
        self.a, self.denominator = a, (1 + rho * graph.degree.to(a.dtype)).view(-1, 1, 1)
        self.x, self.z = torch.zeros_like(a), a.new_zeros(len(graph.src), *a.shape[1:])

    def step(self):
        u = torch.zeros_like(self.x).index_add_(0, self.src, self.s * self.z)
        self.x = (self.a - u) / self.denominator
        self.z = (self.z + 2 * self.rho * self.s * self.x[self.src])[self.rev]


class Buffered:
    """PDMM.step on a regular graph for averaging, written into buffers allocated once (no autograd)."""

    def __init__(self, graph, local, rho=1.0):
        n, degree = graph.n, int(graph.degree[0])
        B, d = local.shape[1:]
        self.rev, self.rho, self.shape = graph.rev, rho, (n, degree, B, d)
        self.q, self.denominator = local.q, (local.P + rho * degree).unsqueeze(-1)
        self.w, self.y = (torch.zeros(n * degree, B, d, dtype=local.q.dtype, device=local.q.device) for _ in "wy")
        self.u, self.x = torch.empty_like(self.q), torch.empty_like(self.q)

    def step(self):
        torch.sum(self.w.view(self.shape), 1, out=self.u)  # aggregate
        torch.div(torch.sub(self.q, self.u, out=self.x), self.denominator, out=self.x)  # fuse
        torch.sub((-2 * self.rho * self.x).unsqueeze(1), self.w.view(self.shape), out=self.y.view(self.shape))
        flat = self.y.view(-1) if self.y[0].numel() == 1 else self.y  # exchange
        torch.index_select(flat, 0, self.rev, out=self.w.view(flat.shape))


def setup(G, d, device):
    problem = pdmm.averaging(G, np.random.default_rng(0).standard_normal((G.n, d)))
    graph, local, edges = problem.compile(device, torch.float64)
    return problem, graph, local, edges


def renumbered(problem):
    """The problem as pdmm.solve runs it by default (from LARGE_GRAPH_EDGES directed edges on, renumbered by reverse
    Cuthill-McKee where that brings neighbours closer), its node order (run node k = node order[k]) and the
    seconds renumbering took."""
    start = time.perf_counter()
    order = _node_order(problem, None)  # solve's own rule
    ran = problem if order is None else problem.relabelled(order)[0]
    order = np.arange(problem.n) if order is None else order
    return ran, torch.from_numpy(order), time.perf_counter() - start


def iterations(E, d):
    """Iterations per sample of the naive loop, the edge steps and the copy: >= 20, about 2 10^7 edge-values."""
    return 10 * max(2, 2 * 10**6 // (E * d))


def solve_iterations(E, d):
    """Iterations per sample of solve's step and of solve: a multiple of 50 (its test interval in the node form),
    200 to 2,000, so that what a run does once (the residual at iteration 1, the test at max_iter) weighs as
    in a long run."""
    return 10 * max(20, min(200, 4 * 10**7 // (E * d) // 50 * 5))


def bench(G, d, device, repeats, compiled=False):
    """Medians (ms per iteration) of naive, given, edges, step, solve, every-iteration solve, lean solve and copy
    for one graph and dimension, and the seconds renumbering took."""
    problem, given_graph, local, edges = setup(G, d, device)
    given = pdmm.METHODS["pdmm"](given_graph, local, edges, 1.0)
    ran, order, renumber_s = renumbered(problem)
    graph, local, edges = ran.compile(device, torch.float64)
    edge_form = pdmm.METHODS["pdmm"](graph, local, edges, 1.0)
    algo = NodeForm(edge_form) if graph.num_edges >= LARGE_GRAPH_EDGES else edge_form  # as solve runs it (form=None)
    algo_step = torch.compile(algo.step) if compiled else algo.step
    zero = torch.zeros(graph.n, 1, d, dtype=torch.float64, device=device)
    state = {"s": algo.init(zero), "given": given.init(zero), "edges": edge_form.init(zero)}
    naive = Naive(given_graph, problem.compile(device, torch.float64)[1].q)
    n, E = graph.n, graph.num_edges
    source = torch.randn(E * d + 2 * n * d, dtype=torch.float64, device=device)
    target = torch.empty_like(source)
    k, k_solve = iterations(E, d), solve_iterations(E, d)

    for _ in range(3):  # the naive loop computes the same iterates as the step, renumbered or not, in either form
        state["s"], state["given"] = algo.step(state["s"]), given.step(state["given"])
        state["edges"] = edge_form.step(state["edges"])
        naive.step()
    for x in (state["s"]["x"], state["edges"]["x"], state["given"]["x"].index_select(0, order.to(device))):
        assert torch.allclose(x, naive.x.index_select(0, order.to(device)), rtol=1e-9, atol=1e-12), (
            "the naive loop is not PDMM"
        )

    def step():
        state["s"] = algo_step(state["s"])

    def step_as_given():
        state["given"] = given.step(state["given"])

    def edge_step():
        state["edges"] = edge_form.step(state["edges"])

    def solve(**options):  # on the problem renumbered once above: solve would renumber it again in every call
        result = pdmm.solve(ran, max_iter=k_solve, tol=0, device=device, compile=compiled, reorder=False, **options)
        assert result.iterations == k_solve, f"solve stopped after {result.iterations} of {k_solve} iterations"
        return result.seconds / k_solve

    samples = []
    for _ in range(repeats + 1):  # the first repetition is the warm-up
        samples.append(
            (
                timed(naive.step, k, device),
                timed(step_as_given, k, device),
                timed(edge_step, k, device),
                timed(step, k_solve, device),
                solve(),
                solve(record_every=1),
                solve(history=()),
                timed(lambda: target.copy_(source), k, device),
            )
        )
    return [1e3 * statistics.median(column) for column in zip(*samples[1:], strict=False)], renumber_s


def allocator_rows(G, d, device, repeats):
    """Step and buffered step with glibc's default allocator, then after pdmm.keep_freed_memory()."""
    problem, graph, local, edges = setup(G, d, device)
    if bool((graph.degree != graph.degree[0]).any()):
        raise ValueError("the allocator comparison needs a regular graph")
    algo = pdmm.METHODS["pdmm"](graph, local, edges, 1.0)
    buffered = Buffered(graph, local)
    state = {"s": algo.init(torch.zeros(graph.n, 1, d, dtype=torch.float64, device=device))}
    for _ in range(3):
        state["s"] = algo.step(state["s"])
        buffered.step()
    assert torch.allclose(state["s"]["x"], buffered.x, rtol=1e-9, atol=1e-12), "the buffered step is not PDMM"
    k = iterations(graph.num_edges, d)

    def step():
        state["s"] = algo.step(state["s"])

    rows = []
    for allocator in ("default", "tuned"):
        if allocator == "tuned" and not pdmm.keep_freed_memory():
            print("(no glibc: the tuned rows use the default allocator)")
        samples = [(timed(step, k, device), timed(buffered.step, k, device)) for _ in range(repeats + 1)]
        rows.append((allocator, *[1e3 * statistics.median(column) for column in zip(*samples[1:], strict=False)]))
    return rows


@torch.no_grad()  # as in pdmm.solve
def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6], help="directed edges E")
    parser.add_argument("--dims", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=GRAPHS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="add rows with the step and solve under torch.compile at the largest size",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10^4 and 4 10^4 edges, 1 repeat")
    add_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeats = [10**4, 4 * 10**4], 1
    device = torch.device(args.device)
    recorder = Recorder("bench_pdmm", args.results_dir, args.shared)  # before any work: load at start

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {cpu_model()}"
        + (f", GPU: {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "")
    )
    print(
        f"device {device}, float64, B = 1, median of {args.repeats} repetitions, "
        f"load average {recorder.provenance['load_at_start']} at start\n"
    )
    graphs = {(kind, E): build(kind, E) for kind in args.graphs for E in args.sizes}

    if device.type == "cpu" and "random_regular" in args.graphs:
        E, d = max(args.sizes), max(args.dims)
        print(f"Allocator, random_regular, {E:,} directed edges, d = {d} (ms per iteration):\n")
        print("| allocator | step | step into preallocated buffers |\n|---|---:|---:|")
        G = graphs["random_regular", E]
        for allocator, step_ms, buffered_ms in allocator_rows(G, d, device, args.repeats):
            print(f"| {allocator} | {step_ms:.3f} | {buffered_ms:.3f} |", flush=True)
            recorder.add(
                "allocator",
                device=str(device),
                graph="random_regular",
                directed_edges=2 * len(G.edges),
                d=d,
                allocator=allocator,
                step_ms=step_ms,
                buffered_ms=buffered_ms,
            )
        print()

    print(
        "| graph | step | directed edges | n | d | renumber s | naive ms | given ms | edges ms | step ms | solve ms "
        "| every ms | lean ms | step/naive | solve/naive | solve/step | every/step | lean/step | given ns/edge "
        "| edges ns/edge | step ns/edge | bytes/edge (bound) | GB/s at bound | copy ms |"
    )
    print("|---|---|" + "---:|" * 22)
    runs = [(False, args.sizes)] + ([(True, args.sizes[-1:])] if args.compile else [])
    for compiled, sizes in runs:
        for (kind, E), G in graphs.items():
            if E not in sizes:
                continue
            for d in args.dims:
                times, renumber_s = bench(G, d, device, args.repeats, compiled)
                naive_ms, given_ms, edges_ms, step_ms, solve_ms, every_ms, lean_ms, copy_ms = times
                edges, n = 2 * len(G.edges), G.n
                bound = 16 * d + 8
                print(
                    f"| {kind} | {'compiled' if compiled else 'eager'} | {edges:,} | {n:,} | {d} | {renumber_s:.2f} "
                    f"| {naive_ms:.3f} | {given_ms:.3f} | {edges_ms:.3f} | {step_ms:.3f} | {solve_ms:.3f} "
                    f"| {every_ms:.3f} | {lean_ms:.3f} | {step_ms / naive_ms:.2f} | {solve_ms / naive_ms:.2f} "
                    f"| {solve_ms / step_ms:.2f} | {every_ms / step_ms:.2f} | {lean_ms / step_ms:.2f} "
                    f"| {1e6 * given_ms / edges:.2f} | {1e6 * edges_ms / edges:.2f} | {1e6 * step_ms / edges:.2f} "
                    f"| {bound} | {bound * edges / step_ms / 1e6:.2f} | {copy_ms:.3f} |",
                    flush=True,
                )
                recorder.add(
                    "iteration",
                    device=str(device),
                    graph=kind,
                    mode="compiled" if compiled else "eager",
                    directed_edges=edges,
                    n=n,
                    d=d,
                    renumber_s=renumber_s,
                    naive_ms=naive_ms,
                    given_ms=given_ms,
                    edges_ms=edges_ms,
                    step_ms=step_ms,
                    solve_ms=solve_ms,
                    every_ms=every_ms,
                    lean_ms=lean_ms,
                    step_per_naive=step_ms / naive_ms,
                    solve_per_naive=solve_ms / naive_ms,
                    solve_per_step=solve_ms / step_ms,
                    every_per_step=every_ms / step_ms,
                    lean_per_step=lean_ms / step_ms,
                    given_ns_per_edge=1e6 * given_ms / edges,
                    edges_ns_per_edge=1e6 * edges_ms / edges,
                    step_ns_per_edge=1e6 * step_ms / edges,
                    bound_bytes_per_edge=bound,
                    gb_per_s_at_bound=bound * edges / step_ms / 1e6,
                    copy_ms=copy_ms,
                )


if __name__ == "__main__":
    main()
