"""The batched engine against plain per-node loops written from the equations, iterate by iterate.

The loops use the lambda-form of PDMM (docs/theory/pdmm.md section 1) and the recursive form of
QA-PDMM (docs/theory/qa_pdmm.md section 4, the paper's equations (2)-(4)); the engine runs the z-form
(docs/theory/pdmm.md section 4) and the non-recursive form (docs/theory/qa_pdmm.md section 5), so agreement
also checks the equivalences derived in docs/theory/pdmm.md section 5 and docs/theory/qa_pdmm.md section 4.
"""

import numpy as np
import pytest

import pdmm

ITERATIONS = 25


def setup(seed=0, n=7, d=2, consensus=False):
    """A small graph (a cycle plus chords), strongly convex quadratics and general A_ij, b_ij != 0."""
    G = pdmm.topology("small_world", n=n, seed=seed, k=2, p=0.5)
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(n, d, d))
    P = M @ M.transpose(0, 2, 1) + 0.5 * np.eye(d)
    q = rng.normal(size=(n, d))
    edges = {}
    for i, j in G.edges:
        if consensus:
            edges[(i, j)] = (np.eye(d) if i < j else -np.eye(d), -np.eye(d) if i < j else np.eye(d), np.zeros(d))
        else:
            edges[(i, j)] = (rng.normal(size=(d, d)), rng.normal(size=(d, d)), rng.normal(size=d))
    return G, P, q, edges


def edge_terms(edges):
    """Directed view: A[(i, j)] = A_ij, b[(i, j)] = b_ij = b[(j, i)]."""
    A, b = {}, {}
    for (i, j), (A_ij, A_ji, b_ij) in edges.items():
        A[(i, j)], A[(j, i)], b[(i, j)], b[(j, i)] = A_ij, A_ji, b_ij, b_ij
    return A, b


def loop_pdmm_lambda(G, P, q, edges, rho, x0, iterations):
    """PDMM, lambda-form, one node at a time (quadratic f_i: the argmin is a linear solve).

    rho: a number, or one per iteration (rho_k in both the x- and the lambda-update of iteration k).
    """
    A, b = edge_terms(edges)
    x = {i: x0[i].copy() for i in G}
    lam = {e: np.zeros(len(b[e])) for e in A}  # lam[(i, j)] = lambda_{i|j}, held by i, sent to j
    out = []
    rhos = np.broadcast_to(rho, (iterations,))
    for rho in rhos:
        new = {}
        for i in G:
            lhs, rhs = P[i].copy(), q[i].copy()
            for j in G[i]:
                lhs += rho * A[(i, j)].T @ A[(i, j)]
                rhs += A[(i, j)].T @ lam[(j, i)] - rho * A[(i, j)].T @ (A[(j, i)] @ x[j] - b[(i, j)])
            new[i] = np.linalg.solve(lhs, rhs)
        lam = {(i, j): lam[(j, i)] + rho * (b[(i, j)] - A[(j, i)] @ x[j] - A[(i, j)] @ new[i]) for (i, j) in A}
        x = new
        out.append(np.stack([x[i] for i in G]))
    return out


def loop_pdmm_z(G, P, q, edges, rho, theta, iterations, schedule=None):
    """PDMM, z-form with averaging theta, one node at a time, from x^0 = 0 and lambda^0 = 0.

    z_{i|j} = -lambda_{j|i} + rho A_ji x_j - rho b_ij / 2 (docs/theory/pdmm.md section 5) makes z^0 = -rho b / 2,
    not 0, when b != 0.
    With a schedule, iteration k exchanges only on the edges of schedule[k % len(schedule)]; the others keep z.
    """
    A, b = edge_terms(edges)
    z = {e: -rho * b[e] / 2 for e in A}  # z[(i, j)] = z_{i|j}, held by node i
    out = []
    for k in range(iterations):
        x = {}
        for i in G:
            lhs, rhs = P[i].copy(), q[i].copy()
            for j in G[i]:
                lhs += rho * A[(i, j)].T @ A[(i, j)]
                rhs += -A[(i, j)].T @ z[(i, j)] + rho * A[(i, j)].T @ b[(i, j)] / 2
            x[i] = np.linalg.solve(lhs, rhs)
        up = None if schedule is None else {frozenset(e) for e in schedule[k % len(schedule)]}
        y = {(i, j): z[(i, j)] + 2 * rho * (A[(i, j)] @ x[i] - b[(i, j)] / 2) for (i, j) in A}
        z = {
            (j, i): (1 - theta) * z[(j, i)] + theta * y[(i, j)] if up is None or frozenset((i, j)) in up else z[(j, i)]
            for (i, j) in A
        }
        out.append(np.stack([x[i] for i in G]))
    return out


def loop_qa_pdmm(G, grad, eta, edges, rho, iterations, d):
    """QA-PDMM in the recursive form (docs/theory/qa_pdmm.md section 4; the paper's (2)-(4))
    from x^0 = 0, lambda^0 = 0."""
    A, b = edge_terms(edges)
    Binv = {i: np.linalg.inv(eta * np.eye(d) + rho * sum(A[(i, j)].T @ A[(i, j)] for j in G[i])) for i in G}
    x = {i: np.zeros(d) for i in G}
    lam = {e: np.zeros(len(b[e])) for e in A}
    x_prev = lam_prev = half_prev = None
    out = []
    for k in range(iterations):
        if k == 0:
            g = {
                i: sum(A[(i, j)].T @ (lam[(j, i)] - rho * A[(j, i)] @ x[j] + rho * b[(i, j)]) for j in G[i]) for i in G
            }
            start = x  # x^{-1/2} = x^0
            half = {i: Binv[i] @ (eta * start[i] + g[i] - grad(i, start[i])) for i in G}
            new = {i: Binv[i] @ (eta * half[i] + g[i] - grad(i, half[i])) for i in G}
        else:
            half = {
                i: x[i]
                + Binv[i]
                @ sum(
                    A[(i, j)].T @ (lam[(j, i)] - lam_prev[(j, i)]) - rho * A[(i, j)].T @ A[(j, i)] @ (x[j] - x_prev[j])
                    for j in G[i]
                )
                for i in G
            }
            new = {
                i: half[i] + Binv[i] @ (eta * (half[i] - half_prev[i]) - (grad(i, half[i]) - grad(i, half_prev[i])))
                for i in G
            }
        lam_prev, lam = (
            lam,
            {(i, j): lam[(j, i)] + rho * (b[(i, j)] - A[(j, i)] @ x[j] - A[(i, j)] @ new[i]) for (i, j) in A},
        )
        x_prev, x, half_prev = x, new, half
        out.append(np.stack([x[i] for i in G]))
    return out


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
