"""Pieces every pdmm-bridge command shares that need torch: the device argument and graphs (the error classes and
the version are experiments/errors.py's, the argument types that need no torch experiments/options.py's)."""

import argparse
from pathlib import Path

import torch

import pdmm

from .errors import UsageError


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
