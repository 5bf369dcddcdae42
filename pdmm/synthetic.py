"""Synthetic per-node data for every problem kind, and the problem built from a kind and its data.

data = make_data("lasso", n=G.number_of_nodes(), dim=5, seed=0)
problem = make_problem("lasso", G, data, lam=0.1)
"""

from typing import Any

import numpy as np

from .array_graph import GraphLike, node_count
from .graph_files import available_memory
from .local import LocalFunction
from .problem import (
    Problem,
    averaging_local,
    lasso_local,
    least_squares_local,
    logistic_local,
    quadratic_local,
)

DATA_KEYS = {
    "averaging": ("a",),
    "least_squares": ("H", "y"),
    "lasso": ("H", "y"),
    "logistic": ("X", "y"),
    "quadratic": ("P", "q"),
}
KINDS = tuple(DATA_KEYS)
BATCHED_NDIM = {"a": 3, "H": 4, "X": 4, "y": 3, "P": 4, "q": 3}  # a data array's ndim with a batch axis (B, n, ...)
NOISE = 0.1
PEAK_COPIES = 4  # float64 copies of the largest data array that make_data and the problem hold at once


def _check_kind(kind):
    if kind not in DATA_KEYS:
        raise ValueError(f"unknown problem kind {kind!r}; choose one of {list(KINDS)}")


def make_data(kind, n, dim=3, samples=10, batch=None, seed=0):
    """Random data arrays for `kind` with rows per node, (B, n, ...) when `batch` is an int.

    averaging: a (n, d). least_squares / lasso: H (n, samples, d), y = H x_true + noise, with
    x_true sparse (a third of its entries nonzero) for lasso. logistic: X (n, samples, d),
    y = sign(X x_true + noise) in {-1, +1}. quadratic: P (n, d, d) symmetric positive definite, q (n, d).
    One x_true per instance, shared by all nodes.
    """
    _check_kind(kind)
    for name, value in (("n", n), ("dim", dim), ("samples", samples)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if batch is not None and not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"batch must be None or an integer >= 1, got {batch!r}")
    lead = (n,) if batch is None else (batch, n)
    _check_memory(kind, lead, dim, samples)
    rng = np.random.default_rng(seed)
    if kind == "averaging":
        return {"a": rng.normal(size=(*lead, dim))}
    if kind == "quadratic":
        M = rng.normal(size=(*lead, dim, dim))
        P = M @ np.swapaxes(M, -1, -2) / dim + 0.5 * np.eye(dim)
        return {"P": (P + np.swapaxes(P, -1, -2)) / 2, "q": rng.normal(size=(*lead, dim))}
    x_true = rng.normal(size=(*lead[:-1], dim))  # (d,) or (B, d)
    if kind == "lasso":
        x_true[..., max(1, dim // 3) :] = 0
    H = rng.normal(size=(*lead, samples, dim))
    signal = np.einsum("...nkd,...d->...nk", H, x_true)
    noisy = signal + NOISE * rng.normal(size=signal.shape)
    if kind == "logistic":
        return {"X": H, "y": np.where(noisy >= 0, 1.0, -1.0)}
    return {"H": H, "y": noisy}


def _check_memory(kind, lead, dim, samples):
    """ValueError, before anything is drawn, when the data and the problem built from it would take more memory
    than this process can have (pdmm.graph_files.available_memory): about PEAK_COPIES float64 copies of the largest
    array (the draws, their products and the problem's tensors)."""
    rows = dim * dim if kind == "quadratic" else dim if kind == "averaging" else samples * dim
    need = PEAK_COPIES * 8 * rows * int(np.prod(lead))
    available = available_memory()
    if available is not None and need > available:
        shape = " x ".join(
            map(
                str,
                (*lead, *((dim, dim) if kind == "quadratic" else (dim,) if kind == "averaging" else (samples, dim))),
            )
        )
        raise ValueError(
            f"synthetic {kind} data of shape {shape} would take about {need / 1e9:.3g} GB of memory, "
            f"more than the {available / 1e9:.3g} GB available; use fewer nodes, samples, dim or batch"
        )


def make_problem(kind: str, G: GraphLike, data: Any, ridge: float = 0.0, lam: float = 0.1, reg: float = 0.1) -> Problem:
    """pdmm.<kind>(G, *data arrays) with its own weight: ridge (least_squares), lam (lasso), reg (logistic); its
    local functions are make_local's, as a shard's (docs/guide/distributed.md, "Shards: pdmm-bridge partition").

    data: a mapping holding the arrays DATA_KEYS[kind] names (as make_data returns); other keys are ignored.
    """
    n = node_count(G)
    local, batched = make_local(kind, data, n, n, ridge=ridge, lam=lam, reg=reg)
    return Problem(G, local, batched=batched)


def make_local(
    kind: str, data: Any, rows: int, nodes: int, ridge: float = 0.0, lam: float = 0.1, reg: float = 0.1
) -> tuple[LocalFunction, bool]:
    """(the local functions of `rows` nodes of a `kind` problem on a graph of `nodes` nodes, whether the data has a
    batch axis), from `data`, the arrays DATA_KEYS[kind] names with those rows (as make_data returns, or
    node_rows keeps): the one function that builds a whole problem's (make_problem, pdmm.<kind>) and a shard's
    (pdmm.shards), so that a part's local function is the whole one's rows (docs/guide/distributed.md, "Shards:
    pdmm-bridge partition"). ValueError for an unknown kind, missing arrays, or what pdmm.<kind> refuses."""
    _check_kind(kind)
    missing = [key for key in DATA_KEYS[kind] if key not in data]
    if missing:
        raise ValueError(f"{kind} needs data arrays {list(DATA_KEYS[kind])}; missing {missing} (got {sorted(data)})")
    arrays = {key: np.asarray(data[key]) for key in DATA_KEYS[kind]}
    if kind == "averaging":
        return averaging_local(arrays["a"], rows)
    if kind == "least_squares":
        return least_squares_local(arrays["H"], arrays["y"], rows, ridge)
    if kind == "lasso":
        return lasso_local(arrays["H"], arrays["y"], rows, lam, nodes)
    if kind == "logistic":
        return logistic_local(arrays["X"], arrays["y"], rows, reg)
    return quadratic_local(arrays["P"], arrays["q"], rows)


def node_rows(kind: str, data: Any, index: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays DATA_KEYS[kind] names at the nodes `index` ((k,) int), in that order: each array's node axis (the
    first, or the second where the array has a batch axis, BATCHED_NDIM) indexed, the shapes otherwise kept."""
    _check_kind(kind)
    taken = {}
    for key in DATA_KEYS[kind]:
        array = np.asarray(data[key])
        taken[key] = np.take(array, index, axis=int(array.ndim == BATCHED_NDIM[key]))
    return taken
