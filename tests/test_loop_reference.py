"""The batched engine against plain per-node loops written from the equations, iterate by iterate.

The loops use the lambda-form of PDMM (docs/theory/pdmm.md section 1) and the recursive form of
QA-PDMM (docs/theory/qa_pdmm.md section 4, the paper's equations (2)-(4)); the engine runs the z-form
(docs/theory/pdmm.md section 4) and the non-recursive form (docs/theory/qa_pdmm.md section 5), so agreement
also checks the equivalences derived in docs/theory/pdmm.md section 5 and docs/theory/qa_pdmm.md section 4.
"""

import numpy as np
import pytest
from pdmm_loop_reference import loop_pdmm_lambda, loop_pdmm_z, loop_qa_pdmm, setup

import pdmm

ITERATIONS = 25


def engine_iterates(problem, iterations, device="cpu", **params):
    """x^1..x^K from pdmm.solve with max_iter = k (tol=0 never stops early)."""
    return [pdmm.solve(problem, max_iter=k, tol=0, device=device, **params).x for k in range(1, iterations + 1)]


def assert_iterates_equal(expected, actual, atol=1e-10):
    assert len(expected) == len(actual)
    for k, (e, a) in enumerate(zip(expected, actual, strict=False), start=1):
        np.testing.assert_allclose(a, e, rtol=0, atol=atol * max(1.0, np.abs(e).max()), err_msg=f"iteration {k}")
    assert np.abs(expected[-1] - expected[0]).max() > 1e-3, "the iterates should move"


@pytest.mark.parametrize("consensus", [False, True])
def test_pdmm_matches_lambda_form_loop(consensus, device):
    G, P, q, edges = setup(consensus=consensus)
    problem = pdmm.quadratic(G, P, q, constraints=edges)
    expected = loop_pdmm_lambda(G, P, q, edges, 0.7, np.zeros_like(q), ITERATIONS)
    assert_iterates_equal(expected, engine_iterates(problem, ITERATIONS, device, rho=0.7))


def test_pdmm_matches_lambda_form_loop_from_random_start():
    G, P, q, edges = setup(seed=1)
    problem = pdmm.quadratic(G, P, q, constraints=edges)
    x0 = np.random.default_rng(9).normal(size=q.shape)
    expected = loop_pdmm_lambda(G, P, q, edges, 1.3, x0, ITERATIONS)
    assert_iterates_equal(expected, engine_iterates(problem, ITERATIONS, rho=1.3, x0=x0))


def test_consensus_operator_matches_explicit_edge_matrices():
    """The signed consensus fast path and the general edge-matrix path give the same iterates."""
    G, P, q, edges = setup(seed=2, consensus=True)
    fast = engine_iterates(pdmm.quadratic(G, P, q), ITERATIONS, rho=0.9, theta=0.6)
    general = engine_iterates(pdmm.quadratic(G, P, q, constraints=edges), ITERATIONS, rho=0.9, theta=0.6)
    assert_iterates_equal(general, fast, atol=1e-12)


@pytest.mark.parametrize("theta", [0.5, 0.8])
def test_averaged_pdmm_matches_z_form_loop(theta, device):
    G, P, q, edges = setup(seed=3)
    problem = pdmm.quadratic(G, P, q, constraints=edges)
    expected = loop_pdmm_z(G, P, q, edges, 0.5, theta, ITERATIONS)
    assert_iterates_equal(expected, engine_iterates(problem, ITERATIONS, device, rho=0.5, theta=theta))


def test_qa_pdmm_matches_recursive_loop_general_edges(device):
    G, P, q, edges = setup(seed=4)
    eta = 1.5 * max(np.linalg.eigvalsh(P).max(axis=1))
    expected = loop_qa_pdmm(G, lambda i, x: P[i] @ x - q[i], eta, edges, 0.8, ITERATIONS, d=2)
    problem = pdmm.quadratic(G, P, q, constraints=edges)
    assert_iterates_equal(expected, engine_iterates(problem, ITERATIONS, device, method="qa-pdmm", rho=0.8, eta=eta))


def test_qa_pdmm_matches_recursive_loop_logistic(device):
    G = pdmm.topology("ring", n=6)
    rng = np.random.default_rng(5)
    X, y, reg = rng.normal(size=(6, 4, 3)), rng.choice([-1.0, 1.0], size=(6, 4)), 0.3
    grad = lambda i, x: -X[i].T @ (y[i] / (1 + np.exp(y[i] * (X[i] @ x)))) + reg * x  # noqa: E731
    _, _, _, edges = setup(seed=0, n=6, d=3, consensus=True)
    edges = {
        (i, j): (np.eye(3) if i < j else -np.eye(3), -np.eye(3) if i < j else np.eye(3), np.zeros(3))
        for i, j in G.edges
    }
    expected = loop_qa_pdmm(G, grad, 2.0, edges, 0.6, ITERATIONS, d=3)
    problem = pdmm.logistic(G, X, y, reg=reg)
    assert_iterates_equal(expected, engine_iterates(problem, ITERATIONS, device, method="qa-pdmm", rho=0.6, eta=2.0))
