"""Multi-head attention whose residual signal, score kernel and token graph are switches (docs/theory/attention.md
section 1; docs/theory/residuals.md section 1).

In pdmm's words (docs/theory/attention.md section 2): `project` is token-local, `attend` gathers each
neighbour's key and value to the edge (node to edge) and aggregates the softmax-weighted values over each
token's edges (edge to node), and `residual_signal` with W^o is the start of the fuse step, the token's
local update, which the block finishes with x + update and its MLP.
"""

import math
import numbers
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .kernels import differential_attention, linear_attention, softmax_attention, softmax_entropy
from .token_graph import resolve

if TYPE_CHECKING:
    from .config import AttentionConfig
    from .token_graph import TokenGraph


class MultiHeadAttention(nn.Module):
    """forward(x, graph) = R W^o + b: the update a block adds to x, R the configured residual signal.

    Parameters: c_attn = [W^Q W^K W^V] (W^K absent when symmetric), d_model -> w_k + w_k + w_v,
    c_proj = W^o: w_v -> d_model (2 w_v wide for "concat"), c_proj_s = W^s: w_v -> d_model for
    "belief_star" only; "diff" adds lambda_q1, lambda_k1, lambda_q2, lambda_k2 (hs_k/2 each) and
    head_norm's gain (hs_v), i.e. 3 hs per layer when hs_k = hs_v = hs. w_k = w_v = d_model unless
    config.send_width sets them (AttentionConfig); hs_k = w_k / n_head, hs_v = w_v / n_head. What the residual
    needs (widths, W^s, memory) is read once, from its row of attention.residuals.RESIDUAL_TABLE.
    `layer_index` (from 1) sets diff's lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)).

    Parameters
    ----------
    config : AttentionConfig
        The layer's sizes and switches.
    layer_index : int or None
        The layer's position, counted from 1; kernel "diff" needs it.

    Raises
    ------
    ValueError
        When layer_index is not an integer >= 1, or is None with kernel "diff".

    Examples
    --------
    >>> import torch
    >>> import attention
    >>> _ = torch.manual_seed(0)
    >>> layer = attention.MultiHeadAttention(attention.AttentionConfig(d_model=16, n_head=2))
    >>> x = torch.randn(2, 5, 16)  # (B, T, d_model)
    >>> causal = attention.TokenGraph.causal(5)
    >>> update = layer(x, causal)
    >>> update.shape
    torch.Size([2, 5, 16])
    >>> later = x.clone()
    >>> later[:, 4] += 1.0  # change the last token: under the causal graph no earlier token sees it
    >>> torch.allclose(layer(later, causal)[:, :4], update[:, :4])
    True
    """

    lambda_init: float  # kernel "diff" only, like the four lambda vectors and head_norm
    lambda_q1: nn.Parameter
    lambda_k1: nn.Parameter
    lambda_q2: nn.Parameter
    lambda_k2: nn.Parameter
    head_norm: nn.RMSNorm

    def __init__(self, config: "AttentionConfig", layer_index: int | None = None):
        super().__init__()
        self.config = config
        self.residual_spec = config.residual_spec  # the one place the layer reads which residual it has
        self.form_signal = self.residual_spec.signal  # its function in attention.signals, looked up once
        C, w_v = config.d_model, config.value_width
        if layer_index is not None and not (
            isinstance(layer_index, numbers.Integral) and not isinstance(layer_index, bool) and layer_index >= 1
        ):
            raise ValueError(f"layer_index counts layers from 1, got {layer_index!r}")
        if config.kernel == "diff" and layer_index is None:
            raise ValueError("kernel 'diff' needs layer_index (counted from 1) to set lambda_init")
        self.c_attn = nn.Linear(C, self.projection_width(), bias=config.bias)
        if config.kernel == "diff":
            assert layer_index is not None  # checked above
            self.lambda_init = 0.8 - 0.6 * math.exp(-0.3 * (layer_index - 1))
            self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
                nn.Parameter(torch.randn(config.key_head_size // 2) * 0.1) for _ in range(4)
            )
            self.head_norm = nn.RMSNorm(config.value_head_size, eps=1e-5)
        self.c_proj = nn.Linear(self.residual_spec.output_width(w_v), C, bias=config.bias)
        if self.residual_spec.second_map:
            self.c_proj_s = nn.Linear(w_v, C, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.probes: dict[str, Tensor] = {}

    def forward(self, x: Tensor, graph: "TokenGraph | None" = None, memory: "SignalMemory | None" = None) -> Tensor:
        """The update R W^o + b the block adds to x (dropout applied; for "belief_star" plus the per-head
        Delta^s W^s, for "accumulated" plus beta times the earlier layers' updates).

        Parameters
        ----------
        x : torch.Tensor
            (B, T, d_model) token rows.
        graph : TokenGraph or None
            The token graph over T tokens; None means full attention.
        memory : SignalMemory or None
            What a model passes through its layers; residual "accumulated" needs it (a lone layer: a fresh
            SignalMemory()), the others ignore it.

        Returns
        -------
        torch.Tensor
            (B, T, d_model), the update.

        Raises
        ------
        ValueError
            When x is not (B, T, d_model), the graph is over another number of tokens, or the residual needs a
            memory and none is passed.
        TypeError
            When graph is neither a TokenGraph nor None.
        """
        if x.dim() != 3 or x.shape[-1] != self.config.d_model:
            raise ValueError(f"expected input of shape (B, T, {self.config.d_model}), got {tuple(x.shape)}")
        if self.residual_spec.needs_memory and memory is None:
            raise ValueError(
                f"residual {self.residual_spec.name!r} adds the earlier layers' updates: pass the SignalMemory the "
                "model threads through its layers (a lone layer: attention.mha.SignalMemory())"
            )
        graph = resolve(graph, x.shape[1])
        q, k, v = self.project(x)  # (B, nh, T, hs_k), twice, and (B, nh, T, hs_v)
        heads = self.attend(q, k, v, graph)  # (B, nh, T, hs_v)
        mh, v_all = merge(heads), merge(v)  # (B, T, w_v)
        r = self.residual_signal(mh, v_all)  # (B, T, width * w_v)
        y = self.output(r)
        if memory is not None and self.residual_spec.needs_memory:  # S_l + beta sum_{m < l} S_m
            y = memory.accumulate(y, self.config.beta)
        y = self.resid_dropout(y)
        if self.config.probe:
            self.record(x, q, k, mh, v_all, r[..., : self.c_proj.in_features], y, graph)  # what W^o maps
        return y

    def output(self, r: Tensor) -> Tensor:
        """R W^o + b, or with a second map (belief_star) [R_1 R_2] [W^o W^s] + b^o + b^s as one product.

        Parameters
        ----------
        r : torch.Tensor
            (B, T, width * w_v), the residual signal.

        Returns
        -------
        torch.Tensor
            (B, T, d_model), before dropout and memory.
        """
        if not self.residual_spec.second_map:
            return self.c_proj(r)
        weight = torch.cat([self.c_proj.weight, self.c_proj_s.weight], dim=1)  # [W^o W^s], (d_model, 2 w_v)
        bias = None if self.c_proj.bias is None else self.c_proj.bias + self.c_proj_s.bias
        return F.linear(r, weight, bias)

    def projection_width(self) -> int:
        """Output width of c_attn: Q, K, V (K = Q when symmetric).

        Returns
        -------
        int
            w_k + w_k + w_v, or w_k + w_v when symmetric.
        """
        return sum(self.projection_sizes())

    def projection_sizes(self) -> tuple[int, ...]:
        """Widths of c_attn's parts: (w_k, w_k, w_v), or (w_k, w_v) when symmetric (K = Q).

        Returns
        -------
        tuple of int
            The widths in c_attn's output order.
        """
        w_k, w_v = self.config.key_width, self.config.value_width
        return (w_k, w_v) if self.config.symmetric else (w_k, w_k, w_v)

    @property
    def numbers_sent(self) -> int:
        """Numbers a token sends each neighbour per layer: its key and its value, w_k + w_v (2 d_model
        by default, send_width when set). With symmetric the key is the sender's query, sent all the same;
        the receiver forms its own query locally."""
        return self.config.key_width + self.config.value_width

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K as (B, nh, T, hs_k), V as (B, nh, T, hs_v); K is Q when symmetric. Token-local.

        Parameters
        ----------
        x : torch.Tensor
            (B, T, d_model) token rows.

        Returns
        -------
        q, k, v : torch.Tensor
            The per-head queries, keys and values.
        """
        B, T, _ = x.shape
        parts = self.c_attn(x).split(self.projection_sizes(), dim=2)
        q, k, v = (parts[0], parts[0], parts[1]) if self.config.symmetric else parts
        q, k, v = (t.view(B, T, self.config.n_head, -1).transpose(1, 2) for t in (q, k, v))
        return q, k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, graph: "TokenGraph") -> Tensor:
        """The heads head_m = sum_{j in N(i)} w_ij v_j of the configured kernel: the aggregate over each
        token's edges of the values gathered from its neighbours (docs/theory/attention.md section 3;
        docs/theory/residuals.md section 1).

        Parameters
        ----------
        q, k : torch.Tensor
            (B, nh, T, hs_k) queries and keys.
        v : torch.Tensor
            (B, nh, T, hs_v) values.
        graph : TokenGraph
            The token graph over T tokens.

        Returns
        -------
        torch.Tensor
            (B, nh, T, hs_v), the heads.
        """
        p = self.config.dropout if self.training else 0.0
        if self.config.kernel == "mean":  # w_ij = 1 / |N(i)|: the softmax of equal (zero) scores
            zeros = v.new_zeros(v.shape[:-1] + (1,))
            return softmax_attention(zeros, zeros, v, graph, p)
        if self.config.kernel == "softmax":
            return softmax_attention(q, k, v, graph, p)
        if self.config.kernel == "linear":
            return linear_attention(q, k, v, graph)
        # differential: RMSNorm((softmax(Q1 K1^T / sqrt(hs_k/2)) - lambda softmax(Q2 K2^T / sqrt(hs_k/2))) V) times
        # (1 - lambda_init), per head. No attention dropout: two masks would not cancel.
        eps = self.head_norm.eps
        assert eps is not None  # set in __init__
        return differential_attention(
            q, k, v, graph, self.diff_lambda(), self.head_norm.weight, eps, 1 - self.lambda_init
        )

    def diff_lambda(self) -> Tensor:
        """lambda = exp(l_q1 . l_k1) - exp(l_q2 . l_k2) + lambda_init, one scalar per layer (kernel "diff").

        Returns
        -------
        torch.Tensor
            A 0-dimensional tensor.
        """
        return (
            torch.exp(self.lambda_q1 @ self.lambda_k1) - torch.exp(self.lambda_q2 @ self.lambda_k2) + self.lambda_init
        )

    def entropy(self, q: Tensor, k: Tensor, graph: "TokenGraph") -> Tensor | None:
        """Mean entropy of each head's attention rows, (nh,); None where the kernel has no softmax rows.

        Parameters
        ----------
        q, k : torch.Tensor
            (B, nh, T, hs_k) queries and keys.
        graph : TokenGraph
            The token graph over T tokens.

        Returns
        -------
        torch.Tensor or None
            (nh,) entropies in nats for kernel "softmax", else None.
        """
        return softmax_entropy(q, k, graph) if self.config.kernel == "softmax" else None  # "mean": log |N(i)|

    def residual_signal(self, mh: Tensor, v: Tensor) -> Tensor:
        """R from MH(X) and V(X), both (B, T, w_v): token-local, the first part of the fuse step
        (docs/theory/residuals.md section 1).

        Parameters
        ----------
        mh : torch.Tensor
            (B, T, w_v) merged heads MH(X).
        v : torch.Tensor
            (B, T, w_v) merged values V(X).

        Returns
        -------
        torch.Tensor
            (B, T, width * w_v): w_v wide, or 2 w_v for "concat" and "belief_star" (Delta, then the per-head
            parts that W^s maps), as the residual's row of the table says.
        """
        return self.form_signal(mh, v, self.config)

    @torch.no_grad()
    def record(
        self, x: Tensor, q: Tensor, k: Tensor, mh: Tensor, v: Tensor, r: Tensor, y: Tensor, graph: "TokenGraph"
    ) -> None:
        """Keep the last forward's signals (detached) in `probes` for analysis: also the layer's input x and its
        update y.

        Parameters
        ----------
        x : torch.Tensor
            (B, T, d_model) the layer's input.
        q, k : torch.Tensor
            (B, nh, T, hs_k) queries and keys (for the entropy).
        mh, v : torch.Tensor
            (B, T, w_v) merged heads and values.
        r : torch.Tensor
            The residual signal R, the part W^o maps (belief_star's Delta).
        y : torch.Tensor
            (B, T, d_model) the layer's update.
        graph : TokenGraph
            The token graph over T tokens.
        """
        self.probes = {
            "mh": mh.detach(),
            "v": v.detach(),
            "residual": r.detach(),
            "input": x.detach(),
            "update": y.detach(),
        }
        if self.residual_spec.orthogonal:
            self.probes["alpha"] = projection_coefficient(mh, v)
        entropy = self.entropy(q, k, graph)
        if entropy is not None:
            self.probes["entropy"] = entropy
        if self.config.kernel == "diff":
            self.probes["lambda"] = self.diff_lambda().detach()


class SignalMemory:
    """The running sum of the updates S_m = MH_m W^o of the layers run so far in one forward pass."""

    def __init__(self) -> None:
        self.total: Tensor | None = None

    def accumulate(self, update: Tensor, beta: float) -> Tensor:
        """update + beta * (sum of the earlier updates); then remember update.

        Parameters
        ----------
        update : torch.Tensor
            This layer's update S_l.
        beta : float
            The weight of the earlier updates.

        Returns
        -------
        torch.Tensor
            S_l + beta sum_{m < l} S_m.
        """
        out = update if self.total is None else update + beta * self.total
        self.total = update if self.total is None else self.total + update
        return out


def merge(heads: Tensor) -> Tensor:
    """(B, nh, T, hs) -> (B, T, nh * hs)."""
    B, nh, T, hs = heads.shape
    return heads.transpose(1, 2).reshape(B, T, nh * hs)


def split(x: Tensor, n_head: int) -> Tensor:
    """(B, T, nh * hs) -> (B, T, nh, hs), a view."""
    return x.unflatten(-1, (n_head, -1))


def projection_coefficient(a: Tensor, v: Tensor) -> Tensor:
    """alpha = <a, v> / <v, v> along the last axis; 0 where <v, v> <= eps^2 (eps of the dtype)."""
    return torch.linalg.vecdot(a, v) / safe_squared_norm(v)


def safe_squared_norm(v: Tensor) -> Tensor:
    """<v, v> along the last axis, inf where it is <= eps^2, so that dividing by it gives 0 there."""
    return nonzero_or_inf(torch.linalg.vecdot(v, v))


def nonzero_or_inf(vv: Tensor) -> Tensor:
    """vv with inf where it is <= eps^2 (eps of its dtype): a squared norm that is safe to divide by."""
    return vv.masked_fill(vv <= torch.finfo(vv.dtype).eps ** 2, float("inf"))


def orthogonal_part(a: Tensor, v: Tensor) -> Tensor:
    """Delta = a - alpha v, alpha = <a, v> / <v, v>: the part of a orthogonal to v, row by row
    (docs/theory/residuals.md section 4).

    Where a row of V is (numerically) zero there is nothing to project out: alpha = 0, Delta = a, and
    no NaN or inf in either pass.
    """
    return OrthogonalPart.apply(a, v)


class OrthogonalPart(torch.autograd.Function):
    """orthogonal_part with a hand-fused backward (fewer passes over (B, T, C) than autograd's):

    dL/da = g - c v,   dL/dv = 2 alpha c v - alpha g - c a,   c = <g, v> / <v, v>

    The backward recomputes alpha and <v, v> from a and v with differentiable operations, so that a
    second derivative (create_graph, torch.func.grad of grad) is right; vmap by torch's generated rule.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(a: Tensor, v: Tensor) -> Tensor:
        return torch.addcmul(a, projection_coefficient(a, v).unsqueeze(-1), v, value=-1)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, Tensor], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        a, v = ctx.saved_tensors
        vv = safe_squared_norm(v).unsqueeze(-1)
        alpha = torch.linalg.vecdot(a, v).unsqueeze(-1) / vv
        c = torch.linalg.vecdot(g, v).unsqueeze(-1) / vv
        grad_a = torch.addcmul(g, c, v, value=-1)
        grad_v = (a * c.neg()).addcmul(g, alpha, value=-1).addcmul(v, 2 * alpha * c)
        return grad_a, grad_v


def orthogonal_parts(a: Tensor, v: Tensor, n_head: int) -> Tensor:
    """[Delta, Concat(Delta^s_1..Delta^s_M)]: the part of a orthogonal to v over the whole row and the parts of
    each head's a_m orthogonal to its v_m, stacked (docs/theory/residuals.md sections 4, 5).

    Delta = a - alpha v, alpha = <a, v> / <v, v>; Delta^s_m = a_m - beta_m v_m, beta_m = <a_m, v_m> / <v_m, v_m>,
    the heads being n_head equal slices of the last axis. A (numerically) zero row or head of v gives a zero
    coefficient, as in orthogonal_part. One pass forms both, and one backward gives the sum of both gradients.

    Parameters
    ----------
    a, v : torch.Tensor
        (..., w) rows, n_head dividing w.
    n_head : int
        The number of heads M.

    Returns
    -------
    torch.Tensor
        (..., 2, w): Delta at index 0 of axis -2, the per-head parts at index 1.
    """
    return OrthogonalParts.apply(a, v, n_head)


class OrthogonalParts(torch.autograd.Function):
    """orthogonal_parts with a hand-fused backward. With g and g^s the gradients of Delta and Delta^s,
    c = <g, v> / <v, v> per row and c^s_m = <g^s_m, v_m> / <v_m, v_m> per head (OrthogonalPart's formula for each):

    dL/da_m = g_m + g^s_m - (c + c^s_m) v_m
    dL/dv_m = 2 (alpha c + beta_m c^s_m) v_m - alpha g_m - beta_m g^s_m - (c + c^s_m) a_m

    The per-head products <a_m, v_m>, <v_m, v_m> also give the row's (their sums over the heads). Like
    OrthogonalPart, the backward recomputes the coefficients from a and v (second derivatives stay right);
    vmap by torch's generated rule.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(a: Tensor, v: Tensor, n_head: int) -> Tensor:
        a_m, v_m = split(a, n_head), split(v, n_head)  # (..., M, hs)
        coefficients, _ = OrthogonalParts.coefficients(a_m, v_m)
        return torch.addcmul(a_m.unsqueeze(-3), coefficients, v_m.unsqueeze(-3), value=-1).flatten(-2)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, Tensor, int], output: Tensor) -> None:
        a, v, ctx.n_head = inputs
        ctx.save_for_backward(a, v)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor, None]:
        a, v = ctx.saved_tensors
        a_m, v_m = split(a, ctx.n_head), split(v, ctx.n_head)
        coefficients, vv = OrthogonalParts.coefficients(a_m, v_m)  # (..., 2, M, 1) each
        g = g.unflatten(-1, (ctx.n_head, -1))  # (..., 2, M, hs): g, g^s
        gv = torch.linalg.vecdot(g, v_m.unsqueeze(-3))  # <g_m, v_m>, <g^s_m, v_m>: (..., 2, M)
        c = torch.stack([gv[..., 0, :].sum(-1, keepdim=True).expand_as(gv[..., 1, :]), gv[..., 1, :]], dim=-2)
        c = c.unsqueeze(-1) / vv  # c (repeated over the heads), c^s
        c_sum, cross = c.sum(-3), 2 * (coefficients * c).sum(-3)  # (..., M, 1)
        grad_a = (g[..., 0, :, :] + g[..., 1, :, :]).addcmul(c_sum, v_m, value=-1)
        grad_v = (
            torch.mul(v_m, cross)
            .addcmul(g[..., 0, :, :], coefficients[..., 0, :, :], value=-1)
            .addcmul(g[..., 1, :, :], coefficients[..., 1, :, :], value=-1)
            .addcmul(a_m, c_sum, value=-1)
        )
        return grad_a.flatten(-2), grad_v.flatten(-2), None

    @staticmethod
    def coefficients(a_m: Tensor, v_m: Tensor) -> tuple[Tensor, Tensor]:
        """(alpha, beta_m) and (<v, v>, <v_m, v_m>) (safe: inf where zero), each (..., 2, M, 1), from (..., M, hs)
        heads; alpha and <v, v> repeated over the heads."""
        av, vv = torch.linalg.vecdot(a_m, v_m), torch.linalg.vecdot(v_m, v_m)  # (..., M)
        vv = nonzero_or_inf(torch.stack([vv.sum(-1, keepdim=True).expand_as(vv), vv], dim=-2))  # (..., 2, M)
        av = torch.stack([av.sum(-1, keepdim=True).expand_as(av), av], dim=-2)
        vv = vv.unsqueeze(-1)
        return av.unsqueeze(-1) / vv, vv
