"""pdmm.Graph.from_pyg and to_pyg against PyTorch Geometric's own utilities and networkx: the same undirected
graph both ways, PyG's conventions (both directions, no self loops) kept, and clear refusals."""

import networkx as nx
import numpy as np
import pytest
import torch
from extras import needs_extra

import pdmm

needs_extra("pyg")
from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.utils import contains_self_loops, is_undirected, to_networkx, to_undirected  # noqa: E402


def test_a_graph_goes_to_pyg_and_back():
    graph = pdmm.Graph.random_geometric(200, seed=3)
    data = graph.to_pyg()
    data.validate(raise_on_error=True)
    assert data.num_nodes == graph.n and data.edge_index.dtype == torch.int64
    assert data.edge_index.shape == (2, 2 * graph.number_of_edges())
    assert is_undirected(data.edge_index) and not contains_self_loops(data.edge_index)
    back = pdmm.Graph.from_pyg(data)
    assert back.n == graph.n
    np.testing.assert_array_equal(back.edges, graph.edges)


def test_pyg_edges_read_as_networkx_reads_them():
    rng = np.random.default_rng(0)
    pairs = torch.from_numpy(rng.integers(0, 60, size=(2, 300)))
    pairs = pairs[:, pairs[0] != pairs[1]]
    data = Data(edge_index=to_undirected(pairs), num_nodes=64)  # four nodes may be isolated: kept as nodes
    graph = pdmm.Graph.from_pyg(data)
    expected = nx.Graph(to_networkx(data, to_undirected=True))
    assert graph.n == 64 == expected.number_of_nodes()
    assert {tuple(e) for e in graph.edges.tolist()} == {tuple(sorted(e)) for e in expected.edges}


def test_one_direction_and_repeats_make_one_undirected_edge():
    data = Data(edge_index=torch.tensor([[0, 1, 1, 2, 2], [1, 0, 2, 3, 3]]), num_nodes=4)
    assert pdmm.Graph.from_pyg(data).edges.tolist() == [[0, 1], [1, 2], [2, 3]]


def test_a_pyg_graph_solves():
    graph = pdmm.Graph.from_pyg(pdmm.Graph.random_geometric(80, seed=1).to_pyg())
    a = np.random.default_rng(2).normal(size=(80, 2))
    result = pdmm.solve(pdmm.averaging(graph, a))
    assert result.converged and np.allclose(result.x, a.mean(0), atol=1e-8)


def test_what_is_not_a_homogeneous_graph_is_refused():
    hetero = HeteroData()
    hetero["paper", "cites", "paper"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(TypeError, match="to_homogeneous"):
        pdmm.Graph.from_pyg(hetero)
    with pytest.raises(ValueError, match=r"edge_index must have shape \(2, E\), got \(3, 2\)"):
        pdmm.Graph.from_pyg(Data(edge_index=torch.zeros(3, 2, dtype=torch.long), num_nodes=3))
    with pytest.raises(ValueError, match="out of range"):
        pdmm.Graph.from_pyg(Data(edge_index=torch.tensor([[0], [5]]), num_nodes=3))
