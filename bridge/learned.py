"""Learned PDMM: per-layer rho_k and theta_k of an UnrolledPDMM trained over a family of problems.

learned_vs_constant runs the experiment of `pdmm-bridge learn-pdmm`. The family is distributed averaging,
f_i(x) = 1/2 ||x - a_i||^2 with a_i ~ N(1, 1), on random graphs of a topology with n drawn from
[n_min, n_max]. The training loss is the mean over a fixed set of training instances of log e_K^2,
e_K = ||x^K - x*||_F / ||x*||_F the relative error after K layers (as in pdmm.solve's history["error"]),
minimised full batch with Adam; the baseline is the best constant rho on the same training instances,
which is also where training starts.
"""

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

import pdmm

from .consensus import GraphFamily
from .fitting import FitLog, adam_keep_best
from .unrolled import UnrolledPDMM

Instance = tuple[Any, ...]  # (problem, x*) or (problem, x*, x0)


@dataclass
class Family:
    """Random averaging instances: `batch` of them per graph, `dim`-dimensional."""

    topology: str = "random_geometric"
    n_min: int = 32
    n_max: int = 64
    dim: int = 1
    batch: int = 16

    def sample(self, rng: np.random.Generator) -> tuple[pdmm.Problem, Tensor]:
        """(problem, x*) with x* the consensus solution, (B, n, d)."""
        G = GraphFamily(self.topology, self.n_min, self.n_max).sample(rng)
        n = G.number_of_nodes()
        a = 1.0 + rng.normal(size=(self.batch, n, self.dim))
        problem = pdmm.averaging(G, a)
        problem.batched = True  # keep the batch axis even for batch = 1
        x_star = torch.as_tensor(a.mean(axis=1, keepdims=True)).expand(self.batch, n, self.dim)
        return problem, x_star


def relative_errors(iterates: Tensor, x_star: Tensor) -> Tensor:
    """e_k = ||x^k - x*||_F / ||x*||_F per layer and instance: (K, B, n, d) -> (K, B)."""
    return (iterates - x_star).square().sum((-2, -1)).sqrt() / x_star.square().sum((-2, -1)).sqrt()


def fit(
    model: UnrolledPDMM,
    instances: Sequence[Instance],
    steps: int,
    lr: float | None = None,
    validation: Sequence[Instance] | None = None,
) -> FitLog:
    """Adam (lr 0.2 / K by default) on the model's rho_k, theta_k, full batch over the training
    `instances` [(problem, x*)] or [(problem, x*, x0)], for `steps` steps or, given `validation`
    instances, until their loss plateaus (bridge.fitting.adam_keep_best); the model ends with the
    parameters of the lowest training (validation) loss. Returns the FitLog of the losses, the mean
    log e_K^2 over every instance."""

    def loss_on(data: Sequence[Instance]) -> Callable[[], Tensor]:
        count = sum(len(instance[1]) for instance in data)
        return lambda: cast(  # a sum of tensors: a tensor
            Tensor,
            sum(
                torch.log(relative_errors(model(problem, *start), x_star)[-1].square() + 1e-300).sum()
                for problem, x_star, *start in data
            )
            / count,
        )

    return adam_keep_best(
        model,
        loss_on(instances),
        steps,
        0.2 / model.layers if lr is None else lr,
        None if validation is None else loss_on(validation),
    )


@torch.no_grad()
def errors(model: UnrolledPDMM, instances: Sequence[Instance]) -> Tensor:
    """(K, total instances) relative errors of `model` on [(problem, x*)]."""
    return torch.cat([relative_errors(model(problem, *start), x_star) for problem, x_star, *start in instances], dim=1)


def best_constant_rho(
    layers: int, instances: Sequence[Instance], grid: np.ndarray | None = None, theta: float = 1.0
) -> float:
    """The rho of `grid` whose K-iteration PDMM has the smallest geometric-mean final error on `instances`."""
    grid = np.logspace(-2, 1.5, 36) if grid is None else grid
    scores = [
        torch.log(errors(UnrolledPDMM(layers, rho=float(rho), theta=theta), instances)[-1]).mean().item()
        for rho in grid
    ]
    return float(grid[int(np.nanargmin(scores))])


def geometric_mean(values: Tensor) -> float:
    """exp(mean(log values))."""
    return float(torch.exp(torch.log(values).mean()))


HELD_OUT = {  # name -> the family held-out instances come from
    "same family": Family(),
    "larger graphs (n 96-128)": Family(n_min=96, n_max=128),
    "small world (n 32-64)": Family(topology="small_world"),
    "grid (n 36-64)": Family(topology="grid", n_min=36, n_max=64),
}


def instances(family: Family, count: int, seed: int) -> list[tuple[pdmm.Problem, Tensor]]:
    """`count` (problem, x*) instances of `family` drawn from `seed`."""
    rng = np.random.default_rng(seed)
    return [family.sample(rng) for _ in range(count)]


def learned_vs_constant(
    layers: Iterable[int],
    train_graphs: int = 16,
    test_graphs: int = 16,
    steps: int = 150,
    seed: int = 0,
    report: Callable[[str], object] = print,
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]], dict[int, tuple[list[float], list[float]]]]:
    """For each K in `layers`: the best constant rho on training instances of Family(), then learned PDMM
    started there and fitted (fit), both evaluated on the training instances and on HELD_OUT
    (docs/theory/pdmm.md section 13; the module docstring for the loss).

    Parameters
    ----------
    layers : iterable of int
        The depths K to compare.
    train_graphs, test_graphs : int
        Graphs in the training set and in each held-out set (16 instances per graph).
    steps : int
        Adam steps of each fit.
    seed : int
        Seeds the training instances (seed) and the held-out sets (seed + 1000 + i).
    report : callable
        Called with one line per K.

    Returns
    -------
    results : list of dict
        One row per K and set {K, set, best_constant_rho, constant_error, learned_error, ratio}
        (geometric-mean error after K rounds; ratio < 1: learned is better).
    training : dict
        Per K what was fitted: seconds, best_constant_rho, rho_k, theta_k, loss_first, loss_best.
    curves : dict
        Per K the per-round geometric means (constant, learned) on "same family".
    """
    train_set = instances(Family(), train_graphs, seed)
    held_out = {
        name: instances(family, test_graphs, seed + 1000 + i) for i, (name, family) in enumerate(HELD_OUT.items())
    }
    results: list[dict[str, Any]] = []
    training: dict[int, dict[str, Any]] = {}
    curves: dict[int, tuple[list[float], list[float]]] = {}
    for K in layers:
        start = time.perf_counter()
        rho = best_constant_rho(K, train_set)
        constant = UnrolledPDMM(K, rho=rho)
        learned = UnrolledPDMM(K, rho=rho, learnable=True)
        losses = fit(learned, train_set, steps).losses
        training[K] = {
            "seconds": time.perf_counter() - start,
            "best_constant_rho": rho,
            "rho_k": learned.rho().tolist(),
            "theta_k": learned.theta().tolist(),
            "loss_first": losses[0],
            "loss_best": min(losses),
        }
        for name, data in {"training instances": train_set, **held_out}.items():
            e_const, e_learned = errors(constant, data), errors(learned, data)
            results.append(
                {
                    "K": K,
                    "set": name,
                    "best_constant_rho": rho,
                    "constant_error": geometric_mean(e_const[-1]),
                    "learned_error": geometric_mean(e_learned[-1]),
                    "ratio": geometric_mean(e_learned[-1]) / geometric_mean(e_const[-1]),
                }
            )
            if name == "same family":
                curves[K] = ([geometric_mean(e) for e in e_const], [geometric_mean(e) for e in e_learned])
        report(
            f"K = {K}: best constant rho {rho:.3g}, trained in {training[K]['seconds']:.0f} s; "
            + "; ".join(f"{r['set']}: ratio {r['ratio']:.3f}" for r in results if r["K"] == K)
        )
    return results, training, curves
