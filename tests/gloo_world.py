"""Shared by the tests of the partitioned engine on gloo (tests/test_distributed_privacy_nodes.py): P local processes
started once per world, each case's differences from one process's run measured on rank 0 and written as JSON."""

import json
import socket
from collections.abc import Callable
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


def spawn(target: Callable[..., None], world: int, folder: Path, timeout: float = 60.0) -> dict[str, Any]:
    """target(rank, world, port, out, timeout) on `world` processes; what rank 0 wrote to `out` (JSON)."""
    out = folder / f"{target.__name__}_{world}.json"
    mp.spawn(target, args=(world, free_port(), str(out), timeout), nprocs=world, join=True)
    return json.loads(out.read_text())


def init(rank: int, world: int, port: int, timeout: float) -> None:
    """This process's gloo group of `world` ranks on localhost, one thread."""
    torch.set_num_threads(1)
    distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timeout
    )


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
