"""PDMM with its edge state summed out (pdmm.methods.NodeForm, solve's form="nodes"): step by step against the
edge form it replaces, whole runs against the edge form and cvxpy, when solve uses it, and bad input."""

import networkx as nx
import numpy as np
import pytest
import torch

import pdmm
from pdmm.methods import METHODS, NodeForm
from pdmm.solve import CHECK_EVERY_NODES, LARGE_GRAPH_EDGES, _node_form

GRAPHS = {
    "random_geometric": lambda: pdmm.topology("random_geometric", n=40, seed=3),
    "ring": lambda: nx.cycle_graph(25),
    "tree": lambda: nx.balanced_tree(2, 4),
}


def least_squares(G, batch=2, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    n = G.number_of_nodes()
    return pdmm.least_squares(G, rng.normal(size=(batch, n, 4, dim)), rng.normal(size=(batch, n, 4)), ridge=0.1)


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("method, params", [("pdmm", {}), ("pdmm", {"theta": 0.5}), ("qa-pdmm", {})])
def test_each_node_step_is_the_edge_step_summed(graph, method, params):
    """From the same state, one node-form step gives the x of the edge step and the sums u and -v of its new
    edge state, at every one of 60 iterations."""
    problem = least_squares(GRAPHS[graph]())
    g, local, edges = problem.compile("cpu", torch.float64)
    edge_form = METHODS[method](g, local, edges, 0.7, **params)
    node_form = NodeForm(METHODS[method](g, local, edges, 0.7, **params))
    state = edge_form.init(
        torch.randn(
            problem.n, problem.batch, problem.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
        )
    )
    for _ in range(60):
        summed = {
            **{k: v for k, v in state.items() if k != "z"},
            "u": g.aggregate(state["z"]),
            "minus_v": -g.aggregate(g.exchange(state["z"])),
        }
        state, node = edge_form.step(state), node_form.step(summed)
        scale = float(state["z"].abs().max())
        torch.testing.assert_close(node["x"], state["x"], rtol=0, atol=1e-13 * max(scale, 1))
        torch.testing.assert_close(node["u"], g.aggregate(state["z"]), rtol=0, atol=1e-13 * max(scale, 1))
        torch.testing.assert_close(
            node["minus_v"], -g.aggregate(g.exchange(state["z"])), rtol=0, atol=1e-13 * max(scale, 1)
        )


@pytest.mark.parametrize("method, params", [("pdmm", {}), ("pdmm", {"theta": 0.5}), ("qa-pdmm", {})])
def test_a_node_form_run_matches_the_edge_form_and_cvxpy(method, params):
    problem = least_squares(GRAPHS["random_geometric"]())
    nodes = pdmm.solve(problem, method=method, form="nodes", reference="cvxpy", max_iter=3000, **params)
    edges = pdmm.solve(problem, method=method, form="edges", reference="cvxpy", max_iter=3000, **params)
    assert nodes.converged and edges.converged
    assert abs(nodes.iterations - edges.iterations) < CHECK_EVERY_NODES  # the node form tests every 50 iterations
    np.testing.assert_allclose(nodes.x, nodes.reference, atol=1e-8)
    np.testing.assert_allclose(nodes.x, edges.x, atol=1e-9)


def test_the_node_form_tests_and_records_every_50_iterations_by_default():
    problem = least_squares(GRAPHS["ring"](), batch=1, dim=1)
    nodes, edges = (pdmm.solve(problem, form=form, max_iter=120, tol=0) for form in ("nodes", "edges"))
    assert list(nodes.history["iteration"]) == [50, 100, 120]
    assert list(edges.history["iteration"]) == list(range(10, 121, 10))
    assert list(pdmm.solve(problem, form="nodes", max_iter=30, tol=0, check_every=10).history["iteration"]) == [
        10,
        20,
        30,
    ]


def test_the_first_iterations_agree_to_rounding():
    problem = least_squares(GRAPHS["ring"](), batch=1, dim=1)
    options = dict(max_iter=30, tol=0, record_every=1, x0="random")
    nodes, edges = pdmm.solve(problem, form="nodes", **options), pdmm.solve(problem, form="edges", **options)
    np.testing.assert_allclose(nodes.x, edges.x, rtol=0, atol=1e-13)
    np.testing.assert_allclose(nodes.history["residual"], edges.history["residual"], rtol=1e-10, atol=1e-14)


def test_solve_sums_the_edge_state_out_where_it_may():
    small = pdmm.averaging(nx.cycle_graph(50), np.arange(50.0))
    large = pdmm.averaging(
        pdmm.Graph.random_regular(LARGE_GRAPH_EDGES // 4, degree=4), np.zeros(LARGE_GRAPH_EDGES // 4)
    )
    assert _node_form(None, "pdmm", large, None) and _node_form(None, "qa-pdmm", large, None)
    assert not _node_form(None, "pdmm", small, None)  # small graphs keep today's edge form, bit for bit
    assert not _node_form(None, "admm", large, None)
    assert not _node_form(None, "pdmm", large, pdmm.Network(drop=0.1))
    assert not _node_form("edges", "pdmm", large, None)
    assert _node_form("nodes", "pdmm", small, None)


@pytest.mark.parametrize(
    "method, network, constraints, culprit",
    [
        ("admm", None, "consensus", "method 'pdmm' or 'qa-pdmm'"),
        ("pdmm", pdmm.Network(drop=0.1), "consensus", "simulated network"),
        ("pdmm", None, "matrices", "consensus constraints"),
    ],
)
def test_form_nodes_where_it_cannot_apply_is_named(method, network, constraints, culprit):
    G = nx.path_graph(4)
    if constraints == "matrices":
        constraints = {(i, j): (np.eye(1), -np.eye(1), np.zeros(1)) for i, j in G.edges}
    problem = pdmm.averaging(G, np.arange(4.0), constraints)
    with pytest.raises(ValueError, match=f"form='nodes' is not available here: .*{culprit}"):
        pdmm.solve(problem, method=method, network=network, form="nodes", max_iter=2)


def test_a_bad_form_is_named():
    problem = pdmm.averaging(nx.path_graph(4), np.arange(4.0))
    with pytest.raises(ValueError, match="form must be None, 'edges' or 'nodes'"):
        pdmm.solve(problem, form="node", max_iter=2)
