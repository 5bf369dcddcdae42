"""One seed of the comparison, every row on that seed's instances (evaluate_seed), and compare, every seed into a
CompareTable (docs/guide/bridge.md, "Transformers against the classical methods, round by round")."""

import math
from collections.abc import Callable, Iterable
from typing import Any

from .fits import frontier_rows, learned_pdmm_rows, pdmm_transformer_rows
from .rows import BAYES, BEST_ONE_NUMBER, BEST_TRANSFORMER, ORACLE, numbers_sent
from .runs import (
    SeedResult,
    SeedRun,
    bayes_oracle_errors,
    depth_of,
    model_errors,
    oracle_errors,
    validation_scores,
)
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


def compare(
    setting: Setting,
    seeds: Iterable[int],
    transformers: Callable[[int], dict[str, Any]] = lambda seed: {},
    progress: Callable[[str], None] = lambda text: None,
) -> CompareTable:
    """Every row of the comparison (bridge.comparison's docstring) over seeds (docs/guide/bridge.md, "Transformers
    against the classical methods, round by round").

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
