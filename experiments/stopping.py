"""When a training run stops early: the train.stop_metric target, which way each metric improves, and the reason
summary.json records (docs/guide/training.md, "Until validation stops improving"). The plateau rule itself
(train.patience evaluations without an improvement of more than train.min_delta) is bridge.fitting's, the one
rule the comparison's fits apply too.
"""

from bridge.fitting import plateaued

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


def stop_reason(state: dict, train: TrainConfig) -> str:
    """What ended a run: "plateau" (the patience rule), "stop_metric" (its target), or "max_iters" (the cap)."""
    if not state["stopped"]:
        return "max_iters"
    return "plateau" if plateaued(state["since_best"], train.patience) else "stop_metric"
