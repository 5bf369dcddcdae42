"""bridge.selection: every choice of the comparison on validation data, and the grid refinement of the classical
rows; a poisoned held-out set changes no choice of bridge.comparison.evaluate_seed."""

import math

import numpy as np
import pytest

from bridge import comparison
from bridge.comparison import BEST, BEST_ONE_NUMBER, BEST_SAFE, Setting, evaluate_seed
from bridge.consensus import GraphFamily
from bridge.selection import Search, choose, refine


def test_choose_takes_the_smallest_score_per_round_the_first_on_a_tie_and_skips_absent_rounds():
    scores = {"a": {1: -1.0, 2: -2.0, 3: -3.0}, "b": {1: -1.5, 2: -2.0}, "c": {1: math.inf, 3: math.nan}}
    assert choose(scores, ["a", "b", "c"], [1, 2, 3]) == {1: "b", 2: "a", 3: "a"}
    assert choose(scores, ["b", "a"], [2]) == {2: "b"}  # the first listed on a tie
    assert choose({"c": {1: math.nan}, "d": {1: 5.0}}, ["c", "d"], [1]) == {1: "d"}  # NaN never wins
    assert choose(scores, ["b"], [3]) == {}  # no candidate has round 3
    with pytest.raises(ValueError):
        choose(scores, [], [1])


def quadratic_score(centre_of):
    """score(values, last): a (values, last) table whose round-r minimum is at log10 rho = centre_of(r)."""
    calls = []

    def score(values, last):
        calls.append((len(values), last))
        x = np.log10(np.asarray(values, dtype=float))[:, None]
        rounds = np.arange(1, last + 1)[None, :]
        return (x - centre_of(rounds)) ** 2 - 1.0 * rounds

    return score, calls


def test_refine_finds_each_rounds_optimum_between_grid_points_and_stops_on_the_tolerance():
    centre = lambda r: 0.3 + 0.01 * r  # noqa: E731  (off every grid point of spacing 1/2^k)
    score, calls = quadratic_score(centre)
    search = Search(tuple((x,) for x in np.linspace(-2, 2, 9)), (0.5,), lambda p: 10.0 ** p[0])
    refined = refine(search, score, [1, 2, 3, 40], tol=1e-6, max_levels=30)
    for r, (x,) in refined.choice.items():
        assert abs(x - centre(r)) < 2e-3, (r, x)  # the start grid's best point is 0.2 away
    assert refined.stopped_by == "tolerance" and refined.levels > 5
    assert refined.evaluations == len({p for n, _ in calls for p in range(n)}) or refined.evaluations >= 9
    assert sum(n for n, _ in calls) == refined.evaluations  # no value scored twice
    assert any(last == 3 for _, last in calls)  # values needed only at rounds 1..3 do not run to round 40
    coarse = refine(search, score, [1, 2, 3, 40], tol=0.5, max_levels=30)
    assert coarse.levels < refined.levels  # a looser tolerance stops sooner
    capped = refine(search, score, [1, 2, 3, 40], tol=1e-9, max_levels=2)
    assert capped.stopped_by == "max_levels" and capped.levels == 2


def test_refine_never_proposes_an_invalid_point():
    seen = []

    def score(values, last):
        seen.extend(values)
        return np.array([[(lo - 0.05) ** 2 + (hi - 0.9) ** 2] * last for lo, hi in values])

    search = Search(
        tuple((lo, hi) for lo in (-1.0, 0.0) for hi in (0.5, 0.95)),
        (0.5, 0.2),
        lambda p: p,
        lambda p: p[0] < p[1] < 1,
    )
    refined = refine(search, score, [1, 2], tol=1e-12, max_levels=20)
    assert all(lo < hi < 1 for lo, hi in seen)
    assert abs(refined.choice[1][0] - 0.05) < 1e-3 and abs(refined.choice[1][1] - 0.9) < 1e-3


SMALL = Setting(
    GraphFamily("random_geometric", 10, 14),
    depth=2,
    rounds=3,
    test_graphs=1,
    tune_graphs=1,
    batch=3,
    learned_steps=2,
    finetune_steps=2,
    checkpoints=(6,),
    val_graphs=1,
)


def choices(result):
    """Everything fitted and chosen, but the seconds tuning took."""
    return {k: v for k, v in result.fitted.items() if k != "tuning effort"}


def test_a_poisoned_held_out_set_changes_no_choice(monkeypatch):
    """evaluate_seed with the held-out values replaced by huge noise: every tuned parameter, fitted model, validation
    score and choice of BEST, BEST_SAFE and the best model rows stays the same, while the held-out rows change."""
    clean = evaluate_seed(SMALL, 0, {})
    draw = Setting.draw

    def poisoned(self, seed):
        sets, tuning, validation = draw(self, seed)
        rng = np.random.default_rng(99)
        sets = {name: [(G, 1e6 * rng.normal(size=a.shape), s) for G, a, s in inst] for name, inst in sets.items()}
        return sets, tuning, validation

    monkeypatch.setattr(Setting, "draw", poisoned)
    dirty = evaluate_seed(SMALL, 0, {})
    assert choices(dirty) == choices(clean)
    assert {f"{BEST} per round", f"{BEST_SAFE} per round", f"{BEST_ONE_NUMBER} per round"} <= set(choices(clean))
    assert (
        dirty.log_errors[(comparison.per_round("pdmm"), "ring")][0]
        != clean.log_errors[(comparison.per_round("pdmm"), "ring")][0]
    )  # the held-out sets did change
