"""Plain per-node loops of PDMM and QA-PDMM written from the equations (docs/theory/pdmm.md sections 1 and 5,
docs/theory/qa_pdmm.md section 4): the independent references the batched engine is checked against, and
`setup`, the small problem they run."""

import numpy as np

import pdmm


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
