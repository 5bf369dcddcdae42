"""When a training run stops early: the train.stop_metric target and the plateau rule (train.patience evaluations
without an improvement of more than train.min_delta), and which way each metric improves (docs/guide/training.md,
"Until validation stops improving").

    plateau([2.0, 1.5, 1.6, 1.7], patience=2)  # (True, 1): stops at the fourth evaluation, best the second
"""

from collections.abc import Sequence

from .config import TrainConfig


def lower_is_better(metric):
    """Losses and errors are minimised; everything else (accuracies) maximised."""
    return "loss" in metric or "error" in metric


def reached(row, train):
    """Whether this evaluation row meets the early-stopping target (train.stop_metric reaches stop_value)."""
    value = row.get(train.stop_metric) if train.stop_metric else None
    if value is None:
        return False
    return value <= train.stop_value if lower_is_better(train.stop_metric) else value >= train.stop_value


def plateau_step(best: float | None, since: int, value: float, min_delta: float, lower: bool) -> tuple[float, int]:
    """(best, evaluations since it) after one more evaluation `value` under the plateau rule.

    `value` improves on `best` when it is below best - |best| min_delta (best (1 - min_delta) for the
    usual best >= 0), or above best + |best| min_delta when higher is better (`lower` False); the first
    evaluation (best None) always improves. An improvement becomes the best, 0 evaluations ago."""
    margin = 0.0 if best is None else abs(best) * min_delta
    improved = best is None or (value < best - margin if lower else value > best + margin)
    return (value, 0) if improved else (best, since + 1)


def plateaued(since: int, patience: int) -> bool:
    """Whether `since` evaluations without improvement end the run (patience 0: never)."""
    return 0 < patience <= since


def plateau(
    values: Sequence[float], patience: int, min_delta: float = 0.0, lower: bool = True
) -> tuple[bool, int | None]:
    """The plateau rule over evaluations `values`, oldest first: (whether it stops the run, index of the best).

    The run stops at the first evaluation that completes `patience` evaluations in a row without
    improvement (plateau_step), and the best is the last improving evaluation up to that one (None
    for no values); the training loop applies the same steps one evaluation at a time."""
    best, since, index = None, 0, None
    for position, value in enumerate(values):
        best, since = plateau_step(best, since, value, min_delta, lower)
        index = position - since
        if plateaued(since, patience):
            return True, index
    return False, index


def stop_reason(state: dict, train: TrainConfig) -> str:
    """What ended a run: "plateau" (the patience rule), "stop_metric" (its target), or "max_iters" (the cap)."""
    if not state["stopped"]:
        return "max_iters"
    return "plateau" if plateaued(state["since_best"], train.patience) else "stop_metric"
