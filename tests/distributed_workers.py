"""Spawning gloo process groups on localhost for the distributed tests (tests/test_distributed.py, test_parts.py,
test_distributed_privacy_nodes.py): each spawn starts P processes running target(rank, world, port, out, timeout),
and rank 0 (or every rank, by its own file) writes what it measured as JSON for the test to read; `differences`
measures a partitioned run against one process's."""

import json
import socket
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp

import pdmm.distributed as distributed


def free_port() -> int:
    """A TCP port free on localhost now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(target: Any, world: int, tmp_path: Path, timeout: float = 60.0) -> Any:
    """target run on `world` spawned processes; the JSON it wrote to its `out` file."""
    out = tmp_path / f"{target.__name__}_{world}.json"
    mp.spawn(target, args=(world, free_port(), str(out), timeout), nprocs=world, join=True)
    return json.loads(out.read_text())


def init_group(rank: int, world: int, port: int, timeout: float) -> None:
    """This process's gloo group on localhost, one thread per process."""
    torch.set_num_threads(1)
    distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timeout
    )


def spawn_each(target: Any, world: int, tmp_path: Path, timeout: float = 60.0) -> list[Any]:
    """target run on `world` spawned processes, each rank writing its own JSON to f"{out}.{rank}": the ranks'."""
    out = tmp_path / f"{target.__name__}_{world}.json"
    mp.spawn(target, args=(world, free_port(), str(out), timeout), nprocs=world, join=True)
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(world)]


def differences(reference: Any, result: Any) -> dict[str, Any]:
    """The largest differences of `result` from `reference` (pdmm.Results) in x, in the objective (relative to
    max(1, its size)) and in every history entry but the clock; whether iterations, status, rows and message agree
    ("same"); the status; and whether the message and bit counts are equal exactly ("counts")."""
    names = [k for k in reference.history if k not in ("iteration", "time")]
    return dict(
        x=float(np.abs(reference.x - result.x).max()),
        fun=float(np.max(np.abs(reference.fun - result.fun) / np.maximum(1.0, np.abs(reference.fun)))),
        history=max(float(np.abs(reference.history[k] - result.history[k]).max()) for k in names),
        names=sorted(result.history),
        status=result.status,
        same=bool(
            reference.iterations == result.iterations
            and reference.status == result.status
            and reference.message == result.message
            and np.array_equal(reference.history["iteration"], result.history["iteration"])
            and sorted(reference.history) == sorted(result.history)
        ),
        counts=all(
            np.array_equal(reference.history[k], result.history[k]) for k in ("messages", "bits") if k in result.history
        ),
    )


def report(rank: int, found: Any, out: str, each: bool = False) -> None:
    """A worker's findings written as JSON for spawn (rank 0 alone, to `out`) or spawn_each (every rank, to
    f"{out}.{rank}"), then its process group ended."""
    if each or rank == 0:
        Path(f"{out}.{rank}" if each else out).write_text(json.dumps(found))
    torch.distributed.destroy_process_group()
