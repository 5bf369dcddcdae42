"""Pieces every pdmm-bridge command shares: the usage error, argument types, graphs, the version."""
import argparse
import math
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

import pdmm


class UsageError(Exception):
    """Bad input from the command line; the CLI prints it as one `error:` line and exits with code 2."""


class RunFailure(Exception):
    """A failure while running on good input (a full disk, a dead process); the CLI prints it as one
    `error:` line and exits with code 1."""


class WriteError(RunFailure):
    """A file could not be written (disk full, read-only directory, file size limit); what it replaced is intact."""


tune_allocator = pdmm.tune_allocator  # moved to pdmm (pdmm.solve applies it on large runs); kept importable here


def first_line(err: BaseException) -> str:
    """The first non-empty line of err's message, or its type's name where it has none (a bare MemoryError)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def package_version():
    """The installed pdmm-bridge version, or "unknown" when running from an uninstalled checkout."""
    try:
        return version("pdmm-bridge")
    except PackageNotFoundError:
        return "unknown"


def positive(kind):
    """An argparse type: `kind(text)` that must be finite and > 0."""
    def parse(text):
        value = kind(text)
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be > 0 and finite, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names it in "invalid int value: 'x'"
    return parse


def number(text):
    """An int if `text` is one, else a float ("3" -> 3, "0.2" -> 0.2)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def key_value(text):
    """An argparse type for KEY=VALUE with a numeric VALUE: returns (KEY, number)."""
    key, sep, value = text.partition("=")
    if not (sep and key):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, number(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the value of {key} must be a number, got {value!r}") from None


def device(text):
    """An argparse type: a torch device name that this machine has ("cpu", "cuda", "cuda:1")."""
    try:
        parsed = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"not a torch device: {text!r}") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text} requested but CUDA is not available on this machine")
    return text


def build_graph(spec, n, seed, params):
    """pdmm.topology(spec, n, seed, **params) for a topology name, else pdmm.load_graph(spec) for a file."""
    try:
        if spec in pdmm.TOPOLOGIES:
            return pdmm.topology(spec, n, seed=seed, **params)
        if not Path(spec).is_file():
            raise UsageError(f"--graph {spec!r} is neither a topology ({', '.join(sorted(pdmm.TOPOLOGIES))}) "
                             "nor an existing graph file")
        if params:
            raise UsageError(f"--graph-param applies to named topologies, not to the graph file {spec}")
        return pdmm.load_graph(spec)
    except (ValueError, TypeError) as err:
        raise UsageError(str(err)) from None
