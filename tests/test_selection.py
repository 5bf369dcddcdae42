"""bridge.selection: every choice of the comparison on validation data, and the grid refinement of the classical
rows; a poisoned held-out set changes no choice of bridge.comparison.evaluate_seed."""

import itertools
import math

import numpy as np
import pytest
from compare_fixtures import SMALL

from bridge import comparison
from bridge.comparison import BEST, BEST_ONE_NUMBER, BEST_SAFE, Setting, evaluate_seed
from bridge.selection import Search, choose, refine, two_runs


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


def refine_before(search, score, rounds, tol, max_levels):
    """bridge.selection.refine as it was before it kept each round's best as it scored: every level chooses each
    round's point anew over every point scored so far (the smallest score, a non-finite one as +inf, the first
    scored on a tie), the values of a level run in two batches cut at the last round before the first gap."""
    rounds = sorted(rounds)
    head = next((b for a, b in zip(rounds, rounds[1:], strict=False) if b != a + 1), None)
    cut = rounds[-1] if head is None else rounds[rounds.index(head) - 1]
    scored = {}

    def evaluate(points, needs):
        for bucket in ([p for p in points if needs[p] <= cut], [p for p in points if needs[p] > cut]):
            if bucket:
                values = score([search.value(p) for p in bucket], max(needs[p] for p in bucket))
                scored.update(zip(bucket, values, strict=True))

    def finite(value):
        return value if math.isfinite(value) else math.inf

    def picked():
        present = {r: [p for p, s in scored.items() if r <= len(s)] for r in rounds}
        return {r: min(present[r], key=lambda p: finite(float(scored[p][r - 1]))) for r in rounds}

    start = [p for p in search.start if search.valid(p)]
    evaluate(start, dict.fromkeys(start, rounds[-1]))
    choice = picked()
    levels, stopped_by, idle = 0, "max_levels", 0
    for level in range(1, max_levels + 1):
        step = tuple(h / 2**level for h in search.step)
        needs = {}
        for r in rounds:
            for offset in itertools.product((-1, 0, 1), repeat=len(step)):
                p = tuple(round(c + h * o, 12) for c, h, o in zip(choice[r], step, offset, strict=True))
                if p not in scored and search.valid(p):
                    needs[p] = max(needs.get(p, 0), r)
        evaluate(list(needs), needs)
        levels, old, choice = level, choice, picked()
        gains = []
        for r in rounds:
            before, after = scored[old[r]][r - 1], scored[choice[r]][r - 1]
            gains.append(0.0 if not math.isfinite(after) else math.inf if not math.isfinite(before) else before - after)
        idle = idle + 1 if max(gains) <= math.log10(1 + tol) else 0
        if idle == 2:
            stopped_by = "tolerance"
            break
    scores = {r: float(scored[choice[r]][r - 1]) for r in rounds}
    return choice, scores, len(scored), levels, stopped_by


def tied_score(rng):
    """score(values, last) and its calls: per value and round one of a few levels (ties everywhere), NaN or inf
    for some values at some rounds; a value's scores do not depend on the batch it runs in."""
    a, b, levels, calls = rng.uniform(0.5, 4.0), rng.uniform(-1.0, 1.0), int(rng.integers(1, 6)), []

    def score(values, last):
        calls.append(([repr(v) for v in values], last))
        x = np.array([float(np.sum(v)) for v in values])[:, None]
        r = np.arange(1, last + 1)[None, :]
        s = np.floor(levels * np.cos(a * x + b * r)) - 0.1 * r
        kind = np.floor(8 * np.abs(x)) % 7 + 0 * r
        return np.where((kind == 0) & (r > 1), np.nan, np.where(kind == 1, np.inf, s))

    return score, calls


def random_search(rng):
    """A 1-D start grid (as rho's) or a 2-D one with a validity constraint (as a Chebyshev interval's)."""
    if rng.random() < 0.5:
        grid = np.linspace(-2.0, 2.0, int(rng.integers(2, 10)))
        return Search(tuple((float(x),) for x in grid), (float(grid[1] - grid[0]),), lambda p: 10.0 ** p[0])
    lows, highs = np.arange(-1.0, 0.5, 0.25), np.arange(-3.0, -0.4, 0.5)
    start = tuple((float(lo), float(hi)) for lo in lows for hi in highs)
    return Search(start, (0.25, 0.5), lambda p: p, lambda p: p[0] < 0.6 and p[1] < 0)


@pytest.mark.parametrize("seed", range(40))
def test_refine_keeps_the_choices_of_choosing_anew_over_every_scored_point(seed):
    """Random score tables full of ties, NaN and inf: refine's incremental per-round bests give the choices,
    scores, evaluations, levels, stop reason and batched score calls of choosing anew at every level."""
    rng = np.random.default_rng(seed)
    rounds = [*range(1, int(rng.integers(1, 6)) + 1), *sorted(set(rng.integers(6, 13, size=int(rng.integers(0, 3)))))]
    tol, max_levels = float(rng.choice([0.0, 0.01, 0.5])), int(rng.integers(1, 7))
    search = random_search(rng)
    new_score, new_calls = tied_score(np.random.default_rng([seed, 1]))
    old_score, old_calls = tied_score(np.random.default_rng([seed, 1]))
    refined = refine(search, new_score, rounds, tol, max_levels)
    before = refine_before(search, old_score, rounds, tol, max_levels)
    got = (refined.choice, refined.score, refined.evaluations, refined.levels, refined.stopped_by)
    assert repr(got) == repr(before)  # every float exactly, a NaN equal to a NaN
    assert new_calls == old_calls


def test_refine_needs_a_valid_start_point():
    search = Search(((1.0,), (2.0,)), (1.0,), lambda p: p[0], lambda p: False)
    with pytest.raises(ValueError, match="refine needs at least one valid start point"):
        refine(search, lambda values, last: np.zeros((len(values), last)), [1, 2])


def test_two_runs_splits_at_the_cut_in_the_given_order_and_leaves_out_an_empty_run():
    needs = {"a": 3, "b": 1, "c": 5, "d": 2, "e": 3}
    assert two_runs(["e", "a", "b", "c", "d"], needs, 3) == [["e", "a", "b", "d"], ["c"]]
    assert two_runs(["c", "b"], needs, 1) == [["b"], ["c"]]  # needed up to the cut: the first run
    assert two_runs(["a", "b"], needs, 5) == [["a", "b"]]
    assert two_runs(["c", "a"], needs, 2) == [["c", "a"]]
    assert two_runs([], needs, 2) == []


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
    assert {BEST.choice_key, BEST_SAFE.choice_key, BEST_ONE_NUMBER.choice_key} <= set(choices(clean))
    assert (
        dirty.log_errors[(comparison.per_round("pdmm").label, "ring")][0]
        != clean.log_errors[(comparison.per_round("pdmm").label, "ring")][0]
    )  # the held-out sets did change
