"""Iterations to a target error under simulated networks, over seeds: what `pdmm-bridge network-sweep` reports.

One cell = one method under one network setting: for each seed s, a random geometric graph
(seed s), averaging data a ~ N(0, 1) (seed s) and network draws (seed s); the count is the first
iteration k with ||x^k - x*||_F / ||x*||_F <= target, x* = mean(a) exact
(docs/theory/pdmm.md section 8), or None if not reached within max_iter.
"""

import math

import numpy as np
from scipy import stats

from pdmm.network import Network
from pdmm.problem import averaging
from pdmm.solve import solve
from pdmm.topologies import topology

AXES = {"drop": (0.1, 0.3, 0.5), "wake": (0.9, 0.7, 0.5), "bits": (16, 20, 24, 32)}
METHODS = {"pdmm": ("pdmm", {}), "averaged pdmm": ("pdmm", {"theta": 0.5}), "admm": ("admm", {})}


def network(axis, value, seed):
    """The Network of one setting: drop or wake probability, or b bits with subtractive dither; None: ideal."""
    if axis is None:
        return Network(seed=seed)
    if axis == "bits":
        return Network(bits=value, dither=True, seed=seed)
    return Network(**{axis: value}, seed=seed)


def iterations_to_target(problem, x_star, method, params, net, target, max_iter, rho):
    """The first iteration whose relative error is <= target, or None within max_iter."""
    result = solve(
        problem,
        method=method,
        rho=rho,
        max_iter=max_iter,
        tol=0,
        reference=x_star,
        network=net,
        target=target,
        history=("error",),
        record_every=1,
        **params,
    )
    hit = np.flatnonzero(result.history["error"] <= target)
    return int(result.history["iteration"][hit[0]]) if hit.size else None


def network_sweep(
    axes=AXES, methods=METHODS, seeds=(0, 1, 2), n=100, dim=3, rho=1.0, target=1e-6, max_iter=3000, progress=None
):
    """[{"axis", "value", "method", "iterations": [per seed, None = not reached]}], the ideal network first
    (axis None)."""
    if not (isinstance(n, int) and n >= 2 and isinstance(dim, int) and dim >= 1):
        raise ValueError(f"n must be >= 2 and dim >= 1 integers, got n={n!r}, dim={dim!r}")
    if not (0 < target < 1):
        raise ValueError(f"target must be in (0, 1), got {target!r}")
    unknown = sorted(set(axes) - set(AXES))
    if unknown:
        raise ValueError(f"unknown axes {unknown}; choose from {sorted(AXES)}")
    settings = [(None, None)] + [(axis, value) for axis, values in axes.items() for value in values]
    instances = []
    for seed in seeds:
        a = np.random.default_rng(seed).normal(size=(n, dim))
        instances.append((averaging(topology("random_geometric", n=n, seed=seed), a), np.tile(a.mean(0), (n, 1))))
    rows = []
    for axis, value in settings:
        for label, (method, params) in methods.items():
            counts = [
                iterations_to_target(problem, x_star, method, params, network(axis, value, seed), target, max_iter, rho)
                for seed, (problem, x_star) in zip(seeds, instances, strict=False)
            ]
            rows.append({"axis": axis, "value": value, "method": label, "iterations": counts})
            if progress:
                progress(rows[-1])
    return rows


def paired_interval(first, second, level=0.95):
    """Mean of first - second over paired seeds and its t interval: (mean, low, high); None if a value is
    missing or fewer than 2 pairs."""
    if len(first) < 2 or any(v is None for v in (*first, *second)):
        return None
    d = np.asarray(first, dtype=float) - np.asarray(second, dtype=float)
    half = stats.t.ppf((1 + level) / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half
