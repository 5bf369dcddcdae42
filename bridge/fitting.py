"""Full-batch Adam that keeps the best parameters it has seen (learned PDMM, the PDMM-transformer).

Without a validation loss it runs a fixed number of steps and keeps the parameters of the lowest
training loss. With one (the comparison's fits) it trains until the validation loss plateaus: it
stops once `patience` steps in a row have not lowered the best validation loss by more than
`min_delta` (relative), or at the step cap, and keeps the parameters of the best validation loss.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

PATIENCE, MIN_DELTA = 100, 1e-3  # the comparison's plateau rule: 100 full-batch steps without a 0.1 % gain


@dataclass
class FitLog:
    """What a fit did: training losses before every step (and after the last), validation losses at the
    same points (empty without a validation loss), the step of the kept parameters and why it stopped
    ("plateau", "cap": the step cap was reached first, or "not finite")."""

    losses: list[float] = field(default_factory=list)
    validation: list[float] = field(default_factory=list)
    best_step: int = 0
    stopped_by: str = "cap"


def adam_keep_best(
    model: nn.Module,
    loss_fn: Callable[[], Tensor],
    steps: int,
    lr: float,
    validation_fn: Callable[[], Tensor | float] | None = None,
    patience: int = PATIENCE,
    min_delta: float = MIN_DELTA,
) -> FitLog:
    """Adam on loss_fn() (a scalar tensor over the whole training set) for at most `steps` steps, leaving the
    model at the parameters of the lowest validation_fn() (no gradients), or of the lowest training loss
    when validation_fn is None (then no plateau rule: every step runs). Returns a FitLog; training stops
    when a loss stops being finite."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    log, best, since, previous = FitLog(), None, 0, 0
    for step in range(steps + 1):
        loss = loss_fn()
        log.losses.append(loss.item())
        if validation_fn is not None:
            with torch.no_grad():
                log.validation.append(float(validation_fn()))
        watched = log.losses if validation_fn is None else log.validation
        if not (math.isfinite(log.losses[-1]) and math.isfinite(watched[-1])):
            log.stopped_by = "not finite"
            break
        improved = best is None or watched[-1] < watched[log.best_step]
        if improved:
            best, log.best_step = {name: p.detach().clone() for name, p in model.named_parameters()}, step
        gained = improved and (step == 0 or watched[-1] < watched[previous] - min_delta * abs(watched[previous]))
        previous, since = (step, 0) if gained else (previous, since + 1)  # the plateau counter's reference
        if validation_fn is not None and since >= patience:
            log.stopped_by = "plateau"
            break
        if step == steps:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if best is not None:  # else the very first loss was not finite: the parameters stay as they were
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(best[name])
    return log
