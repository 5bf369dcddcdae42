"""PDMM as a GraphTransformer: hand-set weights reproduce pdmm.solve iterate by iterate; the options it needs
(norm=None, bilinear MLP) on their own; fine-tuning from the PDMM weights."""

import copy

import networkx as nx
import numpy as np
import pytest
import torch

import bridge
import pdmm
from attention import AttentionConfig, BilinearMLP, Block, GraphTransformer, TokenGraph
from bridge.consensus import disagreement_error

LAYERS = 8


def shuffled_tree():
    """A random tree whose nodes are strings inserted in a shuffled order (G.nodes order is not sorted)."""
    T = nx.random_labeled_tree(14, seed=4)
    order = np.random.default_rng(0).permutation(14)
    G = nx.Graph()
    G.add_nodes_from(f"v{i}" for i in order)
    G.add_edges_from((f"v{i}", f"v{j}") for i, j in T.edges)
    return G


GRAPHS = {
    "ring": lambda: nx.cycle_graph(9),
    "random_geometric": lambda: pdmm.topology("random_geometric", n=20, seed=3),
    "tree": shuffled_tree,
}


def solve_iterates(G, a, rho, start, rounds):
    """(rounds, B, n) x^1..x^rounds of pdmm.solve (PDMM, theta 1, float64), one run per round."""
    problem = pdmm.averaging(G, a[..., None])  # (B, n, 1): batched
    x0 = a[..., None] if start == "a" else None
    return torch.stack(
        [
            torch.as_tensor(pdmm.solve(problem, rho=rho, max_iter=k, tol=0, x0=x0).x[..., 0])
            for k in range(1, rounds + 1)
        ]
    )


def transformer_iterates(model, G, a, rho):
    with torch.no_grad():
        return model(bridge.pdmm_features(G, a, rho), TokenGraph.from_networkx(G, self_loops=False))


@pytest.mark.parametrize("start", ["zero", "a"])
@pytest.mark.parametrize("rho", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("graph", GRAPHS)
def test_pdmm_transformer_equals_pdmm_solve_iterate_by_iterate(graph, rho, start):
    G = GRAPHS[graph]()
    a = np.random.default_rng(1).normal(size=(3, G.number_of_nodes())) + 2.0
    out = transformer_iterates(bridge.pdmm_transformer(rho, LAYERS, start), G, a, rho)
    assert out.shape == (LAYERS, 3, G.number_of_nodes(), 1) and out.dtype == torch.float64
    reference = solve_iterates(G, a, rho, start, LAYERS)
    torch.testing.assert_close(out[..., 0], reference, rtol=0, atol=1e-10)
    assert (reference[1:] - reference[:-1]).abs().max() > 1e-3  # the iterates move: not a trivial match


@pytest.mark.parametrize("start", ["zero", "a"])
@pytest.mark.parametrize("graph", GRAPHS)
def test_one_number_pdmm_transformer_equals_pdmm_and_sends_one_number(graph, start):
    G, rho = GRAPHS[graph](), 0.7
    a = np.random.default_rng(2).normal(size=(2, G.number_of_nodes()))
    model = bridge.pdmm_transformer(rho, LAYERS, start, kernel="mean")
    assert model.numbers_sent == 1 and bridge.pdmm_transformer(rho, LAYERS, start).numbers_sent == 14
    torch.testing.assert_close(
        transformer_iterates(model, G, a, rho)[..., 0], solve_iterates(G, a, rho, start, LAYERS), rtol=0, atol=1e-10
    )


@pytest.mark.parametrize("kernel", ["softmax", "mean"])
def test_tied_pdmm_transformer_is_pdmm_from_zero_past_its_depth(kernel):
    G, rho, rounds = GRAPHS["random_geometric"](), 1.3, 20
    a = np.random.default_rng(3).normal(size=(2, G.number_of_nodes()))
    model = bridge.pdmm_transformer(rho, 4, "zero", kernel=kernel, tied=True)
    assert len(model.blocks) == 1
    with torch.no_grad():
        out = model(bridge.pdmm_features(G, a, rho), TokenGraph.from_networkx(G, self_loops=False), rounds=rounds)
    torch.testing.assert_close(out[..., 0], solve_iterates(G, a, rho, "zero", rounds), rtol=0, atol=1e-10)


def test_pdmm_transformer_runs_on_the_device(device):
    G, rho = GRAPHS["random_geometric"](), 1.0
    a = torch.as_tensor(np.random.default_rng(2).normal(size=(2, 20)), device=device)
    out = transformer_iterates(bridge.pdmm_transformer(rho, 4, "a").to(device), G, a, rho)
    torch.testing.assert_close(out[..., 0].cpu(), solve_iterates(G, a.cpu().numpy(), rho, "a", 4), rtol=0, atol=1e-10)


@pytest.mark.parametrize("start", ["zero", "a"])
def test_a_wrong_sign_or_weight_breaks_equality(start):
    G, rho = GRAPHS["random_geometric"](), 1.0
    a = np.random.default_rng(1).normal(size=(2, 20))
    reference = solve_iterates(G, a, rho, start, LAYERS)

    def error(change):
        model = bridge.pdmm_transformer(rho, LAYERS, start)
        with torch.no_grad():
            change(model)
        return (transformer_iterates(model, G, a, rho)[..., 0] - reference).abs().max().item()

    def flip_memory(model):  # w^k = -v^{k-1} + 2 rho x^k instead of + v^{k-1}: channel w (5) from unit v^{k-1} (4)
        for block in model.blocks:
            block.mlp.c_proj.weight[5, 4] = -1

    assert error(lambda model: None) < 1e-12
    assert error(flip_memory) > 1e-2
    assert error(lambda model: model.blocks[2].attn.c_proj.weight[5, 0].add_(1e-6)) > 1e-8  # one weight, 1e-6 off
    other = bridge.pdmm_transformer(rho, LAYERS, "a" if start == "zero" else "zero")
    assert (transformer_iterates(other, G, a, rho)[..., 0] - reference).abs().max() > 1e-2


def test_pdmm_features_are_value_degree_and_inverse_penalty():
    G = shuffled_tree()
    a = np.arange(28.0).reshape(2, 14)
    f = bridge.pdmm_features(G, a, 0.5)
    degree = torch.tensor([float(G.degree(v)) for v in G.nodes], dtype=torch.float64)
    assert f.shape == (2, 14, 3) and f.dtype == torch.float64
    torch.testing.assert_close(f[..., 0], torch.as_tensor(a))
    torch.testing.assert_close(f[1, :, 1], degree)
    torch.testing.assert_close(f[0, :, 2], 1 / (1 + 0.5 * degree))


def linear_model(norm):
    """A GraphTransformer with no biases, equal attention scores (W^Q = W^K = 0) and a GELU MLP switched off:
    linear in its input when there is no normalisation."""
    torch.manual_seed(0)
    model = GraphTransformer(
        AttentionConfig(d_model=8, n_head=2, bias=False), n_layer=3, in_features=2, norm=norm
    ).double()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.c_attn.weight[:16].zero_()
            block.mlp.c_proj.weight.zero_()
    return model


def test_norm_none_leaves_the_model_linear():
    graph = TokenGraph.from_networkx(nx.cycle_graph(6))
    x = torch.randn(2, 6, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    model = linear_model(None)
    torch.testing.assert_close(model(3.7 * x, graph), 3.7 * model(x, graph), rtol=1e-12, atol=1e-14)
    normed = linear_model("layernorm")  # the default normalises: scaling the input does not scale the output
    assert (normed(3.7 * x, graph) - 3.7 * normed(x, graph)).abs().max() > 1e-2


def test_norm_none_block_is_the_unnormalised_residual_update():
    torch.manual_seed(0)
    block = Block(AttentionConfig(d_model=8, n_head=2), layer_index=1, norm=None).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    y = x + block.attn(x)
    torch.testing.assert_close(block(x), y + block.mlp(y), rtol=0, atol=1e-14)


def test_bilinear_mlp_is_w3_of_the_product_of_two_projections():
    torch.manual_seed(0)
    mlp = BilinearMLP(AttentionConfig(d_model=4, n_head=1), hidden=6).double()
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    (W1, b1), (W2, b2), (W3, b3) = ((m.weight, m.bias) for m in (mlp.c_fc, mlp.c_gate, mlp.c_proj))
    expected = (
        torch.einsum(
            "oh,tbh->tbo", W3, torch.einsum("hi,tbi->tbh", W1, x).add(b1) * torch.einsum("hi,tbi->tbh", W2, x).add(b2)
        )
        + b3
    )
    assert W1.shape == W2.shape == (6, 4) and W3.shape == (4, 6)
    torch.testing.assert_close(mlp(x), expected, rtol=0, atol=1e-14)
    model = GraphTransformer(AttentionConfig(d_model=4, n_head=1), 2, mlp="bilinear", hidden=6)
    assert all(isinstance(block.mlp, BilinearMLP) for block in model.blocks)
    assert GraphTransformer(AttentionConfig(d_model=4, n_head=1), 1).blocks[0].mlp.c_fc.out_features == 16


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(rho=0.0), "rho must be a finite number > 0"),
        (dict(rho=-1.0), "rho must be"),
        (dict(rho=float("inf")), "rho must be"),
        (dict(n_layer=0), "n_layer must be a positive integer"),
        (dict(n_layer=2.5), "n_layer"),
        (dict(start="x0"), "start must be 'zero'"),
        (dict(init="xavier"), "init must be"),
        (dict(kernel="linear"), "kernel must be 'softmax'"),
        (dict(tied=1), "tied must be true or false"),
        (dict(tied=True, start="a"), "use start='zero'"),
    ],
)
def test_pdmm_transformer_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bridge.pdmm_transformer(**{"rho": 1.0, "n_layer": 2, **kwargs})


def test_bad_options_and_features_are_rejected():
    config = AttentionConfig(d_model=8, n_head=2)
    with pytest.raises(ValueError, match="norm must be 'layernorm' or None"):
        GraphTransformer(config, 2, norm="rms")
    with pytest.raises(ValueError, match="unknown mlp 'relu'"):
        GraphTransformer(config, 2, mlp="relu")
    with pytest.raises(ValueError, match="hidden width must be a positive integer"):
        GraphTransformer(config, 2, hidden=0)
    with pytest.raises(ValueError, match=r"a must have shape \(B, 9\)"):
        bridge.pdmm_features(nx.cycle_graph(9), np.zeros((2, 8)), 1.0)
    with pytest.raises(ValueError, match="rho must be"):
        bridge.pdmm_features(nx.cycle_graph(9), np.zeros((2, 9)), 0)
    model, instances = bridge.pdmm_transformer(1.0, 2), [(nx.cycle_graph(5), np.ones((1, 5)))]

    def features(G, a):
        return bridge.pdmm_features(G, a, 1.0)

    for steps, lr, data, match in (
        (-1, 1e-3, instances, "steps must be"),
        (1, 0.0, instances, "lr must be > 0"),
        (1, 1e-3, [], "at least one"),
    ):
        with pytest.raises(ValueError, match=match):
            bridge.fit_graph_model(model, data, steps, lr, features)


def test_fine_tuning_from_pdmm_lowers_the_loss_and_moves_the_weights():
    rng = np.random.default_rng(0)
    instances = [
        (G, rng.normal(size=(4, G.number_of_nodes())))
        for G in (pdmm.topology("random_geometric", n=n, seed=n) for n in (12, 16))
    ]
    rho = 1.0
    model = bridge.pdmm_transformer(rho, 4, start="a")
    reference = copy.deepcopy(model)

    def features(G, a):
        return bridge.pdmm_features(G, a, rho)

    pdmm_errors = torch.cat(
        [disagreement_error(solve_iterates(G, a, rho, "a", 4), torch.as_tensor(a)) for G, a in instances], dim=1
    )
    torch.testing.assert_close(bridge.graph_errors(model, instances, features), pdmm_errors, rtol=1e-10, atol=0)
    losses = bridge.fit_graph_model(model, instances, steps=30, lr=1e-3, features_fn=features).losses
    assert len(losses) == 31 and losses[0] == pytest.approx(pdmm_errors.square().mean().item(), rel=1e-10)
    assert losses[-1] < losses[0]
    assert bridge.weight_shift(reference, reference) == 0 and bridge.weight_shift(model, reference) > 1e-4


def test_random_init_has_the_same_architecture_and_depends_on_the_seed():
    pdmm_model, random_model = bridge.pdmm_transformer(1.0, 3), bridge.pdmm_transformer(1.0, 3, init="random", seed=0)

    def shapes(model):
        return {name: p.shape for name, p in model.named_parameters()}

    assert shapes(pdmm_model) == shapes(random_model)
    assert bridge.weight_shift(bridge.pdmm_transformer(1.0, 3, init="random", seed=0), random_model) == 0
    assert bridge.weight_shift(bridge.pdmm_transformer(1.0, 3, init="random", seed=1), random_model) > 0.5
