"""A transformer whose tokens are the nodes of a graph and whose token graph is that graph.

With self loops, layer l lets each node read its neighbours once: after l layers a node has had
exactly l rounds of neighbour communication, the budget of l PDMM iterations (docs/theory/attention.md section 6).
"""

from typing import cast

import torch
import torch.nn as nn
from torch import Tensor

from .block import Block, init_weights, make_norm
from .config import AttentionConfig
from .gat import GraphAttention
from .mha import MultiHeadAttention, SignalMemory
from .token_graph import TokenGraph

LAYERS: dict[str, type[MultiHeadAttention]] = {"attention": MultiHeadAttention, "gat": GraphAttention}


class GraphTransformer(nn.Module):
    """Node features (B, n, in_features) -> a readout after every layer, (n_layer, B, n, out_features).

    tied=True applies one block n_layer times (one set of weights for every round, like an
    iteration); layer="gat" uses GAT's additive scores instead of dot-product attention;
    norm=None makes every LayerNorm (the blocks' and the final one) the identity; mlp="bilinear"
    uses the bilinear GLU W_3 ((W_1 h) * (W_2 h)) instead of the GELU MLP; hidden is the MLP's
    width (default 4 d_model).

    Parameters
    ----------
    config : AttentionConfig
        The attention layers' sizes and switches (self_loops must be True).
    n_layer : int
        The number of layers (rounds) it is trained at.
    in_features, out_features : int
        Node feature and readout widths.
    tied : bool
        One block for every round.
    layer : str
        "attention" (MultiHeadAttention) or "gat" (GraphAttention).
    norm : str or None
        "layernorm", or None for the identity.
    mlp : str
        "gelu" or "bilinear".
    hidden : int or None
        The MLP's width; None means 4 d_model.

    Raises
    ------
    ValueError
        For an unknown layer, norm or mlp, an n_layer that is not a positive integer, or
        config.self_loops False.
    """

    def __init__(
        self,
        config: AttentionConfig,
        n_layer: int,
        in_features: int = 1,
        out_features: int = 1,
        tied: bool = False,
        layer: str = "attention",
        norm: str | None = "layernorm",
        mlp: str = "gelu",
        hidden: int | None = None,
    ):
        super().__init__()
        if layer not in LAYERS:
            raise ValueError(f"unknown layer {layer!r}; choose one of {', '.join(LAYERS)}")
        if not (isinstance(n_layer, int) and n_layer >= 1):
            raise ValueError(f"n_layer must be a positive integer, got {n_layer!r}")
        if not config.self_loops:
            raise ValueError(
                "GraphTransformer attends over the graph it is given; for no self loops pass "
                "TokenGraph.from_networkx(G, self_loops=False) and keep config.self_loops = True"
            )
        self.n_layer, self.tied, self.in_features = n_layer, tied, in_features
        self.embed = nn.Linear(in_features, config.d_model)
        n_blocks = 1 if tied else n_layer
        self.blocks = nn.ModuleList(
            Block(config, index + 1, LAYERS[layer], norm, mlp, hidden) for index in range(n_blocks)
        )
        self.ln_f = make_norm(config, norm)
        self.readout = nn.Linear(config.d_model, out_features)
        init_weights(self, n_layer)

    @property
    def numbers_sent(self) -> int:
        """Numbers a node sends each neighbour per round (layer): its attention layer's numbers_sent,
        2 d_model by default (key and value), config.send_width when set, d_model for layer="gat"."""
        return cast(Block, self.blocks[0]).attn.numbers_sent

    def forward(self, x: Tensor, graph: TokenGraph, rounds: int | None = None) -> Tensor:
        """The readout after every layer.

        Parameters
        ----------
        x : torch.Tensor
            (B, n, in_features) node features.
        graph : TokenGraph
            The token graph over the n nodes.
        rounds : int or None
            How many layers to run (default n_layer); a tied model may run past n_layer, the depth it
            was trained at, since its one block is the same in every round.

        Returns
        -------
        torch.Tensor
            (rounds, B, n, out_features).

        Raises
        ------
        ValueError
            When rounds is out of range or x has the wrong shape.
        TypeError
            When graph is not a TokenGraph.
        """
        rounds = self.n_layer if rounds is None else rounds
        if not (isinstance(rounds, int) and rounds >= 1 and (self.tied or rounds <= self.n_layer)):
            raise ValueError(
                f"rounds must be an integer in 1..{self.n_layer} (any >= 1 for a tied model), got {rounds!r}"
            )
        if not isinstance(graph, TokenGraph):
            raise TypeError("GraphTransformer needs the token graph, e.g. TokenGraph.from_networkx(G)")
        if x.dim() != 3 or x.shape[-1] != self.in_features:
            raise ValueError(f"expected node features of shape (B, n, {self.in_features}), got {tuple(x.shape)}")
        h = self.embed(x)  # (B, n, C)
        readouts, memory = [], SignalMemory()  # memory: for residual "accumulated"
        for layer in range(rounds):
            h = self.blocks[0 if self.tied else layer](h, graph, memory)
            readouts.append(self.readout(self.ln_f(h)))
        return torch.stack(readouts)
