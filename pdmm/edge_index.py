"""Graphs compiled once into index tensors, and the message-passing primitives on them.

`EdgeList` holds directed edges sorted by (src, dst), so the edges of node i (src = i) are
contiguous. Edge tensors have shape (E, ...), node tensors (n, ...). Its primitives (gather: node to edge,
aggregate: edge to node, exchange: edge to reverse edge; docs/theory/pdmm.md section 14):

    gather(x)            (E, ...)   x[src]: each edge reads its own node
    gather_neighbour(x)  (E, ...)   x[dst]: each edge reads the node at its other end
    aggregate(v)         (n, ...)   sum of v_e over the edges of each node
    aggregate_max(v)     (n, ...)   max of v_e over the edges of each node

`CompiledGraph` is an undirected graph as PDMM sees it: every edge {i, j} becomes i->j and j->i,
and `exchange(v)` = v[rev] hands edge i->j what edge j->i sent; `from_graph` compiles a pdmm.Graph
(pdmm/array_graph.py) with array operations only. The sparse attention path in
`attention` runs on the same `EdgeList` (src = the attending token, dst = the attended one).
All primitives are differentiable.
"""

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .array_graph import Graph, GraphLike, as_graph

LOCALITY_GAIN = 1.25  # locality_order renumbers when reverse Cuthill-McKee shortens the mean |i - j| this much
LOCAL_ENOUGH = 64  # locality_order keeps, without running RCM, an order whose mean |i - j| is at most n / this


@dataclass(frozen=True)
class EdgeList:
    n: int  # number of nodes
    src: torch.Tensor  # (E,) int64, sorted
    dst: torch.Tensor  # (E,) int64
    degree: torch.Tensor  # (n,) int64, edges per src node
    incidence: torch.Tensor | None  # (n, E) sparse CSR of ones; None when every degree is equal

    @staticmethod
    def arrays(n, src, dst, device="cpu", dtype=torch.float64):
        """The fields of an EdgeList from (src, dst) already sorted by (src, dst)."""
        src, dst = (torch.as_tensor(a, dtype=torch.int64, device=device) for a in (src, dst))
        degree = torch.bincount(src, minlength=n)
        incidence = None
        if bool((degree != degree[0]).any()):
            crow = torch.zeros(n + 1, dtype=torch.int64, device=device)
            crow[1:] = torch.cumsum(degree, 0)
            col = torch.arange(len(src), device=device)
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
                incidence = torch.sparse_csr_tensor(
                    crow, col, torch.ones(len(src), dtype=dtype, device=device), (n, len(src)), check_invariants=False
                )
        return dict(n=n, src=src, dst=dst, degree=degree, incidence=incidence)

    @classmethod
    def from_pairs(cls, n, src, dst, device="cpu", dtype=torch.float64):
        """Edges src[e] -> dst[e] (any order, no duplicates) over nodes 0..n-1, sorted by (src, dst)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        order = np.lexsort((dst, src))
        return cls(**cls.arrays(n, src[order], dst[order], device, dtype))

    def to(self, device, dtype):
        """The same edges with index tensors on `device` and float tensors in `dtype`."""
        return EdgeList(**self.arrays(self.n, self.src, self.dst, device, dtype))

    @property
    def num_edges(self):
        return len(self.src)

    def gather(self, x):
        """x[src]: (n, ...) -> (E, ...), node to edge (docs/theory/pdmm.md section 14)."""
        return select(x, self.src)

    def gather_neighbour(self, x):
        """x[dst]: (n, ...) -> (E, ...), node to edge from the other end (docs/theory/pdmm.md section 14)."""
        return select(x, self.dst)

    def aggregate(self, v):
        """Sum of v_e over the edges of each node: (E, ...) -> (n, ...), edge to node (docs/theory/pdmm.md
        section 14)."""
        if self.incidence is None:  # equal degrees: the contiguous edges of a node form one row
            return v.reshape(self.n, -1, *v.shape[1:]).sum(1)
        if v.dtype != self.incidence.dtype:  # e.g. bfloat16, which sparse CSR products do not support
            return v.new_zeros(self.n, *v.shape[1:]).index_add(0, self.src, v)
        return (self.incidence @ v.reshape(len(v), -1)).view(self.n, *v.shape[1:])

    def aggregate_max(self, v):
        """Max of v_e over the edges of each node (every node needs an edge): (E, ...) -> (n, ...), edge to node
        (docs/theory/pdmm.md section 14)."""
        if self.incidence is None:
            return v.reshape(self.n, -1, *v.shape[1:]).amax(1)
        out = v.new_empty(self.n, *v.shape[1:])
        index = self.src.view(-1, *[1] * (v.dim() - 1)).expand_as(v)
        return out.scatter_reduce(0, index, v, "amax", include_self=False)


@dataclass(frozen=True)
class CompiledGraph(EdgeList):
    """An undirected graph as PDMM sees it: every edge {i, j} as the directed edges i->j and j->i, sorted by
    (src, dst), with the reverse of each (docs/theory/problem.md section 4). Build it with from_graph,
    from_networkx or build; exchange(v) = v[rev] hands edge i->j what edge j->i sent (docs/theory/pdmm.md
    section 14).

    Attributes
    ----------
    n : int
        The number of nodes.
    src, dst : torch.Tensor
        (E,) int64: the directed edges' ends, sorted by (src, dst).
    degree : torch.Tensor
        (n,) int64: the edges of each node.
    incidence : torch.Tensor or None
        (n, E) sparse CSR matrix of ones (node by edge), None when every degree is equal.
    nodes : Sequence
        Node labels: node index k is nodes[k] (range(n) for graphs built from arrays).
    rev : torch.Tensor
        (E,) int64: the index of edge dst->src.
    sign : torch.Tensor
        (E,) +1 where src < dst, else -1, in the graph's float dtype.
    forward : torch.Tensor
        (E/2,) int64: the edges with src < dst, one per undirected edge.
    """

    nodes: Sequence  # node labels; node index k is nodes[k] (range(n) for graphs built from arrays)
    rev: torch.Tensor  # (E,) int64, edge index of dst->src
    sign: torch.Tensor  # (E,) +1 where src < dst (in node order), else -1
    forward: torch.Tensor  # (E/2,) the edges with src < dst: one per undirected edge

    @classmethod
    def from_networkx(cls, G: Any) -> "CompiledGraph":
        """Compile an undirected networkx graph (self loops are dropped with a warning); node k is list(G.nodes)[k].

        Parameters
        ----------
        G : networkx.Graph
            A connected undirected graph.

        Returns
        -------
        CompiledGraph
            The compiled graph, float64 on the CPU.

        Raises
        ------
        TypeError
            Where G is not a networkx graph.
        ValueError
            Where G is directed or disconnected.
        """
        return cls.from_graph(Graph.from_networkx(G))

    @classmethod
    def from_graph(cls, graph: GraphLike) -> "CompiledGraph":
        """Compile a pdmm.Graph (or anything pdmm.array_graph.as_graph takes) with array operations only.

        Parameters
        ----------
        graph : pdmm.Graph, networkx.Graph or scipy sparse matrix
            A connected undirected graph.

        Returns
        -------
        CompiledGraph
            The compiled graph, float64 on the CPU.

        Raises
        ------
        TypeError
            Where graph is none of those types.
        ValueError
            Where it is disconnected (or not a valid graph).
        """
        graph = as_graph(graph)
        if graph.components > 1:
            raise ValueError(
                f"the graph is disconnected: it has {graph.components} connected components; consensus needs one"
            )
        return cls.build(graph.nodes, *directed_edges(graph))  # directed_edges' temporaries are freed by now

    @classmethod
    def build(
        cls,
        nodes: Sequence,
        src: Any,
        dst: Any,
        rev: Any,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
    ) -> "CompiledGraph":
        """A CompiledGraph from its directed edges, already sorted by (src, dst) and each with its reverse.

        Parameters
        ----------
        nodes : Sequence
            The node labels, one per node.
        src, dst : array_like of int
            (E,) the directed edges' ends, sorted by (src, dst).
        rev : array_like of int
            (E,) the index of each edge's reverse.
        device : torch.device or str
            Where the index tensors live.
        dtype : torch.dtype
            The float dtype of sign and incidence.

        Returns
        -------
        CompiledGraph
            The graph (nothing is checked).
        """
        edges = cls.arrays(len(nodes), src, dst, device, dtype)
        src, dst = edges["src"], edges["dst"]
        sign = torch.where(src < dst, 1.0, -1.0).to(dtype)
        rev = torch.as_tensor(rev, dtype=torch.int64, device=device)
        return cls(**edges, nodes=nodes, rev=rev, sign=sign, forward=torch.nonzero(src < dst).squeeze(1))

    def to(self, device: torch.device | str, dtype: torch.dtype) -> "CompiledGraph":
        """The same graph with index tensors on `device` and float tensors in `dtype`.

        Parameters
        ----------
        device : torch.device or str
            Where the tensors go.
        dtype : torch.dtype
            The float dtype of sign and incidence.

        Returns
        -------
        CompiledGraph
            A copy on `device`.
        """
        return CompiledGraph.build(self.nodes, self.src, self.dst, self.rev, device, dtype)

    def gather_sub(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """x[src] - v, without materialising x[src] when every degree is equal (a broadcast): a gather (node to
        edge, docs/theory/pdmm.md section 14) fused with a subtraction.

        Parameters
        ----------
        x : torch.Tensor
            (n, ...) node values.
        v : torch.Tensor
            (E, ...) edge values.

        Returns
        -------
        torch.Tensor
            (E, ...) x[src] - v.
        """
        if self.incidence is None:
            return (x.unsqueeze(1) - v.reshape(self.n, -1, *v.shape[1:])).view(v.shape)
        return self.gather(x) - v

    def exchange(self, v: torch.Tensor) -> torch.Tensor:
        """v[rev]: what edge j->i sent arrives at edge i->j (docs/theory/pdmm.md section 14).

        Parameters
        ----------
        v : torch.Tensor
            (E, ...) edge values.

        Returns
        -------
        torch.Tensor
            (E, ...) the values of the reverse edges.
        """
        return select(v, self.rev)

    def relabelled(self, order: Any) -> tuple["CompiledGraph", np.ndarray]:
        """The same graph with its node k = node order[k] of this one (labels follow).

        The edges' new ends sorted by (src, dst) with a CSR conversion (a counting sort by src; each
        node's few edges then sorted), carrying each edge's old index; rev follows through edge_of.

        Parameters
        ----------
        order : array_like of int
            (n,) a permutation of the node indices.

        Returns
        -------
        graph : CompiledGraph
            The renumbered graph.
        edge_of : numpy.ndarray
            (E,) int64: the edge of this graph that each directed edge of the new one is.
        """
        import scipy.sparse as sp

        order = np.asarray(order, dtype=np.int64)
        n, E = self.n, self.num_edges
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        ends = sp.csr_array(
            (np.arange(1, E + 1), (position[self.src.cpu().numpy()], position[self.dst.cpu().numpy()])), shape=(n, n)
        )
        ends.sort_indices()
        edge_of = ends.data - 1  # 1-based above: an edge stored as 0 could be mistaken for no edge
        new_edge = np.empty(E, dtype=np.int64)
        new_edge[edge_of] = np.arange(E)
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ends.indptr))
        rev = new_edge[self.rev.cpu().numpy()[edge_of]]
        nodes = order.tolist() if self.nodes == range(n) else [self.nodes[k] for k in order.tolist()]
        graph = CompiledGraph.build(nodes, src, ends.indices.astype(np.int64), rev, self.src.device, self.sign.dtype)
        return graph, edge_of


def locality_order(graph):
    """A renumbering of a CompiledGraph's nodes that puts neighbours close together: reverse
    Cuthill-McKee (scipy.sparse.csgraph), as (n,) int64 with new node k = old node order[k]; None
    when the given order is local already: its mean index distance |i - j| over the edges is at most
    n / LOCAL_ENOUGH (RCM is then not run: a grid numbered row by row, a geometric graph numbered by
    position), or RCM does not shorten it by at least 1/LOCALITY_GAIN of the given order's.

    Why: the exchange v[rev] and the gathers read edge rows at the other end of each edge; with
    neighbours numbered close together those reads stay in cache (BENCHMARKS.md, the step at d = 1).
    What RCM costs and when it is skipped: docs/guide/solve.md, "Node order".
    """
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    n, src, dst = graph.n, graph.src.cpu().numpy(), graph.dst.cpu().numpy()
    given = np.abs(src - dst).mean()
    if given * LOCAL_ENOUGH <= n:
        return None
    start = np.concatenate([[0], np.cumsum(graph.degree.cpu().numpy())])
    adjacency = csr_array((np.ones(len(src), dtype=np.int8), dst, start), shape=(n, n))  # edges sorted by src
    order = reverse_cuthill_mckee(adjacency, symmetric_mode=True).astype(np.int64)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    renumbered = np.abs(position[src] - position[dst]).mean()
    return order if renumbered * LOCALITY_GAIN <= given else None


def directed_edges(graph):
    """(src, dst, rev) int64 arrays of a pdmm.Graph's 2m directed edges, sorted by (src, dst), rev[e] the reverse of e.

    Node k's directed edges are contiguous from start[k]: first those to smaller nodes, then
    those to larger ones, each part sorted. With the undirected edges (i, j), i < j, sorted,
    edge e = (i, j) goes i->j to the upper part of i's block and j->i to the lower part of j's.
    """
    import scipy.sparse as sp

    n, i, j = graph.n, graph.edges[:, 0], graph.edges[:, 1]
    m, e = len(i), np.arange(len(i))
    up, down = np.bincount(i, minlength=n), np.bincount(j, minlength=n)  # edges to larger / smaller nodes
    start = np.cumsum(up + down) - (up + down)
    first_up, first_down = np.cumsum(up) - up, np.cumsum(down) - down  # per node, in (i, j) / (j, i) order
    upward = start[i] + down[i] + (e - first_up[i])  # position of i->j
    # the edges in (j, i) order: CSR -> CSC is a counting sort that keeps i increasing (4x a stable argsort)
    by_j = sp.csr_array((e, j, np.append(first_up, m)), shape=(n, n)).tocsc().data
    downward = np.empty(m, dtype=np.int64)  # position of j->i
    downward[by_j] = start[j[by_j]] + (e - first_down[j[by_j]])
    src, dst, rev = (np.empty(2 * m, dtype=np.int64) for _ in range(3))
    src[upward], dst[upward], rev[upward] = i, j, downward
    src[downward], dst[downward], rev[downward] = j, i, upward
    return src, dst, rev


def select(v, index):
    """v[index] along dim 0; rows of one number go through a 1-D view, which torch indexes 2-4x faster."""
    if v[0].numel() == 1:
        return v.reshape(-1).index_select(0, index).view(len(index), *v.shape[1:])
    return v.index_select(0, index)
