"""Every constructor's PDMM / averaged PDMM / QA-PDMM / ADMM solution against the centralised cvxpy solve."""

import networkx as nx
import numpy as np
import pytest
import torch

import pdmm

TOPOLOGIES = [("ring", {}), ("random_geometric", {}), ("barabasi_albert", {"m": 1})]  # the last is a tree
METHODS = [("pdmm", {}), ("pdmm", {"theta": 0.5}), ("qa-pdmm", {}), ("admm", {})]
RTOL = 1e-6


def graph(kind, params, n=10):
    return pdmm.topology(kind, n=n, seed=1, **params)


def regression(n, rows=6, d=3, batch=None, seed=0):
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    H = rng.normal(size=(*lead, n, rows, d))
    x_true = rng.normal(size=(*lead, 1, d, 1))
    y = (H @ x_true)[..., 0] + 0.3 * rng.normal(size=(*lead, n, rows))
    return H, y


def check(problem, method, params, rho=1.0, max_iter=4000, device="cpu"):
    x_star = pdmm.reference(problem)
    result = pdmm.solve(problem, method=method, rho=rho, max_iter=max_iter, device=device, reference=x_star, **params)
    assert result.converged, f"{method} {params} did not converge: {result}"
    error = np.linalg.norm(result.x - x_star) / np.linalg.norm(x_star)
    assert error < RTOL, f"{method} {params}: relative error {error:.2e}"
    axes = (-2, -1)  # per instance: the history records ||x_b - x*_b||_F / ||x*_b||_F
    per_instance = np.linalg.norm(result.x - x_star, axis=axes) / np.linalg.norm(x_star, axis=axes)
    np.testing.assert_allclose(result.history["error"][-1], per_instance, rtol=1e-9)
    return result


@pytest.mark.parametrize("method, params", METHODS)
@pytest.mark.parametrize("kind, topo", TOPOLOGIES)
def test_averaging(kind, topo, method, params, device):
    G = graph(kind, topo)
    a = np.random.default_rng(0).normal(size=(G.number_of_nodes(), 3))
    result = check(pdmm.averaging(G, a), method, params, device=device)
    np.testing.assert_allclose(result.x, np.tile(a.mean(0), (len(a), 1)), atol=1e-9)


@pytest.mark.parametrize("method, params", METHODS)
def test_averaging_batched_instances(method, params, device):
    G = graph("random_geometric", {})
    a = np.random.default_rng(1).normal(size=(4, G.number_of_nodes(), 2))
    result = check(pdmm.averaging(G, a), method, params, device=device)
    assert result.x.shape == (4, G.number_of_nodes(), 2)
    assert result.history["residual"].shape == (-(-result.iterations // 10), 4)  # rows at the tests, every 10
    np.testing.assert_allclose(result.x, np.broadcast_to(a.mean(1, keepdims=True), a.shape), atol=1e-9)


@pytest.mark.parametrize("method, params", METHODS)
@pytest.mark.parametrize("kind, topo", TOPOLOGIES)
def test_least_squares(kind, topo, method, params, device):
    G = graph(kind, topo)
    H, y = regression(G.number_of_nodes())
    check(pdmm.least_squares(G, H, y, ridge=0.1), method, params, device=device)


def test_explicit_batch_axis_of_one_is_kept():
    G = graph("ring", {})
    a = np.random.default_rng(7).normal(size=(1, G.number_of_nodes(), 2))
    result = pdmm.solve(pdmm.averaging(G, a), reference="cvxpy")
    assert result.x.shape == result.reference.shape == (1, G.number_of_nodes(), 2)
    assert result.history["residual"].shape == (-(-result.iterations // 10), 1)
    assert pdmm.solve(pdmm.averaging(G, a[0])).x.shape == (G.number_of_nodes(), 2)


def test_least_squares_batched(device):
    G = graph("ring", {})
    H, y = regression(G.number_of_nodes(), batch=3)
    result = check(pdmm.least_squares(G, H, y), "pdmm", {}, device=device)
    assert result.x.shape == (3, G.number_of_nodes(), 3)


@pytest.mark.parametrize("method, params", [m for m in METHODS if m[0] != "qa-pdmm"])
@pytest.mark.parametrize("kind, topo", TOPOLOGIES)
def test_lasso(kind, topo, method, params, device):
    G = graph(kind, topo)
    H, y = regression(G.number_of_nodes(), d=5)
    x_star = check(pdmm.lasso(G, H, y, lam=40.0), method, params, device=device).reference
    assert 0 < np.sum(np.abs(x_star[0]) < 1e-6) < 5, "lam should zero some but not all coordinates"


@pytest.mark.parametrize("method, params", [m for m in METHODS if m[0] != "qa-pdmm"])
def test_lasso_with_diagonal_hessian_uses_closed_form(method, params):
    G = graph("ring", {})
    n = G.number_of_nodes()
    rng = np.random.default_rng(4)
    H = np.stack([np.diag(rng.uniform(0.5, 2, size=3)) for _ in range(n)])
    y = rng.normal(size=(n, 3))
    check(pdmm.lasso(G, H, y, lam=3.0), method, params)


def test_lasso_batched():
    G = graph("random_geometric", {})
    H, y = regression(G.number_of_nodes(), d=4, batch=2)
    check(pdmm.lasso(G, H, y, lam=10.0), "pdmm", {"theta": 0.5})


def test_qa_pdmm_refuses_lasso():
    G = graph("ring", {})
    H, y = regression(G.number_of_nodes())
    with pytest.raises(ValueError, match="qa-pdmm needs smooth local functions; Lasso is not smooth"):
        pdmm.solve(pdmm.lasso(G, H, y, lam=1.0), method="qa-pdmm")


@pytest.mark.parametrize("method, params", METHODS)
@pytest.mark.parametrize("kind, topo", TOPOLOGIES)
def test_logistic(kind, topo, method, params, device):
    G = graph(kind, topo)
    rng = np.random.default_rng(2)
    X = rng.normal(size=(G.number_of_nodes(), 8, 3))
    y = np.sign(X @ np.array([1.0, -2.0, 0.5]) + 0.5 * rng.normal(size=(G.number_of_nodes(), 8)))
    check(pdmm.logistic(G, X, y, reg=0.5), method, params, device=device)


def test_logistic_accepts_zero_one_labels():
    G = graph("ring", {})
    rng = np.random.default_rng(3)
    X = rng.normal(size=(G.number_of_nodes(), 5, 2))
    y01 = (rng.uniform(size=(G.number_of_nodes(), 5)) > 0.5).astype(float)
    a = pdmm.solve(pdmm.logistic(G, X, y01, reg=1.0))
    b = pdmm.solve(pdmm.logistic(G, X, 2 * y01 - 1, reg=1.0))
    np.testing.assert_array_equal(a.x, b.x)


def general_quadratic(G, d=3, m=2, seed=0, batch=None):
    """Random strongly convex quadratics with random m x d edge matrices (m < d), b consistent with some x."""
    rng = np.random.default_rng(seed)
    n = G.number_of_nodes()
    lead = () if batch is None else (batch,)
    M = rng.normal(size=(*lead, n, d, d))
    P = M @ np.swapaxes(M, -1, -2) + 0.5 * np.eye(d)
    q = rng.normal(size=(*lead, n, d))
    x_feasible = rng.normal(size=(n, d))
    constraints = {}
    for i, j in G.edges:
        A_ij, A_ji = rng.normal(size=(m, d)), rng.normal(size=(m, d))
        constraints[(i, j)] = (A_ij, A_ji, A_ij @ x_feasible[i] + A_ji @ x_feasible[j])
    return pdmm.quadratic(G, P, q, constraints=constraints)


@pytest.mark.parametrize("method, params", [m for m in METHODS if m[0] != "admm"])
@pytest.mark.parametrize("kind, topo", TOPOLOGIES)
def test_quadratic_with_general_edge_matrices(kind, topo, method, params, device):
    problem = general_quadratic(graph(kind, topo, n=8))
    result = check(problem, method, params, rho=0.5, device=device)
    assert np.ptp(result.x, axis=0).max() > 0.1, "general constraints should not force consensus"


def test_quadratic_general_batched():
    check(general_quadratic(graph("ring", {}, n=6), batch=2), "pdmm", {}, rho=0.5)


def test_quadratic_consensus():
    G = graph("random_geometric", {})
    rng = np.random.default_rng(5)
    M = rng.normal(size=(G.number_of_nodes(), 3, 3))
    for method, params in METHODS:
        check(pdmm.quadratic(G, M @ M.transpose(0, 2, 1), rng.normal(size=(G.number_of_nodes(), 3))), method, params)


def test_admm_refuses_general_constraints():
    with pytest.raises(ValueError, match="supports constraints='consensus' only"):
        pdmm.solve(general_quadratic(graph("ring", {}, n=5)), method="admm")


def test_string_node_labels():
    G = nx.relabel_nodes(graph("random_geometric", {}), lambda v: f"sensor-{v}")
    a = np.arange(G.number_of_nodes(), dtype=float)
    result = pdmm.solve(pdmm.averaging(G, a))
    assert result.nodes == list(G.nodes)
    np.testing.assert_allclose(result.x[:, 0], a.mean(), atol=1e-9)


def test_float32_runs_in_float32():
    G = graph("random_geometric", {}, n=30)
    a = np.random.default_rng(6).normal(size=(30, 3))
    result = pdmm.solve(pdmm.averaging(G, a), dtype=torch.float32, tol=1e-6, rho=0.3)
    assert result.converged and result.x.dtype == np.float32
    np.testing.assert_allclose(result.x, np.tile(a.mean(0), (30, 1)), atol=1e-5)


@pytest.mark.parametrize("kind", ["least_squares", "logistic"])
def test_averaged_qa_pdmm(kind):
    """theta < 1 with QA-PDMM (our extension, docs/theory/qa_pdmm.md section 7; the paper has theta = 1) reaches
    the same solution."""
    G = graph("random_geometric", {})
    H, y = regression(G.number_of_nodes())
    problem = pdmm.least_squares(G, H, y) if kind == "least_squares" else pdmm.logistic(G, H, np.sign(y))
    check(problem, "qa-pdmm", {"theta": 0.5})
