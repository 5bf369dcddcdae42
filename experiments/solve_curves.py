"""The curves of solve directories as `pdmm-bridge plot` draws them: labelled per directory and method, with the
cumulative messages delivered or bits sent where the x axis asks for them, and the title the runs share
(docs/guide/solve_cli.md).
"""

from pathlib import Path
from typing import Any

import numpy as np

import pdmm

from .errors import UsageError

Curve = dict[str, Any]  # {"residual": (iterations,), "error": ..., "objective": ..., "messages": ..., "bits": ...}


def solve_curves(runs: list[Any], axes: str | tuple[str, ...]) -> dict[str, Curve]:
    """Every method's curve of every solve directory, labelled "<directory>: <method>" when there are several.

    Parameters
    ----------
    runs : list of SolveRun
        The solve directories, read (runs.load_solve).
    axes : str or tuple of str
        The x axes drawn: iteration, messages, bits.

    Returns
    -------
    dict
        {label: curve with the cumulative counts `axes` need}.

    Raises
    ------
    UsageError
        When a run records no count an axis needs.
    """
    return {
        (f"{run.path.name}: {label}" if len(runs) > 1 else label): with_counts(run, label, curve, axes)
        for run in runs
        for label, curve in run.curves.items()
    }


def solves_title(runs: list[Any]) -> str:
    """The problem the runs share, with its built-in data set and its graph when those are shared too.

    Parameters
    ----------
    runs : list of SolveRun
        The solve directories, read.

    Returns
    -------
    str
        e.g. "logistic, builtin:breast_cancer, random_geometric graph of 20 nodes"; "solve runs" for mixed
        problems.
    """
    settings = {
        tuple(run.config.get("args", {}).get(key) for key in ("problem", "data", "graph"))
        + (run.config.get("graph", {}).get("n"),)
        for run in runs
    }
    problems = {problem for problem, *_ in settings}
    if len(problems) != 1 or None in problems:
        return "solve runs"
    if len(settings) > 1:
        return problems.pop()
    problem, data, graph, n = settings.pop()
    shown = [problem, *([data] if data and data.startswith("builtin:") else [])]
    if graph is not None and n is not None:
        shown.append(f"{Path(graph).name} graph of {n} nodes")
    return ", ".join(shown)


def with_counts(run: Any, label: str, curve: Curve, axes: str | tuple[str, ...]) -> Curve:
    """The curve with its cumulative counts for each of `axes` that is "messages" or "bits".

    Parameters
    ----------
    run : SolveRun
        The solve directory, read.
    label : str
        The method's label in it.
    curve : dict
        Its curve.
    axes : str or tuple of str
        One axis name or several.

    Returns
    -------
    dict
        The curve, with the counts added (with_count).

    Raises
    ------
    UsageError
        When the run records no count an axis needs.
    """
    for x in [axes] if isinstance(axes, str) else axes:
        curve = with_count(run, label, curve, x)
    return curve


def with_count(run: Any, label: str, curve: Curve, x: str) -> Curve:
    """The curve with its cumulative `x` ("messages" or "bits"): from history.csv, or, for an ideal-network run,
    config.json's total spread evenly over the iterations that send (all but the method's silent first rounds:
    NIDS's first step is local).

    Parameters
    ----------
    run : SolveRun
        The solve directory, read.
    label : str
        The method's label in it.
    curve : dict
        Its curve.
    x : str
        iteration (the curve as is), messages or bits.

    Returns
    -------
    dict

    Raises
    ------
    UsageError
        When config.json records no total (written by an older pdmm-bridge solve).
    """
    if x == "iteration" or x in curve:
        return curve
    entry = run.config.get("methods", {}).get(label, {})
    total = entry.get(x)
    if total is None:
        raise UsageError(f"{run.path} records no {x} for {label} (written by an older pdmm-bridge solve)")
    method: Any = pdmm.METHODS.get(entry.get("method"))
    silent = method.capabilities.silent_rounds if method else 0
    rounds = np.maximum(np.arange(1, len(curve["residual"]) + 1) - silent, 0)
    return {**curve, x: total * rounds / max(rounds[-1], 1)}
