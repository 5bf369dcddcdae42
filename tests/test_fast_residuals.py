"""The hand-written passes of belief, belief* and differential attention (attention.mha.OrthogonalPart and
OrthogonalParts, attention.kernels.DifferentialHeads, docs/theory/residuals.md sections 4, 5, 8) against the
implementation they replaced, kept below as a plain reference with autograd's derivatives, and under
torch.func.vmap and torch.func.grad (as a batch of models through functional_call uses them).
"""

import warnings

import networkx as nx
import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, stack_module_state, vmap

from attention import AttentionConfig, MultiHeadAttention, TokenGraph
from attention.kernels import DifferentialHeads
from attention.mha import orthogonal_part, orthogonal_parts

B, T, C, NH = 2, 12, 32, 4
TOLERANCE = {torch.float32: (1e-6, 1e-5), torch.float64: (1e-12, 1e-11)}  # (outputs, gradients)

# The implementation before the hand-written passes, written plainly.


def reference_orthogonal_part(a, v):
    """a - alpha v row by row, alpha = <a, v> / <v, v>, and alpha = 0 where <v, v> <= eps^2."""
    vv = torch.linalg.vecdot(v, v)
    vv = vv.masked_fill(vv <= torch.finfo(vv.dtype).eps ** 2, float("inf"))
    return a - (torch.linalg.vecdot(a, v) / vv).unsqueeze(-1) * v


def reference_orthogonal_parts(a, v, n_head):
    """[Delta, Concat(Delta^s_m)] as (..., 2, w): the rows' and the heads' orthogonal parts."""
    per_head = reference_orthogonal_part(a.unflatten(-1, (n_head, -1)), v.unflatten(-1, (n_head, -1)))
    return torch.stack([reference_orthogonal_part(a, v), per_head.flatten(-2)], dim=-2)


def reference_heads(o1, o2, lam, gain, eps, scale):
    """RMSNorm(o1 - lam o2) * scale, as torch's RMSNorm computes it."""
    return F.rms_norm(o1 - lam * o2, (o1.shape[-1],), gain, eps) * scale


def reference_layer(layer, x, mask):
    """The layer's update as computed before: SDPA on each head (for "diff" two calls, Q and K halves zero-padded to
    V's head size, then RMSNorm and 1 - lambda_init), OrthogonalPart's formula on MH and V for belief and belief*,
    belief*'s per-head parts through c_proj_s as a second product. mask: (T, T) bool or None (full)."""
    cfg = layer.config
    n, tokens, _ = x.shape
    parts = layer.c_attn(x).split(layer.projection_sizes(), dim=2)
    q, k, v = (parts[0], parts[0], parts[1]) if cfg.symmetric else parts
    q, k, v = (t.view(n, tokens, cfg.n_head, -1).transpose(1, 2) for t in (q, k, v))
    if cfg.kernel == "diff":
        half = q.shape[-1] // 2
        q1, q2, k1, k2 = (F.pad(t, (0, v.shape[-1] - half)) for t in (*q.chunk(2, -1), *k.chunk(2, -1)))
        lam = (
            torch.exp(layer.lambda_q1 @ layer.lambda_k1) - torch.exp(layer.lambda_q2 @ layer.lambda_k2)
        ) + layer.lambda_init
        heads = F.scaled_dot_product_attention(q1, k1, v, attn_mask=mask, scale=half**-0.5)
        heads = heads - lam * F.scaled_dot_product_attention(q2, k2, v, attn_mask=mask, scale=half**-0.5)
        heads = layer.head_norm(heads) * (1 - layer.lambda_init)
    else:
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    mh, v = (t.transpose(1, 2).flatten(2) for t in (heads, v))
    y = layer.c_proj(mh if cfg.residual == "standard" else reference_orthogonal_part(mh, v))
    if cfg.residual == "belief_star":
        y = y + layer.c_proj_s(reference_orthogonal_parts(mh, v, cfg.n_head)[..., 1, :])
    return y


# What is compared.

CASES = {  # name: AttentionConfig's switches
    "belief": dict(residual="belief"),
    "belief_star": dict(residual="belief_star"),
    "belief_star-no-bias": dict(residual="belief_star", bias=False),
    "diff": dict(kernel="diff"),
    "diff-symmetric": dict(kernel="diff", symmetric=True),
    "diff-belief_star": dict(kernel="diff", residual="belief_star"),
    "diff-narrow-keys": dict(kernel="diff", n_head=1, send_width=33),  # keys 16 wide, values 17: q is padded too
}


def graphs():
    """name: (TokenGraph, the (T, T) mask the reference uses)."""
    G = nx.random_regular_graph(3, T, seed=4)
    return {
        "causal": (TokenGraph.causal(T), torch.ones(T, T, dtype=torch.bool).tril()),
        "full": (TokenGraph.full(T), None),
        "graph-sparse": (TokenGraph.from_networkx(G, layout="sparse"), TokenGraph.from_networkx(G).mask()),
    }


def make(dtype, seed=0, **switches):
    torch.manual_seed(seed)
    config = AttentionConfig(**{"d_model": C, "n_head": NH, "dropout": 0.0, **switches})
    layer = MultiHeadAttention(config, layer_index=2).to(dtype)
    with torch.no_grad():  # non-trivial biases, lambda vectors and norm gains
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return layer


def outputs_and_gradients(fn, inputs, g):
    """fn(*inputs), and the gradients of <fn(*inputs), g> with respect to every input."""
    y = fn(*inputs)
    return y.detach(), torch.autograd.grad(y, inputs, g)


def assert_same(actual, expected, tolerance):
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("graph_name", ["causal", "full", "graph-sparse"])
@pytest.mark.parametrize("case", list(CASES))
def test_layer_matches_the_previous_implementation(case, graph_name, dtype):
    layer = make(dtype, **CASES[case])
    graph, mask = graphs()[graph_name]
    x = torch.randn(B, T, C, dtype=dtype, requires_grad=True)
    g = torch.randn(B, T, C, dtype=dtype)
    inputs = (x, *layer.parameters())
    new = outputs_and_gradients(lambda x, *_: layer(x, graph), inputs, g)
    old = outputs_and_gradients(lambda x, *_: reference_layer(layer, x, mask), inputs, g)
    out_tolerance, grad_tolerance = TOLERANCE[dtype]
    assert_same([new[0]], [old[0]], out_tolerance)
    assert_same(new[1], old[1], grad_tolerance)  # x, then every parameter


def rows(dtype, zeros=True):
    """a and v (3, 5, C), a and v parallel in one row; with zeros, v zero in one row and in one head of another."""
    generator = torch.Generator().manual_seed(2)
    a, v = (torch.randn(3, 5, C, dtype=dtype, generator=generator) for _ in range(2))
    a[2, 3] = 3 * v[2, 3]
    if zeros:
        v[0, 1] = 0
        v[1, 2, : C // NH] = 0
    return a, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("per_head", [False, True])
def test_orthogonal_parts_match_the_plain_formula_with_zero_rows(per_head, dtype):
    a, v = (t.requires_grad_() for t in rows(dtype))
    fn, reference = (
        (lambda a, v: orthogonal_parts(a, v, NH), lambda a, v: reference_orthogonal_parts(a, v, NH))
        if per_head
        else (orthogonal_part, reference_orthogonal_part)
    )
    g = torch.randn(fn(a, v).shape, dtype=dtype)
    new, old = outputs_and_gradients(fn, (a, v), g), outputs_and_gradients(reference, (a, v), g)
    out_tolerance, grad_tolerance = TOLERANCE[dtype]
    assert_same([new[0]], [old[0]], out_tolerance)
    assert_same(new[1], old[1], grad_tolerance)
    assert all(t.isfinite().all() for t in (new[0], *new[1]))
    torch.testing.assert_close(new[0][0, 1, ..., :], a[0, 1].detach().expand_as(new[0][0, 1, ..., :]))  # v = 0: a


def test_differential_heads_match_rms_norm():
    for dtype in (torch.float32, torch.float64):
        generator = torch.Generator().manual_seed(3)
        o1, o2 = (torch.randn(B, NH, T, 8, dtype=dtype, generator=generator).transpose(1, 2) for _ in range(2))
        inputs = tuple(
            t.requires_grad_()
            for t in (o1, o2, torch.tensor(0.3, dtype=dtype), 1 + torch.randn(8, dtype=dtype, generator=generator))
        )
        g = torch.randn(o1.shape, dtype=dtype, generator=generator)
        new = outputs_and_gradients(lambda *t: DifferentialHeads.apply(*t, 1e-5, 0.8), inputs, g)
        old = outputs_and_gradients(lambda *t: reference_heads(*t, 1e-5, 0.8), inputs, g)
        out_tolerance, grad_tolerance = TOLERANCE[dtype]
        assert_same([new[0]], [old[0]], out_tolerance)
        assert_same(new[1], old[1], grad_tolerance)


FUNCTIONS = {  # name: (function, reference, inputs), float64; no zero rows, where the derivatives jump
    "orthogonal_part": (orthogonal_part, reference_orthogonal_part, rows(torch.float64, zeros=False)),
    "orthogonal_parts": (
        lambda a, v: orthogonal_parts(a, v, NH),
        lambda a, v: reference_orthogonal_parts(a, v, NH),
        rows(torch.float64, zeros=False),
    ),
    "differential_heads": (
        lambda o1, o2, lam, gain: DifferentialHeads.apply(o1, o2, lam, gain, 1e-5, 0.8),
        lambda o1, o2, lam, gain: reference_heads(o1, o2, lam, gain, 1e-5, 0.8),
        (*rows(torch.float64, zeros=False), torch.tensor(0.4, dtype=torch.float64), 1 + rows(torch.float64)[0][0, 0]),
    ),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_vmap_over_a_stack_equals_the_loop(name):
    """vmap over a stack of S inputs (as over seeds), outputs and torch.func.grad's gradients, equals S calls, and
    every operation has a batching rule."""
    fn, _, sample = FUNCTIONS[name]
    S = 3
    stacked = [torch.stack([t * (1 + 0.5 * s) + 0.1 * s for s in range(S)]) for t in sample]
    g = torch.randn((S, *fn(*sample).shape), dtype=torch.float64)

    def loss(*inputs_and_g):
        *inputs, gs = inputs_and_g
        return (fn(*inputs) * gs).sum()

    argnums = tuple(range(len(sample)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batched = vmap(fn)(*stacked), vmap(grad(loss, argnums=argnums))(*stacked, g)
    assert not [w for w in caught if "performance drop" in str(w.message)]  # no operation left to a loop over S
    for s in range(S):
        inputs = [t[s].clone().requires_grad_() for t in stacked]
        y, grads = outputs_and_gradients(fn, inputs, g[s])
        torch.testing.assert_close(batched[0][s], y, rtol=1e-12, atol=1e-12)
        for got, want in zip(batched[1], grads, strict=True):
            torch.testing.assert_close(got[s], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_second_derivatives_match_the_plain_formula(name):
    """The backward passes are differentiable: autograd's double backward and torch.func's grad of grad agree with
    the plain formula's (a hand backward that used values saved from the forward as constants would not)."""
    fn, reference, sample = FUNCTIONS[name]
    inputs = [t.clone().requires_grad_() for t in sample]
    assert torch.autograd.gradgradcheck(fn, inputs)
    g = torch.randn(fn(*sample).shape, dtype=torch.float64)

    def gradient_norm(f):
        return lambda *t: sum((d**2).sum() for d in grad(lambda *u: (f(*u) * g).sum(), argnums=(0, 1))(*t))

    for got, want in zip(
        grad(gradient_norm(fn), argnums=(0, 1))(*sample),
        grad(gradient_norm(reference), argnums=(0, 1))(*sample),
        strict=True,
    ):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.filterwarnings("ignore:There is a performance drop because we have not yet implemented the batching")
@pytest.mark.parametrize("case", ["belief", "belief_star", "diff"])
def test_seeds_as_one_batched_model(case):
    """Layers of several seeds stacked by torch.func.stack_module_state and called through functional_call under
    vmap: the same updates and parameter gradients as each layer on its own."""
    layers = [make(torch.float64, seed=s, **CASES[case]) for s in range(3)]
    params, buffers = stack_module_state(layers)
    graph = TokenGraph.causal(T)
    x = torch.randn(len(layers), B, T, C, dtype=torch.float64)

    def update(p, b, xs):
        return functional_call(layers[0], (p, b), (xs, graph))

    def loss(p, b, xs):
        return update(p, b, xs).pow(2).sum()

    ys, grads = vmap(update)(params, buffers, x), vmap(grad(loss))(params, buffers, x)
    for s, layer in enumerate(layers):
        torch.testing.assert_close(ys[s], layer(x[s], graph), rtol=1e-12, atol=1e-12)
        layer(x[s], graph).pow(2).sum().backward()
        for name, p in layer.named_parameters():
            torch.testing.assert_close(grads[name][s], p.grad, rtol=1e-11, atol=1e-11)
