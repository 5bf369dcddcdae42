"""Full-batch Adam that keeps the best parameters it has seen (learned PDMM, the PDMM-transformer), and the one
plateau rule every early stop of the project applies (docs/guide/training.md, "Until validation stops improving").

The plateau rule, over evaluations v_0, v_1, ... of a watched value (lower is better unless said otherwise):

- the reference is the last improving evaluation, and the first evaluation always improves;
- v_k improves when v_k < ref - |ref| min_delta (or v_k > ref + |ref| min_delta when higher is better),
  so that a gain of a fraction min_delta or less of the reference does not count;
- the run stops at the evaluation that completes `patience` evaluations in a row without improvement;
  patience 0 means never.

`plateau_step` applies it one evaluation at a time, `plateaued` says whether it stops the run, and `plateau`
runs it over a whole sequence. Two callers apply it, and each keeps its own parameters:

- `pdmm-bridge train` (experiments/train.py, `train.patience`, `train.min_delta`) evaluates every
  `train.eval_interval` steps and writes best.pt at every improving evaluation, so best.pt holds the weights
  of the reference: a checkpoint the rule itself stands on, which a resumed run restores exactly.
- `adam_keep_best` (the comparison's fits, PATIENCE and MIN_DELTA) watches the validation loss after every
  step and keeps the parameters of the strictly lowest validation loss seen, which may be a gain too small
  to count: a fit reports the best model it found, the rule only decides when to stop looking.

Changing what either keeps would change committed results, so each stays as it is.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

PATIENCE, MIN_DELTA = 100, 1e-3  # the comparison's plateau rule: 100 full-batch steps without a 0.1 % gain


def plateau_step(best: float | None, since: int, value: float, min_delta: float, lower: bool) -> tuple[float, int]:
    """(reference, evaluations since it) after one more evaluation `value` under the plateau rule (module docstring).

    `value` improves on the reference `best` when it is below best - |best| min_delta (best (1 - min_delta) for the
    usual best >= 0), or above best + |best| min_delta when higher is better (`lower` False); the first evaluation
    (best None) always improves. An improvement becomes the reference, 0 evaluations ago."""
    if best is None:
        return value, 0
    margin = abs(best) * min_delta
    improved = value < best - margin if lower else value > best + margin
    return (value, 0) if improved else (best, since + 1)


def plateaued(since: int, patience: int) -> bool:
    """Whether `since` evaluations without improvement end the run (patience 0: never)."""
    return 0 < patience <= since


def plateau(
    values: Sequence[float], patience: int, min_delta: float = 0.0, lower: bool = True
) -> tuple[bool, int | None]:
    """The plateau rule over evaluations `values`, oldest first: (whether it stops the run, index of the reference).

    The run stops at the first evaluation that completes `patience` evaluations in a row without improvement
    (plateau_step), and the reference is the last improving evaluation up to that one (None for no values);
    training and adam_keep_best apply the same steps one evaluation at a time.

        plateau([2.0, 1.5, 1.6, 1.7], patience=2)  # (True, 1): stops at the fourth evaluation, reference the second
    """
    best, since, index = None, 0, None
    for position, value in enumerate(values):
        best, since = plateau_step(best, since, value, min_delta, lower)
        index = position - since
        if plateaued(since, patience):
            return True, index
    return False, index


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
    model at the parameters of the strictly lowest validation_fn() (no gradients; the first on a tie), or of
    the lowest training loss when validation_fn is None (then no plateau rule: every step runs).

    With validation_fn it stops under the plateau rule (module docstring) on the validation loss after every
    step, with `patience` (0: never) and `min_delta`. Returns a FitLog; training stops when a loss stops being
    finite."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    log, best, reference, since = FitLog(), None, None, 0
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
        if validation_fn is not None:
            reference, since = plateau_step(reference, since, watched[-1], min_delta, lower=True)
            if plateaued(since, patience):
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
