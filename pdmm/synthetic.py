"""Synthetic per-node data for every problem kind, and the problem built from a kind and its data.

data = make_data("lasso", n=G.number_of_nodes(), dim=5, seed=0)
problem = make_problem("lasso", G, data, lam=0.1)
"""

import numpy as np

from . import problem as constructors
from .graph_files import available_memory

DATA_KEYS = {
    "averaging": ("a",),
    "least_squares": ("H", "y"),
    "lasso": ("H", "y"),
    "logistic": ("X", "y"),
    "quadratic": ("P", "q"),
}
KINDS = tuple(DATA_KEYS)
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


def make_problem(kind, G, data, ridge=0.0, lam=0.1, reg=0.1):
    """pdmm.<kind>(G, *data arrays) with its own weight: ridge (least_squares), lam (lasso), reg (logistic).

    data: a mapping holding the arrays DATA_KEYS[kind] names (as make_data returns); other keys are ignored.
    """
    _check_kind(kind)
    missing = [key for key in DATA_KEYS[kind] if key not in data]
    if missing:
        raise ValueError(f"{kind} needs data arrays {list(DATA_KEYS[kind])}; missing {missing} (got {sorted(data)})")
    weights = {"least_squares": {"ridge": ridge}, "lasso": {"lam": lam}, "logistic": {"reg": reg}}
    arrays = [np.asarray(data[key]) for key in DATA_KEYS[kind]]
    return getattr(constructors, kind)(G, *arrays, **weights.get(kind, {}))
