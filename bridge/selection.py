"""Every choice the comparison makes, and the data it is made on (docs/guide/bridge.md, "One selection protocol").

The comparison reports rows on held-out sets; no choice behind a row may look at them. Two functions make
every choice, each on instances drawn like the held-out sets' training family but apart from them:

- `choose`: per round r, the candidate with the smallest score S_c(r), a mean log10 error on the
  validation instances. It picks "best classical", "best non-diverging classical", the best trained
  transformer and the best one-number model, and, inside `refine`, each classical row's parameter.
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
from typing import Any

import numpy as np

Point = tuple[float, ...]


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

    def evaluate(points: list[Point], needs: dict[Point, int]) -> None:
        for bucket in _buckets(points, needs, rounds):
            last = max(needs[p] for p in bucket)
            values = score([search.value(p) for p in bucket], last)
            for p, row in zip(bucket, values, strict=True):
                scored[p] = row

    def table() -> dict[str, dict[int, float]]:
        return {repr(p): {r: float(s[r - 1]) for r in rounds if r <= len(s)} for p, s in scored.items()}

    start = [p for p in search.start if search.valid(p)]
    evaluate(start, dict.fromkeys(start, rounds[-1]))
    keys = {repr(p): p for p in scored}
    picked = choose(table(), list(keys), rounds)
    best = {r: scored[keys[picked[r]]][r - 1] for r in rounds}
    levels, stopped_by, idle = 0, "max_levels", 0
    for level in range(1, max_levels + 1):
        step = tuple(h / 2**level for h in search.step)
        needs: dict[Point, int] = {}
        for r in rounds:
            centre = keys[picked[r]]
            for offset in itertools.product((-1, 0, 1), repeat=len(step)):
                p = tuple(round(c + h * o, 12) for c, h, o in zip(centre, step, offset, strict=True))
                if p not in scored and search.valid(p):
                    needs[p] = max(needs.get(p, 0), r)
        evaluate(list(needs), needs)
        levels = level
        keys = {repr(p): p for p in scored}
        picked = choose(table(), list(keys), rounds)
        new = {r: scored[keys[picked[r]]][r - 1] for r in rounds}
        gain = max((_gain(best[r], new[r]) for r in rounds), default=0.0)
        best = new
        idle = idle + 1 if gain <= math.log10(1 + tol) else 0
        if idle == 2:
            stopped_by = "tolerance"
            break
    evaluations = len(scored)
    return Refined(
        {r: keys[picked[r]] for r in rounds}, {r: float(best[r]) for r in rounds}, evaluations, levels, stopped_by
    )


def _gain(old: float, new: float) -> float:
    """How much lower (log10) a round's best score became; 0 when neither is finite."""
    if not math.isfinite(new):
        return 0.0
    return math.inf if not math.isfinite(old) else old - new


def _buckets(points: list[Point], needs: dict[Point, int], rounds: Sequence[int]) -> list[list[Point]]:
    """The points in at most two runs: those needed only up to the last round before the first gap in
    `rounds` (1..R) and the rest, so that a value needed at round 3 does not run to the largest checkpoint."""
    if not points:
        return []
    head = next((b for a, b in zip(rounds, rounds[1:], strict=False) if b != a + 1), None)
    cut = rounds[-1] if head is None else rounds[rounds.index(head) - 1]
    short = [p for p in points if needs[p] <= cut]
    long = [p for p in points if needs[p] > cut]
    return [b for b in (short, long) if b]
