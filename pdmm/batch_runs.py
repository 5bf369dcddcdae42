"""A method's runs at every value of a grid, as one batched run (docs/decentralised.md section 8).

pdmm.tune used to run a method once per grid value, G small runs one after another. Here the values go on the
batch axis instead: the problem's B instances are tiled G times (Problem.tiled), instance g B + b holds value g
(rho or alpha as a per-instance tensor, pdmm.methods), and one run steps all G B instances at once. Every
operation of a step acts on each instance alone, so each value's iterates are those of its own run with a number
(tests/test_batch_runs.py checks them to 1e-12). Each value stops as its own run would, by the tests of
pdmm.loop.Bookkeeping.tests combined over its own B instances: diverged where its x or residual is not finite or
its residual has grown, done where every instance has reached the target (or passes the tol = 0 test), cut at its
budget, the fewest iterations to the target of the earlier values (pdmm.tune's rule). The values that have stopped
leave the batch at once (the run is built again for the others and goes on from their state), so a diverged value
affects no other and no value is stepped past its own end; the run ends when every value has stopped. A grid is
cut into batches whose edge state fits about a core's cache (BATCH_BYTES, pieces), beyond which a batch runs no
faster than its values one at a time.
"""

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from .building import local_curvature
from .loop import RunOptions, expand_instances
from .problem import Problem, node_data
from .settings import Engine, Recording, Stopping
from .solve import Prepared, _prepare, checked_options, checked_rho

Outcome = tuple[int, bool, float, bool]  # (iterations, reached, worst error there (inf: diverged), diverged)
BATCH_BYTES = 2**21  # a batch's edge state at most, E B d numbers per value: about a core's cache (BENCHMARKS.md)


def pieces(values: Sequence[Any], per_value: int) -> list[Sequence[Any]]:
    """The values in consecutive batches whose edge states take at most BATCH_BYTES each, one value at least: beyond
    a core's cache a batch runs no faster than its values one at a time (BENCHMARKS.md, "Tuning on a grid").

    Parameters
    ----------
    values : sequence
        The grid.
    per_value : int
        The bytes of one value's edge state (E B d numbers of the run's dtype).

    Returns
    -------
    list of sequence
        The batches, in grid order.
    """
    size = max(1, BATCH_BYTES // max(per_value, 1))
    return [values[i : i + size] for i in range(0, len(values), size)]


def per_instance(values: Sequence[float], batch: int, like: torch.Tensor) -> torch.Tensor:
    """The values on the batch axis: each repeated for `batch` instances, value g at instances g B .. g B + B - 1.

    Parameters
    ----------
    values : sequence of float
        G values.
    batch : int
        B, the instances of one value.
    like : torch.Tensor
        A tensor of the run's dtype and device.

    Returns
    -------
    torch.Tensor
        (G B,) in like's dtype, on its device.
    """
    return torch.as_tensor(np.asarray(values, dtype=np.float64)).repeat_interleave(batch).to(like.device, like.dtype)


def batch_outcomes(
    problem: Problem,
    method: str,
    parameter: str,
    values: Sequence[float],
    max_iter: int,
    target: float,
    reference: Any,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float64,
    **params: Any,
) -> list[Outcome]:
    """Each value's run of pdmm.tune (pdmm.solve with tol=0, target, from x^0 = 0), all in one batch: the outcome of
    value g is that of its own run with max_iter cut to the fewest iterations in which an earlier value reached the
    target (this module's docstring; docs/decentralised.md section 8).

    Parameters
    ----------
    problem : pdmm.Problem
        The problem, B instances.
    method : str
        A method with rho (pdmm, qa-pdmm, admm) or a step size alpha (dgd, extra, nids, gradient-tracking).
    parameter : str
        "rho" or "alpha", what the values are.
    values : sequence of float
        The grid, finite numbers > 0.
    max_iter : int
        The budget of iterations of the first value.
    target : float
        The relative error every instance aims at.
    reference : array_like
        x*, (n, d) or (B, n, d).
    device : torch.device or str
        Where the run takes place.
    dtype : torch.dtype
        The run's float dtype.
    **params
        The method's other parameters.

    Returns
    -------
    list of tuple
        Per value: (iterations, reached, the worst instance's error at the last of them (inf when diverged),
        diverged).

    Raises
    ------
    ValueError
        For what pdmm.solve refuses with some value of the grid.
    """
    G, B = len(values), problem.batch
    x_star = expand_instances(problem, node_data("reference", reference, problem.n, (problem.dim,)))
    curvature = local_curvature(problem)
    for value in values:  # what pdmm.plan refuses for one value, refused for the grid
        checked_rho(method, float(value) if parameter == "rho" else None, problem, dtype, curvature)
    like = torch.empty(0, dtype=dtype, device=device)
    first = {parameter: float(values[0])}
    options = checked_options(  # pdmm.plan's checks, once, of all G values' instances: instance g B + b is value g's
        problem.tiled(G),
        method=method,
        rho=first.get("rho"),
        x0=None,
        seed=0,
        network=None,
        method_params={**params, **({} if parameter == "rho" else first)},
        stopping=Stopping(
            max_iter=max_iter,
            tol=0,
            target=target,
            check_every=1,
            on_divergence="return",  # the loop below records a diverged value as an outcome, as tune's lone runs do
        ),
        recording=Recording(
            history=("error",), record_every=max_iter, reference=x_star.repeat(1, G, 1).permute(1, 0, 2)
        ),
        engine=Engine(device=device, dtype=dtype),
    )

    def start(live: list[int]) -> Prepared:
        """The run of the values `live` (indices into values), from x^0 = 0: the checked options of their
        instances, with each value on its own."""
        grid = per_instance([values[g] for g in live], B, like)
        kept = _kept(options, torch.cat([torch.arange(g * B, g * B + B) for g in live]))
        if parameter == "rho":
            kept = replace(kept, rho=grid)
        else:
            kept = replace(kept, method_params={**params, parameter: grid})
        return _prepare(problem.tiled(len(live)), kept)

    live = list(range(G))
    run = start(live)
    state, baseline = run.state, None
    outcomes: list[Outcome | None] = [None] * G
    with torch.no_grad():
        for k in range(1, max_iter + 1):
            new, seen = run.step(state), dict[str, torch.Tensor]()
            if baseline is None:  # iteration 1's residual, what the divergence test measures growth from
                baseline = run.book.residual(new["x"], seen)
            passes, reached, _, finite, grown, _ = run.book.tests(new, state, seen, baseline, 0.0, target)
            flags = torch.stack([passes, reached, finite & ~grown]).view(3, len(live), B).all(2)
            worst = run.book.error(new["x"], seen).view(len(live), B).amax(1)
            done, hit, healthy, worst = np.asarray(torch.cat([flags.to(worst.dtype), worst[None]]).tolist())
            state = new
            for at, g in enumerate(live):
                budget = min([max_iter] + [o[0] for o in outcomes[:g] if o is not None and o[1]])
                if not healthy[at]:  # diverged: pdmm.solve raises before it stops
                    outcomes[g] = (k, False, math.inf, True)
                elif done[at] or hit[at] or k >= budget:
                    outcomes[g] = (k, bool(worst[at] <= target), float(worst[at]), False)
            kept = [at for at, g in enumerate(live) if outcomes[g] is None]
            if not kept:
                break
            if len(kept) < len(live):  # the values that stopped leave the batch; the others go on from their state
                index = torch.cat([torch.arange(at * B, at * B + B) for at in kept]).to(device)
                live = [live[at] for at in kept]
                run = start(live)
                state = {key: _instances(t, index) for key, t in state.items()}
                baseline = baseline.index_select(0, index)
    return [o for o in outcomes if o is not None]


def _instances(t: Any, index: torch.Tensor) -> Any:
    """A state entry of the kept instances: the rows `index` of the batch axis of a node or edge tensor (N, B, w); a
    round counter as it is."""
    return t.index_select(1, index) if torch.is_tensor(t) and t.dim() == 3 else t


def _kept(options: RunOptions, index: torch.Tensor) -> RunOptions:
    """options of the instances `index` (int64, on the CPU) of the problem they were checked on: its reference,
    scale and curvature taken at them; the rest as checked."""
    scale, curvature, reference = options.scale, options.curvature, options.recording.reference
    return replace(
        options,
        recording=replace(options.recording, reference=reference.index_select(0, index.to(reference.device))),
        scale=None if scale is None else scale.index_select(0, index.to(scale.device)),
        curvature=None if curvature is None else curvature.index_select(1, index.to(curvature.device)),
    )
