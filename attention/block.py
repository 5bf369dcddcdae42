"""The pre-norm transformer block: gather over the token graph, then fuse per token (MATH.md 4).

    Y = X + Attn(LN(X), graph)     (Attn returns R W^o + b, R the configured residual signal)
    X = Y + MLP(LN(Y))             (GELU MLP, 4 d_model wide)
"""
import math

import torch.nn as nn

from .mha import MultiHeadAttention


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.d_model, 4 * config.d_model, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.d_model, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """One layer; `attention` is the attention class (MultiHeadAttention or GraphAttention)."""

    def __init__(self, config, layer_index=None, attention=MultiHeadAttention):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model, bias=config.bias)
        self.attn = attention(config, layer_index)
        self.ln_2 = nn.LayerNorm(config.d_model, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, graph=None, memory=None):
        update = self.attn(self.ln_1(x), graph, memory)
        if self.attn.config.probe:
            self.attn.probes["token"] = x.detach()  # the residual stream the update is added to
        x = x + update
        return x + self.mlp(self.ln_2(x))


def init_weights(model, n_layer):
    """GPT-2 initialisation: N(0, 0.02) weights, zero biases, output projections scaled by 1/sqrt(2 n_layer)."""
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding, nn.Conv2d)):
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("c_proj", "c_proj_s")) else 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
