import networkx as nx
import numpy as np
import pytest
import torch

import pdmm


@pytest.mark.parametrize("kind", sorted(pdmm.TOPOLOGIES))
def test_topology_is_connected_on_n_nodes(kind):
    G = pdmm.topology(kind, n=36, seed=3)
    assert G.number_of_nodes() == 36 and nx.is_connected(G)
    assert sorted(G.nodes) == list(range(36))


def test_topology_is_reproducible_from_seed():
    a = pdmm.topology("random_geometric", n=50, seed=7)
    b = pdmm.topology("random_geometric", n=50, seed=7)
    c = pdmm.topology("random_geometric", n=50, seed=8)
    assert set(a.edges) == set(b.edges) != set(c.edges)


def test_topology_parameters_reach_networkx():
    assert pdmm.topology("grid", n=12, rows=3).number_of_edges() == 3 * 3 + 2 * 4  # 3 x 4 grid
    assert pdmm.topology("torus", n=16).number_of_edges() == 32
    assert set(dict(pdmm.topology("random_regular", n=20, degree=3).degree).values()) == {3}


@pytest.mark.parametrize(
    "kind, params, message",
    [
        ("hexagonal", {}, "unknown topology 'hexagonal'"),
        ("torus", {"rows": 2}, "at least 3 rows"),
        ("grid", {"rows": 5}, "rows to divide n"),
        ("ring", {"radius": 0.1}, "bad parameters"),
        ("grid", {"rows": 0}, "rows must be a positive integer"),
        ("erdos_renyi", {"p": 1.5}, "0 < p <= 1"),
        ("random_geometric", {"radius": -1}, "radius > 0"),
        ("random_regular", {"degree": 13}, "topology .random_regular. with n=12"),
        ("barabasi_albert", {"m": 20}, "topology 'barabasi_albert' with n=12"),
    ],
)
def test_topology_rejects_bad_input(kind, params, message):
    with pytest.raises((ValueError, TypeError), match=message):
        pdmm.topology(kind, n=12, **params)


def test_topology_rejects_non_integer_n():
    with pytest.raises(ValueError, match="integer n >= 2"):
        pdmm.topology("ring", n=10.0)


def test_compiled_graph_indices():
    G = nx.relabel_nodes(pdmm.topology("barabasi_albert", n=30, seed=1), lambda v: f"node{v}")
    g = pdmm.CompiledGraph.from_networkx(G)
    assert g.nodes == list(G.nodes)
    assert g.num_edges == 2 * G.number_of_edges()
    assert torch.equal(g.rev[g.rev], torch.arange(g.num_edges))
    assert torch.equal(g.src[g.rev], g.dst) and torch.equal(g.dst[g.rev], g.src)
    assert bool((g.src[1:] >= g.src[:-1]).all())
    assert torch.equal(g.degree, torch.tensor([G.degree(v) for v in G.nodes]))
    assert torch.equal(g.sign, torch.where(g.src < g.dst, 1.0, -1.0).double())
    for e in range(g.num_edges):
        assert G.has_edge(g.nodes[g.src[e]], g.nodes[g.dst[e]])


@pytest.mark.parametrize("kind", ["random_regular", "barabasi_albert"])  # reshape path and CSR path
def test_aggregate_sums_out_edges(kind):
    g = pdmm.CompiledGraph.from_networkx(pdmm.topology(kind, n=25, seed=0))
    v = torch.randn(g.num_edges, 2, 3, dtype=torch.float64)
    expected = torch.zeros(g.n, 2, 3, dtype=torch.float64).index_add_(0, g.src, v)
    torch.testing.assert_close(g.aggregate(v), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["random_regular", "barabasi_albert"])  # broadcast path and gather path
def test_gather_sub_and_exchange(kind):
    g = pdmm.CompiledGraph.from_networkx(pdmm.topology(kind, n=25, seed=0))
    x = torch.randn(g.n, 2, 3, dtype=torch.float64)
    v = torch.randn(g.num_edges, 2, 3, dtype=torch.float64)
    torch.testing.assert_close(g.gather_sub(x, v), x[g.src] - v, rtol=0, atol=0)
    torch.testing.assert_close(g.exchange(v), v[g.rev], rtol=0, atol=0)
    scalar_rows = v[..., :1][:, :1]  # one number per row: the 1-D lookup path
    torch.testing.assert_close(g.exchange(scalar_rows), scalar_rows[g.rev], rtol=0, atol=0)


def test_disconnected_graph_names_components():
    G = nx.disjoint_union_all([nx.path_graph(3), nx.path_graph(4), nx.cycle_graph(5)])
    with pytest.raises(ValueError, match="disconnected: it has 3 connected components"):
        pdmm.averaging(G, np.zeros((12, 1)))


def test_graph_without_edges_is_rejected():
    G = nx.empty_graph(4)
    with pytest.raises(ValueError, match="no edges"):
        pdmm.averaging(G, np.zeros((4, 1)))


def test_load_graph_edgelist_and_graphml(tmp_path):
    G = pdmm.topology("small_world", n=20, seed=2)
    nx.write_edgelist(G, tmp_path / "g.edgelist", data=False)
    nx.write_graphml(G, tmp_path / "g.graphml")
    from_list = pdmm.load_graph(tmp_path / "g.edgelist")
    assert set(map(frozenset, from_list.edges)) == set(map(frozenset, G.edges))
    assert all(isinstance(v, int) for v in from_list)
    from_graphml = pdmm.load_graph(tmp_path / "g.graphml")
    assert from_graphml.number_of_edges() == G.number_of_edges()


def test_load_graph_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="graph file not found"):
        pdmm.load_graph(tmp_path / "missing.txt")
    bad = tmp_path / "bad.graphml"
    bad.write_text("<graphml><this is not xml")
    with pytest.raises(ValueError, match="could not read graph file"):
        pdmm.load_graph(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="holds no edges"):
        pdmm.load_graph(empty)
