"""The centralised reference: pdmm.reference against the cvxpy problem built one term per node, side by side.

Table "reference": distributed least squares (each of --nodes on pdmm.topology's random geometric graph, radius
sqrt(2 ln n / n), d = 4, k = 8 rows per node, ridge 0.1) and logistic regression (the same sizes, labels the signs
of the targets, reg 0.1), float64, CPU. *per node* builds one cvxpy term per node, as pdmm.reference did
before (up to --per-node-max nodes; above, the row leaves it blank); *vectorised* is pdmm.reference(problem,
solver="CLARABEL"): one cvxpy expression over the stacked data; *default* is pdmm.reference(problem): the
closed form (sum_i P_i) x = sum_i q_i for least squares (docs/guide/solve.md, "The reference"), the
Newton's method from x = 0 for logistic regression. Each time is one call, from the
problem to x*, the median over --repeats; the row gives the largest absolute difference of x* from the
per-node answer (or, without one, from the vectorised one) and the optimality of each: the largest entry of
sum_i grad f_i(x*) (0 at the optimum).

Table "batched" (--batched): B instances of a distributed lasso (the same graphs and sizes, lam 0.5), which
only cvxpy solves: *separate* compiles one cvxpy problem per instance, *parameters* one problem with cvxpy
Parameters that every instance assigns (pdmm.reference's PARAMETER_NUMBERS set to 0, then unbounded), *default*
is pdmm.reference(problem), which takes Parameters up to PARAMETER_NUMBERS numbers of data per instance.

    python benchmarks/bench_reference.py [--nodes 1000 5000 20000] [--per-node-max 5000] [--repeats 1]
                                         [--results-dir benchmarks/results] [--shared no]
    python benchmarks/bench_reference.py --batched [--nodes 20 100 200 500 1000] [--instances 8]

Rows go to benchmarks/results/bench_reference.csv (tables "reference" and "batched"; benchmarks/results.py).
"""

import argparse
import importlib
import statistics
import time
import warnings
from functools import partial

import cvxpy as cp
import numpy as np
import torch
from results import Recorder, add_arguments

import pdmm

D, ROWS = 4, 8
SOLVER = importlib.import_module("pdmm.reference")  # the module (pdmm.reference is the function)
TIGHT = {"tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11}


def problems(n):
    """{name: problem} on one random geometric graph of n nodes, and its data (H, y)."""
    G = pdmm.topology("random_geometric", n=n, seed=0)
    rng = np.random.default_rng(0)
    H, y = rng.normal(size=(n, ROWS, D)), rng.normal(size=(n, ROWS))
    return {
        "least squares": pdmm.least_squares(G, H, y, ridge=0.1),
        "logistic": pdmm.logistic(G, H, np.sign(y), reg=0.1),
    }, (H, y)


def per_node(name, n, H, y):
    """x* from one cvxpy term per node (what pdmm.reference built before), consensus: one shared x."""
    x = cp.Variable(D)
    if name == "least squares":
        terms = [0.5 * cp.sum_squares(H[i] @ x - y[i]) + 0.05 * cp.sum_squares(x) for i in range(n)]
    else:
        s = np.sign(y)
        terms = [cp.sum(cp.logistic(-cp.multiply(s[i], H[i] @ x))) + 0.05 * cp.sum_squares(x) for i in range(n)]
    with warnings.catch_warnings():  # cvxpy's "too many subexpressions" at large n
        warnings.simplefilter("ignore", UserWarning)
        cp.Problem(cp.Minimize(sum(terms))).solve(solver=cp.CLARABEL, **TIGHT)
    return np.tile(x.value, (n, 1))


def gradient_size(problem, x):
    """The largest entry of sum_i grad f_i(x) at a consensus point x (n, d): 0 at the optimum."""
    return float(problem.local.gradient(torch.tensor(x)[:, None, :]).sum(0).abs().max())


def timed(run, repeats):
    """(median seconds, the last answer) of `repeats` calls of run()."""
    seconds, answer = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        answer = run()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), answer


def batched(args, recorder):
    """Table "batched": B lasso instances, one compiled problem per instance against one with Parameters."""
    threshold = SOLVER.PARAMETER_NUMBERS
    for n in args.nodes:
        G = pdmm.topology("random_geometric", n=n, seed=0)
        rng = np.random.default_rng(0)
        B = args.instances
        problem = pdmm.lasso(G, rng.normal(size=(B, n, ROWS, D)), rng.normal(size=(B, n, ROWS)), lam=0.5)
        times, answers = {}, {}
        for name, numbers in (("separate", 0), ("parameters", float("inf")), ("default", threshold)):
            SOLVER.PARAMETER_NUMBERS = numbers
            times[name], answers[name] = timed(partial(pdmm.reference, problem), args.repeats)
        SOLVER.PARAMETER_NUMBERS = threshold
        row = {
            "problem": "lasso",
            "nodes": n,
            "d": D,
            "instances": B,
            "numbers": n * ROWS * (D + 1),
            "separate_s": f"{times['separate']:.3f}",
            "parameters_s": f"{times['parameters']:.3f}",
            "default_s": f"{times['default']:.3f}",
            "speedup": f"{times['separate'] / times['default']:.2f}",
            "max_difference": f"{np.abs(answers['parameters'] - answers['separate']).max():.2e}",
        }
        recorder.add("batched", **row)
        print(row, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", help="default 1000 5000 20000; with --batched 20 ... 1000")
    parser.add_argument("--per-node-max", type=int, default=5000, help="largest n timed one term per node")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batched", action="store_true", help='table "batched" only (default --nodes 20 ... 1000)')
    parser.add_argument("--instances", type=int, default=8, help='instances B of table "batched"')
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder("bench_reference", args.results_dir, args.shared)  # before any work: load at start
    if args.batched:
        args.nodes = args.nodes or [20, 100, 200, 500, 1000]
        return batched(args, recorder)
    args.nodes = args.nodes or [1000, 5000, 20000]
    for n in args.nodes:
        built, (H, y) = problems(n)
        for name, problem in built.items():
            vectorised_s, vectorised = timed(lambda p=problem: pdmm.reference(p, solver="CLARABEL"), args.repeats)
            default_s, default = timed(lambda p=problem: pdmm.reference(p), args.repeats)
            plain_s, plain = (
                timed(partial(per_node, name, n, H, y), args.repeats) if n <= args.per_node_max else (None, None)
            )
            against = vectorised if plain is None else plain
            row = {
                "problem": name,
                "nodes": n,
                "d": D,
                "per_node_s": "" if plain_s is None else f"{plain_s:.3f}",
                "vectorised_s": f"{vectorised_s:.3f}",
                "default_s": f"{default_s:.4f}",
                "default_is": "closed form" if name == "least squares" else "Newton",
                "max_difference": f"{np.abs(default - against).max():.2e}",
                "vectorised_difference": "" if plain is None else f"{np.abs(vectorised - plain).max():.2e}",
                "default_gradient": f"{gradient_size(problem, default):.1e}",
                "vectorised_gradient": f"{gradient_size(problem, vectorised):.1e}",
                "per_node_gradient": "" if plain is None else f"{gradient_size(problem, plain):.1e}",
            }
            recorder.add("reference", **row)
            print(row, flush=True)


if __name__ == "__main__":
    main()
