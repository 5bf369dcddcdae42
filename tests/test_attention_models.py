"""GPT, ViT and GraphTransformer: shapes, weight tying, generation, learning a tiny task, devices."""
import math

import networkx as nx
import pytest
import torch

from attention import KERNELS, RESIDUALS, AttentionConfig, GPT, GraphTransformer, TokenGraph, ViT

CONFIG = dict(d_model=32, n_head=4)


def fit(model, batch, steps=40, lr=3e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        _, loss = model(*batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_gpt_starts_near_uniform_ties_weights_and_generates():
    torch.manual_seed(0)
    model = GPT(AttentionConfig(**CONFIG), vocab_size=65, block_size=16, n_layer=2)
    assert model.lm_head.weight is model.wte.weight
    idx = torch.randint(0, 65, (4, 16))
    logits, loss = model(idx, torch.randint(0, 65, (4, 16)))
    assert logits.shape == (4, 16, 65) and abs(loss.item() - math.log(65)) < 0.1
    out = model.generate(idx[:, :3], 20, top_k=5, generator=torch.Generator().manual_seed(0))
    assert out.shape == (4, 23) and torch.equal(out[:, :3], idx[:, :3]) and out.max() < 65
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("residual,kernel", [(r, "softmax") for r in RESIDUALS] + [("standard", k) for k in KERNELS[1:]]
                         + [("belief_star", "diff")])
def test_every_gpt_variant_learns_a_fixed_batch(residual, kernel):
    torch.manual_seed(0)
    model = GPT(AttentionConfig(**CONFIG, residual=residual, kernel=kernel, gamma=3.0), vocab_size=11, block_size=12, n_layer=2)
    idx = torch.randint(0, 11, (8, 13))
    losses = fit(model, (idx[:, :-1], idx[:, 1:]))
    assert losses[-1] < 0.6 * losses[0], losses[::10]


def test_vit_learns_a_fixed_batch_and_checks_image_shape():
    torch.manual_seed(0)
    model = ViT(AttentionConfig(**CONFIG, residual="attentionx"), n_layer=2, image_size=8, patch_size=2)
    images, labels = torch.randn(16, 8, 8), torch.arange(16) % 10
    logits, _ = model(images)
    assert logits.shape == (16, 10)
    losses = fit(model, (images, labels))
    assert losses[-1] < 0.6 * losses[0]
    with pytest.raises(ValueError, match="shape"):
        model(torch.randn(2, 7, 7))
    with pytest.raises(ValueError, match="divide"):
        ViT(AttentionConfig(**CONFIG), 1, image_size=8, patch_size=3)


def test_graph_transformer_learns_to_average_over_neighbours():
    torch.manual_seed(0)
    G = nx.cycle_graph(10)
    graph = TokenGraph.from_networkx(G)
    model = GraphTransformer(AttentionConfig(**CONFIG), n_layer=2, tied=True)
    a = torch.randn(64, 10, 1)
    target = (a + a.roll(1, 1) + a.roll(-1, 1)) / 3  # the one-round neighbourhood average on the cycle
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(150):
        loss = ((model(a, graph)[0] - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * target.var().item()


@pytest.mark.parametrize("kernel", KERNELS)
def test_models_run_on_the_device(device, kernel):
    torch.manual_seed(0)
    cfg = AttentionConfig(**CONFIG, kernel=kernel, residual="belief_star")
    gpt = GPT(cfg, vocab_size=11, block_size=8, n_layer=2).to(device)
    _, loss = gpt(torch.randint(0, 11, (2, 8), device=device), torch.randint(0, 11, (2, 8), device=device))
    loss.backward()
    vit = ViT(cfg, n_layer=1).to(device)
    assert vit(torch.randn(2, 1, 8, 8, device=device))[0].device.type == device
    graph = TokenGraph.from_networkx(nx.cycle_graph(40), layout="sparse")
    model = GraphTransformer(cfg, n_layer=2).to(device)
    assert model(torch.randn(3, 40, 1, device=device), graph).shape == (2, 3, 40, 1)
