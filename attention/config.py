"""AttentionConfig: the switches of one attention layer (docs/theory/attention.md section 3;
docs/theory/residuals.md section 1)."""

import math
import numbers
from dataclasses import dataclass
from typing import cast  # numbers.Real's stubs lack >=: the checks compare as int or float

from .residuals import RESIDUAL_TABLE, RESIDUALS, Residual

KERNELS = ("softmax", "diff", "linear", "mean")


@dataclass
class AttentionConfig:
    """Sizes and switches shared by every attention layer and model in this package.

    Attributes
    ----------
    d_model, n_head : int
        The width of the residual stream and the number of heads (n_head divides d_model).
    residual : str
        What replaces MH(X) before W^o (docs/theory/residuals.md section 1): "standard" MH,
        "attentionx" V - gamma MH, "belief" MH - alpha V per token, "belief_star" belief plus a
        per-head belief signal through an extra W^s, "concat" [MH, V] through a 2 d_model-wide W^o,
        "accumulated" the standard update plus beta times the sum of the earlier layers' updates (a
        dual memory, like PDMM's lambda; it needs the model to pass a SignalMemory through its layers).
        attention.residuals.RESIDUAL_TABLE holds them all, with the knobs each reads.
    gamma : float
        AttentionX's weight; the paper takes gamma >= 1 (1 for ViTs, 3 for causal LMs), values in
        [0, 1) are allowed for ablations. With kernel "diff", MH is the normalised, (1 - lambda_init)-
        scaled head output, so V and gamma MH are on different scales.
    beta : float
        The weight of the accumulated earlier updates for residual "accumulated".
    kernel : str
        "softmax", "diff" (differential attention; needs an even head size and a layer index; no
        attention dropout), "linear" (elu + 1 feature map; no attention dropout) or "mean" (every
        neighbour weighs the same, w_ij = 1 / deg(i): no queries or keys, a token sends its value
        only, docs/pdmm_transformer.md section 5).
    symmetric : bool
        Tie K to Q (no W^K), with any kernel but "mean", which has neither.
    dropout : float
        Dropout on the attention weights and the layer's output.
    bias : bool
        Biases in every linear map.
    probe : bool
        Keep the last forward's MH, V, residual and attention statistics in `module.probes`.
    self_loops : bool
        Whether each token attends to itself in the token graph a model builds (ViT's full graph);
        False drops the diagonal, the AttentionX paper's ViT setting (alpha_kk = 0,
        docs/theory/residuals.md section 3). GPT (token 0 would attend to nothing) and
        GraphTransformer (its graph is passed in) refuse False.
    send_width : int or None
        The numbers a token sends each neighbour per layer. None: its key and value, d_model each
        (2 d_model). An integer w >= 2: keys and queries are w_k = w // 2 wide and values
        w_v = w - w_k, each split over the n_head heads (n_head must divide both); the residual
        signal acts on the w_v-wide heads and values, and W^o (and W^s) maps w_v (2 w_v for concat)
        back to d_model. GraphAttention refuses it. With kernel "mean" there are no keys: values are
        w wide (w >= 1) and None means d_model numbers.

    Raises
    ------
    ValueError
        On construction, naming the field, for a value out of range or a combination that cannot run.
    """

    d_model: int = 128
    n_head: int = 4
    residual: str = "standard"
    gamma: float = 1.0
    beta: float = 1.0
    kernel: str = "softmax"
    symmetric: bool = False
    dropout: float = 0.0
    bias: bool = True
    probe: bool = False
    self_loops: bool = True
    send_width: int | None = None

    def __post_init__(self) -> None:
        for name in ("d_model", "n_head"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and cast(int, value) >= 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.residual not in RESIDUALS:
            raise ValueError(f"unknown residual {self.residual!r}; choose one of {', '.join(RESIDUALS)}")
        if self.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; choose one of {', '.join(KERNELS)}")
        for name in ("gamma", "beta"):
            value = getattr(self, name)
            if not (
                isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= cast(float, value) < math.inf
            ):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.send_width is not None:
            self.check_send_width()
        if self.kernel == "diff" and self.key_head_size % 2:
            size = "d_model / n_head" if self.send_width is None else "of the keys, (send_width // 2) / n_head"
            raise ValueError(
                f"kernel 'diff' splits each head in two; the head size {size} = {self.key_head_size} must be even"
            )
        if not (
            isinstance(self.dropout, numbers.Real) and not isinstance(self.dropout, bool) and 0 <= self.dropout < 1
        ):
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        for name in ("symmetric", "bias", "probe", "self_loops"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.symmetric and self.kernel == "mean":
            raise ValueError("symmetric ties K to Q, and kernel 'mean' has neither: use one or the other")

    def check_send_width(self) -> None:
        """Raise unless send_width is an integer >= 2 (>= 1 for kernel "mean", which sends no key) whose key and
        value widths n_head divides, and wide enough for the residual (belief keeps the part of MH orthogonal to
        V, which is 0 when V is one number).

        Raises
        ------
        ValueError
            Naming send_width, when it is not such an integer or n_head does not divide its parts.
        """
        w, least = self.send_width, 1 if self.kernel == "mean" else 2
        if not (isinstance(w, numbers.Integral) and not isinstance(w, bool) and w >= least):
            default = "d_model" if self.kernel == "mean" else "2 d_model"
            raise ValueError(
                f"send_width must be None ({default} numbers) or an integer >= {least} for kernel "
                f"{self.kernel!r}, got {w!r}"
            )
        if self.residual_spec.orthogonal and self.value_width < 2:
            raise ValueError(
                f"residual {self.residual!r} keeps the part of MH orthogonal to V, which is 0 for values "
                f"{self.value_width} number wide: use send_width >= 4 or another residual"
            )
        if self.key_width % self.n_head or self.value_width % self.n_head:
            raise ValueError(
                f"send_width = {w} makes keys {self.key_width} and values {self.value_width} "
                f"wide; n_head = {self.n_head} must divide both (n_head = 1 always does)"
            )

    @property
    def residual_spec(self) -> Residual:
        """The residual's row of attention.residuals.RESIDUAL_TABLE: its signal, widths, memory and knobs."""
        return RESIDUAL_TABLE[self.residual]

    @property
    def head_size(self) -> int:
        """d_model / n_head: the per-head width of the residual stream (GraphAttention's heads)."""
        return self.d_model // self.n_head

    @property
    def key_width(self) -> int:
        """Width of Q and of K: w_k = send_width // 2, or d_model when send_width is None; 0 for kernel "mean"."""
        if self.kernel == "mean":
            return 0
        return self.d_model if self.send_width is None else self.send_width // 2

    @property
    def value_width(self) -> int:
        """Width of V (and of MH): w_v = send_width - w_k, or d_model when send_width is None."""
        return self.d_model if self.send_width is None else self.send_width - self.key_width

    @property
    def key_head_size(self) -> int:
        """Per-head width of Q and K: key_width / n_head."""
        return self.key_width // self.n_head

    @property
    def value_head_size(self) -> int:
        """Per-head width of V: value_width / n_head."""
        return self.value_width // self.n_head
