"""What one comparison runs: the Setting (families, depth, rounds, instance counts, fitting caps), the instances
each seed draws, the search grids and constants every row depends on, and protocol(), the part of a seed's cache
key besides the Setting (docs/guide/bridge.md, "Transformers against the classical methods, round by round" and
"One selection protocol")."""

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import torch

import pdmm

from .. import frontier
from ..consensus import GraphFamily, sample_instances
from ..fitting import MIN_DELTA, PATIENCE
from ..selection import Search

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

    def summary(self) -> dict[str, Any]:
        """What compare.json records of the setting ("setting").

        Returns
        -------
        dict
            family (describe), test_graphs, tune_graphs, val_graphs, batch, checkpoints (a list) and repr, the
            Setting's repr (part of a seed's cache key).
        """
        return {
            "family": describe(self.family),
            "test_graphs": self.test_graphs,
            "tune_graphs": self.tune_graphs,
            "val_graphs": self.val_graphs,
            "batch": self.batch,
            "checkpoints": list(self.checkpoints),
            "repr": repr(self),
        }

    def fit_rule(self) -> str:
        """The stopping rule of the full-batch fits (learned PDMM, the PDMM-transformers; bridge.fitting), in words.

        Returns
        -------
        str
            A sentence, as compare.json's "plateau rule" ends.
        """
        return (
            f"Learned PDMM and the PDMM-transformer: full-batch Adam on the tuning instances, stopped once {PATIENCE} "
            f"steps in a row have not lowered the best validation loss ({self.val_graphs} further training-family "
            f"graphs) by more than {MIN_DELTA:g} of it, or at the cap of {self.learned_steps} / "
            f"{self.finetune_steps} steps; the parameters of the best validation loss are compared."
        )

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


def describe(family: GraphFamily) -> str:
    """The graph family in words.

    Parameters
    ----------
    family : GraphFamily
        A family of bridge.consensus.

    Returns
    -------
    str
        E.g. "random_geometric graphs with n 16-32, radius 0.35".
    """
    return f"{family.topology} graphs with n {family.n_min}-{family.n_max}" + (
        f", radius {family.radius:g}" if family.radius else ""
    )


def averaging_problem(G: nx.Graph, a: np.ndarray) -> pdmm.Problem:
    """pdmm.averaging on G for values a (B, n), keeping the batch axis."""
    problem = pdmm.averaging(G, a[..., None])
    problem.batched = True
    return problem


def compiled(instances: Sequence[Instance]) -> list[Compiled]:
    """[(pdmm's compiled graph, local functions, edge operator, a (B, n) tensor)] of averaging instances,
    compiled once (float64, CPU) for every run of the classical methods on them."""
    return [
        (*averaging_problem(G, a).compile("cpu", torch.float64), torch.as_tensor(a, dtype=torch.float64))
        for G, a, *_ in instances
    ]
