"""What a report reads from a run's checkpoint, kept beside it so the run re-renders without the checkpoint.

A reproduction's report probes each trained model (bridge.probe's statistics per layer) and reads
differential attention's learned lambda per layer; both need ckpt.pt, which is megabytes and not
committed. Each time a report computes them from the checkpoint it stores them in the run's
checkpoint_stats.json; a run directory without ckpt.pt (the per-seed data committed under
docs/repro/) is read from that file instead, so `pdmm-bridge report` gives the same section either way
(docs/guide/reproduce.md, "Committed runs"). While ckpt.pt is there it is the source, and the
file follows it.

    {"probe_batches": 4, "probe": [{"phi_ratio": 0.41, ...}, ...], "lambdas": [[0.73, 0.8], ...]}
"""

import functools
import json
import math
from pathlib import Path

import torch

from attention import MultiHeadAttention
from bridge.probe import STATISTICS

from . import rundir
from .checkpoints import CHECKPOINT, load_weights
from .config import load_config
from .errors import UsageError
from .probing import probe_layers
from .runs import read_json
from .tasks import build_task

STATS_FILE = "checkpoint_stats.json"
MAX_LAYERS = 1000  # a longer list in a file is not something a report wrote


def run_probe(run, batches: int = 4) -> list[dict[str, float]] | None:
    """The run's per-layer probe statistics over `batches` batches: from its checkpoint when it has one (and then
    stored in checkpoint_stats.json), else from that file; None when neither holds them."""
    checkpoint = run.path / CHECKPOINT
    if checkpoint.is_file():
        layers = _probe_totals(str(run.path.resolve()), checkpoint.stat().st_mtime_ns, batches)
        _store(run.path, probe_batches=batches, probe=layers)
        return layers
    stored = _stored(run.path)
    return stored.get("probe") if stored.get("probe_batches") == batches else None


def run_lambdas(run) -> list[tuple[float, float]]:
    """Differential attention's (learned lambda, lambda_init) per layer: from the checkpoint when the run has one
    (and then stored in checkpoint_stats.json), else from that file; [] for other kernels or without either."""
    checkpoint = run.path / CHECKPOINT
    if checkpoint.is_file():
        values = _lambdas(str(run.path.resolve()), checkpoint.stat().st_mtime_ns)
        if values:
            _store(run.path, lambdas=[list(pair) for pair in values])
        return values
    return [tuple(pair) for pair in _stored(run.path).get("lambdas", [])]


@functools.cache
def _probe_totals(path: str, mtime: int, batches: int) -> list[dict[str, float]]:
    return probe_layers(path, batches)[1]


@functools.cache
def _lambdas(path: str, mtime: int) -> list[tuple[float, float]]:
    config = load_config(rundir.inside(Path(path) / "config.toml"))
    if config.model.attention.kernel != "diff":
        return []
    model = build_task(config).build_model()
    load_weights(model, Path(path) / CHECKPOINT)
    with torch.no_grad():
        return [(float(m.diff_lambda()), m.lambda_init) for m in model.modules() if isinstance(m, MultiHeadAttention)]


def _store(run_dir: Path, **values) -> None:
    """Merge `values` into the run's checkpoint_stats.json, writing only when something changes."""
    stored = _stored(run_dir)
    merged = {**stored, **values}
    if merged != stored:
        rundir.write_file(run_dir / STATS_FILE, json.dumps(merged, indent=2) + "\n")


def _stored(run_dir: Path) -> dict:
    """The run's checkpoint_stats.json, checked ({} when absent); UsageError naming the file when malformed."""
    file = run_dir / STATS_FILE
    data = read_json(file)
    if data is None:
        return {}
    problem = _problem(data)
    if problem:
        raise UsageError(f"{file}: {problem}; delete it and report again from the run's checkpoint")
    return data


def _problem(data) -> str | None:
    """What is wrong with a checkpoint_stats.json's content, None when it has the shape _store writes."""
    if not isinstance(data, dict) or set(data) - {"probe_batches", "probe", "lambdas"}:
        return "expected an object with probe_batches, probe and lambdas only"
    batches, probe, lambdas = data.get("probe_batches"), data.get("probe"), data.get("lambdas", [])
    if (probe is None) != (batches is None):
        return "probe and probe_batches come together"
    if batches is not None and not (type(batches) is int and batches >= 1):
        return f"probe_batches must be a positive integer, got {batches!r}"
    if probe is not None and not (
        isinstance(probe, list)
        and len(probe) <= MAX_LAYERS
        and all(isinstance(layer, dict) and set(layer) <= set(STATISTICS) for layer in probe)
        and all(_number(value) for layer in probe for value in layer.values())
    ):
        return f"probe must be a list of at most {MAX_LAYERS} objects of {', '.join(STATISTICS)} numbers"
    if not (
        isinstance(lambdas, list)
        and len(lambdas) <= MAX_LAYERS
        and all(isinstance(pair, list) and len(pair) == 2 and all(map(_number, pair)) for pair in lambdas)
    ):
        return f"lambdas must be a list of at most {MAX_LAYERS} [lambda, lambda_init] number pairs"
    return None


def _number(value) -> bool:
    """A JSON number (NaN allowed: a statistic undefined for a layer), not a bool or an infinity."""
    return type(value) in (int, float) and not math.isinf(value)
