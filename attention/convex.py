"""Convex attention (docs/theory/convex.md sections 2, 3): softmax rows relaxed to the unit simplex, the layer
trained as a group lasso.

    model = attention.ConvexAttention(n_tokens=4, d=32, n_outputs=97, n_gates=16)
    logits = model(x)                                   # x: (B, 4, 32) fixed token embeddings -> (B, 97)
    loss = F.cross_entropy(logits, y) + beta * model.group_lasso()

With Z_jl in R^{n x d} (rows z_jlk, one per token) and fixed random gates I_j(X) = 1{u_1j^T X u_2j >= 0}:

    y_l(X) = sum_j I_j(X) trace(Z_jl^T X),        penalty(Z) = sum_{j,l,k} ||z_jlk||_2

n_outputs = 1 is the scalar-output model (n d parameters), c outputs the vector-output one (n d c),
n_gates = h > 0 the ReLU-gated one (n d c h); n_gates = 0 means one gate that is always open. The
objective mean_i L(y(X_i), y_i) + beta penalty(Z) is convex in Z and unconstrained (docs/theory/convex.md
section 7; the source writes the sum over i, the mean only divides beta by the sample count), so Adam
trains it, and `solve_exact` finds its minimiser with cvxpy for small sizes. `ConvexTokenClassifier` puts
the layer over fixed random embeddings of token ids, so a whole sequence model stays convex (the
convexity check; its logits are additive in the tokens within a gate pattern). `ConvexTransformer` is
the source's architecture for the grokking experiments: trained token embeddings, then blocks of
gated convex attention + FCN (`ConvexBlock`), then a gated convex readout, all trained with Adam.
"""

from typing import cast

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

LOSSES = ("squared", "cross_entropy")


class ConvexAttention(nn.Module):
    """The gated convex attention layer y_l(X) = sum_j I_j(X) trace(Z_jl^T X) over fixed token embeddings
    X (n_tokens, d), trained as a group lasso (the module docstring; docs/theory/convex.md section 3).

    Parameters
    ----------
    n_tokens, d : int
        The sequence length n and the embedding width, >= 1.
    n_outputs : int
        The outputs c, >= 1 (1: the scalar-output model).
    n_gates : int
        The fixed random gates h, >= 0 (0: one gate that is always open).
    seed : int
        Seeds the gates' u_1j, u_2j.

    Raises
    ------
    ValueError
        Naming the size that is not an integer in range.
    """

    u1: Tensor  # buffers: the gates' fixed directions
    u2: Tensor

    def __init__(self, n_tokens: int, d: int, n_outputs: int = 1, n_gates: int = 0, seed: int = 0):
        super().__init__()
        for name, value, low in (
            ("n_tokens", n_tokens, 1),
            ("d", d, 1),
            ("n_outputs", n_outputs, 1),
            ("n_gates", n_gates, 0),
        ):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"ConvexAttention: {name} must be an integer >= {low}, got {value!r}")
        self.n_tokens, self.d, self.n_outputs, self.n_gates = n_tokens, d, n_outputs, n_gates
        self.Z = nn.Parameter(torch.zeros(max(n_gates, 1), n_outputs, n_tokens, d))
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer("u1", torch.randn(n_gates, n_tokens, generator=generator))
        self.register_buffer("u2", torch.randn(n_gates, d, generator=generator))

    def gates(self, x: Tensor) -> Tensor:
        """I_j(X_i) as a (B, h) float tensor; all ones (B, 1) without gating.

        Parameters
        ----------
        x : torch.Tensor
            (B, n_tokens, d) embeddings.

        Returns
        -------
        torch.Tensor
            (B, h) gates in x's dtype, (B, 1) ones for n_gates = 0.
        """
        if self.n_gates == 0:
            return x.new_ones(x.shape[0], 1)
        return (torch.einsum("jn,bnd,jd->bj", self.u1.to(x.dtype), x, self.u2.to(x.dtype)) >= 0).to(x.dtype)

    def features(self, x: Tensor) -> Tensor:
        """(B, h n d): token embeddings X_i flattened, one copy per gate, zeroed where the gate is closed.

        Parameters
        ----------
        x : torch.Tensor
            (B, n_tokens, d) embeddings.

        Returns
        -------
        torch.Tensor
            (B, h n d) features, linear in each X_i given its gates.

        Raises
        ------
        ValueError
            When x is not (B, n_tokens, d).
        """
        self._check(x)
        return (self.gates(x)[:, :, None] * x.flatten(1)[:, None, :]).flatten(1)

    def forward(self, x: Tensor) -> Tensor:
        """y_il = sum_j I_j(X_i) trace(Z_jl^T X_i): (B, n_tokens, d) -> (B, n_outputs).

        Parameters
        ----------
        x : torch.Tensor
            (B, n_tokens, d) embeddings.

        Returns
        -------
        torch.Tensor
            (B, n_outputs).

        Raises
        ------
        ValueError
            When x is not (B, n_tokens, d).
        """
        weights = self.Z.flatten(2).transpose(1, 2).reshape(-1, self.n_outputs)  # (h n d, c)
        return self.features(x) @ weights.to(x.dtype)

    def group_lasso(self) -> Tensor:
        """sum_{j,l,k} ||z_jlk||_2: one group per gate, output and token.

        Returns
        -------
        torch.Tensor
            The penalty, a 0-dimensional tensor.
        """
        return self.Z.norm(dim=-1).sum()

    def objective(self, x: Tensor, y: Tensor, beta: float, loss: str = "squared") -> Tensor:
        """mean_i L(y(X_i), y_i) + beta penalty(Z); squared: L = ||y_hat - y||^2 / 2, cross_entropy: y are labels.

        Parameters
        ----------
        x : torch.Tensor
            (B, n_tokens, d) embeddings.
        y : torch.Tensor
            (B, n_outputs) targets for "squared", (B,) integer labels for "cross_entropy".
        beta : float
            The group lasso's weight.
        loss : str
            "squared" or "cross_entropy".

        Returns
        -------
        torch.Tensor
            The objective, a 0-dimensional tensor.

        Raises
        ------
        ValueError
            For an unknown loss, or cross_entropy with float labels or one output.
        """
        prediction = self(x)
        if _check_loss(loss, y, self.n_outputs) == "squared":
            data = 0.5 * (prediction - y.reshape(prediction.shape)).pow(2).sum(-1).mean()
        else:
            data = F.cross_entropy(prediction, y)
        return data + beta * self.group_lasso()

    @torch.no_grad()
    def solve_exact(self, x: Tensor, y: Tensor, beta: float, loss: str = "squared") -> float:
        """Minimise `objective` over Z with cvxpy (Clarabel), store the minimiser in Z and return the optimum.

        Meant for small problems: the problem has h n c groups over B samples.

        Parameters
        ----------
        x : torch.Tensor
            (B, n_tokens, d) embeddings.
        y : torch.Tensor
            (B, n_outputs) targets for "squared", (B,) integer labels for "cross_entropy".
        beta : float
            The group lasso's weight, >= 0.
        loss : str
            "squared" or "cross_entropy".

        Returns
        -------
        float
            The minimum of the objective.

        Raises
        ------
        ValueError
            For an unknown loss, bad labels, or beta < 0.
        RuntimeError
            When cvxpy does not reach an optimal solution.
        """
        import cvxpy as cp

        _check_loss(loss, y, self.n_outputs)
        if beta < 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        features = self.features(x).double().cpu().numpy()
        n_samples, width = features.shape
        weights = cp.Variable((width, self.n_outputs))
        prediction = features @ weights
        if loss == "squared":
            target = y.double().cpu().numpy().reshape(n_samples, self.n_outputs)
            data = 0.5 * cp.sum_squares(prediction - target) / n_samples
        else:
            onehot = np.eye(self.n_outputs)[y.cpu().numpy()]
            data = (cp.sum(cp.log_sum_exp(prediction, axis=1)) - cp.sum(cp.multiply(onehot, prediction))) / n_samples
        groups = [weights[start : start + self.d, :] for start in range(0, width, self.d)]  # one per (gate, token)
        penalty = sum(cp.sum(cp.norm(group, 2, axis=0)) for group in groups)
        problem = cp.Problem(cp.Minimize(data + beta * penalty))
        problem.solve(solver=cp.CLARABEL)
        if problem.status != cp.OPTIMAL:
            raise RuntimeError(f"cvxpy could not solve the convex attention problem: status {problem.status}")
        solution = torch.as_tensor(weights.value).reshape(-1, self.n_tokens, self.d, self.n_outputs)
        self.Z.copy_(solution.permute(0, 3, 1, 2))
        return cast(float, problem.value)

    def _check(self, x: Tensor) -> None:
        if x.dim() != 3 or x.shape[1:] != (self.n_tokens, self.d):
            raise ValueError(
                f"ConvexAttention expects inputs of shape (batch, {self.n_tokens}, {self.d}), got {tuple(x.shape)}"
            )

    def extra_repr(self) -> str:
        """The sizes, for repr.

        Returns
        -------
        str
            n_tokens, d, n_outputs and n_gates.
        """
        return f"n_tokens={self.n_tokens}, d={self.d}, n_outputs={self.n_outputs}, n_gates={self.n_gates}"


class ConvexTokenClassifier(nn.Module):
    """ConvexAttention over fixed random token embeddings: (B, n_tokens) token ids -> (B, n_outputs) logits.

    The embeddings E (vocab_size x d, entries N(0, 1/d)) are a buffer drawn from `seed`, never trained,
    so the training objective stays convex in Z.

    Parameters
    ----------
    vocab_size : int
        The number of token ids, >= 1.
    n_tokens, d : int
        The sequence length and the embedding width.
    n_outputs : int
        The logits.
    n_gates : int
        The fixed random gates, >= 0.
    seed : int
        Seeds the embeddings (and, plus 1, the gates).

    Raises
    ------
    ValueError
        When a size is not an integer in range.
    """

    embedding: Tensor  # a buffer

    def __init__(self, vocab_size: int, n_tokens: int, d: int, n_outputs: int, n_gates: int = 0, seed: int = 0):
        super().__init__()
        if not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"ConvexTokenClassifier: vocab_size must be an integer >= 1, got {vocab_size!r}")
        self.vocab_size = vocab_size
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer("embedding", torch.randn(vocab_size, d, generator=generator) / d**0.5)
        self.attention = ConvexAttention(n_tokens, d, n_outputs, n_gates, seed=seed + 1)

    def forward(self, idx: Tensor) -> Tensor:
        """The convex layer on the embeddings E[idx].

        Parameters
        ----------
        idx : torch.Tensor
            (B, n_tokens) integer token ids.

        Returns
        -------
        torch.Tensor
            (B, n_outputs) logits.

        Raises
        ------
        ValueError
            When idx is not an integer (B, n_tokens) tensor.
        """
        if idx.dim() != 2 or idx.dtype.is_floating_point:
            raise ValueError(
                f"ConvexTokenClassifier expects integer token ids of shape (batch, n_tokens), "
                f"got {tuple(idx.shape)} {idx.dtype}"
            )
        return self.attention(self.embedding[idx])

    def group_lasso(self) -> Tensor:
        """The layer's penalty sum_{j,l,k} ||z_jlk||_2.

        Returns
        -------
        torch.Tensor
            A 0-dimensional tensor.
        """
        return self.attention.group_lasso()


class ConvexBlock(nn.Module):
    """One block of convex attention + FCN over a sequence (gated form, c = n d outputs;
    docs/theory/convex.md section 8):

        X <- X + Y,   Y[t, l] = sum_j I_j(N(X)) trace(Z_{j,(t,l)}^T N(X)),   I_j(X) = 1{u_1j^T X u_2j >= 0}

    N is a LayerNorm without parameters, so the block is convex in its Z given its input.

    Parameters
    ----------
    n_tokens, d : int
        The sequence length and the embedding width.
    n_gates : int
        The fixed random gates, >= 0.
    seed : int
        Seeds the gates.

    Raises
    ------
    ValueError
        When a size is not an integer in range.
    """

    def __init__(self, n_tokens: int, d: int, n_gates: int = 0, seed: int = 0):
        super().__init__()
        self.norm = nn.LayerNorm(d, elementwise_affine=False)
        self.attention = ConvexAttention(n_tokens, d, n_tokens * d, n_gates, seed=seed)

    def forward(self, x: Tensor) -> Tensor:
        """X + Y: (B, n_tokens, d) -> (B, n_tokens, d).

        Parameters
        ----------
        x : torch.Tensor
            (B, n_tokens, d).

        Returns
        -------
        torch.Tensor
            (B, n_tokens, d).
        """
        return x + self.attention(self.norm(x)).view_as(x)


class ConvexTransformer(nn.Module):
    """Token ids (B, n_tokens) -> logits (B, n_outputs): trained embeddings, n_blocks - 1 ConvexBlocks and a
    gated convex readout (ConvexAttention with n_outputs outputs) on the normalised sequence, so `n_blocks`
    counts attention + FCN layers as the source does (docs/theory/convex.md section 8). Each block has its own
    fixed gates.

    Parameters
    ----------
    vocab_size : int
        The number of token ids.
    n_tokens, d : int
        The sequence length and the embedding width.
    n_outputs : int
        The logits.
    n_blocks : int
        Attention + FCN layers, >= 1 (the last is the readout).
    n_gates : int
        The fixed random gates of each layer, >= 0.
    seed : int
        Seeds the layers' gates (seed + 1, seed + 2, ...).

    Raises
    ------
    ValueError
        When n_blocks or a size is not an integer in range.
    """

    def __init__(
        self,
        vocab_size: int,
        n_tokens: int,
        d: int,
        n_outputs: int,
        n_blocks: int = 1,
        n_gates: int = 0,
        seed: int = 0,
    ):
        super().__init__()
        if not isinstance(n_blocks, int) or n_blocks < 1:
            raise ValueError(f"ConvexTransformer: n_blocks must be an integer >= 1, got {n_blocks!r}")
        self.embedding = nn.Embedding(vocab_size, d)
        self.blocks = nn.ModuleList(
            ConvexBlock(n_tokens, d, n_gates, seed=seed + 1 + index) for index in range(n_blocks - 1)
        )
        self.norm = nn.LayerNorm(d, elementwise_affine=False)
        self.readout = ConvexAttention(n_tokens, d, n_outputs, n_gates, seed=seed + n_blocks)

    def forward(self, idx: Tensor) -> Tensor:
        """Embeddings, the ConvexBlocks, the readout.

        Parameters
        ----------
        idx : torch.Tensor
            (B, n_tokens) token ids.

        Returns
        -------
        torch.Tensor
            (B, n_outputs) logits.
        """
        x = self.embedding(idx)  # (B, n_tokens, d)
        for block in self.blocks:
            x = block(x)
        return self.readout(self.norm(x))

    def group_lasso(self) -> Tensor:
        """The penalty of every block and the readout: sum of ||z|| over all their groups.

        Returns
        -------
        torch.Tensor
            A 0-dimensional tensor.
        """
        penalties = (module.group_lasso() for module in self.modules() if isinstance(module, ConvexAttention))
        return cast(Tensor, sum(penalties))  # the readout is always there: a tensor, never sum's start 0


def _check_loss(loss: str, y: Tensor, n_outputs: int) -> str:
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    if loss == "cross_entropy" and (y.dtype.is_floating_point or n_outputs < 2):
        raise ValueError("the cross_entropy loss takes integer class labels and n_outputs >= 2")
    return loss
