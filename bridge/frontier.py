"""Transformers that send one number per edge and round, trained to beat the classical rows at equal communication.

Every classical averaging method sends one number per edge and round; a transformer with keys and values
sends 2 d_model. At equal numbers sent, the comparison's transformers lose by a wide margin
(docs/pdmm_transformer.md section 5 states the attempt and docs/RESULTS.md its outcome). The models here
are the PDMM-transformer (bridge.pdmm_transformer) with kernel "mean": it sends x alone, the neighbour
mean is all PDMM needs, so it starts as PDMM itself, at PDMM's budget, and training can only move it to
a better rule of the same communication. Two attempts:

- untied, depth K, from PDMM's weights (rho tuned for round K), trained on the training family;
- tied (one block for every round, PDMM's from x^0 = 0, rho tuned for the last round R), trained on a
  mixture of topologies that excludes every held-out kind (the training family, Erdos-Renyi,
  Barabasi-Albert, random 4-regular and denser random geometric graphs), with a loss at every round and
  a curriculum in depth (K rounds, then 2 K, ... up to R, each stage from the last one's best weights).

Both minimise the mean over rounds and instances of log e, e = ||x^r - x*|| / ||a - x*|| (the statistic
the comparison reports), with full-batch Adam and the comparison's plateau rule on validation instances
(bridge.fitting).
"""

from collections.abc import Sequence
from typing import Any

import networkx as nx
import numpy as np
import torch
from torch import Tensor

from attention import GraphTransformer, TokenGraph

from .consensus import GraphFamily, disagreement_error, sample_instances
from .fitting import FitLog, adam_keep_best
from .pdmm_transformer import pdmm_features, pdmm_transformer, prepare_instances

MIXTURE = (
    GraphFamily("erdos_renyi"),
    GraphFamily("barabasi_albert"),
    GraphFamily("random_regular"),
    GraphFamily("random_geometric"),
)  # n and, for random_geometric, the default radius set per family


def mixture(
    family: GraphFamily, graphs: int, batch: int, rng: np.random.Generator, mu_scale: float = 1.0
) -> list[tuple[nx.Graph, np.ndarray, np.ndarray]]:
    """`graphs` instances of each MIXTURE topology with the training family's node counts: [(graph, a, s)]."""
    out = []
    for kind in MIXTURE:
        sized = GraphFamily(kind.topology, family.n_min, family.n_max, kind.radius)
        out += sample_instances(sized, graphs, batch, rng, mu_scale)
    return out


def log_error_loss(
    model: GraphTransformer, prepared: Sequence[tuple[TokenGraph, Tensor, Tensor]], rounds: int
) -> Tensor:
    """mean over rounds 1..rounds and instances of log e (natural log), e floored at 1e-30."""
    logs = [
        torch.log(disagreement_error(model(features, graph, rounds=rounds)[..., 0], a).clamp_min(1e-30))
        for graph, features, a in prepared
    ]
    return torch.cat(logs, dim=1).mean()


def fit_rounds(
    model: GraphTransformer,
    instances: Sequence[tuple[Any, ...]],
    validation: Sequence[tuple[Any, ...]],
    rounds: int,
    steps: int,
    lr: float,
    rho: float,
) -> FitLog:
    """Full-batch Adam on log_error_loss over `rounds` rounds until the validation loss plateaus (bridge.fitting);
    instances and validation [(graph, a, ...)]. Returns the FitLog."""

    def features(G: nx.Graph, a: Tensor) -> Tensor:
        return pdmm_features(G, a, rho)

    train = prepare_instances(model, [(G, a) for G, a, *_ in instances], features, self_loops=False)
    held = prepare_instances(model, [(G, a) for G, a, *_ in validation], features, self_loops=False)
    return adam_keep_best(
        model, lambda: log_error_loss(model, train, rounds), steps, lr, lambda: log_error_loss(model, held, rounds)
    )


def curriculum(depth: int, rounds: int) -> list[int]:
    """The depths of the stages: depth, 2 depth, ... while below `rounds`, then `rounds`."""
    stages = [depth]
    while stages[-1] < rounds:
        stages.append(min(2 * stages[-1], rounds))
    return stages


def one_number_untied(
    rho: float,
    depth: int,
    tuning: Sequence[tuple[Any, ...]],
    validation: Sequence[tuple[Any, ...]],
    steps: int,
    lr: float,
) -> tuple[GraphTransformer, list[FitLog]]:
    """(model, [FitLog]): the untied one-number PDMM-transformer of `depth` blocks from PDMM's weights (rho),
    trained on the tuning instances."""
    model = pdmm_transformer(rho, depth, start="a", kernel="mean")
    return model, [fit_rounds(model, tuning, validation, depth, steps, lr, rho)]


def one_number_tied(
    rho: float,
    depth: int,
    rounds: int,
    tuning: Sequence[tuple[Any, ...]],
    validation: Sequence[tuple[Any, ...]],
    steps: int,
    lr: float,
    family: GraphFamily,
    rng: np.random.Generator,
    mu_scale: float = 1.0,
) -> tuple[GraphTransformer, list[FitLog]]:
    """(model, [FitLog per stage]): the tied one-number PDMM-transformer from PDMM's weights (rho, x^0 = 0),
    trained on the tuning instances plus one graph of each MIXTURE topology, validated on the validation
    instances plus one further graph of each, through the depth curriculum up to `rounds`; Adam's lr is
    lr depth / stage at each stage (a change of the one block acts `stage` times)."""
    batch = tuning[0][1].shape[0]
    train = list(tuning) + mixture(family, 1, batch, rng, mu_scale)
    held = list(validation) + mixture(family, 1, batch, rng, mu_scale)
    model = pdmm_transformer(rho, depth, start="zero", kernel="mean", tied=True)
    return model, [
        fit_rounds(model, train, held, stage, steps, lr * depth / stage, rho) for stage in curriculum(depth, rounds)
    ]


def seed_rng(seed: int) -> np.random.Generator:
    """The mixture graphs' generator of seed `seed`, apart from the comparison's other draws."""
    return np.random.default_rng([seed, 4])
