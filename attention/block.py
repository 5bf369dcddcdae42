"""The pre-norm transformer block: aggregate over the token graph, then fuse per token (docs/theory/attention.md
section 2).

    Y = X + Attn(N(X), graph)      (Attn returns R W^o + b, R the configured residual signal)
    X = Y + MLP(N(Y))              (MLP: GELU or bilinear GLU; N: LayerNorm, or the identity for norm=None)

Attn gathers its neighbours' keys and values to each edge and aggregates the weighted values over each
token's edges; everything else (the residual signal, W^o, the residual additions and the MLP) is
token-local, the fuse step.
"""

import math

import torch.nn as nn
from torch import Tensor

from .config import AttentionConfig
from .mha import MultiHeadAttention, SignalMemory
from .token_graph import TokenGraph

NORMS = ("layernorm", None)


class MLP(nn.Module):
    """MLP(x) = W_2 GELU(W_1 x), `hidden` wide (default 4 d_model).

    Parameters
    ----------
    config : AttentionConfig
        d_model, bias and dropout.
    hidden : int or None
        The hidden width; None means 4 d_model.
    """

    def __init__(self, config: AttentionConfig, hidden: int | None = None):
        super().__init__()
        hidden = 4 * config.d_model if hidden is None else hidden
        self.c_fc = nn.Linear(config.d_model, hidden, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(hidden, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """W_2 GELU(W_1 x), then dropout.

        Parameters
        ----------
        x : torch.Tensor
            (..., d_model).

        Returns
        -------
        torch.Tensor
            (..., d_model).
        """
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class BilinearMLP(nn.Module):
    """Bilinear GLU without activation (Shazeer 2020): MLP(x) = W_3 ((W_1 x) * (W_2 x)), `hidden` wide.

    Parameters
    ----------
    config : AttentionConfig
        d_model, bias and dropout.
    hidden : int or None
        The hidden width; None means 4 d_model.
    """

    def __init__(self, config: AttentionConfig, hidden: int | None = None):
        super().__init__()
        hidden = 4 * config.d_model if hidden is None else hidden
        self.c_fc = nn.Linear(config.d_model, hidden, bias=config.bias)  # W_1
        self.c_gate = nn.Linear(config.d_model, hidden, bias=config.bias)  # W_2
        self.c_proj = nn.Linear(hidden, config.d_model, bias=config.bias)  # W_3
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """W_3 ((W_1 x) * (W_2 x)), then dropout.

        Parameters
        ----------
        x : torch.Tensor
            (..., d_model).

        Returns
        -------
        torch.Tensor
            (..., d_model).
        """
        return self.dropout(self.c_proj(self.c_fc(x) * self.c_gate(x)))


MLPS: dict[str, type[MLP] | type[BilinearMLP]] = {"gelu": MLP, "bilinear": BilinearMLP}


def make_norm(config: AttentionConfig, norm: str | None) -> nn.Module:
    """LayerNorm over d_model for norm="layernorm", the identity for norm=None."""
    if norm not in NORMS:
        raise ValueError(f"norm must be 'layernorm' or None, got {norm!r}")
    return nn.LayerNorm(config.d_model, bias=config.bias) if norm else nn.Identity()


def make_mlp(config: AttentionConfig, mlp: str, hidden: int | None) -> nn.Module:
    """The block's MLP: "gelu" or "bilinear", `hidden` wide (None: 4 d_model)."""
    if mlp not in MLPS:
        raise ValueError(f"unknown mlp {mlp!r}; choose one of {', '.join(MLPS)}")
    if hidden is not None and not (isinstance(hidden, int) and not isinstance(hidden, bool) and hidden >= 1):
        raise ValueError(f"the MLP's hidden width must be a positive integer, got {hidden!r}")
    return MLPS[mlp](config, hidden)


class Block(nn.Module):
    """One pre-norm transformer layer: x + Attn(N(x), graph), then + MLP(N(.)) (the module docstring).

    Parameters
    ----------
    config : AttentionConfig
        The attention layer's sizes and switches.
    layer_index : int or None
        The layer's position, counted from 1 (kernel "diff" needs it).
    attention : type
        The attention class: MultiHeadAttention or GraphAttention.
    norm : str or None
        "layernorm", or None for the identity.
    mlp : str
        "gelu" or "bilinear".
    hidden : int or None
        The MLP's width; None means 4 d_model.

    Raises
    ------
    ValueError
        For an unknown norm or mlp, a hidden width that is not a positive integer, or what the attention
        class refuses.
    """

    def __init__(
        self,
        config: AttentionConfig,
        layer_index: int | None = None,
        attention: type[MultiHeadAttention] = MultiHeadAttention,
        norm: str | None = "layernorm",
        mlp: str = "gelu",
        hidden: int | None = None,
    ):
        super().__init__()
        self.ln_1 = make_norm(config, norm)
        self.attn = attention(config, layer_index)
        self.ln_2 = make_norm(config, norm)
        self.mlp = make_mlp(config, mlp, hidden)

    def forward(self, x: Tensor, graph: TokenGraph | None = None, memory: SignalMemory | None = None) -> Tensor:
        """X + Attn(N(X), graph), then + MLP(N(.)).

        Parameters
        ----------
        x : torch.Tensor
            (B, T, d_model) token rows, the residual stream.
        graph : TokenGraph or None
            The token graph over T tokens; None means full attention.
        memory : SignalMemory or None
            Passed to the attention layer (residual "accumulated").

        Returns
        -------
        torch.Tensor
            (B, T, d_model), the new residual stream.
        """
        update = self.attn(self.ln_1(x), graph, memory)
        if self.attn.config.probe:
            self.attn.probes["token"] = x.detach()  # the residual stream the update is added to
        x = x + update
        return x + self.mlp(self.ln_2(x))


def init_weights(model: nn.Module, n_layer: int) -> None:
    """GPT-2 initialisation: N(0, 0.02) weights, zero biases, output projections scaled by 1/sqrt(2 n_layer)."""
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding, nn.Conv2d)):
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("c_proj", "c_proj_s")) else 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std)
            bias = getattr(module, "bias", None)  # an Embedding has none
            if bias is not None:
                nn.init.zeros_(bias)
