"""Inequality edge constraints A_ij x_i + A_ji x_j <= b_ij (docs/pdmm_inequality.md): every PDMM variant
against cvxpy with active and inactive inequalities, the averaged operator's monotone fixed-point
residual, the reflection itself, and bad input."""

import numpy as np
import pytest
import torch
from inequality_problems import D, mixed_constraints

import pdmm
from pdmm.methods import PDMM

N = 20
METHODS = [("pdmm", {}), ("pdmm", {"theta": 0.5}), ("qa-pdmm", {}), ("qa-pdmm", {"theta": 0.5})]


@pytest.fixture(scope="module")
def graph():
    return pdmm.topology("random_geometric", n=N, seed=1)


def make(kind, graph, constraints, seed=0):
    rng = np.random.default_rng(seed + 100)
    if kind == "averaging":
        return pdmm.averaging(graph, rng.normal(size=(N, D)), constraints)
    return pdmm.least_squares(graph, rng.normal(size=(N, 5, D)), rng.normal(size=(N, 5)), constraints=constraints)


def slack(graph, constraints, x):
    """b_ij - A_ij x_i - A_ji x_j of every inequality row (>= 0 when feasible)."""
    row = {v: k for k, v in enumerate(graph.nodes)}
    return np.concatenate(
        [
            b - A_ij @ x[row[i]] - A_ji @ x[row[j]]
            for (i, j), (A_ij, A_ji, b, *relation) in constraints.items()
            if relation
        ]
    )


@pytest.mark.parametrize("kind", ["averaging", "least_squares"])
def test_the_optimum_has_active_and_inactive_inequalities_that_matter(graph, kind):
    constraints = mixed_constraints(graph)
    x_star = pdmm.reference(make(kind, graph, constraints))
    s = slack(graph, constraints, x_star)
    assert s.min() > -1e-8
    assert (s < 1e-7).sum() >= 3 and (s > 1e-2).sum() >= 3  # some bind, some do not
    dropped = {key: (0 * v[0], 0 * v[1], 0 * v[2]) if len(v) == 4 else v for key, v in constraints.items()}
    assert np.abs(pdmm.reference(make(kind, graph, dropped)) - x_star).max() > 1e-2


@pytest.mark.parametrize("kind", ["averaging", "least_squares"])
@pytest.mark.parametrize("method, params", METHODS)
def test_every_pdmm_variant_matches_cvxpy_with_inequalities(graph, kind, method, params):
    constraints = mixed_constraints(graph)
    problem = make(kind, graph, constraints)
    result = pdmm.solve(problem, method=method, reference="cvxpy", max_iter=5000, **params)
    assert result.converged
    assert result.history["error"][-1] < 1e-6
    assert slack(graph, constraints, result.x).min() > -1e-8  # feasible on its own, not only close to cvxpy


def test_flipping_every_inequality_moves_the_optimum_and_pdmm_follows(graph):
    """A sign error in the reflection (the projection onto lambda <= 0) would solve the flipped problem."""
    constraints, flipped = mixed_constraints(graph), mixed_constraints(graph, sign=-1)
    ours, theirs = (pdmm.solve(make("averaging", graph, c), theta=0.5, max_iter=5000).x for c in (constraints, flipped))
    assert np.abs(ours - theirs).max() > 1e-2
    np.testing.assert_allclose(theirs, pdmm.reference(make("averaging", graph, flipped)), atol=1e-6)


def test_averaged_pdmm_fixed_point_residual_never_grows(graph):
    """theta = 1/2 iterates a firmly nonexpansive operator T (Douglas-Rachford on the dual), so
    ||z^{k+1} - z^k|| is non-increasing and tends to 0."""
    g, local, edges = make("averaging", graph, mixed_constraints(graph)).compile("cpu", torch.float64)
    algorithm = PDMM(g, local, edges, rho=1.0, theta=0.5)
    state = algorithm.init(torch.zeros(N, 1, D, dtype=torch.float64))
    steps = []
    for _ in range(400):
        new = algorithm.step(state)
        steps.append(float(torch.linalg.vector_norm(new["z"] - state["z"])))
        state = new
    steps = np.array(steps)
    assert np.all(np.diff(steps) <= 1e-12 * steps[0])
    assert steps[-1] < 1e-6 * steps[0]


def test_the_reflection_is_the_exchange_or_max(graph):
    """z_{i|j} <- y_{j|i} on an equality edge and max(y_{j|i}, -y_{i|j}) on an inequality edge, per row."""
    problem = make("averaging", graph, mixed_constraints(graph))
    g, _, edges = problem.compile("cpu", torch.float64)
    y = torch.randn(g.num_edges, 2, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    new = edges.reflect(y, g.exchange(y))
    below = problem.inequality
    torch.testing.assert_close(new[~below], y[g.rev][~below], rtol=0, atol=0)
    torch.testing.assert_close(new[below], torch.maximum(y[g.rev], -y)[below], rtol=0, atol=0)
    # its projection (y + new) / 2 is symmetric over the two directions and >= 0 on inequalities
    projection = (y + new) / 2
    torch.testing.assert_close(projection, projection[g.rev], rtol=0, atol=1e-15)
    assert bool((projection[below] >= 0).all())


def test_averaged_pdmm_with_inequalities_survives_lost_messages(graph):
    problem = make("averaging", graph, mixed_constraints(graph))
    result = pdmm.solve(problem, theta=0.5, reference="cvxpy", max_iter=6000, network=pdmm.Network(drop=0.2))
    assert result.history["error"][-1] < 1e-6


def test_equalities_written_with_a_relation_are_bit_for_bit_the_three_tuple(graph):
    plain = mixed_constraints(graph, relation="==")
    three = {key: value[:3] for key, value in plain.items()}
    a, b = (pdmm.solve(make("averaging", graph, c), max_iter=50, tol=0) for c in (plain, three))
    assert make("averaging", graph, plain).inequality is None
    assert np.array_equal(a.x, b.x)


def test_admm_refuses_inequalities(graph):
    with pytest.raises(ValueError, match="admm does not take inequality constraints"):
        pdmm.solve(make("averaging", graph, mixed_constraints(graph)), method="admm")


@pytest.mark.parametrize(
    "entry, culprit",
    [
        ((np.eye(D), -np.eye(D), np.zeros(D), ">="), "write >= as"),
        ((np.eye(D), -np.eye(D), np.zeros(D), "<", 1), "5-tuple"),
        ((np.eye(D), -np.eye(D)), "2-tuple"),
        ((np.eye(D), -np.eye(D), np.zeros(D), 0.0), "relation 0.0"),
    ],
)
def test_a_bad_constraint_entry_is_named(graph, entry, culprit):
    constraints = {key: (np.eye(D), -np.eye(D), np.zeros(D)) for key in graph.edges}
    constraints[next(iter(graph.edges))] = entry
    with pytest.raises(ValueError, match=culprit):
        make("averaging", graph, constraints)
