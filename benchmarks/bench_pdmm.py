"""Cost of one PDMM iteration on 4-regular random graphs, against the cost of copying its state.

For E directed edges (n = E / 4 nodes, pdmm.topology("random_regular", degree=4)) and x_i in R^d,
plain PDMM (theta = 1) on pdmm.averaging(G, a) with consensus constraints, one instance (B = 1):

    step    ms per bare `PDMM.step` (the three phases: aggregate, fuse, exchange)
    solve   ms per iteration of `pdmm.solve(problem, max_iter=K, tol=0)` (adds residual, objective, checks),
            from Result.seconds, which excludes compiling the problem and initialising the state
    copy    ms to copy E*d + 2*n*d values (edge state z, node state x, node data a: the least an
            iteration must read and write) into a preallocated tensor
    ratio   copy / step: 1 would mean an iteration runs at copy speed (target: >= 0.3 at 10^6 edges)

Each repetition times K steps, K copies and one K-iteration solve in turn, so all three see the same
machine state; the table reports the median over --repeats after one warm-up repetition. Graph
building is not timed. Every size is run twice in the same process: first with glibc's default
allocator settings (what a plain `import pdmm` gets), then after experiments.common.tune_allocator()
(what the pdmm-bridge command line uses), and, at the largest size, with the step under
torch.compile (pdmm.solve(..., compile=True)).

    python benchmarks/bench_pdmm.py [--device cuda] [--sizes 10000 100000 1000000] [--dims 1 16] [--repeats 7]
"""
import argparse
import os
import statistics

import numpy as np
import torch

import pdmm
from experiments.common import tune_allocator
from machine import cpu_model, timed


def bench(G, d, device, repeats, compiled=False):
    """(ms per step, ms per solve iteration, ms per copy) medians for one graph and dimension."""
    n, E = G.number_of_nodes(), 2 * G.number_of_edges()
    a = np.random.default_rng(0).standard_normal((n, d))
    problem = pdmm.averaging(G, a)
    graph, local, edges = problem.compile(device, torch.float64)
    algo = pdmm.METHODS["pdmm"](graph, local, edges, 1.0)
    algo_step = torch.compile(algo.step) if compiled else algo.step
    state = {"s": algo.init(torch.zeros(n, 1, d, dtype=torch.float64, device=device))}
    source = torch.randn(E * d + 2 * n * d, dtype=torch.float64, device=device)
    target = torch.empty_like(source)
    k = max(5, 2 * 10**7 // (E * d))  # iterations per sample: 10^4 edges x d=1 -> 2000, 10^6 x 16 -> 5

    def step():
        state["s"] = algo_step(state["s"])

    def solve():
        if compiled:  # the solve loop adds the same eager residual / objective work either way
            return float("nan")
        result = pdmm.solve(problem, max_iter=k, tol=0, device=device)
        assert result.iterations == k, f"solve stopped after {result.iterations} of {k} iterations"
        return result.seconds / k

    samples = []
    for _ in range(repeats + 1):  # the first repetition is the warm-up
        samples.append((timed(step, k, device), solve(), timed(lambda: target.copy_(source), k, device)))
    return [1e3 * statistics.median(column) for column in zip(*samples[1:])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6], help="directed edges E")
    parser.add_argument("--dims", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    device = torch.device(args.device)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {cpu_model()}"
          + (f", GPU: {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""))
    print(f"device {device}, float64, B = 1, median of {args.repeats} repetitions, "
          f"load average {os.getloadavg()[0]:.2f} at start\n")
    print("| allocator | step | directed edges | n | d | ms/iteration (step) | ms/iteration (solve loop) "
          "| ms per 10^6 edges (step) | copy ms | copy/iteration ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    graphs = {}
    for E in args.sizes:
        if E % 4:
            raise ValueError(f"a 4-regular graph has E = 4 n directed edges; {E} is not a multiple of 4")
        graphs[E] = pdmm.topology("random_regular", n=E // 4, seed=0, degree=4)
    runs = [("default", False, args.sizes), ("tuned", False, args.sizes), ("tuned", True, args.sizes[-1:])]
    for allocator, compiled, sizes in runs:
        if allocator == "tuned" and not tune_allocator():
            print("(no glibc: the tuned rows use the default allocator)")
        for E in sizes:
            for d in args.dims:
                step_ms, solve_ms, copy_ms = bench(graphs[E], d, device, args.repeats, compiled)
                print(f"| {allocator} | {'compiled' if compiled else 'eager'} | {E:,} | {E // 4:,} | {d} "
                      f"| {step_ms:.3f} | {solve_ms:.3f} | {step_ms / (E / 1e6):.2f} | {copy_ms:.3f} "
                      f"| {copy_ms / step_ms:.3f} |", flush=True)


if __name__ == "__main__":
    main()
