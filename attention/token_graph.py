"""Token graphs: which tokens each token attends to (docs/theory/attention.md section 3).

Token i attends to token j iff (i, j) is an edge. Full attention is the complete graph, causal
attention the graph with j <= i, and any other graph is held as an edge list. A graph runs in one
of two layouts: "dense", a (T, T) boolean mask for scaled_dot_product_attention, or "sparse", over
the edge list with pdmm's `EdgeList` in blocks of edges (attention.sparse; memory grows with edges,
not T^2): gather (node to edge: each edge e = (i -> j) reads its tokens' rows) and aggregate (edge to
node: the sum over a token's edges).
"""

from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt
import torch

from pdmm.edge_index import EdgeList

SPARSE_DENSITY = 1 / 8  # "auto" layout: sparse when at most this fraction of the T^2 pairs are edges


class TokenGraph:
    """Who attends to whom among n tokens; build it with full / causal / window / from_networkx / from_edges.

    Token i attends to token j iff (i, j) is an edge (docs/theory/attention.md section 3).

    Parameters
    ----------
    n : int
        The number of tokens.
    kind : str
        "full" (every pair), "causal" (j <= i) or "graph" (the edges src -> dst).
    src, dst : numpy.ndarray or None
        int64 edge arrays sorted by (src, dst) for kind "graph": token src[e] attends to token dst[e];
        None for full and causal graphs.
    layout : str
        "dense" (a (T, T) boolean mask) or "sparse" (the edge list, attention.sparse).
    block : int or None
        Sparse layout: edges per block, None automatic, 0 unblocked (attention.sparse).

    Examples
    --------
    >>> import attention
    >>> graph = attention.TokenGraph.window(5, 1, causal=True)  # token i attends to i - 1 and i
    >>> graph
    TokenGraph(n=5, kind='graph', edges=9, layout='dense')
    >>> graph.mask().int()  # row i: the tokens i attends to
    tensor([[1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 1, 1]], dtype=torch.int32)
    >>> graph.sparse()  # the same edges as an edge list: memory grows with the edges, not T^2
    TokenGraph(n=5, kind='graph', edges=9, layout='sparse')
    """

    def __init__(
        self,
        n: int,
        kind: str,
        src: np.ndarray | None = None,
        dst: np.ndarray | None = None,
        layout: str = "dense",
        block: int | None = None,
    ):
        self.n, self.kind, self.layout = n, kind, layout
        self.src, self.dst = src, dst  # numpy int64 edge arrays sorted by (src, dst); None for full / causal
        self.block = block  # sparse layout: edges per block, None automatic, 0 unblocked (attention.sparse)
        self._cache: dict[tuple[Any, ...], Any] = {}

    @classmethod
    def full(cls, n: int) -> "TokenGraph":
        """Every token attends to every token (what forward does with graph=None).

        Parameters
        ----------
        n : int
            The number of tokens, >= 1.

        Returns
        -------
        TokenGraph
            The complete graph (kind "full").

        Raises
        ------
        ValueError
            When n is not a positive integer.
        """
        return cls(_count(n), "full")

    @classmethod
    def causal(cls, n: int) -> "TokenGraph":
        """Token i attends to tokens j <= i.

        Parameters
        ----------
        n : int
            The number of tokens, >= 1.

        Returns
        -------
        TokenGraph
            The causal graph (kind "causal").

        Raises
        ------
        ValueError
            When n is not a positive integer.
        """
        return cls(_count(n), "causal")

    @classmethod
    def window(cls, n: int, w: int, causal: bool = False, layout: str = "auto") -> "TokenGraph":
        """Token i attends to tokens j with abs(i - j) <= w (and j <= i when causal).

        Parameters
        ----------
        n : int
            The number of tokens, >= 1.
        w : int
            The window's half-width, >= 0.
        causal : bool
            Keep only j <= i.
        layout : str
            "auto", "dense" or "sparse" (from_edges).

        Returns
        -------
        TokenGraph
            The windowed graph (kind "graph").

        Raises
        ------
        ValueError
            When n or w is out of range, or layout is unknown.
        """
        n = _count(n)
        if not (isinstance(w, (int, np.integer)) and not isinstance(w, bool) and w >= 0):
            raise ValueError(f"window width w must be an integer >= 0, got {w!r}")
        offsets = np.arange(-w, 1 if causal else w + 1)  # j = i + offset
        i = np.repeat(np.arange(n), len(offsets))
        j = i + np.tile(offsets, n)
        keep = (j >= 0) & (j < n)
        return cls.from_edges(n, i[keep], j[keep], layout)

    @classmethod
    def from_networkx(cls, G: nx.Graph, self_loops: bool = True, layout: str = "auto") -> "TokenGraph":
        """Tokens are G's nodes in G.nodes order; each token attends to its neighbours and, with
        self_loops=True, to itself (self loops already in G are always kept).

        For a directed G an edge u -> v carries information from u to v: token v attends to u.

        Parameters
        ----------
        G : networkx.Graph
            The graph (directed or not); its nodes become tokens 0..n-1 in G.nodes order.
        self_loops : bool
            Add the edge (i, i) for every token.
        layout : str
            "auto", "dense" or "sparse" (from_edges).

        Returns
        -------
        TokenGraph
            The graph over G's nodes (kind "graph").

        Raises
        ------
        TypeError
            When G is not a networkx graph.
        ValueError
            When a token would attend to nothing, or layout is unknown.
        """
        if not isinstance(G, nx.Graph):
            raise TypeError(f"from_networkx needs a networkx graph, got {type(G).__name__}")
        index = {v: k for k, v in enumerate(G.nodes)}
        pairs = [(index[v], index[u]) for u, v in G.edges]  # v attends to u
        if not G.is_directed():
            pairs += [(j, i) for i, j in pairs]
        unique = set(pairs)  # G's own self loops stay
        if self_loops:
            unique |= {(i, i) for i in range(len(index))}
        src, dst = np.array(sorted(unique), dtype=np.int64).reshape(-1, 2).T
        return cls.from_edges(len(index), src, dst, layout)

    @classmethod
    def from_edges(cls, n: int, src: npt.ArrayLike, dst: npt.ArrayLike, layout: str = "auto") -> "TokenGraph":
        """Token src[e] attends to token dst[e]; every token must attend to at least one token.

        Parameters
        ----------
        n : int
            The number of tokens, >= 1.
        src, dst : array_like of int
            The edges' attending and attended tokens, in any order, no duplicates.
        layout : str
            "auto" (sparse when at most 1/8 of the T^2 pairs are edges), "dense" or "sparse".

        Returns
        -------
        TokenGraph
            The graph with edges sorted by (src, dst) (kind "graph").

        Raises
        ------
        ValueError
            Naming the problem: src and dst of different lengths, an endpoint outside 0..n-1, a duplicate
            edge, a token that attends to nothing, or an unknown layout.
        """
        n = _count(n)
        src, dst = np.asarray(src, dtype=np.int64).ravel(), np.asarray(dst, dtype=np.int64).ravel()
        if src.shape != dst.shape:
            raise ValueError(f"src and dst must have the same length, got {len(src)} and {len(dst)}")
        if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise ValueError(f"edge endpoints must be token indices in 0..{n - 1}")
        order = np.lexsort((dst, src))
        src, dst = src[order], dst[order]
        if np.any((src[1:] == src[:-1]) & (dst[1:] == dst[:-1])):
            raise ValueError("the token graph has duplicate edges")
        lonely = np.setdiff1d(np.arange(n), src)
        if len(lonely):
            raise ValueError(
                f"tokens {lonely[:5].tolist()}{'...' if len(lonely) > 5 else ''} attend to no token; "
                "add self loops (self_loops=True) or edges"
            )
        if layout == "auto":
            layout = "sparse" if len(src) <= SPARSE_DENSITY * n * n else "dense"
        if layout not in ("dense", "sparse"):
            raise ValueError(f"layout must be 'auto', 'dense' or 'sparse', got {layout!r}")
        return cls(n, "graph", src, dst, layout)

    def without_self_loops(self, layout: str = "auto") -> "TokenGraph":
        """The same graph minus every edge (i, i): each token attends to the others but not to itself
        (the AttentionX paper's ViT, docs/theory/residuals.md section 3).

        Parameters
        ----------
        layout : str
            "auto", "dense" or "sparse" (from_edges).

        Returns
        -------
        TokenGraph
            The graph without self loops (kind "graph").

        Raises
        ------
        ValueError
            When a token is left attending to nothing.
        """
        src, dst = self.edges()
        keep = src != dst
        return TokenGraph.from_edges(self.n, src[keep], dst[keep], layout)

    @property
    def num_edges(self) -> int:
        """E, the number of (attending, attended) pairs: n^2 full, n (n + 1) / 2 causal, len(src) otherwise."""
        if self.kind == "full":
            return self.n * self.n
        if self.kind == "causal":
            return self.n * (self.n + 1) // 2
        return len(self.edges()[0])

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) numpy arrays of every edge, sorted.

        Returns
        -------
        src, dst : numpy.ndarray
            int64 arrays (E,) sorted by (src, dst): token src[e] attends to token dst[e].
        """
        if self.src is not None and self.dst is not None:
            return self.src, self.dst
        i, j = np.nonzero(
            np.tril(np.ones((self.n, self.n), dtype=bool))
            if self.kind == "causal"
            else np.ones((self.n, self.n), dtype=bool)
        )
        return i.astype(np.int64), j.astype(np.int64)

    def dense(self) -> "TokenGraph":
        """The same graph as a boolean mask (layout "dense").

        Returns
        -------
        TokenGraph
            The graph (kind "graph") with layout "dense".
        """
        return TokenGraph(self.n, "graph", *self.edges(), layout="dense")

    def sparse(self, block: int | None = None) -> "TokenGraph":
        """The same graph as an edge list (layout "sparse"), run `block` edges at a time.

        Parameters
        ----------
        block : int or None
            None picks the size (attention.sparse.block_size: about E / head size edges, so a block's
            temporaries cost what the per-edge weights do); 0 runs the unblocked plain-autograd path,
            which keeps (E, B, nh, hs) tensors for backward (about 6 kB per edge at d_model 256).

        Returns
        -------
        TokenGraph
            The graph (kind "graph") with layout "sparse".

        Raises
        ------
        ValueError
            When block is neither None nor an integer >= 0.
        """
        if block is not None and not (
            isinstance(block, (int, np.integer)) and not isinstance(block, bool) and block >= 0
        ):
            raise ValueError(
                f"block must be None (automatic) or an integer >= 0 (edges per block, 0 unblocked), got {block!r}"
            )
        return TokenGraph(self.n, "graph", *self.edges(), layout="sparse", block=None if block is None else int(block))

    def mask(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """(T, T) bool, True where token i may attend to token j; cached per device.

        Parameters
        ----------
        device : torch.device or str
            Where the mask lives.

        Returns
        -------
        torch.Tensor
            The (T, T) boolean mask.
        """
        key = ("mask", str(device))
        if key not in self._cache:
            mask = torch.zeros(self.n, self.n, dtype=torch.bool, device=device)
            src, dst = self.edges()
            mask[torch.as_tensor(src, device=device), torch.as_tensor(dst, device=device)] = True
            self._cache[key] = mask
        return self._cache[key]

    def edge_list(self, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> EdgeList:
        """The graph as a pdmm EdgeList (src = attending token, dst = attended token); cached.

        Parameters
        ----------
        device : torch.device or str
            Where the index tensors live.
        dtype : torch.dtype
            The float type of its incidence matrix (float32 unless float64; CSR products need one of them).

        Returns
        -------
        EdgeList
            Its gather (node to edge) and aggregate (edge to node) run the sparse layout (attention.sparse).
        """
        dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32  # CSR products need these
        key = ("edges", str(device), dtype)
        if key not in self._cache:
            self._cache[key] = EdgeList(**EdgeList.arrays(self.n, *self.edges(), device=device, dtype=dtype))
        return self._cache[key]

    def check(self, T: int) -> "TokenGraph":
        """Raise unless this graph is over T tokens.

        Parameters
        ----------
        T : int
            The sequence length.

        Returns
        -------
        TokenGraph
            This graph.

        Raises
        ------
        ValueError
            When the graph has another number of tokens.
        """
        if self.n != T:
            raise ValueError(f"the token graph has {self.n} tokens but the sequence has {T}")
        return self

    def __repr__(self) -> str:
        block = "" if self.block is None else f", block={self.block}"
        return f"TokenGraph(n={self.n}, kind={self.kind!r}, edges={self.num_edges}, layout={self.layout!r}{block})"


def _count(n: Any) -> int:
    if not (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"the number of tokens must be a positive integer, got {n!r}")
    return int(n)


def resolve(graph: TokenGraph | None, T: int) -> TokenGraph:
    """graph=None means full attention; anything else must be a TokenGraph over T tokens."""
    if graph is None:
        return TokenGraph.full(T)
    if not isinstance(graph, TokenGraph):
        raise TypeError(
            f"graph must be a TokenGraph or None, got {type(graph).__name__} "
            "(wrap a networkx graph with TokenGraph.from_networkx)"
        )
    return graph.check(T)
