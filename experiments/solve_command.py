"""pdmm-bridge solve: one problem on one graph, solved by one or several methods, written to --out.

    pdmm-bridge solve --problem averaging --graph random_geometric --nodes 100 --method pdmm --out runs/avg

--out receives config.json (resolved arguments, version, graph size, per-method summary),
history.csv (method, iteration, residual, objective, error), result.npz (x_<method>, and
x_star with a reference) and convergence.png. For batched runs (--batch B) history.csv and
the plot hold the mean over the B instances, while config.json and the printed summary give
the worst instance (the one convergence waits for).
"""
import argparse
import csv
import inspect
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch

import pdmm
from pdmm.synthetic import KINDS, make_data, make_problem

from .common import UsageError, build_graph, device, key_value, package_version, positive
from .plots import plot_convergence

DTYPES = {"float64": torch.float64, "float32": torch.float32}
HISTORY_COLUMNS = ("residual", "objective", "error")
DEFAULT_DIM, DEFAULT_SAMPLES = 3, 10


def _methods(text):
    """--compare pdmm,qa-pdmm,admm -> ["pdmm", "qa-pdmm", "admm"]."""
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in pdmm.METHODS]
    if unknown or not methods or len(set(methods)) != len(methods):
        raise argparse.ArgumentTypeError(f"expected distinct methods from {', '.join(pdmm.METHODS)}, got {text!r}")
    return methods


def _eta(text):
    if text in ("L", "safe"):
        return text
    try:
        return positive(float)(text)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"must be 'L', 'safe' or a number > 0, got {text!r}") from None


def add_parser(subparsers):
    p = subparsers.add_parser("solve", help="solve one problem with one or several methods",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data = p.add_argument_group("problem and data")
    data.add_argument("--problem", default="averaging", choices=KINDS)
    data.add_argument("--dim", type=positive(int), help=f"variable size d (synthetic data; default {DEFAULT_DIM})")
    data.add_argument("--samples", type=positive(int), help=f"rows of H or X per node (synthetic data; default {DEFAULT_SAMPLES})")
    data.add_argument("--batch", type=positive(int), help="solve this many independent instances at once "
                      "(synthetic data)")
    data.add_argument("--ridge", type=float, default=0.0, help="least_squares ridge weight")
    data.add_argument("--lam", type=float, default=0.1, help="lasso l1 weight")
    data.add_argument("--reg", type=float, default=0.1, help="logistic ridge weight")
    data.add_argument("--data", metavar="FILE.npz", help="read the data arrays from this file instead of sampling")
    graph = p.add_argument_group("graph")
    graph.add_argument("--graph", default="random_geometric",
                       help=f"a topology ({', '.join(pdmm.TOPOLOGIES)}) or a .graphml / edge-list file")
    graph.add_argument("--nodes", type=int, default=100, help="number of nodes of a named topology")
    graph.add_argument("--graph-param", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                       help="topology parameter, e.g. radius=0.3 (repeatable)")
    solver = p.add_argument_group("solver")
    which = solver.add_mutually_exclusive_group()
    which.add_argument("--method", default="pdmm", choices=list(pdmm.METHODS))
    which.add_argument("--compare", type=_methods, metavar="M1,M2,...", help="run several methods, e.g. pdmm,admm")
    solver.add_argument("--rho", type=positive(float), default=1.0, help="penalty parameter")
    solver.add_argument("--theta", type=float, help="averaging for pdmm / qa-pdmm (1 = PDMM, 0.5 = averaged)")
    solver.add_argument("--eta", type=_eta, help="qa-pdmm proximal weight: L, safe or a number")
    solver.add_argument("--iters", type=positive(int), default=1000, help="maximum iterations")
    solver.add_argument("--tol", type=float, default=1e-10)
    solver.add_argument("--reference", choices=("cvxpy", "none"), default="cvxpy",
                        help="centralised solution for the relative error")
    solver.add_argument("--device", type=device, default="cpu", help="torch device, e.g. cpu or cuda")
    solver.add_argument("--dtype", choices=list(DTYPES), default="float64")
    solver.add_argument("--seed", type=int, default=0, help="seed for the graph and the synthetic data")
    p.add_argument("--out", default="runs/solve", help="output directory")
    return p


def run(args):
    methods = args.compare or [args.method]
    params = _method_params(args, methods)
    G = build_graph(args.graph, args.nodes, args.seed, dict(args.graph_param))
    problem = _problem(args, G)
    if "qa-pdmm" in methods and not problem.local.smooth:
        raise UsageError(f"qa-pdmm needs smooth local functions; {args.problem} is not smooth (use pdmm or admm)")
    x_star = pdmm.reference(problem) if args.reference == "cvxpy" else None

    results, failures = {}, {}
    for method in methods:
        try:
            results[method] = pdmm.solve(
                problem, method=method, rho=args.rho, max_iter=args.iters, tol=args.tol, reference=x_star,
                device=args.device, dtype=DTYPES[args.dtype], progress=True, **params[method])
        except pdmm.DivergenceError as err:
            results[method], failures[method] = err.result, str(err)
        except (ValueError, TypeError) as err:  # parameters the method rejects (theta, eta, a non-smooth f_i)
            raise UsageError(str(err)) from None

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    curves = {method: _mean_history(result.history) for method, result in results.items()}
    _write_config(out / "config.json", args, methods, params, G, results, failures)
    _write_history(out / "history.csv", curves)
    arrays = {f"x_{method}": result.x for method, result in results.items()}
    np.savez(out / "result.npz", **arrays, **({} if x_star is None else {"x_star": x_star}))
    graph_name = args.graph if args.graph in pdmm.TOPOLOGIES else Path(args.graph).name
    plot_convergence(curves, out / "convergence.png", f"{args.problem} on {graph_name} (n={problem.n})")

    for method, result in results.items():
        print(_summary(method, result, method in failures, out))
    for message in failures.values():
        print(f"pdmm-bridge solve: {message}", file=sys.stderr)
    return 1 if failures else 0


def _method_params(args, methods):
    """{method: {"theta": ..., "eta": ...}}: --theta / --eta for the methods whose constructor takes them."""
    given = {name: getattr(args, name) for name in ("theta", "eta") if getattr(args, name) is not None}
    params = {method: {name: value for name, value in given.items()
                       if name in inspect.signature(pdmm.METHODS[method]).parameters} for method in methods}
    unused = [name for name in given if not any(name in p for p in params.values())]
    if unused:
        raise UsageError(f"--{unused[0]} does not apply to {', '.join(methods)}")
    return params


def _defaults(method):
    """The method's own parameter defaults (theta, eta), so config.json records every value used."""
    return {name: p.default for name, p in inspect.signature(pdmm.METHODS[method]).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _problem(args, G):
    """The pdmm.Problem from --data or synthetic data; bad or missing data is a UsageError."""
    if args.data is None:
        args.dim, args.samples = args.dim or DEFAULT_DIM, args.samples or DEFAULT_SAMPLES  # resolved for config.json
        data = make_data(args.problem, G.number_of_nodes(), args.dim, args.samples, args.batch, args.seed)
    else:
        given = [f"--{name}" for name in ("dim", "samples", "batch") if getattr(args, name) is not None]
        if given:
            raise UsageError(f"{', '.join(given)} size synthetic data; with --data the arrays' shapes decide")
        if not Path(args.data).is_file():
            raise UsageError(f"data file not found: {args.data}")
        if not zipfile.is_zipfile(args.data):
            raise UsageError(f"{args.data} is not an .npz archive (write one with numpy.savez)")
        try:
            with np.load(args.data) as archive:
                data = dict(archive)
        except (OSError, ValueError) as err:
            raise UsageError(f"could not read data file {args.data}: {err}") from None
    try:
        return make_problem(args.problem, G, data, ridge=args.ridge, lam=args.lam, reg=args.reg)
    except (ValueError, TypeError) as err:
        source = args.data or "synthetic data"
        raise UsageError(f"{args.problem} from {source}: {err}") from None


def _mean_history(history):
    """Per-iteration curves, averaged over instances for batched runs: {key: (iterations,)}."""
    return {key: values.mean(1) if values.ndim == 2 else values for key, values in history.items()}


def _final(result, key):
    """The last value of a history entry, worst instance; None when it was not recorded."""
    values = result.history.get(key)
    return None if values is None else float(np.max(values[-1]))


def _write_config(path, args, methods, params, G, results, failures):
    resolved = {key: value for key, value in vars(args).items() if key != "run"}
    resolved.update(graph_param=dict(args.graph_param), methods=methods)
    summary = {method: {
        "iterations": result.iterations, "converged": result.converged, "diverged": method in failures,
        "seconds": result.seconds, "residual": _final(result, "residual"), "error": _final(result, "error"),
        "params": {"rho": args.rho, **_defaults(method), **params[method]},
    } for method, result in results.items()}
    config = {"version": package_version(), "args": resolved,
              "graph": {"n": G.number_of_nodes(), "edges": G.number_of_edges()}, "methods": summary}
    path.write_text(json.dumps(config, indent=2) + "\n")


def _write_history(path, curves):
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(("method", "iteration", *HISTORY_COLUMNS))
        for method, curve in curves.items():
            for k in range(len(curve["residual"])):
                writer.writerow((method, k + 1, *(curve[c][k] if c in curve else "" for c in HISTORY_COLUMNS)))


def _summary(method, result, diverged, out):
    """pdmm: converged in 227 iterations (0.31 s), residual 9.1e-11, error 2.3e-10 -> runs/avg"""
    if diverged:
        status = f"diverged at iteration {result.iterations}"
    elif result.converged:
        status = f"converged in {result.iterations} iterations"
    else:
        status = f"not converged after {result.iterations} iterations"
    line = f"{method}: {status} ({result.seconds:.2f} s), residual {_final(result, 'residual'):.2g}"
    if "error" in result.history:
        line += f", error {_final(result, 'error'):.2g}"
    return f"{line} -> {out}"
