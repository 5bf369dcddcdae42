"""AttentionConfig.send_width: a token sends each neighbour w numbers per layer, keys w // 2 and values the rest."""

import math
from pathlib import Path

import networkx as nx
import pytest
import torch

from attention import KERNELS, RESIDUALS, AttentionConfig, GraphTransformer, MultiHeadAttention, TokenGraph
from attention.mha import SignalMemory
from experiments.config import load_config
from experiments.errors import UsageError
from experiments.tasks import build_task

B, T, C = 2, 8, 16
CONFIG = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "graph_consensus.toml"
TINY = [
    "model.n_layer=2",
    "model.d_model=16",
    "model.n_head=2",
    "train.batch_size=4",
    "task.val_graphs=1",
    "task.n_min=8",
    "task.n_max=12",
    "task.radius=0",
]


def layer(send_width, n_head=1, residual="standard", kernel="softmax", symmetric=False, seed=0):
    """A float64 MultiHeadAttention with non-trivial biases and gains."""
    torch.manual_seed(seed)
    config = AttentionConfig(
        d_model=C, n_head=n_head, residual=residual, kernel=kernel, symmetric=symmetric, send_width=send_width
    )
    module = MultiHeadAttention(config, layer_index=2).double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


def inputs(seed=1):
    return torch.randn(B, T, C, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def problem_graph(layout="sparse"):
    """A 3-regular graph on T nodes with self loops, and its networkx graph."""
    G = nx.random_regular_graph(3, T, seed=4)
    return TokenGraph.from_networkx(G, layout=layout), G


def widths(w):
    """(w_k, w_v) = (w // 2, w - w // 2): the split the docstring states."""
    return w // 2, w - w // 2


def rows(module, w):
    """The projection rows (W^Q, W^K, W^V) and biases, sliced at the widths w_k, w_k, w_v (K = Q when symmetric)."""
    w_k, w_v = widths(w)
    weight, bias = module.c_attn.weight, module.c_attn.bias
    k_start = 0 if module.config.symmetric else w_k
    v_start = k_start + w_k
    assert weight.shape[0] == v_start + w_v

    def part(start, width):
        return (weight[start : start + width], bias[start : start + width])

    return part(0, w_k), part(k_start, w_k), part(v_start, w_v)


def sent_rows(module, w):
    """The (w_k + w_v) x d_model matrix of what node j sends: its key rows stacked on its value rows."""
    _, (wk, _), (wv, _) = rows(module, w)
    return torch.cat([wk, wv])


def null_space(matrix):
    """An orthonormal basis (d_model, d_model - rank) of {x : matrix x = 0}."""
    _, s, vh = torch.linalg.svd(matrix)
    rank = int((s > s.max() * 1e-12).sum())
    return vh[rank:].T


# --- the default is today's layer -------------------------------------------------------------------


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize(
    "kernel,symmetric", [("softmax", False), ("softmax", True), ("linear", False), ("diff", False)]
)
def test_default_keeps_todays_parameters_and_output(residual, kernel, symmetric):
    def build(**extra):
        torch.manual_seed(0)
        config = AttentionConfig(d_model=C, n_head=4, residual=residual, kernel=kernel, symmetric=symmetric, **extra)
        return GraphTransformer(config, 2, in_features=2)

    today, explicit = build(), build(send_width=None)
    shapes = {name: tuple(p.shape) for name, p in today.named_parameters()}
    assert shapes == {name: tuple(p.shape) for name, p in explicit.named_parameters()}
    hs = C // 4
    assert shapes["blocks.0.attn.c_attn.weight"] == ((2 if symmetric else 3) * C, C)
    assert shapes["blocks.0.attn.c_proj.weight"] == (C, 2 * C if residual == "concat" else C)
    if residual == "belief_star":
        assert shapes["blocks.0.attn.c_proj_s.weight"] == (C, C)
    if kernel == "diff":
        assert shapes["blocks.0.attn.lambda_q1"] == (hs // 2,) and shapes["blocks.0.attn.head_norm.weight"] == (hs,)
    for (_, a), (_, b) in zip(today.state_dict().items(), explicit.state_dict().items(), strict=False):
        assert torch.equal(a, b)  # same initialisation from the same seed
    graph, _ = problem_graph()
    x = torch.randn(B, T, 2, generator=torch.Generator().manual_seed(3))
    assert torch.equal(today(x, graph), explicit(x, graph))
    assert today.numbers_sent == explicit.numbers_sent == 2 * C


# --- only w numbers cross an edge -------------------------------------------------------------------


def neighbours():
    """(graph, i, j): node i and a neighbour j != i."""
    graph, G = problem_graph()
    i = 0
    j = next(v for v in G.neighbors(i) if v != i)
    return graph, i, j


@pytest.mark.parametrize("layout", ["sparse", "dense"])
@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize(
    "kernel,symmetric,w,n_head",
    [("softmax", False, 6, 1), ("softmax", True, 7, 1), ("linear", False, 8, 2), ("diff", False, 9, 1)],
)
def test_only_w_numbers_cross_an_edge(residual, kernel, symmetric, w, n_head, layout):
    module = layer(w, n_head, residual, kernel, symmetric)
    _, i, j = neighbours()
    graph = problem_graph(layout)[0]
    basis = null_space(sent_rows(module, w))
    assert basis.shape[1] == C - w  # w generic rows have rank w
    x = inputs()
    coefficients = torch.randn(basis.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    hidden = x.clone()
    hidden[:, j] += 3 * basis @ coefficients  # invisible to j's key and value
    generic = x.clone()
    generic[:, j] += 3 * torch.randn(C, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        y, y_hidden, y_generic = (module(t, graph, SignalMemory()) for t in (x, hidden, generic))
    assert (y_hidden[:, i] - y[:, i]).abs().max() <= 1e-12
    assert (y_generic[:, i] - y[:, i]).abs().max() > 1e-6  # the check can fail
    if not symmetric:  # j's own query saw the change (with K = Q it is hidden from j's query too)
        assert (y_hidden[:, j] - y[:, j]).abs().max() > 1e-6


# --- every residual and kernel runs, and equals a per-node reference ---------------------------------


def reject(a, v):
    """a - (<a, v> / <v, v>) v."""
    return a - (a @ v) / (v @ v) * v


def head_output(q_i, keys, values, kernel, module):
    """One head at one node: sum_j w_ij v_j over its neighbours' keys (rows of `keys`) and values."""
    if kernel == "softmax":
        weights = torch.softmax(keys @ q_i / math.sqrt(len(q_i)), 0)
        return weights @ values
    if kernel == "linear":

        def phi(t):
            return torch.nn.functional.elu(t) + 1

        weights = phi(keys) @ phi(q_i)
        return weights @ values / weights.sum()
    half = len(q_i) // 2  # diff: two softmax maps on the halves of q and k
    first = torch.softmax(keys[:, :half] @ q_i[:half] / math.sqrt(half), 0)
    second = torch.softmax(keys[:, half:] @ q_i[half:] / math.sqrt(half), 0)
    lam = (
        torch.exp(module.lambda_q1 @ module.lambda_k1)
        - torch.exp(module.lambda_q2 @ module.lambda_k2)
        + module.lambda_init
    )
    o = (first - lam * second) @ values
    o = o / torch.sqrt(o.square().mean() + 1e-5) * module.head_norm.weight
    return o * (1 - module.lambda_init)


def reference(module, x, G, w):
    """R W^o + b node by node: explicit w_k-wide Q, K and w_v-wide V from sliced rows of c_attn."""
    config = module.config
    (wq, bq), (wk, bk), (wv, bv) = rows(module, w)
    q, k, v = x @ wq.T + bq, x @ wk.T + bk, x @ wv.T + bv
    hk, hv = widths(w)[0] // config.n_head, widths(w)[1] // config.n_head
    out = torch.empty_like(x)
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            near = sorted({i, *G.neighbors(i)})
            heads = [
                head_output(
                    q[b, i, m * hk : (m + 1) * hk],
                    k[b, near, m * hk : (m + 1) * hk],
                    v[b, near, m * hv : (m + 1) * hv],
                    config.kernel,
                    module,
                )
                for m in range(config.n_head)
            ]
            mh, v_i = torch.cat(heads), v[b, i]
            r = {
                "standard": mh,
                "accumulated": mh,
                "attentionx": v_i - config.gamma * mh,
                "belief": reject(mh, v_i),
                "belief_star": reject(mh, v_i),
                "concat": torch.cat([mh, v_i]),
            }[config.residual]
            y = module.c_proj.weight @ r + module.c_proj.bias
            if config.residual == "belief_star":
                per_head = torch.cat([reject(h, v_i[m * hv : (m + 1) * hv]) for m, h in enumerate(heads)])
                y = y + module.c_proj_s.weight @ per_head + module.c_proj_s.bias
            out[b, i] = y
    return out


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize(
    "kernel,symmetric,w,n_head",
    [
        ("softmax", False, 6, 1),
        ("softmax", True, 7, 1),
        ("softmax", False, 8, 2),
        ("linear", False, 9, 1),
        ("linear", True, 12, 2),
        ("diff", False, 9, 1),
        ("diff", True, 8, 2),
    ],
)
@pytest.mark.parametrize("layout", ["sparse", "dense"])
def test_every_residual_and_kernel_equals_a_per_node_reference(residual, kernel, symmetric, w, n_head, layout):
    module = layer(w, n_head, residual, kernel, symmetric)
    graph, G = problem_graph(layout)
    x = inputs().requires_grad_()
    y = module(x, graph, SignalMemory())
    assert y.shape == x.shape and torch.isfinite(y).all()
    with torch.no_grad():
        torch.testing.assert_close(y, reference(module, x, G, w), rtol=0, atol=1e-10)
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().max() > 0
    for name, p in module.named_parameters():  # (softmax rows ignore K's bias: q . b_k is the same for every j)
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert name == "c_attn.bias" or p.grad.abs().max() > 0, name


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("symmetric", [False, True])
def test_parameter_shapes_and_numbers_sent(residual, symmetric):
    w = 10
    w_k, w_v = widths(w)
    module = layer(w, 1, residual, symmetric=symmetric)
    assert module.c_attn.weight.shape == ((1 if symmetric else 2) * w_k + w_v, C)
    assert module.c_proj.weight.shape == (C, 2 * w_v if residual == "concat" else w_v)
    if residual == "belief_star":
        assert module.c_proj_s.weight.shape == (C, w_v)
    assert module.numbers_sent == w  # with K = Q the key is still sent


def test_diff_parameters_follow_the_key_and_value_head_sizes():
    module = layer(9, kernel="diff")  # w_k = 4, w_v = 5 in one head
    assert module.lambda_q1.shape == (2,) and module.head_norm.weight.shape == (5,)


def test_graph_transformer_numbers_sent():
    def config(**kw):
        return AttentionConfig(d_model=C, n_head=2, **kw)

    assert GraphTransformer(config(), 2).numbers_sent == 2 * C
    assert GraphTransformer(config(send_width=4), 2).numbers_sent == 4
    assert GraphTransformer(config(send_width=4, symmetric=True), 2, tied=True).numbers_sent == 4
    assert GraphTransformer(config(), 2, layer="gat").numbers_sent == C


def test_causal_and_full_graphs_run_with_send_width():
    for kernel in KERNELS:
        module = layer(8, 2, kernel=kernel)
        for graph in (None, TokenGraph.causal(T)):
            y = module(inputs(), graph)
            assert y.shape == (B, T, C) and torch.isfinite(y).all()


# --- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(send_width=1), "integer >= 2"),
        (dict(send_width=0), "integer >= 2"),
        (dict(send_width=-4), "integer >= 2"),
        (dict(send_width=True), "integer >= 2"),
        (dict(send_width=6.0), "integer >= 2"),
        (dict(send_width=6, n_head=2), "n_head = 1"),  # w_k = w_v = 3
        (dict(send_width=7, n_head=2), "n_head = 1"),  # w_k = 3, w_v = 4
        (dict(send_width=6, kernel="diff"), "even"),  # w_k = 3 in one head
        (dict(send_width=12, n_head=2, kernel="diff"), "even"),  # 3 per head
        (dict(send_width=2, residual="belief"), "orthogonal to V"),  # a 1-number MH minus its projection on V is 0
        (dict(send_width=2, residual="belief_star"), "orthogonal to V"),
    ],
)
def test_bad_send_widths_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        AttentionConfig(**{"d_model": C, "n_head": 1, **kwargs})
    assert "\n" not in str(err.value)


def test_graph_attention_refuses_send_width():
    with pytest.raises(ValueError, match="send_width") as err:
        GraphTransformer(AttentionConfig(d_model=C, n_head=2, send_width=4), 2, layer="gat")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "override,message",
    [
        ("model.send_width=1", "model.send_width must be 0"),
        ("model.send_width=-2", "model.send_width must be >= 0"),
        ("model.send_width=2.5", "model.send_width must be an integer"),
        ("model.send_width=wide", "model.send_width must be an integer"),
    ],
)
def test_config_loader_refuses_bad_send_widths(override, message):
    with pytest.raises(UsageError, match=message) as err:
        load_config(CONFIG, [*TINY, override])
    assert "\n" not in str(err.value)


def test_config_send_width_that_n_head_does_not_divide_is_a_usage_error():
    with pytest.raises(UsageError, match=r"\[model\]: send_width = 6 .*n_head = 1 always") as err:
        load_config(CONFIG, [*TINY, "model.send_width=6"])  # 3 and 3 over 2 heads: refused when the config loads
    assert "\n" not in str(err.value)


# --- the experiments config and a few training steps ------------------------------------------------


def test_builtin_config_keeps_the_default_and_the_key_reaches_the_model():
    assert load_config(CONFIG).model.attention.send_width is None  # send_width = 0 in the file
    assert build_task(load_config(CONFIG, TINY)).build_model().numbers_sent == 2 * 16
    model = build_task(load_config(CONFIG, [*TINY, "model.send_width=4"])).build_model()
    assert model.numbers_sent == 4 and model.blocks[0].attn.config.send_width == 4


def test_graph_consensus_trains_a_few_steps_with_send_width():
    task = build_task(load_config(CONFIG, [*TINY, "model.send_width=4", "model.residual=belief"]))
    torch.manual_seed(0)
    model = task.build_model()
    before = model.blocks[0].attn.c_attn.weight.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        loss, readouts = task.loss(model, task.train_batch(generator))
        assert torch.isfinite(loss) and readouts.shape[0] == 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert not torch.equal(before, model.blocks[0].attn.c_attn.weight)
    metrics = task.evaluate(model, torch.Generator().manual_seed(1), "cpu")
    assert set(metrics) == {"val_loss", "val_error"} and all(math.isfinite(v) for v in metrics.values())


# --- kernel "mean": no keys, every neighbour weighs the same -----------------------------------------


@pytest.mark.parametrize("layout", ["sparse", "dense"])
@pytest.mark.parametrize(
    "residual,w,n_head",
    [
        ("standard", 1, 1),
        ("attentionx", 3, 1),
        ("concat", 4, 2),
        ("belief", 2, 1),
        ("belief_star", 6, 2),
        ("standard", None, 2),
    ],
)
def test_mean_kernel_is_the_neighbour_mean_of_the_values(residual, w, n_head, layout):
    module = layer(w, n_head, residual, kernel="mean")
    w_v = C if w is None else w
    assert module.c_attn.weight.shape == (w_v, C) and module.numbers_sent == w_v  # values only
    graph, G = problem_graph(layout)
    x = inputs()
    v = x @ module.c_attn.weight.T + module.c_attn.bias
    hv, config = w_v // n_head, module.config
    expected = torch.empty_like(x)
    for b in range(B):
        for i in range(T):
            near = sorted({i, *G.neighbors(i)})
            heads = [v[b, near, m * hv : (m + 1) * hv].mean(0) for m in range(n_head)]
            mh, v_i = torch.cat(heads), v[b, i]
            r = {
                "standard": mh,
                "attentionx": v_i - config.gamma * mh,
                "belief": reject(mh, v_i),
                "belief_star": reject(mh, v_i),
                "concat": torch.cat([mh, v_i]),
            }[residual]
            y = module.c_proj.weight @ r + module.c_proj.bias
            if residual == "belief_star":
                per_head = torch.cat([reject(h, v_i[m * hv : (m + 1) * hv]) for m, h in enumerate(heads)])
                y = y + module.c_proj_s.weight @ per_head + module.c_proj_s.bias
            expected[b, i] = y
    with torch.no_grad():
        torch.testing.assert_close(module(x, graph), expected, rtol=0, atol=1e-12)


def test_mean_kernel_sends_only_its_values():
    module = layer(2, kernel="mean")
    _, i, j = neighbours()
    graph = problem_graph()[0]
    basis = null_space(module.c_attn.weight)
    assert basis.shape[1] == C - 2
    x = inputs()
    hidden = x.clone()
    hidden[:, j] += 3 * basis @ torch.randn(C - 2, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    generic = x.clone()
    generic[:, j] += 3 * torch.randn(C, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        y, y_hidden, y_generic = (module(t, graph) for t in (x, hidden, generic))
    assert (y_hidden[:, i] - y[:, i]).abs().max() <= 1e-12
    assert (y_generic[:, i] - y[:, i]).abs().max() > 1e-6


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(kernel="mean", send_width=0), "integer >= 1 for kernel 'mean'"),
        (dict(kernel="mean", send_width=1, symmetric=True), "kernel 'mean' has neither"),
        (dict(kernel="mean", send_width=1, residual="belief"), "orthogonal to V"),
    ],
)
def test_bad_mean_kernel_configs_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        AttentionConfig(**{"d_model": C, "n_head": 1, **kwargs})
    assert "\n" not in str(err.value)


def test_config_loader_allows_one_number_with_the_mean_kernel_only():
    model = build_task(
        load_config(CONFIG, [*TINY, "model.kernel=mean", "model.send_width=1", "model.n_head=1"])
    ).build_model()
    assert model.numbers_sent == 1
    with pytest.raises(UsageError, match='kernel = "mean"'):
        load_config(CONFIG, [*TINY, "model.send_width=1"])
