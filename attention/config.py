"""AttentionConfig: the switches of one attention layer (MATH.md sections 4-5)."""
import math
import numbers
from dataclasses import dataclass

RESIDUALS = ("standard", "attentionx", "belief", "belief_star", "concat", "accumulated")
KERNELS = ("softmax", "diff", "linear")


@dataclass
class AttentionConfig:
    """Sizes and switches shared by every attention layer and model in this package.

    residual: what replaces MH(X) before W^o (MATH.md 5): "standard" MH, "attentionx" V - gamma MH,
        "belief" MH - alpha V per token, "belief_star" belief plus a per-head belief signal through
        an extra W^s, "concat" [MH, V] through a 2 d_model-wide W^o, "accumulated" the standard
        update plus beta times the sum of the earlier layers' updates (a dual memory, like PDMM's
        lambda; it needs the model to pass a SignalMemory through its layers).
    gamma: AttentionX's weight; the paper takes gamma >= 1 (1 for ViTs, 3 for causal LMs), values in
        [0, 1) are allowed for ablations. With kernel "diff", MH is the normalised, (1 - lambda_init)-
        scaled head output, so V and gamma MH are on different scales.
    beta: the weight of the accumulated earlier updates for residual "accumulated".
    kernel: "softmax", "diff" (differential attention; needs an even head size and a layer index; no
        attention dropout) or "linear" (elu + 1 feature map; no attention dropout).
    symmetric: tie K to Q (no W^K), with any kernel.
    probe: keep the last forward's MH, V, residual and attention statistics in `module.probes`.
    self_loops: whether each token attends to itself in the token graph a model builds (ViT's full
        graph); False drops the diagonal, the AttentionX paper's ViT setting (alpha_kk = 0, MATH.md 5).
        GPT (token 0 would attend to nothing) and GraphTransformer (its graph is passed in) refuse False.
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

    def __post_init__(self):
        for name in ("d_model", "n_head"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.residual not in RESIDUALS:
            raise ValueError(f"unknown residual {self.residual!r}; choose one of {', '.join(RESIDUALS)}")
        if self.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; choose one of {', '.join(KERNELS)}")
        for name in ("gamma", "beta"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= value < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.kernel == "diff" and self.head_size % 2:
            raise ValueError(f"kernel 'diff' splits each head in two; the head size d_model / n_head = "
                             f"{self.head_size} must be even")
        if not (isinstance(self.dropout, numbers.Real) and not isinstance(self.dropout, bool) and 0 <= self.dropout < 1):
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        for name in ("symmetric", "bias", "probe", "self_loops"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def head_size(self):
        return self.d_model // self.n_head
