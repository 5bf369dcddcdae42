"""The --nproc job of `pdmm-bridge solve`: the job started, this process's rank, --out claimed once for the job
(and, with --shards, the files it writes), a failure's line.

The command checks its arguments and claims --out, then starts P copies of itself as one job (experiments/launch.py,
torchrun's env:// variables; docs/guide/distributed.md); these are the pieces each copy needs to take part.
"""

import argparse
import os
from pathlib import Path

import torch

import pdmm.distributed

from . import launch, rundir
from .errors import RunFailure, UsageError, first_line

FILES = ("config.json", "tuning.csv", "history.csv", "result.npz", "convergence.png")  # what solve writes into --out


def files(args: argparse.Namespace) -> tuple[str, ...]:
    """What solve writes into --out: FILES, and with --shards each part's x/part-RRRRR.npz (--nproc parts).

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (shards, nproc).

    Returns
    -------
    tuple of str
        Paths relative to --out.
    """
    if args.shards is None:
        return FILES
    from .solve_shards import file_names

    return (*FILES, *file_names(args.nproc))


def failure_line(err: BaseException) -> str:
    """The one line of a --nproc process's failure, for the launcher to print.

    Parameters
    ----------
    err : BaseException
        What the process raised.

    Returns
    -------
    str
        A UsageError or RunFailure as the CLI prints it; anything else (a collective that failed, a bug) with the
        process and the exception's type.
    """
    if isinstance(err, (UsageError, RunFailure)):
        return f"pdmm-bridge solve: error: {err}"
    where = f"process {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}"
    return f"pdmm-bridge solve: error: {where}: {type(err).__name__}: {first_line(err)}"


def rank(args: argparse.Namespace) -> int | None:
    """This process's rank among the processes torchrun started (the group started here), joining the group on
    the first call.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (nproc).

    Returns
    -------
    int or None
        The rank, or None outside a --nproc job; 0 for --shards of one part, run by a group of one process made
        here (its store in memory), since a part runs on the distributed engine.
    """
    if args.shards is not None and args.nproc == 1:
        if not torch.distributed.is_initialized():
            pdmm.distributed.init_process_group(store=torch.distributed.HashStore(), rank=0, world_size=1)
        return torch.distributed.get_rank()
    if args.nproc == 1 or "RANK" not in os.environ:
        return None
    if not torch.distributed.is_initialized():
        launch.die_with_parent()
        with launch.rendezvous():  # of a --nproc job: Ctrl-C held while it connects
            pdmm.distributed.init_process_group()
    return torch.distributed.get_rank()


def claim(args: argparse.Namespace, rank: int | None) -> Path:
    """rundir.claim(--out) in this process, or under torchrun in process 0, whose refusal every process raises
    (so that none waits for the others in a collective). With --shards, process 0 also removes what an earlier run
    there left that this one does not replace (experiments/solve_shards.py, remove_stale).

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (out, force).
    rank : int or None
        This process's rank (`rank`), None outside a --nproc job.

    Returns
    -------
    Path
        The output directory.

    Raises
    ------
    UsageError
        When --out is refused (rundir.claim), in every process of the job.
    """
    if rank is None:
        return rundir.claim(args.out, "solve", args.force, writes=FILES)
    refusal: list[str | None] = [None]
    if rank == 0:
        try:
            out = rundir.claim(args.out, "solve", args.force, writes=files(args))
            if args.shards is not None:
                from .solve_shards import remove_stale

                remove_stale(out, args.nproc)
        except UsageError as err:
            refusal = [str(err)]
    torch.distributed.broadcast_object_list(refusal, src=0)
    if refusal[0] is not None:
        raise UsageError(refusal[0])
    return Path(args.out)


def launch_job(args: argparse.Namespace) -> int:
    """Start the --nproc job that solves (experiments/launch.py), in the command's own process: --out claimed
    (checked, then let go: process 0 of the job claims it again) and the processes' memory checked first.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (nproc, out, force, argv), checked.

    Returns
    -------
    int
        The job's exit status, after one line for a failure.
    """
    launch.check(args.nproc)
    rundir.claim(args.out, "solve", args.force, writes=files(args))
    rundir.release(args.out)
    return launch.launch([*args.argv, "--force"], args.nproc)  # --out already claimed, hence --force
