"""The collectives of the partitioned engine with torch.distributed, each failure one line (docs/guide/distributed.md,
"Launching a solve job"): CollectiveError, collective (torch's op, its failure a CollectiveError), check_group (the
rank and world size of an initialised group), all_gathered (every rank's ints) and all_sum (a tensor summed over the
ranks, in place). pdmm.distributed runs the engine on them and pdmm.parts derives a part's ids with them.
"""

from typing import Any

import numpy as np
import torch
import torch.distributed as dist


class CollectiveError(RuntimeError):
    """A collective of the distributed solve failed: another rank ended (its connections closed) or did not answer
    within the process group's timeout (a stopped or hung process). The message says which, in one line."""


def collective(op: Any, *args: Any, **kwargs: Any) -> Any:
    """torch.distributed's op called with the arguments given, its failure a CollectiveError with gloo's reason in
    one line (the reason without gloo's source path and advice): "Connection reset by peer", "Timed out waiting
    120000ms ..."."""
    try:
        return op(*args, **kwargs)
    except RuntimeError as err:
        text = " ".join(str(err).split())
        reason = text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text
        reason = reason.split(". This is typically caused", 1)[0].rstrip(".")
        raise CollectiveError(
            f"a collective with the other processes failed ({reason}): one of them ended, or did "
            "not answer within the process group's timeout"
        ) from err


def check_group(group: Any = None) -> tuple[int, int]:
    """The (rank, world size) of an initialised process group, or a RuntimeError saying how to get one."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "backend='distributed' needs an initialised torch.distributed process group: run the "
            "script under torchrun and call pdmm.distributed.init_process_group() (or "
            "torch.distributed.init_process_group('gloo')) before pdmm.solve"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def all_gathered(values: list[int], group: Any = None) -> np.ndarray:
    """Every rank's `values` (ints), (world, len(values)) int64 in rank order: one all_gather on the CPU."""
    mine = torch.tensor(values, dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    collective(dist.all_gather, every, mine, group=group)
    return torch.stack(every).numpy()


def all_sum(t: torch.Tensor, group: Any) -> torch.Tensor:
    """t summed over the ranks of `group`, in place (one all_reduce)."""
    collective(dist.all_reduce, t, group=group)
    return t


__all__ = ["CollectiveError", "collective", "check_group", "all_gathered", "all_sum"]
