"""pdmm.Graph: an undirected graph held as arrays, for graphs too large for networkx.

A Graph has n nodes and m undirected edges {i, j} (docs/theory/problem.md section 4), stored once each as the rows
(i, j), i < j, of `edges`, sorted. Build one from edge arrays (`from_edges`), a scipy sparse
adjacency matrix (`from_scipy`) or a networkx graph (`from_networkx`), or sample one directly as
arrays with `random_geometric`, `random_regular`, `grid` or `erdos_renyi`. The random generators
are reproducible from `seed` and, like pdmm.topology, resample (new draws from the same
generator) until the graph is connected, at most MAX_RESAMPLES times. `pdmm.CompiledGraph.from_graph`
compiles a Graph for the solver without a per-edge Python loop; pdmm.Problem and every
constructor in pdmm.problem accept a Graph, a networkx graph or a scipy sparse matrix.
"""

import functools
import math
import numbers
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import networkx as nx
import numpy as np
import torch

from .topologies import MAX_RESAMPLES

if TYPE_CHECKING:
    import scipy.sparse

GraphLike: TypeAlias = "nx.Graph | Graph | scipy.sparse.sparray | scipy.sparse.spmatrix"
"""What pdmm accepts as a graph: a networkx graph, a pdmm.Graph or a square scipy sparse adjacency matrix."""
IndexLike: TypeAlias = "np.ndarray | torch.Tensor | Sequence[int]"
"""Node indices: a 1-D integer numpy array, torch tensor or sequence."""

MAX_NODES = 2**31  # edge keys i * n + j must fit in int64
MAX_SWITCH_ROUNDS = 1000  # random_regular: rounds of switches that remove loops and repeated edges
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


@dataclass(frozen=True, eq=False, repr=False)
class Graph:
    """An undirected simple graph on nodes 0..n-1 held as arrays (docs/theory/problem.md section 4).

    Build it with a class method (from_edges, from_scipy, from_networkx or a generator), which checks and
    normalises the edges; the constructor itself checks nothing.

    Attributes
    ----------
    n : int
        The number of nodes, indexed 0..n-1.
    edges : numpy.ndarray
        (m, 2) int64: rows (i, j) with i < j, sorted, each undirected edge once.
    nodes : Sequence
        Node labels: node index k is nodes[k]; range(n) for graphs built from arrays.
    """

    n: int  # number of nodes, indexed 0..n-1
    edges: np.ndarray  # (m, 2) int64: rows (i, j) with i < j, sorted, each undirected edge once
    nodes: Sequence  # node labels: node index k is nodes[k]; range(n) for graphs built from arrays

    @classmethod
    def from_edges(cls, src: IndexLike, dst: IndexLike, n: int | None = None) -> "Graph":
        """The undirected graph with an edge {src[e], dst[e]} for every e.

        Repeated edges and both directions of one edge become one undirected edge; self loops
        (i, i) are dropped with a warning, as a constraint couples two distinct nodes.

        Parameters
        ----------
        src, dst : array_like of int
            1-D integer numpy arrays, torch tensors or sequences of node indices in 0..n-1, one entry per edge.
        n : int or None
            The number of nodes; None: the largest index + 1.

        Returns
        -------
        Graph
            The graph, its edges checked, deduplicated and sorted.

        Raises
        ------
        ValueError
            For indices that are not 1-D integers, src and dst of different lengths, negative or out-of-range
            indices, or n outside 1..MAX_NODES; also when no edge is left.
        """
        src, dst = _indices("src", src), _indices("dst", dst)
        if len(src) != len(dst):
            raise ValueError(f"src and dst must have the same length, got {len(src)} and {len(dst)}")
        if len(src) and min(src.min(), dst.min()) < 0:
            e = int(np.flatnonzero((src < 0) | (dst < 0))[0])
            raise ValueError(f"node indices must be >= 0, got edge {e}: ({src[e]}, {dst[e]})")
        top = int(max(src.max(), dst.max())) if len(src) else -1
        n = top + 1 if n is None else n
        if not (isinstance(n, numbers.Integral) and not isinstance(n, bool) and 1 <= n <= MAX_NODES):
            raise ValueError(f"n must be an integer in 1..{MAX_NODES}, got n={n!r}")
        if top >= n:
            raise ValueError(f"node index {top} is out of range for n={n} nodes (indices 0..{n - 1})")
        return from_pairs(int(n), src, dst, range(int(n)), warn=True)

    @classmethod
    def from_scipy(cls, adjacency: Any) -> "Graph":
        """The graph of a square scipy.sparse matrix or array: an edge {i, j} wherever A[i, j] or A[j, i] is
        nonzero (the union of A and its transpose; stored zeros and the values are ignored, a NaN is an error).

        Parameters
        ----------
        adjacency : scipy.sparse matrix or array
            The (n, n) adjacency matrix A.

        Returns
        -------
        Graph
            The graph on n nodes.

        Raises
        ------
        TypeError
            Where adjacency is not a scipy sparse matrix or array.
        ValueError
            Where it is not square or holds a NaN.
        """
        import scipy.sparse as sp

        if not sp.issparse(adjacency):
            raise TypeError(f"from_scipy needs a scipy.sparse matrix or array, got {type(adjacency).__name__}")
        if adjacency.ndim != 2 or adjacency.shape[0] != adjacency.shape[1]:
            raise ValueError(f"the adjacency matrix must be square (n, n), got shape {adjacency.shape}")
        coo = adjacency.tocoo()
        if coo.data.dtype.kind in "fc" and np.isnan(coo.data).any():
            raise ValueError("the adjacency matrix contains NaN; an edge is a nonzero entry")
        keep = coo.data != 0
        return cls.from_edges(coo.row[keep], coo.col[keep], n=adjacency.shape[0])

    @classmethod
    def from_networkx(cls, G: nx.Graph) -> "Graph":
        """The graph of an undirected networkx graph; node index k is list(G.nodes)[k], its label.

        Parameters
        ----------
        G : networkx.Graph
            An undirected graph.

        Returns
        -------
        Graph
            The same graph as arrays, with G's node labels.

        Raises
        ------
        TypeError
            Where G is not a networkx graph.
        ValueError
            Where G is directed.
        """
        if not isinstance(G, nx.Graph):
            raise TypeError(f"from_networkx needs a networkx graph, got {type(G).__name__}")
        if G.is_directed():
            raise ValueError("the graph must be undirected (pass G.to_undirected())")
        nodes = list(G.nodes)
        index = {v: k for k, v in enumerate(nodes)}
        ends = np.fromiter(
            (index[v] for edge in G.edges() for v in edge), dtype=np.int64, count=2 * G.number_of_edges()
        )
        return from_pairs(len(nodes), ends[0::2], ends[1::2], nodes, warn=True)

    @classmethod
    def from_pyg(cls, data: Any) -> "Graph":
        """The graph of a PyTorch Geometric `Data` object: an edge {i, j} for every column (i, j) of
        data.edge_index, both directions of an edge (PyG's convention for undirected graphs) and repeats becoming
        one undirected edge, on data.num_nodes nodes (docs/guide/solve.md, "Graphs from PyTorch Geometric").
        Only the structure is read: node features stay in `data`.

        Parameters
        ----------
        data : torch_geometric.data.Data
            A homogeneous graph (edge_index (2, E), num_nodes).

        Returns
        -------
        Graph
            The undirected graph on nodes 0..num_nodes-1.

        Raises
        ------
        TypeError
            Where data has no edge_index (a HeteroData holds one per edge type: convert with to_homogeneous()).
        ValueError
            Where edge_index is not (2, E) integer, or as from_edges.
        """
        edge_index = getattr(data, "edge_index", None)
        if edge_index is None or not hasattr(edge_index, "shape"):
            raise TypeError(
                f"from_pyg needs a torch_geometric Data with an edge_index, got {type(data).__name__} "
                "(a HeteroData: call .to_homogeneous() first)"
            )
        if tuple(edge_index.shape[:1]) != (2,) or len(edge_index.shape) != 2:
            raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
        ends = np.asarray(edge_index.detach().cpu() if hasattr(edge_index, "detach") else edge_index)
        return cls.from_edges(ends[0], ends[1], n=getattr(data, "num_nodes", None))

    def to_pyg(self) -> Any:
        """This graph as a PyTorch Geometric `Data`: edge_index (2, 2m) int64 with both directions of every edge
        (sorted by source, then target) and num_nodes = n; node labels are not carried (index k is nodes[k]).

        Returns
        -------
        torch_geometric.data.Data

        Raises
        ------
        ImportError
            Where torch_geometric is not installed (pip install "pdmm-bridge[pyg]").
        """
        try:
            from torch_geometric.data import Data
        except ImportError:
            raise ImportError('Graph.to_pyg needs torch_geometric: pip install "pdmm-bridge[pyg]"') from None
        i, j = self.edges[:, 0], self.edges[:, 1]
        src, dst = np.concatenate([i, j]), np.concatenate([j, i])
        order = np.lexsort((dst, src))
        edge_index = torch.from_numpy(np.stack([src[order], dst[order]]))
        return Data(edge_index=edge_index, num_nodes=self.n)

    @classmethod
    def random_geometric(cls, n: int, radius: float | None = None, seed: int = 0) -> "Graph":
        """n uniform random points in the unit square, an edge wherever two are within Euclidean distance
        `radius` (<=, as networkx's random_geometric_graph), resampled until connected.

        The nodes are numbered by position, in horizontal strips of height `radius` and by x within a
        strip, so that neighbours have nearby indices (the same graph up to relabelling; edge arrays
        indexed by node then stay close in memory).

        Parameters
        ----------
        n : int
            The number of nodes, >= 2.
        radius : float or None
            The connection radius, > 0; None: sqrt(2 ln n / n).
        seed : int
            The seed of numpy's random generator.

        Returns
        -------
        Graph
            A connected random geometric graph.

        Raises
        ------
        ValueError
            For a bad n or radius, or when MAX_RESAMPLES draws are all disconnected.
        """
        from scipy.spatial import cKDTree

        _check_size(n)
        radius = math.sqrt(2 * math.log(n) / n) if radius is None else radius
        if not (isinstance(radius, numbers.Real) and radius > 0):
            raise ValueError(f"random_geometric needs radius > 0, got radius={radius!r}")

        def sample(rng):
            points = rng.random((n, 2))
            points = points[np.lexsort((points[:, 0], np.floor(points[:, 1] / radius)))]  # numbered by position
            pairs = cKDTree(points).query_pairs(radius, output_type="ndarray")  # (m, 2), i < j
            return from_pairs(n, pairs[:, 0], pairs[:, 1], range(n))

        return _connected(sample, seed, f"n={n}, radius={radius}")

    @classmethod
    def random_regular(cls, n: int, degree: int = 4, seed: int = 0) -> "Graph":
        """A simple graph with every node of degree `degree`, resampled until connected.

        The configuration model (n * degree stubs paired at random), then every self loop or repeated edge
        {a, b} switched with a random other edge {c, d} to {a, c}, {b, d} (or {a, d}, {b, c}), which keeps every
        degree, when that creates no loop or repeated edge, until none is left. For degree > (n - 1) / 2 it is
        the complement of such a graph of degree n - 1 - degree. Close to, not exactly, uniform over the
        degree-regular graphs.

        Parameters
        ----------
        n : int
            The number of nodes, >= 2.
        degree : int
            Every node's degree, in 1..n-1, with n * degree even.
        seed : int
            The seed of numpy's random generator.

        Returns
        -------
        Graph
            A connected degree-regular graph.

        Raises
        ------
        ValueError
            For a bad n or degree, or when MAX_RESAMPLES draws are all disconnected.
        """
        _check_size(n)
        if not (isinstance(degree, numbers.Integral) and 1 <= degree < n):
            raise ValueError(f"random_regular needs an integer degree in 1..n-1, got degree={degree!r} for n={n}")
        if n * degree % 2:
            raise ValueError(f"random_regular needs n * degree even, got n={n}, degree={degree}")

        def sample(rng):
            return from_pairs(n, *_switched_pairing(rng, n, degree), range(n))

        return _connected(sample, seed, f"n={n}, degree={degree}")

    @classmethod
    def grid(cls, rows: int, cols: int, periodic: bool = False) -> "Graph":
        """The rows x cols grid, node r * cols + c at row r, column c (nx.grid_2d_graph's node order).

        Parameters
        ----------
        rows, cols : int
            The grid's size, >= 1 each (>= 3 when periodic), at least 2 nodes in all.
        periodic : bool
            Whether to add the wrap-around edges (a torus).

        Returns
        -------
        Graph
            The grid graph.

        Raises
        ------
        ValueError
            For sizes that are not such integers.
        """
        for name, size in (("rows", rows), ("cols", cols)):
            if not (isinstance(size, numbers.Integral) and size >= (3 if periodic else 1)):
                raise ValueError(f"{name} must be an integer >= {3 if periodic else 1}, got {size!r}")
        if rows * cols < 2:
            raise ValueError(f"a grid needs at least 2 nodes, got {rows} x {cols}")
        _check_size(rows * cols)
        index = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)
        pairs = [(index[:, :-1], index[:, 1:]), (index[:-1], index[1:])]  # right and down neighbours
        if periodic:
            pairs += [(index[:, -1], index[:, 0]), (index[-1], index[0])]
        src, dst = (np.concatenate([p[k].ravel() for p in pairs]) for k in (0, 1))
        return from_pairs(rows * cols, src, dst, range(rows * cols))

    @classmethod
    def erdos_renyi(cls, n: int, p: float | None = None, seed: int = 0) -> "Graph":
        """G(n, p): each of the n(n-1)/2 pairs is an edge with probability p, drawn as an edge count
        M ~ Binomial(n(n-1)/2, p) and then M distinct pairs uniformly at random; resampled until connected.

        Parameters
        ----------
        n : int
            The number of nodes, >= 2.
        p : float or None
            The edge probability, in (0, 1]; None: 2 ln n / n.
        seed : int
            The seed of numpy's random generator.

        Returns
        -------
        Graph
            A connected Erdos-Renyi graph.

        Raises
        ------
        ValueError
            For a bad n or p, or when MAX_RESAMPLES draws are all disconnected.
        """
        _check_size(n)
        p = 2 * math.log(n) / n if p is None else p
        if not (isinstance(p, numbers.Real) and 0 < p <= 1):
            raise ValueError(f"erdos_renyi needs 0 < p <= 1, got p={p!r}")

        def sample(rng):
            return from_pairs(n, *_distinct_pairs(rng, n, int(rng.binomial(n * (n - 1) // 2, p))), range(n))

        return _connected(sample, seed, f"n={n}, p={p}")

    def number_of_nodes(self) -> int:
        """n, as networkx's method of that name.

        Returns
        -------
        int
            The number of nodes.
        """
        return self.n

    def number_of_edges(self) -> int:
        """m, the number of undirected edges.

        Returns
        -------
        int
            The number of undirected edges.
        """
        return len(self.edges)

    @property
    def degree(self) -> np.ndarray:
        """(n,) int64: the number of neighbours of every node."""
        return np.bincount(self.edges.ravel(), minlength=self.n)

    @functools.cached_property
    def components(self) -> int:
        """The number of connected components (scipy.sparse.csgraph; 1 for a connected graph)."""
        from scipy.sparse.csgraph import connected_components

        return int(
            connected_components(self.adjacency(triangle=True), directed=True, connection="weak", return_labels=False)
        )

    def adjacency(self, triangle: bool = False) -> "scipy.sparse.csr_array":
        """The (n, n) scipy.sparse CSR adjacency matrix of ones.

        Parameters
        ----------
        triangle : bool
            Whether to keep only the entries (i, j) with i < j (one per edge): then built from the sorted rows of
            `edges` directly (O(n + m), no sort).

        Returns
        -------
        scipy.sparse.csr_array
            The adjacency matrix, float64.
        """
        import scipy.sparse as sp

        i, j = self.edges[:, 0], self.edges[:, 1]
        if triangle:  # the rows (i, j) are sorted: they are the CSR's entries as they stand, no sort
            indptr = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(np.bincount(i, minlength=self.n), out=indptr[1:])
            return sp.csr_array((np.ones(len(j)), np.ascontiguousarray(j), indptr), shape=(self.n, self.n))
        i, j = np.concatenate([i, j]), np.concatenate([j, i])
        return sp.csr_array((np.ones(len(i)), (i, j)), shape=(self.n, self.n))

    def to_networkx(self) -> nx.Graph:
        """The same graph as a networkx.Graph with the same node labels (small graphs: one Python object per edge).

        Returns
        -------
        networkx.Graph
            The graph, nodes in this graph's order.
        """
        G = nx.Graph()
        G.add_nodes_from(self.nodes)
        labels = self.nodes
        G.add_edges_from((labels[i], labels[j]) for i, j in self.edges.tolist())
        return G

    def __repr__(self):
        return f"Graph(n={self.n}, edges={len(self.edges)})"


def as_graph(graph: GraphLike) -> Graph:
    """A pdmm.Graph from a pdmm.Graph, an undirected networkx graph or a square scipy sparse adjacency matrix."""
    if isinstance(graph, Graph):
        return graph
    if isinstance(graph, nx.Graph):
        return Graph.from_networkx(graph)
    if _is_sparse(graph):
        return Graph.from_scipy(graph)
    raise TypeError(
        "the graph must be a networkx graph, a pdmm.Graph or a scipy sparse adjacency matrix, "
        f"got {type(graph).__name__}"
    )


def node_count(graph: GraphLike) -> int:
    """n for any graph as_graph accepts, without converting a networkx graph or a scipy matrix."""
    if isinstance(graph, (Graph, nx.Graph)):
        return graph.number_of_nodes()
    if _is_sparse(graph) and graph.ndim == 2:
        return graph.shape[0]
    return as_graph(graph).n  # raises the TypeError or ValueError that names what is wrong


def _is_sparse(graph):
    """Whether graph is a scipy sparse matrix or array (scipy.sparse need not be imported for it not to be)."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(graph)


def _indices(name: str, values: IndexLike) -> np.ndarray:
    """values as a 1-D integer numpy array (not yet range-checked)."""
    if torch.is_tensor(values):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of node indices, got shape {array.shape}")
    if array.size == 0:
        return array.astype(np.int64)
    if array.dtype.kind in "fc" and np.isnan(array).any():
        raise ValueError(f"{name} contains NaN; node indices must be integers")
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer node indices, got dtype {array.dtype}")
    return array


def from_pairs(n, src, dst, nodes, warn=False):
    """The Graph of node-index arrays src, dst (in 0..n-1): self loops dropped (warn: with a warning), each
    undirected edge kept once, rows sorted. No edges is an error only when warn is set (user input)."""
    src, dst = src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)
    loops = src == dst
    if loops.any():
        if warn:
            _warn_caller(
                f"the graph has {int(loops.sum())} self-loop(s) (i, i); they are ignored, as a constraint "
                "couples two distinct nodes"
            )
        src, dst = src[~loops], dst[~loops]
    if warn and len(src) == 0:
        raise ValueError(f"the graph has {n} nodes and no edges; PDMM needs a connected graph")
    i, j = np.minimum(src, dst), np.maximum(src, dst)
    key = i * n + j
    if not bool((key[1:] > key[:-1]).all()):  # not already sorted and unique
        import scipy.sparse as sp

        # COO -> CSR is a counting sort by i, then short sorts within rows: 2-4x faster than np.sort(key),
        # and np.unique hashes (10x slower, numpy 2.4)
        A = sp.coo_array((np.ones(len(i), dtype=bool), (i, j)), shape=(n, n)).tocsr()
        A.sum_duplicates()
        i, j = np.repeat(np.arange(n, dtype=np.int64), np.diff(A.indptr)), A.indices.astype(np.int64)
    return Graph(n, np.stack([i, j], axis=1), nodes)


def _check_size(n):
    if not (isinstance(n, numbers.Integral) and not isinstance(n, bool) and 2 <= n <= MAX_NODES):
        raise ValueError(f"a generated graph needs an integer n in 2..{MAX_NODES} nodes, got n={n!r}")


def _connected(sample, seed, params):
    """sample(rng) until the graph is connected, all draws from one generator seeded with `seed`."""
    rng = np.random.default_rng(seed)
    for _ in range(MAX_RESAMPLES):
        graph = sample(rng)
        if len(graph.edges) and graph.components == 1:
            return graph
    raise ValueError(f"no connected sample in {MAX_RESAMPLES} tries with {params}; make the graph denser")


def _switched_pairing(rng, n, degree):
    """(src, dst) of a simple degree-regular graph: random stub pairing, then switches (Graph.random_regular)."""
    if 2 * degree > n - 1:  # dense: the complement of a sparse (n - 1 - degree)-regular graph
        keep = np.ones(n * (n - 1) // 2, dtype=bool)
        i, j = _switched_pairing(rng, n, n - 1 - degree)
        keep[_pair_rank(np.minimum(i, j), np.maximum(i, j), n)] = False
        i, j = np.triu_indices(n, 1)
        return i[keep], j[keep]
    ends = rng.permutation(np.repeat(np.arange(n, dtype=np.int64), degree)).reshape(-1, 2)  # (m, 2)
    m = len(ends)
    for _ in range(MAX_SWITCH_ROUNDS):
        key = np.minimum(ends[:, 0], ends[:, 1]) * n + np.maximum(ends[:, 0], ends[:, 1])
        order = np.argsort(key)
        present = key[order]  # sorted
        repeat = np.zeros(m, dtype=bool)
        repeat[order[1:]] = present[1:] == present[:-1]  # every copy of an edge after its first
        bad = np.flatnonzero((ends[:, 0] == ends[:, 1]) | repeat)
        if len(bad) == 0:
            return np.divmod(present, n)  # sorted (i, j), i < j
        partner = rng.choice(m, size=len(bad), replace=False)
        flip = rng.random(len(bad)) < 0.5
        a, b = ends[bad, 0], ends[bad, 1]
        c, d = np.where(flip, ends[partner, 1], ends[partner, 0]), np.where(flip, ends[partner, 0], ends[partner, 1])
        new = np.concatenate([np.minimum(a, c) * n + np.maximum(a, c), np.minimum(b, d) * n + np.maximum(b, d)])
        # a switch is made only if its partner is a good edge and it creates neither a loop nor an edge
        # already there; two switches of one round that create the same edge are undone by the next round
        ok = ~np.isin(partner, bad) & (a != c) & (b != d) & ~_member(new, present).reshape(2, -1).any(0)
        bad, partner, a, b, c, d = bad[ok], partner[ok], a[ok], b[ok], c[ok], d[ok]
        ends[bad], ends[partner] = np.stack([a, c], 1), np.stack([b, d], 1)
    raise ValueError(
        f"random_regular: loops or repeated edges left after {MAX_SWITCH_ROUNDS} rounds of switches "
        f"(n={n}, degree={degree}); try another seed"
    )


def _member(values, present):
    """values in the sorted array `present` (np.isin hashes, 10x slower here)."""
    at = np.minimum(np.searchsorted(present, values), len(present) - 1)
    return present[at] == values


def _pair_rank(i, j, n):
    """The position of pair (i, j), i < j, in np.triu_indices(n, 1) order."""
    return i * (2 * n - i - 1) // 2 + (j - i - 1)


def _distinct_pairs(rng, n, count):
    """(src, dst) of `count` distinct unordered pairs of distinct nodes, uniformly at random: i.i.d. uniform pairs,
    deduplicated until there are enough, then a uniform subset (the distinct set of i.i.d. draws is uniform
    given its size, so the result is a uniform count-subset)."""
    total, keys = n * (n - 1) // 2, np.empty(0, dtype=np.int64)
    while len(keys) < count:
        missing = count - len(keys)
        draws = int(missing * total / (total - len(keys))) + 16  # allow for repeats of pairs already held
        i = rng.integers(n, size=draws)
        j = rng.integers(n - 1, size=draws)
        j += j >= i  # uniform over the n - 1 other nodes
        keys = np.sort(np.concatenate([keys, np.minimum(i, j) * n + np.maximum(i, j)]))
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    if len(keys) > count:
        keys = np.sort(keys[rng.choice(len(keys), size=count, replace=False)])
    return np.divmod(keys, n)


def _warn_caller(message):
    """warnings.warn, attributed to the first caller outside pdmm."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level)
