"""attention: multi-head attention over token graphs with switchable residual signal, kernel and graph.

config = attention.AttentionConfig(d_model=128, n_head=4, residual="belief")
y = attention.MultiHeadAttention(config)(x, attention.TokenGraph.causal(x.shape[1]))

AttentionConfig, KERNELS and the residual table load without torch (so does `import attention.config`, as the
experiments' config parsing does); the layers and models, which need torch, are imported on first use (PEP 562),
docs/guide/attention.md.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .config import KERNELS, AttentionConfig
from .residuals import RESIDUAL_KNOBS, RESIDUAL_TABLE, RESIDUALS, Residual, uses_knob

if TYPE_CHECKING:
    from .block import MLP, BilinearMLP, Block
    from .convex import ConvexAttention, ConvexBlock, ConvexTokenClassifier, ConvexTransformer
    from .gat import GraphAttention
    from .gpt import GPT
    from .graph_transformer import GraphTransformer
    from .mha import MultiHeadAttention
    from .token_graph import TokenGraph
    from .vit import ViT

_TORCH_NAMES = {  # name -> the module that defines it; imported by __getattr__ when first asked for
    "MLP": "block",
    "BilinearMLP": "block",
    "Block": "block",
    "ConvexAttention": "convex",
    "ConvexBlock": "convex",
    "ConvexTokenClassifier": "convex",
    "ConvexTransformer": "convex",
    "GraphAttention": "gat",
    "GPT": "gpt",
    "GraphTransformer": "graph_transformer",
    "MultiHeadAttention": "mha",
    "TokenGraph": "token_graph",
    "ViT": "vit",
}


def __getattr__(name: str) -> Any:
    """The layer or model `name` from its module, imported now (the first time it is asked for)."""
    if name not in _TORCH_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_TORCH_NAMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_TORCH_NAMES})


__all__ = [
    "MLP",
    "BilinearMLP",
    "Block",
    "KERNELS",
    "RESIDUALS",
    "RESIDUAL_TABLE",
    "RESIDUAL_KNOBS",
    "Residual",
    "uses_knob",
    "AttentionConfig",
    "ConvexAttention",
    "ConvexBlock",
    "ConvexTokenClassifier",
    "ConvexTransformer",
    "GraphAttention",
    "GPT",
    "TokenGraph",
    "GraphTransformer",
    "MultiHeadAttention",
    "ViT",
]
