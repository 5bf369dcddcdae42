"""attention: multi-head attention over token graphs with switchable residual signal, kernel and graph.

config = attention.AttentionConfig(d_model=128, n_head=4, residual="belief")
y = attention.MultiHeadAttention(config)(x, attention.TokenGraph.causal(x.shape[1]))
"""

from .block import MLP, BilinearMLP, Block
from .config import KERNELS, AttentionConfig
from .convex import ConvexAttention, ConvexBlock, ConvexTokenClassifier, ConvexTransformer
from .gat import GraphAttention
from .gpt import GPT
from .graph_transformer import GraphTransformer
from .mha import MultiHeadAttention
from .residuals import RESIDUAL_KNOBS, RESIDUAL_TABLE, RESIDUALS, Residual, uses_knob
from .token_graph import TokenGraph
from .vit import ViT

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
