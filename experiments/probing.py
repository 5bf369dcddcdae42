"""Probing a trained run: its checkpoint's per-layer statistics (bridge.probe) on its own training batches, for
the probe command and the reproductions' probe claims."""

from pathlib import Path

import torch

from attention import uses_knob
from bridge.probe import probe_model

from . import rundir
from .checkpoints import CHECKPOINT, load_weights
from .config import load_config
from .errors import UsageError
from .tasks import build_task
from .train import step_generator

PROBE_STREAM = 3  # generator stream of probe batches (0: training, 1: evaluation, 2: samples)


def probe_layers(run_dir, batches=4):
    """(config, [{statistic: value} per layer]) of the run's checkpoint (bridge.probe.STATISTICS).

    The statistics are averaged over `batches` batches."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.toml").is_file():
        raise UsageError(f"{run_dir} is not a run directory (no config.toml)")
    if not (run_dir / CHECKPOINT).is_file():
        raise UsageError(f"{run_dir} has no {CHECKPOINT} to probe; train it first (or let it reach a checkpoint)")
    if batches < 1:
        raise UsageError("--batches must be >= 1")
    config = load_config(rundir.inside(run_dir / "config.toml"))
    task = build_task(config)
    torch.manual_seed(config.train.seed)
    model = task.build_model()
    load_weights(model, run_dir / CHECKPOINT)
    model.eval()
    if getattr(model, "tied", False):
        raise UsageError(
            f"{run_dir} is a tied GraphTransformer: one block serves every layer, so its probes "
            "cannot be told apart by layer"
        )
    totals = probe_model(
        model,
        lambda b: task.loss(model, task.train_batch(step_generator(config.train.seed, b, PROBE_STREAM))),
        batches,
        probe_gamma(config.model.attention),
    )
    return config, totals


def probe_gamma(attention) -> float:
    """The gamma of Phi = V - gamma MH in the probe statistics: the run's gamma where its residual reads gamma
    (attention.RESIDUAL_TABLE; AttentionX), else 1 (docs/guide/bridge.md, "Discrepancy against depth")."""
    return attention.gamma if uses_knob(attention.residual, "gamma") else 1.0
