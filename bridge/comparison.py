"""Transformers against the classical methods on distributed averaging, round by round and over seeds.

Seed s draws its own instances: held-out sets (bridge.consensus: the training family, larger graphs
of the same mean degree, rings and square grids, whose diameters exceed the round budget), tuning
instances and validation instances of the training family. Every method runs on the same
instances (paired) from x_i^0 = a_i, what the transformer sees, so round r has used r exchanges
with the neighbours. The statistic of one seed, method, set and round is the mean over instances
of log10 e, e = ||x^r - x*|| / ||a - x*||; across seeds a cell is the mean of those with a 95 % t
interval (shown as 10^: a geometric mean), and two methods are compared by their paired per-seed
differences. Rounds run 1..R and, for the classical rows, on to every round at which some
transformer row has sent as many numbers per edge as they have (Setting.checkpoints): a classical
method sends 1 number per edge and round, so its round c is the transformer's budget after
c / w rounds of w numbers.

Every choice (a parameter, a row) is made by bridge.selection on the tuning and validation instances and
recorded in SeedResult.fitted; the held-out sets are only run. Rows (evaluate_seed):
- bounds, not algorithms: "ball oracle" (the r-hop ball average, bridge.oracle), "bayes oracle"
  (the posterior mean given the ball under the instances' own prior and spread), and the "best
  polynomial of W per graph" (bridge.polynomial: the best expected error any scheme that applies
  a fixed polynomial of the graph's Metropolis matrix can reach, knowing the graph's spectrum);
- classical methods tuned per round: "pdmm", "averaged pdmm" (theta 1/2) and "admm" (rho), "gossip"
  (Metropolis weights, nothing to tune), "chebyshev" (Chebyshev-accelerated gossip, its spectral
  interval) and "safe chebyshev" (the interval's low end kept at -1: every eigenvalue of a Metropolis
  matrix lies in (-1, 1], where its polynomial has |p| <= 1, so it cannot diverge on any graph), each
  parameter chosen per round by bridge.selection.refine on the tuning instances (a start grid refined
  until it stops paying, TUNE_TOLERANCE); and the "polynomial filter" fitted exactly per degree on
  the tuning graphs' spectra, with the safeguard |p| <= 1 on [-1, 1] and without it (bridge.polynomial).
  "Tuned per round": the value at round r is one run with the parameter best at round r, what a user
  who knows their round budget runs; the same methods tuned for the last round R only are kept as
  "(tuned for round R)" rows;
- references that need the whole graph offline, reported beside the best classical row and never
  chosen as it: "chebyshev (own spectral interval)" (pdmm.solve's default) and Chebyshev on
  each graph's fastest-mixing weights (bridge.fastest_mixing) over their own interval;
- "best classical (chosen on tuning data)": per round, the per-round-tuned row whose choice for that
  round has the smallest error on the validation instances (training-family graphs apart from the
  tuning ones; never the held-out sets), and "best non-diverging classical" the same choice among the
  rows that cannot diverge on any graph (all but "chebyshev (tuned per round)", whose tuned interval
  misses the spectrum of rings and grids, and the unguarded filter): the references of every verdict;
- "learned pdmm" (bridge.UnrolledPDMM, per-round rho_k, theta_k) and the PDMM-transformer
  (bridge.pdmm_transformer: hand-set, trained from PDMM and from random weights), fitted to the
  tuning instances until the validation instances' loss plateaus (bridge.fitting);
- the one-number PDMM-transformers (bridge.frontier): untied from PDMM trained on the training family,
  and tied trained on a mixture of other topologies through a depth curriculum;
- "best one-number model (chosen on validation data)": per round, the one among learned PDMM and the
  hand-set and one-number PDMM-transformers with the smallest validation error, and "best transformer
  (chosen on validation data)" the same among the widest trained GraphTransformers;
- every trained GraphTransformer passed in: untied ones up to their depth, tied ones every round.
"""

import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import torch

import attention
import pdmm
from pdmm.batch_runs import per_instance, pieces
from pdmm.methods import METHODS

from . import frontier
from .consensus import GraphFamily, disagreement_error, node_features, sample_instances
from .fastest_mixing import fastest_mixing_weights
from .fitting import MIN_DELTA, PATIENCE
from .learned import fit
from .oracle import ball_oracle, bayes_ball_oracle
from .pdmm_transformer import D_MODEL, fit_graph_model, pdmm_features, pdmm_transformer, weight_shift
from .polynomial import apply_filter, fit_filter, nontrivial_spectrum, oracle_filters
from .selection import Search, choose, refine
from .statistics import holm, one_sample_test, paired_p, powers, ratio_interval, significant, t_interval
from .unrolled import UnrolledPDMM

MIXING = "metropolis"  # the weights of gossip, Chebyshev and the polynomial rows
FILTER_ROUNDS = 64  # polynomial rows up to this degree (one quadratic program per degree and seed)
FLOOR = 1e-15  # errors below float64 resolution count as this
TUNE_TOLERANCE = 0.01  # a classical row's grid is refined until two levels lower no round's tuning error by > 1 %


def _grid(*axes: Iterable[float]) -> tuple[tuple[float, ...], ...]:
    """The points of a regular grid (rounded like selection.refine's points, so that none repeats)."""
    return tuple(tuple(round(float(x), 12) for x in p) for p in itertools.product(*axes))


def _below_one(log_gap: float) -> float:
    """The high end 1 - 10^v of a Chebyshev interval from its coordinate v = log10(1 - high)."""
    return 1.0 - 10.0**log_gap


LOG_GAPS = np.linspace(-3.5, -0.5, 13)  # log10(1 - high) of the start grids of the Chebyshev intervals
# rho: log10 rho from -2 to 2 by 1/8 decade; the interval: low from -1 to 0.4 by 0.2, high as LOG_GAPS
RHO_SEARCH = Search(_grid(np.linspace(-2, 2, 33)), (0.125,), lambda p: float(10.0 ** p[0]))
INTERVAL_SEARCH = Search(
    _grid(np.linspace(-1.0, 0.4, 8), LOG_GAPS),
    (0.2, 0.25),
    lambda p: (p[0], _below_one(p[1])),
    lambda p: p[1] < 0 and p[0] < _below_one(p[1]),
)
SAFE_SEARCH = Search(  # low end -1: |p| <= 1 on [-1, 1], where every Metropolis eigenvalue lies, so it never diverges
    _grid(LOG_GAPS), (0.25,), lambda p: (-1.0, _below_one(p[0])), lambda p: p[0] < 0
)

Instance = tuple[nx.Graph, np.ndarray, np.ndarray]  # (graph, a (B, n), spreads s (B,)): bridge.consensus
Compiled = tuple[Any, Any, Any, torch.Tensor]  # pdmm's compiled graph, local functions, edge operator, a (B, n)
Cell = tuple[float, float, float]  # (value, 95 % low, high)

ORACLE, BAYES = "ball oracle", "bayes oracle (knows prior and s)"
POLY_ORACLE = "best polynomial of W per graph (bound)"
FILTER = "polynomial filter (fitted per round, safeguarded)"
FILTER_UNGUARDED = "polynomial filter (fitted per round, unguarded)"
OWN_INTERVAL = "chebyshev (own spectral interval)"
FASTEST = "chebyshev on fastest-mixing weights (whole graph offline)"
BEST = "best classical (chosen on tuning data)"
BEST_SAFE = "best non-diverging classical (chosen on tuning data)"
REFERENCES = (BEST, BEST_SAFE)
LEARNED = "learned pdmm"
HAND_SET = "pdmm-transformer (hand-set)"
FROM_PDMM, FROM_RANDOM = "pdmm-transformer (trained from pdmm)", "pdmm-transformer (trained from random)"
ONE_NUMBER = "pdmm-transformer (1 number, trained from pdmm)"
ONE_NUMBER_TIED = "pdmm-transformer (1 number, tied, topology mixture, depth curriculum)"
BEST_TRANSFORMER = "best transformer (chosen on validation data)"
BEST_ONE_NUMBER = "best one-number model (chosen on validation data)"
ONE_NUMBER_MODELS = (LEARNED, HAND_SET, ONE_NUMBER, ONE_NUMBER_TIED)  # what BEST_ONE_NUMBER chooses from
BOUNDS = (ORACLE, BAYES, POLY_ORACLE)

# name: (pdmm method, fixed parameters, the tuned parameter and its search)
TUNED: dict[str, tuple[str, dict[str, Any], str | None, Search | None]] = {
    "pdmm": ("pdmm", {"theta": 1.0}, "rho", RHO_SEARCH),
    "averaged pdmm": ("pdmm", {"theta": 0.5}, "rho", RHO_SEARCH),
    "admm": ("admm", {}, "rho", RHO_SEARCH),
    "gossip": ("gossip", {"mixing": MIXING}, None, None),
    "chebyshev": ("chebyshev", {"mixing": MIXING}, "interval", INTERVAL_SEARCH),
    "safe chebyshev": ("chebyshev", {"mixing": MIXING}, "interval", SAFE_SEARCH),
}


def per_round(name: str) -> str:
    """The row label of classical method `name` tuned per round."""
    return name if TUNED[name][2] is None else f"{name} (tuned per round)"


def for_horizon(name: str, rounds: int) -> str:
    """The row label of classical method `name` tuned for the last round only."""
    return f"{name} (tuned for round {rounds})"


def is_transformer(method: str) -> bool:
    """Whether row `method` is a trained GraphTransformer (untied or tied)."""
    return method.startswith(("transformer", "tied transformer"))


def is_model(method: str) -> bool:
    """Model rows, trained and hand-set transformers (PDMM-transformers among them) and the rows chosen among
    them, whose numbers sent per edge and round (w, 1 for the one-number ones) the verdicts at equal numbers sent
    match."""
    return is_transformer(method) or method.startswith("pdmm-transformer") or method in SELECTED_MODELS


SELECTED_MODELS = (BEST_TRANSFORMER, BEST_ONE_NUMBER)
CANDIDATES = [per_round(name) for name in TUNED] + [FILTER, FILTER_UNGUARDED]  # what "best classical" chooses from
DIVERGING = (per_round("chebyshev"), FILTER_UNGUARDED)  # |p| > 1 where a graph's spectrum may lie
NON_DIVERGING = [label for label in CANDIDATES if label not in DIVERGING]  # what "best non-diverging" chooses from


def protocol() -> dict[str, Any]:
    """The constants a seed's numbers depend on besides its Setting (part of compare's cache key)."""
    return {
        "rho search": [list(RHO_SEARCH.start[0]), list(RHO_SEARCH.start[-1]), list(RHO_SEARCH.step)],
        "interval search": [len(INTERVAL_SEARCH.start), list(INTERVAL_SEARCH.step)],
        "safe interval search": [len(SAFE_SEARCH.start), list(SAFE_SEARCH.step)],
        "tune tolerance": [TUNE_TOLERANCE, "two levels without a gain"],
        "mixing": MIXING,
        "filter rounds": FILTER_ROUNDS,
        "full-batch plateau": [PATIENCE, MIN_DELTA],
        "floor": FLOOR,
        "frontier mixture": [repr(f) for f in frontier.MIXTURE],
        "pdmm-transformer": "hand-set sends 1 number",
        "selection": "every choice on validation instances (bridge.selection)",
    }


@dataclass(frozen=True)
class Setting:
    """What one comparison runs (docs/guide/bridge.md, "Transformers against the classical methods, round by round").

    Attributes
    ----------
    family : GraphFamily
        The training family: the transformers are trained on it, the classical rows tuned on it.
    depth : int
        K, the transformers' depth (1 <= K <= rounds).
    rounds : int
        R, the horizon of the tables: every row is evaluated at rounds 1..R.
    test_graphs : int
        Held-out graphs per set and seed.
    tune_graphs : int
        Training-family graphs per seed for tuning and fitting (8, as many as the transformers' validation set).
    batch : int
        Value vectors per graph.
    mu_scale : float
        The spread of the offset mu of the values a_i = mu + s z_i (bridge.consensus).
    learned_steps : int
        Cap on the Adam steps of learned PDMM (it stops earlier on a validation plateau).
    finetune_steps : int
        The same cap for the PDMM-transformers.
    finetune_lr : tuple of float
        Adam's learning rate from the PDMM weights and from random weights.
    checkpoints : tuple of int
        Further rounds (>= 1) at which the classical rows are evaluated: equal numbers sent.
    val_graphs : int
        Training-family graphs per seed for validation: every choice between rows (bridge.selection) and the
        plateau rule of the full-batch fits.

    Raises
    ------
    ValueError
        For depth outside 1..rounds, a count below 1 or a checkpoint that is not a round >= 1.
    """

    family: GraphFamily
    depth: int = 8
    rounds: int = 32
    test_graphs: int = 8
    tune_graphs: int = 8
    batch: int = 16
    mu_scale: float = 1.0
    learned_steps: int = 2000
    finetune_steps: int = 2000
    finetune_lr: tuple[float, float] = (1e-4, 1e-2)  # Adam's lr from the PDMM weights, from random weights
    checkpoints: tuple[int, ...] = ()
    val_graphs: int = 8

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= self.rounds:
            raise ValueError(f"need 1 <= depth <= rounds, got depth {self.depth}, rounds {self.rounds}")
        if min(self.test_graphs, self.tune_graphs, self.batch, self.val_graphs) < 1:
            raise ValueError("test_graphs, tune_graphs, val_graphs and batch must be >= 1")
        if any(not (isinstance(c, int) and c >= 1) for c in self.checkpoints):
            raise ValueError(f"checkpoints must be rounds >= 1, got {self.checkpoints}")

    @property
    def horizon(self) -> int:
        """The last round any row is evaluated at: R or the largest checkpoint."""
        return max((self.rounds, *self.checkpoints))

    def classical_rounds(self) -> list[int]:
        """The rounds at which the classical rows are evaluated.

        Returns
        -------
        list of int
            1..R and the checkpoints, ascending.
        """
        return sorted(set(range(1, self.rounds + 1)) | set(self.checkpoints))

    def held_out(self) -> dict[str, GraphFamily]:
        """The held-out sets' graph families.

        Returns
        -------
        dict
            {set name: GraphFamily}: the training family, 3x larger graphs (radius / sqrt 3 keeps the mean
            degree of random geometric graphs), rings and k x k grids with diameter > rounds.
        """
        f, r = self.family, self.rounds
        radius = None if f.radius is None else f.radius / math.sqrt(3)
        k = r // 2 + 2  # a k x k grid has diameter 2 (k - 1) > r
        return {
            "training family": f,
            "larger graphs": GraphFamily(f.topology, 3 * f.n_min, 3 * f.n_max, radius),
            "ring": GraphFamily("ring", 2 * r + 2, 4 * r),
            "grid": GraphFamily("grid", k * k, (k + 6) ** 2),
        }

    def draw(self, seed: int) -> tuple[dict[str, list[Instance]], list[Instance], list[Instance]]:
        """The instances of one seed, the same for every method.

        Parameters
        ----------
        seed : int
            The seed; its held-out, tuning and validation instances come from three separate streams.

        Returns
        -------
        tuple
            ({set name: [(graph, a (B, n), s (B,))]}, tuning, validation): tuning and validation instances
            come from the training family, drawn apart from the held-out sets.
        """
        rng = np.random.default_rng([seed, 1])
        sets = {
            name: sample_instances(family, self.test_graphs, self.batch, rng, self.mu_scale)
            for name, family in self.held_out().items()
        }
        tuning = sample_instances(
            self.family, self.tune_graphs, self.batch, np.random.default_rng([seed, 2]), self.mu_scale
        )
        validation = sample_instances(
            self.family, self.val_graphs, self.batch, np.random.default_rng([seed, 3]), self.mu_scale
        )
        return sets, tuning, validation


def averaging_problem(G: nx.Graph, a: np.ndarray) -> pdmm.Problem:
    """pdmm.averaging on G for values a (B, n), keeping the batch axis."""
    problem = pdmm.averaging(G, a[..., None])
    problem.batched = True
    return problem


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


def compiled(instances: Sequence[Instance]) -> list[Compiled]:
    """[(pdmm's compiled graph, local functions, edge operator, a (B, n) tensor)] of averaging instances,
    compiled once (float64, CPU) for every run of the classical methods on them."""
    return [
        (*averaging_problem(G, a).compile("cpu", torch.float64), torch.as_tensor(a, dtype=torch.float64))
        for G, a, *_ in instances
    ]


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
    """(values, rounds, instances) errors of classical_errors(method, {**fixed, key: value}, rounds, instances) for
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


@dataclass
class SeedResult:
    """One seed's mean log10 errors {(method, set): (horizon,) array, nan at rounds a method is not shown}
    and what was fitted on the way (tuned parameters, learned schedules, weight shifts, choices)."""

    log_errors: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    fitted: dict[str, Any] = field(default_factory=dict)


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


def tune_classical(
    name: str,
    setting: Setting,
    tuning: Sequence[Compiled],
    validation: Sequence[Compiled],
    sets: dict[str, list[Compiled]],
    record: _Recorder,
    result: SeedResult,
) -> dict[int, float]:
    """Rows of classical method `name` (TUNED) tuned per round and for the last round on the tuning instances;
    returns the validation scores {round: mean log10 error} of its per-round choices, by which the best
    classical row is chosen (bridge.selection.choose). The parameter of each round is chosen by
    bridge.selection.refine, its grids scored on the tuning instances in batches (grid_errors); the values chosen
    run, again in batches, on the held-out and validation instances, each only as far as it is needed. What the
    tuning took is kept in result.fitted["tuning effort"]."""
    method, fixed, key, search = TUNED[name]
    rounds, R = setting.classical_rounds(), setting.rounds
    began = time.perf_counter()
    if search is None:  # nothing to tune: one setting
        values: list[Any] = [None]
        choice = dict.fromkeys(rounds, 0)
        effort = {"evaluations": 1, "levels": 0, "stopped by": "nothing to tune"}
    else:

        def score(parameters: list[Any], last: int) -> np.ndarray:
            return np.stack([mean_log(e) for e in grid_errors(method, fixed, key, parameters, last, tuning)])

        refined = refine(search, score, rounds, TUNE_TOLERANCE)
        points = list(dict.fromkeys(refined.choice.values()))
        values = [search.value(p) for p in points]
        choice = {r: points.index(p) for r, p in refined.choice.items()}
        effort = {"evaluations": refined.evaluations, "levels": refined.levels, "stopped by": refined.stopped_by}
        result.fitted[f"{name}: {key} per round"] = {r: _plain(values[g]) for r, g in choice.items()}
    needed: dict[int, int] = {}  # the chosen values the held-out sets run, and up to which round
    for r, g in choice.items():
        needed[g] = max(needed.get(g, 0), r)
    chosen = dict(needed)
    needed[choice[R]] = max(needed[choice[R]], R)
    for set_name, instances in sets.items():
        runs = chosen_runs(method, fixed, key, values, needed, instances)
        record.rounds(per_round(name), set_name, [runs[choice[r]][r - 1] for r in rounds], rounds)
        if key is not None:
            record.rounds(for_horizon(name, R), set_name, runs[choice[R]][:R])
    held = chosen_runs(method, fixed, key, values, chosen, validation)
    effort["instances"] = sum(a.shape[0] for *_, a in tuning)
    effort["seconds"] = time.perf_counter() - began
    result.fitted.setdefault("tuning effort", {})[per_round(name)] = effort
    return {r: float(held[g][r - 1]) for r, g in choice.items()}


def chosen_runs(
    method: str,
    fixed: dict[str, Any],
    key: str | None,
    values: Sequence[Any],
    needed: dict[int, int],
    instances: Sequence[Compiled],
) -> dict[int, np.ndarray]:
    """{g: (rounds,) mean log10 errors} of values[g] run up to round needed[g] on `instances`, in two batched runs
    (grid_errors): the values needed only up to the smallest of those rounds' median, and the rest."""
    order = sorted(needed, key=lambda g: needed[g])
    cut = needed[order[len(order) // 2]]
    out = {}
    for batch in ([g for g in order if needed[g] <= cut], [g for g in order if needed[g] > cut]):
        if batch:
            last = max(needed[g] for g in batch)
            errors = grid_errors(method, fixed, key, [values[g] for g in batch], last, instances)
            out.update({g: mean_log(e) for g, e in zip(batch, errors, strict=True)})
    return out


def _plain(value: Any) -> float | list[float]:
    """A parameter as JSON: a float or a list of floats."""
    return [float(v) for v in value] if isinstance(value, tuple) else float(value)


def polynomial_rows(
    setting: Setting,
    tuning: Sequence[Instance],
    validation: Sequence[Instance],
    sets: dict[str, list[Instance]],
    record: _Recorder,
    result: SeedResult,
) -> dict[str, dict[int, float]]:
    """The fitted filter rows, with and without the safeguard, and the per-graph polynomial bound; returns the
    filters' validation scores {row: {round: score}}."""
    degrees = [r for r in setting.classical_rounds() if r <= FILTER_ROUNDS]
    spectra = [nontrivial_spectrum(pdmm.mixing_matrix(G, MIXING)) for G, *_ in tuning]
    fitted, seconds = {}, {}
    for label in (FILTER, FILTER_UNGUARDED):
        began = time.perf_counter()
        fitted[label] = {r: fit_filter(spectra, r, safeguard=label == FILTER) for r in degrees}
        seconds[label] = time.perf_counter() - began

    def fitted_of(label):
        return lambda W: {r: (lambda a, c=c: apply_filter(W, a, c)) for r, c in fitted[label].items()}

    def bound_of(W):
        return {r: (lambda a, f=f: f.apply(W, a)) for r, f in oracle_filters(nontrivial_spectrum(W), degrees).items()}

    for set_name, instances in sets.items():
        for label, filters_of in ((FILTER, fitted_of(FILTER)), (FILTER_UNGUARDED, fitted_of(FILTER_UNGUARDED))):
            errors = filter_errors(filters_of, instances)
            record.rounds(label, set_name, [float(mean_log(errors[r][None])[0]) for r in degrees], degrees)
        errors = filter_errors(bound_of, instances)
        record.rounds(POLY_ORACLE, set_name, [float(mean_log(errors[r][None])[0]) for r in degrees], degrees)
    for label in (FILTER, FILTER_UNGUARDED):
        result.fitted[f"{label}: coefficients (chebyshev basis)"] = {
            r: c.tolist() for r, c in fitted[label].items() if r in (1, setting.depth, setting.rounds)
        }
        result.fitted.setdefault("tuning effort", {})[label] = {
            "instances": sum(a.shape[0] for _, a, _ in tuning),
            "evaluations": len(degrees),
            "levels": 0,
            "stopped by": "exact fit per degree",
            "seconds": seconds[label],
        }
    return {
        label: {r: float(mean_log(e[None])[0]) for r, e in filter_errors(fitted_of(label), validation).items()}
        for label in (FILTER, FILTER_UNGUARDED)
    }


def fastest_mixing_rows(
    setting: Setting, sets: dict[str, list[Compiled]], graphs: dict[str, list[nx.Graph]], record: _Recorder
) -> None:
    """FASTEST: Chebyshev acceleration with each held-out graph's fastest-mixing weights (bridge.fastest_mixing)
    over its own spectral interval, rounds 1..R. The weights and the interval need the whole graph offline, so
    the row is a reference beside the best classical row, never a candidate for it."""
    for set_name, instances in sets.items():
        errors = [
            _round_errors(
                METHODS["chebyshev"](graph, local, edges, None, mixing=fastest_mixing_weights(G)), a, setting.rounds
            )
            for (graph, local, edges, a), G in zip(instances, graphs[set_name], strict=True)
        ]
        record.errors(FASTEST, set_name, torch.cat(errors, dim=1))


def select_rows(
    label: str,
    candidates: Sequence[str],
    scores: dict[str, dict[int, float]],
    rounds: Iterable[int],
    sets: Iterable[str],
    record: _Recorder,
    result: SeedResult,
) -> None:
    """Row `label`: per round, the candidate with the smallest validation score there (bridge.selection.choose),
    its held-out values copied; the choices kept in result.fitted["LABEL per round"]."""
    chosen = choose(scores, list(candidates), rounds)
    if not chosen:
        return
    rounds = sorted(chosen)
    for set_name in sets:
        record.rounds(label, set_name, [result.log_errors[(chosen[r], set_name)][r - 1] for r in rounds], rounds)
    result.fitted[f"{label} per round"] = chosen


def validation_scores(errors: torch.Tensor) -> dict[int, float]:
    """{round: mean log10 error} of (rounds, instances) validation errors from round 1."""
    return {r: float(v) for r, v in enumerate(mean_log(errors), 1)}


def evaluate_seed(
    setting: Setting,
    seed: int,
    transformers: dict[str, Any],
    progress: Callable[[str], None] = lambda text: None,
    training: dict[str, Any] | None = None,
) -> SeedResult:
    """SeedResult of every row (module docstring) on seed `seed`'s instances; `transformers` maps a row
    label to that seed's trained GraphTransformer; `training` (optional) what training them took,
    {label: {...}}, kept in the result. Every choice is made on the tuning and validation instances
    (bridge.selection); the held-out sets are only run."""
    sets, tuning, validation = setting.draw(seed)
    R, K = setting.rounds, setting.depth
    compiled_sets, compiled_tuning = {name: compiled(inst) for name, inst in sets.items()}, compiled(tuning)
    compiled_validation = compiled(validation)
    result = SeedResult()
    record = _Recorder(setting, result)

    progress("oracles")
    for name, instances in sets.items():
        record.errors(ORACLE, name, oracle_errors(instances, R))
        record.errors(BAYES, name, bayes_oracle_errors(instances, R, setting.mu_scale**2))
    scores: dict[str, dict[int, float]] = {}
    for name in TUNED:
        progress(f"tuning {name}")
        scores[per_round(name)] = tune_classical(
            name, setting, compiled_tuning, compiled_validation, compiled_sets, record, result
        )
    for name, compiled_instances in compiled_sets.items():
        record.errors(OWN_INTERVAL, name, classical_errors("chebyshev", {"mixing": MIXING}, R, compiled_instances))
    progress("fastest-mixing weights")
    fastest_mixing_rows(setting, compiled_sets, {name: [G for G, *_ in inst] for name, inst in sets.items()}, record)
    progress("polynomial filters")
    scores.update(polynomial_rows(setting, tuning, validation, sets, record, result))
    rounds = setting.classical_rounds()
    select_rows(BEST, CANDIDATES, scores, rounds, sets, record, result)
    select_rows(BEST_SAFE, NON_DIVERGING, scores, rounds, sets, record, result)

    rho = result.fitted["pdmm: rho per round"][R]
    progress("learned pdmm")

    def problems(data):
        return [
            (
                averaging_problem(G, a),
                torch.as_tensor(a.mean(1, keepdims=True)[..., None]).expand(*a.shape, 1),
                a[..., None],
            )
            for G, a, _ in data
        ]

    def learned_errors(instances):
        return torch.cat(
            [
                disagreement_error(
                    learned(averaging_problem(G, a), x0=a[..., None])[..., 0].detach(), torch.as_tensor(a)
                )
                for G, a, *_ in instances
            ],
            1,
        )

    learned = UnrolledPDMM(R, rho=rho, learnable=True)
    began = time.perf_counter()
    log = fit(learned, problems(tuning), setting.learned_steps, validation=problems(validation))
    _fit_effort(result, LEARNED, [log], tuning, began)
    for name, instances in sets.items():
        record.errors(LEARNED, name, learned_errors(instances))
    scores[LEARNED] = validation_scores(learned_errors(validation))
    result.fitted["learned rho_k"] = learned.rho().tolist()
    result.fitted["learned theta_k"] = learned.theta().tolist()
    result.fitted[f"{LEARNED}: fit"] = _fit_summary(log)

    progress("pdmm-transformer")
    features = lambda G, a: pdmm_features(G, a, rho)  # noqa: E731
    hand_set = pdmm_transformer(rho, R, start="a", kernel="mean")  # PDMM at the rho tuned for round R, 1 number
    for name, instances in sets.items():
        record.errors(HAND_SET, name, model_errors(hand_set, instances, features=features, self_loops=False))
    scores[HAND_SET] = validation_scores(model_errors(hand_set, validation, features=features, self_loops=False))
    rho = result.fitted["pdmm: rho per round"][K]  # the trained ones run K rounds: they start from PDMM tuned for K
    features = lambda G, a: pdmm_features(G, a, rho)  # noqa: E731
    reference = pdmm_transformer(rho, K, start="a")
    for label, init, lr in (
        (FROM_PDMM, "pdmm", setting.finetune_lr[0]),
        (FROM_RANDOM, "random", setting.finetune_lr[1]),
    ):
        model = pdmm_transformer(rho, K, start="a", init=init, seed=seed)
        began = time.perf_counter()
        log = fit_graph_model(
            model,
            [(G, a) for G, a, _ in tuning],
            setting.finetune_steps,
            lr,
            features,
            validation=[(G, a) for G, a, _ in validation],
        )
        for name, instances in sets.items():
            record.errors(label, name, model_errors(model, instances, features=features, self_loops=False))
        _fit_effort(result, label, [log], tuning, began)
        result.fitted[f"{label}: fit"] = _fit_summary(log)
        result.fitted[f"{label}: weight shift from pdmm"] = weight_shift(model, reference)
    scores.update(frontier_rows(setting, seed, result, record, sets, tuning, validation))
    select_rows(BEST_ONE_NUMBER, ONE_NUMBER_MODELS, scores, range(1, R + 1), sets, record, result)

    widest = max((model.numbers_sent for model in transformers.values()), default=None)
    for label, model in transformers.items():
        progress(label)
        model.eval()
        for name, instances in sets.items():
            record.errors(label, name, model_errors(model, instances, rounds=depth_of(model, R)))
        scores[label] = validation_scores(model_errors(model, validation, rounds=depth_of(model, R)))
    full_width = [label for label, model in transformers.items() if model.numbers_sent == widest]
    if full_width:
        select_rows(BEST_TRANSFORMER, full_width, scores, range(1, R + 1), sets, record, result)
    result.fitted["validation scores"] = {
        label: {r: s if math.isfinite(s) else None for r, s in values.items()} for label, values in scores.items()
    }
    if training:
        result.fitted["training"] = training
    return result


def frontier_rows(
    setting: Setting,
    seed: int,
    result: SeedResult,
    record: _Recorder,
    sets: dict[str, list[Instance]],
    tuning: list[Instance],
    validation: list[Instance],
) -> dict[str, dict[int, float]]:
    """The one-number PDMM-transformers of bridge.frontier: untied from PDMM tuned for round K, tied from PDMM
    (x^0 = 0) tuned for round R, each fitted with the PDMM-transformer's cap and lr per stage; returns their
    validation scores {row: {round: score}}."""
    K, R = setting.depth, setting.rounds
    steps, lr = setting.finetune_steps, setting.finetune_lr[0]
    scores = {}
    for label, key in ((ONE_NUMBER, K), (ONE_NUMBER_TIED, R)):
        rho = result.fitted["pdmm: rho per round"][key]
        began = time.perf_counter()
        if label == ONE_NUMBER:
            model, logs = frontier.one_number_untied(rho, K, tuning, validation, steps, lr)
        else:
            model, logs = frontier.one_number_tied(
                rho, K, R, tuning, validation, steps, lr, setting.family, frontier.seed_rng(seed), setting.mu_scale
            )
        _fit_effort(result, label, logs, tuning, began)
        features = lambda G, a, rho=rho: pdmm_features(G, a, rho)  # noqa: E731
        for name, instances in sets.items():
            record.errors(
                label,
                name,
                model_errors(model, instances, rounds=depth_of(model, R), features=features, self_loops=False),
            )
        scores[label] = validation_scores(
            model_errors(model, validation, rounds=depth_of(model, R), features=features, self_loops=False)
        )
        result.fitted[f"{label}: fit"] = [_fit_summary(log) for log in logs]
    return scores


def _fit_effort(result: SeedResult, label: str, logs: list[Any], tuning: Sequence[Instance], began: float) -> None:
    """result.fitted["tuning effort"][label] for a full-batch fit: its instances, Adam steps (over every stage), why
    the last stage stopped and the seconds since `began`."""
    result.fitted.setdefault("tuning effort", {})[label] = {
        "instances": sum(a.shape[0] for _, a, _ in tuning),
        "evaluations": sum(len(log.losses) - 1 for log in logs),
        "levels": len(logs),
        "stopped by": f"{logs[-1].stopped_by} (Adam steps)",
        "seconds": time.perf_counter() - began,
    }


def _fit_summary(log: Any) -> dict[str, Any]:
    """What a full-batch fit did, for compare.json: first and best losses, steps, best step, why it stopped."""
    watched = log.validation or log.losses
    return {
        "loss first": log.losses[0],
        "validation best": watched[log.best_step],
        "steps": len(log.losses) - 1,
        "best step": log.best_step,
        "stopped by": log.stopped_by,
    }


def numbers_sent(label: str, models: dict[str, Any] | None = None) -> int | None:
    """Numbers a node sends per edge and round for row `label`: None for the bounds (every value in the
    ball; the spectrum), a trained transformer's keys and values (models[label].numbers_sent), the best
    transformer's those of the widest trained transformers it chooses from, the PDMM-transformer's
    2 D_MODEL = 14 when trained with keys, else 1 (every classical method and the one-number models send one
    number per edge at d = 1)."""
    models = models or {}
    if label in BOUNDS:
        return None
    if label in (FROM_PDMM, FROM_RANDOM):
        return 2 * D_MODEL
    if label == BEST_TRANSFORMER:
        return max((model.numbers_sent for model in models.values()), default=None)
    return models[label].numbers_sent if label in models else 1


def compare(
    setting: Setting,
    seeds: Iterable[int],
    transformers: Callable[[int], dict[str, Any]] = lambda seed: {},
    progress: Callable[[str], None] = lambda text: None,
) -> "CompareTable":
    """Every row of the comparison (the module docstring) over seeds (docs/guide/bridge.md, "Transformers against
    the classical methods, round by round").

    Parameters
    ----------
    setting : Setting
        What runs: the family, depth, rounds, instance counts and fitting caps.
    seeds : iterable of int
        The seeds; each draws its own instances (Setting.draw) and fits its own rows.
    transformers : callable
        transformers(seed) gives that seed's {label: trained GraphTransformer}, labels as in the table (e.g.
        "transformer (belief)"); by default none.
    progress : callable
        Called with a line of text as each row starts.

    Returns
    -------
    CompareTable
        The per-seed mean log10 errors of every (row, held-out set) and round.
    """
    results: dict[int, SeedResult] = {}
    sent: dict[str, int | None] = {}
    for seed in seeds:
        models = transformers(seed)
        results[seed] = evaluate_seed(setting, seed, models, progress)
        sent.update({label: numbers_sent(label, models) for label, _ in results[seed].log_errors})
    return CompareTable.from_seeds(setting, results, sent)


Comparison = tuple[str, int, str, int, str]  # (first row, its round, second row, its round, held-out set)
MIN_SEEDS = 5  # fewer seeds never decide a verdict (bridge.statistics.significant)


@dataclass(frozen=True)
class Verdict:
    """One paired comparison of a family (CompareTable.verdicts): ratio < 1 means `first` has the smaller error."""

    first: str
    round: int
    second: str
    round_second: int
    set: str
    ratio: float
    low: float
    high: float
    p: float
    p_holm: float
    word: str


@dataclass(frozen=True)
class Trend:
    """How a tied model's error moves from round K to round R on one set (CompareTable.trends)."""

    method: str
    set: str
    ratio: float
    low: float
    high: float
    p: float
    p_holm: float
    word: str


SEED_COLUMNS = ("method", "set", "seed", "round", "log10_error", "numbers_sent")


@dataclass
class CompareTable:
    """Per-seed mean log10 errors of every (method, set), stacked, and the statistics over seeds (bridge.statistics:
    t intervals of geometric means, paired ratios, verdicts; docs/guide/bridge.md, "Transformers against the
    classical methods, round by round").

    Attributes
    ----------
    seeds : list of int
        The seeds, in the order of the rows of each array.
    rounds : int
        R, the horizon of the tables.
    depth : int
        K, the transformers' depth.
    log_errors : dict
        {(method, set): (seeds, horizon) array} of mean log10 errors, NaN at rounds where the method has no value.
    sent : dict
        {method: numbers sent per edge and round}, None for the bounds (unbounded).
    fitted : dict
        {seed: what was fitted} (tuned parameters, schedules, choices, training budgets).
    """

    seeds: list[int]
    rounds: int
    depth: int
    log_errors: dict[tuple[str, str], np.ndarray]
    sent: dict[str, int | None]
    fitted: dict[Any, Any]

    @classmethod
    def from_seeds(
        cls, setting: Setting, results: dict[int, SeedResult], sent: dict[str, int | None]
    ) -> "CompareTable":
        """Stack the seeds' results into a table.

        Parameters
        ----------
        setting : Setting
            The comparison's setting (its rounds and depth).
        results : dict
            {seed: SeedResult}, every seed with the same rows.
        sent : dict
            {method: numbers sent per edge and round, None for the bounds}.

        Returns
        -------
        CompareTable
            The table of the seeds in `results`' order.
        """
        seeds = list(results)
        keys = list(results[seeds[0]].log_errors)
        return cls(
            seeds,
            setting.rounds,
            setting.depth,
            {k: np.stack([results[s].log_errors[k] for s in seeds]) for k in keys},
            sent,
            {s: results[s].fitted for s in seeds},
        )

    def seed_rows(self) -> list[dict[str, Any]]:
        """The per-seed values: what compare writes to seeds.csv.

        Returns
        -------
        list of dict
            One dict per (method, set, seed, round) with a value, keys SEED_COLUMNS; log10_error as repr of the
            float, numbers_sent cumulative per edge and empty for the bounds.
        """
        out = []
        for (method, name), values in self.log_errors.items():
            sent = self.sent.get(method)
            for r in self.available(method):
                for seed, value in zip(self.seeds, values[:, r - 1], strict=False):
                    out.append(
                        {
                            "method": method,
                            "set": name,
                            "seed": seed,
                            "round": int(r),
                            "log10_error": repr(float(value)),
                            "numbers_sent": "" if sent is None else sent * int(r),
                        }
                    )
        return out

    @classmethod
    def from_seed_rows(
        cls, rows: Iterable[dict[str, Any]], rounds: int, depth: int, fitted: dict[Any, Any] | None = None
    ) -> "CompareTable":
        """The table of seed_rows() output, e.g. read back from seeds.csv with csv.DictReader.

        Parameters
        ----------
        rows : iterable of dict
            Rows with the keys SEED_COLUMNS (values as text or numbers).
        rounds : int
            R, the horizon of the tables.
        depth : int
            K, the transformers' depth.
        fitted : dict, optional
            {seed: what was fitted}; empty by default.

        Returns
        -------
        CompareTable
            The table, seeds ascending, horizon the largest round in `rows`.
        """
        rows = list(rows)
        seeds = sorted({int(row["seed"]) for row in rows})
        horizon = max(int(row["round"]) for row in rows)
        log_errors: dict[tuple[str, str], np.ndarray] = {}
        sent: dict[str, int | None] = {}
        for row in rows:
            key = (row["method"], row["set"])
            if key not in log_errors:
                log_errors[key] = np.full((len(seeds), horizon), np.nan)
            log_errors[key][seeds.index(int(row["seed"])), int(row["round"]) - 1] = float(row["log10_error"])
            sent[row["method"]] = int(row["numbers_sent"]) // int(row["round"]) if row["numbers_sent"] != "" else None
        return cls(seeds, rounds, depth, log_errors, sent, fitted or {})

    @property
    def methods(self) -> list[str]:
        """The rows' method labels, in the order they were recorded."""
        return list(dict.fromkeys(m for m, _ in self.log_errors))

    @property
    def sets(self) -> list[str]:
        """The held-out sets' names, in the order they were recorded."""
        return list(dict.fromkeys(s for _, s in self.log_errors))

    @property
    def horizon(self) -> int:
        """The number of rounds each array holds (R or the largest checkpoint)."""
        return next(iter(self.log_errors.values())).shape[1]

    def available(self, method: str) -> list[int]:
        """The rounds at which a method has a value on every seed.

        Parameters
        ----------
        method : str
            A row label.

        Returns
        -------
        list of int
            The rounds, 1-based and ascending.
        """
        values = self.log_errors[(method, self.sets[0])]
        return [int(r) + 1 for r in np.flatnonzero(~np.isnan(values).any(axis=0))]

    def has(self, method: str, r: int) -> bool:
        """Whether a method has a value after round r on every seed.

        Parameters
        ----------
        method : str
            A row label.
        r : int
            The round, 1-based (outside 1..horizon: False).

        Returns
        -------
        bool
            True where every seed has a value.
        """
        return 1 <= r <= self.horizon and not np.isnan(self.log_errors[(method, self.sets[0])][:, r - 1]).any()

    def shown(self, method: str) -> int:
        """The last round up to R at which a method has a value.

        Parameters
        ----------
        method : str
            A row label.

        Returns
        -------
        int
            That round: R, or the depth of an untied transformer.
        """
        return max(r for r in self.available(method) if r <= self.rounds)

    def cell(self, method: str, name: str, r: int) -> Cell:
        """The geometric-mean error over seeds after round r and its 95 % t interval: 10 ** the t_interval of the
        per-seed mean log10 errors (bridge.statistics).

        Parameters
        ----------
        method : str
            A row label.
        name : str
            A held-out set.
        r : int
            The round, 1-based.

        Returns
        -------
        tuple of float
            (geometric-mean error, 95 % low, high); NaN bounds for one seed or a diverged run (inf).
        """
        value, low, high = powers(*t_interval(self.log_errors[(method, name)][:, r - 1]))
        return value, low, high

    def paired(
        self, method: str, other: str, name: str, r: int, r_other: int | None = None
    ) -> tuple[float, float, float, float]:
        """The paired comparison over seeds of `method` after round r with `other` after round r_other
        (bridge.statistics.ratio_interval and paired_p of the per-seed mean log10 errors).

        Parameters
        ----------
        method, other : str
            The two row labels.
        name : str
            A held-out set.
        r : int
            The round of `method`, 1-based.
        r_other : int, optional
            The round of `other`; r by default.

        Returns
        -------
        tuple of float
            (ratio of geometric means, 95 % low, high, p of the paired t-test); ratio < 1: `method` has the
            smaller error.
        """
        a = self.log_errors[(method, name)][:, r - 1]
        b = self.log_errors[(other, name)][:, (r if r_other is None else r_other) - 1]
        ratio, low, high = ratio_interval(a, b)
        return ratio, low, high, paired_p(a, b)

    def rows(self) -> list[dict[str, Any]]:
        """The summary rows compare writes to compare.csv.

        Returns
        -------
        list of dict
            Per method, set and round with a value: the cell and its interval, the paired ratios to the two best
            classical rows at the same round (where they have a value) and the numbers sent per edge so far.
        """
        out = []
        for method, name in self.log_errors:
            for r in self.available(method):
                error, low, high = self.cell(method, name, r)
                row = {
                    "method": method,
                    "set": name,
                    "round": r,
                    "seeds": len(self.seeds),
                    "error": error,
                    "error_low": low,
                    "error_high": high,
                }
                for ref, column in ((BEST, "vs_best_classical"), (BEST_SAFE, "vs_best_non_diverging")):
                    ratio, r_low, r_high, _ = (
                        self.paired(method, ref, name, r)
                        if (ref, name) in self.log_errors and self.has(ref, r)
                        else (math.nan,) * 4
                    )
                    row.update({column: ratio, f"{column}_low": r_low, f"{column}_high": r_high})
                sent = self.sent.get(method)
                row["sent_per_edge"] = None if sent is None else sent * r
                out.append(row)
        return out

    def verdicts(self, comparisons: Sequence[Comparison], alpha: float = 0.05) -> list["Verdict"]:
        """The paired comparisons of one family, each p Holm-adjusted over the family (bridge.statistics.holm).

        Parameters
        ----------
        comparisons : sequence of (first, its round, second, its round, set)
            The family: every test one table, or the headline claims, reports.
        alpha : float
            The family-wise level.

        Returns
        -------
        list of Verdict
            In the order of `comparisons`: the ratio of geometric means first / second with its 95 % interval,
            the raw and the adjusted p, and the word: "better" / "worse" only where the adjusted p is below
            `alpha` over at least MIN_SEEDS seeds (bridge.statistics.significant), else "not separable".
        """
        tests = [self.paired(first, second, name, r, r2) for first, r, second, r2, name in comparisons]
        adjusted = holm([p for *_, p in tests])
        out = []
        for comparison, (ratio, low, high, p), p_holm in zip(comparisons, tests, adjusted, strict=True):
            decided = significant(float(p_holm), len(self.seeds), alpha, MIN_SEEDS)
            word = ("better" if ratio < 1 else "worse") if decided else "not separable"
            out.append(Verdict(*comparison, ratio, low, high, p, float(p_holm), word))
        return out

    def trends(self, methods: Sequence[str], alpha: float = 0.05) -> list["Trend"]:
        """How each tied model's error moves from its training depth K to the last round R, on every set: one
        family, Holm-adjusted.

        Parameters
        ----------
        methods : sequence of str
            Tied models' row labels.
        alpha : float
            The family-wise level.

        Returns
        -------
        list of Trend
            Per method and set: the ratio e_R / e_K of geometric means over seeds with its 95 % interval, the p of
            the one-sample t-test of the per-seed log ratios, its Holm-adjusted p and the word: "keeps falling" /
            "grows" where the adjusted p is below `alpha` over at least MIN_SEEDS seeds, else "stalls".
        """
        pairs = [(method, name) for method in methods for name in self.sets]
        tests = []
        for method, name in pairs:
            values = self.log_errors[(method, name)]
            test = one_sample_test(values[:, self.rounds - 1] - values[:, self.depth - 1])
            tests.append((*powers(test["mean"], test["low"], test["high"]), test["p"]))
        adjusted = holm([p for *_, p in tests])
        out = []
        for (method, name), (ratio, low, high, p), p_holm in zip(pairs, tests, adjusted, strict=True):
            decided = significant(float(p_holm), len(self.seeds), alpha, MIN_SEEDS)
            word = ("keeps falling" if ratio < 1 else "grows") if decided else "stalls"
            out.append(Trend(method, name, ratio, low, high, p, float(p_holm), word))
        return out
