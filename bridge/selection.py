"""Every choice the comparison makes, and the data it is made on (docs/guide/bridge.md, "One selection protocol").

The comparison reports rows on held-out sets; no choice behind a row may look at them. Two functions make
every choice, each on instances drawn like the held-out sets' training family but apart from them:

- `choose`: per round r, the candidate with the smallest score S_c(r), a mean log10 error on the
  validation instances (the first listed on a tie). It picks "best classical", "best non-diverging
  classical", the best trained transformer and the best one-number model; `refine` picks each classical
  row's parameter by the same rule, over the points in the order it scored them.
- `refine`: a classical method's parameter per round, on the tuning instances: a start grid, then
  pattern-search levels. Level l proposes, around each round's current choice u_r, the points
  u_r + h / 2^l o for the offsets o in {-1, 0, 1}^d (h the start grid's spacing, in the search's
  coordinates: log10 rho, the low end of a Chebyshev interval and log10 of 1 - its high end). It stops
  after two levels in a row that lower no round's best score by more than log10(1 + tol) (tol = 1 %:
  a 1 % smaller error; two, because a level can find nothing at its step on a flat stretch while a finer
  one still gains), or after max_levels levels, and says which.

The same number of tuning instances as the transformers' validation set is the protocol's default
(bridge.comparison.Setting), so neither side is tuned on less data.
"""

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

Point = tuple[float, ...]
K = TypeVar("K")


def choose(
    scores: Mapping[str, Mapping[int, float]], candidates: Sequence[str], rounds: Iterable[int]
) -> dict[int, str]:
    """Per round, the candidate with the smallest validation score (the first listed on a tie).

    Parameters
    ----------
    scores : mapping
        {candidate: {round: mean log10 error on validation instances}}; a candidate without a score at a round
        (an untied model past its depth) is not chosen there, and a non-finite score (a diverged run) loses to
        every finite one.
    candidates : sequence of str
        The rows to choose from, in order of preference on a tie.
    rounds : iterable of int
        The rounds to choose at.

    Returns
    -------
    dict
        {round: the chosen candidate}, only at rounds where some candidate has a score.

    Raises
    ------
    ValueError
        When `candidates` is empty.
    """
    if not candidates:
        raise ValueError("choose needs at least one candidate")
    out = {}
    for r in rounds:
        present = [c for c in candidates if r in scores.get(c, {})]
        if present:
            out[r] = min(present, key=lambda c: _finite_or_inf(scores[c][r]))
    return out


def _finite_or_inf(value: float) -> float:
    return value if math.isfinite(value) else math.inf


@dataclass(frozen=True)
class Search:
    """A parameter's search space for `refine`: the start grid and its spacing in the search's coordinates.

    Attributes
    ----------
    start : tuple of points
        The start grid, each point a tuple of coordinates.
    step : tuple of float
        The start grid's spacing along each coordinate (the first level moves by half of it).
    value : callable
        value(point) gives the method's parameter (rho, an interval (low, high)).
    valid : callable
        valid(point) says whether a point is a parameter the method accepts (a proposed point that is not is
        skipped).
    """

    start: tuple[Point, ...]
    step: Point
    value: Callable[[Point], Any]
    valid: Callable[[Point], bool] = lambda point: True


@dataclass
class Refined:
    """What `refine` chose and what it took.

    Attributes
    ----------
    choice : dict
        {round: the chosen point}.
    score : dict
        {round: its mean log10 error on the tuning instances}.
    evaluations : int
        Parameter values scored (each on every tuning instance).
    levels : int
        Refinement levels run after the start grid.
    stopped_by : str
        "tolerance" (two levels in a row improved no round by more than tol) or "max_levels".
    """

    choice: dict[int, Point] = field(default_factory=dict)
    score: dict[int, float] = field(default_factory=dict)
    evaluations: int = 0
    levels: int = 0
    stopped_by: str = "tolerance"


def refine(
    search: Search,
    score: Callable[[list[Any], int], np.ndarray],
    rounds: Sequence[int],
    tol: float = 0.01,
    max_levels: int = 8,
) -> Refined:
    """A parameter per round, chosen on tuning instances by a grid refined until it stops paying (module docstring).

    Parameters
    ----------
    search : Search
        The start grid, its spacing and the map from points to parameters.
    score : callable
        score(parameters, last) gives the (len(parameters), last) mean log10 errors on the tuning instances
        after rounds 1..last of each parameter.
    rounds : sequence of int
        The rounds to choose at, ascending (1..R and the equal-numbers checkpoints).
    tol : float
        The relative error improvement below which a level does not count as a gain; two such levels in a row
        are the last.
    max_levels : int
        The most levels after the start grid.

    Returns
    -------
    Refined
        The choice per round, its tuning score, the evaluations and levels it took and why it stopped.
    """
    rounds = sorted(rounds)
    scored: dict[Point, np.ndarray] = {}  # point -> (last,) scores from round 1
    best: dict[int, tuple[Point, float]] = {}  # round -> (its best point so far, that point's score)

    def evaluate(points: list[Point], needs: dict[Point, int]) -> None:
        """Score `points` and make each round's best the first listed of the smallest scores so far."""
        first_new = len(scored)
        for bucket in _buckets(points, needs, rounds):
            last = max(needs[p] for p in bucket)
            values = score([search.value(p) for p in bucket], last)
            for p, row in zip(bucket, values, strict=True):
                scored[p] = row
        for p in itertools.islice(scored, first_new, None):  # in scored's order: the earlier point keeps a tie
            _lower_bests(best, p, scored[p], rounds)

    start = [p for p in search.start if search.valid(p)]
    if not start:
        raise ValueError("refine needs at least one valid start point")
    evaluate(start, dict.fromkeys(start, rounds[-1]))
    levels, stopped_by, idle = 0, "max_levels", 0
    for level in range(1, max_levels + 1):
        before = {r: best[r][1] for r in rounds}
        step = tuple(h / 2**level for h in search.step)
        needs: dict[Point, int] = {}
        for r in rounds:
            centre = best[r][0]
            for offset in itertools.product((-1, 0, 1), repeat=len(step)):
                p = tuple(round(c + h * o, 12) for c, h, o in zip(centre, step, offset, strict=True))
                if p not in scored and search.valid(p):
                    needs[p] = max(needs.get(p, 0), r)
        evaluate(list(needs), needs)
        levels = level
        gain = max((_gain(before[r], best[r][1]) for r in rounds), default=0.0)
        idle = idle + 1 if gain <= math.log10(1 + tol) else 0
        if idle == 2:
            stopped_by = "tolerance"
            break
    return Refined(
        {r: best[r][0] for r in rounds}, {r: float(best[r][1]) for r in rounds}, len(scored), levels, stopped_by
    )


def _lower_bests(best: dict[int, tuple[Point, float]], point: Point, row: np.ndarray, rounds: Sequence[int]) -> None:
    """Make `point` the best of each round r <= len(row) it has no best at, or where its score row[r - 1] is below
    the best's (non-finite scores as +inf): `choose`'s rule, applied one newly scored point at a time."""
    for r in rounds:
        if r <= len(row) and (r not in best or _finite_or_inf(row[r - 1]) < _finite_or_inf(best[r][1])):
            best[r] = (point, row[r - 1])


def _gain(old: float, new: float) -> float:
    """How much lower (log10) a round's best score became; 0 when neither is finite."""
    if not math.isfinite(new):
        return 0.0
    return math.inf if not math.isfinite(old) else old - new


def _buckets(points: list[Point], needs: dict[Point, int], rounds: Sequence[int]) -> list[list[Point]]:
    """The points in at most two runs (two_runs): those needed only up to the last round before the first gap in
    `rounds` (1..R) and the rest, so that a value needed at round 3 does not run to the largest checkpoint."""
    head = next((b for a, b in zip(rounds, rounds[1:], strict=False) if b != a + 1), None)
    return two_runs(points, needs, rounds[-1] if head is None else rounds[rounds.index(head) - 1])


def two_runs(keys: Sequence[K], needs: Mapping[K, int], cut: int) -> list[list[K]]:
    """`keys` split into the batched runs they take: those needed up to round `cut` and those needed past it, each in
    the given order, leaving out an empty one (so [] for no keys).

    Batching two values in one run moves their results at the 1e-12 level, so each caller keeps its own cut
    (docs/guide/bridge.md, "One selection protocol")."""
    short = [k for k in keys if needs[k] <= cut]
    long = [k for k in keys if needs[k] > cut]
    return [run for run in (short, long) if run]
