"""Per-layer discrepancy of a trained attention model, beside PDMM's residual (MATH.md 5).

With every attention layer's probes on, per layer l, averaged over tokens:

    phi_ratio    ||V - gamma MH|| / ||V||      AttentionX's discrepancy Phi
    delta_ratio  ||MH - alpha V|| / ||MH||     belief's discrepancy Delta, alpha per token
    cos_update   cos(update, token)            the layer's update against the residual stream it is added to

whatever the model's residual signal, so models are comparable. The AttentionX paper argues the
discrepancy shrinks with depth, as PDMM's constraint residual does with iterations.
"""
import numpy as np
import torch

import pdmm
from attention import MultiHeadAttention
from attention.mha import orthogonal_part

STATISTICS = ("phi_ratio", "delta_ratio", "cos_update")


def norm_ratio(a, b):
    """mean over tokens of ||a_i|| / ||b_i|| (tokens where b_i = 0 left out)."""
    a, b = a.norm(dim=-1), b.norm(dim=-1)
    keep = b > 0
    return float((a[keep] / b[keep]).mean())


def layer_statistics(probes, gamma):
    """{phi_ratio, delta_ratio, cos_update} of one layer's probes."""
    mh, v, x, y = probes["mh"], probes["v"], probes["token"], probes["update"]
    return {"phi_ratio": norm_ratio(v - gamma * mh, v), "delta_ratio": norm_ratio(orthogonal_part(mh, v), mh),
            "cos_update": float(torch.nn.functional.cosine_similarity(y, x, dim=-1).mean())}


@torch.no_grad()
def probe_model(model, run_batch, batches, gamma=1.0):
    """[{statistic: mean over `batches` calls of run_batch(b)} per attention layer] of `model`.

    run_batch(b) runs the model's forward pass on batch b; gamma is AttentionX's weight in phi_ratio.
    A tied model is refused: its one block serves every layer, so the probes cannot be told apart."""
    if getattr(model, "tied", False):
        raise ValueError("a tied GraphTransformer has one block for every layer; its probes cannot be told "
                         "apart by layer")
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    for layer in layers:
        layer.config.probe = True
    totals = [dict.fromkeys(STATISTICS, 0.0) for _ in layers]
    for b in range(batches):
        run_batch(b)
        for total, layer in zip(totals, layers):
            for key, value in layer_statistics(layer.probes, gamma).items():
                total[key] += value / batches
    return totals


def pdmm_residual(iterations):
    """PDMM's constraint residual per iteration / its first value (averaging, 64-node random geometric graph)."""
    G = pdmm.topology("random_geometric", n=64, seed=0)
    a = np.random.default_rng(0).normal(size=(64, 1))
    history = pdmm.solve(pdmm.averaging(G, a), rho=0.3, max_iter=max(iterations, 2), tol=0).history["residual"]
    history = np.asarray(history, dtype=float).reshape(-1)
    return (history / history[0]).tolist()
