"""Mixing matrices for averaging by gossip (docs/averaging.md sections 1-2) and for the decentralised
gradient methods (docs/decentralised.md section 1).

A mixing matrix W of a graph is symmetric, has rows summing to 1 and is nonzero only on the
graph's edges and its diagonal; one round of gossip is x <- W x. `mixing_matrix` builds the
standard ones from the degrees alone, `check_mixing` validates a user's own, `as_mixing` is what
the methods call (a kind or a matrix), and `spectral_interval` gives the eigenvalue range that
decides how fast gossip contracts (and that Chebyshev acceleration needs); `MixingProduct` is
the one sparse product per round with which the methods apply W. Matrices are
scipy.sparse CSR arrays, float64, rows and columns in the graph's node order. scipy is imported
on the first call: a plain `import pdmm` stays fast.
"""

import math
import numbers
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .array_graph import Graph, GraphLike, as_graph
from .edge_index import CompiledGraph
from .halo import PartGraph, computed_once, whole_graph

if TYPE_CHECKING:
    import scipy.sparse

KINDS = ("metropolis", "lazy_metropolis", "max_degree")
TOLERANCE = 1e-12  # check_mixing: symmetry and row sums, absolute
DENSE_LIMIT = 2048  # spectral_interval: dense eigvalsh up to this many nodes, sparse eigsh above
EIGSH_TOL = 1e-8  # spectral_interval: relative accuracy asked of eigsh, by which it widens the interval


def mixing_matrix(graph: "GraphLike | CompiledGraph", kind: str = "metropolis") -> "scipy.sparse.csr_array":
    """The (n, n) mixing matrix of `kind` (docs/averaging.md section 1), d_i the degree of node i::

        "metropolis"       W_ij = 1 / (1 + max(d_i, d_j)) on every edge, W_ii = 1 - sum_j W_ij
        "lazy_metropolis"  (I + W_metropolis) / 2: the same, with eigenvalues in [0, 1]
        "max_degree"       W_ij = 1 / (1 + max_k d_k) on every edge, W_ii = 1 - d_i / (1 + max_k d_k)

    Symmetric, doubly stochastic, nonnegative, with a positive diagonal.

    Parameters
    ----------
    graph : networkx.Graph, pdmm.Graph, scipy sparse matrix or CompiledGraph
        The graph (pdmm.array_graph.as_graph); rows in its node order.
    kind : str
        One of KINDS: "metropolis", "lazy_metropolis" or "max_degree".

    Returns
    -------
    scipy.sparse.csr_array
        W, float64.

    Raises
    ------
    ValueError
        For an unknown kind (or a graph as_graph refuses).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown mixing kind {kind!r}; choose one of {', '.join(KINDS)}")
    graph = _undirected(graph)
    i, j = graph.edges[:, 0], graph.edges[:, 1]
    degree = graph.degree
    weight = _weights(kind, degree[i], degree[j], degree.max())  # one per undirected edge
    diagonal = 1 - np.bincount(i, weight, graph.n) - np.bincount(j, weight, graph.n)
    return _symmetric(graph.n, i, j, *_lazy(kind, weight, diagonal))


def _weights(kind: str, degree_i: np.ndarray, degree_j: np.ndarray, top: float) -> np.ndarray:
    """W_ij, float64, for edges whose ends have degrees degree_i and degree_j, before the lazy halving: metropolis's
    1 / (1 + max(d_i, d_j)), max_degree's 1 / (1 + max_k d_k) with top = max_k d_k (docs/averaging.md section 1)."""
    if kind == "max_degree":
        return np.full(len(degree_i), 1.0 / (1 + top))
    return 1.0 / (1 + np.maximum(degree_i, degree_j))


def _lazy(kind: str, weight: np.ndarray, diagonal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weights, diagonal) of the kind: lazy_metropolis's (W + I) / 2, the others' as they are."""
    return (weight / 2, (1 + diagonal) / 2) if kind == "lazy_metropolis" else (weight, diagonal)


def check_mixing(W: Any, graph: "GraphLike | CompiledGraph") -> "scipy.sparse.csr_array":
    """W as a CSR float64 array, after checking that it is a mixing matrix of `graph`: square n x n, finite,
    symmetric and with rows summing to 1 (both to TOLERANCE), and nonzero only on the graph's edges and the
    diagonal (docs/averaging.md section 1).

    Parameters
    ----------
    W : array_like or scipy sparse matrix
        The candidate mixing matrix (a dense array, tensor or scipy sparse matrix).
    graph : networkx.Graph, pdmm.Graph, scipy sparse matrix or CompiledGraph
        The graph W must mix over.

    Returns
    -------
    scipy.sparse.csr_array
        W, float64.

    Raises
    ------
    ValueError
        One line naming the first check that fails.
    """
    graph = _undirected(graph)
    n = graph.n
    W = _csr(W)
    if W.shape != (n, n):
        raise ValueError(f"the mixing matrix must be n x n with n={n} nodes, got shape {W.shape}")
    if not np.isfinite(W.data).all():
        raise ValueError("the mixing matrix contains NaN or inf")
    asymmetry = abs(W - W.T).max() if W.nnz else 0.0
    if asymmetry > TOLERANCE:
        raise ValueError(f"the mixing matrix is not symmetric: max |W - W^T| = {asymmetry:.3g}")
    sums = W.sum(axis=1)
    k = int(np.abs(sums - 1).argmax())
    if abs(sums[k] - 1) > TOLERANCE:
        raise ValueError(f"the rows of the mixing matrix must sum to 1: row {k} sums to {sums[k]:.17g}")
    coo = W.tocoo()
    off = (coo.data != 0) & (coo.row != coo.col)
    row, col = coo.row[off].astype(np.int64), coo.col[off].astype(np.int64)
    key = np.minimum(row, col) * n + np.maximum(row, col)
    edges = graph.edges[:, 0] * n + graph.edges[:, 1]  # sorted, as the graph's edges are
    at = np.minimum(np.searchsorted(edges, key), len(edges) - 1)
    outside = np.flatnonzero(edges[at] != key)
    if len(outside):
        r, c = row[outside[0]], col[outside[0]]
        raise ValueError(
            f"the mixing matrix is nonzero off the graph: W[{r}, {c}] = {W[r, c]:.3g} but nodes "
            f"{graph.nodes[r]!r} and {graph.nodes[c]!r} are not neighbours"
        )
    return W


def as_mixing(mixing, graph) -> "scipy.sparse.csr_array":
    """The mixing matrix a method runs with: mixing_matrix(graph, mixing) for a kind (a string), else
    check_mixing(mixing, graph) for a user's matrix; of the whole graph where graph is a rank's part
    (pdmm.halo.whole_graph), or, where the rank holds only its part (a pdmm.parts.PartProblem run), the rank's rows
    of a kind's matrix (part_rows; docs/guide/distributed.md, "Each rank holds its part")."""
    if isinstance(graph, PartGraph) and graph.whole is None and isinstance(mixing, str):
        return part_rows(graph, mixing)
    graph = whole_graph(graph)
    return mixing_matrix(graph, mixing) if isinstance(mixing, str) else check_mixing(mixing, graph)


def part_rows(graph: PartGraph, kind: str) -> "scipy.sparse.csr_array":
    """A rank's rows of mixing_matrix(whole graph, kind), (n_r, n_r + h_r), columns the rows of halo(x) (own nodes,
    then ghosts: pdmm.halo.PartGraph.mixing_rows' layout), from the part alone: the ghosts' degrees through one node
    halo exchange, max_degree's maximum over the ranks. The same entries as the whole matrix's rows, each diagonal
    summed in another order (to rounding)."""
    import scipy.sparse as sp

    if kind not in KINDS:
        raise ValueError(f"unknown mixing kind {kind!r}; choose one of {', '.join(KINDS)}")
    assert graph.halo is not None and graph.ghost_of_edge is not None
    src, column = graph.src.cpu().numpy(), graph.ghost_of_edge.cpu().numpy()
    own = np.bincount(src, minlength=graph.n).astype(np.float64)
    degree = graph.halo(torch.from_numpy(own)[:, None].to(graph.sign.device))[:, 0].cpu().numpy()  # own, ghosts'
    top = (
        float(graph.collectives.maximum(torch.tensor([own.max()], dtype=torch.float64))[0])
        if kind == "max_degree"
        else 0
    )
    weight = _weights(kind, degree[src], degree[column], top)  # one per directed edge
    weight, diagonal = _lazy(kind, weight, 1 - np.bincount(src, weight, graph.n))
    rows, nodes = np.concatenate([src, np.arange(graph.n)]), np.arange(graph.n)
    entries = (np.concatenate([weight, diagonal]), (rows, np.concatenate([column, nodes])))
    return sp.csr_array(entries, shape=(graph.n, len(degree)))


def spectral_interval(W: "scipy.sparse.csr_array | np.ndarray") -> tuple[float, float]:
    """(lambda_min, lambda_2) of a mixing matrix W of a connected graph (docs/averaging.md section 2).

    lambda_min is its smallest eigenvalue, lambda_2 its largest other than the eigenvalue 1 of the all-ones
    vector. Gossip
    contracts by max(abs(lambda_min), abs(lambda_2)) per round; Chebyshev acceleration takes the interval
    (section 3).

    Up to DENSE_LIMIT nodes: dense eigvalsh. Above: eigsh (Lanczos) on W for lambda_min and on
    W - 2 11^T / n (the all-ones eigenvector moved to -1, below the rest) for lambda_2, each to a
    relative accuracy EIGSH_TOL and widened outward by it, as a Lanczos estimate of an extreme
    eigenvalue lies inside the spectrum (section 5: a slightly wide interval costs little, a narrow
    one can diverge). Seconds at 10^5 nodes on geometric graphs, tens of seconds on random regular
    ones, whose eigenvalues crowd at the ends of the spectrum.

    Parameters
    ----------
    W : scipy.sparse.csr_array or numpy.ndarray
        A mixing matrix (mixing_matrix, check_mixing).

    Returns
    -------
    lambda_min, lambda_2 : float
        The interval's ends.

    Raises
    ------
    ValueError
        When W's nonzeros do not connect the nodes: the eigenvalue 1 is then repeated and averaging cannot
        converge (or when W is not a numeric square matrix).
    """
    from scipy.sparse.csgraph import connected_components

    W = _csr(W)
    n = W.shape[0]
    parts = connected_components(W != 0, directed=False, return_labels=False)
    if parts > 1:
        raise ValueError(
            f"the mixing matrix connects its nodes in {parts} separate parts: averaging over a "
            "disconnected graph cannot converge"
        )
    if n <= DENSE_LIMIT:
        from scipy.linalg import eigvalsh

        eigenvalues = eigvalsh(W.toarray())  # ascending; the largest is the 1 of the all-ones vector
        return float(eigenvalues[0]), float(eigenvalues[-2])
    from scipy.sparse.linalg import LinearOperator, eigsh

    deflated = LinearOperator((n, n), matvec=lambda v: W @ v - (2 / n) * v.sum(0), dtype=np.float64)
    start = np.random.default_rng(0).standard_normal(n)  # a fixed start: the same interval on every call
    (smallest,) = eigsh(W, k=1, which="SA", tol=EIGSH_TOL, v0=start, return_eigenvectors=False)
    (second,) = eigsh(deflated, k=1, which="LA", tol=EIGSH_TOL, v0=start, return_eigenvectors=False)
    return float(smallest - EIGSH_TOL * abs(smallest)), float(second + EIGSH_TOL * abs(second))


def mixing_spectra(
    graph: "GraphLike | CompiledGraph", kinds: tuple[str, ...] = KINDS
) -> dict[str, tuple[float, float]]:
    """{kind: spectral_interval(mixing_matrix(graph, kind))} for each mixing kind: exactly the (lambda_min, lambda_2)
    that a run on the whole graph computes (run_interval), for a rank that holds only its part
    (pdmm.parts.PartProblem.spectra; docs/guide/distributed.md, "Each rank holds its part"). Give the whole problem's
    compiled graph (pdmm.Problem.compiled), whose node order the parts' global ids follow: above DENSE_LIMIT nodes
    the Lanczos estimates depend on the node order to EIGSH_TOL. ValueError for an unknown kind or a graph whose
    mixing matrices do not connect its nodes."""
    return {kind: spectral_interval(mixing_matrix(graph, kind)) for kind in kinds}


def checked_spectra(spectra: Any) -> dict[str, tuple[float, float]]:
    """spectra as {kind: (lambda_min, lambda_2)} of Python floats, after checking that it maps mixing kinds (KINDS)
    to pairs of finite real numbers, the first at most the second (mixing_spectra's form; docs/guide/distributed.md,
    "Each rank holds its part"). ValueError, one line, naming the first entry that is not."""
    if not isinstance(spectra, Mapping):
        raise ValueError(f"spectra must map mixing kinds to (lambda_min, lambda_2), got {type(spectra).__name__}")
    checked = {}
    for kind, pair in spectra.items():
        if kind not in KINDS:
            raise ValueError(f"spectra: unknown mixing kind {kind!r}; the kinds are {', '.join(KINDS)}")
        ends = list(pair) if isinstance(pair, (tuple, list)) else []
        if not (
            len(ends) == 2
            and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in ends)
            and ends[0] <= ends[1]
        ):
            raise ValueError(
                f"spectra[{kind!r}] must be (lambda_min, lambda_2), finite, lambda_min <= lambda_2, got {pair!r:.80}"
            )
        checked[kind] = (float(ends[0]), float(ends[1]))
    return checked


def run_interval(W: "scipy.sparse.csr_array", graph: CompiledGraph, mixing: Any) -> tuple[float, float]:
    """spectral_interval(W) of a run's mixing matrix W, built from `mixing` (a kind, or the user's matrix): on a
    rank's part (pdmm.halo.PartGraph) computed by rank 0 alone and the same on every rank (docs/guide/distributed.md,
    "What runs on the engine"); where the rank holds only its part, the part's spectra[mixing], given with it
    (pdmm.parts.PartProblem.spectra, the same on every rank), and a one-line ValueError naming what to give where
    they lack the kind."""
    if isinstance(graph, PartGraph) and graph.whole is None:
        if isinstance(mixing, str) and mixing in graph.spectra:
            low, high = graph.spectra[mixing]
            return low, high
        raise ValueError(
            f"the {mixing!r} mixing matrix's spectrum needs the whole graph, which no rank holds here: give the "
            f"PartProblem spectra={{{mixing!r}: (lambda_min, lambda_2)}} (pdmm.mixing.mixing_spectra of the whole "
            "graph; pdmm-bridge partition writes them), chebyshev its interval=(low, high), or run the whole problem"
        )
    low, high = computed_once(lambda: spectral_interval(W), 2, graph)
    return low, high


class MixingProduct:
    """x -> base + alpha W x over (n, B, d) tensors, W a mixing matrix (scipy CSR): one torch sparse CSR
    product on the graph's device and dtype (like), with x and base seen as (n, B d) matrices (add_product); the
    matrix is converted once, here. halo: where W holds a rank's rows of the whole matrix (n_r x (n_r + h_r),
    pdmm.halo.PartGraph.mixing_rows), x -> cat(x, its ghosts' rows) (pdmm.halo.NodeHalo), one exchange per product."""

    def __init__(self, W, like, halo=None):
        W, self.halo = W.sorted_indices(), halo
        with warnings.catch_warnings():  # "sparse CSR support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            self.W = torch.sparse_csr_tensor(
                torch.from_numpy(W.indptr).to(torch.int64),
                torch.from_numpy(W.indices).to(torch.int64),
                torch.from_numpy(W.data),
                W.shape,
                check_invariants=False,
            ).to(like.device, like.dtype)

    def __call__(self, x, base=None, alpha=1.0):
        wide = x if self.halo is None else self.halo(x)
        if base is None:
            return (self.W @ wide.reshape(len(wide), -1)).view(x.shape)
        return add_product(base, self.W, wide, alpha)


def mixing_product(W: "scipy.sparse.csr_array", graph: CompiledGraph) -> MixingProduct:
    """The product with the mixing matrix W (of the whole graph) on the run's graph: W itself, or on a rank's part
    (pdmm.halo.PartGraph) its rows, with the node halo (docs/guide/distributed.md, "What runs on the engine")."""
    if isinstance(graph, PartGraph):  # W: the whole matrix, or the rank's rows already (part_rows)
        return MixingProduct(W if graph.whole is None else graph.mixing_rows(W), graph.sign, graph.halo)
    return MixingProduct(W, graph.sign)


def add_product(base: torch.Tensor, matrix: torch.Tensor, x: torch.Tensor, alpha: Any) -> torch.Tensor:
    """base + alpha M x over node tensors (n, B, w), M a sparse (n, n') matrix and x (n', B, w) seen as an (n', B w)
    matrix (n' > n where x carries a rank's ghost rows after its own, pdmm.halo.NodeHalo).

    A number alpha: one torch.addmm. One alpha per instance, a tensor (1, B, 1) (a grid of values run as one batch,
    docs/decentralised.md section 8): the product scaled and added, which on the CPU rounds as addmm does.

    Parameters
    ----------
    base : torch.Tensor
        (n, B, w) what the product is added to.
    matrix : torch.Tensor
        (n, n) sparse CSR.
    x : torch.Tensor
        (n', B, w) the node values multiplied.
    alpha : float or torch.Tensor
        A number, or (1, B, 1) one per instance.

    Returns
    -------
    torch.Tensor
        (n, B, w).
    """
    rows = x.reshape(len(x), -1)
    if torch.is_tensor(alpha):
        return base + alpha * (matrix @ rows).view(base.shape)
    return torch.addmm(base.reshape(len(base), -1), matrix, rows, alpha=alpha).view(base.shape)


def _undirected(graph):
    """A pdmm.Graph from anything as_graph takes or from a CompiledGraph (the solver's, in its run order)."""
    if not isinstance(graph, CompiledGraph):
        return as_graph(graph)
    forward = graph.forward.cpu()
    edges = torch.stack([graph.src.cpu()[forward], graph.dst.cpu()[forward]], 1).numpy()  # (i, j), i < j, sorted
    return Graph(graph.n, edges, graph.nodes)


def _csr(W):
    """W as a scipy CSR float64 array (ValueError when it is not a 2-D numeric matrix)."""
    import scipy.sparse as sp

    if torch.is_tensor(W):
        W = W.detach().cpu().numpy()
    try:
        W = W.astype(np.float64) if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"the mixing matrix must be a kind ({', '.join(KINDS)}) or a numeric n x n matrix, got {type(W).__name__}"
        ) from None
    if W.ndim != 2:
        raise ValueError(
            f"the mixing matrix must be a kind ({', '.join(KINDS)}) or an n x n matrix, got shape {W.shape}"
        )
    return sp.csr_array(W)


def _symmetric(n, i, j, weight, diagonal):
    """The CSR array with weight on (i, j) and (j, i) for every edge and `diagonal` on the diagonal."""
    import scipy.sparse as sp

    nodes = np.arange(n, dtype=np.int64)
    rows, cols = np.concatenate([i, j, nodes]), np.concatenate([j, i, nodes])
    return sp.csr_array((np.concatenate([weight, weight, diagonal]), (rows, cols)), shape=(n, n))
