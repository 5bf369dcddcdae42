"""pdmm-bridge probe: per-layer consensus discrepancy of a trained run, next to PDMM's residual.

    pdmm-bridge probe runs/shakespeare

Loads the run's checkpoint and runs --batches batches of the task's data through it with every
attention layer's probes on; bridge.probe computes per layer ||V - gamma MH|| / ||V|| (AttentionX's
Phi, gamma of the run, 1 if unset), ||MH - alpha V|| / ||MH|| (belief's Delta) and cos(update,
token). The figure shows the three curves against layer beside PDMM's constraint residual against
iteration (averaging on a 64-node random geometric graph, normalised by its first value). Writes
probe.json and probe.png into the run directory (or --out).
"""
import argparse
import json
from pathlib import Path

import torch
from matplotlib.figure import Figure

from bridge.probe import pdmm_residual, probe_model

from .common import UsageError, check_new_file
from .config import load_config
from .tasks import build_task
from .train import CHECKPOINT, step_generator

PROBE_STREAM = 3  # generator stream of probe batches (0: training, 1: evaluation, 2: samples)


def add_parser(subparsers):
    parser = subparsers.add_parser("probe", help="per-layer discrepancy of a trained run vs PDMM's residual",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with config.toml and ckpt.pt")
    parser.add_argument("--batches", type=int, default=4, help="batches to average over")
    parser.add_argument("--out", help="directory for probe.json and probe.png (default RUN_DIR)")
    parser.add_argument("--force", action="store_true", help="replace an existing probe.json / probe.png")
    return parser


def run(args):
    run_dir = Path(args.run_dir)
    config, totals = probe_layers(run_dir, args.batches)
    residual = pdmm_residual(len(totals))
    out = Path(args.out) if args.out else run_dir
    for name in ("probe.json", "probe.png"):
        check_new_file(out / name, args.force)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot write to {out}: {err.strerror or err}") from None
    record = {"run": str(run_dir), "residual": config.model.residual, "layers": totals,
              "pdmm_residual_normalised": residual}
    (out / "probe.json").write_text(json.dumps(record, indent=2) + "\n")
    plot_probe(totals, residual, config.model.residual, out / "probe.png")
    for index, total in enumerate(totals, start=1):
        print(f"layer {index}: " + ", ".join(f"{k} {v:.3f}" for k, v in total.items()))
    print(out / "probe.png")
    return 0


def probe_layers(run_dir, batches=4):
    """(config, [{phi_ratio, delta_ratio, cos_update} per layer]) of the run's checkpoint, over `batches` batches."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.toml").is_file():
        raise UsageError(f"{run_dir} is not a run directory (no config.toml)")
    if not (run_dir / CHECKPOINT).is_file():
        raise UsageError(f"{run_dir} has no {CHECKPOINT} to probe; train it first (or let it reach a checkpoint)")
    if batches < 1:
        raise UsageError("--batches must be >= 1")
    config = load_config(run_dir / "config.toml")
    task = build_task(config)
    torch.manual_seed(config.train.seed)
    model = task.build_model()
    model.load_state_dict(torch.load(run_dir / CHECKPOINT, map_location="cpu", weights_only=False)["model"])
    model.eval()
    if getattr(model, "tied", False):
        raise UsageError(f"{run_dir} is a tied GraphTransformer: one block serves every layer, so its probes "
                         "cannot be told apart by layer")
    gamma = config.model.gamma if config.model.residual == "attentionx" else 1.0
    totals = probe_model(model, lambda b: task.loss(model, task.train_batch(step_generator(config.train.seed, b,
                                                                                           PROBE_STREAM))),
                         batches, gamma)
    return config, totals


def plot_probe(totals, residual, name, path):
    fig = Figure(figsize=(10, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    layers = range(1, len(totals) + 1)
    for key, label in (("phi_ratio", "||V - gamma MH|| / ||V||"), ("delta_ratio", "||Delta|| / ||MH||"),
                       ("cos_update", "cos(update, token)")):
        left.plot(layers, [t[key] for t in totals], "o-", label=label)
    left.set(xlabel="layer", title=f"attention ({name} run)")
    right.plot(range(1, len(residual) + 1), residual, "o-", color="black", label="PDMM residual / first")
    right.set(xlabel="iteration", yscale="log", title="PDMM, averaging on a 64-node graph")
    for ax in (left, right):
        ax.grid(True, alpha=0.4)
        ax.legend()
    fig.savefig(path, dpi=120)
