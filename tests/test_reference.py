"""pdmm.reference: the closed form (consensus quadratics) against numpy's least squares on the stacked data, and
the vectorised cvxpy problem against a plain one built node by node and edge by edge from the equations of
docs/theory/problem.md (one cvxpy term per node and per constraint), for every local function, consensus and
edge constraints (equalities and inequalities), batched and not."""

import importlib
import warnings

import cvxpy as cp
import numpy as np
import pytest
import torch

import pdmm
from pdmm.reference import closed_form, newton

pdmm_reference = importlib.import_module("pdmm.reference")  # the module: pdmm.reference is the function

N, D = 24, 3
G = pdmm.topology("random_geometric", n=N, seed=1)
TIGHT = {"tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11}


def per_node_reference(problem, data, b=0):
    """x* of instance b from one cvxpy term per node and one constraint per edge, written from the problem's
    definition: data = (kind, arrays) as the problem was built from, the edge constraints from `constraints`."""
    kind, arrays, constraints = data
    index = {v: k for k, v in enumerate(G.nodes)}
    shared = constraints == "consensus"
    if shared:
        x = cp.Variable(D)
        xs = [x] * N
    else:
        X = cp.Variable((N, D))
        xs = [X[i] for i in range(N)]
    terms = []
    for i in range(N):
        if kind == "averaging":
            terms.append(0.5 * cp.sum_squares(xs[i] - arrays["a"][b, i]))
        elif kind in ("least_squares", "lasso"):
            H, y = arrays["H"][b, i], arrays["y"][b, i]
            terms.append(0.5 * cp.sum_squares(H @ xs[i] - y) + 0.5 * arrays.get("ridge", 0.0) * cp.sum_squares(xs[i]))
            if kind == "lasso":
                terms.append(arrays["lam"] / N * cp.norm1(xs[i]))  # lam / n per node: weight lam in all
        elif kind == "quadratic":
            P, q = arrays["P"][b, i], arrays["q"][b, i]
            terms.append(0.5 * cp.quad_form(xs[i], P, assume_PSD=True) - q @ xs[i])
        else:  # logistic
            Xi, yi = arrays["X"][b, i], arrays["y"][b, i]
            terms.append(
                cp.sum(cp.logistic(-cp.multiply(yi, Xi @ xs[i]))) + 0.5 * arrays["reg"] * cp.sum_squares(xs[i])
            )
    rows = []
    if not shared:
        for (u, v), (A_uv, A_vu, b_uv, *relation) in constraints.items():
            left = A_uv @ xs[index[u]] + A_vu @ xs[index[v]]
            rows.append(left <= b_uv if relation == ["<="] else left == b_uv)
    with warnings.catch_warnings():  # "Solution may be inaccurate": logistic regression's cones, see AGREE
        warnings.simplefilter("ignore", UserWarning)
        cp.Problem(cp.Minimize(sum(terms)), rows).solve(solver=cp.CLARABEL, **TIGHT)
    return np.tile(x.value, (N, 1)) if shared else X.value


def edge_constraints(seed=0):
    """One random row per edge, every fourth an inequality with a slack in [0, 2], feasible at a random point."""
    rng = np.random.default_rng(seed)
    p = {v: rng.normal(size=D) for v in G}
    out = {}
    for k, (i, j) in enumerate(G.edges):
        A_ij, A_ji = rng.normal(size=(1, D)), rng.normal(size=(1, D))
        b = A_ij @ p[i] + A_ji @ p[j]
        out[(i, j)] = (A_ij, A_ji, b + rng.uniform(0, 2), "<=") if k % 4 == 0 else (A_ij, A_ji, b)
    return out


def build(kind, constraints="consensus", batch=1, seed=0):
    """(problem, data for per_node_reference)."""
    rng = np.random.default_rng(seed)
    H, y = rng.normal(size=(batch, N, 5, D)), rng.normal(size=(batch, N, 5))
    if kind == "averaging":
        arrays = {"a": rng.normal(size=(batch, N, D))}
        problem = pdmm.averaging(G, arrays["a"], constraints)
    elif kind == "least_squares":
        arrays = {"H": H, "y": y, "ridge": 0.3}
        problem = pdmm.least_squares(G, H, y, ridge=0.3, constraints=constraints)
    elif kind == "lasso":
        arrays = {"H": H, "y": y, "lam": 2.0}
        problem = pdmm.lasso(G, H, y, lam=2.0, constraints=constraints)
    elif kind == "quadratic":
        M = rng.normal(size=(batch, N, D, D))
        arrays = {"P": M @ np.swapaxes(M, -1, -2) + 0.1 * np.eye(D), "q": rng.normal(size=(batch, N, D))}
        problem = pdmm.quadratic(G, arrays["P"], arrays["q"], constraints)
    else:
        arrays = {"X": H, "y": np.sign(y), "reg": 0.2}
        problem = pdmm.logistic(G, H, np.sign(y), reg=0.2, constraints=constraints)
    if batch == 1:  # an unbatched problem, built from the first instance's data
        problem = {
            "averaging": lambda: pdmm.averaging(G, arrays["a"][0], constraints),
            "least_squares": lambda: pdmm.least_squares(G, H[0], y[0], ridge=0.3, constraints=constraints),
            "lasso": lambda: pdmm.lasso(G, H[0], y[0], lam=2.0, constraints=constraints),
            "quadratic": lambda: pdmm.quadratic(G, arrays["P"][0], arrays["q"][0], constraints),
            "logistic": lambda: pdmm.logistic(G, H[0], np.sign(y[0]), reg=0.2, constraints=constraints),
        }[kind]()
    return problem, (kind, arrays, constraints)


KINDS = ["averaging", "least_squares", "lasso", "quadratic", "logistic"]
# CLARABEL solves logistic regression's exponential cones to about 1e-7 in x here (the gradient of the objective at
# the per-node problem's answer is up to 8e-7), everything else to 1e-8; pdmm.reference solves a consensus logistic
# regression by Newton's method (test_a_consensus_logistic_regression_is_solved_by_newton_to_a_zero_gradient)
AGREE = {"logistic": 1e-7}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("edges", ["consensus", "edge_matrices"])
def test_the_reference_matches_a_plain_per_node_cvxpy_problem(kind, edges):
    constraints = "consensus" if edges == "consensus" else edge_constraints()
    problem, data = build(kind, constraints)
    agree = AGREE.get(kind, 1e-8)
    np.testing.assert_allclose(pdmm.reference(problem), per_node_reference(problem, data), rtol=0, atol=agree)


@pytest.mark.parametrize("kind", ["least_squares", "lasso", "logistic"])
def test_a_batched_reference_solves_each_instance(kind):
    problem, data = build(kind, batch=3, seed=4)
    x_star = pdmm.reference(problem)
    assert x_star.shape == (3, N, D)
    for b in range(3):
        expected = per_node_reference(problem, data, b)
        np.testing.assert_allclose(x_star[b], expected, rtol=0, atol=AGREE.get(kind, 1e-8))


def _problems_solved(monkeypatch):
    """A set that holds every cvxpy.Problem solved (that cvxpy compiles a DPP problem with Parameters once and at
    later solves only maps the new values is cvxpy's own; benchmarks/bench_reference.py --batched times it)."""
    solved = set()
    original = cp.Problem.solve

    def recording(self, *args, **kwargs):
        solved.add(id(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cp.Problem, "solve", recording)
    return solved


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("edges", ["consensus", "edge_matrices"])
def test_batched_instances_share_one_compiled_cvxpy_problem(kind, edges, monkeypatch):
    """B instances: one cvxpy problem with Parameters (cvxpy, named, skips the closed form and Newton), each
    instance the answer of its own per-node problem; past PARAMETER_NUMBERS one problem per instance, the same
    answers."""
    constraints = "consensus" if edges == "consensus" else edge_constraints(seed=2)
    problem, data = build(kind, constraints, batch=3, seed=6)
    solved = _problems_solved(monkeypatch)
    shared = pdmm.reference(problem, solver="CLARABEL", **TIGHT)
    assert len(solved) == 1
    solved.clear()
    monkeypatch.setattr(pdmm_reference, "PARAMETER_NUMBERS", 0)
    separate = pdmm.reference(problem, solver="CLARABEL", **TIGHT)
    assert len(solved) == 3
    for b in range(3):
        expected = per_node_reference(problem, data, b)
        np.testing.assert_allclose(shared[b], expected, rtol=0, atol=AGREE.get(kind, 1e-8))
        np.testing.assert_allclose(separate[b], expected, rtol=0, atol=AGREE.get(kind, 1e-8))


@pytest.mark.parametrize("inherited_data", [True, False])
def test_a_local_function_that_overrides_cvxpy_value_is_compiled_per_instance(inherited_data, monkeypatch):
    """A subclass whose cvxpy_value adds a term (here 0.05 ||x_i||_1 per node: a lasso with lam 2 + 0.05 N) gets
    that objective for every instance, whether it inherits cvxpy_data or has none."""
    problem, (_, arrays, _) = build("lasso", batch=2, seed=7)
    heavier = pdmm.lasso(G, arrays["H"], arrays["y"], lam=2.0 + 0.05 * N)

    class AddsATerm(type(problem.local)):
        def cvxpy_value(self, X, b):
            return super().cvxpy_value(X, b) + 0.05 * cp.sum(cp.abs(X))

    class AddsATermWithoutData(AddsATerm):
        def cvxpy_data(self, b):
            return None

        def cvxpy_value(self, X, b):
            return self.cvxpy_expression(X, super().cvxpy_data(b)) + 0.05 * cp.sum(cp.abs(X))

    problem.local.__class__ = AddsATerm if inherited_data else AddsATermWithoutData
    solved = _problems_solved(monkeypatch)
    x_star = pdmm.reference(problem)
    assert len(solved) == 2
    np.testing.assert_allclose(x_star, pdmm.reference(heavier), rtol=0, atol=1e-8)
    assert np.abs(x_star - pdmm.reference(build("lasso", batch=2, seed=7)[0])).max() > 1e-3  # the term matters


def test_every_instance_must_name_the_same_arrays(monkeypatch):
    problem, _ = build("lasso", batch=2, seed=8)
    first = problem.local.cvxpy_data(0)
    monkeypatch.setattr(type(problem.local), "cvxpy_data", lambda self, b: first if b == 0 else {"y": first["y"]})
    with pytest.raises(ValueError, match=r"cvxpy_data gave arrays \['y'\] for one instance"):
        pdmm.reference(problem)


def test_consensus_quadratics_are_solved_in_closed_form():
    problem, (_, arrays, _) = build("least_squares", batch=2, seed=5)
    x = closed_form(problem)
    assert x is not None and x.shape == (2, N, D)
    for b in range(2):  # min sum_i 1/2 ||H_i x - y_i||^2 + ridge/2 ||x||^2, as one stacked least squares
        stacked = np.concatenate([arrays["H"][b].reshape(-1, D), np.sqrt(0.3 * N) * np.eye(D)])
        target = np.concatenate([arrays["y"][b].reshape(-1), np.zeros(D)])
        expected = np.linalg.lstsq(stacked, target, rcond=None)[0]
        np.testing.assert_allclose(x[b], np.tile(expected, (N, 1)), rtol=0, atol=1e-12)
    averaging, (_, data, _) = build("averaging")
    np.testing.assert_allclose(pdmm.reference(averaging), np.tile(data["a"][0].mean(0), (N, 1)), rtol=0, atol=1e-14)


def test_the_closed_form_is_only_taken_where_it_holds():
    assert closed_form(build("lasso")[0]) is None  # not quadratic
    assert closed_form(build("logistic")[0]) is None
    assert closed_form(build("least_squares", edge_constraints())[0]) is None  # not consensus
    rng = np.random.default_rng(2)
    H = rng.normal(size=(N, 5, D))
    H[..., 0] = 0  # x's first entry is seen by no node: sum_i H_i^T H_i is singular, the minimiser not unique
    singular = pdmm.least_squares(G, H, rng.normal(size=(N, 5)))
    assert closed_form(singular) is None
    x_star = pdmm.reference(singular)  # cvxpy decides, as before
    assert np.all(np.isfinite(x_star))


def test_naming_a_solver_skips_the_closed_form():
    problem, data = build("least_squares", seed=6)
    by_cvxpy = pdmm.reference(problem, solver="CLARABEL")
    np.testing.assert_allclose(by_cvxpy, pdmm.reference(problem), rtol=0, atol=1e-8)
    np.testing.assert_allclose(by_cvxpy, per_node_reference(problem, data), rtol=0, atol=1e-8)


def test_a_consensus_logistic_regression_is_solved_by_newton_to_a_zero_gradient():
    """cvxpy alone leaves a gradient of sum_i f_i of about 3e-3 here; Newton's method gets to rounding size."""
    n = 400
    graph = pdmm.topology("random_geometric", n=n, seed=0)
    rng = np.random.default_rng(0)
    H, y = rng.normal(size=(2, n, 8, D)), np.sign(rng.normal(size=(2, n, 8)))
    problem = pdmm.logistic(graph, H, y, reg=0.1)
    x_star = pdmm.reference(problem)
    np.testing.assert_array_equal(x_star, newton(problem))
    gradient = problem.local.gradient(torch.tensor(x_star).permute(1, 0, 2)).sum(0)  # (B, d): sum_i grad f_i(x*)
    assert x_star.shape == (2, n, D) and float(gradient.abs().max()) < 1e-10
    by_cvxpy = pdmm.reference(problem, solver="CLARABEL")
    np.testing.assert_allclose(by_cvxpy, x_star, rtol=0, atol=1e-4)  # the same optimum, less precisely
    from_cvxpy = newton(problem, by_cvxpy)  # the polish of a cvxpy answer where Newton from 0 would not do
    np.testing.assert_allclose(from_cvxpy, x_star, rtol=0, atol=1e-12)


def test_newton_is_only_taken_where_there_is_one_minimiser():
    rng = np.random.default_rng(1)
    H, y = rng.normal(size=(N, 5, D)), np.sign(rng.normal(size=(N, 5)))
    assert newton(pdmm.logistic(G, H, y, reg=0.0)) is None  # not strongly convex: separable data has no minimiser
    assert newton(build("lasso")[0]) is None and newton(build("least_squares")[0]) is None
    assert newton(build("logistic", edge_constraints())[0]) is None  # not consensus
