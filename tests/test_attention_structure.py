"""Causality, graph locality, differential attention's lambda, parameter counts and bad configs."""

import itertools
import math

import networkx as nx
import pytest
import torch

from attention import (
    KERNELS,
    RESIDUALS,
    AttentionConfig,
    GraphAttention,
    GraphTransformer,
    MultiHeadAttention,
    TokenGraph,
)
from attention.mha import SignalMemory

B, T, C, NH = 2, 12, 16, 4


def module_for(residual="standard", kernel="softmax", symmetric=False, layer_index=1, probe=False, bias=True):
    torch.manual_seed(0)
    cfg = AttentionConfig(
        d_model=C,
        n_head=NH,
        residual=residual,
        kernel=kernel,
        symmetric=symmetric,
        gamma=3.0,
        beta=0.7,
        probe=probe,
        bias=bias,
    )
    return MultiHeadAttention(cfg, layer_index=layer_index).double()


@pytest.mark.parametrize(
    "residual,kernel,symmetric",
    [(r, k, s) for r, k, s in itertools.product(RESIDUALS, KERNELS, [False, True]) if not (k == "mean" and s)],
)  # "mean" has no Q or K to tie
def test_future_tokens_never_change_earlier_outputs(residual, kernel, symmetric):
    module = module_for(residual, kernel, symmetric)
    x = torch.randn(B, T, C, dtype=torch.float64)
    for s in (1, T // 2, T - 1):
        changed = x.clone()
        changed[:, s:] = torch.randn(B, T - s, C, dtype=torch.float64) * 3
        y, y2 = module(x, TokenGraph.causal(T), SignalMemory()), module(changed, TokenGraph.causal(T), SignalMemory())
        torch.testing.assert_close(y2[:, :s], y[:, :s], rtol=0, atol=1e-12)
        assert (y2[:, s:] - y[:, s:]).abs().max() > 1e-6  # the change does reach later tokens


@pytest.mark.parametrize("layout", ["dense", "sparse"])
@pytest.mark.parametrize("kernel,layer", [(k, MultiHeadAttention) for k in KERNELS] + [("softmax", GraphAttention)])
@pytest.mark.parametrize("residual", ["standard", "belief_star"])
def test_changing_a_non_neighbour_never_changes_a_nodes_output(kernel, layer, residual, layout):
    torch.manual_seed(0)
    G = nx.random_regular_graph(3, T, seed=2)
    graph = TokenGraph.from_networkx(G, layout=layout)
    cfg = AttentionConfig(d_model=C, n_head=NH, kernel=kernel, residual=residual)
    module = layer(cfg, layer_index=1).double()
    x = torch.randn(B, T, C, dtype=torch.float64)
    y = module(x, graph)
    for j in range(T):
        changed = x.clone()
        changed[:, j] += 1.0
        moved = (module(changed, graph) - y).abs().amax((0, 2)) > 1e-12  # (T,) which outputs moved
        expected = torch.zeros(T, dtype=torch.bool)
        expected[[j, *G.neighbors(j)]] = True
        assert torch.equal(moved, expected), f"token {j}"


@pytest.mark.parametrize("layer", ["attention", "gat"])
def test_graph_transformer_layer_l_sees_exactly_l_hops(layer):
    torch.manual_seed(0)
    G = nx.path_graph(T)
    model = GraphTransformer(AttentionConfig(d_model=C, n_head=NH), n_layer=3, layer=layer).double()
    graph = TokenGraph.from_networkx(G)
    x = torch.randn(B, T, 1, dtype=torch.float64)
    out = model(x, graph)
    assert out.shape == (3, B, T, 1)
    changed = x.clone()
    changed[:, 0] += 1.0
    moved = (model(changed, graph) - out).abs().amax((1, 3)) > 1e-12  # (layers, T)
    for layer_index in range(3):  # after l layers node 0's change has reached nodes 0..l
        assert torch.equal(moved[layer_index], torch.arange(T) <= layer_index + 1), moved[layer_index]


def test_tied_graph_transformer_shares_one_block():
    cfg = AttentionConfig(d_model=C, n_head=NH)
    tied, untied = GraphTransformer(cfg, 4, tied=True), GraphTransformer(cfg, 4)
    block = sum(p.numel() for p in tied.blocks[0].parameters())
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == 3 * block


def test_diff_lambda_init_per_layer_matches_the_formula_and_the_notes_table():
    # The notes' table lists 0.36, 0.47, ... for its layers 1..6: the formula at l = 2..7. Their port fed
    # a 1-based layer number to the 0-based `depth` of the official code; our theory page (docs/theory/residuals.md
    # section 8) and the paper count l from 1, so the first layer starts at 0.2.
    notes = [0.36, 0.47, 0.56, 0.62, 0.67, 0.70]
    assert module_for(kernel="diff", layer_index=1).lambda_init == pytest.approx(0.2, abs=1e-15)
    for layer, value in enumerate(notes, start=2):
        module = module_for(kernel="diff", layer_index=layer)
        assert module.lambda_init == pytest.approx(0.8 - 0.6 * math.exp(-0.3 * (layer - 1)), abs=1e-15)
        assert module.lambda_init == pytest.approx(value, abs=0.006)


def test_diff_parameters_output_and_gradient_to_the_lambda_vectors():
    standard, diff = module_for(), module_for(kernel="diff", layer_index=3)
    hs = C // NH

    def count(m):
        return sum(p.numel() for p in m.parameters())

    assert count(diff) - count(standard) == 4 * (hs // 2) + hs  # four lambda vectors + the head norm's gain
    assert diff.lambda_q1.shape == (hs // 2,)
    x = torch.randn(B, T, C, dtype=torch.float64)
    y = diff(x, TokenGraph.causal(T))
    assert torch.isfinite(y).all()
    (y**2).sum().backward()
    for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
        grad = getattr(diff, name).grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().max() > 0, name


def test_parameter_counts_and_shared_state_dicts():
    def count(m):
        return sum(p.numel() for p in m.parameters())

    for bias in (True, False):
        standard = module_for(bias=bias)
        for residual in ("attentionx", "belief"):
            other = module_for(residual, bias=bias)
            assert count(other) == count(standard)
            other.load_state_dict(standard.state_dict())  # strict: identical names and shapes
        assert count(module_for("belief_star", bias=bias)) == count(standard) + C * C + (C if bias else 0)
        assert count(module_for("concat", bias=bias)) == count(standard) + C * C
        assert count(module_for(symmetric=True, bias=bias)) == count(standard) - C * C - (C if bias else 0)
    star = module_for("belief_star").state_dict()
    assert set(star) - set(module_for().state_dict()) == {"c_proj_s.weight", "c_proj_s.bias"}


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(d_model=10, n_head=4), "divisible"),
        (dict(residual="beleif"), "unknown residual"),
        (dict(kernel="cosine"), "unknown kernel"),
        (dict(gamma=-1.0), "gamma"),
        (dict(gamma=float("inf")), "gamma"),
        (dict(d_model=12, n_head=4, kernel="diff"), "even"),
        (dict(dropout=1.5), "dropout"),
        (dict(n_head=0), "n_head"),
        (dict(symmetric="yes"), "symmetric"),
    ],
)
def test_bad_configs_are_rejected_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AttentionConfig(**{"d_model": 16, "n_head": 4, **kwargs})


def test_bad_calls_are_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="layer_index"):
        MultiHeadAttention(AttentionConfig(16, 4, kernel="diff"))
    with pytest.raises(ValueError, match="layer_index"):
        MultiHeadAttention(AttentionConfig(16, 4), layer_index=0)
    module = module_for()
    x = torch.randn(B, T, C, dtype=torch.float64)
    with pytest.raises(ValueError, match=f"token graph has {T + 1} tokens but the sequence has {T}"):
        module(x, TokenGraph.causal(T + 1))
    with pytest.raises(ValueError, match="shape"):
        module(x[..., :-1])
    with pytest.raises(TypeError, match="TokenGraph"):
        module(x, nx.path_graph(T))
    with pytest.raises(ValueError, match="kernel='softmax'"):
        GraphAttention(AttentionConfig(16, 4, kernel="linear"))
    with pytest.raises(ValueError, match="unknown layer"):
        GraphTransformer(AttentionConfig(16, 4), 2, layer="gcn")


def test_accumulated_adds_beta_times_the_earlier_layers_updates():
    """S_1, S_2 + beta S_1, S_3 + beta (S_1 + S_2) with S_l the standard update of layer l."""
    x = torch.randn(B, T, C, dtype=torch.float64)
    layers = [module_for("accumulated") for _ in range(3)]
    for seed, layer in enumerate(layers):
        torch.manual_seed(seed)
        for p in layer.parameters():
            torch.nn.init.normal_(p, std=0.3)
    cfg = layers[0].config
    standard = [MultiHeadAttention(AttentionConfig(d_model=C, n_head=NH), layer_index=1).double() for _ in range(3)]
    for s, a in zip(standard, layers, strict=False):
        s.load_state_dict(a.state_dict())  # same names and shapes as standard
    memory, inputs = SignalMemory(), [x, x.flip(1), x * 2]
    got = [layer(h, TokenGraph.causal(T), memory) for layer, h in zip(layers, inputs, strict=False)]
    S = [s(h, TokenGraph.causal(T)) for s, h in zip(standard, inputs, strict=False)]
    for actual, expected in zip(got, [S[0], S[1] + cfg.beta * S[0], S[2] + cfg.beta * (S[0] + S[1])], strict=False):
        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)
    fresh = layers[0](x, TokenGraph.causal(T), SignalMemory())
    torch.testing.assert_close(fresh, S[0], rtol=0, atol=1e-12)  # a fresh memory: standard
