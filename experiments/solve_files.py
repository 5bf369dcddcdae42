"""What process 0 of `pdmm-bridge solve` writes into --out besides x's part files, and the summary it prints
(docs/guide/solve_cli.md): config.json, tuning.csv, history.csv, result.npz and convergence.png, each through
experiments/rundir.py (recorded in --out's marker, never half a file), from what experiments/solve_outputs.py makes.
"""

import argparse
import warnings
from pathlib import Path
from typing import Any

from . import rundir, solve_outputs


def write_outputs(
    args: argparse.Namespace,
    out: Path,
    config: str,
    ran: tuple,
    network: Any,
    n: int,
    problem: Any = None,
    npz: bytes | None = None,
) -> int:
    """Write config.json (the text `config`), tuning.csv (where a run was tuned), history.csv, result.npz (the bytes
    `npz`; none with --shards) and convergence.png into `out`, then print the summary.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (problem, graph, shards: the figure's title).
    out : Path
        The output directory, claimed by this process.
    config : str
        config.json's text (solve_outputs.config_text).
    ran : tuple
        (specs, results, failures, tunings, interrupted) of the runs, as solve_runs.solve_all and the tuning give
        them.
    network : pdmm.Network or None
        The simulated network (history.csv's columns).
    n : int
        The whole graph's node count (the title's).
    problem : pdmm.Problem or None
        The whole problem, for the summary's rho advice; None with --shards (no process holds it: no advice).
    npz : bytes or None
        result.npz's bytes (solve_outputs.npz_bytes); None writes none.

    Returns
    -------
    int
        The command's exit status (solve_outputs.print_summary).
    """
    from .plots import plot_convergence  # matplotlib: imported only to draw

    specs, results, failures, tunings, interrupted = ran
    curves = {label: solve_outputs.mean_history(result.history) for label, result in results.items()}
    rundir.write_file(out / "config.json", config)
    if tunings:
        rundir.write_csv(out / "tuning.csv", solve_outputs.tuning_rows(tunings))
    rundir.write_csv(
        out / "history.csv", solve_outputs.history_rows(curves, solve_outputs.history_columns(curves, network))
    )
    if npz is not None:
        rundir.write_file(out / "result.npz", npz)
    with warnings.catch_warnings():  # matplotlib's "no positive values to log-scale" for a residual of 0
        warnings.simplefilter("ignore", UserWarning)
        plot_convergence(curves, out / "convergence.png", solve_outputs.title(args, n, interrupted))
    return solve_outputs.print_summary(out, problem, specs, results, failures, tunings, interrupted)
