"""A causal language model (nanoGPT's GPT) built from the configured attention."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .block import Block, init_weights
from .config import AttentionConfig
from .mha import SignalMemory
from .token_graph import TokenGraph


class GPT(nn.Module):
    """Token + position embeddings, n_layer blocks on the causal token graph, tied LM head.

    Parameters
    ----------
    config : AttentionConfig
        The attention layers' sizes and switches (self_loops must be True).
    vocab_size : int
        The number of token ids.
    block_size : int
        The longest sequence (the number of position embeddings).
    n_layer : int
        The number of blocks.

    Raises
    ------
    ValueError
        When a size is not a positive integer or config.self_loops is False.
    """

    def __init__(self, config: AttentionConfig, vocab_size: int, block_size: int, n_layer: int):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("block_size", block_size), ("n_layer", n_layer)):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not config.self_loops:
            raise ValueError(
                "GPT's causal graph needs self loops (without them token 0 attends to nothing); "
                "config.self_loops = False is for the ViT"
            )
        self.config, self.block_size = config, block_size
        self.wte = nn.Embedding(vocab_size, config.d_model)
        self.wpe = nn.Embedding(block_size, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, layer + 1) for layer in range(n_layer))
        self.ln_f = nn.LayerNorm(config.d_model, bias=config.bias)
        self.lm_head = nn.Linear(config.d_model, vocab_size, bias=False)
        init_weights(self, n_layer)
        self.lm_head.weight = self.wte.weight  # weight tying

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """idx: (B, T) token ids, T <= block_size -> logits (B, T, vocab), loss (None without targets).

        Parameters
        ----------
        idx : torch.Tensor
            (B, T) int64 token ids, T <= block_size.
        targets : torch.Tensor or None
            (B, T) the next token ids, for the loss.

        Returns
        -------
        logits : torch.Tensor
            (B, T, vocab_size).
        loss : torch.Tensor or None
            The mean cross-entropy against targets; None without targets.

        Raises
        ------
        ValueError
            When T exceeds block_size.
        """
        B, T = idx.shape
        if T > self.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.block_size}")
        graph = TokenGraph.causal(T)
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))  # (B, T, C)
        memory = SignalMemory()  # for residual "accumulated"
        for block in self.blocks:
            x = block(x, graph, memory)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        loss = None if targets is None else F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1))
        return logits, loss

    @torch.no_grad()
    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Append max_new_tokens sampled tokens to idx (B, T), each conditioned on the last block_size.

        Parameters
        ----------
        idx : torch.Tensor
            (B, T) int64 token ids, the prompt.
        max_new_tokens : int
            How many tokens to sample.
        temperature : float
            Divides the logits before the softmax, > 0.
        top_k : int or None
            Sample from the top_k most likely tokens only.
        generator : torch.Generator or None
            The random generator of the draws.

        Returns
        -------
        torch.Tensor
            (B, T + max_new_tokens) token ids.

        Raises
        ------
        ValueError
            When temperature is not > 0.
        """
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.block_size :])
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            next_id = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat([idx, next_id], dim=1)
        return idx
