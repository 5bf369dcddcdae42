"""pdmm.Problem (docs/theory/problem.md sections 1, 5) and ready-made constructors with per-node data.

G is a networkx graph, a pdmm.Graph or a scipy sparse adjacency matrix (pdmm/array_graph.py). Row i
of every data array belongs to node i: the i-th node of `G.nodes` (a pdmm.Graph or matrix:
node index i). Arrays may carry a leading batch axis B for B independent instances on the
same graph, solved together.
"""

import math
from typing import Any, TypeAlias

import numpy as np
import torch

from .array_graph import GraphLike, as_graph, node_count
from .constraints import Consensus, EdgeMatrices
from .edge_index import CompiledGraph
from .local import Lasso, LocalFunction, Logistic, Quadratic

Constraints: TypeAlias = "str | dict[tuple[Any, Any], tuple]"
"""A problem's constraints: "consensus" or {(i, j): (A_ij, A_ji, b_ij[, "<="])}, one entry per undirected edge."""


class Problem:
    """minimise sum_i f_i(x_i) s.t. A_ij x_i + A_ji x_j = b_ij (or <= b_ij) on every edge {i, j} of `graph`
    (docs/theory/problem.md section 1).

    Parameters
    ----------
    graph : networkx.Graph, pdmm.Graph or scipy sparse matrix
        The connected communication graph (kept as given in `.graph`); self-loops are ignored with a warning.
    local : pdmm.LocalFunction
        The local functions f_i, shaped (n, B, d): n nodes, B instances, x_i of size d.
    constraints : str or dict
        "consensus" (x_i = x_j on every edge) or a dict {(i, j): (A_ij, A_ji, b_ij)} with one entry per
        undirected edge, A of shape (m, d) and b of shape (m,); an entry (A_ij, A_ji, b_ij, "<=") makes that
        edge's m rows inequalities (pdmm and qa-pdmm; equalities and inequalities may be mixed over the edges);
        i and j are node labels (node indices for a pdmm.Graph or a matrix).
    batched : bool or None
        Whether results keep the batch axis; None: when there is more than one instance.

    Raises
    ------
    TypeError
        Where local is not a LocalFunction, or the graph is not a graph.
    ValueError
        Where the graph is disconnected, the local data's node count differs from the graph's, or the
        constraints are malformed (pairs that are not edges, an edge missing or given twice, shapes that
        disagree, NaN or inf).
    """

    def __init__(
        self,
        graph: GraphLike,
        local: LocalFunction,
        constraints: Constraints = "consensus",
        batched: bool | None = None,
    ):
        if not isinstance(local, LocalFunction):
            raise TypeError(f"local must be a pdmm.local.LocalFunction, got {type(local).__name__}")
        self.graph = graph
        self.compiled = CompiledGraph.from_graph(as_graph(graph))
        self.local = local
        self.n, self.batch, self.dim = local.shape
        self.batched = self.batch > 1 if batched is None else bool(batched)
        if self.n != self.compiled.n:
            raise ValueError(f"the local data has {self.n} nodes but the graph has {self.compiled.n}")
        self.edge_matrices: tuple[torch.Tensor, torch.Tensor] | None
        self.inequality: torch.Tensor | None
        if isinstance(constraints, str):
            if constraints != "consensus":
                raise ValueError(f"constraints must be 'consensus' or a dict of edge matrices, got {constraints!r}")
            self.edge_matrices = self.inequality = None
        else:
            A, b, self.inequality = _edge_matrices(self.compiled, constraints, self.dim)
            self.edge_matrices = A, b

    @property
    def is_consensus(self) -> bool:
        """Whether the constraints are consensus, x_i = x_j on every edge (no edge matrices)."""
        return self.edge_matrices is None

    def compile(
        self, device: torch.device | str, dtype: torch.dtype
    ) -> tuple[CompiledGraph, LocalFunction, Consensus | EdgeMatrices]:
        """The problem as the methods run it, on `device` in `dtype`.

        Parameters
        ----------
        device : torch.device or str
            Where the tensors go.
        dtype : torch.dtype
            The float dtype.

        Returns
        -------
        graph : CompiledGraph
            The compiled graph.
        local : LocalFunction
            The local functions.
        edges : pdmm.constraints.Consensus or pdmm.constraints.EdgeMatrices
            The edge operator of the constraints.
        """
        graph = self.compiled.to(device, dtype)
        local = self.local.to(device, dtype)
        if self.edge_matrices is None:  # consensus
            return graph, local, Consensus(graph)
        A, b = (t.to(device, dtype) for t in self.edge_matrices)
        inequality = None if self.inequality is None else self.inequality.to(device)
        return graph, local, EdgeMatrices(graph, A, b, inequality)

    def relabelled(self, order: Any) -> tuple["Problem", np.ndarray]:
        """The same problem on the graph renumbered so that its node k is node order[k] of this one
        (CompiledGraph.relabelled; the local data and edge matrices follow their nodes and edges).

        Parameters
        ----------
        order : array_like of int
            (n,) a permutation of the node indices.

        Returns
        -------
        problem : Problem
            The renumbered problem.
        edge_of : numpy.ndarray
            (E,) int64: the edge of this problem's compiled graph that each new directed edge is.
        """
        new = object.__new__(Problem)
        new.__dict__.update(self.__dict__)
        new.compiled, edge_of = self.compiled.relabelled(order)
        new.local = self.local.nodes(torch.from_numpy(np.asarray(order, dtype=np.int64)))
        if self.edge_matrices is not None:  # edge matrices follow their edges
            index = torch.from_numpy(edge_of)
            A, b = (t.index_select(0, index) for t in self.edge_matrices)
            new.edge_matrices = A, b
            new.inequality = None if self.inequality is None else self.inequality.index_select(0, index)
        return new, edge_of

    def tiled(self, copies: int) -> "Problem":
        """The same problem with `copies` copies of every instance, one after the other: instance c B + b is
        instance b (LocalFunction.tiled; a grid of parameter values run as one batch, docs/decentralised.md
        section 8). The graph and the edge matrices are shared; the result keeps the batch axis.

        Parameters
        ----------
        copies : int
            How many copies, >= 1.

        Returns
        -------
        Problem
            The problem of copies B instances.
        """
        new = object.__new__(Problem)
        new.__dict__.update(self.__dict__)
        new.local = self.local.tiled(copies)
        new.batch, new.batched = new.local.shape[1], True
        return new

    def __repr__(self):
        kind = "consensus" if self.is_consensus else "edge matrices"
        if self.inequality is not None:
            kind += f", {int(self.inequality.sum()) // 2} inequality edges"
        return (
            f"Problem({type(self.local).__name__}, n={self.n}, d={self.dim}, batch={self.batch}, "
            f"edges={self.compiled.num_edges // 2}, constraints={kind})"
        )


def _edge_matrices(graph, constraints, dim):
    """Stack {(i, j): (A_ij, A_ji, b_ij[, "<="])} into A (E, m, d), b (E, m) and the inequality mask (E,)
    (None when every edge is an equality) in directed-edge order."""
    nodes = graph.nodes
    undirected = {frozenset((nodes[i], nodes[j])) for i, j in zip(graph.src.tolist(), graph.dst.tolist(), strict=False)}
    extra = [key for key in constraints if frozenset(key) not in undirected]
    if extra:
        raise ValueError(f"constraints given for pairs that are not edges of the graph: {extra[:5]}")
    twice = [(i, j) for i, j in constraints if (j, i) in constraints and i != j]
    if twice:
        i, j = twice[0]
        raise ValueError(
            f"constraints given for both ({i!r}, {j!r}) and ({j!r}, {i!r}); give one entry "
            "(A_ij, A_ji, b_ij) per undirected edge"
        )
    A, b, inequality = [], [], []
    for i, j in zip(graph.src.tolist(), graph.dst.tolist(), strict=False):
        u, v = nodes[i], nodes[j]
        if (u, v) in constraints:
            A_uv, _, b_uv, below = _entry((u, v), constraints[(u, v)])
        elif (v, u) in constraints:
            _, A_uv, b_uv, below = _entry((v, u), constraints[(v, u)])
        else:
            raise ValueError(f"no constraint given for edge ({u!r}, {v!r})")
        inequality.append(below)
        A.append(_finite(f"A for edge ({u!r}, {v!r})", np.atleast_2d(_real(f"A for edge ({u!r}, {v!r})", A_uv))))
        b.append(_finite(f"b for edge ({u!r}, {v!r})", np.atleast_1d(_real(f"b for edge ({u!r}, {v!r})", b_uv))))
    shapes = {a.shape for a in A}
    if len(shapes) != 1 or next(iter(shapes))[1] != dim:
        raise ValueError(f"every A_ij must have the same shape (m, d={dim}); got shapes {sorted(shapes)}")
    m = A[0].shape[0]
    if any(v.shape != (m,) for v in b):
        raise ValueError(f"every b_ij must have shape ({m},), matching A_ij's {m} rows")
    mask = torch.tensor(inequality) if any(inequality) else None
    return torch.from_numpy(np.stack(A)), torch.from_numpy(np.stack(b)), mask


def _entry(key, entry):
    """(A_ij, A_ji, b_ij, is_inequality) from (A_ij, A_ji, b_ij), (..., "==") or (..., "<=")."""
    size = len(entry) if isinstance(entry, (tuple, list)) else None
    if size == 3:
        return (*entry, False)
    if size == 4 and isinstance(entry[3], str) and entry[3] in ("==", "<="):
        return (*entry[:3], entry[3] == "<=")
    got = f"relation {entry[3]!r}" if size == 4 else f"{size}-tuple" if size else type(entry).__name__
    hint = " (write >= as (-A_ij, -A_ji, -b_ij, '<='))" if size == 4 and entry[3] == ">=" else ""
    raise ValueError(
        f"the constraint of edge {key!r} must be (A_ij, A_ji, b_ij) or (A_ij, A_ji, b_ij, '<='), got a {got}{hint}"
    )


def _real(name: str, value: Any) -> np.ndarray:
    """`value` (array-like, a torch tensor included) as a float64 array; ValueError naming `name` for complex data,
    which is never cast to real: the imaginary part would be dropped without a word (docs/guide/solve.md,
    "Problems")."""
    if torch.is_tensor(value):
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if np.iscomplexobj(array):
        raise ValueError(
            f"{name} is complex ({array.dtype}); pdmm solves real problems: give the real and imaginary parts as "
            "separate coordinates"
        )
    return np.asarray(array, dtype=np.float64)


def _finite(name, array):
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or inf")
    return array


def node_data(name: str, value: Any, n: int, tail: tuple) -> torch.Tensor:
    """Validate per-node data of shape (n, *tail) or (B, n, *tail) (None in tail: any length); return
    (n, B, *tail) float64; ValueError naming `name` for another shape, complex data, NaN or inf."""
    array = _finite(name, _real(name, value))
    k, given = len(tail), array.shape
    if array.ndim == k + 1:
        array = array[None]
    if (
        array.ndim != k + 2
        or array.shape[1] != n
        or any(t is not None and s != t for s, t in zip(array.shape[2:], tail, strict=False))
    ):
        want = ", ".join(["n"] + [str(t) if t is not None else "*" for t in tail])
        raise ValueError(f"{name} must have shape ({want}) or (B, {want}) with n={n} nodes, got {given}")
    if array.size == 0:
        raise ValueError(f"{name} has shape {given}, with an axis of length 0: every node needs at least one value")
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(array, 0, 1)))


def _has_batch_axis(first, first_ndim, second, second_ndim):
    """Whether either array was given with a leading batch axis (one more than its per-instance ndim)."""
    return np.ndim(first) > first_ndim or np.ndim(second) > second_ndim


def _broadcast_batch(*tensors):
    """Expand node-major data (n, B, ...) to one common batch size."""
    sizes = {t.shape[1] for t in tensors} - {1}
    if len(sizes) > 1:
        raise ValueError(f"data arrays disagree on the batch size: {sorted(sizes)}")
    B = sizes.pop() if sizes else 1
    return [t.expand(t.shape[0], B, *t.shape[2:]).contiguous() for t in tensors]


def _weight(name, value):
    """A finite number >= 0 (ridge, lam, reg)."""
    if not (isinstance(value, (int, float, np.floating, np.integer)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _gram(H, y, ridge):
    """P_i = H_i^T H_i + ridge I and q_i = H_i^T y_i from H (n, B, k, d), y (n, B, k)."""
    eye = torch.eye(H.shape[-1], dtype=H.dtype)
    return torch.einsum("nbkd,nbke->nbde", H, H) + ridge * eye, torch.einsum("nbkd,nbk->nbd", H, y)


def _regression_data(n, H, y):
    H = node_data("H", H, n, (None, None))
    y = node_data("y", y, n, (H.shape[2],))
    return _broadcast_batch(H, y)


def averaging(G: GraphLike, a: Any, constraints: Constraints = "consensus") -> Problem:
    """Distributed averaging: f_i(x) = 1/2 ||x - a_i||^2, whose consensus solution is x_i = mean(a)
    (docs/theory/pdmm.md section 8).

    Parameters
    ----------
    G : networkx.Graph, pdmm.Graph or scipy sparse matrix
        The connected graph.
    a : array_like
        The node values, (n,), (n, d) or (B, n, d).
    constraints : str or dict
        "consensus" or edge matrices, as pdmm.Problem takes them.

    Returns
    -------
    Problem
        The problem, batched where the data has a batch axis.

    Raises
    ------
    ValueError
        For data of the wrong shape, or with NaN or inf (and what pdmm.Problem refuses).

    Examples
    --------
    >>> import numpy as np
    >>> import pdmm
    >>> problem = pdmm.averaging(pdmm.topology("ring", n=4), [1.0, 2.0, 3.0, 6.0])
    >>> problem.n, problem.dim, problem.batched
    (4, 1, False)
    >>> pdmm.solve(problem).x.ravel().round(6)  # every node holds the mean
    array([3., 3., 3., 3.])
    >>> pdmm.averaging(pdmm.topology("ring", n=4), np.zeros((5, 4, 2))).batch  # B = 5 instances at once
    5
    """
    local, batched = averaging_local(a, node_count(G))
    return Problem(G, local, constraints, batched)


def averaging_local(a: Any, rows: int) -> tuple[LocalFunction, bool]:
    """(the local functions of pdmm.averaging, whether the data has a batch axis) of `rows` nodes' values a: the one
    function pdmm.averaging and a shard's loader (pdmm.shards) build them with; ValueError as pdmm.averaging."""
    a = _real("a", a)
    batched = a.ndim == 3
    a = node_data("a", a[:, None] if a.ndim == 1 else a, rows, (None,))
    ones = torch.ones(a.shape[:2], dtype=a.dtype)
    return Quadratic(ones, a, y=a), batched


def least_squares(G: GraphLike, H: Any, y: Any, ridge: float = 0.0, constraints: Constraints = "consensus") -> Problem:
    """Distributed least squares: f_i(x) = 1/2 ||H_i x - y_i||^2 + ridge/2 ||x||^2 (docs/theory/problem.md
    section 5).

    Parameters
    ----------
    G : networkx.Graph, pdmm.Graph or scipy sparse matrix
        The connected graph.
    H : array_like
        The node's design matrices, (n, k, d) or (B, n, k, d).
    y : array_like
        The node's targets, (n, k) or (B, n, k).
    ridge : float
        The ridge weight, a finite number >= 0.
    constraints : str or dict
        "consensus" or edge matrices, as pdmm.Problem takes them.

    Returns
    -------
    Problem
        The problem, batched where the data has a batch axis.

    Raises
    ------
    ValueError
        For data of the wrong shape, with NaN or inf, or a bad ridge (and what pdmm.Problem refuses).
    """
    local, batched = least_squares_local(H, y, node_count(G), ridge)
    return Problem(G, local, constraints, batched)


def least_squares_local(H: Any, y: Any, rows: int, ridge: float = 0.0) -> tuple[LocalFunction, bool]:
    """(the local functions of pdmm.least_squares, whether the data has a batch axis) of `rows` nodes' data: the one
    function pdmm.least_squares and a shard's loader (pdmm.shards) build them with; ValueError as
    pdmm.least_squares."""
    ridge = _weight("ridge", ridge)
    batched = _has_batch_axis(H, 3, y, 2)
    H, y = _regression_data(rows, H, y)
    P, q = _gram(H, y, ridge)
    return Quadratic(P, q, H, y, ridge), batched


def lasso(G: GraphLike, H: Any, y: Any, lam: float, constraints: Constraints = "consensus") -> Problem:
    """Distributed lasso: f_i(x) = 1/2 ||H_i x - y_i||^2 + (lam / n) ||x||_1, so that the centralised problem has
    weight lam (docs/theory/problem.md section 5).

    Parameters
    ----------
    G : networkx.Graph, pdmm.Graph or scipy sparse matrix
        The connected graph.
    H : array_like
        The node's design matrices, (n, k, d) or (B, n, k, d).
    y : array_like
        The node's targets, (n, k) or (B, n, k).
    lam : float
        The l1 weight of the centralised problem, a finite number >= 0.
    constraints : str or dict
        "consensus" or edge matrices, as pdmm.Problem takes them.

    Returns
    -------
    Problem
        The problem, batched where the data has a batch axis.

    Raises
    ------
    ValueError
        For data of the wrong shape, with NaN or inf, or a bad lam (and what pdmm.Problem refuses).

    Examples
    --------
    >>> import numpy as np
    >>> import pdmm
    >>> rng = np.random.default_rng(0)
    >>> H, y = rng.normal(size=(6, 5, 3)), rng.normal(size=(6, 5))  # 5 rows of 3 features at each of 6 nodes
    >>> problem = pdmm.lasso(pdmm.topology("ring", n=6), H, y, lam=1.0)
    >>> result = pdmm.solve(problem)
    >>> result.status
    'converged'
    >>> result.x[0].round(4)  # the l1 weight sets the second coefficient to 0
    array([ 0.0109,  0.    , -0.0767])
    >>> bool(np.allclose(result.x, result.x[0]))  # every node agrees
    True
    """
    n = node_count(G)
    local, batched = lasso_local(H, y, n, lam, n)
    return Problem(G, local, constraints, batched)


def lasso_local(H: Any, y: Any, rows: int, lam: float, nodes: int) -> tuple[LocalFunction, bool]:
    """(the local functions of pdmm.lasso on a graph of `nodes` nodes, whether the data has a batch axis) of `rows`
    of its nodes' data (each node's l1 weight lam / nodes): the one function pdmm.lasso and a shard's loader
    (pdmm.shards) build them with; ValueError as pdmm.lasso."""
    lam = _weight("lam", lam)
    batched = _has_batch_axis(H, 3, y, 2)
    H, y = _regression_data(rows, H, y)
    P, q = _gram(H, y, 0.0)
    return Lasso(P, q, lam / nodes, H, y), batched


def logistic(G: GraphLike, X: Any, y: Any, reg: float = 0.1, constraints: Constraints = "consensus") -> Problem:
    """Distributed logistic regression: f_i(x) = sum_k log(1 + exp(-y_ik X_ik^T x)) + reg/2 ||x||^2
    (docs/theory/problem.md section 5).

    Parameters
    ----------
    G : networkx.Graph, pdmm.Graph or scipy sparse matrix
        The connected graph.
    X : array_like
        The node's features, (n, k, d) or (B, n, k, d).
    y : array_like
        The node's labels, -1/+1 or 0/1 (mapped to -1/+1), (n, k) or (B, n, k).
    reg : float
        The ridge weight, a finite number >= 0.
    constraints : str or dict
        "consensus" or edge matrices, as pdmm.Problem takes them.

    Returns
    -------
    Problem
        The problem, batched where the data has a batch axis.

    Raises
    ------
    ValueError
        For data of the wrong shape, with NaN or inf, other labels or a bad reg (and what pdmm.Problem refuses).
    """
    local, batched = logistic_local(X, y, node_count(G), reg)
    return Problem(G, local, constraints, batched)


def logistic_local(X: Any, y: Any, rows: int, reg: float = 0.1) -> tuple[LocalFunction, bool]:
    """(the local functions of pdmm.logistic, whether the data has a batch axis) of `rows` nodes' data: the one
    function pdmm.logistic and a shard's loader (pdmm.shards) build them with; ValueError as pdmm.logistic."""
    reg = _weight("reg", reg)
    batched = _has_batch_axis(X, 3, y, 2)
    X = node_data("X", X, rows, (None, None))
    y = node_data("y", y, rows, (X.shape[2],))
    labels = set(torch.unique(y).tolist())
    if labels <= {0.0, 1.0}:
        y = 2 * y - 1
    elif not labels <= {-1.0, 1.0}:
        raise ValueError(f"logistic labels must be -1/+1 or 0/1, got values {sorted(labels)[:5]}")
    X, y = _broadcast_batch(X, y)
    return Logistic(X, y, reg), batched


def quadratic(G: GraphLike, P: Any, q: Any, constraints: Constraints = "consensus") -> Problem:
    """A general quadratic problem: f_i(x) = 1/2 x^T P_i x - q_i^T x with P_i symmetric positive semidefinite
    (docs/theory/problem.md section 5).

    Parameters
    ----------
    G : networkx.Graph, pdmm.Graph or scipy sparse matrix
        The connected graph.
    P : array_like
        The curvatures, (n, d, d) or (B, n, d, d).
    q : array_like
        The linear terms, (n, d) or (B, n, d).
    constraints : str or dict
        "consensus" or edge matrices, as pdmm.Problem takes them.

    Returns
    -------
    Problem
        The problem, batched where the data has a batch axis.

    Raises
    ------
    ValueError
        For data of the wrong shape, with NaN or inf, or a P_i not symmetric positive semidefinite (and what
        pdmm.Problem refuses).
    """
    local, batched = quadratic_local(P, q, node_count(G))
    return Problem(G, local, constraints, batched)


def quadratic_local(P: Any, q: Any, rows: int) -> tuple[LocalFunction, bool]:
    """(the local functions of pdmm.quadratic, whether the data has a batch axis) of `rows` nodes' data: the one
    function pdmm.quadratic and a shard's loader (pdmm.shards) build them with; ValueError as pdmm.quadratic."""
    batched = _has_batch_axis(P, 3, q, 2)
    q = node_data("q", q, rows, (None,))
    d = q.shape[-1]
    P = node_data("P", P, rows, (d, d))
    if not torch.allclose(P, P.transpose(-1, -2)):
        raise ValueError("every P_i must be symmetric")
    if bool((torch.linalg.eigvalsh(P)[..., 0] < -1e-10 * P.abs().amax((-1, -2)).clamp(min=1)).any()):
        raise ValueError("every P_i must be positive semidefinite (f_i convex)")
    P, q = _broadcast_batch(P, q)
    return Quadratic(P, q), batched
