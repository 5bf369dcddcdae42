"""TokenGraph constructors, layouts and pdmm's EdgeList primitives that the sparse path runs on."""

import networkx as nx
import numpy as np
import pytest
import torch

from attention import TokenGraph
from pdmm.edge_index import EdgeList


def as_set(graph):
    return set(zip(*map(np.ndarray.tolist, graph.edges()), strict=False))


def test_full_and_causal_graphs():
    assert as_set(TokenGraph.full(3)) == {(i, j) for i in range(3) for j in range(3)}
    assert as_set(TokenGraph.causal(3)) == {(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)}
    assert torch.equal(TokenGraph.causal(4).mask(), torch.ones(4, 4, dtype=torch.bool).tril())
    assert TokenGraph.causal(5).num_edges == 15


def test_window_graph():
    assert as_set(TokenGraph.window(5, 1)) == {(i, j) for i in range(5) for j in range(5) if abs(i - j) <= 1}
    assert as_set(TokenGraph.window(5, 2, causal=True)) == {
        (i, j) for i in range(5) for j in range(5) if 0 <= i - j <= 2
    }


def test_from_networkx_adds_self_loops_and_follows_edge_direction():
    G = nx.relabel_nodes(nx.path_graph(3), {0: "a", 1: "b", 2: "c"})  # tokens in G.nodes order
    assert as_set(TokenGraph.from_networkx(G)) == {(0, 0), (1, 1), (2, 2), (0, 1), (1, 0), (1, 2), (2, 1)}
    assert as_set(TokenGraph.from_networkx(nx.cycle_graph(3), self_loops=False)) == {
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 2),
        (2, 0),
        (2, 1),
    }
    D = nx.DiGraph([(0, 1), (1, 2)])  # information flows 0 -> 1 -> 2: token 1 attends to 0
    assert as_set(TokenGraph.from_networkx(D)) == {(0, 0), (1, 1), (2, 2), (1, 0), (2, 1)}
    cycle = nx.DiGraph([(0, 1), (1, 2), (2, 0), (2, 2)])  # G's own self loops stay without self_loops=True
    assert as_set(TokenGraph.from_networkx(cycle, self_loops=False)) == {(1, 0), (2, 1), (0, 2), (2, 2)}


def test_auto_layout_is_sparse_only_for_few_edges_and_mask_matches_edges():
    assert TokenGraph.from_networkx(nx.cycle_graph(100)).layout == "sparse"
    assert TokenGraph.from_networkx(nx.complete_graph(10)).layout == "dense"
    graph = TokenGraph.window(20, 3)
    mask = graph.mask()
    src, dst = graph.edges()
    assert mask.sum() == len(src) and mask[torch.as_tensor(src), torch.as_tensor(dst)].all()
    assert graph.sparse().layout == "sparse" and as_set(graph.sparse()) == as_set(graph) == as_set(graph.dense())


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: TokenGraph.from_networkx(nx.empty_graph(3), self_loops=False), "attend to no token"),
        (lambda: TokenGraph.window(5, -1), "window width"),
        (lambda: TokenGraph.full(0), "positive integer"),
        (lambda: TokenGraph.from_edges(3, [0, 1], [1]), "same length"),
        (lambda: TokenGraph.from_edges(3, [0, 1, 2], [1, 2, 3]), "token indices"),
        (lambda: TokenGraph.from_edges(2, [0, 0, 1], [1, 1, 0]), "duplicate"),
        (lambda: TokenGraph.from_edges(2, [0, 1], [1, 0], layout="csr"), "layout"),
        (lambda: TokenGraph.from_networkx([(0, 1)]), "networkx graph"),
    ],
)
def test_bad_token_graphs_are_rejected(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


@pytest.mark.parametrize("equal_degrees", [False, True])
def test_edge_list_primitives_equal_plain_loops(device, equal_degrees):
    rng = np.random.default_rng(0)
    n = 7
    pairs = {(int(i), int(j)) for i, j in rng.integers(0, n, size=(30, 2))} | {(i, i) for i in range(n)}
    if equal_degrees:  # a ring with self loops: the reshape fast path
        pairs = {(i, (i + k) % n) for i in range(n) for k in (-1, 0, 1)}
    src, dst = np.array(sorted(pairs)).T
    edges = EdgeList.from_pairs(n, dst, src).to(device, torch.float64)  # any order in, sorted out
    assert (edges.incidence is None) == equal_degrees
    x = torch.randn(n, 3, dtype=torch.float64, device=device)
    v = torch.randn(edges.num_edges, 3, dtype=torch.float64, device=device)
    s, d = edges.src.tolist(), edges.dst.tolist()
    assert s == sorted(s)
    torch.testing.assert_close(edges.gather(x), torch.stack([x[i] for i in s]))
    torch.testing.assert_close(edges.gather_neighbour(x), torch.stack([x[j] for j in d]))
    total = torch.stack([sum(v[e] for e in range(len(s)) if s[e] == i) for i in range(n)])
    largest = torch.stack([torch.stack([v[e] for e in range(len(s)) if s[e] == i]).amax(0) for i in range(n)])
    torch.testing.assert_close(edges.aggregate(v), total)
    torch.testing.assert_close(edges.aggregate_max(v), largest)
