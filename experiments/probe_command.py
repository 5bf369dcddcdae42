"""pdmm-bridge probe: per-layer consensus discrepancy of a trained run, next to PDMM's residual.

    pdmm-bridge probe runs/shakespeare

Loads the run's checkpoint, turns on every attention layer's probes and runs --batches batches
of the task's data. Per layer l, averaged over tokens (MATH.md 5):

    phi_ratio    ||V - gamma MH|| / ||V||      AttentionX's discrepancy Phi (gamma of the run, 1 if unset)
    delta_ratio  ||MH - alpha V|| / ||MH||     belief's discrepancy Delta, alpha per token
    cos_update   cos(update, token)            the layer's update against the token (residual stream) it is added to

whatever the run's residual signal, so runs are comparable. The AttentionX paper argues the
discrepancy shrinks with depth, as PDMM's residual does with iterations; the figure shows the
three curves against layer beside PDMM's constraint residual against iteration (averaging on a
64-node random geometric graph, normalised by its first value). Writes probe.json and probe.png
into the run directory (or --out).
"""
import argparse
import json
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

import pdmm
from attention import MultiHeadAttention
from attention.mha import orthogonal_part

from .common import UsageError
from .config import load_config
from .tasks import build_task
from .train import CHECKPOINT, step_generator

PROBE_STREAM = 3  # generator stream of probe batches (0: training, 1: evaluation, 2: samples)


def add_parser(subparsers):
    parser = subparsers.add_parser("probe", help="per-layer discrepancy of a trained run vs PDMM's residual",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with config.toml and ckpt.pt")
    parser.add_argument("--batches", type=int, default=4, help="batches to average over (default 4)")
    parser.add_argument("--out", help="directory for probe.json and probe.png (default RUN_DIR)")
    return parser


def norm_ratio(a, b):
    """mean over tokens of ||a_i|| / ||b_i|| (tokens where b_i = 0 left out)."""
    a, b = a.norm(dim=-1), b.norm(dim=-1)
    keep = b > 0
    return float((a[keep] / b[keep]).mean())


def layer_statistics(probes, gamma):
    mh, v, x, y = probes["mh"], probes["v"], probes["token"], probes["update"]
    return {"phi_ratio": norm_ratio(v - gamma * mh, v), "delta_ratio": norm_ratio(orthogonal_part(mh, v), mh),
            "cos_update": float(torch.nn.functional.cosine_similarity(y, x, dim=-1).mean())}


def run(args):
    run_dir = Path(args.run_dir)
    config, totals = probe_layers(run_dir, args.batches)
    residual = pdmm_residual(len(totals))
    out = Path(args.out) if args.out else run_dir
    out.mkdir(parents=True, exist_ok=True)
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
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    for layer in layers:
        layer.config.probe = True
    gamma = config.model.gamma if config.model.residual == "attentionx" else 1.0
    totals = [dict.fromkeys(("phi_ratio", "delta_ratio", "cos_update"), 0.0) for _ in layers]
    with torch.no_grad():
        for b in range(batches):
            task.loss(model, task.train_batch(step_generator(config.train.seed, b, PROBE_STREAM)))
            for total, layer in zip(totals, layers):
                for key, value in layer_statistics(layer.probes, gamma).items():
                    total[key] += value / batches
    return config, totals


def pdmm_residual(iterations):
    """PDMM's constraint residual per iteration / its first value (averaging, 64-node random geometric graph)."""
    G = pdmm.topology("random_geometric", n=64, seed=0)
    a = np.random.default_rng(0).normal(size=(64, 1))
    history = pdmm.solve(pdmm.averaging(G, a), rho=0.3, max_iter=max(iterations, 2), tol=0).history["residual"]
    history = np.asarray(history, dtype=float).reshape(-1)
    return (history / history[0]).tolist()


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
