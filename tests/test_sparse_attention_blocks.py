"""The edge-list attention path in blocks of edges (attention.sparse) against the unblocked path, the
dense mask, torch's attention, finite differences, and a count of what autograd keeps."""

import itertools

import networkx as nx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention import RESIDUALS, AttentionConfig, GraphAttention, MultiHeadAttention, TokenGraph
from attention.kernels import linear_attention, softmax_attention, softmax_entropy
from attention.mha import SignalMemory
from attention.sparse import MAX_BLOCK_ELEMENTS, MIN_BLOCK_ELEMENTS, block_size, edge_aggregate, edge_softmax

B, T, C, NH = 2, 13, 12, 3
BLOCKS = [1, 2, 3, 7, 64, None]  # 1-7 split tokens' edges across blocks; 64 holds all; None automatic


def unequal_graph(self_loops=True, seed=0):
    """Tokens with 1 to 6 neighbours: token 0 attends only to itself (or to token 1 without self
    loops), token T - 1 is attended by no other token, the rest random."""
    rng = np.random.default_rng(seed)
    pairs = {(0, 0)} if self_loops else {(0, 1)}
    for i in range(1, T):
        others = [j for j in range(T - 1) if j != i]
        pairs |= {(i, int(j)) for j in rng.choice(others, size=rng.integers(1, 6), replace=False)}
        if self_loops:
            pairs.add((i, i))
    src, dst = np.array(sorted(pairs)).T
    return TokenGraph.from_edges(T, src, dst, layout="sparse")


def graphs():
    """Unequal degrees with and without self loops, and a regular graph (every token the same
    number of edges, where whole-token blocks take the broadcast path)."""
    regular = nx.random_regular_graph(3, T + 1, seed=3)
    regular.remove_node(T)  # T tokens, degrees 2 and 3
    return {
        "unequal": unequal_graph(True),
        "unequal-no-self-loops": unequal_graph(False),
        "regular": TokenGraph.from_networkx(nx.random_regular_graph(4, T, seed=3), layout="sparse"),
        "almost-regular": TokenGraph.from_networkx(regular, self_loops=False, layout="sparse"),
    }


def make(residual="standard", kernel="softmax", symmetric=False, cls=MultiHeadAttention, dropout=0.0):
    torch.manual_seed(0)
    cfg = AttentionConfig(d_model=C, n_head=NH, residual=residual, kernel=kernel, symmetric=symmetric, dropout=dropout)
    module = cls(cfg, layer_index=2).double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


def output_and_gradients(module, graph, x):
    """y, and the gradients of a fixed random function of y w.r.t. x and every parameter."""
    x = x.detach().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    y = module(x, graph, SignalMemory())
    weight = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(5))
    (y * weight).sum().backward()
    return y.detach(), x.grad, {name: p.grad for name, p in module.named_parameters()}


def assert_same(got, expected, atol=1e-10):
    (y, gx, gp), (y0, gx0, gp0) = got, expected
    torch.testing.assert_close(y, y0, rtol=0, atol=atol)
    torch.testing.assert_close(gx, gx0, rtol=0, atol=atol)
    assert gp.keys() == gp0.keys()
    for name in gp0:
        torch.testing.assert_close(gp[name], gp0[name], rtol=0, atol=atol, msg=name)


def inputs(seed=1):
    return torch.randn(B, T, C, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


VARIANTS = (
    [(r, "softmax", False, MultiHeadAttention) for r in RESIDUALS]
    + [
        ("standard", k, s, MultiHeadAttention)
        for k, s in itertools.product(["softmax", "diff", "linear"], [False, True])
        if (k, s) != ("softmax", False)
    ]
    + [("belief", "softmax", False, GraphAttention)]
)


@pytest.mark.parametrize("graph_name", list(graphs()))
@pytest.mark.parametrize("residual,kernel,symmetric,cls", VARIANTS)
def test_blocked_path_equals_unblocked_path_outputs_and_gradients(residual, kernel, symmetric, cls, graph_name):
    graph, module, x = graphs()[graph_name], make(residual, kernel, symmetric, cls), inputs()
    expected = output_and_gradients(module, graph.sparse(block=0), x)
    assert_same(output_and_gradients(module, graph.sparse(block=0).dense(), x), expected)  # the dense mask agrees too
    degree = int(np.bincount(graph.edges()[0]).max())
    for block in BLOCKS + [degree, 2 * degree]:  # whole tokens per block on the regular graph
        assert_same(output_and_gradients(module, graph.sparse(block=block), x), expected)


@pytest.mark.parametrize("block", [1, 4, None])
def test_blocked_path_equals_unblocked_path_with_attention_dropout(block):
    """Dropout draws the same (E, B, nh) mask on the weights in both paths."""
    graph, module, x = unequal_graph(), make(dropout=0.3), inputs()
    module.train()
    torch.manual_seed(7)
    expected = output_and_gradients(module, graph.sparse(block=0), x)
    torch.manual_seed(7)
    assert_same(output_and_gradients(module, graph.sparse(block=block), x), expected)


def tiny_graph():
    """6 tokens with 1 to 4 edges: token 0 attends only to itself, token 5 is attended by no other token."""
    pairs = [
        (0, 0),
        (1, 1),
        (1, 0),
        (1, 2),
        (1, 3),
        (2, 2),
        (2, 4),
        (3, 3),
        (3, 0),
        (3, 1),
        (4, 4),
        (4, 1),
        (5, 5),
        (5, 2),
        (5, 3),
    ]
    return TokenGraph.from_edges(6, *np.array(pairs).T, layout="sparse")


@pytest.mark.parametrize("block", [1, 3, 5, 15])
def test_gradcheck_of_blocked_kernels(block):
    """Finite differences in float64 on a tiny graph: softmax (also with q = k), linear, and the
    aggregate alone with per-edge weights that carry gradients (GAT's case)."""
    graph = tiny_graph().sparse(block=block)
    generator = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 6, 3, dtype=torch.float64, generator=generator, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: softmax_attention(q, k, v, graph), (q, k, v))
    assert torch.autograd.gradcheck(lambda q, v: softmax_attention(q, q, v, graph, scale=0.7), (q, v))
    assert torch.autograd.gradcheck(lambda q, k, v: linear_attention(q, k, v, graph), (q, k, v))
    edges = graph.edge_list(dtype=torch.float64)
    scores = torch.randn(edges.num_edges, 1, 2, dtype=torch.float64, generator=generator, requires_grad=True)
    vt = v.detach().permute(2, 0, 1, 3).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s, v: edge_aggregate(edge_softmax(s, edges), v, edges, block), (scores, vt))


def test_regular_graph_blocks_of_whole_tokens_pass_gradcheck():
    graph = TokenGraph.from_networkx(nx.random_regular_graph(2, 6, seed=0), layout="sparse")  # 3 edges per token
    q, k, v = (torch.randn(1, 2, 6, 2, dtype=torch.float64, requires_grad=True) for _ in range(3))
    for block in (3, 6, 18):
        assert torch.autograd.gradcheck(
            lambda q, k, v, block=block: softmax_attention(q, k, v, graph.sparse(block=block)), (q, k, v)
        )


@pytest.mark.parametrize("block", [1, 5, None])
def test_dense_graph_as_edge_list_equals_torch_attention(block, device):
    """The complete graph given as an edge list: scaled_dot_product_attention with a mask built from
    the edge list, and torch.nn.MultiheadAttention with the module's weights."""
    src, dst = np.nonzero(np.ones((T, T), dtype=bool))
    graph = TokenGraph.from_edges(T, src, dst, layout="sparse").sparse(block=block)
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, NH, T, 4, dtype=torch.float64, generator=generator).to(device) for _ in range(3))
    mask = torch.zeros(T, T, dtype=torch.bool, device=device)
    mask[torch.as_tensor(src, device=device), torch.as_tensor(dst, device=device)] = True
    torch.testing.assert_close(
        softmax_attention(q, k, v, graph), F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=0, atol=1e-12
    )
    module = make().to(device)
    ref = torch.nn.MultiheadAttention(C, NH, batch_first=True, dtype=torch.float64, device=device)
    with torch.no_grad():
        ref.in_proj_weight.copy_(module.c_attn.weight)
        ref.in_proj_bias.copy_(module.c_attn.bias)
        ref.out_proj.weight.copy_(module.c_proj.weight)
        ref.out_proj.bias.copy_(module.c_proj.bias)
    x = inputs().to(device)
    expected, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(module(x, graph), expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("self_loops", [True, False])
def test_sparse_graph_with_and_without_self_loops_equals_the_masked_sdpa(self_loops, device):
    graph = (
        TokenGraph.from_networkx(
            nx.gnm_random_graph(T, 20, seed=4, directed=True).reverse(), self_loops=self_loops, layout="sparse"
        )
        if self_loops
        else unequal_graph(False)
    )
    q, k, v = (torch.randn(B, NH, T, 4, dtype=torch.float64).to(device) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=graph.mask(device))
    for block in BLOCKS:
        torch.testing.assert_close(softmax_attention(q, k, v, graph.sparse(block=block)), expected, rtol=0, atol=1e-12)


def test_entropy_probe_is_the_same_in_blocks():
    graph = unequal_graph()
    q, k = (torch.randn(B, NH, T, 4, dtype=torch.float64) for _ in range(2))
    expected = softmax_entropy(q, k, graph.sparse(block=0))
    for block in BLOCKS:
        torch.testing.assert_close(softmax_entropy(q, k, graph.sparse(block=block)), expected, rtol=0, atol=1e-12)


def saved_bytes(fn):
    """{storage address: bytes} of the distinct storages autograd keeps for backward during fn()."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return storages


@pytest.mark.parametrize("kernel", ["softmax", "linear"])
def test_autograd_keeps_order_n_d_plus_e_heads_bytes_in_blocks_not_e_d(kernel):
    """On a graph with many edges per token (E d >> T d + E nh) the blocked path keeps the inputs and
    a few (E, B, nh) tensors; the unblocked one keeps several (E, B, nh, hs) tensors."""
    n, nh, hs, batch = 64, 4, 16, 2
    G = nx.random_regular_graph(31, n, seed=0)
    graph = TokenGraph.from_networkx(G, layout="sparse")
    E = graph.num_edges
    qkv = torch.randn(batch, n, 3 * nh * hs, dtype=torch.float64, requires_grad=True)
    q, k, v = (t.view(batch, n, nh, hs).transpose(1, 2) for t in qkv.split(nh * hs, -1))
    attend = softmax_attention if kernel == "softmax" else linear_attention
    inputs = {qkv.untyped_storage().data_ptr()}
    edges = graph.sparse(block=0).edge_list(dtype=torch.float64)  # index tensors belong to the graph
    itemsize = 8
    node_bytes, edge_bytes = n * batch * nh * hs * itemsize, E * batch * nh * itemsize

    def kept(block):
        g = graph.sparse(block=block)
        g._cache[("edges", "cpu", torch.float64)] = edges  # share the graph's index tensors
        held = saved_bytes(lambda: attend(q, k, v, g))
        return sum(
            size
            for ptr, size in held.items()
            if ptr not in inputs | {edges.src.untyped_storage().data_ptr(), edges.dst.untyped_storage().data_ptr()}
        )

    unblocked = kept(0)
    assert unblocked > 3 * E * batch * nh * hs * itemsize  # gathered q_i, k_j, v_j at least
    for block in (1, 32, None):
        blocked = kept(block)
        assert blocked <= 6 * node_bytes + 2 * edge_bytes, (block, blocked)  # e.g. phi(q), packed copies of q, k, v
        assert blocked * 10 < unblocked


def test_block_size_default_and_validation():
    graph = TokenGraph.from_networkx(nx.random_regular_graph(8, 1024, seed=0), layout="sparse")  # 9 edges per token
    edges = graph.edge_list()
    E = edges.num_edges
    block = block_size(None, edges, (1, 8, 32))
    assert block % 9 == 0 and abs(block - E // 32) < 9  # E / hs edges, whole tokens
    assert block_size(None, edges, (1, 1, 2)) * 2 > MIN_BLOCK_ELEMENTS - 2 * 9  # 2^16 numbers, less part of a token
    assert block_size(None, edges, (64, 16, 64)) * 64 * 16 * 64 <= MAX_BLOCK_ELEMENTS
    assert block_size(7, edges, (1, 8, 32)) == 7 and block_size(0, edges, (1, 8, 32)) == 0
    assert graph.sparse().block is None and graph.sparse(block=5).block == 5
    assert "block=5" in repr(graph.sparse(block=5))
    for bad in (-1, 2.5, True, "auto"):
        with pytest.raises(ValueError, match="block must be"):
            graph.sparse(block=bad)


def test_blocked_path_refuses_double_backward():
    graph = unequal_graph().sparse(block=4)
    q, k, v = (torch.randn(1, 2, T, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(softmax_attention(q, k, v, graph).sum(), q, create_graph=True)
    (gq,) = torch.autograd.grad(softmax_attention(q, k, v, graph.sparse(block=0)).sum(), q, create_graph=True)
    assert gq.requires_grad  # the unblocked path is twice differentiable
