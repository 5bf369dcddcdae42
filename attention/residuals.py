"""The residual table: every residual signal a layer can use, with what it computes and what it needs
(docs/guide/attention.md, "Switches"; docs/theory/residuals.md section 1).

    spec = RESIDUAL_TABLE["attentionx"]
    r = spec.signal(mh, v, config)        # R = V - gamma MH, (B, T, spec.width * w_v): attention.signals.attentionx
    spec.knobs                            # ("gamma",): the AttentionConfig fields it reads

This module is the one place in attention/ where a residual is told apart by its name: AttentionConfig
checks names against it, MultiHeadAttention reads its row once, and the experiments read the knobs from
it. A new residual is one row here and its signal function in attention/signals.py (CONTRIBUTING.md). The table
imports no torch (the signals are imported when a layer first reads one), so AttentionConfig and the experiments'
config parsing load without it.
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the table loads without torch: the signals live in attention.signals
    from torch import Tensor

    from .config import AttentionConfig


@dataclass(frozen=True)
class Residual:
    """One residual signal R = signal(MH, V, config) and what a layer needs to use it.

    Attributes
    ----------
    name : str
        The value of AttentionConfig.residual.
    formula : str
        The name of the function in attention.signals that forms R (its `signal`).
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
    formula: str
    width: int = 1
    second_map: bool = False
    needs_memory: bool = False
    orthogonal: bool = False
    knobs: tuple[str, ...] = ()

    @cached_property
    def signal(self) -> "Callable[[Tensor, Tensor, AttentionConfig], Tensor]":
        """(mh, v, config) -> R from the merged heads MH and values V, both (B, T, w_v): token-local
        (docs/theory/residuals.md section 1); R is (B, T, width * w_v). The function attention.signals.<formula>,
        imported on first use so that the table loads without torch."""
        return getattr(importlib.import_module(".signals", __package__), self.formula)

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


RESIDUAL_TABLE: dict[str, Residual] = {
    spec.name: spec
    for spec in (
        Residual("standard", "heads"),
        Residual("attentionx", "attentionx", knobs=("gamma",)),
        Residual("belief", "belief", orthogonal=True),
        Residual("belief_star", "belief_star", width=2, second_map=True, orthogonal=True),
        Residual("concat", "concat", width=2),
        Residual("accumulated", "heads", needs_memory=True, knobs=("beta",)),
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
