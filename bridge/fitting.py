"""Full-batch Adam that keeps the best parameters it has seen (learned PDMM, the PDMM-transformer)."""
import math

import torch


def adam_keep_best(model, loss_fn, steps, lr):
    """Run `steps` Adam steps on loss_fn() (a scalar tensor over the whole training set) and leave the
    model at the parameters of the lowest loss seen. Returns the losses before every step and after
    the last (`steps + 1`; fewer when the loss stops being finite, where training stops)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses, best = [], None
    for step in range(steps + 1):
        loss = loss_fn()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
        if best is None or losses[-1] < min(losses[:-1]):
            best = {name: p.detach().clone() for name, p in model.named_parameters()}
        if step == steps:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(best[name])
    return losses
