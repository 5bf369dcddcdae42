"""What `pdmm-bridge solve` writes and prints: config.json, tuning.csv, history.csv and result.npz as text or rows,
the figure's title, and the summary lines (docs/guide/solve.md).

Nothing here writes a file: the command writes what these functions return through experiments/rundir.py.
"""

import argparse
import inspect
import io
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import pdmm
from pdmm.solve import rho_advice

from .errors import package_version

HISTORY_COLUMNS = ("residual", "objective", "error")
NETWORK_COLUMNS = ("messages", "bits", "privacy_x", "privacy_messages")
TUNING_COLUMNS = ("method", "parameter", "value", "iterations", "reached", "error", "diverged", "chosen")

Spec = tuple[str, str, dict[str, Any]]  # (label, method, the spec's own parameters)


def method_defaults(method: str) -> dict[str, Any]:
    """The parameter defaults of a method's constructor (theta, eta, mixing, ...), so config.json records every
    value used (docs/guide/solve_cli.md).

    The keyword-only channel is the network's (--drop ...), not a method parameter.

    Parameters
    ----------
    method : str
        A name in pdmm.METHODS.

    Returns
    -------
    dict
        {parameter name: default} of the constructor's parameters that have one.
    """
    return {
        name: p.default
        for name, p in inspect.signature(pdmm.METHODS[method]).parameters.items()
        if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.KEYWORD_ONLY
    }


def mean_history(history: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-iteration curves, averaged over instances for batched runs.

    Parameters
    ----------
    history : dict
        A Result's history: {key: (iterations,) or (iterations, instances)}.

    Returns
    -------
    dict
        {key: (iterations,)}.
    """
    return {key: values.mean(1) if values.ndim == 2 else values for key, values in history.items()}


def final(result: Any, key: str) -> float | None:
    """The last value of a history entry, worst instance (the one convergence waits for).

    Parameters
    ----------
    result : pdmm.Result
        A run's result.
    key : str
        A history key (residual, error, messages, bits, ...).

    Returns
    -------
    float or None
        max over instances of the last recorded value; None when it was not recorded.
    """
    values = result.history.get(key)
    return None if values is None or not len(values) else float(np.max(values[-1]))


def config_text(
    args: argparse.Namespace,
    specs: Sequence[Spec],
    params: dict[str, dict[str, Any]],
    graph: dict[str, int],
    results: dict[str, Any],
    failures: dict[str, str],
    tunings: dict[str, Any],
    interrupted: str | None = None,
    shards: dict[str, Any] | None = None,
) -> str:
    """config.json: the resolved arguments, the version, the graph's size, each run's summary and tuning, and with
    --shards the shard directory's manifest (its parts' sha256s among its fields).

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments, resolved (dim, samples and reg set).
    specs : sequence of (label, method, params)
        The runs, labelled as run (a tuned run's label holds its value).
    params : dict
        {label: the parameters the run was given}.
    graph : dict
        The graph's size: {"n": nodes, "edges": undirected edges} (graph_size).
    results : dict
        {label: pdmm.Result} of the runs that ran.
    failures : dict
        {label: divergence message} of the runs that diverged.
    tunings : dict
        {label: pdmm.tuning.Tuning} of the tuned runs.
    interrupted : str or None
        The label of the run Ctrl-C interrupted, None when none was.
    shards : dict or None
        With --shards, {"dir": the directory, and the manifest's fields} (experiments/solve_shards.py, record).

    Returns
    -------
    str
        The JSON text, indented by 2, with a final newline.
    """
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
            "residual": final(result, "residual"),
            "error": final(result, "error"),
            "messages": final(result, "messages"),
            "bits": final(result, "bits"),
            "params": {**method_defaults(result.method), **params[label]},
            **({"tuning": tuning_entry(tunings[label])} if label in tunings else {}),
        }
        for label, result in results.items()
    }
    stopped = interrupted is not None or any(r.interrupted for r in results.values())  # also before an iteration
    config = {
        "version": package_version(),
        "args": resolved,
        "interrupted": stopped,
        "graph": graph,
        "methods": summary,
        **({"shards": shards} if shards is not None else {}),
    }
    return json.dumps(config, indent=2) + "\n"


def graph_size(G: Any) -> dict[str, int]:
    """config.json's "graph" of a graph solved whole: {"n": its nodes, "edges": its undirected edges}.

    Parameters
    ----------
    G : networkx.Graph or pdmm.Graph
        The graph.

    Returns
    -------
    dict
    """
    return {"n": G.number_of_nodes(), "edges": G.number_of_edges()}


def tuning_entry(tuning: Any) -> dict[str, Any]:
    """config.json's record of a run's tuning (tuning.csv holds every run of the grid).

    Parameters
    ----------
    tuning : pdmm.tuning.Tuning
        What pdmm.tune returned.

    Returns
    -------
    dict
        The parameter, the value chosen, the rule's target and budget, the grid, the chosen run's iterations and
        error, whether the value is at the grid's end, and the seconds the grid took.
    """
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


def tuning_rows(tunings: dict[str, Any]) -> list[Sequence[Any]]:
    """tuning.csv: a header (TUNING_COLUMNS), then one row per run label and grid value.

    Parameters
    ----------
    tunings : dict
        {label: pdmm.tuning.Tuning}.

    Returns
    -------
    list of rows
        iterations is where the run stopped (at the target, at the best iterations so far, or at --iters), error
        the worst instance's there (inf: diverged), chosen 1 for the value the run took.
    """
    return [
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
    ]


def history_rows(curves: dict[str, dict[str, np.ndarray]], columns: Sequence[str]) -> list[Sequence[Any]]:
    """history.csv: a header (method, iteration, `columns`), then one row per run and iteration.

    Parameters
    ----------
    curves : dict
        {label: mean_history of the run's history}.
    columns : sequence of str
        The history keys to write; a key a run did not record is left empty.

    Returns
    -------
    list of rows
    """
    return [
        ("method", "iteration", *columns),
        *(
            (label, k + 1, *(curve[c][k] if c in curve else "" for c in columns))
            for label, curve in curves.items()
            for k in range(len(curve.get("residual", ())))
        ),
    ]


def history_columns(curves: dict[str, dict[str, np.ndarray]], network: Any) -> tuple[str, ...]:
    """The columns of history.csv: HISTORY_COLUMNS, and over a simulated network the NETWORK_COLUMNS some run
    recorded.

    Parameters
    ----------
    curves : dict
        {label: mean_history of the run's history}.
    network : pdmm.Network or None
        The simulated network, None for the ideal one.

    Returns
    -------
    tuple of str
    """
    counted = () if network is None else [c for c in NETWORK_COLUMNS if any(c in curve for curve in curves.values())]
    return (*HISTORY_COLUMNS, *counted)


def npz_bytes(results: dict[str, Any], x_star: np.ndarray | None) -> bytes:
    """result.npz: x_<label> of every run, and x_star with a reference.

    Parameters
    ----------
    results : dict
        {label: pdmm.Result}.
    x_star : ndarray or None
        The cvxpy solution, None without a reference.

    Returns
    -------
    bytes
        The archive, as numpy.savez writes it.
    """
    arrays: dict[str, Any] = {f"x_{label}": result.x for label, result in results.items()}
    if x_star is not None:
        arrays["x_star"] = x_star
    npz = io.BytesIO()
    np.savez(npz, **arrays)
    return npz.getvalue()


def title(args: argparse.Namespace, n: int, interrupted: str | None) -> str:
    """The figure's title: "least_squares on random_geometric (n=100)" (with --shards "least_squares on shards
    DIR (n=100)", n the manifest's), " — interrupted" after it when Ctrl-C stopped a run.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (problem, graph, shards).
    n : int
        The number of nodes of the whole graph.
    interrupted : str or None
        The label of the interrupted run, None when none was.

    Returns
    -------
    str
    """
    if args.shards is not None:
        graph_name = f"shards {Path(args.shards).name}"
    else:
        graph_name = args.graph if args.graph in pdmm.TOPOLOGIES else Path(args.graph).name
    return f"{args.problem} on {graph_name} (n={n})" + (" — interrupted" if interrupted else "")


def tuning_summary(label: str, tuning: Any) -> str:
    """The line a tuned run prints, e.g.
    "extra:alpha=0.0397: tuned alpha, 15 values 0.00124..0.159: error 1e-06 in 522 iterations (6.8 s)".

    Parameters
    ----------
    label : str
        The run's label, its tuned value included.
    tuning : pdmm.tuning.Tuning
        What pdmm.tune returned.

    Returns
    -------
    str
    """
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


def summary_line(label: str, result: Any, diverged: bool, out: Path | str, advice: str | None = None) -> str:
    """The line a run prints, e.g. "pdmm: converged in 227 iterations (0.31 s), residual 9.1e-11, error 2.3e-10 ->
    runs/avg".

    Parameters
    ----------
    label : str
        The run's label.
    result : pdmm.Result
        Its result.
    diverged : bool
        Whether it diverged.
    out : Path or str
        The output directory.
    advice : str or None
        A rho far from the problem's curvature (pdmm.solve.rho_advice; docs/guide/solve.md), said after the
        status of a run that did not converge.

    Returns
    -------
    str
    """
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
        value = final(result, key)
        if value is not None:
            line += f", {key} {value:.2g}"
    return f"{line} -> {out}"


def print_summary(
    out: Path,
    problem: Any,
    specs: Iterable[Spec],
    results: dict[str, Any],
    failures: dict[str, str],
    tunings: dict[str, Any],
    interrupted: str | None,
) -> int:
    """Print each tuning's line and each run's line to stdout, the divergences and an interruption to stderr.

    Parameters
    ----------
    out : Path
        The output directory.
    problem : pdmm.Problem or None
        The problem solved (for rho_advice, which reads the whole graph); None for a part of one (--shards): no
        advice.
    specs : iterable of (label, method, params)
        Every run asked for, in order (those after an interrupted one did not run).
    results : dict
        {label: pdmm.Result} of the runs that ran.
    failures : dict
        {label: divergence message}.
    tunings : dict
        {label: pdmm.tuning.Tuning}.
    interrupted : str or None
        The label of the run Ctrl-C interrupted.

    Returns
    -------
    int
        The command's exit status: 130 when interrupted, 1 when a run diverged, else 0.
    """
    for label, tuning in tunings.items():
        print(tuning_summary(label, tuning))
    for label, result in results.items():
        advice = None if problem is None else rho_advice(result.params.get("rho"), problem)
        print(summary_line(label, result, label in failures, out, advice))
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
