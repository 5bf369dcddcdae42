"""Attention over an edge list in blocks of edges: scores, softmax, aggregate (docs/theory/attention.md section 5).

On a sparse token graph one attention head is three steps over the edges e = (i -> j) of a
pdmm `EdgeList` (src = i the attending token, dst = j the attended one), in token-major tensors
q, k, v of shape (T, B, nh, hs). The words are pdmm's: gather is node to edge (each edge reads
the rows of its tokens, q_i from its own token, k_j and v_j from its neighbour), aggregate is
edge to node (the sum over the edges of each attending token):

    edge_scores      s_e = scale * q_i . k_j                        (E, B, nh)       gather, per-edge product
    edge_softmax     w_e = exp(s_e) / sum_{e' from i} exp(s_e')     (E, B, nh)       aggregate, gather back
    edge_aggregate   h_i = sum_{e from i} w_e v_j                   (T, B, nh, hs)   gather v_j, aggregate

Written with plain autograd (`block=0`, the readable path kept beside the fast one), the
gathered q_i, k_j, v_j and their products are (E, B, nh, hs) tensors that autograd keeps for
backward: about 6 kB per edge at d_model 256. With `block >= 1` the scores and the aggregate are
autograd Functions that run over `block` edges at a time and gather each block's rows again in
backward, so autograd keeps q, k, v and the weights (E, B, nh) only: memory O(T d + E nh + block d)
instead of O(E d). Blocks are plain edge ranges and may split a token's edges: the softmax runs on
the whole (E, B, nh) score tensor (per-edge numbers, no head size), so it is exact for any block
size. Where every token has the same number of edges and a block holds whole tokens, the attending
token's side is a broadcast and a sum instead of a gather and an index-add (`EdgeBlock`).

The blocked Functions are differentiable once (their backward is not recorded); double backward
needs block=0.
"""

import functools
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from pdmm.edge_index import EdgeList

MIN_BLOCK_ELEMENTS = 2**16  # a block's gathered (edges, B, nh, hs) tensor holds at least this many numbers
MAX_BLOCK_ELEMENTS = 2**24  # ... and at most this many (64 MB in float32)


def block_size(block: int | None, edges: "EdgeList", row: tuple[int, ...]) -> int:
    """Edges per block for a graph's `block` setting; row = (B, nh, hs), the shape of one edge's message.

    None (automatic): one block's gathered (edges, B, nh, hs) tensor holds about as many numbers as
    the (E, B, nh) weights, i.e. E / hs edges, clipped to 2^16 .. 2^24 numbers, and rounded down to
    whole tokens when every token has the same number of edges; an int is used as given, 0 meaning
    unblocked (the readable plain-autograd path).
    """
    if block is not None:
        return block
    per_edge = math.prod(row)
    elements = min(max(edges.num_edges * per_edge // row[-1], MIN_BLOCK_ELEMENTS), MAX_BLOCK_ELEMENTS)
    block = max(1, elements // per_edge)
    if edges.incidence is None:  # equal degrees: whole tokens per block (EdgeBlock's broadcast path)
        degree = edges.num_edges // edges.n
        block = max(degree, block - block % degree)
    return block


def edge_scores(q: Tensor, k: Tensor, edges: "EdgeList", scale: float, block: int) -> Tensor:
    """s_e = scale * q[src_e] . k[dst_e]: (T, B, nh, hs) x2 -> (E, B, nh); gather q_i and k_j, multiply per edge."""
    if not block:
        return (edges.gather(q) * edges.gather_neighbour(k)).sum(-1) * scale
    scores = EdgeScores.apply(token_rows(q), token_rows(k), edges, scale, block)  # (E, B nh)
    return scores.view(edges.num_edges, *q.shape[1:-1])


def edge_softmax(scores: Tensor, edges: "EdgeList", block: int | None = None) -> Tensor:
    """Softmax of per-edge scores (E, ...) over the edges of each attending token: aggregate the token's max
    and sum of exponentials, gather them back to its edges.

    block=0 is the plain-autograd form (it keeps the weights, their exponentials and the row sums
    per edge); otherwise one Function that keeps only the weights.
    """
    if block == 0:
        w = (scores - edges.gather(edges.aggregate_max(scores.detach()))).exp()
        return w / edges.gather(edges.aggregate(w))
    return EdgeSoftmax.apply(scores, edges)


def edge_aggregate(w: Tensor, v: Tensor, edges: "EdgeList", block: int) -> Tensor:
    """h_i = sum over the edges e of token i of w_e v[dst_e]: (E, B, nh), (T, B, nh, hs) -> (T, B, nh, hs).

    Gather v_j to each edge, weigh it by w_e, aggregate over the edges of token i."""
    if not block:
        return edges.aggregate(w.unsqueeze(-1) * edges.gather_neighbour(v))
    h = EdgeAggregate.apply(w.reshape(len(w), -1), token_rows(v), edges, block)  # (T, B nh, hs)
    return h.view(v.shape)


def token_rows(x: Tensor) -> Tensor:
    """(T, ..., hs) -> (T, H, hs) with each token's H hs numbers packed in memory (a view where it can
    be, e.g. the heads of a (B = 1, T, 3 d_model) projection), so that gathering tokens copies rows."""
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    packed = x.stride(-1) == 1 and (x.shape[1] == 1 or x.stride(1) == x.shape[2])
    return x if packed else x.contiguous()


def once(backward: Callable[..., Any]) -> Callable[..., Any]:
    """A Function's backward that refuses create_graph=True (its arithmetic is not recorded) instead
    of returning gradients that silently carry no second derivative."""

    @functools.wraps(backward)
    def wrapper(ctx: Any, *grads: Tensor) -> Any:
        if torch.is_grad_enabled():
            raise RuntimeError(
                "the blocked sparse attention path is differentiable once; for double backward "
                "(create_graph=True) run the graph unblocked: graph.sparse(block=0)"
            )
        return backward(ctx, *grads)

    return wrapper


def edge_blocks(edges: "EdgeList", block: int) -> Iterator["EdgeBlock"]:
    """The EdgeBlock of each run of `block` consecutive edges, in order."""
    degree = edges.num_edges // edges.n if edges.incidence is None else 0
    aligned = degree > 0 and block % degree == 0  # whole tokens per block, all with `degree` edges
    for start in range(0, edges.num_edges, block):
        stop = min(start + block, edges.num_edges)
        yield EdgeBlock(
            edges.src[start:stop],
            edges.dst[start:stop],
            slice(start, stop),
            slice(start // degree, stop // degree) if aligned else None,
            degree,
        )


class EdgeBlock:
    """Edges e (a slice) from tokens src = i to tokens dst = j, and the gather and aggregate steps on them.

    Where every token has `degree` edges and the block holds whole tokens (`tokens`, a slice), the
    attending side is a broadcast of the tokens' rows and a sum over their edges: per-edge values
    are viewed as (tokens, degree, ...), attending rows as (tokens, 1, ...). Otherwise per-edge
    values are (e, ...), attending rows are gathered, and sums over a token's edges index-add.

    Parameters
    ----------
    i, j : torch.Tensor
        (e,) int64: the attending and the attended token of each edge of the block.
    e : slice
        The block's edges in the edge list.
    tokens : slice or None
        The attending tokens when the block holds whole tokens of `degree` edges each, else None.
    degree : int
        Edges per token when all tokens have the same number, else 0.
    """

    def __init__(self, i: Tensor, j: Tensor, e: slice, tokens: slice | None, degree: int):
        self.i, self.j, self.e, self.tokens, self.degree = i, j, e, tokens, degree

    def per_edge(self, x: Tensor) -> Tensor:
        """This block's part of an (E, ...) edge tensor, a view."""
        return self.by_token(x[self.e])

    def gather(self, x: Tensor) -> Tensor:
        """Gather (node to edge): x_i of each edge's attending token, from a (T, ...) token tensor."""
        return x.index_select(0, self.i) if self.tokens is None else x[self.tokens].unsqueeze(1)

    def gather_neighbour(self, x: Tensor) -> Tensor:
        """Gather (node to edge): x_j of each edge's attended token, from a (T, ...) token tensor."""
        return self.by_token(x.index_select(0, self.j))

    def aggregate_into(self, out: Tensor, values: Tensor) -> None:
        """Aggregate (edge to node): out_i += sum of the per-edge values over the edges of token i."""
        if self.tokens is None:
            out.index_add_(0, self.i, values.to(out.dtype))
        else:
            out[self.tokens] += values.sum(1).to(out.dtype)

    def aggregate_into_neighbour(self, out: Tensor, values: Tensor) -> None:
        """out_j += sum of the per-edge values over the edges into token j (the adjoint of gather_neighbour)."""
        out.index_add_(0, self.j, (values if self.tokens is None else values.flatten(0, 1)).to(out.dtype))

    def by_token(self, x: Tensor) -> Tensor:
        """(e, ...) -> (tokens, degree, ...) on a block of whole tokens; unchanged otherwise."""
        return x if self.tokens is None else x.view(-1, self.degree, *x.shape[1:])


class EdgeScores(torch.autograd.Function):
    """s_e = scale q_i . k_j block by block, q and k (T, H, hs) -> (E, H); keeps q and k only.

    Backward recomputes each block's gathers: dq_i += scale ds_e k_j and dk_j += scale ds_e q_i.
    """

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, edges: "EdgeList", scale: float, block: int) -> Tensor:
        ctx.save_for_backward(q, k)
        ctx.edges, ctx.scale, ctx.block = edges, scale, block
        scores = q.new_empty(edges.num_edges, q.shape[1], dtype=torch.promote_types(q.dtype, k.dtype))
        for b in edge_blocks(edges, block):
            b.per_edge(scores).copy_((b.gather(q) * b.gather_neighbour(k)).sum(-1))
        return scores.mul_(scale)

    @staticmethod
    @once
    def backward(ctx: Any, ds: Tensor) -> tuple[Tensor | None, Tensor | None, None, None, None]:
        q, k = ctx.saved_tensors
        dq = q.new_zeros(q.shape) if ctx.needs_input_grad[0] else None
        dk = k.new_zeros(k.shape) if ctx.needs_input_grad[1] else None
        for b in edge_blocks(ctx.edges, ctx.block):
            g = b.per_edge(ds).unsqueeze(-1) * ctx.scale  # (e, H, 1), or (tokens, degree, H, 1)
            if dq is not None:
                b.aggregate_into(dq, g * b.gather_neighbour(k))
            if dk is not None:
                b.aggregate_into_neighbour(dk, g * b.gather(q))
        return dq, dk, None, None, None


class EdgeSoftmax(torch.autograd.Function):
    """w = softmax of the scores over each token's edges; keeps w only: ds = w (dw - sum_{e' from i} w dw)."""

    @staticmethod
    def forward(ctx: Any, scores: Tensor, edges: "EdgeList") -> Tensor:
        w = (scores - edges.gather(edges.aggregate_max(scores))).exp_()
        w = w.div_(edges.gather(edges.aggregate(w)))
        ctx.save_for_backward(w)
        ctx.edges = edges
        return w

    @staticmethod
    @once
    def backward(ctx: Any, dw: Tensor) -> tuple[Tensor, None]:
        (w,) = ctx.saved_tensors
        g = w * dw
        return g.sub_(ctx.edges.gather(ctx.edges.aggregate(g)).mul_(w)), None


class EdgeAggregate(torch.autograd.Function):
    """h_i = sum_{e from i} w_e v_j block by block, w (E, H) and v (T, H, hs) -> (T, H, hs); keeps w and v only.

    Backward recomputes each block's gathers: dw_e = dh_i . v_j and dv_j += w_e dh_i.
    """

    @staticmethod
    def forward(ctx: Any, w: Tensor, v: Tensor, edges: "EdgeList", block: int) -> Tensor:
        ctx.save_for_backward(w, v)
        ctx.edges, ctx.block = edges, block
        h = v.new_zeros(edges.n, *v.shape[1:], dtype=torch.promote_types(w.dtype, v.dtype))
        for b in edge_blocks(edges, block):
            b.aggregate_into(h, b.per_edge(w).unsqueeze(-1) * b.gather_neighbour(v))
        return h

    @staticmethod
    @once
    def backward(ctx: Any, dh: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        w, v = ctx.saved_tensors
        dh = token_rows(dh)
        dw = w.new_empty(w.shape) if ctx.needs_input_grad[0] else None
        dv = v.new_zeros(v.shape) if ctx.needs_input_grad[1] else None
        for b in edge_blocks(ctx.edges, ctx.block):
            dh_i = b.gather(dh)
            if dw is not None:
                b.per_edge(dw).copy_((dh_i * b.gather_neighbour(v)).sum(-1))
            if dv is not None:
                b.aggregate_into_neighbour(dv, b.per_edge(w).unsqueeze(-1) * dh_i)
        return dw, dv, None, None
