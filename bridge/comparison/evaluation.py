"""One seed of the comparison, every row on that seed's instances (evaluate_seed), and compare, every seed into a
CompareTable, training the transformer rows through the caller's hook and keeping each seed in the caller's cache
(docs/guide/bridge.md, "Transformers against the classical methods, round by round")."""

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .fits import frontier_rows, learned_pdmm_rows, pdmm_transformer_rows
from .rows import BAYES, BEST_ONE_NUMBER, BEST_TRANSFORMER, FROM_PDMM, ORACLE, TUNED, numbers_sent, row_of
from .runs import (
    SeedRun,
    bayes_oracle_errors,
    depth_of,
    model_errors,
    oracle_errors,
    validation_scores,
)
from .seeds import SeedResult
from .setting import Setting
from .table import CompareTable
from .tuning import classical_rows, select_rows


def evaluate_seed(
    setting: Setting,
    seed: int,
    transformers: dict[str, Any],
    progress: Callable[[str], None] = lambda text: None,
    training: dict[str, Any] | None = None,
) -> SeedResult:
    """SeedResult of every row (bridge.comparison's docstring) on seed `seed`'s instances; `transformers` maps a
    row label to that seed's trained GraphTransformer; `training` (optional) what training them took,
    {label: {...}}, kept in the result. Every choice is made on the tuning and validation instances
    (bridge.selection); the held-out sets are only run."""
    run = SeedRun.draw(setting, seed)
    R, result = setting.rounds, run.result
    progress("oracles")
    for name, instances in run.sets.items():
        run.record.errors(ORACLE.label, name, oracle_errors(instances, R))
        run.record.errors(BAYES.label, name, bayes_oracle_errors(instances, R, setting.mu_scale**2))
    scores = classical_rows(run, progress)
    progress("learned pdmm")
    scores.update(learned_pdmm_rows(run))
    progress("pdmm-transformer")
    scores.update(pdmm_transformer_rows(run))
    scores.update(frontier_rows(run))
    select_rows(BEST_ONE_NUMBER, BEST_ONE_NUMBER.chosen_from, scores, range(1, R + 1), run.sets, run.record, result)
    scores.update(transformer_rows(run, transformers, progress))
    result.fitted["validation scores"] = {
        label: {r: s if math.isfinite(s) else None for r, s in values.items()} for label, values in scores.items()
    }
    if training:
        result.fitted["training"] = training
    return result


def transformer_rows(
    run: SeedRun, transformers: dict[str, Any], progress: Callable[[str], None]
) -> dict[str, dict[int, float]]:
    """The rows of the trained GraphTransformers {label: model} passed in (untied ones up to their depth, tied ones
    every round; `progress` told each label) and BEST_TRANSFORMER chosen among the widest of them; returns their
    validation scores {label: {round: score}}."""
    R = run.setting.rounds
    widest = max((model.numbers_sent for model in transformers.values()), default=None)
    scores = {}
    for label, model in transformers.items():
        progress(label)
        model.eval()
        for name, instances in run.sets.items():
            run.record.errors(label, name, model_errors(model, instances, rounds=depth_of(model, R)))
        scores[label] = validation_scores(model_errors(model, run.validation, rounds=depth_of(model, R)))
    full_width = [label for label, model in transformers.items() if model.numbers_sent == widest]
    if full_width:
        select_rows(BEST_TRANSFORMER, full_width, scores, range(1, R + 1), run.sets, run.record, run.result)
    return scores


def evaluation_stages(transformers: Iterable[str]) -> list[str]:
    """The stages evaluate_seed tells its progress callback, in order.

    Parameters
    ----------
    transformers : iterable of str
        The labels of the trained transformer rows passed to evaluate_seed.

    Returns
    -------
    list of str
        The oracles, the tuning of each classical method, the fastest-mixing weights, the polynomial filters,
        learned PDMM, the PDMM-transformers and each transformer row.
    """
    fixed = ["oracles", *(f"tuning {name}" for name in TUNED), "fastest-mixing weights", "polynomial filters"]
    return [*fixed, "learned pdmm", "pdmm-transformer", *transformers]


def equal_sent_rounds(widths: Iterable[int], depth: int, rounds: int) -> tuple[int, ...]:
    """The rounds past 1..R at which the classical rows must also run (Setting.checkpoints) for the verdicts at equal
    numbers sent: w r for every row sending w numbers per edge and round (the transformer rows and the
    PDMM-transformer), at its rounds 1 and K (docs/guide/bridge.md).

    Parameters
    ----------
    widths : iterable of int
        What each transformer row sends per edge and round.
    depth : int
        K, the transformers' depth.
    rounds : int
        R, the rounds compared.

    Returns
    -------
    tuple of int
        Sorted, none in 1..R.
    """
    sent = {FROM_PDMM.sent, *widths}
    return tuple(sorted({w * r for w in sent if w is not None for r in (1, depth)} - set(range(1, rounds + 1))))


@dataclass
class Trained:
    """What a train hook of compare gives for one transformer row and seed.

    Attributes
    ----------
    model : GraphTransformer
        The trained model at the weights to compare (attention.GraphTransformer with numbers_sent).
    budget : dict
        What training took, kept in SeedResult.fitted["training"][label]: steps, best_step, wall_seconds and
        stopped_by (the shapes seeds.check_fitted reads).
    curves : list of dict
        The validation evaluations, {step, val_loss, val_error} each (compare adds method and seed).
    """

    model: Any
    budget: dict[str, Any]
    curves: list[dict[str, Any]] = field(default_factory=list)


class SeedCache(Protocol):
    """Where compare keeps each seed's result (`pdmm-bridge compare`: OUT/seeds/, so that a killed compare resumes)."""

    def load(self, seed: int) -> SeedResult | None:
        """The seed's kept result, None when there is none for this comparison."""

    def save(self, seed: int, result: SeedResult) -> None:
        """Keep the seed's result."""


class RowsDiffer(ValueError):
    """Two seeds' results hold different rows (a cached result edited by hand): `seeds` = (that seed, the first)."""

    def __init__(self, seed: int, first: int) -> None:
        super().__init__(f"seeds {seed} and {first} hold different rows")
        self.seeds = (seed, first)


def compare(
    setting: Setting,
    seeds: Iterable[int],
    transformers: Mapping[str, int] | None = None,
    train: Callable[[str, int], Trained] | None = None,
    cache: SeedCache | None = None,
    progress: Callable[[int, str | None], None] = lambda seed, stage: None,
) -> CompareTable:
    """Every row of the comparison (bridge.comparison's docstring) over seeds (docs/guide/bridge.md, "Transformers
    against the classical methods, round by round").

    Each seed's result is `cache.load(seed)` where the cache has it; else every transformer row is trained by
    `train(label, seed)`, the seed evaluated (evaluate_seed, with what training took and its learning curves) and
    saved to the cache, then used as it reads back, so that a resumed comparison gives the same table. Every
    cached result is loaded (and so checked by the cache) before anything is trained.

    Parameters
    ----------
    setting : Setting
        What runs: the family, depth, rounds, instance counts and fitting caps; its checkpoints should include
        equal_sent_rounds of the transformer rows' widths.
    seeds : iterable of int
        The seeds; each draws its own instances (Setting.draw) and fits and trains its own rows.
    transformers : mapping or None
        {label: numbers the row sends per edge and round} of the trained GraphTransformer rows, labels as in the
        table (e.g. "transformer (belief)", "tied transformer (standard)"); by default none.
    train : callable or None
        train(label, seed) -> Trained: trains (or resumes) that row for that seed; needed when there are
        transformer rows.
    cache : SeedCache or None
        Keeps each seed's result (load, save); None computes every seed.
    progress : callable
        progress(seed, stage) as each evaluation stage begins (evaluation_stages), progress(seed, None) when the
        seed's evaluation ends.

    Returns
    -------
    CompareTable
        The per-seed mean log10 errors of every (row, held-out set) and round.

    Raises
    ------
    ValueError
        For no seeds, a transformer label that names no transformer row (rows.row_of), transformer rows without a
        train hook; RowsDiffer (a ValueError) when two seeds' results hold
        different rows.
    """
    widths = dict(transformers or {})
    for label, width in widths.items():
        if row_of(label, width).kind != "transformer":  # else a ValueError naming the label
            raise ValueError(f"{label!r} is not a transformer row's label (rows.transformer(...).label)")
    if widths and train is None:
        raise ValueError(f"the transformer rows {', '.join(widths)} need a train(label, seed) hook to train them")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("compare needs at least one seed")
    kept = {seed: None if cache is None else cache.load(seed) for seed in seeds}
    results = {}
    for seed in seeds:
        result = kept[seed]
        results[seed] = result if result is not None else _seed_result(setting, seed, widths, train, cache, progress)
    first = set(results[seeds[0]].log_errors)
    odd = next((seed for seed in seeds if set(results[seed].log_errors) != first), None)
    if odd is not None:
        raise RowsDiffer(odd, seeds[0])
    sent = {label: _sent(label, widths) for label, _ in results[seeds[0]].log_errors}
    return CompareTable.from_seeds(setting, results, sent)


def _seed_result(
    setting: Setting,
    seed: int,
    widths: dict[str, int],
    train: Callable[[str, int], Trained] | None,
    cache: SeedCache | None,
    progress: Callable[[int, str | None], None],
) -> SeedResult:
    """One seed computed: its transformer rows trained, every row evaluated, saved to `cache` and read back."""
    trained = {label: train(label, seed) for label in widths} if train else {}
    models = {label: row.model for label, row in trained.items()}
    budgets = {label: row.budget for label, row in trained.items()}
    result = evaluate_seed(setting, seed, models, lambda stage: progress(seed, stage), training=budgets)
    progress(seed, None)
    result.curves = [{"method": label, "seed": seed, **row} for label, done in trained.items() for row in done.curves]
    if cache is None:
        return result
    cache.save(seed, result)
    again = cache.load(seed)
    return result if again is None else again


def _sent(label: str, widths: dict[str, int]) -> int | None:
    """numbers_sent of row `label` when the transformer rows send `widths` {label: numbers per edge and round}: the
    best transformer sends what the widest of them sends."""
    if label in widths:
        return widths[label]
    return max(widths.values(), default=None) if label == BEST_TRANSFORMER.label else numbers_sent(label)
