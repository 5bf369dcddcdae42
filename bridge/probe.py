"""Per-layer discrepancy of a trained attention model, beside PDMM's residual (docs/theory/residuals.md section 14).

With every attention layer's probes on, per layer l, averaged over tokens:

    phi_ratio     ||V - gamma MH|| / ||V||            AttentionX's discrepancy Phi against V (its depth claim)
    delta_ratio   ||MH - alpha V|| / ||MH||           belief's Delta before W^o: <= 1 by construction
    wdelta_ratio  ||Delta W^o|| / ||MH W^o||          the same after the output projection (belief Fig. 4)
    cos_delta_wo  cos(Delta W^o, X)                   angles of both projected signals to the token X
    cos_mh_wo     cos(MH W^o, X)                      (Fig. 4: about equal)
    cos_update    cos(update, X)                      the layer's update against the residual stream X

whatever the model's residual signal, so models are comparable (docs/theory/residuals.md section 14;
docs/theory/reproductions.md section 3). W^o is the layer's
output projection without its bias (for concat, its MH half). The AttentionX paper argues the
discrepancy shrinks with depth, as PDMM's constraint residual does with iterations.
"""

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

import pdmm
from attention import MultiHeadAttention
from attention.mha import orthogonal_part

STATISTICS = ("phi_ratio", "delta_ratio", "wdelta_ratio", "cos_delta_wo", "cos_mh_wo", "cos_update")


def norm_ratio(a: Tensor, b: Tensor) -> float:
    """mean over tokens of ||a_i|| / ||b_i|| (tokens where b_i = 0 left out)."""
    a, b = a.norm(dim=-1), b.norm(dim=-1)
    keep = b > 0
    return float((a[keep] / b[keep]).mean())


def mean_cosine(a: Tensor, b: Tensor) -> float:
    """mean over tokens of cos(a_i, b_i)."""
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())


def layer_statistics(probes: dict[str, Tensor], gamma: float, w_o: Tensor) -> dict[str, float]:
    """STATISTICS of one layer's probes; w_o: (d_model, d_model) weight of W^o as nn.Linear holds it."""
    mh, v, x, y = probes["mh"], probes["v"], probes["token"], probes["update"]
    delta = orthogonal_part(mh, v)
    delta_wo, mh_wo = delta @ w_o.T, mh @ w_o.T  # rows Delta[i] W^o, MH[i] W^o
    return {
        "phi_ratio": norm_ratio(v - gamma * mh, v),
        "delta_ratio": norm_ratio(delta, mh),
        "wdelta_ratio": norm_ratio(delta_wo, mh_wo),
        "cos_delta_wo": mean_cosine(delta_wo, x),
        "cos_mh_wo": mean_cosine(mh_wo, x),
        "cos_update": mean_cosine(y, x),
    }


def output_projection(layer: MultiHeadAttention) -> Tensor:
    """W^o of an attention layer as (d_model, d_model): c_proj's weight, its MH half for concat."""
    return layer.c_proj.weight.detach()[:, : layer.config.d_model]


@torch.no_grad()
def probe_model(
    model: nn.Module, run_batch: Callable[[int], object], batches: int, gamma: float = 1.0
) -> list[dict[str, float]]:
    """[{statistic: mean over `batches` calls of run_batch(b)} per attention layer] of `model`
    (STATISTICS, the module docstring; docs/theory/residuals.md section 14).

    Turns every attention layer's probes on (config.probe = True) and leaves them on.

    Parameters
    ----------
    model : torch.nn.Module
        A model whose attention layers are MultiHeadAttention (GPT, ViT, GraphTransformer).
    run_batch : callable
        run_batch(b) runs the model's forward pass on batch b.
    batches : int
        How many batches to average over.
    gamma : float
        AttentionX's weight in phi_ratio.

    Returns
    -------
    list of dict
        Per attention layer, in module order, {statistic: mean}.

    Raises
    ------
    ValueError
        For a tied model: its one block serves every layer, so the probes cannot be told apart.
    """
    if getattr(model, "tied", False):
        raise ValueError(
            "a tied GraphTransformer has one block for every layer; its probes cannot be told apart by layer"
        )
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    for layer in layers:
        layer.config.probe = True
    totals = [dict.fromkeys(STATISTICS, 0.0) for _ in layers]
    for b in range(batches):
        run_batch(b)
        for total, layer in zip(totals, layers, strict=False):
            for key, value in layer_statistics(layer.probes, gamma, output_projection(layer)).items():
                total[key] += value / batches
    return totals


def pdmm_residual(iterations: int) -> list[float]:
    """PDMM's constraint residual per iteration / its first value (averaging, 64-node random geometric graph)."""
    G = pdmm.topology("random_geometric", n=64, seed=0)
    a = np.random.default_rng(0).normal(size=(64, 1))
    history = pdmm.solve(
        pdmm.averaging(G, a), rho=0.3, max_iter=max(iterations, 2), tol=0, history=("residual",), record_every=1
    ).history["residual"]
    history = np.asarray(history, dtype=float).reshape(-1)
    return (history / history[0]).tolist()
