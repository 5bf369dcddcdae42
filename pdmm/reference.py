"""The centralised solution of a Problem: the independent reference for every method, in closed form where one
exists, else one vectorised cvxpy problem (docs/guide/solve.md, "The reference")."""

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from .problem import Problem

CLOSED_FORM_CONDITION = 1e10  # the largest condition number of sum_i P_i solved in closed form
NEWTON_STEPS = 100  # Newton steps at most for a consensus logistic regression (about 10 from x = 0 in practice)
QUADRATIC = 0.1  # a Newton decrement lambda^2 below which Newton's method takes full steps (its quadratic region)
# the most numbers an instance's cvxpy data may hold for B > 1 instances to share one compiled problem (cvxpy
# Parameters): beyond it compiling with Parameters costs more than compiling each instance with constants
# (`python benchmarks/bench_reference.py --batched`, 8 lasso instances: 2.1x faster at 800 numbers, 1.3x at 8,000,
# 0.73x at 20,000 and 0.46x at 40,000)
PARAMETER_NUMBERS = 8_000


def reference(problem: "Problem", solver: str | None = None, **solver_options: Any) -> np.ndarray:
    """argmin sum_i f_i(x_i) s.t. the edge constraints (docs/theory/problem.md section 1), solved centrally.

    A consensus problem whose local functions are quadratic (averaging, least squares, pdmm.quadratic) is
    solved in closed form, (sum_i P_i) x = sum_i q_i (docs/guide/solve.md, "The reference"), where sum_i P_i is
    positive definite with a condition number up to CLOSED_FORM_CONDITION. Every other problem is one cvxpy
    problem whose objective and constraints are single expressions over the stacked data: a consensus
    problem has one shared variable x (x_i = x at every node); general edge constraints use X in R^{n x d}
    with A_ij x_i + A_ji x_j = b_ij (or <= b_ij) for every edge; B instances whose data holds at most
    PARAMETER_NUMBERS numbers each share one compiled problem (cvxpy Parameters, LocalFunction.cvxpy_data).
    A consensus logistic regression with reg > 0
    is solved by Newton's method (newton): CLARABEL resolves its exponential cones only to about 1e-6 at a
    thousand nodes, where Newton's method reaches a gradient of rounding size in about ten steps; where Newton
    does not get there, cvxpy's answer is polished by it.

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.
    solver : str or None
        None: the closed form or Newton's method where they apply, else cvxpy with CLARABEL at tolerances of
        1e-11; a cvxpy solver's name solves every problem with that solver.
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
    own = solver is None and not solver_options  # the project's own choice of method
    exact = closed_form(problem) if own else None
    if exact is None and own:
        exact = newton(problem)
    if exact is not None:
        return exact if problem.batched else exact[0]
    x = _by_cvxpy(problem, "CLARABEL" if solver is None else solver, solver_options)
    polished = newton(problem, x) if own else None  # cvxpy's answer to a logistic regression Newton did not solve
    if polished is None:
        return x
    return polished if problem.batched else polished[0]


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


def newton(problem: "Problem", start: np.ndarray | None = None) -> np.ndarray | None:
    """x* of a consensus logistic regression with reg > 0 (smooth and strongly convex, so one minimiser) by
    Newton's method on F(x) = sum_i f_i(x): x <- x - t (sum_i H_i(x))^{-1} sum_i grad f_i(x), t halved from 1
    until F(x - t step) <= F(x) - t/4 grad^T step (every instance on its own) while the Newton decrement
    grad^T step is at least QUADRATIC, full steps below it (where F can no longer tell the steps apart in
    float64, and Newton's method converges quadratically), from `start` (or x = 0), at most NEWTON_STEPS
    steps, until a step moves x by at most 1e-14 of its size; None for any other problem, or where some
    instance does not get there (cvxpy decides).

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.
    start : numpy.ndarray or None
        A first point, (n, d) or (B, n, d) (every row the same), or None for 0.

    Returns
    -------
    numpy.ndarray or None
        x* at every node, (B, n, d), or None.
    """
    from .local import Logistic

    local = problem.local
    if not problem.is_consensus or type(local) is not Logistic or not local.reg > 0:
        return None
    n, d = problem.n, problem.dim
    x = torch.zeros(problem.batch, d, dtype=torch.float64)
    if start is not None:
        x = torch.as_tensor(start.reshape(problem.batch, n, d)[:, 0], dtype=torch.float64)

    def at(point):  # the shared point at every node, (n, B, d)
        return point.unsqueeze(0).expand(n, *point.shape).to(local.X.dtype)

    value = local.value(at(x)).to(torch.float64)
    for _ in range(NEWTON_STEPS):
        gradient = local.gradient(at(x)).to(torch.float64).sum(0)
        step = torch.linalg.solve(local.hessian(at(x)).to(torch.float64).sum(0), gradient.unsqueeze(-1))[..., 0]
        decrement = (gradient * step).sum(-1)  # lambda^2 = grad^T H^-1 grad, affine invariant
        t = torch.ones_like(value)
        for _ in range(60):  # backtracking, until the quadratic region (lambda^2 < QUADRATIC) takes full steps
            trial_value = local.value(at(x - t.unsqueeze(-1) * step)).to(torch.float64)
            short = ~(trial_value <= value - 0.25 * t * decrement) & (decrement >= QUADRATIC)  # NaN counts as short
            if not bool(short.any()):
                break
            t = torch.where(short, t / 2, t)
        move = t.unsqueeze(-1) * step
        x = x - move
        value = local.value(at(x)).to(torch.float64)
        if not bool(torch.isfinite(x).all()):
            return None
        if bool((move.norm(dim=-1) <= 1e-14 * torch.clamp(x.norm(dim=-1), min=1.0)).all()):
            return x.numpy()[:, None, :].repeat(n, 1)
    return None


def _by_cvxpy(problem: "Problem", solver: str, solver_options: dict) -> np.ndarray:
    """x* of every instance from one vectorised cvxpy problem per instance (reference); for B > 1 instances whose
    data (LocalFunction.cvxpy_data) holds at most PARAMETER_NUMBERS numbers, one problem compiled once with cvxpy
    Parameters, each instance assigning its values."""
    import cvxpy as cp  # imported here: a plain `import pdmm` stays fast

    from .local import LocalFunction

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
    local, solutions = problem.local, []
    own_value = type(local).cvxpy_value is not LocalFunction.cvxpy_value  # a subclass's objective: compiled as it is
    data = local.cvxpy_data(0) if problem.batch > 1 and not own_value else None
    parameters = None
    if data is not None and _numbers(data) <= PARAMETER_NUMBERS:
        parameters = {
            k: [cp.Parameter(a.shape) for a in v] if isinstance(v, list) else cp.Parameter(v.shape)
            for k, v in data.items()
        }
        task = cp.Problem(cp.Minimize(local.cvxpy_expression(X, parameters)), constraints)
        if not task.is_dpp():  # cvxpy would compile it again for every instance anyway
            parameters = None
    for b in range(problem.batch):
        if parameters is not None:  # one compiled problem: only the instance's values change
            instance = data if b == 0 else local.cvxpy_data(b)
            assert instance is not None  # the class gives data for every instance, as for instance 0
            _assign(parameters, instance)
        else:
            task = cp.Problem(cp.Minimize(local.cvxpy_value(X, b)), constraints)
        try:
            task.solve(solver=solver, **options)
        except cp.error.SolverError as err:  # e.g. lam = 1e308: the solver's numbers overflow
            reason = (str(err).strip().splitlines() or ["solver error"])[0]
            raise RuntimeError(f"cvxpy could not solve the centralised problem (instance {b}): {reason}") from None
        if task.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            raise RuntimeError(f"cvxpy could not solve the centralised problem (instance {b}): status {task.status}")
        solutions.append(np.tile(shared.value, (n, 1)) if problem.is_consensus else X.value)
    return np.stack(solutions) if problem.batched else solutions[0]


def _numbers(data: dict[str, Any]) -> int:
    """How many numbers cvxpy_data's arrays hold."""
    return sum(sum(a.size for a in v) if isinstance(v, list) else v.size for v in data.values())


def _assign(parameters: dict[str, Any], data: dict[str, Any]) -> None:
    """Every Parameter its instance's array; ValueError where the instance names other arrays than instance 0."""
    if data.keys() != parameters.keys():
        raise ValueError(
            f"cvxpy_data gave arrays {sorted(data)} for one instance and {sorted(parameters)} for the first"
        )
    for name, value in data.items():
        targets, arrays = (parameters[name], value) if isinstance(value, list) else ([parameters[name]], [value])
        for parameter, array in zip(targets, arrays, strict=True):
            parameter.value = array


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
