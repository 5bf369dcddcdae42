"""graph_consensus: a GraphTransformer on a problem's graph learns distributed averaging, round by round.

An instance is a graph from a topology family and node values a_i = mu + s z_i, z_i ~ N(0, 1),
with an offset mu ~ N(0, mu_scale^2) and a spread s log-uniform in [0.5, 2] drawn per instance,
so no fixed guess is close to the answer; the target is the consensus solution x* = mean(a) at
every node (PDMM's averaging problem, MATH.md 2). The token graph is the problem graph with self
loops, so layer l has had exactly l rounds of neighbour communication, the budget of PDMM
iteration l. The model reads out after every layer. Errors are measured against the initial
disagreement, e = ||x - x*||_F / ||a - x*||_F (free of offset and scale; 1 for x = a); the loss
is the mean over layers and instances of e^2, and evaluation reports the geometric mean of e
after the last layer.
"""
from dataclasses import dataclass

import networkx as nx
import numpy as np
import torch

import attention
import pdmm

from ..common import UsageError
from .base import Task, attention_config


@dataclass
class GraphConsensusOptions:
    topology: str = "random_geometric"
    n_min: int = 16
    n_max: int = 32
    val_graphs: int = 8           # held-out graphs, each with train.batch_size instances
    mu_scale: float = 1.0         # offsets mu ~ N(0, mu_scale^2)
    tied: bool = False            # one block for every round, like an iteration


def node_features(G, a):
    """(B, n, 2): the value a_i and the log-degree of node i (PDMM's x-update uses d_i too)."""
    degree = torch.tensor([G.degree(v) for v in G.nodes], dtype=a.dtype)
    return torch.stack([a, torch.log1p(degree).expand_as(a)], dim=-1)


def sample_values(options, batch, n, rng):
    """(B, n) node values a_i = mu + s z_i with mu and s drawn per instance."""
    mu = rng.normal(scale=options.mu_scale, size=(batch, 1))
    spread = np.exp(rng.uniform(np.log(0.5), np.log(2.0), size=(batch, 1)))
    return mu + spread * rng.normal(size=(batch, n))


def sample_graph(options, rng, topology=None, n_range=None):
    """A networkx graph of the family (or of `topology`, n in `n_range`; grids and tori square) on nodes 0..n-1."""
    low, high = n_range or (options.n_min, options.n_max)
    topology = topology or options.topology
    n = int(rng.integers(low, high + 1))
    if topology in ("grid", "torus"):  # k x k: a prime n would make a 1 x n path
        n = int(np.clip(round(np.sqrt(n)), np.ceil(np.sqrt(low)), np.floor(np.sqrt(high)))) ** 2
    return nx.convert_node_labels_to_integers(pdmm.topology(topology, n=n, seed=int(rng.integers(2**31))))


def sample_instances(options, batch, rng):
    """(TokenGraph, features (B, n, 2), a (B, n)) for one random graph of the family."""
    G = sample_graph(options, rng)
    a = torch.as_tensor(sample_values(options, batch, G.number_of_nodes(), rng), dtype=torch.float32)
    return attention.TokenGraph.from_networkx(G), node_features(G, a), a


def disagreement_error(x, a):
    """e = ||x - x*||_F / ||a - x*||_F per instance, x* = mean(a): x (..., B, n), a (B, n) -> (..., B)."""
    x_star = a.mean(-1, keepdim=True)
    return (x - x_star).square().sum(-1).sqrt() / (a - x_star).square().sum(-1).sqrt()


class GraphConsensus(Task):
    name = "graph_consensus"
    Options = GraphConsensusOptions
    metrics = ("val_loss", "val_error")

    def __init__(self, config):
        super().__init__(config)
        o = self.options
        if o.topology not in pdmm.TOPOLOGIES:
            raise UsageError(f"task.topology must be one of {', '.join(pdmm.TOPOLOGIES)}, got {o.topology!r}")
        if not 2 <= o.n_min <= o.n_max:
            raise UsageError(f"task.n_min and task.n_max need 2 <= n_min <= n_max, got {o.n_min}, {o.n_max}")
        if config.train.batch_size < 1 or o.val_graphs < 1 or o.mu_scale < 0:
            raise UsageError("graph_consensus needs train.batch_size >= 1, task.val_graphs >= 1, task.mu_scale >= 0")
        rng = np.random.default_rng(10_000 + config.train.seed)
        self.val = [sample_instances(o, config.train.batch_size, rng) for _ in range(o.val_graphs)]

    def build_model(self):
        return attention.GraphTransformer(attention_config(self.config.model), self.config.model.n_layer, in_features=2,
                                          out_features=1, tied=self.options.tied)

    def train_batch(self, generator):
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
        return sample_instances(self.options, self.config.train.batch_size, rng)

    def loss(self, model, batch):
        graph, features, a = batch
        readouts = model(features, graph)[..., 0]  # (layers, B, n)
        return disagreement_error(readouts, a).square().mean(), readouts

    @torch.no_grad()
    def evaluate(self, model, generator, device):
        losses, errors = [], []
        for graph, features, a in self.val:
            loss, readouts = self.loss(model, (graph, features.to(device), a.to(device)))
            losses.append(loss.item())
            errors.append(disagreement_error(readouts[-1], a.to(device)))
        return {"val_loss": float(np.mean(losses)), "val_error": float(torch.cat(errors).log().mean().exp())}
