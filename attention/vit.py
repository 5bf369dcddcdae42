"""A vision transformer for small images: patch embedding, class token, blocks on the full token graph
(without its diagonal when config.self_loops is False)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .block import Block, init_weights
from .config import AttentionConfig
from .mha import SignalMemory
from .token_graph import TokenGraph


class ViT(nn.Module):
    """Images (B, channels, H, W) -> class logits; tokens = [class token, patches].

    Parameters
    ----------
    config : AttentionConfig
        The attention layers' sizes and switches; self_loops=False drops the diagonal of the full graph.
    n_layer : int
        The number of blocks.
    image_size : int
        H = W, in pixels.
    patch_size : int
        The side of a square patch; it must divide image_size.
    channels : int
        Input channels.
    num_classes : int
        Output classes.

    Raises
    ------
    ValueError
        When patch_size does not divide image_size.
    """

    def __init__(
        self,
        config: AttentionConfig,
        n_layer: int,
        image_size: int = 8,
        patch_size: int = 2,
        channels: int = 1,
        num_classes: int = 10,
    ):
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

    def forward(self, images: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """images: (B, channels, H, W), or (B, H, W) with one channel -> logits (B, classes), loss.

        Parameters
        ----------
        images : torch.Tensor
            (B, channels, H, W), or (B, H, W) with one channel.
        targets : torch.Tensor or None
            (B,) class labels, for the loss.

        Returns
        -------
        logits : torch.Tensor
            (B, num_classes), read from the class token.
        loss : torch.Tensor or None
            The mean cross-entropy against targets; None without targets.

        Raises
        ------
        ValueError
            When images do not have the expected shape.
        """
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
