"""Argument types and defaults the commands' parsers share. It imports nothing heavy (no torch, numpy or
matplotlib), so that `pdmm-bridge COMMAND --help` and an argument error answer before any library loads
(docs/guide/runs.md, "The command line")."""

import argparse
import math

DIST_TIMEOUT = 600  # seconds a collective waits for the other processes before failing (a dead or stuck rank)
AXES = {"iteration": "iteration", "messages": "messages delivered", "bits": "bits sent"}  # plot --x: axis label
DEFAULT_METRICS = ("val_loss", "val_acc", "train_acc")  # report: the metrics tabulated when none are named


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
