"""A partitioned network (pdmm.network.GlobalIds): a graph's nodes cut into 2 to 4 parts in one process, each
part's Channel built with its global ids draws exactly the rows of the whole graph's Channel, for every network
setting, round after round, several instances, on the numba kernels and on the torch expressions; the parts'
exchanges deliver the whole exchange's rows and their counts sum to its counts (docs/guide/network.md,
"Partitioned runs")."""

from dataclasses import replace

import numpy as np
import pytest
import torch

import pdmm
from pdmm import draws
from pdmm.halo import local_part
from pdmm.network import Channel, GlobalIds, Network

N, ROUNDS, WIDTH = 24, 6, 2


@pytest.fixture(scope="module")
def whole():
    return pdmm.averaging(pdmm.topology("random_geometric", n=N, seed=2), np.zeros(N)).compiled


class NoCollectives:
    """The parts live in this process: no halo exchanges through a collective (each part's swap is Parts.swap)."""

    all_to_all = None


def owners(parts):
    """A scattered cut: node i's part, every part nonempty, parts not contiguous in node order."""
    return np.random.default_rng(parts).permutation(N) % parts


def networks(graph, owner):
    """Every setting of a Network, alone and together; per-node and per-edge ones vary across the cut (part 0's
    own nodes all wake, so its channel has no own draws but its senders do)."""
    rng = np.random.default_rng(5)
    edges = list(zip(graph.src.tolist(), graph.dst.tolist(), strict=True))
    wake = np.where(owner == 0, 1.0, rng.uniform(0.2, 0.9, N))
    listed = edges[::3]
    return {
        "drop": Network(drop=0.3, seed=1),
        "drop per edge": Network(drop=tuple(rng.uniform(0, 0.6, graph.num_edges)), seed=2),
        "drop dict": Network(drop={edges[k]: 0.7 for k in range(0, len(edges), 4)}, seed=3),
        "burst": Network(burst=(0.2, 0.5), seed=4),
        "burst and drop": Network(burst=(0.3, 0.4), drop=0.2, seed=4),
        "wake": Network(wake=0.6, seed=5),
        "wake per node": Network(wake=tuple(wake), seed=6),
        "wake dict": Network(wake={i: 0.3 for i in range(0, N, 3)}, seed=7),
        "wake one": Network(wake="one", seed=8),
        "edge_up": Network(edge_up=0.7, seed=9),
        "schedule": Network(edge_up=[listed, edges[1::2], []], seed=10),
        "dither": Network(bits=6, dither=True, seed=11),
        "stochastic": Network(bits=5, limit=2.0, dither="stochastic", seed=12),
        "nearest": Network(bits=4, seed=13),
        "privacy": Network(privacy=1.5, seed=14),
        "all": Network(drop=0.2, wake=0.8, edge_up=0.9, burst=(0.1, 0.4), bits=8, dither=True, privacy=0.5, seed=15),
        "all per item": Network(drop=tuple(rng.uniform(0, 0.4, graph.num_edges)), wake=tuple(wake), seed=16),
    }


def rows(mask, index):
    """mask[index], a None mask standing for all True."""
    return None if mask is None else mask[torch.as_tensor(index)]


def same(a, b, what):
    """Masks equal, None (all True) equal to a mask of all True."""
    if a is None or b is None:
        assert (a is None or bool(a.all())) and (b is None or bool(b.all())), what
    else:
        assert torch.equal(a, b), what


class Parts:
    """The whole graph's Channel and each part's, built as a rank builds it: Channel(network, part, B, width,
    dtype, ids=GlobalIds.of(whole, own, edges)); each part's exchange (its graph's swap, all_to_all in a run)
    returns the rows of the whole graph's v[rev] that `swapped` holds, checking that what the part sends is the
    whole graph's rows."""

    def __init__(self, network, whole, owner, batch, width=WIDTH):
        self.whole = Channel(network, whole, batch, width, torch.float64)
        self.twin = Channel(network, whole, batch, width, torch.float64)  # quantises what the parts swap
        self.swapped = None
        rev, src = whole.rev, whole.src.numpy()
        self.parts = []
        world = int(owner.max()) + 1
        for rank in range(world):
            part, own = local_part(whole, owner, rank, world, NoCollectives(), dtype=torch.float64)
            edges = np.flatnonzero(owner[src] == rank)
            assert torch.equal(part.dst, whole.dst[edges])  # the part's edges in the order of their global ids

            swap = self.swap(torch.from_numpy(edges), rev)

            channel = Channel(
                network, replace(part, swap=swap), batch, width, torch.float64, ids=GlobalIds.of(whole, own, edges)
            )
            self.parts.append((channel, own, edges))

    def swap(self, edges, rev):
        """A part's v -> v[rev] over the whole graph: the rows `edges` of what `swapped` holds, reversed."""

        def swapped(v):
            assert torch.equal(v, self.swapped[edges])  # what the part sends: its rows of the whole message
            return self.swapped[rev][edges]

        return swapped


@pytest.fixture(params=["numba kernel", "torch expression"])
def path(request, monkeypatch):
    if request.param == "torch expression":
        monkeypatch.setattr(draws, "NUMBA", False)
    return request.param


@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("batch", [3, 1])
def test_each_part_draws_the_rows_of_the_whole_graph(whole, parts, batch, path):
    owner = owners(parts)
    generator = torch.Generator().manual_seed(parts)
    for name, network in networks(whole, owner).items():
        run = Parts(network, whole, owner, batch)
        z = torch.randn(whole.num_edges, batch, WIDTH, dtype=torch.float64, generator=generator)
        perturbed = run.whole.perturb(z)
        for channel, _, edges in run.parts:
            assert torch.equal(channel.perturb(z[edges]), perturbed[edges]), name
        for k in range(ROUNDS):
            run.whole.draw()
            y = torch.randn(whole.num_edges, batch, WIDTH, dtype=torch.float64, generator=generator)
            quantised = None if network.bits is None else run.whole.quantise(y)
            for channel, own, edges in run.parts:
                channel.draw()
                where = f"{name}, round {k + 1}"
                same(channel.awake, rows(run.whole.awake, own), f"awake: {where}")
                same(channel.sending, rows(run.whole.sending, edges), f"sending: {where}")
                same(channel.delivered, rows(run.whole.delivered, edges), f"delivered: {where}")
                same(channel.bad, rows(run.whole.bad, edges), f"bad: {where}")
                if quantised is not None:
                    assert torch.equal(channel.quantise(y[edges]), quantised[edges]), where


@pytest.mark.parametrize("parts", [2, 4])
@pytest.mark.parametrize("batch, width", [(3, 2), (1, 1)])  # (1, 1): one process draws inside the exchange
def test_the_parts_exchanges_are_the_rows_of_the_whole_exchange_and_their_counts_sum_to_it(
    whole, parts, batch, width, path
):
    owner, generator = owners(parts), torch.Generator().manual_seed(7)
    for name, network in networks(whole, owner).items():
        run = Parts(network, whole, owner, batch, width)
        for k in range(ROUNDS):
            y, held = (
                torch.randn(whole.num_edges, batch, width, dtype=torch.float64, generator=generator) for _ in range(2)
            )
            for channel in (run.whole, *(c for c, _, _ in run.parts)):
                channel.draw()
            run.swapped = y if network.bits is None else run.twin.quantise(y)
            expected = run.whole.exchange(y, held)
            for channel, _, edges in run.parts:
                assert torch.equal(channel.exchange(y[edges], held[edges]), expected[edges]), f"{name}, {k + 1}"
        for count in ("messages", "bits"):
            total = sum(getattr(channel, count) for channel, _, _ in run.parts)
            assert torch.equal(total, getattr(run.whole, count)), f"{name}: {count}"


def test_labelled_settings_on_a_part_without_the_whole_graph_are_refused(whole):
    owner = owners(2)
    part, own = local_part(whole, owner, 0, 2, NoCollectives(), dtype=torch.float64)
    ids = replace(GlobalIds.of(whole, own, np.flatnonzero(owner[whole.src.numpy()] == 0)), whole=None)
    Channel(Network(drop=tuple([0.1] * whole.num_edges), wake=tuple([0.5] * N)), part, 1, 1, torch.float64, ids=ids)
    for network, setting in (
        (Network(wake={0: 0.5}), "a wake dict"),
        (Network(drop={(int(whole.src[0]), int(whole.dst[0])): 0.5}), "a drop dict"),
        (Network(edge_up=[[(int(whole.src[0]), int(whole.dst[0]))]]), "an edge_up schedule"),
    ):
        with pytest.raises(ValueError, match=f"^{setting} names node labels"):
            Channel(network, part, 1, 1, torch.float64, ids=ids)
    with pytest.raises(ValueError, match="drop has 3 per-edge probabilities, but the graph has"):
        Channel(Network(drop=(0.1, 0.2, 0.3)), part, 1, 1, torch.float64, ids=ids)
