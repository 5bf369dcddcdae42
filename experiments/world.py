"""The processes that train one model together under torchrun (DistributedDataParallel).

    torchrun --nproc-per-node P -m experiments train CONFIG    # process_group() starts the group

process_group() starts the torch.distributed group of a torchrun launch (gloo on CPU, nccl on CUDA)
and ends it; World says which process this is and holds the few collectives the training loop needs:
rank 0 runs a function and shares its result or error (World.first), every rank takes its share of
the global batch (World.shard), and the loss and the Ctrl-C flag are all-reduced once a step.
"""

import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .errors import UsageError
from .options import DIST_TIMEOUT


def torchrun_ranks():
    """(rank, world size, local rank) from the environment torchrun sets, or None in a plain process."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise UsageError(
            f"RANK, WORLD_SIZE and LOCAL_RANK must be integers (torchrun sets them), got "
            f"{os.environ['RANK']!r}, {os.environ['WORLD_SIZE']!r}, "
            f"{os.environ.get('LOCAL_RANK')!r}"
        ) from None


@contextmanager
def process_group(device, backend=None, timeout=DIST_TIMEOUT):
    """Under torchrun with more than one process, the torch.distributed group for the block; else nothing.

    backend: gloo for a CPU `device`, nccl for CUDA (each process on cuda:LOCAL_RANK) unless given;
    `timeout` seconds bound every collective, so a dead or stuck process ends the run with an error."""
    ranks = torchrun_ranks()
    if ranks is None or ranks[1] <= 1 or dist.is_initialized():
        yield
        return
    rank, size, local_rank = ranks
    cuda = torch.device(device).type == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            raise UsageError(f"train.device is {device} but CUDA is not available on this machine")
        torch.cuda.set_device(local_rank)
    backend = backend or ("nccl" if cuda else "gloo")
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    except (RuntimeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"cannot start the {backend} process group as rank {rank} of {size}: {first}") from None
    try:
        yield
        dist.barrier()  # every rank done with its collectives before any tears the group down: gloo aborts
        # a process ("terminate called without an active exception") whose peer left mid-teardown
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class World:
    """The processes that train together: this one's rank and their number (rank 0 of 1 without torchrun)."""

    rank: int = 0
    size: int = 1

    @classmethod
    def current(cls):
        """The initialised torch.distributed group, else one process; torchrun without a group is a UsageError."""
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size())
        ranks = torchrun_ranks()
        if ranks is not None and ranks[1] > 1:
            raise UsageError(
                f"launched by torchrun as rank {ranks[0]} of {ranks[1]}, but no torch.distributed process "
                "group is initialised: only `pdmm-bridge train` trains with several processes (a sweep "
                "runs as one process; start it without torchrun)"
            )
        return cls()

    def first(self, fn, *args):
        """fn(*args) on rank 0, its result on every rank; its error raised on every rank (none waits forever)."""
        if self.size == 1:
            return fn(*args)
        box = [None]
        if self.rank == 0:
            try:
                box[0] = (fn(*args), None)
            except Exception as err:
                box[0] = (None, err if isinstance(err, UsageError) else UsageError(f"rank 0 failed: {err!r}"))
                dist.broadcast_object_list(box, src=0)
                raise
        dist.broadcast_object_list(box, src=0)
        result, error = box[0]
        if error is not None:
            raise error
        return result

    def share(self, obj):
        """Rank 0's `obj` on every rank."""
        if self.size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def shard(self, batch):
        """This rank's contiguous 1/size share of every tensor in the global `batch` (non-tensors kept whole)."""
        if self.size == 1:
            return batch
        sizes = {len(t) for t in batch if torch.is_tensor(t)}
        if len(sizes) != 1:
            raise UsageError(
                f"cannot split a batch over {self.size} processes: its tensors have leading sizes "
                f"{sorted(sizes)}, not one batch size"
            )
        total = sizes.pop()
        if total % self.size:
            raise UsageError(
                f"the global batch of {total} examples does not split evenly over {self.size} processes "
                "(each trains on an equal share, so that their mean gradient is the batch's); choose a "
                f"train.batch_size that is a multiple of {self.size}, or a number of processes that "
                f"divides {total}"
            )
        share = total // self.size
        return tuple(t[self.rank * share : (self.rank + 1) * share] if torch.is_tensor(t) else t for t in batch)

    def loss_and_flag(self, loss, flag):
        """(the global batch's mean loss, whether `flag` is set on any rank), one all-reduce when size > 1."""
        if self.size == 1:
            return loss.item(), flag  # the step's one host sync
        stats = torch.stack([loss.detach().float(), torch.tensor(float(flag), device=loss.device)])
        dist.all_reduce(stats)  # the sum over ranks
        total, flags = stats.tolist()
        return total / self.size, flags > 0


class DataParallel(DistributedDataParallel):
    """DistributedDataParallel that lends the wrapped model's own attributes (model.group_lasso()) to the tasks."""

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":
                raise
            return getattr(self.module, name)
