"""Tuning on a grid: one run per grid value against every value on the batch axis of one run, side by side.

Table "pdmm.tune": least squares on random geometric graphs (each of --nodes, B = 4 instances, d = 4, k = 8 rows
per node, ridge 0.1), float64, CPU, each tuned method on its default grid (17 rho or 15 alpha values) with max_iter
--iters and target 1e-6 (docs/decentralised.md section 8). *one run per value* is pdmm.tune's rule from one
pdmm.solve per value, each later value cut to the fewest iterations to the target before it (what tune ran
before); *batched* is pdmm.tune, the values in batches of pdmm.batch_runs.BATCH_BYTES (pdmm/batch_runs.py).
Both choose a value; the row says whether they chose the same one.

Table "batch size": pdmm.tune of pdmm on the same problem on --large-nodes nodes (--large-iters), whose edge
state per value exceeds a core's cache, with batches of one value, of BATCH_BYTES (the default) and of the whole
grid, against one run per value: what sets BATCH_BYTES.

Table "compare": the scoring of the classical rows of `pdmm-bridge compare` (bridge.comparison.tune_classical)
on seed 0's tuning instances of the setting of docs/compare (random geometric graphs of 64-128 nodes, radius
0.18, --tune-graphs graphs, B = 16 value vectors each) over --compare-rounds rounds (docs/compare runs them to
512): classical_errors once per value of each row's start grid (bridge.selection.refine starts there) against
grid_errors; the row gives the largest relative difference
of their errors (0: the same bits).

Each repetition times the variants in turn; the tables give the medians over --repeats after one warm-up
repetition.

    python benchmarks/bench_tuning.py [--nodes 10 50] [--iters 300] [--large-nodes 400] [--large-iters 100]
                                      [--tune-graphs 4] [--compare-rounds 112] [--repeats 3]
                                      [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_tuning.csv (tables "pdmm.tune", "batch size" and "compare";
benchmarks/results.py).
"""

import argparse
import math
import statistics
import time
from functools import partial

import numpy as np
import torch
from machine import cpu_model
from results import Recorder, add_arguments

import pdmm
from bridge import comparison
from bridge.consensus import GraphFamily
from pdmm import batch_runs
from pdmm.tuning import TARGET, TUNED, default_grid

METHODS = ["pdmm", "averaged pdmm", "admm", "qa-pdmm", "dgd", "extra", "nids", "gradient-tracking"]


def one_run_per_value(problem, x_star, method, values, budget, **params):
    """pdmm.tune's choice from one pdmm.solve per value (tol = 0, stopped by the target; each value's budget cut to
    the fewest iterations to the target before it)."""
    reached, finite = [], []
    for index, value in enumerate(values):
        try:
            result = pdmm.solve(
                problem,
                method=method,
                reference=x_star,
                tol=0,
                target=TARGET,
                max_iter=budget,
                history=("error",),
                **{TUNED[method]: float(value)},
                **params,
            )
        except pdmm.DivergenceError:
            continue
        error = float(np.max(result.history["error"][-1]))
        finite.append((error, index))
        if error <= TARGET:
            reached.append((result.iterations, error, index))
            budget = min(budget, result.iterations)
    return float(values[min(reached)[2] if reached else min(finite)[1]])


def tuned_value(problem, method, x_star, budget, params):
    """pdmm.tune's choice, every value in one run."""
    return pdmm.tune(problem, method, reference=x_star, max_iter=budget, **params).value


def per_value_errors(method, fixed, key, grid, rounds, instances):
    """(values, rounds, instances) errors of compare's classical rows, one classical_errors run per grid value."""
    return torch.stack([comparison.classical_errors(method, {**fixed, key: v}, rounds, instances) for v in grid])


def side_by_side(functions, repeats):
    """([median seconds of each function], [each one's last result]), timed in turn, after one warm-up."""
    times: list[list[float]] = [[] for _ in functions]
    results = [None] * len(functions)
    for repeat in range(repeats + 1):
        for slot, fn in enumerate(functions):
            start = time.perf_counter()
            results[slot] = fn()
            if repeat:
                times[slot].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times], results


def least_squares(nodes):
    """The benchmark's problem on `nodes` nodes and its cvxpy solution."""
    rng = np.random.default_rng(0)
    G = pdmm.topology("random_geometric", n=nodes, seed=0)
    problem = pdmm.least_squares(G, rng.normal(size=(4, nodes, 8, 4)), rng.normal(size=(4, nodes, 8)), 0.1)
    return problem, pdmm.reference(problem)


def with_batch_bytes(size, problem, method, x_star, budget):
    """pdmm.tune's choice with BATCH_BYTES = size."""
    default, batch_runs.BATCH_BYTES = batch_runs.BATCH_BYTES, size
    try:
        return tuned_value(problem, method, x_star, budget, {})
    finally:
        batch_runs.BATCH_BYTES = default


def bench_tune(args, recorder, nodes):
    problem, x_star = least_squares(nodes)
    print(f"pdmm.tune, least squares, n = {nodes}, B = 4, d = 4, max_iter = {args.iters}")
    print("| method | values | one run per value s | batched s | speed-up | same choice |")
    print("|---|---:|---:|---:|---:|---|")
    for row in METHODS:
        method, params = ("pdmm", {"theta": 0.5}) if row == "averaged pdmm" else (row, {})
        values = default_grid(problem, method, **params)
        (loop_s, batch_s), (looped, tuned) = side_by_side(
            [
                partial(one_run_per_value, problem, x_star, method, values, args.iters, **params),
                partial(tuned_value, problem, method, x_star, args.iters, params),
            ],
            args.repeats,
        )
        print(f"| {row} | {len(values)} | {loop_s:.3f} | {batch_s:.3f} | {loop_s / batch_s:.1f}x | {looped == tuned} |")
        recorder.add(
            "pdmm.tune",
            method=row,
            nodes=nodes,
            instances=4,
            values=len(values),
            max_iter=args.iters,
            per_value_s=loop_s,
            batched_s=batch_s,
            speedup=loop_s / batch_s,
            same_choice=looped == tuned,
        )


def bench_batch_size(args, recorder):
    problem, x_star = least_squares(args.large_nodes)
    values = default_grid(problem, "pdmm")
    per_value = problem.compiled.num_edges * problem.batch * problem.dim * 8
    sizes = {"one value": 1, "BATCH_BYTES": batch_runs.BATCH_BYTES, "whole grid": per_value * len(values)}
    seconds, choices = side_by_side(
        [partial(one_run_per_value, problem, x_star, "pdmm", values, args.large_iters)]
        + [partial(with_batch_bytes, size, problem, "pdmm", x_star, args.large_iters) for size in sizes.values()],
        args.repeats,
    )
    print(f"batch size, pdmm, n = {args.large_nodes}, {per_value / 2**20:.2f} MiB of edge state per value")
    print("| batches of | values per batch | s | / one run per value | same choice |")
    print("|---|---:|---:|---:|---|")
    for (label, size), batch_s, choice in zip(sizes.items(), seconds[1:], choices[1:], strict=True):
        per_batch = (
            len(batch_runs.pieces(values, per_value)[0]) if label == "BATCH_BYTES" else max(1, size // per_value)
        )
        print(f"| {label} | {per_batch} | {batch_s:.2f} | {batch_s / seconds[0]:.2f} | {choice == choices[0]} |")
        recorder.add(
            "batch size",
            batches_of=label,
            nodes=args.large_nodes,
            max_iter=args.large_iters,
            mib_per_value=per_value / 2**20,
            values_per_batch=per_batch,
            batched_s=batch_s,
            per_value_s=seconds[0],
            ratio_to_per_value=batch_s / seconds[0],
            same_choice=choice == choices[0],
        )


def bench_compare(args, recorder):
    setting = comparison.Setting(GraphFamily("random_geometric", 64, 128, 0.18), tune_graphs=args.tune_graphs)
    _, tuning, _ = setting.draw(0)
    instances = comparison.compiled(tuning)
    rounds = args.compare_rounds
    print(f"compare's scoring, {args.tune_graphs} tuning graphs x B = {setting.batch}, {rounds} rounds")
    print("| row | values | one run per value s | batched s | speed-up | largest relative difference |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (method, fixed, key, search) in comparison.TUNED.items():
        if search is None:
            continue
        grid = [search.value(p) for p in search.start]  # the start grid of bridge.selection.refine
        (loop_s, batch_s), (looped, batched) = side_by_side(
            [
                partial(per_value_errors, method, fixed, key, grid, rounds, instances),
                partial(comparison.grid_errors, method, fixed, key, grid, rounds, instances),
            ],
            args.repeats,
        )
        finite = torch.isfinite(looped)
        same_pattern = torch.equal(finite, torch.isfinite(batched))
        difference = float(((batched - looped).abs() / looped.abs())[finite].max()) if same_pattern else math.inf
        print(f"| {name} | {len(grid)} | {loop_s:.3f} | {batch_s:.3f} | {loop_s / batch_s:.1f}x | {difference:.1e} |")
        recorder.add(
            "compare",
            row=name,
            graphs=args.tune_graphs,
            instances=setting.batch,
            rounds=rounds,
            values=len(grid),
            per_value_s=loop_s,
            batched_s=batch_s,
            speedup=loop_s / batch_s,
            largest_relative_difference=difference,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 50], help="nodes of pdmm.tune's problems")
    parser.add_argument("--iters", type=int, default=300, help="pdmm.tune's max_iter")
    parser.add_argument("--large-nodes", type=int, default=400, help="nodes of the batch-size table's problem")
    parser.add_argument("--large-iters", type=int, default=100, help="its max_iter")
    parser.add_argument("--tune-graphs", type=int, default=4, help="compare's tuning graphs")
    parser.add_argument("--compare-rounds", type=int, default=112, help="rounds of compare's classical rows")
    parser.add_argument("--repeats", type=int, default=3)
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder("bench_tuning", args.results_dir, args.shared)  # before any work: load at start
    print(f"{cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for nodes in args.nodes:
        bench_tune(args, recorder, nodes)
    bench_batch_size(args, recorder)
    bench_compare(args, recorder)


if __name__ == "__main__":
    main()
