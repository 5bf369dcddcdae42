"""Bad input fails early with an error that names the problem."""

import networkx as nx
import numpy as np
import pytest
import torch

import pdmm

G = pdmm.topology("ring", n=6)
A = np.arange(6.0).reshape(6, 1)


def averaging():
    return pdmm.averaging(G, A)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"rho": 0}, ValueError, "rho must be a finite number > 0, got 0"),
        ({"rho": -1.0}, ValueError, "rho must be a finite number > 0, got -1.0"),
        ({"rho": float("nan")}, ValueError, "rho must be a finite number > 0"),
        ({"theta": 0}, ValueError, r"theta must be in \(0, 1\]"),
        ({"theta": 1.5}, ValueError, r"theta must be in \(0, 1\]"),
        ({"method": "qa-pdmm", "theta": -0.1}, ValueError, r"theta must be in \(0, 1\]"),
        ({"method": "newton"}, ValueError, "unknown method 'newton'"),
        ({"method": "admm", "theta": 0.5}, TypeError, "bad parameter for method 'admm'"),
        ({"method": "qa-pdmm", "eta": 0}, ValueError, "eta must be 'L', 'safe' or positive numbers"),
        ({"method": "qa-pdmm", "eta": [1.0, 2.0]}, ValueError, "eta must be a number or one value per node"),
        ({"max_iter": 0}, ValueError, "max_iter must be an integer >= 1"),
        ({"tol": -1}, ValueError, r"tol must be a number in \[0, 1\)"),
        ({"tol": 1.0}, ValueError, r"tol must be a number in \[0, 1\) \(it is relative"),
        ({"tol": float("inf")}, ValueError, r"tol must be a number in \[0, 1\)"),
        ({"target": float("inf"), "reference": np.zeros((6, 1))}, ValueError, "target must be a finite number > 0"),
        ({"seed": 2**64}, ValueError, "seed must be an integer from -2"),
        ({"seed": 1.5, "x0": "random"}, ValueError, "seed must be an integer from -2"),
        ({"device": "foo"}, ValueError, "device must be a torch device such as 'cpu' or 'cuda', got 'foo'"),
        ({"device": 123}, ValueError, "device must be a torch device|not available"),
        ({"rho": True}, ValueError, "rho must be a finite number > 0"),
        ({"dtype": torch.int64}, ValueError, "dtype must be torch.float64 or torch.float32"),
        ({"method": "qa-pdmm", "eta": "fast"}, ValueError, "eta must be 'L', 'safe' or positive numbers, got 'fast'"),
        ({"method": "qa-pdmm", "eta": np.ones(4)}, ValueError, "eta must be a number or one value per node"),
        ({"x0": np.zeros((5, 1))}, ValueError, r"x0 must have shape \(n, 1\)"),
        ({"x0": "ones"}, ValueError, "x0 must be None, 'random' or an array"),
        ({"reference": np.zeros((6, 2))}, ValueError, r"reference must have shape \(n, 1\)"),
        ({"reference": "scipy"}, ValueError, "reference must be None, 'cvxpy' or an array"),
    ],
)
def test_solve_rejects(kwargs, error, message):
    with pytest.raises(error, match=message):
        pdmm.solve(averaging(), **kwargs)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: pdmm.averaging(G, np.zeros((5, 2))),
            r"a must have shape \(n, \*\) or \(B, n, \*\) with n=6 nodes, got \(5, 2\)",
        ),
        (lambda: pdmm.averaging(G, np.full((6, 2), np.nan)), "a contains NaN or inf"),
        (lambda: pdmm.averaging(G, np.zeros((2, 3, 6, 2))), r"a must have shape"),
        (lambda: pdmm.least_squares(G, np.ones((6, 4, 2)), np.ones((6, 3))), r"y must have shape \(n, 4\)"),
        (
            lambda: pdmm.least_squares(G, np.ones((6, 4, 2)), np.ones((6, 4)), ridge=-1),
            "ridge must be a finite number >= 0",
        ),
        (lambda: pdmm.least_squares(G, np.ones((2, 6, 4, 2)), np.ones((3, 6, 4))), "disagree on the batch size"),
        (lambda: pdmm.lasso(G, np.ones((6, 4, 2)), np.ones((6, 4)), lam=-1), "lam must be a finite number >= 0"),
        (lambda: pdmm.logistic(G, np.ones((6, 4, 2)), np.full((6, 4), 2.0)), "labels must be -1/\\+1 or 0/1"),
        (lambda: pdmm.logistic(G, np.ones((6, 4, 2)), np.ones((6, 4)), reg=-0.1), "reg must be a finite number >= 0"),
        (lambda: pdmm.logistic(G, np.full((6, 4, 2), np.inf), np.ones((6, 4))), "X contains NaN or inf"),
        (lambda: pdmm.quadratic(G, np.tile([[1.0, 2.0], [0.0, 1.0]], (6, 1, 1)), np.ones((6, 2))), "must be symmetric"),
        (lambda: pdmm.quadratic(G, np.tile(-np.eye(2), (6, 1, 1)), np.ones((6, 2))), "positive semidefinite"),
        (lambda: pdmm.quadratic(G, np.tile(np.eye(2), (6, 1, 1)), np.ones((6, 3))), r"P must have shape \(n, 3, 3\)"),
        (lambda: pdmm.averaging(G, A, constraints="sparse"), "constraints must be 'consensus' or a dict"),
        (lambda: pdmm.averaging(G, A, constraints={(0, 1): (1, -1, 0)}), r"no constraint given for edge"),
        (lambda: pdmm.averaging(G, A, constraints={(0, 3): (1, -1, 0)}), "not edges of the graph"),
        (
            lambda: pdmm.averaging(G, A, constraints={e: (np.ones((1, 2)), -np.ones((1, 2)), 0) for e in G.edges}),
            r"same shape \(m, d=1\)",
        ),
        (
            lambda: pdmm.averaging(G, A, constraints={e: (1, -1, [0, 0]) for e in G.edges}),
            r"b_ij must have shape \(1,\)",
        ),
        (lambda: pdmm.averaging(G, A, constraints={e: (np.nan, -1, 0) for e in G.edges}), "contains NaN or inf"),
        (lambda: pdmm.Problem(G, "not a function"), "local must be a pdmm.local.LocalFunction"),
        (
            lambda: pdmm.averaging(
                G, A, constraints={(0, 1): (1, -1, 0), (1, 0): (1, -1, 1), **{e: (1, -1, 0) for e in list(G.edges)[1:]}}
            ),
            r"both \(0, 1\) and \(1, 0\)",
        ),
        (lambda: pdmm.least_squares(G, np.ones((6, 4, 2)), np.ones((6, 4)), ridge=float("nan")), "ridge must be"),
        (lambda: pdmm.lasso(G, np.ones((6, 4, 2)), np.ones((6, 4)), lam=float("inf")), "lam must be"),
        (lambda: pdmm.logistic(G, np.ones((6, 4, 2)), np.ones((6, 4)), reg=float("inf")), "reg must be"),
        (lambda: pdmm.averaging(nx.path_graph(7), A), "a must have shape"),
        (lambda: pdmm.averaging(G, np.zeros((6, 0))), r"a has shape \(6, 0\), with an axis of length 0"),
        (lambda: pdmm.least_squares(G, np.ones((6, 0, 2)), np.ones((6, 0))), "H has shape .* axis of length 0"),
    ],
)
def test_problem_rejects(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_eta_per_node_as_numpy_array():
    rng = np.random.default_rng(1)
    problem = pdmm.least_squares(G, rng.normal(size=(6, 5, 2)), rng.normal(size=(6, 5)))
    L = problem.local.smoothness()[:, 0].numpy()
    assert pdmm.solve(problem, method="qa-pdmm", eta=2 * L).converged


def test_singular_x_update_is_named():
    """Rank-deficient edge matrices and a merely convex f_i leave the x-update without a unique minimiser."""
    zero = {e: (np.zeros((1, 1)), np.zeros((1, 1)), 0.0) for e in G.edges}
    problem = pdmm.quadratic(G, np.zeros((6, 1, 1)), np.ones((6, 1)), constraints=zero)
    with pytest.raises(ValueError, match="node 0: .* not positive definite"):
        pdmm.solve(problem)


def test_qa_pdmm_with_too_small_eta_stops_with_divergence_error():
    rng = np.random.default_rng(0)
    problem = pdmm.least_squares(G, rng.normal(size=(6, 5, 3)), rng.normal(size=(6, 5)))
    with pytest.raises(pdmm.DivergenceError, match="qa-pdmm diverged at iteration") as caught:
        pdmm.solve(problem, method="qa-pdmm", eta=0.01, max_iter=5000, record_every=1)
    partial = caught.value.result
    assert not partial.converged and 1 < partial.iterations < 5000
    assert partial.history["residual"][-1] > 1e5 * partial.history["residual"][0]
