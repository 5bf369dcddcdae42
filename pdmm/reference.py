"""The centralised solution of a Problem with cvxpy: the independent reference for every method."""

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .problem import Problem


def reference(problem: "Problem", solver: str = "CLARABEL", **solver_options: Any) -> np.ndarray:
    """argmin sum_i f_i(x_i) s.t. the edge constraints (docs/theory/problem.md section 1), solved centrally.

    Consensus problems use one shared variable x (x_i = x for every node); general edge
    constraints use X in R^{n x d} with A_ij x_i + A_ji x_j = b_ij (or <= b_ij) for every edge.

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.
    solver : str
        The cvxpy solver; CLARABEL runs at tolerances of 1e-11.
    **solver_options
        Passed to cvxpy's Problem.solve (overriding CLARABEL's tolerances).

    Returns
    -------
    numpy.ndarray
        x*, (n, d), or (B, n, d) for a batched problem.

    Raises
    ------
    RuntimeError
        Where cvxpy cannot solve an instance (a solver error or a status other than optimal).
    """
    import cvxpy as cp  # imported here: a plain `import pdmm` stays fast

    options = {"tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11} if solver == cp.CLARABEL else {}
    options.update(solver_options)
    graph, n, d = problem.compiled, problem.n, problem.dim
    solutions: list[Any] = []  # cvxpy's variable values, (d,) or (n, d) arrays once solved
    for b in range(problem.batch):
        if problem.edge_matrices is None:  # consensus
            x: Any = cp.Variable(d)  # cvxpy's own types: a Variable whose .value is an array once solved
            xs: list[Any] = [x] * n
            constraints: list[Any] = []
        else:
            X: Any = cp.Variable((n, d))
            xs = [X[i] for i in range(n)]
            A, rhs = (t.numpy() for t in problem.edge_matrices)
            src, dst, rev = (t.tolist() for t in (graph.src, graph.dst, graph.rev))
            below = [False] * len(src) if problem.inequality is None else problem.inequality.tolist()
            lhs = [
                (A[e] @ xs[src[e]] + A[rev[e]] @ xs[dst[e]], rhs[e], below[e])
                for e in range(len(src))
                if src[e] < dst[e]
            ]
            constraints = [left <= right if inequality else left == right for left, right, inequality in lhs]
        task = cp.Problem(cp.Minimize(problem.local.cvxpy_value(xs, b)), constraints)
        try:
            task.solve(solver=solver, **options)
        except cp.error.SolverError as err:  # e.g. lam = 1e308: the solver's numbers overflow
            reason = (str(err).strip().splitlines() or ["solver error"])[0]
            raise RuntimeError(f"cvxpy could not solve the centralised problem (instance {b}): {reason}") from None
        if task.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            raise RuntimeError(f"cvxpy could not solve the centralised problem (instance {b}): status {task.status}")
        solutions.append(np.tile(x.value, (n, 1)) if problem.is_consensus else X.value)
    return np.stack(solutions) if problem.batched else solutions[0]
