"""pdmm/halo.py on one process: a world of P ranks emulated by P threads whose all_to_all routes the buffers
through a shared mailbox (a barrier on each side, as the collective orders them), each rank's exchanges against
the whole graph's indexing (v[rev], x[dst], W x)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import pdmm
import pdmm.distributed
from pdmm.halo import PartGraph, local_part
from pdmm.mixing import MixingProduct, mixing_matrix, mixing_product


class World:
    """P ranks in threads: all_to_all_single as torch.distributed has it, through a mailbox."""

    def __init__(self, size):
        self.size, self.mail, self.barrier = size, {}, threading.Barrier(size, timeout=30)
        self.calls = 0

    def collectives(self, rank):
        world = self

        class Collectives:
            def all_to_all(self, output, input, output_sizes, input_sizes):
                world.mail[rank] = list(torch.split(input, input_sizes))
                world.barrier.wait()
                parts = [world.mail[q][rank] for q in range(world.size)]
                assert [len(p) for p in parts] == output_sizes, (rank, [len(p) for p in parts], output_sizes)
                output.copy_(torch.cat(parts))
                world.barrier.wait()
                world.calls += rank == 0

            def maximum(self, t):
                raise AssertionError("not used here")

            def once(self, compute, count):
                raise AssertionError("not used here")

        return Collectives()

    def run(self, job):
        """job(rank, collectives) on every rank at once: the results by rank."""
        with ThreadPoolExecutor(self.size) as pool:
            return list(pool.map(lambda r: job(r, self.collectives(r)), range(self.size)))


GRAPHS = {
    "geometric": pdmm.Graph.random_geometric(30, seed=3),
    "regular": pdmm.Graph.random_regular(24, degree=3, seed=1),
}


def _owners(n, world, kind):
    if kind == "blocks":
        return pdmm.distributed.blocks(n, world)
    if kind == "round_robin":  # nearly every edge crosses the cut
        return np.arange(n) % world
    return np.random.default_rng(world).permutation(np.arange(n) % world)


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("world, kind", [(2, "blocks"), (3, "round_robin"), (4, "random")])
def test_swap_halo_and_mixing_rows_equal_the_whole_graphs(graph, world, kind):
    whole = pdmm.CompiledGraph.from_graph(GRAPHS[graph])
    owner = _owners(whole.n, world, kind)
    rng = np.random.default_rng(0)
    v = torch.from_numpy(rng.normal(size=(whole.num_edges, 2, 3)))  # every edge its own values
    x = torch.from_numpy(rng.normal(size=(whole.n, 2, 3)))
    W = mixing_matrix(whole, "metropolis")
    mixed = MixingProduct(W, whole.sign)(x)
    expected_swap, expected_neighbour = v[whole.rev], x[whole.dst]

    def job(rank, collectives):
        part, own = local_part(whole, owner, rank, world, collectives)
        edges = np.flatnonzero(owner[whole.src.numpy()] == rank)
        rows = torch.from_numpy(own)
        swapped = part.exchange(v[edges])
        neighbour = part.gather_neighbour(x[rows])
        product = mixing_product(W, part)(x[rows])
        return (
            bool(torch.equal(swapped, expected_swap[edges])),
            bool(torch.equal(neighbour, expected_neighbour[edges])),
            float((product - mixed[rows]).abs().max()),
            part.halo.ghosts.tolist(),
            sorted(set(whole.dst.numpy()[edges].tolist()) - set(own.tolist())),
        )

    world_ = World(world)
    found = world_.run(job)
    for swapped, neighbour, product, ghosts, reached in found:
        assert swapped and neighbour and product <= 1e-15  # W's rows summed in another order
        assert sorted(ghosts) == reached  # one row per (node, neighbouring rank), no more
    assert world_.calls == 3  # one all_to_all per exchange


def test_rows_out_of_order_within_a_rank_show():
    """The order within each rank's buffer is what the halos agree on: the same exchange with every rank's rows
    reversed in transit (split sizes kept) hands cut edges and ghosts another's values."""
    whole = pdmm.CompiledGraph.from_graph(GRAPHS["geometric"])
    owner = np.arange(whole.n) % 3
    v = torch.arange(whole.num_edges, dtype=torch.float64).view(-1, 1, 1)
    x = torch.arange(whole.n, dtype=torch.float64).view(-1, 1, 1)
    world = World(3)

    def job(rank, collectives):
        exchange = collectives.all_to_all

        def reversed_in_transit(output, input, output_sizes, input_sizes):
            chunks = [c.flip(0) for c in torch.split(input, input_sizes)]
            exchange(output, torch.cat(chunks), output_sizes, input_sizes)

        collectives.all_to_all = reversed_in_transit
        part, own = local_part(whole, owner, rank, 3, collectives)
        edges = np.flatnonzero(owner[whole.src.numpy()] == rank)
        wrong_edges = int((part.exchange(v[edges]) != v[whole.rev][edges]).sum())
        wrong_ghosts = int((part.gather_neighbour(x[torch.from_numpy(own)]) != x[whole.dst][edges]).sum())
        return wrong_edges, wrong_ghosts

    assert all(edges > 0 and ghosts > 0 for edges, ghosts in world.run(job))


def test_world_of_one_exchanges_nothing():
    whole = pdmm.CompiledGraph.from_graph(GRAPHS["regular"])

    class Alone:
        all_to_all = None

    part, own = local_part(whole, np.zeros(whole.n, dtype=np.int64), 0, 1, Alone())
    v = torch.randn(whole.num_edges, 1, 2, dtype=torch.float64)
    assert isinstance(part, PartGraph) and own.tolist() == list(range(whole.n))
    assert torch.equal(part.exchange(v), v[whole.rev]) and len(part.halo.ghosts) == 0
