"""Token graphs: which tokens each token attends to (docs/theory/attention.md section 3).

Token i attends to token j iff (i, j) is an edge. Full attention is the complete graph, causal
attention the graph with j <= i, and any other graph is held as an edge list. A graph runs in one
of two layouts: "dense", a (T, T) boolean mask for scaled_dot_product_attention, or "sparse",
gather / aggregate over the edge list with pdmm's `EdgeList` in blocks of edges (attention.sparse;
memory grows with edges, not T^2).
"""

import networkx as nx
import numpy as np
import torch

from pdmm.edge_index import EdgeList

SPARSE_DENSITY = 1 / 8  # "auto" layout: sparse when at most this fraction of the T^2 pairs are edges


class TokenGraph:
    """Who attends to whom among n tokens; build it with full / causal / window / from_networkx / from_edges."""

    def __init__(self, n, kind, src=None, dst=None, layout="dense", block=None):
        self.n, self.kind, self.layout = n, kind, layout
        self.src, self.dst = src, dst  # numpy int64 edge arrays sorted by (src, dst); None for full / causal
        self.block = block  # sparse layout: edges per block, None automatic, 0 unblocked (attention.sparse)
        self._cache = {}

    @classmethod
    def full(cls, n):
        """Every token attends to every token (what forward does with graph=None)."""
        return cls(_count(n), "full")

    @classmethod
    def causal(cls, n):
        """Token i attends to tokens j <= i."""
        return cls(_count(n), "causal")

    @classmethod
    def window(cls, n, w, causal=False, layout="auto"):
        """Token i attends to tokens j with abs(i - j) <= w (and j <= i when causal)."""
        n = _count(n)
        if not (isinstance(w, (int, np.integer)) and not isinstance(w, bool) and w >= 0):
            raise ValueError(f"window width w must be an integer >= 0, got {w!r}")
        offsets = np.arange(-w, 1 if causal else w + 1)  # j = i + offset
        i = np.repeat(np.arange(n), len(offsets))
        j = i + np.tile(offsets, n)
        keep = (j >= 0) & (j < n)
        return cls.from_edges(n, i[keep], j[keep], layout)

    @classmethod
    def from_networkx(cls, G, self_loops=True, layout="auto"):
        """Tokens are G's nodes in G.nodes order; each token attends to its neighbours and, with
        self_loops=True, to itself (self loops already in G are always kept).

        For a directed G an edge u -> v carries information from u to v: token v attends to u.
        """
        if not isinstance(G, nx.Graph):
            raise TypeError(f"from_networkx needs a networkx graph, got {type(G).__name__}")
        index = {v: k for k, v in enumerate(G.nodes)}
        pairs = [(index[v], index[u]) for u, v in G.edges]  # v attends to u
        if not G.is_directed():
            pairs += [(j, i) for i, j in pairs]
        pairs = set(pairs)  # G's own self loops stay
        if self_loops:
            pairs |= {(i, i) for i in range(len(index))}
        src, dst = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2).T
        return cls.from_edges(len(index), src, dst, layout)

    @classmethod
    def from_edges(cls, n, src, dst, layout="auto"):
        """Token src[e] attends to token dst[e]; every token must attend to at least one token."""
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

    def without_self_loops(self, layout="auto"):
        """The same graph minus every edge (i, i): each token attends to the others but not to itself
        (the AttentionX paper's ViT, docs/theory/residuals.md section 3); an error when a token is left attending
        to nothing."""
        src, dst = self.edges()
        keep = src != dst
        return TokenGraph.from_edges(self.n, src[keep], dst[keep], layout)

    @property
    def num_edges(self):
        if self.kind == "full":
            return self.n * self.n
        if self.kind == "causal":
            return self.n * (self.n + 1) // 2
        return len(self.src)

    def edges(self):
        """(src, dst) numpy arrays of every edge, sorted."""
        if self.src is not None:
            return self.src, self.dst
        i, j = np.nonzero(
            np.tril(np.ones((self.n, self.n), dtype=bool))
            if self.kind == "causal"
            else np.ones((self.n, self.n), dtype=bool)
        )
        return i.astype(np.int64), j.astype(np.int64)

    def dense(self):
        """The same graph as a boolean mask (layout "dense")."""
        return TokenGraph(self.n, "graph", *self.edges(), layout="dense")

    def sparse(self, block=None):
        """The same graph as an edge list (layout "sparse"), run `block` edges at a time.

        block=None picks the size (attention.sparse.block_size: about E / head size edges, so a
        block's temporaries cost what the per-edge weights do); 0 runs the unblocked plain-autograd
        path, which keeps (E, B, nh, hs) tensors for backward (about 6 kB per edge at d_model 256).
        """
        if block is not None and not (
            isinstance(block, (int, np.integer)) and not isinstance(block, bool) and block >= 0
        ):
            raise ValueError(
                f"block must be None (automatic) or an integer >= 0 (edges per block, 0 unblocked), got {block!r}"
            )
        return TokenGraph(self.n, "graph", *self.edges(), layout="sparse", block=None if block is None else int(block))

    def mask(self, device="cpu"):
        """(T, T) bool, True where token i may attend to token j; cached per device."""
        key = ("mask", str(device))
        if key not in self._cache:
            mask = torch.zeros(self.n, self.n, dtype=torch.bool, device=device)
            src, dst = self.edges()
            mask[torch.as_tensor(src, device=device), torch.as_tensor(dst, device=device)] = True
            self._cache[key] = mask
        return self._cache[key]

    def edge_list(self, device="cpu", dtype=torch.float32):
        """The graph as a pdmm EdgeList (src = attending token, dst = attended token); cached."""
        dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32  # CSR products need these
        key = ("edges", str(device), dtype)
        if key not in self._cache:
            self._cache[key] = EdgeList(**EdgeList.arrays(self.n, *self.edges(), device=device, dtype=dtype))
        return self._cache[key]

    def check(self, T):
        """Raise unless this graph is over T tokens."""
        if self.n != T:
            raise ValueError(f"the token graph has {self.n} tokens but the sequence has {T}")
        return self

    def __repr__(self):
        block = "" if self.block is None else f", block={self.block}"
        return f"TokenGraph(n={self.n}, kind={self.kind!r}, edges={self.num_edges}, layout={self.layout!r}{block})"


def _count(n):
    if not (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"the number of tokens must be a positive integer, got {n!r}")
    return int(n)


def resolve(graph, T):
    """graph=None means full attention; anything else must be a TokenGraph over T tokens."""
    if graph is None:
        return TokenGraph.full(T)
    if not isinstance(graph, TokenGraph):
        raise TypeError(
            f"graph must be a TokenGraph or None, got {type(graph).__name__} "
            "(wrap a networkx graph with TokenGraph.from_networkx)"
        )
    return graph.check(T)
