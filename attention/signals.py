"""The residual signals R = signal(MH, V, config) that attention.residuals.RESIDUAL_TABLE names, one function each
(docs/theory/residuals.md section 1): the torch half of the table, imported when a layer first reads a row's signal,
so that the table and AttentionConfig load without torch."""

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .mha import orthogonal_part, orthogonal_parts

if TYPE_CHECKING:
    from .config import AttentionConfig


def heads(mh: Tensor, v: Tensor, config: "AttentionConfig") -> Tensor:
    """R = MH (docs/theory/residuals.md sections 2, 7)."""
    return mh


def attentionx(mh: Tensor, v: Tensor, config: "AttentionConfig") -> Tensor:
    """R = V - gamma MH (docs/theory/residuals.md section 3)."""
    return torch.sub(v, mh, alpha=config.gamma)


def belief(mh: Tensor, v: Tensor, config: "AttentionConfig") -> Tensor:
    """R = Delta, the part of MH orthogonal to V row by row (docs/theory/residuals.md section 4)."""
    return orthogonal_part(mh, v)


def belief_star(mh: Tensor, v: Tensor, config: "AttentionConfig") -> Tensor:
    """R = [Delta, Concat(Delta^s_1..Delta^s_M)], Delta through W^o and the per-head parts through W^s
    (docs/theory/residuals.md section 5)."""
    return orthogonal_parts(mh, v, config.n_head).flatten(-2)


def concat(mh: Tensor, v: Tensor, config: "AttentionConfig") -> Tensor:
    """R = [MH, V] (docs/theory/residuals.md section 6)."""
    return torch.cat([mh, v], dim=-1)
