"""GPT, ViT and GraphTransformer: shapes, weight tying, generation, learning a tiny task, devices."""

import math

import networkx as nx
import pytest
import torch

from attention import GPT, KERNELS, RESIDUALS, AttentionConfig, GraphTransformer, TokenGraph, ViT

CONFIG = dict(d_model=32, n_head=4)


def fit(model, task, steps, lr=3e-3):
    """AdamW on a fresh batch of `task(generator)` every step; the model's loss per step."""
    opt, generator, losses = torch.optim.AdamW(model.parameters(), lr=lr), torch.Generator().manual_seed(0), []
    for _ in range(steps):
        _, loss = model(*task(generator))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def held_out_accuracy(model, task):
    """Accuracy on one large batch of `task` from a seed fitting never drew from."""
    inputs, targets = task(torch.Generator().manual_seed(1), batch=512)
    with torch.no_grad():
        logits, _ = model(inputs)
    keep = targets >= 0
    return (logits.argmax(-1)[keep] == targets[keep]).float().mean().item()


def copy_back(generator, batch=32, length=12, vocab=11, lag=2):
    """Random tokens; the target at position t is the token at t - lag (none before lag): only attention, which
    mixes positions, can learn it."""
    idx = torch.randint(0, vocab, (batch, length), generator=generator)
    targets = torch.full_like(idx, -100)  # cross_entropy's ignore_index
    targets[:, lag:] = idx[:, :-lag]
    return idx, targets


def brightness_level(generator, batch=64):
    """8 x 8 noise images shifted by one of 4 levels; the label is the level (chance 1/4). No single pixel tells
    it apart from the noise: the class token must average the patches through attention."""
    labels = torch.randint(0, 4, (batch,), generator=generator)
    images = torch.randn(batch, 8, 8, generator=generator) + 0.5 * (labels.view(-1, 1, 1) - 1.5)
    return images, labels


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


@pytest.mark.parametrize(
    "residual,kernel",
    [(r, "softmax") for r in RESIDUALS]
    + [("standard", k) for k in KERNELS[1:] if k != "mean"]  # equal weights cannot pick a position
    + [("belief_star", "diff")],
)
def test_every_gpt_variant_learns_to_copy_from_two_tokens_back_on_held_out_sequences(residual, kernel):
    torch.manual_seed(0)
    model = GPT(
        AttentionConfig(**CONFIG, residual=residual, kernel=kernel, gamma=3.0), vocab_size=11, block_size=12, n_layer=2
    )
    fit(model, copy_back, 150)
    assert held_out_accuracy(model, copy_back) > 0.9  # chance: 1/11


def test_vit_learns_the_brightness_level_of_held_out_images_and_checks_image_shape():
    torch.manual_seed(0)
    model = ViT(AttentionConfig(**CONFIG, residual="attentionx"), n_layer=2, image_size=8, patch_size=2, num_classes=4)
    images, _ = brightness_level(torch.Generator().manual_seed(0))
    logits, _ = model(images)
    assert logits.shape == (64, 4)
    fit(model, brightness_level, 150)
    assert held_out_accuracy(model, brightness_level) > 0.9  # chance: 1/4
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
    for _step in range(150):
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
