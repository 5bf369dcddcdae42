"""The options of `pdmm-bridge compare` that decide its numbers: the transformer rows they ask for, and the command
line that records them in compare.json and compare.md (docs/guide/bridge.md, "The recorded command"). Imports
nothing heavy, so that `pdmm-bridge compare --help` answers at once."""

import argparse
import shlex
from typing import Any

from .errors import UsageError

RowSpec = tuple[str, dict[str, Any], list[str]]  # a transformer row: (label, run-name assignment, config overrides)

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


def variants(text: str, flag: str) -> list[str]:
    """The names of a comma-separated `flag` ("standard,belief"; "none" for none); a repeated name is a UsageError."""
    names = [r.strip() for r in text.split(",") if r.strip() and r.strip() != "none"]
    if len(set(names)) != len(names):
        raise UsageError(f"{flag} lists a variant twice: {text!r}")
    return names


def widths(text: str) -> list[int]:
    """The widths of --widths: integers >= 2 (a key and a value), else a UsageError."""
    try:
        values = [int(w) for w in variants(text, "--widths")]
    except ValueError:
        raise UsageError(f"--widths expects integers >= 2 separated by commas, got {text!r}") from None
    if any(w < 2 for w in values):
        raise UsageError(f"--widths expects integers >= 2 (a key and a value), got {text!r}")
    return values


def row_specs(args: argparse.Namespace) -> list[RowSpec]:
    """The transformer rows, untied (--residuals), tied (--tied) and width-limited (--widths), in that order, each
    labelled by bridge.comparison.rows.transformer (what row_of reads back)."""
    from bridge.comparison.rows import transformer  # torch: imported only to run (--help answers without it)

    rows = [
        (
            transformer(r, None, tied=tied).label,
            {"model.residual": r, "task.tied": tied},
            [f"model.residual={r}", f"task.tied={str(tied).lower()}"],
        )
        for tied, flag in ((False, "--residuals"), (True, "--tied"))
        for r in variants(args.tied if tied else args.residuals, flag)
    ]
    r = args.width_residual
    return rows + [
        (
            transformer(r, None, width=w).label,
            {"model.residual": r, "task.tied": False, "width": w},
            [f"model.residual={r}", "task.tied=false", f"model.send_width={w}", "model.n_head=1"],
        )
        for w in widths(args.widths)
    ]
