"""pdmm-bridge solve: one problem on one graph, solved by one or several methods, written to --out.

    pdmm-bridge solve --problem averaging --graph random_geometric --nodes 100 --method pdmm --out runs/avg
    pdmm-bridge solve --compare pdmm:theta=1,pdmm:theta=0.5,admm,qa-pdmm:eta=safe --out runs/four

    pdmm-bridge solve --compare pdmm,pdmm:theta=0.5,admm --drop 0.2 --wake 0.8 --bits 12 --dither --out runs/lossy
    pdmm-bridge solve --method pdmm:theta=0.5 --burst 0.05,0.3 --wake one --out runs/bursty
    pdmm-bridge solve --compare pdmm,gossip,chebyshev,chebyshev:mixing=lazy_metropolis:low=0:high=0.99 --out runs/avg
    pdmm-bridge solve --problem least_squares --compare pdmm,dgd,extra:alpha=0.05,nids,gradient-tracking --out runs/dec
    pdmm-bridge solve --problem logistic --data builtin:breast_cancer --compare pdmm,extra,nids --tune --out runs/bc

A method spec is METHOD[:KEY=VALUE...] with KEY rho (pdmm, qa-pdmm, admm) or one of the method's
parameters (theta, eta; mixing for gossip, chebyshev, dgd, extra, nids and gradient-tracking, a
kind of pdmm.mixing_matrix; low and high, given together, for chebyshev's eigenvalue interval;
alpha, "auto" or a number > 0, for dgd, extra, nids and gradient-tracking; step, constant or
diminishing, for dgd); each spec is one run, labelled by the spec as written, and --rho / --theta
/ --eta are the values of the runs that take them and do not set their own. gossip and chebyshev
solve --problem averaging only, on the ideal network; dgd, extra, nids and gradient-tracking
take the simulated network's flags below, all but --privacy and --wake one (docs/decentralised.md
section 9).

--data builtin:breast_cancer (with --problem logistic) is scikit-learn's bundled breast-cancer data,
standardised, with an intercept, its 569 rows split over the graph's nodes by --seed, and --reg the
l2 weight of the whole problem (pdmm.datasets.breast_cancer). --tune [TARGET] chooses the rho or
alpha of every run whose spec does not set it by pdmm.tune's rule (the grid value that reaches
relative error TARGET, default 1e-6, in the fewest iterations within --iters; docs/decentralised.md
section 8); such a run is labelled with the value, e.g. extra:alpha=0.0397, and tuning.csv holds
every value tried.

--out (refused when it exists and is not empty, unless --force) receives config.json (resolved
arguments, version, graph size, per-run summary and tuning), history.csv (method label, iteration,
residual, objective, error), result.npz (x_<label>, and x_star with a reference) and
convergence.png. --drop, --burst, --wake, --edge-up, --bits (with --dither, --limit) and --privacy
run every method over the same simulated network (pdmm.Network, seeded by --seed; per-edge loss
and per-node wake probabilities are Python-only: pdmm.Network(drop=..., wake=...)); history.csv
then also holds the cumulative messages delivered and bits sent (and, with --privacy, the
privacy measures), and `pdmm-bridge plot --x bits` draws against them. For batched runs
(--batch B) history.csv and the plot hold the mean over the B instances, while config.json and
the printed summary give the worst instance (the one convergence waits for). Ctrl-C stops the
current run after its last whole iteration, writes what ran (marked "interrupted" in
config.json and the plot's title) and exits with status 130.

--nproc P solves with P processes on this machine (gloo): the partitioned engine of
`pdmm.solve(..., backend="distributed")` (plain or averaged pdmm, consensus problems with quadratic
local functions, the ideal network). The command checks its arguments and claims --out, then starts
P copies of the same command as one job (experiments/launch.py, torchrun's env:// variables); every
process builds the same graph and data from --seed, and process 0 writes the outputs. Ctrl-C stops
every process at the same iteration and process 0 writes what ran, as one process does; a failure
prints one line for the job (exit 2 for bad input, 1 for a runtime failure); the processes die with
the launcher (kill -9 of it ends them at once).
"""

import argparse
import inspect
import io
import json
import os
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

import pdmm
import pdmm.datasets
import pdmm.decentralised
import pdmm.distributed
import pdmm.methods
import pdmm.mixing
import pdmm.npz
import pdmm.tuning
from pdmm.solve import check_rho_resolved, check_steps_resolved, local_curvature, problem_scale, rho_advice
from pdmm.synthetic import KINDS, make_data, make_problem

from . import launch, rundir
from .common import RunFailure, UsageError, build_graph, device, key_value, package_version, positive
from .plots import plot_convergence

DTYPES = {"float64": torch.float64, "float32": torch.float32}
HISTORY_COLUMNS = ("residual", "objective", "error")
NETWORK_COLUMNS = ("messages", "bits", "privacy_x", "privacy_messages")
DEFAULT_DIM, DEFAULT_SAMPLES = 3, 10
DEFAULT_REG = 0.1
BUILTIN = "builtin:"
TUNING_COLUMNS = ("method", "parameter", "value", "iterations", "reached", "error", "diverged", "chosen")


def _value(key, text):
    """A method parameter from its text: rho a number > 0, theta a number, eta "L", "safe" or a number > 0,
    mixing a kind of pdmm.mixing_matrix, low and high numbers (their range is the method's to check), alpha
    "auto" or a number > 0, step "constant" or "diminishing"."""
    parse = {
        "rho": positive(float),
        "theta": float,
        "eta": _eta,
        "mixing": _mixing,
        "low": float,
        "high": float,
        "alpha": _alpha,
        "step": _step,
    }[key]
    try:
        return parse(text)
    except (ValueError, argparse.ArgumentTypeError) as err:
        raise argparse.ArgumentTypeError(f"{key}: {err}") from None


def _spec(text):
    """ "pdmm:theta=0.5:rho=2" -> ("pdmm:theta=0.5:rho=2", "pdmm", {"theta": 0.5, "rho": 2.0}).

    The label is the spec as written (a plain method name labels itself); the keys are rho where the
    method has one and the parameters of the method's constructor (theta, eta, mixing, alpha, step), with
    chebyshev's interval written as low and high: "chebyshev:low=-0.5:high=0.9" -> {"interval": (-0.5, 0.9)}.
    """
    method, *assignments = [part.strip() for part in text.strip().split(":")]
    if method not in pdmm.METHODS:
        raise argparse.ArgumentTypeError(
            f"unknown method {method!r} in {text!r}; choose from {', '.join(pdmm.METHODS)}"
        )
    accepted = _accepted(method)
    params = {}
    for assignment in assignments:
        key, sep, value = (part.strip() for part in assignment.partition("="))
        if not (sep and key in accepted and value) or key in params:
            raise argparse.ArgumentTypeError(
                f"bad parameter {assignment!r} in {text!r}: {method} takes "
                f"{', '.join(f'{name}=VALUE' for name in accepted)}, each once"
            )
        params[key] = _value(key, value)
    label = ":".join([method, *(f"{key}={_text(value)}" for key, value in params.items())])
    if ("low" in params) != ("high" in params):
        raise argparse.ArgumentTypeError(f"{text!r}: give low and high together (the interval [low, high])")
    if "low" in params:
        params["interval"] = (params.pop("low"), params.pop("high"))
    return label, method, params


def _accepted(method):
    """The KEYs of a spec of `method`: rho where it has one, its constructor's parameters, the interval as low and
    high (a spec cannot hold a pair: commas separate the specs)."""
    names = ["rho"] * pdmm.METHODS[method].uses_rho + list(_defaults(method))
    return [key for name in names for key in (("low", "high") if name == "interval" else (name,))]


def _text(value):
    return value if isinstance(value, str) else f"{value:g}"


def _specs(text):
    """--compare pdmm:theta=1,pdmm:theta=0.5,admm -> a list of _spec results with distinct labels."""
    specs = [_spec(part) for part in text.split(",") if part.strip()]
    labels = [label for label, _, _ in specs]
    if not specs or len(set(labels)) != len(labels):
        raise argparse.ArgumentTypeError(f"expected distinct method specs separated by commas, got {text!r}")
    return specs


def _positive_or(*words):
    """A parser of one of `words` as written, or a number > 0."""
    named = ", ".join(f"'{word}'" for word in words)

    def parse(text):
        if text in words:
            return text
        try:
            return positive(float)(text)
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(f"must be {named} or a number > 0, got {text!r}") from None

    return parse


_eta, _alpha = _positive_or("L", "safe"), _positive_or("auto")


def _step(text):
    if text not in pdmm.decentralised.STEPS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(pdmm.decentralised.STEPS)}, got {text!r}")
    return text


def _mixing(text):
    if text not in pdmm.mixing.KINDS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(pdmm.mixing.KINDS)}, got {text!r}")
    return text


def _tolerance(text):
    """--tol: a number in [0, 1) (0 runs every --iters iteration; it is relative, and 1 would pass at x = 0),
    refused while parsing, before any work."""
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a number >= 0 and below 1 (it is relative), got {text}")
    return value


def _seed(text):
    """--seed: an integer in [0, 2^63): every generator seeded from it (numpy, torch, pdmm.Network) takes it."""
    value = int(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2^63 - 1, got {text}")
    return value


def _solve_device(text):
    """--device: a torch device this machine has (common.device) that holds data: not 'meta'."""
    text = device(text)
    if torch.device(text).type == "meta":
        raise argparse.ArgumentTypeError("'meta' holds no data; solve on cpu or a GPU (cuda)")
    return text


def _wake(text):
    """--wake: a number, or "one" (one node awake per iteration); the range is pdmm.Network's to check."""
    if text.strip() == "one":
        return "one"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a probability or 'one', got {text!r}") from None


def _pair(text):
    """--burst "0.05,0.3" -> (0.05, 0.3); the ranges are pdmm.Network's to check."""
    try:
        p_gb, p_bg = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected P_GB,P_BG, two probabilities separated by a comma, got {text!r}"
        ) from None
    return p_gb, p_bg


def add_parser(subparsers):
    p = subparsers.add_parser(
        "solve",
        help="solve one problem with one or several methods",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = p.add_argument_group("problem and data")
    data.add_argument("--problem", default="averaging", choices=KINDS, help="the local functions f_i")
    data.add_argument(
        "--dim", type=positive(int), help=f"variable size d of synthetic data ({DEFAULT_DIM} when not given)"
    )
    data.add_argument(
        "--samples",
        type=positive(int),
        help=f"rows of H or X per node of synthetic data ({DEFAULT_SAMPLES} when not given)",
    )
    data.add_argument(
        "--batch", type=positive(int), help="solve this many independent instances at once (synthetic data)"
    )
    data.add_argument("--ridge", type=float, default=0.0, help="least_squares ridge weight")
    data.add_argument("--lam", type=float, default=0.1, help="lasso l1 weight")
    data.add_argument(
        "--reg",
        type=float,
        help=f"logistic ridge weight of each f_i (default {DEFAULT_REG}); with "
        "--data builtin:NAME the l2 weight of the whole problem, split evenly over the nodes (default "
        f"{pdmm.datasets.BREAST_CANCER_L2:g} for breast_cancer)",
    )
    data.add_argument(
        "--data",
        metavar="FILE.npz",
        help="read the data arrays from this file instead of sampling "
        f"(headers checked first: at most {pdmm.npz.NPZ_LIMIT // 2**20} MiB of arrays, compressed at most "
        f"{pdmm.npz.NPZ_RATIO}:1, no objects), or "
        f"builtin:NAME for a data set shipped with a library ({', '.join(pdmm.datasets.DATASETS)})",
    )
    graph = p.add_argument_group("graph")
    graph.add_argument(
        "--graph",
        default="random_geometric",
        help=f"a topology ({', '.join(pdmm.TOPOLOGIES)}) or a .graphml / edge-list file",
    )
    graph.add_argument("--nodes", type=int, default=100, help="number of nodes of a named topology")
    graph.add_argument(
        "--graph-param",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topology parameter, e.g. radius=0.3 (repeatable)",
    )
    solver = p.add_argument_group("solver")
    which = solver.add_mutually_exclusive_group()
    which.add_argument(
        "--method",
        type=_spec,
        default="pdmm",
        metavar="SPEC",
        help=f"one method ({', '.join(pdmm.METHODS)}), optionally with parameters, e.g. "
        "pdmm:theta=0.5 or chebyshev:mixing=lazy_metropolis",
    )
    which.add_argument(
        "--compare",
        type=_specs,
        metavar="SPEC,SPEC,...",
        help="several runs in one output, each METHOD[:KEY=VALUE...] with KEY rho, theta, eta, mixing, "
        "low, high, alpha, step, e.g. pdmm:theta=1,pdmm:theta=0.5,admm,qa-pdmm:eta=safe,gossip,"
        "chebyshev:low=-0.5:high=0.95,extra:alpha=0.05,dgd:step=diminishing",
    )
    solver.add_argument(
        "--rho",
        type=positive(float),
        help="penalty parameter of the pdmm, qa-pdmm and admm runs without their own rho (default 1)",
    )
    solver.add_argument(
        "--theta",
        type=float,
        help="averaging of the pdmm / qa-pdmm runs without their own theta (1 = PDMM, 0.5 = averaged)",
    )
    solver.add_argument(
        "--eta", type=_eta, help="qa-pdmm proximal weight (L, safe or a number) of the runs without their own eta"
    )
    solver.add_argument("--iters", type=positive(int), default=1000, help="maximum iterations (of each tuning run too)")
    solver.add_argument(
        "--tune",
        type=positive(float),
        nargs="?",
        const=pdmm.tuning.TARGET,
        metavar="TARGET",
        help="choose each run's rho or alpha, unless its spec sets it, on pdmm.tune's grid: the value "
        f"that reaches relative error TARGET (default {pdmm.tuning.TARGET:g}) in the fewest iterations",
    )
    solver.add_argument(
        "--tol",
        type=_tolerance,
        default=1e-10,
        help="stop when the residual and the change of x "
        "fall below tol * max(s, RMS of x), s = min(1, the data's scale), and the multipliers have "
        'settled (docs/guide/solve.md, "The stopping test"); a number in [0, 1), 0 runs all --iters',
    )
    solver.add_argument(
        "--reference", choices=("cvxpy", "none"), default="cvxpy", help="centralised solution for the relative error"
    )
    solver.add_argument("--device", type=_solve_device, default="cpu", help="torch device, e.g. cpu or cuda")
    solver.add_argument("--dtype", choices=list(DTYPES), default="float64", help="floating-point type of the iterates")
    solver.add_argument("--seed", type=_seed, default=0, help="seed for the graph, the synthetic data and the network")
    solver.add_argument(
        "--nproc",
        type=positive(int),
        default=1,
        help="processes: more than 1 runs the partitioned "
        "engine under torchrun (pdmm only, consensus problems, ideal network)",
    )
    network = p.add_argument_group("simulated network (pdmm.Network; every run sees the same draws)")
    network.add_argument(
        "--drop",
        type=float,
        default=0.0,
        metavar="P",
        help="probability that a message is lost (in the good state with --burst; per-edge probabilities: Python only)",
    )
    network.add_argument(
        "--burst",
        type=_pair,
        metavar="P_GB,P_BG",
        help="bursty loss: each directed link is a "
        "Gilbert-Elliott chain, good -> bad with probability P_GB and bad -> good with P_BG per "
        "iteration, losing every message while bad (mean burst 1/P_BG iterations)",
    )
    network.add_argument(
        "--wake",
        type=_wake,
        default=1.0,
        metavar="Q",
        help="probability that a node is awake "
        "in an iteration (a sleeping node neither updates nor sends), or 'one': exactly one "
        "node, chosen uniformly, per iteration (per-node probabilities: Python only)",
    )
    network.add_argument(
        "--edge-up",
        type=float,
        default=1.0,
        metavar="R",
        help="probability that an edge is up in an iteration (both directions)",
    )
    network.add_argument("--bits", type=int, metavar="B", help="quantise every number sent to B bits")
    network.add_argument(
        "--dither",
        nargs="?",
        const="subtractive",
        choices=("subtractive", "stochastic"),
        help="with --bits: subtractive dither (the default when given) or stochastic rounding",
    )
    network.add_argument(
        "--limit",
        type=float,
        help="with --bits: the quantiser's range [-LIMIT, LIMIT] (default: adapted to each sender's messages)",
    )
    network.add_argument(
        "--privacy",
        type=float,
        metavar="SCALE",
        help="subspace perturbation: initial z with "
        "standard deviation SCALE (pdmm, qa-pdmm), and the privacy measures in history.csv",
    )
    output = p.add_argument_group("output")
    output.add_argument(
        "--out", default="runs/solve", help="output directory (refused when it exists and is not empty, unless --force)"
    )
    output.add_argument("--force", action="store_true", help="write into an existing non-empty --out")
    output.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def run(args):
    try:
        launch.listen()  # in a process of a --nproc job: where a Ctrl-C that came while it started is raised
        return _run(args)
    except KeyboardInterrupt:
        line = "pdmm-bridge solve: interrupted (Ctrl-C) outside the iterations; no results written"
        if not launch.report(130, line):  # of a --nproc job, the launcher prints it once
            print(line, file=sys.stderr)
        return 130
    except Exception as err:  # in a process of a --nproc job: one line for the launcher to print
        code = 2 if isinstance(err, UsageError) else 1
        if not launch.report(code, _failure_line(err)):
            raise
        return code
    finally:
        launch.done()  # a --nproc process has said what happened: Ctrl-C no longer interrupts it
        if torch.distributed.is_initialized():  # a --nproc process
            torch.distributed.destroy_process_group()


def _failure_line(err):
    """The one line of a --nproc process's failure: a UsageError or RunFailure as the CLI prints it, anything
    else (a collective that failed, a bug) with the process and the exception's type."""
    from .cli import first_line  # cli imports this module

    if isinstance(err, (UsageError, RunFailure)):
        return f"pdmm-bridge solve: error: {err}"
    where = f"process {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}"
    return f"pdmm-bridge solve: error: {where}: {type(err).__name__}: {first_line(err)}"


def _run(args):
    if "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a process torchrun started
        args.nproc = int(os.environ["WORLD_SIZE"])
    specs = args.compare or [args.method]
    params = _method_params(args, specs)
    to_tune = _to_tune(args, specs)
    network = _network(args)
    G = _graph(args)
    problem = _problem(args, G)
    _check_methods(problem, specs, params, args, network)
    rank = _rank(args)
    if args.nproc > 1 and rank is None:  # checked and claimed here, solved by the torchrun processes
        launch.check(args.nproc)
        rundir.claim(args.out, "solve", args.force)
        return _launch(args)
    x_star = _reference(problem, args)
    out = _claim(args, rank)
    try:
        tunings = {
            label: _tune(problem, label, method, params[label], x_star, args, network)
            for label, method, _ in specs
            if label in to_tune
        }
    except KeyboardInterrupt:
        print("pdmm-bridge solve: interrupted (Ctrl-C) while tuning; no results written", file=sys.stderr)
        return 130
    specs, params, tunings = _with_tuned_values(specs, params, tunings)
    results, failures, interrupted = _solve_all(problem, specs, params, x_star, args, network)
    if rank:  # process 0 writes and reports
        return 130 if interrupted else 1 if failures else 0

    curves = {label: _mean_history(result.history) for label, result in results.items()}
    _write_config(out / "config.json", args, specs, params, G, results, failures, tunings, interrupted)
    if tunings:
        _write_tuning(out / "tuning.csv", tunings)
    counted = () if network is None else [c for c in NETWORK_COLUMNS if any(c in curve for curve in curves.values())]
    _write_history(out / "history.csv", curves, (*HISTORY_COLUMNS, *counted))
    arrays = {f"x_{label}": result.x for label, result in results.items()}
    npz = io.BytesIO()
    np.savez(npz, **arrays, **({} if x_star is None else {"x_star": x_star}))
    rundir.write_file(out / "result.npz", npz.getvalue())
    graph_name = args.graph if args.graph in pdmm.TOPOLOGIES else Path(args.graph).name
    title = f"{args.problem} on {graph_name} (n={problem.n})" + (" — interrupted" if interrupted else "")
    with warnings.catch_warnings():  # matplotlib's "no positive values to log-scale" for a residual of 0
        warnings.simplefilter("ignore", UserWarning)
        plot_convergence(curves, out / "convergence.png", title)

    for label, tuning in tunings.items():
        print(_tuning_summary(label, tuning))
    for label, result in results.items():
        print(_summary(label, result, label in failures, out, rho_advice(result.params.get("rho"), problem)))
    for message in failures.values():
        print(f"pdmm-bridge solve: {message}", file=sys.stderr)
    if interrupted:
        skipped = [label for label, _, _ in specs if label not in results and label != interrupted]
        print(
            f"pdmm-bridge solve: interrupted (Ctrl-C) in {interrupted}"
            + (f", {', '.join(skipped)} not run" if skipped else "")
            + f"; what ran is in {out}",
            file=sys.stderr,
        )
        return 130
    return 1 if failures else 0


def _reference(problem, args):
    """The cvxpy solution (pdmm.reference) for --reference cvxpy, else None; its warnings (an inaccurate solution)
    one line each, and a solver that fails a RunFailure naming --reference none."""
    if args.reference != "cvxpy":
        return None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x_star = pdmm.reference(problem)
    except RuntimeError as err:
        raise RunFailure(f"{err}; rerun with --reference none to solve without it") from None
    for warning in caught if launch.speaks() else ():
        line = (str(warning.message).strip().splitlines() or [warning.category.__name__])[0]
        print(f"pdmm-bridge solve: warning: the cvxpy reference: {line}", file=sys.stderr)
    return x_star


def _solve_all(problem, specs, params, x_star, args, network):
    """({label: Result}, {label: divergence message}, label of the run Ctrl-C interrupted or None).

    Every run records every iteration: residual, objective, error (with a reference), messages and bits (and
    the privacy measures under --privacy). The runs after an interrupted one are not started."""
    results, failures = {}, {}
    history = ["residual", "objective", "messages", "bits"]
    if x_star is not None:
        history.append("error")
    if network is not None and network.privacy is not None:
        history += ["privacy_x", "privacy_messages"]
    for label, method, _ in specs:
        try:
            with warnings.catch_warnings():  # the summary line says "not converged" or "stalled" itself
                warnings.simplefilter("ignore", pdmm.ConvergenceWarning)
                results[label] = pdmm.solve(
                    problem,
                    method=method,
                    max_iter=args.iters,
                    tol=args.tol,
                    reference=x_star,
                    device=args.device,
                    dtype=DTYPES[args.dtype],
                    progress=not args.no_progress and not _rank(args),
                    network=network,
                    history=history,
                    record_every=1,
                    backend="distributed" if args.nproc > 1 else "local",
                    **params[label],
                )
        except pdmm.DivergenceError as err:
            results[label], failures[label] = err.result, str(err)
        except ValueError as err:  # what _check_methods did not foresee: still one line, bad input
            raise UsageError(f"{label}: {err}") from None
        except KeyboardInterrupt:  # before its first iteration
            return results, failures, label
        if results[label].interrupted:
            return results, failures, label
    return results, failures, None


def _method_params(args, specs):
    """{label: {"rho": ..., "theta": ..., "eta": ...}}: the spec's own values over --rho / --theta / --eta, each
    for the runs whose method takes it (rho: pdmm, qa-pdmm and admm, 1 unless given); a flag that no run takes is
    an error."""
    given = {name: getattr(args, name) for name in ("rho", "theta", "eta") if getattr(args, name) is not None}
    defaults = {"rho": 1.0, **given}
    params = {
        label: {**{name: value for name, value in defaults.items() if name in _accepted(method)}, **own}
        for label, method, own in specs
    }
    unused = [name for name in given if not any(name in p for p in params.values())]
    if unused:
        raise UsageError(f"--{unused[0]} does not apply to {', '.join(label for label, _, _ in specs)}")
    return params


def _to_tune(args, specs):
    """The labels of the runs --tune tunes: those whose method has a rho or alpha (pdmm.tuning.TUNED) and whose
    spec does not set it; a UsageError where --tune cannot run or has nothing to tune."""
    if args.tune is None:
        return []
    if args.reference == "none":
        raise UsageError("--tune measures the error against the cvxpy solution; drop --reference none")
    if args.nproc > 1:
        raise UsageError("--tune runs in this process; drop --nproc")
    if args.rho is not None:
        raise UsageError("--tune chooses rho; to fix a run's rho, give it in its spec (pdmm:rho=2)")
    labels = [
        label for label, method, own in specs if method in pdmm.tuning.TUNED and pdmm.tuning.TUNED[method] not in own
    ]
    if not labels:
        raise UsageError(
            "--tune has nothing to tune: every run sets its own rho or alpha, or has neither (gossip, chebyshev)"
        )
    return labels


def _tune(problem, label, method, params, x_star, args, network):
    """pdmm.tune for one run, with the run's other parameters fixed (its default rho left out); a grid on which
    every value diverges is a UsageError naming the run."""
    fixed = {key: value for key, value in params.items() if key != "rho"}
    try:
        return pdmm.tune(
            problem,
            method,
            reference=x_star,
            target=args.tune,
            max_iter=args.iters,
            device=args.device,
            dtype=DTYPES[args.dtype],
            network=network,
            progress=not args.no_progress,
            **fixed,
        )
    except ValueError as err:
        raise UsageError(f"--tune, {label}: {err}") from None


def _with_tuned_values(specs, params, tunings):
    """(specs, params, tunings) with each tuned run's value set and its label extended by it
    ("extra" -> "extra:alpha=0.0397"); a UsageError if that label is another run's."""
    labels, params = {label: label for label, _, _ in specs}, dict(params)
    for label, tuning in tunings.items():
        labels[label] = f"{label}:{tuning.parameter}={tuning.value:.3g}"
        params[label] = {**params[label], tuning.parameter: tuning.value}
    if len(set(labels.values())) != len(labels):
        raise UsageError(f"the tuned labels {', '.join(labels.values())} repeat a spec; drop the repeated spec")
    specs = [(labels[label], method, own) for label, method, own in specs]
    return specs, {labels[label]: p for label, p in params.items()}, {labels[label]: t for label, t in tunings.items()}


def _network(args):
    """The pdmm.Network of the network flags, or None when every one is at its default (the ideal network)."""
    given = dict(
        drop=args.drop,
        wake=args.wake,
        edge_up=args.edge_up,
        bits=args.bits,
        privacy=args.privacy,
        dither=args.dither or False,
        limit=args.limit,
        burst=args.burst,
    )
    if given == dict(drop=0.0, wake=1.0, edge_up=1.0, bits=None, privacy=None, dither=False, limit=None, burst=None):
        return None
    try:
        network = pdmm.Network(**given, seed=args.seed)
    except ValueError as err:
        flag = str(err).split()[0].replace("_", "-")
        raise UsageError(f"--{flag}: {err}") from None
    stuck = network.stuck()
    if stuck is not None:
        flag = stuck.split("=")[0].replace("_", "-")
        raise UsageError(f"--{flag}: {stuck}; no method can make progress over this network")
    return network


def _check_methods(problem, specs, params, args, network):
    """Build each run's method once, so a parameter it rejects is an error before anything is written; with
    --nproc, also what the partitioned engine does not implement."""
    parts, dtype = problem.compile(args.device, DTYPES[args.dtype]), DTYPES[args.dtype]
    curvature = local_curvature(problem)
    try:
        problem_scale(problem, dtype, curvature)
    except ValueError as err:
        raise UsageError(f"{args.problem} from {args.data or 'synthetic data'}: {err}") from None
    for label, method, _ in specs:
        if network is not None and network.privacy is not None and method == "admm":
            raise UsageError(f"{label}: --privacy perturbs the z of pdmm and qa-pdmm; it is not implemented for admm")
        values = dict(params[label])
        try:
            if not pdmm.METHODS[method].uses_rho:
                pdmm.methods.check_mixing_options(method, network=network)
            rho = values.pop("rho", None)
            algorithm = pdmm.METHODS[method](*parts, rho, **values)
            check_rho_resolved(rho, problem, dtype, curvature)
            check_steps_resolved(algorithm, problem, dtype, curvature)
            if args.nproc > 1:
                pdmm.distributed.check_supported(problem, method, args.device, network, False, values)
        except (ValueError, TypeError) as err:
            raise UsageError(f"{label}: {err}") from None
    if args.nproc > problem.n:
        raise UsageError(f"--nproc {args.nproc} is more than the graph's {problem.n} nodes")


def _rank(args):
    """This process's rank among the processes torchrun started (the group started here), else None."""
    if args.nproc == 1 or "RANK" not in os.environ:
        return None
    if not torch.distributed.is_initialized():
        launch.die_with_parent()
        with launch.rendezvous():  # of a --nproc job: Ctrl-C held while it connects
            pdmm.distributed.init_process_group()
    return torch.distributed.get_rank()


def _claim(args, rank):
    """rundir.claim(--out) in this process, or under torchrun in process 0, whose refusal every process raises
    (so that none waits for the others in a collective)."""
    if rank is None:
        return rundir.claim(args.out, "solve", args.force)
    refusal = [None]
    if rank == 0:
        try:
            rundir.claim(args.out, "solve", args.force)
        except UsageError as err:
            refusal = [str(err)]
    torch.distributed.broadcast_object_list(refusal, src=0)
    if refusal[0] is not None:
        raise UsageError(refusal[0])
    return Path(args.out)


def _launch(args):
    """Run this command again as args.nproc processes of one job (launch.launch; its --out already claimed, hence
    --force); the job's exit status. The processes read P from WORLD_SIZE."""
    return launch.launch([*args.argv, "--force"], args.nproc)


def _defaults(method):
    """The method's own parameter defaults (theta, eta), so config.json records every value used; the
    keyword-only channel is the network's (--drop ...), not a method parameter."""
    return {
        name: p.default
        for name, p in inspect.signature(pdmm.METHODS[method]).parameters.items()
        if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.KEYWORD_ONLY
    }


def _graph(args):
    """The graph of --graph: a named topology (common.build_graph), or a graph file read as a pdmm.Graph (arrays,
    no Python object per edge: pdmm.load_graph(arrays=True)), which must be connected; its warnings (self loops)
    printed as one line each."""
    if args.graph in pdmm.TOPOLOGIES or not Path(args.graph).is_file() or args.graph_param:
        return build_graph(args.graph, args.nodes, args.seed, dict(args.graph_param))  # its errors for the rest
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            G = pdmm.load_graph(args.graph, arrays=True)
    except ValueError as err:
        raise UsageError(str(err)) from None
    for warning in caught if launch.speaks() else ():
        print(f"pdmm-bridge solve: warning: {warning.message}", file=sys.stderr)
    if G.components > 1:
        raise UsageError(
            f"the graph in {args.graph} is disconnected: it has {G.components} connected components; "
            "PDMM needs a connected graph"
        )
    return G


def _problem(args, G):
    """The pdmm.Problem from --data or synthetic data; bad or missing data is a UsageError."""
    if args.data is not None and args.data.startswith(BUILTIN):
        return _builtin_problem(args, G)
    args.reg = DEFAULT_REG if args.reg is None else args.reg  # resolved for config.json
    if args.data is None:
        args.dim, args.samples = args.dim or DEFAULT_DIM, args.samples or DEFAULT_SAMPLES  # resolved for config.json
        try:  # its size checked against the memory available before anything is drawn
            data = make_data(args.problem, G.number_of_nodes(), args.dim, args.samples, args.batch, args.seed)
        except ValueError as err:
            raise UsageError(str(err)) from None
    else:
        _refuse_sizes(args)
        if not Path(args.data).is_file():
            raise UsageError(f"data file not found: {args.data}")
        if not zipfile.is_zipfile(args.data):
            raise UsageError(f"{args.data} is not an .npz archive (write one with numpy.savez)")
        try:  # every header checked before any data is read (pdmm.npz: size, compression ratio, no objects)
            data = pdmm.npz.read_npz(args.data)
        except pdmm.npz.NpzError as err:
            raise UsageError(f"could not read data file {err}") from None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            problem = make_problem(args.problem, G, data, ridge=args.ridge, lam=args.lam, reg=args.reg)
    except (ValueError, TypeError) as err:
        source = args.data or "synthetic data"
        raise UsageError(f"{args.problem} from {source}: {err}") from None
    for warning in caught if launch.speaks() else ():  # e.g. self-loops in a graph file, which PDMM ignores
        print(f"pdmm-bridge solve: warning: {warning.message}", file=sys.stderr)
    return problem


def _refuse_sizes(args):
    """A UsageError when --dim, --samples or --batch, which size synthetic data, come with --data."""
    given = [f"--{name}" for name in ("dim", "samples", "batch") if getattr(args, name) is not None]
    if given:
        raise UsageError(f"{', '.join(given)} size synthetic data; with --data the data set's shapes decide")


def _builtin_problem(args, G):
    """The problem of --data builtin:NAME (pdmm.datasets.DATASETS) on G, its rows split by --seed and --reg its
    whole weight (the data set's default when not given)."""
    name = args.data[len(BUILTIN) :]
    if name not in pdmm.datasets.DATASETS:
        raise UsageError(
            f"unknown data set {args.data!r}; choose from "
            f"{', '.join(BUILTIN + known for known in pdmm.datasets.DATASETS)}"
        )
    kind, build = pdmm.datasets.DATASETS[name]
    if args.problem != kind:
        raise UsageError(f"{args.data} is a {kind} data set; pass --problem {kind}")
    _refuse_sizes(args)
    if args.reg is None:  # resolved for config.json
        args.reg = inspect.signature(build).parameters["l2"].default
    try:
        return build(G, l2=args.reg, seed=args.seed)
    except ValueError as err:
        raise UsageError(f"{args.data}: {err}") from None


def _mean_history(history):
    """Per-iteration curves, averaged over instances for batched runs: {key: (iterations,)}."""
    return {key: values.mean(1) if values.ndim == 2 else values for key, values in history.items()}


def _final(result, key):
    """The last value of a history entry, worst instance; None when it was not recorded."""
    values = result.history.get(key)
    return None if values is None or not len(values) else float(np.max(values[-1]))


def _write_config(path, args, specs, params, G, results, failures, tunings, interrupted=None):
    resolved = {key: value for key, value in vars(args).items() if key not in ("run", "argv", "method", "compare")}
    resolved.update(graph_param=dict(args.graph_param), methods=[label for label, _, _ in specs])
    summary = {
        label: {
            "method": result.method,
            "iterations": result.iterations,
            "converged": result.converged,
            "status": "diverged" if label in failures else result.status,
            "diverged": label in failures,
            "interrupted": result.interrupted,
            "seconds": result.seconds,
            "residual": _final(result, "residual"),
            "error": _final(result, "error"),
            "messages": _final(result, "messages"),
            "bits": _final(result, "bits"),
            "params": {**_defaults(result.method), **params[label]},
            **({"tuning": _tuning_entry(tunings[label])} if label in tunings else {}),
        }
        for label, result in results.items()
    }
    interrupted = interrupted is not None or any(r.interrupted for r in results.values())  # also before an iteration
    config = {
        "version": package_version(),
        "args": resolved,
        "interrupted": interrupted,
        "graph": {"n": G.number_of_nodes(), "edges": G.number_of_edges()},
        "methods": summary,
    }
    rundir.write_file(path, json.dumps(config, indent=2) + "\n")


def _tuning_entry(tuning):
    """config.json's record of a run's tuning: the parameter, the value chosen, the rule's target and budget,
    the grid, the chosen run's iterations and error, and the seconds the grid took (tuning.csv: every run)."""
    best = tuning.best
    return {
        "parameter": tuning.parameter,
        "value": tuning.value,
        "target": tuning.target,
        "max_iter": tuning.max_iter,
        "reached": best.reached,
        "iterations": best.iterations,
        "error": best.error,
        "grid": [trial.value for trial in tuning.trials],
        "at_edge": tuning.at_edge,
        "seconds": tuning.seconds,
    }


def _write_tuning(path, tunings):
    """tuning.csv: one row per run label and grid value (TUNING_COLUMNS); iterations is where the run stopped
    (at the target, at the best iterations so far, or at --iters), error the worst instance's there (inf:
    diverged)."""
    rundir.write_csv(
        path,
        [
            TUNING_COLUMNS,
            *(
                (
                    label,
                    tuning.parameter,
                    f"{trial.value:.6g}",
                    trial.iterations,
                    int(trial.reached),
                    f"{trial.error:.6g}",
                    int(trial.diverged),
                    int(trial.value == tuning.value),
                )
                for label, tuning in tunings.items()
                for trial in tuning.trials
            ),
        ],
    )


def _tuning_summary(label, tuning):
    """extra:alpha=0.0397: tuned alpha, 15 values 0.00124..0.159: error 1e-06 in 522 iterations (6.8 s)"""
    best, grid = tuning.best, tuning.trials
    found = (
        f"error {tuning.target:g} in {best.iterations} iterations"
        if best.reached
        else f"none reached {tuning.target:g} in {tuning.max_iter} iterations; smallest error {best.error:.2g}"
    )
    edge = "; at the end of the grid" if tuning.at_edge else ""
    return (
        f"{label}: tuned {tuning.parameter}, {len(grid)} values {grid[0].value:.3g}..{grid[-1].value:.3g}: "
        f"{found}{edge} ({tuning.seconds:.1f} s)"
    )


def _write_history(path, curves, columns):
    rundir.write_csv(
        path,
        [
            ("method", "iteration", *columns),
            *(
                (label, k + 1, *(curve[c][k] if c in curve else "" for c in columns))
                for label, curve in curves.items()
                for k in range(len(curve.get("residual", ())))
            ),
        ],
    )


def _summary(label, result, diverged, out, advice=None):
    """pdmm: converged in 227 iterations (0.31 s), residual 9.1e-11, error 2.3e-10 -> runs/avg; advice (a rho far
    from the problem's curvature, pdmm.solve.rho_advice) follows the status of a run that did not converge."""
    if diverged:
        status = f"diverged at iteration {result.iterations}"
    elif result.interrupted:
        status = f"interrupted after {result.iterations} iterations"
    elif result.converged:
        status = f"converged in {result.iterations} iterations"
    elif result.stalled:
        status = f"stalled after {result.iterations} iterations (the state stopped changing short of --tol)"
    else:
        status = f"not converged after {result.iterations} iterations"
    if advice and result.status in ("max_iter", "stalled") and not diverged:
        status += f": {advice}"
    line = f"{label}: {status} ({result.seconds:.2f} s)"
    for key in ("residual", "error"):
        if _final(result, key) is not None:
            line += f", {key} {_final(result, key):.2g}"
    return f"{line} -> {out}"
