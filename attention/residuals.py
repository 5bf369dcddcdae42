"""The residual table: every residual signal a layer can use, with what it computes and what it needs
(docs/guide/attention.md, "Switches"; docs/theory/residuals.md section 1).

    spec = RESIDUAL_TABLE["attentionx"]
    r = spec.signal(mh, v, config)        # R = V - gamma MH, (B, T, spec.width * w_v)
    spec.knobs                            # ("gamma",): the AttentionConfig fields it reads

This module is the one place in attention/ where a residual is told apart by its name: AttentionConfig
checks names against it, MultiHeadAttention reads its row once, and the experiments read the knobs from
it. A new residual is one row here (CONTRIBUTING.md).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .mha import orthogonal_part, orthogonal_parts

if TYPE_CHECKING:
    from .config import AttentionConfig


@dataclass(frozen=True)
class Residual:
    """One residual signal R = signal(MH, V, config) and what a layer needs to use it.

    Attributes
    ----------
    name : str
        The value of AttentionConfig.residual.
    signal : callable
        (mh, v, config) -> R from the merged heads MH and values V, both (B, T, w_v): token-local
        (docs/theory/residuals.md section 1); R is (B, T, width * w_v).
    width : int
        R's width in multiples of w_v.
    second_map : bool
        Whether R's second w_v columns go through their own map W^s (belief_star) rather than W^o taking all
        of R; W^o is then w_v wide and the layer adds both products.
    needs_memory : bool
        Whether the layer adds beta times the earlier layers' updates (docs/theory/residuals.md section 7),
        so that it must be handed the SignalMemory its model passes through its layers.
    orthogonal : bool
        Whether R keeps the part of MH orthogonal to V (needs values at least 2 numbers wide; the probes keep
        alpha).
    knobs : tuple of str
        The AttentionConfig fields besides the sizes that change what this residual computes.
    """

    name: str
    signal: Callable[[Tensor, Tensor, "AttentionConfig"], Tensor]
    width: int = 1
    second_map: bool = False
    needs_memory: bool = False
    orthogonal: bool = False
    knobs: tuple[str, ...] = ()

    def output_width(self, value_width: int) -> int:
        """The input width of W^o: all of R, or its first w_v when R's second part has its own map.

        Parameters
        ----------
        value_width : int
            w_v, the width of the values (AttentionConfig.value_width).

        Returns
        -------
        int
            width * w_v, or w_v with second_map.
        """
        return value_width if self.second_map else self.width * value_width


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


RESIDUAL_TABLE: dict[str, Residual] = {
    spec.name: spec
    for spec in (
        Residual("standard", heads),
        Residual("attentionx", attentionx, knobs=("gamma",)),
        Residual("belief", belief, orthogonal=True),
        Residual("belief_star", belief_star, width=2, second_map=True, orthogonal=True),
        Residual("concat", concat, width=2),
        Residual("accumulated", heads, needs_memory=True, knobs=("beta",)),
    )
}
RESIDUALS = tuple(RESIDUAL_TABLE)  # the names AttentionConfig.residual accepts
RESIDUAL_KNOBS = tuple(dict.fromkeys(knob for spec in RESIDUAL_TABLE.values() for knob in spec.knobs))


def uses_knob(residual: object, knob: str) -> bool:
    """Whether residual `residual` reads AttentionConfig field `knob` (False for a value not named in the table).

    Parameters
    ----------
    residual : object
        A residual's name; any value, as a run's config may hold one this version does not know.
    knob : str
        An AttentionConfig field, e.g. "gamma".

    Returns
    -------
    bool
        True when the table's row for `residual` lists `knob`.
    """
    return isinstance(residual, str) and residual in RESIDUAL_TABLE and knob in RESIDUAL_TABLE[residual].knobs
