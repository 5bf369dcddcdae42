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
from typing import Literal, overload

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

import pdmm
from pdmm.array_graph import as_graph


@dataclass(frozen=True)
class GraphFamily:
    """Connected graphs of one topology with n drawn uniformly from [n_min, n_max].

    Grids and tori are square.

    Attributes
    ----------
    topology : str
        One of pdmm.TOPOLOGIES.
    n_min, n_max : int
        The range of node counts, 2 <= n_min <= n_max.
    radius : float or None
        The connection radius of random_geometric graphs (None: pdmm.topology's default
        sqrt(2 ln n / n)); a small radius gives graphs of large diameter.

    Raises
    ------
    ValueError
        On construction, for an unknown topology, a bad range, or a radius that is not > 0 or not for
        random_geometric graphs.
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
        """One graph on nodes 0..n-1, drawn with the numpy Generator `rng`.

        Parameters
        ----------
        rng : numpy.random.Generator
            The draws of n and of the graph's seed.

        Returns
        -------
        networkx.Graph
            A connected graph with integer nodes 0..n-1.
        """
        n = int(rng.integers(self.n_min, self.n_max + 1))
        if self.topology in ("grid", "torus"):  # k x k: a prime n would make a 1 x n path
            n = int(np.clip(round(np.sqrt(n)), np.ceil(np.sqrt(self.n_min)), np.floor(np.sqrt(self.n_max)))) ** 2
        params = {} if self.radius is None else {"radius": self.radius}
        G = pdmm.topology(self.topology, n=n, seed=int(rng.integers(2**31)), **params)
        return nx.convert_node_labels_to_integers(G)


@overload
def sample_values(
    batch: int, n: int, rng: np.random.Generator, mu_scale: float = ..., spreads: Literal[False] = ...
) -> np.ndarray: ...
@overload
def sample_values(
    batch: int, n: int, rng: np.random.Generator, mu_scale: float = ..., *, spreads: Literal[True]
) -> tuple[np.ndarray, np.ndarray]: ...
def sample_values(
    batch: int, n: int, rng: np.random.Generator, mu_scale: float = 1.0, spreads: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """(B, n) node values a_i = mu + s z_i, mu ~ N(0, mu_scale^2) and s log-uniform in [0.5, 2] per
    instance; with spreads=True also the (B,) spreads s."""
    mu = rng.normal(scale=mu_scale, size=(batch, 1))
    spread = np.exp(rng.uniform(np.log(0.5), np.log(2.0), size=(batch, 1)))
    values = mu + spread * rng.normal(size=(batch, n))
    return (values, spread[:, 0]) if spreads else values


def sample_instances(
    family: GraphFamily, count: int, batch: int, rng: np.random.Generator, mu_scale: float = 1.0
) -> list[tuple[nx.Graph, np.ndarray, np.ndarray]]:
    """[(graph, a (B, n), spreads s (B,))] for `count` graphs of `family`, `batch` value vectors on each.

    Values a_i = mu + s z_i with mu ~ N(0, mu_scale^2) and s log-uniform in [0.5, 2] per instance (the module
    docstring).

    Parameters
    ----------
    family : GraphFamily
        Where the graphs come from.
    count : int
        The number of graphs.
    batch : int
        Value vectors per graph.
    rng : numpy.random.Generator
        Every draw.
    mu_scale : float
        The offset's standard deviation.

    Returns
    -------
    list of (networkx.Graph, numpy.ndarray, numpy.ndarray)
        Per graph: the graph, values a (batch, n) and spreads s (batch,).
    """
    out = []
    for _ in range(count):
        G = family.sample(rng)
        out.append((G, *sample_values(batch, G.number_of_nodes(), rng, mu_scale, spreads=True)))
    return out


def node_features(G: "nx.Graph | pdmm.Graph | sp.sparray", a: Tensor) -> Tensor:
    """(B, n, 2): the value a_i and log(1 + d_i) of node i (PDMM's x-update uses d_i too).

    Parameters
    ----------
    G : networkx.Graph, pdmm.Graph or scipy sparse array
        The graph (a networkx graph's nodes in G.nodes order, a sparse adjacency matrix).
    a : torch.Tensor
        (B, n) node values.

    Returns
    -------
    torch.Tensor
        (B, n, 2) in a's dtype and device.

    Raises
    ------
    TypeError
        When G is none of the graph types pdmm accepts.
    """
    degree = torch.as_tensor(as_graph(G).adjacency().sum(axis=1), dtype=a.dtype, device=a.device)
    return torch.stack([a, torch.log1p(degree).expand_as(a)], dim=-1)


def disagreement_error(x: Tensor, a: Tensor) -> Tensor:
    """e = ||x - x*||_F / ||a - x*||_F per instance, x* = mean(a): x (..., B, n), a (B, n) -> (..., B).

    Parameters
    ----------
    x : torch.Tensor
        (..., B, n) estimates, any leading axes (e.g. rounds).
    a : torch.Tensor
        (B, n) node values.

    Returns
    -------
    torch.Tensor
        (..., B) errors relative to the initial disagreement (1 for x = a).
    """
    x_star = a.mean(-1, keepdim=True)
    return (x - x_star).square().sum(-1).sqrt() / (a - x_star).square().sum(-1).sqrt()
