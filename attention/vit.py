"""A vision transformer for small images: patch embedding, class token, blocks on the full token graph
(without its diagonal when config.self_loops is False)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .block import Block, init_weights
from .graph import TokenGraph
from .mha import SignalMemory


class ViT(nn.Module):
    """Images (B, channels, H, W) -> class logits; tokens = [class token, patches]."""

    def __init__(self, config, n_layer, image_size=8, patch_size=2, channels=1, num_classes=10):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"patch_size ({patch_size}) must divide image_size ({image_size})")
        self.image_size, self.channels = image_size, channels
        n_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(channels, config.d_model, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.d_model))
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + n_patches, config.d_model) * 0.02)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, layer + 1) for layer in range(n_layer))
        # None: full attention (diagonal kept); config.self_loops = False: every token but itself
        self.graph = None if config.self_loops else TokenGraph.full(1 + n_patches).without_self_loops()
        self.ln_f = nn.LayerNorm(config.d_model, bias=config.bias)
        self.head = nn.Linear(config.d_model, num_classes)
        init_weights(self, n_layer)

    def forward(self, images, targets=None):
        """images: (B, channels, H, W), or (B, H, W) with one channel -> logits (B, classes), loss."""
        if images.dim() == 3 and self.channels == 1:
            images = images.unsqueeze(1)
        expected = (self.channels, self.image_size, self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"expected images of shape (B, {', '.join(map(str, expected))}), got {tuple(images.shape)}"
            )
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, P, C)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embed
        x = self.drop(x)
        memory = SignalMemory()  # for residual "accumulated"
        for block in self.blocks:
            x = block(x, self.graph, memory)
        logits = self.head(self.ln_f(x[:, 0]))
        loss = None if targets is None else F.cross_entropy(logits, targets)
        return logits, loss
