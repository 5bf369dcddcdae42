"""Attention kernels over a token graph: q, k, v (B, nh, T, hs) -> heads (B, nh, T, hs) (docs/theory/attention.md
sections 3, 5; docs/theory/residuals.md section 10).

Each kernel turns scores into weights over the neighbours of every token and aggregates their values
(the sum over the token's edges): head_i = sum_{j in N(i)} w_ij v_j. Softmax on full, causal and
dense-mask graphs goes through scaled_dot_product_attention, linear attention through prefix sums
(causal), one product (full) or the masked weights (dense); on sparse graphs both run as scores /
softmax / aggregate over the edge list in blocks of edges (attention.sparse), holding O(T d + E nh) memory, not O(E d).
"""

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .sparse import block_size, edge_aggregate, edge_scores, edge_softmax

if TYPE_CHECKING:
    from pdmm.edge_index import EdgeList

    from .token_graph import TokenGraph


def softmax_attention(
    q: Tensor, k: Tensor, v: Tensor, graph: "TokenGraph", dropout_p: float = 0.0, scale: float | None = None
) -> Tensor:
    """w_ij = softmax_{j in N(i)}(q_i . k_j * scale), scale = 1 / sqrt(hs) by default."""
    if graph.kind == "full":
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)
    if graph.kind == "causal":
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
    if graph.layout == "dense":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=graph.mask(q.device), dropout_p=dropout_p, scale=scale)
    edges, block = sparse_setup(q, graph)
    q, k, v = (t.permute(2, 0, 1, 3) for t in (q, k, v))  # token-major (T, B, nh, hs), as the edge list wants
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    w = edge_softmax(edge_scores(q, k, edges, scale, block), edges, block)  # (E, B, nh)
    w = F.dropout(w, dropout_p, training=dropout_p > 0)
    return edge_aggregate(w, v, edges, block).permute(1, 2, 0, 3)


def differential_attention(
    q: Tensor, k: Tensor, v: Tensor, graph: "TokenGraph", lam: Tensor, gain: Tensor, eps: float, scale: float
) -> Tensor:
    """Differential attention's heads, RMSNorm((softmax(Q1 K1^T / sqrt(d')) - lam softmax(Q2 K2^T / sqrt(d'))) V)
    times scale, per head, Q = [Q1 Q2] and K = [K1 K2] split in halves of width d' (docs/theory/residuals.md
    section 8).

    Both maps go through softmax_attention (SDPA's fused kernel on full, causal and dense graphs, which wants one
    width for q, k and v): q whole, zero-padded to v's width when narrower, and K1, K2 zero-padded into the
    positions of Q1 and Q2, so that q . [k1 0] = q1 . k1 and q . [0 k2] = q2 . k2. The difference and the norm are
    DifferentialHeads, computed in gain's dtype (float32 under autocast).

    Parameters
    ----------
    q, k : torch.Tensor
        (B, nh, T, hs_k) queries and keys, hs_k even.
    v : torch.Tensor
        (B, nh, T, hs_v) values, hs_v >= hs_k.
    graph : TokenGraph
        The token graph over T tokens.
    lam : torch.Tensor
        The 0-dimensional lambda.
    gain : torch.Tensor
        (hs_v,) the norm's gain.
    eps : float
        Added to the mean square under the square root.
    scale : float
        The final factor, 1 - lambda_init.

    Returns
    -------
    torch.Tensor
        (B, nh, T, hs_v), the heads.
    """
    half, width = q.shape[-1] // 2, v.shape[-1]
    if width > q.shape[-1]:
        q = F.pad(q, (0, width - q.shape[-1]))
    k1 = F.pad(k[..., :half], (0, width - half))
    k2 = F.pad(k[..., half : 2 * half], (half, width - 2 * half))
    o1, o2 = (softmax_attention(q, k_, v, graph, scale=half**-0.5).transpose(-3, -2) for k_ in (k1, k2))
    return DifferentialHeads.apply(o1, o2, lam, gain, eps, scale).transpose(-3, -2)  # rows token-major, as SDPA's


class DifferentialHeads(torch.autograd.Function):
    """y = scale RMSNorm(o1 - lam o2) with gain w, over the last axis of width d, and its hand-written backward:

    h = o1 - lam o2,  r = (<h, h> / d + eps)^(-1/2),  n = h r,  y = scale n w
    dL/dh = r (m - n <m, n> / d) with m = scale w g,  dL/do1 = dL/dh,  dL/do2 = -lam dL/dh,
    dL/dlam = -sum <dL/dh, o2>,  dL/dw = scale sum over rows of n g

    h and r are recomputed in the backward with differentiable operations (second derivatives stay right); the
    norm runs in w's dtype and y is cast back to o1's. vmap by torch's generated rule.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(o1: Tensor, o2: Tensor, lam: Tensor, gain: Tensor, eps: float, scale: float) -> Tensor:
        n, _ = DifferentialHeads.normalised(o1, o2, lam, gain, eps)
        return (n * (gain * scale)).to(o1.dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, Tensor, Tensor, Tensor, float, float], output: Tensor) -> None:
        o1, o2, lam, gain, ctx.eps, ctx.scale = inputs
        ctx.save_for_backward(o1, o2, lam, gain)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, None, None]:
        o1, o2, lam, gain = ctx.saved_tensors
        n, r = DifferentialHeads.normalised(o1, o2, lam, gain, ctx.eps)
        g = g.to(gain.dtype)
        m = g * (gain * ctx.scale)
        grad_h = torch.addcmul(m, n, torch.linalg.vecdot(m, n).unsqueeze(-1) / n.shape[-1], value=-1) * r
        grad_gain = (n * g).sum(tuple(range(g.dim() - 1))) * ctx.scale
        grad_o1 = grad_h.to(o1.dtype)
        grad_lam = -torch.linalg.vecdot(grad_h, o2.to(gain.dtype)).sum()
        return grad_o1, grad_o1 * -lam, grad_lam.to(lam.dtype), grad_gain, None, None

    @staticmethod
    def normalised(o1: Tensor, o2: Tensor, lam: Tensor, gain: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        """n = h r and r (..., 1) from o1, o2 and lam, in gain's dtype."""
        h = torch.addcmul(o1, lam, o2, value=-1).to(gain.dtype)
        r = torch.rsqrt(torch.linalg.vecdot(h, h).unsqueeze(-1) / h.shape[-1] + eps)
        return h * r, r


def sparse_setup(q: Tensor, graph: "TokenGraph") -> tuple["EdgeList", int]:
    """The graph's EdgeList for q's device and dtype, and the edges per block for q's (B, nh, T, hs) shape."""
    edges = graph.edge_list(q.device, q.dtype)
    B, nh, _, hs = q.shape
    return edges, block_size(graph.block, edges, (B, nh, hs))


def feature_map(x: Tensor) -> Tensor:
    """phi(x) = elu(x) + 1 > 0, the linear kernel's feature map."""
    return F.elu(x) + 1


def positive(denominator: Tensor) -> Tensor:
    """phi > 0, so linear attention's denominators are > 0 unless phi underflowed; keep them finite."""
    return denominator.clamp_min(torch.finfo(denominator.dtype).tiny)


def linear_attention(q: Tensor, k: Tensor, v: Tensor, graph: "TokenGraph", chunk: int = 64) -> Tensor:
    """w_ij = phi(q_i) . phi(k_j) / sum_{j' in N(i)} phi(q_i) . phi(k_j'); O(T hs^2) for full and causal graphs.

    Causal: y_i = (sum_{j<=i} v_j phi(k_j)^T) phi(q_i) / ((sum_{j<=i} phi(k_j))^T phi(q_i)), by prefix
    sums over chunks of `chunk` tokens (within a chunk the same sums are a masked product).
    """
    q, k = feature_map(q), feature_map(k)
    if graph.kind == "full":
        kv = k.transpose(-2, -1) @ v  # (B, nh, hs, hs)
        return (q @ kv) / positive(q @ k.sum(-2).unsqueeze(-1))
    if graph.kind == "causal":
        return causal_linear_attention(q, k, v, chunk)
    if graph.layout == "dense":
        w = (q @ k.transpose(-2, -1)) * graph.mask(q.device)  # (B, nh, T, T)
        return (w @ v) / positive(w.sum(-1, keepdim=True))
    edges, block = sparse_setup(q, graph)
    q, k, v = (t.permute(2, 0, 1, 3) for t in (q, k, v))
    w = edge_scores(q, k, edges, 1.0, block)  # (E, B, nh)
    heads = edge_aggregate(w, v, edges, block) / positive(edges.aggregate(w).unsqueeze(-1))
    return heads.permute(1, 2, 0, 3)


def causal_linear_attention(q: Tensor, k: Tensor, v: Tensor, chunk: int) -> Tensor:
    """Causal linear attention on feature-mapped q, k (B, nh, T, hs) by chunked prefix sums."""
    B, nh, T, hs = q.shape
    pad = -T % chunk  # zero features and values add nothing to any sum
    q, k, v = (F.pad(t, (0, 0, 0, pad)).view(B, nh, -1, chunk, t.shape[-1]) for t in (q, k, v))  # (B, nh, n, c, .)
    kv = k.transpose(-2, -1) @ v  # (B, nh, n, hs, hs): each chunk's sum of k_j v_j^T
    state = torch.cumsum(kv, dim=2) - kv  # sums over all earlier chunks
    k_sum = k.sum(-2)
    k_state = torch.cumsum(k_sum, dim=2) - k_sum  # (B, nh, n, hs)
    w = (q @ k.transpose(-2, -1)).tril()  # (B, nh, n, c, c): within the chunk, j <= i
    numerator = q @ state + w @ v
    denominator = (q * k_state.unsqueeze(-2)).sum(-1, keepdim=True) + w.sum(-1, keepdim=True)
    return (numerator / positive(denominator)).view(B, nh, -1, v.shape[-1])[:, :, :T]


def softmax_entropy(q: Tensor, k: Tensor, graph: "TokenGraph", scale: float | None = None) -> Tensor:
    """Mean entropy (nats) of each head's softmax rows, (nh,): a probe statistic, computed explicitly."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    if graph.kind == "graph" and graph.layout == "sparse":
        edges, block = sparse_setup(q, graph)
        q, k = (t.permute(2, 0, 1, 3) for t in (q, k))
        w = edge_softmax(edge_scores(q, k, edges, scale, block), edges, block)  # (E, B, nh)
        return -edges.aggregate(w * w.clamp_min(1e-30).log()).mean((0, 1))
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, nh, T, T)
    if graph.kind != "full":
        scores = scores.masked_fill(
            ~graph.mask(q.device) if graph.kind == "graph" else torch.ones_like(scores, dtype=torch.bool).triu(1),
            float("-inf"),
        )
    w = scores.softmax(-1)
    return -(w * w.clamp_min(1e-30).log()).sum(-1).mean((0, 2))
