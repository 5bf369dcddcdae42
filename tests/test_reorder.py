"""Renumbering nodes for locality (pdmm.edge_index.locality_order, CompiledGraph.relabelled, solve's reorder=):
the renumbered graph against one compiled from relabelled networkx nodes, and solve run renumbered against
the same run as given, for every method, constraint kind and a deterministic network."""

import networkx as nx
import numpy as np
import pytest
import torch
from inequality_problems import mixed_constraints

import pdmm
from pdmm.edge_index import LOCAL_ENOUGH, CompiledGraph, locality_order
from pdmm.solve import LARGE_GRAPH_EDGES, _node_order

N, D = 40, 2


def shuffled(G, seed=0):
    """G with its nodes inserted in a random order and relabelled at random (string labels)."""
    rng = np.random.default_rng(seed)
    label = {v: f"v{k}" for v, k in zip(G, rng.permutation(len(G)), strict=False)}
    H = nx.Graph()
    H.add_nodes_from(label[v] for v in rng.permutation(list(G)))
    H.add_edges_from((label[u], label[v]) for u, v in G.edges)
    return H


@pytest.fixture(scope="module")
def graph():
    return shuffled(nx.random_geometric_graph(N, 0.3, seed=2))


def mean_distance(compiled, order=None):
    position = np.arange(compiled.n) if order is None else np.argsort(order)
    return np.abs(position[compiled.src.numpy()] - position[compiled.dst.numpy()]).mean()


def test_reverse_cuthill_mckee_numbers_a_shuffled_ring_as_a_band_and_leaves_a_path_alone():
    ring = CompiledGraph.from_networkx(shuffled(nx.cycle_graph(500)))
    order = locality_order(ring)
    assert mean_distance(ring) > 100  # shuffled: neighbours far apart
    assert mean_distance(ring, order) <= 2  # a ring numbered outwards from one node: band 2
    assert locality_order(CompiledGraph.from_networkx(nx.path_graph(500))) is None  # mean distance 1 already


def test_an_order_local_already_is_kept_without_running_rcm(monkeypatch):
    import scipy.sparse.csgraph

    def refuse(*args, **kwargs):
        raise AssertionError("reverse Cuthill-McKee ran on a graph numbered locally already")

    monkeypatch.setattr(scipy.sparse.csgraph, "reverse_cuthill_mckee", refuse)
    n = 400  # a path visited in blocks of 4 numbered backwards (3, 2, 1, 0, 7, 6, ...): mean |i - j| 2.5 = n / 160
    visit = (np.arange(n) // 4) * 4 + 3 - np.arange(n) % 4
    blocks = CompiledGraph.from_graph(pdmm.Graph.from_edges(visit[:-1], visit[1:]))
    assert mean_distance(blocks) * LOCAL_ENOUGH <= n  # RCM would number it 0..n-1 (mean 1): kept as given
    torus = CompiledGraph.from_graph(pdmm.Graph.grid(30, 30, periodic=True))  # row by row: mean |i - j| 30 = n / 30
    assert mean_distance(torus) * LOCAL_ENOUGH > torus.n  # not local enough to skip: RCM runs and is refused
    with pytest.raises(AssertionError, match="reverse Cuthill-McKee ran"):
        locality_order(torus)
    assert locality_order(blocks) is None


def test_the_relabelled_graph_is_the_graph_of_the_relabelled_nodes(graph):
    compiled = CompiledGraph.from_networkx(graph)
    order = np.random.default_rng(1).permutation(compiled.n)
    new, edge_of = compiled.relabelled(order)
    nodes = list(graph.nodes)
    reference = nx.Graph()
    reference.add_nodes_from(nodes[k] for k in order)  # node k of the reference is nodes[order[k]]
    reference.add_edges_from(graph.edges)
    expected = CompiledGraph.from_networkx(reference)
    assert list(new.nodes) == list(expected.nodes)
    for field in ("src", "dst", "rev", "sign", "degree", "forward"):
        assert torch.equal(getattr(new, field), getattr(expected, field)), field
    assert np.array_equal(order[new.src.numpy()], compiled.src.numpy()[edge_of])  # edge_of names the same edge
    assert np.array_equal(order[new.dst.numpy()], compiled.dst.numpy()[edge_of])


def problems(graph):
    rng = np.random.default_rng(3)
    H, y = rng.normal(size=(N, 4, D)), rng.normal(size=(N, 4))
    labels = np.where(rng.normal(size=(N, 4)) > 0, 1.0, -1.0)
    return {
        "averaging": pdmm.averaging(graph, rng.normal(size=(2, N, D))),
        "least_squares": pdmm.least_squares(graph, H, y, ridge=0.1),
        "lasso": pdmm.lasso(graph, H, y, lam=0.5),
        "logistic": pdmm.logistic(graph, H, labels),
        "edge_matrices": pdmm.least_squares(graph, H, y, constraints=mixed_constraints(graph, dim=D)),
    }


RUNS = [
    ("averaging", "pdmm", {}),
    ("averaging", "admm", {}),
    ("least_squares", "qa-pdmm", {}),
    ("lasso", "pdmm", {"theta": 0.5}),
    ("logistic", "qa-pdmm", {}),
    ("edge_matrices", "pdmm", {"theta": 0.5}),
]


@pytest.mark.parametrize("kind, method, params", RUNS)
@pytest.mark.parametrize("how", ["rcm", "permutation"])
def test_a_renumbered_run_matches_the_run_as_given(graph, kind, method, params, how):
    problem = problems(graph)[kind]
    order = True if how == "rcm" else np.random.default_rng(4).permutation(N)
    options = dict(
        method=method,
        max_iter=60,
        tol=0,
        record_every=1,
        x0="random",
        reference="cvxpy",
        history=("residual", "objective", "error"),
        **params,
    )
    given = pdmm.solve(problem, reorder=False, **options)
    renumbered = pdmm.solve(problem, reorder=order, **options)
    assert given.nodes == renumbered.nodes == list(graph.nodes)
    np.testing.assert_allclose(renumbered.reference, given.reference, rtol=0, atol=0)  # same x*, same rows
    np.testing.assert_allclose(renumbered.x, given.x, rtol=0, atol=1e-12)
    for name in ("residual", "objective", "error"):
        np.testing.assert_allclose(renumbered.history[name], given.history[name], rtol=1e-10, atol=1e-13)


def test_a_per_node_eta_follows_its_node(graph):
    problem = problems(graph)["least_squares"]
    eta = np.random.default_rng(7).uniform(20, 80, N)  # well above L_i, and different at every node
    options = dict(method="qa-pdmm", eta=eta, max_iter=40, tol=0)
    given = pdmm.solve(problem, reorder=False, **options)
    renumbered = pdmm.solve(problem, reorder=np.random.default_rng(8).permutation(N), **options)
    np.testing.assert_allclose(renumbered.x, given.x, rtol=0, atol=1e-12)
    assert renumbered.params["eta"] is eta  # the result reports the parameters as given


def test_a_deterministic_network_is_the_same_network_renumbered(graph):
    """Per-node wake and per-edge drop probabilities of 0 and 1 leave nothing to chance, so a renumbered
    run must put each of them on the same node and edge as the run as given."""
    problem = problems(graph)["averaging"]
    compiled = problem.compiled
    rng = np.random.default_rng(5)
    wake = tuple(float(q) for q in rng.random(N) > 0.2)
    drop = tuple(float(p) for p in rng.random(compiled.num_edges) < 0.3)
    network = pdmm.Network(wake=wake, drop=drop)
    options = dict(max_iter=40, tol=0, record_every=1, network=network, history=("residual", "messages", "bits"))
    given = pdmm.solve(problem, reorder=False, **options)
    renumbered = pdmm.solve(problem, reorder=np.random.default_rng(6).permutation(N), **options)
    asleep = np.array(wake) == 0
    assert asleep.any() and np.all(given.x[:, asleep] == 0)  # sleeping nodes keep x0 = 0
    np.testing.assert_allclose(renumbered.x, given.x, rtol=0, atol=1e-12)
    for name in ("residual", "messages", "bits"):
        np.testing.assert_allclose(renumbered.history[name], given.history[name], rtol=1e-10, atol=1e-13)


def test_a_network_with_every_effect_off_is_the_ideal_network_when_renumbered(graph):
    problem = problems(graph)["least_squares"]
    ideal = pdmm.solve(problem, reorder=True, max_iter=50, tol=0)
    quiet = pdmm.solve(problem, reorder=True, max_iter=50, tol=0, network=pdmm.Network())
    assert np.array_equal(ideal.x, quiet.x)


def test_by_default_only_large_graphs_are_renumbered():
    small = pdmm.averaging(shuffled(nx.cycle_graph(100)), np.arange(100.0))
    large = pdmm.averaging(
        pdmm.Graph.from_networkx(shuffled(nx.cycle_graph(LARGE_GRAPH_EDGES // 2))), np.zeros(LARGE_GRAPH_EDGES // 2)
    )
    assert _node_order(small, None) is None and _node_order(small, True) is not None
    order = _node_order(large, None)
    assert order is not None and mean_distance(large.compiled, order) <= 2
    assert _node_order(large, False) is None


@pytest.mark.parametrize("bad", [np.arange(N - 1), np.zeros(N, dtype=int), np.arange(N) + 0.5, "rcm"])
def test_a_bad_order_is_named(graph, bad):
    with pytest.raises(ValueError, match="reorder must be None, True, False or a permutation"):
        pdmm.solve(problems(graph)["averaging"], reorder=bad, max_iter=2)


def test_reorder_is_for_the_local_backend(graph):
    with pytest.raises(ValueError, match="reorder= applies to backend='local'"):
        pdmm.solve(problems(graph)["averaging"], backend="distributed", reorder=True, max_iter=2)
