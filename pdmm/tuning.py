"""Choosing a method's rho or step size alpha on a grid: the rule of docs/decentralised.md section 8.

    result = pdmm.tune(problem, "extra", reference="cvxpy", max_iter=3000)
    result.value                 # the chosen alpha
    pdmm.solve(problem, method="extra", alpha=result.value)

The rule: run the method once per grid value (tol = 0, so only the target or the budget stops a run)
and take the value that brings the relative error ||x - x*||_F / ||x*||_F of every instance to
`target` in the fewest iterations; ties go to the smaller error there, then to the earlier grid
value. When no value reaches the target within `max_iter`, take the value with the smallest error
(worst instance) after `max_iter`. Diverged runs never win. The default grids are rho in
10^{-2..2}, four values per decade (17), and alpha = alpha_auto 2^{j/2}, j = -2..12 (0.5 to 64
times the documented default, 15). The values run as one batch (pdmm/batch_runs.py), each as its
own run would, to 1e-12.
"""

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .batch_runs import batch_outcomes, pieces
from .methods import METHODS
from .network import Network
from .problem import Problem
from .protocol import STEP
from .solve import solve

TUNED = {  # method -> what pdmm.tune chooses: rho, or the step size alpha (their Capabilities, pdmm.protocol)
    name: "rho" if cls.capabilities.rho else STEP
    for name, cls in METHODS.items()
    if cls.capabilities.rho or cls.capabilities.step
}
RHO_GRID = tuple(10 ** (j / 4) for j in range(-8, 9))  # 0.01 .. 100, four per decade
ALPHA_FACTORS = tuple(2 ** (j / 2) for j in range(-2, 13))  # 0.5 .. 64 times alpha="auto", two per octave
TARGET = 1e-6


@dataclass
class Trial:
    """One grid value's run: `iterations` run, whether every instance `reached` the target (at the last of
    them), the worst instance's `error` there (inf when the run diverged) and whether it `diverged`."""

    value: float
    iterations: int
    reached: bool
    error: float
    diverged: bool


@dataclass
class Tuning:
    """What pdmm.tune chose (docs/decentralised.md section 8).

    Attributes
    ----------
    method : str
        The method tuned.
    parameter : str
        The parameter tuned, "rho" or "alpha".
    value : float
        Its chosen value.
    trials : list of Trial
        Every grid value's run, in grid order.
    target : float
        The relative error the runs aimed at.
    max_iter : int
        The budget of iterations per run.
    params : dict
        The method's other parameters, fixed.
    seconds : float
        The time all the runs took.
    """

    method: str
    parameter: str
    value: float
    trials: list[Trial]
    target: float
    max_iter: int
    params: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def best(self) -> Trial:
        """The chosen value's trial."""
        return next(trial for trial in self.trials if trial.value == self.value)

    @property
    def at_edge(self) -> bool:
        """Whether the chosen value is the grid's first or last: a wider grid might do better."""
        return self.value in (self.trials[0].value, self.trials[-1].value)


def tuned_parameter(method: str) -> str:
    """ "rho" or "alpha": what pdmm.tune chooses for `method`; ValueError for a method with neither."""
    if method not in TUNED:
        untuned = ", ".join(name for name in METHODS if name not in TUNED)
        raise ValueError(
            f"{method!r} has no rho or step size to tune; tune takes {', '.join(TUNED)} ({untuned} have neither)"
        )
    return TUNED[method]


def default_grid(problem: Problem, method: str, **params) -> np.ndarray:
    """The grid pdmm.tune tries by default: RHO_GRID for pdmm, qa-pdmm and admm; for dgd, extra, nids and
    gradient-tracking ALPHA_FACTORS times the method's alpha="auto" on `problem` (with its `params`, e.g.
    mixing; the smallest over a batch's instances)."""
    if tuned_parameter(method) == "rho":
        return np.array(RHO_GRID)
    graph, local, edges = problem.compile("cpu", torch.float64)
    built: Any = METHODS[method](graph, local, edges, None, **{**params, "alpha": "auto"})  # capabilities.step
    auto = float(built.alpha.min())
    return auto * np.array(ALPHA_FACTORS)


def tune(
    problem: Problem,
    method: str,
    reference: Any = "cvxpy",
    values: Any = None,
    target: float = TARGET,
    max_iter: int = 1000,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float64,
    network: Network | None = None,
    progress: bool = False,
    **params: Any,
) -> Tuning:
    """Choose `method`'s rho or alpha on `problem` by the rule of this module's docstring (docs/decentralised.md
    section 8).

    Each value's run is pdmm.solve(..., tol=0, target=target, max_iter=max_iter, device=device, dtype=dtype,
    network=network) with params, from x^0 = 0; once a value has reached the target in k iterations, the later
    values run at most k iterations, as they cannot win after that, which leaves the choice unchanged. The values
    run as one batch, in pieces of pdmm.batch_runs.BATCH_BYTES (pdmm.batch_runs.batch_outcomes: each value's trial
    that of its own run, to 1e-12); over a network one after another, as its events are drawn per instance.

    Parameters
    ----------
    problem : pdmm.Problem
        The problem to tune on.
    method : str
        A method with rho (pdmm, qa-pdmm, admm) or a step size alpha (dgd, extra, nids, gradient-tracking).
    reference : str or array_like
        "cvxpy" (pdmm.reference, solved once) or the solution x* as an array.
    values : array_like or None
        The grid, finite numbers > 0; None: default_grid.
    target : float
        The relative error ||x - x*||_F / ||x*||_F each run aims at, a finite number > 0.
    max_iter : int
        The budget of iterations per run.
    device : torch.device or str
        Where the runs take place.
    dtype : torch.dtype
        The runs' float dtype.
    network : pdmm.Network or None
        A simulated network for every run, or None for the ideal one.
    progress : bool
        Whether to show a bar over the grid.
    **params
        The method's other parameters, fixed (theta=0.5, mixing=...); rho or alpha among them is refused.

    Returns
    -------
    Tuning
        The chosen value and every trial.

    Raises
    ------
    ValueError
        For a method with nothing to tune, rho or alpha among params, a bad target or grid, or when every
        value diverges.
    KeyboardInterrupt
        When Ctrl-C stops a run.

    Examples
    --------
    >>> import numpy as np
    >>> import pdmm
    >>> problem = pdmm.averaging(pdmm.topology("ring", n=8), np.arange(8.0))
    >>> tuning = pdmm.tune(problem, "pdmm", values=[0.1, 1.0, 10.0], max_iter=300)
    >>> tuning.parameter, tuning.value
    ('rho', 1.0)
    >>> [(trial.value, trial.reached) for trial in tuning.trials]  # rho=10 has not reached 1e-6 when rho=1 has
    [(0.1, True), (1.0, True), (10.0, False)]
    >>> result = pdmm.solve(problem, rho=tuning.value)
    """
    parameter = tuned_parameter(method)
    if parameter in params or ("alpha" if parameter == "rho" else "rho") in params:
        raise ValueError(f"tune chooses {parameter} for {method}; give the other parameters only")
    if not (isinstance(target, (int, float)) and math.isfinite(target) and target > 0):
        raise ValueError(f"target must be a finite number > 0, got {target!r}")
    if isinstance(reference, str) and reference == "cvxpy":
        from .reference import reference as centralised

        reference = centralised(problem)
    grid = default_grid(problem, method, **params) if values is None else _checked(values)
    shared = dict(reference=reference, target=target, device=device, dtype=dtype)
    start, trials, budget = time.perf_counter(), [], max_iter
    with tqdm(total=len(grid), desc=f"tuning {method}", disable=not progress, leave=False) as bar:
        for values_run in _batches(grid, problem, network, dtype):
            if network is None:
                outcomes = batch_outcomes(problem, method, parameter, values_run, budget, **shared, **params)
            else:  # a network draws its events per instance: a batch of values would draw others than its runs
                options = {**shared, "network": network, **params}
                outcomes = [_trial(problem, method, parameter, float(value), budget, options) for value in values_run]
            for value, outcome in zip(values_run, outcomes, strict=True):
                trials.append(Trial(float(value), *outcome))
                if trials[-1].reached:
                    budget = min(budget, trials[-1].iterations)
            bar.update(len(values_run))
    return Tuning(
        method, parameter, _choose(trials), trials, float(target), max_iter, dict(params), time.perf_counter() - start
    )


def _checked(values):
    """The grid as a 1-d float array of finite numbers > 0, at least one."""
    grid = np.asarray(values, dtype=np.float64).reshape(-1)
    if not len(grid) or not np.all(np.isfinite(grid) & (grid > 0)):
        raise ValueError(f"values must be finite numbers > 0, at least one, got {values!r}")
    return grid


def _batches(grid, problem, network, dtype):
    """The grid in the pieces run as one batch each (pdmm.batch_runs.pieces); one value a piece over a network."""
    if network is not None:
        return [grid[i : i + 1] for i in range(len(grid))]
    return pieces(grid, problem.compiled.num_edges * problem.batch * problem.dim * torch.finfo(dtype).bits // 8)


def _trial(problem, method, parameter, value, budget, options):
    """One run at `value` for at most `budget` iterations, stopped by the target only (tol = 0): (iterations, reached,
    error, diverged); options: the keywords of pdmm.solve shared by every run."""
    result = solve(
        problem,
        method=method,
        tol=0,
        max_iter=budget,
        history=("error",),
        record_every=budget,
        on_divergence="return",
        **{parameter: value},
        **options,
    )
    if result.status == "diverged":
        return result.iterations, False, math.inf, True
    if result.interrupted:  # Ctrl-C: no choice can be made from part of the grid
        raise KeyboardInterrupt
    error = float(np.max(result.history["error"][-1]))
    return result.iterations, error <= options["target"], error, False


def _choose(trials):
    """The rule: fewest iterations to the target (then the smaller error, then the earlier value); else the
    smallest error after the budget; ValueError when every run diverged."""
    reached = [trial for trial in trials if trial.reached]
    if reached:
        return min(reached, key=lambda trial: (trial.iterations, trial.error)).value
    finite = [trial for trial in trials if not trial.diverged]
    if not finite:
        raise ValueError(f"every value of the grid diverged ({trials[0].value:.3g} to {trials[-1].value:.3g})")
    return min(finite, key=lambda trial: trial.error).value
