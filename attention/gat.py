"""Graph attention with GAT's additive scores, as a drop-in for MultiHeadAttention (docs/theory/residuals.md
section 12).

    alpha_ij = softmax_{j in N(i)}( LeakyReLU(c^T [W h_i || W h_j]) ),   head_i = sum_j alpha_ij W h_j

per head, c = [c_dst; c_src]. The heads then go through the same residual signal and W^o as
MultiHeadAttention (GAT's sigma is left to the block's MLP), so GraphAttention differs from it
only in `project` and `attend`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .config import AttentionConfig
from .kernels import sparse_setup
from .mha import MultiHeadAttention
from .sparse import edge_aggregate, edge_softmax
from .token_graph import TokenGraph

NEGATIVE_SLOPE = 0.2


class GraphAttention(MultiHeadAttention):
    """GAT-style multi-head graph attention; c_attn = W (no separate Q, K), att_dst / att_src = c.

    Parameters
    ----------
    config : AttentionConfig
        kernel "softmax", symmetric False and send_width None.
    layer_index : int or None
        The layer's position, counted from 1.

    Raises
    ------
    ValueError
        When config asks for another kernel, symmetric, or a send_width.
    """

    def __init__(self, config: AttentionConfig, layer_index: int | None = None):
        if config.kernel != "softmax" or config.symmetric:
            raise ValueError("GraphAttention has its own additive score: use kernel='softmax', symmetric=False")
        if config.send_width is not None:
            raise ValueError(
                "GraphAttention sends W h_j, d_model numbers per edge; send_width is for MultiHeadAttention only"
            )
        super().__init__(config, layer_index)
        nh, hs = config.n_head, config.head_size
        self.att_dst = nn.Parameter(torch.randn(nh, hs) / hs**0.5)
        self.att_src = nn.Parameter(torch.randn(nh, hs) / hs**0.5)

    def projection_width(self) -> int:
        """Output width of c_attn = W: d_model.

        Returns
        -------
        int
            d_model.
        """
        return self.config.d_model

    @property
    def numbers_sent(self) -> int:
        """d_model: a token sends W h_j, from which its neighbour forms the score c_src . W h_j and the value."""
        return self.config.d_model

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """W h as (B, nh, T, hs); it serves as query side, key side and value.

        Parameters
        ----------
        x : torch.Tensor
            (B, T, d_model) token rows h.

        Returns
        -------
        q, k, v : torch.Tensor
            W h three times, (B, nh, T, hs).
        """
        B, T, _ = x.shape
        wh = self.c_attn(x).view(B, T, self.config.n_head, -1).transpose(1, 2)
        return wh, wh, wh

    def attend(self, q: Tensor, k: Tensor, v: Tensor, graph: TokenGraph) -> Tensor:
        """head_i = sum_j alpha_ij W h_j: the aggregate over token i's edges of the gathered W h_j.

        Parameters
        ----------
        q, k, v : torch.Tensor
            (B, nh, T, hs), W h each (project).
        graph : TokenGraph
            The token graph over T tokens.

        Returns
        -------
        torch.Tensor
            (B, nh, T, hs), the heads.
        """
        w = self.weights(q, k, graph)
        w = F.dropout(w, self.config.dropout, training=self.training and self.config.dropout > 0)
        if graph.kind == "graph" and graph.layout == "sparse":
            edges, block = sparse_setup(v, graph)
            return edge_aggregate(w, v.permute(2, 0, 1, 3), edges, block).permute(1, 2, 0, 3)
        return w @ v

    def weights(self, q: Tensor, k: Tensor, graph: TokenGraph) -> Tensor:
        """alpha: (E, B, nh) per edge on a sparse graph, else (B, nh, T, T) zero off the graph.

        Parameters
        ----------
        q, k : torch.Tensor
            (B, nh, T, hs), W h each (project).
        graph : TokenGraph
            The token graph over T tokens.

        Returns
        -------
        torch.Tensor
            The attention weights alpha_ij.
        """
        e_dst = (q * self.att_dst.unsqueeze(1)).sum(-1)  # (B, nh, T): c_dst . W h_i
        e_src = (k * self.att_src.unsqueeze(1)).sum(-1)  # (B, nh, T): c_src . W h_j
        if graph.kind == "graph" and graph.layout == "sparse":
            edges, block = sparse_setup(q, graph)
            e_dst, e_src = e_dst.permute(2, 0, 1), e_src.permute(2, 0, 1)  # token-major (T, B, nh)
            scores = F.leaky_relu(edges.gather(e_dst) + edges.gather_neighbour(e_src), NEGATIVE_SLOPE)  # (E, B, nh)
            return edge_softmax(scores, edges, block)
        scores = F.leaky_relu(e_dst.unsqueeze(-1) + e_src.unsqueeze(-2), NEGATIVE_SLOPE)  # (B, nh, T, T)
        if graph.kind == "causal":
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
        elif graph.kind == "graph":
            scores = scores.masked_fill(~graph.mask(scores.device), float("-inf"))
        return scores.softmax(-1)

    def entropy(self, q: Tensor, k: Tensor, graph: TokenGraph) -> Tensor:
        """Mean entropy (nats) of each head's rows alpha_i., (nh,).

        Parameters
        ----------
        q, k : torch.Tensor
            (B, nh, T, hs), W h each (project).
        graph : TokenGraph
            The token graph over T tokens.

        Returns
        -------
        torch.Tensor
            (nh,) entropies.
        """
        w = self.weights(q, k, graph)
        plogp = w * w.clamp_min(1e-30).log()
        if graph.kind == "graph" and graph.layout == "sparse":
            return -graph.edge_list(q.device, q.dtype).aggregate(plogp).mean((0, 1))
        return -plogp.sum(-1).mean((0, 2))
