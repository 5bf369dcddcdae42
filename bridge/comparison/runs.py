"""The errors of one kind of run on a list of instances, each (rounds, instances) or a mean log10 error per round:
the oracles, the classical methods (one run, or a grid of values on the batch axis), polynomial filters, models;
SeedRun, what every row of one seed reads and writes, with the _Recorder that writes its rows into its SeedResult
(docs/guide/bridge.md, "Transformers against the classical methods, round by round")."""

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import attention
import pdmm
from pdmm.batch_runs import per_instance, pieces
from pdmm.methods import METHODS

from ..consensus import disagreement_error, node_features
from ..oracle import ball_oracle, bayes_ball_oracle
from .seeds import SeedResult
from .setting import FLOOR, MIXING, Compiled, Instance, Setting


def oracle_errors(instances: Sequence[Instance], rounds: int) -> torch.Tensor:
    """(rounds, instances) errors of the r-hop ball average."""
    return torch.cat(
        [
            disagreement_error(torch.as_tensor(ball_oracle(G, a[..., None], rounds)[..., 0]), torch.as_tensor(a))
            for G, a, *_ in instances
        ],
        dim=1,
    )


def bayes_oracle_errors(instances: Sequence[Instance], rounds: int, offset_var: float) -> torch.Tensor:
    """(rounds, instances) errors of the posterior mean given each ball, prior and spread known (instances
    (graph, a, spreads))."""
    return torch.cat(
        [
            disagreement_error(torch.as_tensor(bayes_ball_oracle(G, a, rounds, offset_var, s**2)), torch.as_tensor(a))
            for G, a, s in instances
        ],
        dim=1,
    )


@torch.no_grad()
def classical_errors(method: str, params: dict[str, Any], rounds: int, instances: Sequence[Compiled]) -> torch.Tensor:
    """(rounds, instances) errors of pdmm's `method` step (pdmm.methods, as in pdmm.solve) run from
    x0 = a with `params` (rho among them for the methods that take one); `instances` from compiled()."""
    params = dict(params)
    rho = params.pop("rho", None)
    rho = None if rho is None else float(rho)
    return torch.cat(
        [
            _round_errors(METHODS[method](graph, local, edges, rho, **params), a, rounds)
            for graph, local, edges, a in instances
        ],
        dim=1,
    )


@torch.no_grad()
def grid_errors(
    method: str,
    fixed: dict[str, Any],
    key: str | None,
    values: Sequence[Any],
    rounds: int,
    instances: Sequence[Compiled],
) -> torch.Tensor:
    """(values, rounds, instances) errors of ``classical_errors(method, {**fixed, key: value}, rounds, instances)`` for
    every grid value, the values in one run per graph (as many as pdmm.batch_runs.pieces puts in a batch): its B
    instances tiled once per value (LocalFunction.tiled) and value g held by instances g B .. g B + B - 1 (rho, or
    an interval's two ends, as per-instance tensors (1, G B, 1), pdmm.methods; docs/decentralised.md section 8).
    Instances are independent, so each value's errors are those of its own run (to 1e-12, tests/test_batch_runs.py),
    a diverging one included. key None: the method's one setting (values [None])."""
    if key is None:
        return classical_errors(method, fixed, rounds, instances)[None]
    out = []
    for graph, local, edges, a in instances:
        B = a.shape[0]
        runs = []
        for batch in pieces(values, graph.num_edges * B * a.element_size()):
            G = len(batch)
            if key == "interval":
                value: Any = tuple(per_instance([v[end] for v in batch], B, a).view(1, -1, 1) for end in (0, 1))
            else:
                value = per_instance(batch, B, a).view(1, -1, 1)
            params = {**fixed, key: value}
            algorithm = METHODS[method](graph, local.tiled(G), edges, params.pop("rho", None), **params)
            runs.append(_round_errors(algorithm, a.repeat(G, 1), rounds).view(rounds, G, B))
        out.append(torch.cat(runs, dim=1))
    return torch.cat(out, dim=2).transpose(0, 1)


def _round_errors(algorithm: Any, a: torch.Tensor, rounds: int) -> torch.Tensor:
    """(rounds, B) errors of `algorithm` (a pdmm.methods step) after rounds 1..rounds from x0 = a (B, n)."""
    state = algorithm.init(a.T[..., None])  # pdmm's state layout: x (n, B, 1)
    iterates = []
    for _ in range(rounds):
        state = algorithm.step(state)
        iterates.append(state["x"][..., 0].T)
    return disagreement_error(torch.stack(iterates), a)


def mean_log(errors: torch.Tensor) -> np.ndarray:
    """(rounds, instances) errors -> (rounds,) mean log10 error, errors below FLOOR counted as FLOOR and
    non-finite ones (a diverged run) as +inf."""
    logs = torch.log10(errors.clamp_min(FLOOR)).nan_to_num(nan=math.inf, posinf=math.inf)
    return logs.mean(1).numpy()


def filter_errors(
    filters_of: Callable[[Any], dict[int, Callable[[np.ndarray], np.ndarray]]], instances: Sequence[Instance]
) -> dict[int, torch.Tensor]:
    """{round: (instances,) errors} of polynomial filters of each graph's Metropolis matrix W: filters_of(W) gives
    {round: a function a -> p(W) a}."""
    out: dict[int, list[torch.Tensor]] = {}
    for G, a, *_ in instances:
        W = pdmm.mixing_matrix(G, MIXING)
        a = np.asarray(a, dtype=np.float64)
        for r, apply in filters_of(W).items():
            e = disagreement_error(torch.as_tensor(apply(a)), torch.as_tensor(a))
            out.setdefault(r, []).append(e)
    return {r: torch.cat(e) for r, e in out.items()}


@torch.no_grad()
def model_errors(
    model: torch.nn.Module,
    instances: Sequence[Instance],
    rounds: int | None = None,
    features: Callable[..., torch.Tensor] = node_features,
    self_loops: bool = True,
) -> torch.Tensor:
    """(rounds, instances) errors of a GraphTransformer's readout after every round (rounds past its
    depth only for tied models), in the model's dtype."""
    p = next(model.parameters())
    out = []
    for G, values, *_ in instances:
        a = torch.as_tensor(values, dtype=p.dtype, device=p.device)
        graph = attention.TokenGraph.from_networkx(G, self_loops=self_loops)
        out.append(disagreement_error(model(features(G, a), graph, rounds=rounds)[..., 0], a).cpu())
    return torch.cat(out, dim=1).double()


def depth_of(model: Any, rounds: int) -> int:
    """How many rounds a trained GraphTransformer is shown for: its depth, or every round when tied."""
    return rounds if model.tied else model.n_layer


def validation_scores(errors: torch.Tensor) -> dict[int, float]:
    """{round: mean log10 error} of (rounds, instances) validation errors from round 1."""
    return {r: float(v) for r, v in enumerate(mean_log(errors), 1)}


class _Recorder:
    """Writes rows of one seed's SeedResult: rows are (horizon,) arrays, nan where a method has no value."""

    def __init__(self, setting: Setting, result: SeedResult) -> None:
        self.horizon, self.result = setting.horizon, result

    def rounds(self, label: str, name: str, values: Any, rounds: Iterable[int] | None = None) -> None:
        """values[k] is the mean log10 error at round rounds[k] (default 1, 2, ...)."""
        row = np.full(self.horizon, np.nan)
        rounds = np.arange(1, len(values) + 1) if rounds is None else np.asarray(rounds)
        row[rounds - 1] = values
        self.result.log_errors[(label, name)] = row

    def errors(self, label: str, name: str, errors: torch.Tensor) -> None:
        """errors: (rounds, instances) from round 1."""
        self.rounds(label, name, mean_log(errors))


@dataclass
class SeedRun:
    """What every row of one seed reads and writes (evaluate_seed): the setting, the seed, its instances
    (Setting.draw: the held-out sets, the tuning and the validation instances), the SeedResult the rows go into
    and the _Recorder that writes them there."""

    setting: Setting
    seed: int
    sets: dict[str, list[Instance]]
    tuning: list[Instance]
    validation: list[Instance]
    result: SeedResult = field(default_factory=SeedResult)
    record: _Recorder = field(init=False)

    def __post_init__(self) -> None:
        self.record = _Recorder(self.setting, self.result)

    @classmethod
    def draw(cls, setting: Setting, seed: int) -> "SeedRun":
        """The run of seed `seed`, its instances drawn by Setting.draw and nothing recorded yet."""
        sets, tuning, validation = setting.draw(seed)
        return cls(setting, seed, sets, tuning, validation)
