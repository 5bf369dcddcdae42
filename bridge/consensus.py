"""Distributed averaging instances: the problem on which transformers and PDMM are compared.

An instance is a connected graph from a family and node values a_i = mu + s z_i, z_i ~ N(0, 1),
with an offset mu ~ N(0, mu_scale^2) and a spread s log-uniform in [0.5, 2] drawn per instance,
so no fixed guess is close to the answer. The target is the consensus solution x* = mean(a) at
every node (PDMM's averaging problem, f_i(x) = 1/2 (x - a_i)^2,
docs/theory/problem.md section 2; docs/theory/pdmm.md section 8). Errors are measured
against the initial disagreement, e = ||x - x*|| / ||a - x*|| (1 for x = a, free of offset and
scale).
"""

from dataclasses import dataclass

import networkx as nx
import numpy as np
import torch

import pdmm
from pdmm.graph import as_graph


@dataclass(frozen=True)
class GraphFamily:
    """Connected graphs of one topology with n drawn uniformly from [n_min, n_max] (docs/theory/pdmm.md section 8
    for the averaging problem on them).

    Attributes
    ----------
    topology : str
        One of pdmm.TOPOLOGIES; grids and tori are square.
    n_min, n_max : int
        The range of the number of nodes, 2 <= n_min <= n_max.
    radius : float or None
        The connection radius of random_geometric graphs (None: pdmm.topology's default sqrt(2 ln n / n)); a
        small radius gives graphs of large diameter.

    Raises
    ------
    ValueError
        For an unknown topology, n_min or n_max out of order, or a radius <= 0 or on another topology.
    """

    topology: str = "random_geometric"
    n_min: int = 16
    n_max: int = 32
    radius: float | None = None

    def __post_init__(self) -> None:
        if self.topology not in pdmm.TOPOLOGIES:
            raise ValueError(f"topology must be one of {', '.join(pdmm.TOPOLOGIES)}, got {self.topology!r}")
        if not 2 <= self.n_min <= self.n_max:
            raise ValueError(f"n_min and n_max need 2 <= n_min <= n_max, got {self.n_min}, {self.n_max}")
        if self.radius is not None and not (self.topology == "random_geometric" and self.radius > 0):
            raise ValueError(
                f"radius applies to random_geometric graphs and must be > 0, got {self.radius} for {self.topology}"
            )

    def sample(self, rng: np.random.Generator) -> nx.Graph:
        """One graph of the family.

        Parameters
        ----------
        rng : numpy.random.Generator
            Draws n and the graph's seed.

        Returns
        -------
        networkx.Graph
            A connected graph on nodes 0..n-1.
        """
        n = int(rng.integers(self.n_min, self.n_max + 1))
        if self.topology in ("grid", "torus"):  # k x k: a prime n would make a 1 x n path
            n = int(np.clip(round(np.sqrt(n)), np.ceil(np.sqrt(self.n_min)), np.floor(np.sqrt(self.n_max)))) ** 2
        params = {} if self.radius is None else {"radius": self.radius}
        G = pdmm.topology(self.topology, n=n, seed=int(rng.integers(2**31)), **params)
        return nx.convert_node_labels_to_integers(G)


def sample_values(batch, n, rng, mu_scale=1.0, spreads=False):
    """(B, n) node values a_i = mu + s z_i, mu ~ N(0, mu_scale^2) and s log-uniform in [0.5, 2] per
    instance; with spreads=True also the (B,) spreads s."""
    mu = rng.normal(scale=mu_scale, size=(batch, 1))
    spread = np.exp(rng.uniform(np.log(0.5), np.log(2.0), size=(batch, 1)))
    values = mu + spread * rng.normal(size=(batch, n))
    return (values, spread[:, 0]) if spreads else values


def sample_instances(family, count, batch, rng, mu_scale=1.0):
    """[(graph, a (B, n), spreads s (B,))] for `count` graphs of `family`, `batch` value vectors on each."""
    out = []
    for _ in range(count):
        G = family.sample(rng)
        out.append((G, *sample_values(batch, G.number_of_nodes(), rng, mu_scale, spreads=True)))
    return out


def node_features(G, a):
    """(B, n, 2): the value a_i and the log-degree of node i (PDMM's x-update uses d_i too); G a networkx graph
    (nodes in G.nodes order), a pdmm.Graph or a scipy sparse adjacency matrix."""
    degree = torch.as_tensor(as_graph(G).adjacency().sum(axis=1), dtype=a.dtype, device=a.device)
    return torch.stack([a, torch.log1p(degree).expand_as(a)], dim=-1)


def disagreement_error(x, a):
    """e = ||x - x*||_F / ||a - x*||_F per instance, x* = mean(a): x (..., B, n), a (B, n) -> (..., B)."""
    x_star = a.mean(-1, keepdim=True)
    return (x - x_star).square().sum(-1).sqrt() / (a - x_star).square().sum(-1).sqrt()
