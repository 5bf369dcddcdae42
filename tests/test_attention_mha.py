"""MultiHeadAttention against torch.nn.MultiheadAttention and against the equations
(docs/theory/attention.md section 1, docs/theory/residuals.md)."""

import itertools

import networkx as nx
import pytest
import torch
from attention_reference import attention_output, gat_output, multi_head

from attention import KERNELS, RESIDUALS, AttentionConfig, GraphAttention, MultiHeadAttention, TokenGraph
from attention.mha import SignalMemory

B, T, C, NH = 2, 10, 12, 3


def make(
    residual="standard",
    kernel="softmax",
    symmetric=False,
    gamma=1.0,
    bias=True,
    layer_index=2,
    cls=MultiHeadAttention,
    probe=False,
    seed=0,
):
    torch.manual_seed(seed)
    cfg = AttentionConfig(
        d_model=C, n_head=NH, residual=residual, kernel=kernel, symmetric=symmetric, gamma=gamma, bias=bias, probe=probe
    )
    module = cls(cfg, layer_index=layer_index).double()
    with torch.no_grad():  # non-trivial biases and norm gains
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


def inputs(seed=1):
    return torch.randn(B, T, C, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def graphs():
    G = nx.random_regular_graph(3, T, seed=4)
    return {
        "full": (None, torch.ones(T, T, dtype=torch.bool)),
        "causal": (TokenGraph.causal(T), torch.ones(T, T, dtype=torch.bool).tril()),
        "window": (TokenGraph.window(T, 2, layout="dense"), TokenGraph.window(T, 2).mask()),
        "graph-sparse": (TokenGraph.from_networkx(G, layout="sparse"), TokenGraph.from_networkx(G).mask()),
    }


@pytest.mark.parametrize("causal", [False, True])
def test_standard_softmax_equals_torch_multihead_attention(causal):
    module = make(bias=True)
    ref = torch.nn.MultiheadAttention(C, NH, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(module.c_attn.weight)
        ref.in_proj_bias.copy_(module.c_attn.bias)
        ref.out_proj.weight.copy_(module.c_proj.weight)
        ref.out_proj.bias.copy_(module.c_proj.bias)
    x = inputs()
    forbidden = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
    expected, _ = ref(x, x, x, attn_mask=forbidden, need_weights=False)
    got = module(x, TokenGraph.causal(T) if causal else None)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    assert (got - module(x, None if causal else TokenGraph.causal(T))).abs().max() > 1e-3  # the mask matters


@pytest.mark.parametrize("graph_name", ["full", "causal", "window", "graph-sparse"])
@pytest.mark.parametrize(
    "residual,kernel,symmetric",
    [(r, "softmax", False) for r in RESIDUALS]
    + [
        (r, k, s)
        for r, k, s in itertools.product(["standard", "belief"], KERNELS, [False, True])
        if not (k == "mean" and s)
    ],
)  # "mean" has no Q or K to tie
def test_every_variant_equals_its_equation(residual, kernel, symmetric, graph_name):
    module = make(residual, kernel, symmetric, gamma=3.0)
    graph, mask = graphs()[graph_name]
    x = inputs()
    torch.testing.assert_close(module(x, graph, SignalMemory()), attention_output(module, x, mask), rtol=0, atol=1e-10)


def test_attentionx_residual_is_v_minus_gamma_mh():
    for gamma in (1.0, 3.0):
        module = make("attentionx", gamma=gamma, probe=True)
        x = inputs()
        module(x, TokenGraph.causal(T))
        p = module.probes
        torch.testing.assert_close(p["residual"], p["v"] - gamma * p["mh"], rtol=0, atol=1e-12)
    standard = make("standard", probe=True)
    standard(x, TokenGraph.causal(T))
    torch.testing.assert_close(p["mh"], standard.probes["mh"], rtol=0, atol=1e-12)  # same weights, same MH


@pytest.mark.parametrize("residual", ["belief", "belief_star"])
def test_belief_residual_is_orthogonal_to_v_row_by_row(residual):
    module = make(residual, probe=True)
    module(inputs(), TokenGraph.causal(T))
    mh, v, delta, alpha = (module.probes[key] for key in ("mh", "v", "residual", "alpha"))
    assert alpha.shape == (B, T)
    torch.testing.assert_close((delta * v).sum(-1), torch.zeros(B, T, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(delta, mh - alpha.unsqueeze(-1) * v, rtol=0, atol=1e-12)
    assert (delta.norm(dim=-1) <= mh.norm(dim=-1) + 1e-12).all()
    assert alpha.abs().max() > 1e-3  # something was projected out


def test_belief_coefficient_is_per_token_not_per_sequence():
    """A per-sequence alpha (one number from all tokens) would move earlier tokens' outputs."""
    module = make("belief", probe=True)
    x = inputs()
    module(x, TokenGraph.causal(T))
    first = module.probes["alpha"].clone()
    x2 = x.clone()
    x2[:, -1] += 5.0
    module(x2, TokenGraph.causal(T))
    torch.testing.assert_close(module.probes["alpha"][:, :-1], first[:, :-1], rtol=0, atol=0)
    assert (module.probes["alpha"][:, -1] - first[:, -1]).abs().max() > 1e-6


def test_zero_value_row_gives_no_nan_and_belief_keeps_mh():
    module = make("belief_star", bias=False, probe=True)
    x = inputs().requires_grad_(True)
    x.data[:, 3] = 0.0  # without biases the token's V row is zero
    y = module(x, TokenGraph.causal(T))
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters())
    p = module.probes
    assert (p["v"][:, 3] == 0).all()
    torch.testing.assert_close(p["residual"][:, 3], p["mh"][:, 3], rtol=0, atol=0)  # nothing to project out


def test_probes_hold_detached_signals_of_the_last_forward():
    module = make("belief", probe=True)
    x = inputs()
    module(x, None)
    assert {"mh", "v", "residual", "alpha", "entropy"} <= set(module.probes)
    assert module.probes["mh"].shape == module.probes["residual"].shape == (B, T, C)
    assert not any(t.requires_grad for t in module.probes.values())
    entropy = module.probes["entropy"]
    assert entropy.shape == (NH,) and ((entropy > 0) & (entropy <= torch.log(torch.tensor(T)) + 1e-9)).all()
    plain = make()  # probes are off unless asked for
    plain(x)
    assert plain.probes == {}


def test_entropy_probe_is_the_same_on_sparse_and_dense_layouts():
    graph = TokenGraph.window(T, 1, layout="sparse")
    module = make(probe=True)
    module(inputs(), graph)
    sparse = module.probes["entropy"]
    module(inputs(), graph.dense())
    torch.testing.assert_close(sparse, module.probes["entropy"], rtol=0, atol=1e-12)
    degree = graph.mask().sum(1).double()  # a row's entropy is at most log(degree), reached by a uniform row
    assert (sparse <= torch.log(degree).mean() + 1e-9).all()


@pytest.mark.parametrize("graph_name", ["full", "causal", "window", "graph-sparse"])
def test_gat_layer_equals_a_per_node_loop(graph_name):
    module = make(cls=GraphAttention)
    graph, mask = graphs()[graph_name]
    x = inputs()[:1]
    torch.testing.assert_close(module(x, graph), gat_output(module, x, mask), rtol=0, atol=1e-10)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("residual", RESIDUALS)
def test_sparse_path_equals_dense_mask_path_with_gradients(residual, kernel):
    G = nx.random_regular_graph(4, T, seed=1)
    sparse = TokenGraph.from_networkx(G, layout="sparse")
    module = make(residual, kernel)
    x = inputs().requires_grad_(True)
    y_sparse = module(x, sparse, SignalMemory())
    (g_sparse,) = torch.autograd.grad((y_sparse**2).sum(), x)
    y_dense = module(x, sparse.dense(), SignalMemory())
    (g_dense,) = torch.autograd.grad((y_dense**2).sum(), x)
    torch.testing.assert_close(y_sparse, y_dense, rtol=0, atol=1e-10)
    torch.testing.assert_close(g_sparse, g_dense, rtol=0, atol=1e-10)


def test_symmetric_ties_k_to_q():
    sym = make(symmetric=True)
    assert sym.c_attn.weight.shape == (2 * C, C)
    full = make()
    with torch.no_grad():  # asymmetric module whose W^K is a copy of W^Q
        w, b = sym.c_attn.weight, sym.c_attn.bias
        full.c_attn.weight.copy_(torch.cat([w[:C], w[:C], w[C:]]))
        full.c_attn.bias.copy_(torch.cat([b[:C], b[:C], b[C:]]))
        full.c_proj.load_state_dict(sym.c_proj.state_dict())
    x = inputs()
    torch.testing.assert_close(sym(x, TokenGraph.causal(T)), full(x, TokenGraph.causal(T)), rtol=0, atol=1e-12)


def test_linear_kernel_causal_prefix_sums_equal_the_quadratic_form():
    module = make(kernel="linear")
    x = inputs()
    mh, _ = multi_head(module, x, torch.ones(T, T, dtype=torch.bool).tril())
    torch.testing.assert_close(
        module.attend(*module.project(x), TokenGraph.causal(T)).transpose(1, 2).reshape(B, T, C), mh, rtol=0, atol=1e-12
    )


def test_belief_projection_gradient_matches_finite_differences_and_stays_finite_near_zero_rows():
    from attention.mha import orthogonal_part

    a = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    v = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(orthogonal_part, (a, v))
    a32, v32 = torch.randn(2, 5, 8, requires_grad=True), torch.randn(2, 5, 8)
    v32[0, 1] = 1e-20
    v32.requires_grad_(True)
    (orthogonal_part(a32, v32) ** 2).sum().backward()
    assert torch.isfinite(a32.grad).all() and torch.isfinite(v32.grad).all()


@pytest.mark.parametrize("kernel", KERNELS)
def test_sparse_graphs_run_under_bfloat16_autocast(kernel):
    graph = TokenGraph.from_networkx(nx.random_regular_graph(4, 40, seed=0), layout="sparse")
    module = MultiHeadAttention(
        AttentionConfig(d_model=16, n_head=2, kernel=kernel, residual="belief_star"), layer_index=1
    )
    x = torch.randn(2, 40, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = module(x, graph)
    y.float().sum().backward()
    assert torch.isfinite(y.float()).all()
    torch.testing.assert_close(y.float(), module(x, graph), atol=0.1, rtol=0.1)  # bf16 keeps ~2-3 digits


@pytest.mark.parametrize("chunk", [1, 3, 4, 64])
def test_chunked_causal_linear_attention_equals_the_masked_quadratic_form(chunk):
    from attention.kernels import linear_attention

    q, k, v = (torch.randn(2, 3, 11, 4, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(
        linear_attention(q, k, v, TokenGraph.causal(11), chunk=chunk),
        linear_attention(q, k, v, TokenGraph.causal(11).dense()),
        rtol=0,
        atol=1e-12,
    )
