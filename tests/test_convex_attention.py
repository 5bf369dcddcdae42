"""Convex attention (docs/theory/convex.md section 7): Adam in torch and cvxpy's exact solve reach the same
objective."""

import pytest
import torch

import attention

SIZES = [  # (n_outputs, n_gates, loss): scalar, vector and gated models under both losses
    (1, 0, "squared"),
    (3, 0, "cross_entropy"),
    (2, 3, "squared"),
    (3, 2, "cross_entropy"),
]


def data(n_outputs, loss, n=24, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, 4, generator=generator, dtype=torch.float64)
    if loss == "squared":
        return x, torch.randn(n, n_outputs, generator=generator, dtype=torch.float64)
    return x, torch.randint(0, n_outputs, (n,), generator=generator)


def adam_objective(model, x, y, beta, loss, steps=1500):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    for _ in range(steps):
        optimizer.zero_grad()
        model.objective(x, y, beta, loss).backward()
        optimizer.step()
        schedule.step()
    with torch.no_grad():
        return model.objective(x, y, beta, loss).item()


@pytest.mark.parametrize("n_outputs,n_gates,loss", SIZES)
def test_adam_reaches_the_cvxpy_optimum(n_outputs, n_gates, loss):
    x, y = data(n_outputs, loss)
    exact_model = attention.ConvexAttention(3, 4, n_outputs, n_gates, seed=1).double()
    exact = exact_model.solve_exact(x, y, beta=0.05, loss=loss)
    with torch.no_grad():  # cvxpy's minimiser, scored by the torch objective, gives cvxpy's optimum
        assert exact_model.objective(x, y, 0.05, loss).item() == pytest.approx(exact, rel=1e-6)
        start = attention.ConvexAttention(3, 4, n_outputs, n_gates, seed=1).double().objective(x, y, 0.05, loss).item()
    assert start > 1.2 * exact  # Z = 0 is far from optimal, so agreement below means something
    trained = adam_objective(attention.ConvexAttention(3, 4, n_outputs, n_gates, seed=1).double(), x, y, 0.05, loss)
    assert trained == pytest.approx(exact, rel=1e-4)


def test_group_lasso_zeroes_whole_token_groups():
    """A large beta makes the optimum sparse by groups: some rows z_k are exactly zero in cvxpy's solution."""
    x, y = data(1, "squared")
    y = x[:, 0].sum(-1, keepdim=True)  # only token 0 matters
    model = attention.ConvexAttention(3, 4, seed=0).double()
    model.solve_exact(x, y, beta=0.1)
    norms = model.Z.detach().norm(dim=-1)[0, 0]  # one norm per token
    assert norms[0] > 0.5 and norms[1:].max() < 1e-6


def test_forward_matches_a_loop_over_gates_and_outputs():
    generator = torch.Generator().manual_seed(3)
    model = attention.ConvexAttention(3, 5, n_outputs=2, n_gates=4, seed=7).double()
    with torch.no_grad():
        model.Z.copy_(torch.randn(model.Z.shape, generator=generator, dtype=torch.float64))
    x = torch.randn(6, 3, 5, generator=generator, dtype=torch.float64)
    expected = torch.zeros(6, 2, dtype=torch.float64)
    for i in range(6):
        for j in range(4):
            if model.u1[j].double() @ x[i] @ model.u2[j].double() >= 0:  # I_j(X_i)
                for c in range(2):
                    expected[i, c] += torch.trace(model.Z[j, c].T @ x[i])
    torch.testing.assert_close(model(x), expected.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_outputs,n_gates,count", [(1, 0, 3 * 4), (5, 0, 3 * 4 * 5), (5, 6, 3 * 4 * 5 * 6)])
def test_parameter_counts(n_outputs, n_gates, count):
    """n d (scalar), n d c (vector), n d c h (gated), as in docs/theory/convex.md section 6."""
    model = attention.ConvexAttention(3, 4, n_outputs, n_gates)
    assert sum(p.numel() for p in model.parameters()) == count


def test_gates_are_fixed_by_the_seed():
    first, second, other = (attention.ConvexAttention(3, 4, 2, 5, seed=s) for s in (0, 0, 1))
    assert torch.equal(first.u1, second.u1) and torch.equal(first.u2, second.u2)
    assert not torch.equal(first.u1, other.u1)
    assert not first.u1.requires_grad and "u1" not in dict(first.named_parameters())


def test_token_classifier_trains_only_z():
    model = attention.ConvexTokenClassifier(vocab_size=10, n_tokens=4, d=8, n_outputs=7, n_gates=3, seed=0)
    assert [name for name, _ in model.named_parameters()] == ["attention.Z"]
    idx = torch.randint(0, 10, (5, 4))
    with torch.no_grad():
        model.attention.Z.normal_()
    torch.testing.assert_close(model(idx), model.attention(model.embedding[idx]))
    assert model(idx).shape == (5, 7)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: attention.ConvexAttention(0, 4), "n_tokens must be an integer >= 1"),
        (lambda: attention.ConvexAttention(3, 4, n_gates=-1), "n_gates must be an integer >= 0"),
        (lambda: attention.ConvexAttention(3, 4)(torch.zeros(2, 4, 3)), r"shape \(batch, 3, 4\)"),
        (
            lambda: attention.ConvexAttention(3, 4, 2).objective(torch.zeros(2, 3, 4), torch.zeros(2, 2), 0.1, "hinge"),
            "loss must be one of",
        ),
        (
            lambda: attention.ConvexAttention(3, 4, 1).objective(
                torch.zeros(2, 3, 4), torch.zeros(2, dtype=torch.long), 0.1, "cross_entropy"
            ),
            "integer class labels and n_outputs >= 2",
        ),
        (
            lambda: attention.ConvexAttention(3, 4).solve_exact(torch.zeros(2, 3, 4), torch.zeros(2, 1), beta=-1.0),
            "beta must be >= 0",
        ),
        (lambda: attention.ConvexTokenClassifier(10, 4, 8, 7)(torch.zeros(2, 4)), "integer token ids"),
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_convex_block_is_x_plus_the_gated_form_on_normalised_tokens():
    """Y[t, l] = sum_j I_j(N(X)) trace(Z_{j,(t,l)}^T N(X)), checked by a loop (docs/theory/convex.md section 8)."""
    generator = torch.Generator().manual_seed(5)
    block = attention.ConvexBlock(3, 4, n_gates=2, seed=1).double()
    with torch.no_grad():
        block.attention.Z.copy_(torch.randn(block.attention.Z.shape, generator=generator, dtype=torch.float64))
    x = torch.randn(2, 3, 4, generator=generator, dtype=torch.float64)
    n = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    expected = x.clone()
    for i in range(2):
        for j in range(2):
            if block.attention.u1[j].double() @ n[i] @ block.attention.u2[j].double() >= 0:
                for out in range(12):  # output (t, l) = (out // 4, out % 4)
                    expected[i, out // 4, out % 4] += torch.trace(block.attention.Z[j, out].T @ n[i])
    torch.testing.assert_close(block(x), expected.detach(), rtol=1e-10, atol=1e-10)


def test_convex_transformer_trains_its_embeddings_and_penalises_every_block():
    model = attention.ConvexTransformer(vocab_size=10, n_tokens=4, d=8, n_outputs=7, n_blocks=3, n_gates=2, seed=0)
    blocks = [m for m in model.modules() if isinstance(m, attention.ConvexAttention)]
    assert (
        len(blocks) == 3 and sum(p.numel() for p in model.parameters()) == 10 * 8 + 2 * (2 * 32 * 4 * 8) + 2 * 7 * 4 * 8
    )
    assert not torch.equal(blocks[0].u1, blocks[1].u1)  # each block has its own fixed gates
    with torch.no_grad():
        for block in blocks:
            block.Z.normal_()
    assert model.group_lasso().item() == pytest.approx(sum(b.Z.norm(dim=-1).sum().item() for b in blocks))
    idx = torch.randint(0, 10, (6, 4))
    torch.nn.functional.cross_entropy(model(idx), torch.randint(0, 7, (6,))).backward()
    assert model.embedding.weight.grad.abs().sum() > 0  # trained embeddings, unlike ConvexTokenClassifier
    one = attention.ConvexTransformer(10, 4, 8, 7, n_blocks=1, n_gates=2, seed=0)
    with torch.no_grad():
        one.readout.Z.normal_()
        expected = one.readout(torch.nn.functional.layer_norm(one.embedding(idx), (8,)))
    torch.testing.assert_close(one(idx), expected)
