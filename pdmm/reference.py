"""The centralised solution of a Problem: the independent reference for every method, in closed form where one
exists, else one vectorised cvxpy problem (docs/guide/solve.md, "The reference")."""

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from .problem import Problem

CLOSED_FORM_CONDITION = 1e10  # the largest condition number of sum_i P_i solved in closed form
NEWTON_STEPS = 8  # Newton steps at most that polish cvxpy's answer to a consensus logistic regression


def reference(problem: "Problem", solver: str | None = None, **solver_options: Any) -> np.ndarray:
    """argmin sum_i f_i(x_i) s.t. the edge constraints (docs/theory/problem.md section 1), solved centrally.

    A consensus problem whose local functions are quadratic (averaging, least squares, pdmm.quadratic) is
    solved in closed form, (sum_i P_i) x = sum_i q_i (docs/guide/solve.md, "The reference"), where sum_i P_i is
    positive definite with a condition number up to CLOSED_FORM_CONDITION. Every other problem is one cvxpy
    problem whose objective and constraints are single expressions over the stacked data: a consensus
    problem has one shared variable x (x_i = x at every node); general edge constraints use X in R^{n x d}
    with A_ij x_i + A_ji x_j = b_ij (or <= b_ij) for every edge. CLARABEL resolves logistic regression's
    exponential cones to about 1e-6 at a thousand nodes, so a consensus logistic regression's answer is
    then polished by Newton's method on sum_i f_i (polish), to rounding error.

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.
    solver : str or None
        None: the closed form where there is one, else cvxpy with CLARABEL at tolerances of 1e-11; a cvxpy
        solver's name solves every problem with that solver (no closed form).
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
    closed = closed_form(problem) if solver is None and not solver_options else None
    if closed is not None:
        return closed if problem.batched else closed[0]
    x = _by_cvxpy(problem, "CLARABEL" if solver is None else solver, solver_options)
    return polish(problem, x) if solver is None and not solver_options else x


def closed_form(problem: "Problem") -> np.ndarray | None:
    """x* = (sum_i P_i)^{-1} sum_i q_i at every node, (B, n, d), for a consensus problem with quadratic local
    functions f_i(x) = 1/2 x^T P_i x - q_i^T x; None for any other problem, or where some instance's sum_i P_i
    is not positive definite with a condition number up to CLOSED_FORM_CONDITION (its minimiser is not unique,
    or not resolved in float64: cvxpy decides).

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.

    Returns
    -------
    numpy.ndarray or None
    """
    from .local import Quadratic

    local = problem.local
    if not problem.is_consensus or type(local) is not Quadratic:
        return None
    n, d = problem.n, problem.dim
    P = local.P.to(torch.float64).sum(0)  # (B,) or (B, d, d)
    if P.dim() == 1:
        P = P[:, None, None] * torch.eye(d, dtype=torch.float64, device=P.device)
    P = (P + P.transpose(1, 2)) / 2
    eigenvalues = torch.linalg.eigvalsh(P)
    if not bool((eigenvalues[:, 0] > eigenvalues[:, -1] / CLOSED_FORM_CONDITION).all()):
        return None
    q = local.q.to(torch.float64).sum(0)  # (B, d)
    x = torch.linalg.solve(P, q.unsqueeze(-1)).squeeze(-1)
    return x.cpu().numpy()[:, None, :].repeat(n, 1)


def polish(problem: "Problem", x: np.ndarray) -> np.ndarray:
    """Newton's method on sum_i f_i(x) from cvxpy's answer x, for a consensus logistic regression (smooth and
    strongly convex where reg > 0): x <- x - (sum_i H_i(x))^{-1} sum_i grad f_i(x), at most NEWTON_STEPS steps,
    each kept only where it does not raise the objective, until a step is below 1e-15 of x; any other problem's x
    is returned as it is.

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.
    x : numpy.ndarray
        cvxpy's answer, (n, d) or (B, n, d).

    Returns
    -------
    numpy.ndarray
        The polished answer, shaped like x.
    """
    from .local import Logistic

    local = problem.local
    if not problem.is_consensus or type(local) is not Logistic:
        return x
    n = problem.n
    shared = torch.as_tensor(x.reshape(problem.batch, n, -1)[:, 0], dtype=torch.float64)  # (B, d)

    def at(point):
        return point.unsqueeze(0).expand(n, *point.shape).to(local.X.dtype)

    value = local.value(at(shared)).to(torch.float64)
    for _ in range(NEWTON_STEPS):
        gradient = local.gradient(at(shared)).to(torch.float64).sum(0)
        hessian = local.hessian(at(shared)).to(torch.float64).sum(0)
        step = torch.linalg.solve(hessian, gradient.unsqueeze(-1)).squeeze(-1)
        trial = shared - step
        trial_value = local.value(at(trial)).to(torch.float64)
        better = torch.isfinite(trial_value) & (trial_value <= value + 1e-15 * value.abs())
        shared = torch.where(better.unsqueeze(-1), trial, shared)
        value = torch.where(better, trial_value, value)
        small = step.norm(dim=-1) <= 1e-15 * torch.clamp(shared.norm(dim=-1), min=1.0)
        if bool((small | ~better).all()):
            break
    polished = shared.numpy()[:, None, :].repeat(n, 1)
    return polished if problem.batched else polished[0]


def _by_cvxpy(problem: "Problem", solver: str, solver_options: dict) -> np.ndarray:
    """x* of every instance from one vectorised cvxpy problem per instance (reference)."""
    import cvxpy as cp  # imported here: a plain `import pdmm` stays fast

    options = {"tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11} if solver == cp.CLARABEL else {}
    options.update(solver_options)
    n, d = problem.n, problem.dim
    if problem.is_consensus:
        shared: Any = cp.Variable(d)  # cvxpy's own types: a Variable whose .value is an array once solved
        X: Any = np.ones((n, 1)) @ cp.reshape(shared, (1, d), order="C")  # every row the shared x
        constraints: list[Any] = []
    else:
        X = cp.Variable((n, d))
        constraints = _edge_constraints(problem, X)
    solutions = []
    for b in range(problem.batch):
        task = cp.Problem(cp.Minimize(problem.local.cvxpy_value(X, b)), constraints)
        try:
            task.solve(solver=solver, **options)
        except cp.error.SolverError as err:  # e.g. lam = 1e308: the solver's numbers overflow
            reason = (str(err).strip().splitlines() or ["solver error"])[0]
            raise RuntimeError(f"cvxpy could not solve the centralised problem (instance {b}): {reason}") from None
        if task.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            raise RuntimeError(f"cvxpy could not solve the centralised problem (instance {b}): status {task.status}")
        solutions.append(np.tile(shared.value, (n, 1)) if problem.is_consensus else X.value)
    return np.stack(solutions) if problem.batched else solutions[0]


def _edge_constraints(problem: "Problem", X: Any) -> list[Any]:
    """A_ij x_i + A_ji x_j = b_ij (<= b_ij where the edge's constraint is an inequality) for every undirected
    edge {i, j}, as at most two vectorised cvxpy constraints (equalities, inequalities)."""
    assert problem.edge_matrices is not None
    graph = problem.compiled
    A, rhs = (t.cpu().numpy() for t in problem.edge_matrices)  # (E, m, d), (E, m), one row per directed edge
    src, dst, rev = (t.cpu().numpy() for t in (graph.src, graph.dst, graph.rev))
    below = np.zeros(len(src), bool) if problem.inequality is None else problem.inequality.cpu().numpy()
    constraints = []
    for inequality in (False, True):
        edges = np.flatnonzero((src < dst) & (below == inequality))
        if not len(edges):
            continue
        left = rows_of(A[edges], X, src[edges]) + rows_of(A[rev[edges]], X, dst[edges])
        constraints.append(left <= rhs[edges] if inequality else left == rhs[edges])
    return constraints


def rows_of(M: np.ndarray, X: Any, nodes: np.ndarray) -> Any:
    """Row e is M_e X_{nodes[e]}: M (E, m, d), X an (n, d) cvxpy expression; (E, m)."""
    from .local.base import rows_times

    return rows_times(M, X[nodes, :])
