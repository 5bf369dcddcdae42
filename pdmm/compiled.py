"""A networkx graph compiled once into index tensors, and the three message-passing primitives.

Every undirected edge {i, j} becomes two directed edges i->j and j->i, sorted by (src, dst), so
the edges leaving node i are contiguous. Edge tensors have shape (E, ...), node tensors (n, ...).

    gather(x)         (E, ...)   x[src]: each edge reads its sending node
    gather_sub(x, v)  (E, ...)   x[src] - v, fused
    aggregate(v)      (n, ...)   sum over edges leaving node i of v_e
    exchange(v)       (E, ...)   v[rev]: edge i->j receives what edge j->i sent
"""
import warnings
from dataclasses import dataclass

import networkx as nx
import numpy as np
import torch


@dataclass(frozen=True)
class CompiledGraph:
    nodes: list            # node labels; node index k is nodes[k]
    src: torch.Tensor      # (E,) int64, sorted
    dst: torch.Tensor      # (E,) int64
    rev: torch.Tensor      # (E,) int64, edge index of dst->src
    degree: torch.Tensor   # (n,) int64
    sign: torch.Tensor     # (E,) +1 where src < dst (in node order), else -1
    incidence: torch.Tensor | None  # (n, E) sparse CSR of ones; None when every degree is equal
    forward: torch.Tensor  # (E/2,) the edges with src < dst: one per undirected edge

    @classmethod
    def from_networkx(cls, G):
        """Compile G (self loops are ignored); raise if it has no edges or is not connected."""
        if G.is_directed():
            raise ValueError("the graph must be undirected (pass G.to_undirected())")
        nodes = list(G.nodes)
        index = {v: k for k, v in enumerate(nodes)}
        pairs = np.array([(index[u], index[v]) for u, v in G.edges if u != v], dtype=np.int64).reshape(-1, 2)
        if len(pairs) == 0:
            raise ValueError(f"the graph has {len(nodes)} nodes and no edges; PDMM needs a connected graph")
        if not nx.is_connected(G):
            k = nx.number_connected_components(G)
            raise ValueError(f"the graph is disconnected: it has {k} connected components; consensus needs one")
        src = np.concatenate([pairs[:, 0], pairs[:, 1]])
        dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
        order = np.lexsort((dst, src))
        position = np.empty_like(order)
        position[order] = np.arange(len(order))
        m = len(pairs)
        partner = np.concatenate([np.arange(m, 2 * m), np.arange(m)])  # unsorted index of the reverse edge
        src, dst, rev = src[order], dst[order], position[partner[order]]
        degree = np.bincount(src, minlength=len(nodes))
        return cls.build(nodes, src, dst, rev, degree)

    @classmethod
    def build(cls, nodes, src, dst, rev, degree, device="cpu", dtype=torch.float64):
        src, dst, rev, degree = (torch.as_tensor(a, dtype=torch.int64, device=device) for a in (src, dst, rev, degree))
        sign = torch.where(src < dst, 1.0, -1.0).to(dtype)
        incidence = None
        if bool((degree != degree[0]).any()):
            crow = torch.zeros(len(nodes) + 1, dtype=torch.int64, device=device)
            crow[1:] = torch.cumsum(degree, 0)
            col = torch.arange(len(src), device=device)
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
                incidence = torch.sparse_csr_tensor(crow, col, torch.ones(len(src), dtype=dtype, device=device),
                                                    (len(nodes), len(src)), check_invariants=False)
        return cls(nodes, src, dst, rev, degree, sign, incidence, torch.nonzero(src < dst).squeeze(1))

    def to(self, device, dtype):
        """The same graph with index tensors on `device` and float tensors in `dtype`."""
        return CompiledGraph.build(self.nodes, self.src, self.dst, self.rev, self.degree, device, dtype)

    @property
    def n(self):
        return len(self.nodes)

    @property
    def num_edges(self):
        """Number of directed edges E = 2 |undirected edges|."""
        return len(self.src)

    def gather(self, x):
        """x[src]: (n, ...) -> (E, ...)."""
        return select(x, self.src)

    def gather_sub(self, x, v):
        """x[src] - v, without materialising x[src] when every degree is equal (a broadcast)."""
        if self.incidence is None:
            return (x.unsqueeze(1) - v.reshape(self.n, -1, *v.shape[1:])).view(v.shape)
        return self.gather(x) - v

    def aggregate(self, v):
        """Sum of v_e over the edges leaving each node: (E, ...) -> (n, ...)."""
        if self.incidence is None:  # equal degrees: the contiguous out-edges of a node form one row
            return v.reshape(self.n, -1, *v.shape[1:]).sum(1)
        return (self.incidence @ v.reshape(len(v), -1)).view(self.n, *v.shape[1:])

    def exchange(self, v):
        """v[rev]: what edge j->i sent arrives at edge i->j."""
        return select(v, self.rev)


def select(v, index):
    """v[index] along dim 0; rows of one number go through a 1-D view, which torch indexes 2-4x faster."""
    if v[0].numel() == 1:
        return v.reshape(-1).index_select(0, index).view(len(index), *v.shape[1:])
    return v.index_select(0, index)
