"""The fitted rows of one seed: learned PDMM, the PDMM-transformers (hand-set, trained from PDMM and from random
weights) and the one-number PDMM-transformers of bridge.frontier, each fitted to the tuning instances until the
validation loss plateaus (bridge.fitting), with what each fit did and took kept in SeedResult.fitted
(docs/guide/bridge.md, "Transformers against the classical methods, round by round")."""

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import frontier
from ..consensus import disagreement_error
from ..learned import fit
from ..pdmm_transformer import fit_graph_model, pdmm_features, pdmm_transformer, weight_shift
from ..unrolled import UnrolledPDMM
from .rows import FROM_PDMM, FROM_RANDOM, HAND_SET, LEARNED, ONE_NUMBER, ONE_NUMBER_TIED, per_round
from .runs import SeedRun, depth_of, model_errors, validation_scores
from .seeds import SeedResult
from .setting import Instance, averaging_problem

RHO = str(per_round("pdmm").fitted_key)  # PDMM's rho tuned per round: where every fitted row starts


def _problems(instances: Sequence[Instance]) -> list[tuple[Any, torch.Tensor, np.ndarray]]:
    """Learned PDMM's training data: per instance (its averaging problem, the average at every node (B, n, 1),
    x0 = a (B, n, 1))."""
    return [
        (
            averaging_problem(G, a),
            torch.as_tensor(a.mean(1, keepdims=True)[..., None]).expand(*a.shape, 1),
            a[..., None],
        )
        for G, a, _ in instances
    ]


def _learned_errors(learned: UnrolledPDMM, instances: Sequence[Instance]) -> torch.Tensor:
    """(rounds, instances) errors of learned PDMM from x0 = a."""
    return torch.cat(
        [
            disagreement_error(learned(averaging_problem(G, a), x0=a[..., None])[..., 0].detach(), torch.as_tensor(a))
            for G, a, *_ in instances
        ],
        1,
    )


def learned_pdmm_rows(run: SeedRun) -> dict[str, dict[int, float]]:
    """LEARNED: unrolled PDMM with per-round rho_k and theta_k (bridge.UnrolledPDMM) of R layers from PDMM tuned
    for round R, fitted to the tuning instances (bridge.learned.fit); its schedules and fit kept in result.fitted.
    Returns its validation scores {LEARNED: {round: score}}."""
    learned = UnrolledPDMM(run.setting.rounds, rho=run.result.fitted[RHO][run.setting.rounds], learnable=True)
    began = time.perf_counter()
    log = fit(learned, _problems(run.tuning), run.setting.learned_steps, validation=_problems(run.validation))
    _fit_effort(run.result, LEARNED.label, [log], run.tuning, began)
    for name, instances in run.sets.items():
        run.record.errors(LEARNED.label, name, _learned_errors(learned, instances))
    scores = {LEARNED.label: validation_scores(_learned_errors(learned, run.validation))}
    run.result.fitted["learned rho_k"] = learned.rho().tolist()
    run.result.fitted["learned theta_k"] = learned.theta().tolist()
    run.result.fitted[LEARNED.fit_key] = _fit_summary(log)
    return scores


def pdmm_transformer_rows(run: SeedRun) -> dict[str, dict[int, float]]:
    """HAND_SET: PDMM as a transformer (bridge.pdmm_transformer) at the rho tuned for round R, sending 1 number;
    FROM_PDMM and FROM_RANDOM: K layers from PDMM tuned for round K, fitted to the tuning instances from the PDMM
    weights and from random ones, their fits and weight shifts from PDMM kept in result.fitted. Returns the
    validation scores {HAND_SET: {round: score}} (the trained ones are never chosen)."""
    R, K = run.setting.rounds, run.setting.depth
    rho = run.result.fitted[RHO][R]
    features = lambda G, a: pdmm_features(G, a, rho)  # noqa: E731
    hand_set = pdmm_transformer(rho, R, start="a", kernel="mean")  # PDMM at the rho tuned for round R, 1 number
    for name, instances in run.sets.items():
        run.record.errors(HAND_SET.label, name, model_errors(hand_set, instances, features=features, self_loops=False))
    held = model_errors(hand_set, run.validation, features=features, self_loops=False)
    scores = {HAND_SET.label: validation_scores(held)}
    rho = run.result.fitted[RHO][K]  # the trained ones run K rounds: they start from PDMM tuned for K
    features = lambda G, a: pdmm_features(G, a, rho)  # noqa: E731
    reference = pdmm_transformer(rho, K, start="a")
    for row, init, lr in (
        (FROM_PDMM, "pdmm", run.setting.finetune_lr[0]),
        (FROM_RANDOM, "random", run.setting.finetune_lr[1]),
    ):
        model = pdmm_transformer(rho, K, start="a", init=init, seed=run.seed)
        began = time.perf_counter()
        log = fit_graph_model(
            model,
            [(G, a) for G, a, _ in run.tuning],
            run.setting.finetune_steps,
            lr,
            features,
            validation=[(G, a) for G, a, _ in run.validation],
        )
        for name, instances in run.sets.items():
            run.record.errors(row.label, name, model_errors(model, instances, features=features, self_loops=False))
        _fit_effort(run.result, row.label, [log], run.tuning, began)
        run.result.fitted[row.fit_key] = _fit_summary(log)
        run.result.fitted[row.shift_key] = weight_shift(model, reference)
    return scores


def frontier_rows(run: SeedRun) -> dict[str, dict[int, float]]:
    """The one-number PDMM-transformers of bridge.frontier: untied from PDMM tuned for round K, tied from PDMM
    (x^0 = 0) tuned for round R, each fitted with the PDMM-transformer's cap and lr per stage; returns their
    validation scores {row: {round: score}}."""
    K, R = run.setting.depth, run.setting.rounds
    steps, lr = run.setting.finetune_steps, run.setting.finetune_lr[0]
    scores = {}
    for row, key in ((ONE_NUMBER, K), (ONE_NUMBER_TIED, R)):
        rho = run.result.fitted[RHO][key]
        began = time.perf_counter()
        if not row.tied:
            model, logs = frontier.one_number_untied(rho, K, run.tuning, run.validation, steps, lr)
        else:
            model, logs = frontier.one_number_tied(
                rho,
                K,
                R,
                run.tuning,
                run.validation,
                steps,
                lr,
                run.setting.family,
                frontier.seed_rng(run.seed),
                run.setting.mu_scale,
            )
        _fit_effort(run.result, row.label, logs, run.tuning, began)
        features = lambda G, a, rho=rho: pdmm_features(G, a, rho)  # noqa: E731
        for name, instances in run.sets.items():
            run.record.errors(
                row.label,
                name,
                model_errors(model, instances, rounds=depth_of(model, R), features=features, self_loops=False),
            )
        scores[row.label] = validation_scores(
            model_errors(model, run.validation, rounds=depth_of(model, R), features=features, self_loops=False)
        )
        run.result.fitted[row.fit_key] = [_fit_summary(log) for log in logs]
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
