"""A world of ranks emulated by threads in one process, for code written against an all_to_all (pdmm.halo.AllToAll):
each rank's call runs in its own thread and the buffers are routed here (tests/test_parts.py)."""

import threading
from collections.abc import Callable
from typing import Any

import torch

from pdmm.parts import PartExchange


class ThreadWorld:
    """`world` ranks; exchange(rank) is rank's pdmm.parts.PartExchange, run(fn) calls fn(rank) on every rank at once."""

    def __init__(self, world: int, timeout: float = 60.0) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=timeout)
        self.box: dict[tuple[int, int], torch.Tensor] = {}

    def exchange(self, rank: int) -> PartExchange:
        return PartExchange(rank, self.world, lambda *args: self._all_to_all(rank, *args))

    def _all_to_all(self, rank, output, input, output_sizes, input_sizes):
        for q, piece in enumerate(torch.split(input, input_sizes)):
            self.box[rank, q] = piece.clone()
        self.barrier.wait()
        output.copy_(torch.cat([self.box[q, rank] for q in range(self.world)]))
        self.barrier.wait()

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """[fn(0), ..., fn(world - 1)], each in its own thread; an exception of any rank is returned in its place."""
        results: list[Any] = [None] * self.world

        def target(rank):
            try:
                results[rank] = fn(rank)
            except Exception as err:  # returned to the test, which checks it
                results[rank] = err

        threads = [threading.Thread(target=target, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results
