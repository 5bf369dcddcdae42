"""Pieces every pdmm-bridge command shares: the usage error, argument types, graphs, the version."""

import argparse
import math
from pathlib import Path

import torch

import pdmm

from .errors import RunFailure, UsageError, WriteError, first_line, package_version  # noqa: F401  (shared here)

tune_allocator = pdmm.tune_allocator  # moved to pdmm (pdmm.solve applies it on large runs); kept importable here


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
            raise UsageError(
                f"--graph {spec!r} is neither a topology ({', '.join(sorted(pdmm.TOPOLOGIES))}) "
                "nor an existing graph file"
            )
        if params:
            raise UsageError(f"--graph-param applies to named topologies, not to the graph file {spec}")
        return pdmm.load_graph(spec)
    except (ValueError, TypeError) as err:
        raise UsageError(str(err)) from None
