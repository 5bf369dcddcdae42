"""The options of `pdmm-bridge compare` that decide its numbers, and the command line that records them in
compare.json and compare.md (docs/guide/bridge.md, "The recorded command"). Imports nothing heavy, so that
`pdmm-bridge compare --help` answers at once."""

import argparse
import shlex

COUNTS = {  # compare's integer options: (default, help)
    "test_graphs": (8, "held-out graphs per set and seed"),
    "tune_graphs": (
        8,
        "training-family graphs per seed for tuning the classical rows and fitting the full-batch ones (as many as "
        "the transformers' task.val_graphs by default)",
    ),
    "val_graphs": (8, "training-family graphs per seed on which every choice between rows is made"),
    "learned_steps": (
        2000,
        "cap on the Adam steps of learned PDMM (it stops earlier when its validation loss plateaus)",
    ),
    "finetune_steps": (2000, "the same cap for the PDMM-transformers (each depth stage of the tied one)"),
}
RECORDED = ("residuals", "tied", "widths", "width_residual", "seeds", "rounds", *COUNTS)  # flags, after the config
NOT_RECORDED = ("source", "out", "results", "readme", "force", "no_progress", "log")  # where outputs go, what is shown


def command_line(args: argparse.Namespace, seeds: list[int]) -> str:
    """The command that reproduces the comparison, as compare.json and compare.md record it: the config, every
    option of RECORDED with its value (defaults included, so a later change of a default does not change what
    the command means) and every --set, shell-quoted. The options of NOT_RECORDED choose where the outputs go
    and what is printed, not the numbers, and are left out; parsed again by the compare parser, the command gives
    `args` back on every other option (tests/test_cli.py).

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments.
    seeds : list of int
        The seeds (grid.parse_seeds of args.seeds).

    Returns
    -------
    str
    """
    values = {**vars(args), "seeds": ",".join(map(str, seeds))}
    words = ["pdmm-bridge", "compare", str(args.config)]
    for dest in RECORDED:
        words += [f"--{dest.replace('_', '-')}", str(values[dest])]
    for override in args.overrides:
        words += ["--set", override]
    return shlex.join(words)
