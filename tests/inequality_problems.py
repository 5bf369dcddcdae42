"""Edge constraints with inequalities, feasible by construction (mixed_constraints): shared by the inequality
and node-order tests."""

import numpy as np

D = 3  # the dimension of each x_i


def mixed_constraints(graph, seed=0, relation="<=", sign=1, dim=D):
    """One row per edge, random A; three edges in four inequalities. Feasible by construction: b is
    A_ij p_i + A_ji p_j at a random point p (plus a slack in [0, 2] on the inequalities), so some
    inequalities bind at the optimum and others do not. sign=-1 turns each inequality around, to
    A_ij x_i + A_ji x_j >= A_ij p_i + A_ji p_j - slack, written with "<="."""
    rng = np.random.default_rng(seed)
    p = {v: rng.normal(size=dim) for v in graph}
    out = {}
    for k, (i, j) in enumerate(graph.edges):
        A_ij, A_ji = rng.normal(size=(1, dim)), rng.normal(size=(1, dim))
        b = A_ij @ p[i] + A_ji @ p[j]
        inequality = (sign * A_ij, sign * A_ji, sign * b + rng.uniform(0, 2), relation)
        out[(i, j)] = inequality if k % 4 else (A_ij, A_ji, b)
    return out
