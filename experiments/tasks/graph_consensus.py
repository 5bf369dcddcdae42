"""graph_consensus: a GraphTransformer on a problem's graph learns distributed averaging, round by round.

Instances come from bridge.consensus: a graph of the family (task.topology, n in [n_min, n_max],
task.radius for random geometric graphs) and values a_i = mu + s z_i; the target is x* = mean(a) at
every node (PDMM's averaging problem, docs/theory/pdmm.md section 8; docs/theory/attention.md
section 6). The token graph is the problem graph with self loops, so layer l has had exactly l
rounds of neighbour communication, the budget of PDMM iteration l. The model reads out after every
layer; the loss is the mean over layers and instances of e^2, e = ||x - x*||_F / ||a - x*||_F, and
evaluation reports the geometric mean of e after the last layer.
"""

from dataclasses import dataclass

import numpy as np
import torch

import attention
from bridge.consensus import GraphFamily, disagreement_error, node_features, sample_values

from ..config import attention_config
from ..errors import UsageError
from .base import Task

GRAPH_OVERHEAD = 4096  # bytes of Python objects around each held-out graph's tensors


@dataclass
class GraphConsensusOptions:
    topology: str = "random_geometric"
    n_min: int = 16
    n_max: int = 32
    radius: float = 0.0  # random_geometric connection radius; 0: pdmm.topology's default
    val_graphs: int = 8  # held-out graphs, each with train.batch_size instances
    mu_scale: float = 1.0  # offsets mu ~ N(0, mu_scale^2)
    tied: bool = False  # one block for every round, like an iteration


def graph_family(options):
    """The bridge.consensus.GraphFamily that the task's options describe."""
    return GraphFamily(options.topology, options.n_min, options.n_max, options.radius or None)


def sample_instances(family, batch, rng, mu_scale):
    """(TokenGraph, features (B, n, 2), a (B, n)) for one random graph of the family."""
    G = family.sample(rng)
    a = torch.as_tensor(sample_values(batch, G.number_of_nodes(), rng, mu_scale), dtype=torch.float32)
    return attention.TokenGraph.from_networkx(G), node_features(G, a), a


class GraphConsensus(Task):
    name = "graph_consensus"
    Options = GraphConsensusOptions
    metrics = ("val_loss", "val_error")

    @classmethod
    def check(cls, config):
        """The options (Task.check): radius >= 0, a graph family bridge.consensus.GraphFamily accepts,
        train.batch_size >= 1, val_graphs >= 1, mu_scale >= 0."""
        o = super().check(config)
        if o.radius < 0:
            raise UsageError(f"task.radius must be >= 0 (0: the default radius), got {o.radius}")
        try:
            graph_family(o)
        except ValueError as err:
            raise UsageError(f"task: {err}") from None
        if config.train.batch_size < 1 or o.val_graphs < 1 or o.mu_scale < 0:
            raise UsageError("graph_consensus needs train.batch_size >= 1, task.val_graphs >= 1, task.mu_scale >= 0")
        return o

    @classmethod
    def data_parts(cls, config, options):
        """The held-out graphs: each batch_size value vectors and features (12 bytes a node and instance) and a
        token graph of at most n_max^2 edges (17 bytes an edge: its two indices and a dense mask's byte)."""
        n, batch = options.n_max, config.train.batch_size
        per_graph = 12 * batch * n + 17 * n * n + GRAPH_OVERHEAD
        return {f"task.val_graphs={options.val_graphs}: the held-out graphs": options.val_graphs * per_graph}

    def __init__(self, config):
        super().__init__(config)
        o = self.options
        self.family = graph_family(o)
        rng = np.random.default_rng(10_000 + config.train.seed)
        self.val = [
            sample_instances(self.family, config.train.batch_size, rng, o.mu_scale) for _ in range(o.val_graphs)
        ]

    def build_model(self):
        return attention.GraphTransformer(
            attention_config(self.config.model),
            self.config.model.n_layer,
            in_features=2,
            out_features=1,
            tied=self.options.tied,
        )

    def train_batch(self, generator):
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
        return sample_instances(self.family, self.config.train.batch_size, rng, self.options.mu_scale)

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
