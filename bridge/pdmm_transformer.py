"""PDMM for distributed averaging, built by hand as a GraphTransformer: block k is PDMM iteration k.

For f_i(x) = 1/2 (x - a_i)^2 with consensus constraints and theta = 1 (docs/theory/pdmm.md section 8), v_i = u_i / d_i
(u_i = sum_j A_ij z_{i|j}) and inv_i = 1 / (1 + rho d_i), PDMM needs no edge state
(docs/pdmm_transformer.md derives it):

    x_i^{k+1} = a_i inv_i - ((1 - inv_i) / rho) v_i^k
    v_i^{k+1} = w_i^k - 2 rho mean_{j in N(i)} x_j^{k+1},     w_i^k = v_i^{k-1} + 2 rho x_i^k

The residual stream holds (a, d, inv, 1, x^k, w^{k-1}, v^{k-1}) per node. Block k+1 aggregates with equal
scores (W^Q = W^K = 0, token graph without self loops: attention is the neighbour mean of x^k, each edge
gathering x_j^k) and adds -2 rho mean x^k to the w channel, which then holds v^k; the bilinear MLP
W_3 ((W_1 h) * (W_2 h)) fuses (the node's local update):
x <- a inv - ((1 - inv) / rho) v^k, w <- v^{k-1} + 2 rho x^k, v <- v^k (linear terms are products with
the constant 1). No LayerNorm. start="zero" runs from x^0 = 0 (u^0 = u^{-1} = 0); start="a" from
x^0 = a as pdmm.solve(..., x0=a) does (v^{-1} = -rho a, and the first block adds -rho mean a, giving
v^0 = -rho mean_{N(i)} a).

Training (fit_graph_model): full-batch Adam on the mean over layers and instances of e^2,
e = ||x^k - x*|| / ||a - x*|| per instance (x* = mean(a) at every node). From the PDMM weights it
measures whether gradient descent finds a better k-round averaging rule than PDMM on the training
family, and weight_shift says how far it moved from PDMM to get there; init="random" gives the same
architecture with GPT-2 random weights, so both starts are compared at equal capacity.
"""

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast  # cast: numbers.Real's stubs lack >; ModuleList items are Modules

import networkx as nx
import numpy.typing as npt
import torch
from torch import Tensor

import attention

from .consensus import disagreement_error
from .fitting import FitLog, adam_keep_best

FeaturesFn = Callable[[nx.Graph, Tensor], Tensor]  # features_fn(G, a): the model's input for values a (B, n)
Prepared = list[tuple[attention.TokenGraph, Tensor, Tensor]]  # [(token graph, features, a)]

A, D, INV, ONE, X, W, V = range(7)  # residual stream channels
D_MODEL, HIDDEN = 7, 5
STARTS, INITS, KERNELS = ("zero", "a"), ("pdmm", "random"), ("softmax", "mean")


def pdmm_transformer(
    rho: float,
    n_layer: int,
    start: str = "zero",
    init: str = "pdmm",
    seed: int = 0,
    kernel: str = "softmax",
    tied: bool = False,
) -> attention.GraphTransformer:
    """The float64 GraphTransformer (7 channels, one head, bilinear MLP 5 wide, no norm) whose readout after
    block k is PDMM's x^k (the module docstring; docs/pdmm_transformer.md section 3).

    Parameters
    ----------
    rho : float
        PDMM's penalty, finite and > 0.
    n_layer : int
        The number of blocks, >= 1.
    start : str
        "zero" (x^0 = 0) or "a" (x^0 = a, as pdmm.solve(..., x0=a)).
    init : str
        "pdmm" (the hand-set weights) or "random" (the architecture with GPT-2 random weights from `seed`).
    seed : int
        Seeds the random initialisation (torch's global generator is left as it was).
    kernel : str
        "softmax" sends a 7-number key and value per edge and round (PDMM's weights leave the keys 0);
        "mean" sends the value alone, one number (send_width 1: the neighbour mean of x, all PDMM needs;
        docs/pdmm_transformer.md, "One number per edge").
    tied : bool
        Repeat one block, PDMM's every-round block; needs start="zero" (from x^0 = a PDMM's first block
        differs from the others).

    Returns
    -------
    attention.GraphTransformer
        In float64, in_features 3 (pdmm_features), out_features 1.

    Raises
    ------
    ValueError
        Naming the argument that is out of range or a combination that cannot run.
    """
    check_rho(rho)
    if not (isinstance(n_layer, numbers.Integral) and not isinstance(n_layer, bool) and n_layer >= 1):
        raise ValueError(f"n_layer must be a positive integer, got {n_layer!r}")
    if start not in STARTS:
        raise ValueError(f"start must be 'zero' (x^0 = 0) or 'a' (x^0 = a), got {start!r}")
    if init not in INITS:
        raise ValueError(f"init must be 'pdmm' (hand-set weights) or 'random', got {init!r}")
    if kernel not in KERNELS:
        raise ValueError(
            f"kernel must be 'softmax' (key and value, 14 numbers) or 'mean' (the value, 1 number), got {kernel!r}"
        )
    if not isinstance(tied, bool):
        raise ValueError(f"tied must be true or false, got {tied!r}")
    if tied and start != "zero":
        raise ValueError(
            "a tied pdmm_transformer repeats PDMM's every-round block, which is PDMM from x^0 = 0 only: "
            "use start='zero'"
        )
    config = attention.AttentionConfig(
        d_model=D_MODEL,
        n_head=1,
        residual="standard",
        kernel=kernel,
        bias=False,
        send_width=1 if kernel == "mean" else None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = attention.GraphTransformer(
            config, int(n_layer), in_features=3, out_features=1, tied=tied, norm=None, mlp="bilinear", hidden=HIDDEN
        ).to(torch.float64)
    if init == "pdmm":
        set_pdmm_weights(model, float(rho), start)
    return model


def check_rho(rho: Any) -> None:
    """Raise unless rho is a finite number > 0."""
    if not (
        isinstance(rho, numbers.Real) and not isinstance(rho, bool) and math.isfinite(rho) and cast(float, rho) > 0
    ):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")


@torch.no_grad()
def set_pdmm_weights(model: attention.GraphTransformer, rho: float, start: str) -> None:
    """Overwrite every weight of a pdmm_transformer model so that block k computes PDMM iteration k."""
    for p in model.parameters():
        p.zero_()
    e = model.embed  # features (a, d, inv) -> stream; the bias is the constant channel
    e.weight[A, 0] = e.weight[D, 1] = e.weight[INV, 2] = e.bias[ONE] = 1
    if start == "a":
        e.weight[X, 0], e.weight[V, 0] = 1, -rho  # x^0 = a, v^{-1} = -rho a
    for k, block in enumerate(cast(Iterable[attention.Block], model.blocks)):
        values = block.attn.config.value_width  # the last rows of c_attn
        block.attn.c_attn.weight[-values, X] = 1  # W^Q = W^K = 0 (none with kernel "mean"); the value is x
        block.attn.c_proj.weight[W, 0] = -rho if (k == 0 and start == "a") else -2 * rho
        mlp = cast(attention.BilinearMLP, block.mlp)  # pdmm_transformer builds mlp="bilinear"
        fc, gate, proj = mlp.c_fc.weight, mlp.c_gate.weight, mlp.c_proj.weight
        fc[0, A], gate[0, INV] = 1, 1  # a * inv
        fc[1, W], gate[1, ONE], gate[1, INV] = 1, 1 / rho, -1 / rho  # v^k * (1 - inv) / rho
        for unit, channel in ((2, X), (3, W), (4, V)):  # x, v^k, v^{k-1} times 1
            fc[unit, channel], gate[unit, ONE] = 1, 1
        proj[X, 0], proj[X, 1], proj[X, 2] = 1, -1, -1  # x <- a inv - (1 - inv) v^k / rho
        proj[W, 4], proj[W, 2], proj[W, 3] = 1, 2 * rho, -1  # w <- v^{k-1} + 2 rho x^k
        proj[V, 3], proj[V, 4] = 1, -1  # v <- v^k
    model.readout.weight[0, X] = 1


def pdmm_features(G: nx.Graph, a: npt.ArrayLike | Tensor, rho: float) -> Tensor:
    """(B, n, 3) node features (a_i, d_i, 1 / (1 + rho d_i)) in G.nodes order from values a (B, n).

    Parameters
    ----------
    G : networkx.Graph
        The graph; d_i is node i's degree.
    a : array_like or torch.Tensor
        (B, n) node values (integers become float64).
    rho : float
        PDMM's penalty, finite and > 0.

    Returns
    -------
    torch.Tensor
        (B, n, 3) in a's float dtype and device.

    Raises
    ------
    TypeError
        When G is not a networkx graph.
    ValueError
        When rho is not a finite number > 0 or a is not (B, n).
    """
    if not isinstance(G, nx.Graph):
        raise TypeError(f"pdmm_features needs a networkx graph, got {type(G).__name__}")
    check_rho(rho)
    a = torch.as_tensor(a)
    a = a if a.is_floating_point() else a.double()
    if a.dim() != 2 or a.shape[1] != G.number_of_nodes():
        raise ValueError(f"a must have shape (B, {G.number_of_nodes()}), got {tuple(a.shape)}")
    d = torch.tensor([G.degree(v) for v in G.nodes], dtype=a.dtype, device=a.device).expand_as(a)
    return torch.stack([a, d, 1 / (1 + rho * d)], dim=-1)


def prepare_instances(
    model: torch.nn.Module,
    instances: Sequence[tuple[nx.Graph, Any]],
    features_fn: FeaturesFn,
    self_loops: bool = False,
) -> Prepared:
    """[(TokenGraph, features, a)] in the model's dtype and device from [(networkx graph, a (B, n))]."""
    p = next(model.parameters())
    out = []
    for G, a in instances:
        a = torch.as_tensor(a, dtype=p.dtype, device=p.device)
        out.append((attention.TokenGraph.from_networkx(G, self_loops=self_loops), features_fn(G, a), a))
    return out


def errors(model: attention.GraphTransformer, prepared: Prepared) -> Tensor:
    """(n_layer, instances) errors e of the readout after every layer."""
    return torch.cat([disagreement_error(model(features, graph)[..., 0], a) for graph, features, a in prepared], dim=1)


def graph_errors(
    model: attention.GraphTransformer,
    instances: Sequence[tuple[nx.Graph, Any]],
    features_fn: FeaturesFn,
    self_loops: bool = False,
) -> Tensor:
    """(n_layer, instances) errors e = ||x^k - x*|| / ||a - x*|| after every layer, no gradients.

    Parameters
    ----------
    model : attention.GraphTransformer
        E.g. a pdmm_transformer.
    instances : sequence of (networkx.Graph, array_like)
        Graphs and values a (B, n) on them.
    features_fn : callable
        features_fn(G, a) gives the model's input for values a (B, n), e.g. pdmm_features with rho bound.
    self_loops : bool
        Whether each node's token attends to itself (pdmm_transformer: False).

    Returns
    -------
    torch.Tensor
        (n_layer, total instances) errors.

    Raises
    ------
    TypeError
        When a graph is not a networkx graph.
    """
    with torch.no_grad():
        return errors(model, prepare_instances(model, instances, features_fn, self_loops))


def fit_graph_model(
    model: attention.GraphTransformer,
    instances: Sequence[tuple[nx.Graph, Any]],
    steps: int,
    lr: float,
    features_fn: FeaturesFn,
    self_loops: bool = False,
    validation: Sequence[tuple[nx.Graph, Any]] | None = None,
) -> FitLog:
    """Full-batch Adam on mean(e^2) over layers and instances (docs/pdmm_transformer.md section 4). The model
    ends with the parameters of the lowest loss seen, as bridge.learned.fit does (a run that blows up keeps
    its best point); with `validation`, of the lowest validation loss, stopping once it plateaus
    (bridge.fitting).

    From the PDMM weights keep lr small (about 1e-4 at 8 layers): Adam's first steps move every
    weight, the zero ones too, by about lr, and the products of 8 blocks amplify that.

    Parameters
    ----------
    model : attention.GraphTransformer
        The model to train, in place.
    instances : sequence of (networkx.Graph, array_like)
        Training graphs and values a (B, n).
    steps : int
        At most this many Adam steps, >= 0.
    lr : float
        Adam's learning rate, > 0.
    features_fn : callable
        features_fn(G, a) gives the model's input for values a (B, n).
    self_loops : bool
        Whether each node's token attends to itself.
    validation : sequence of (networkx.Graph, array_like) or None
        Validation instances for the plateau rule.

    Returns
    -------
    FitLog
        The losses before every step and after the last (`steps + 1`, fewer if the loss stopped being finite
        or plateaued), the kept step and why it stopped.

    Raises
    ------
    ValueError
        When steps or lr is out of range or instances is empty.
    """
    if not (isinstance(steps, numbers.Integral) and not isinstance(steps, bool) and steps >= 0):
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if not (isinstance(lr, numbers.Real) and lr > 0):
        raise ValueError(f"lr must be > 0, got {lr!r}")
    if not instances:
        raise ValueError("fit_graph_model needs at least one (graph, a) instance")
    prepared = prepare_instances(model, instances, features_fn, self_loops)
    held = None if validation is None else prepare_instances(model, validation, features_fn, self_loops)
    return adam_keep_best(
        model,
        lambda: errors(model, prepared).square().mean(),
        steps,
        lr,
        None if held is None else lambda: errors(model, held).square().mean(),
    )


def weight_shift(model: torch.nn.Module, reference: torch.nn.Module) -> float:
    """||theta - theta_0|| / ||theta_0|| over all parameters, theta_0 those of `reference` (same architecture).

    Parameters
    ----------
    model : torch.nn.Module
        The trained model.
    reference : torch.nn.Module
        The same architecture, e.g. the untrained pdmm_transformer.

    Returns
    -------
    float
        The relative distance.
    """
    ref = dict(reference.named_parameters())
    pairs = [(p.detach(), ref[name].detach()) for name, p in model.named_parameters()]
    diff = torch.sqrt(cast(Tensor, sum((p - q).square().sum() for p, q in pairs)))
    return float(diff / torch.sqrt(cast(Tensor, sum(q.square().sum() for _, q in pairs))))
