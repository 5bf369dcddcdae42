"""Edge-matrix constraints A_ij x_i + A_ji x_j = b_ij (or <= b_ij) on the partitioned engine (pdmm/distributed.py,
pdmm/constraints.py; docs/guide/distributed.md, "What runs on the engine"): pdmm and qa-pdmm on equality edge matrices
and on mixed equality / inequality problems, one and three instances, over the ideal network and a lossy one, on 2
and 4 gloo processes, against one process (pdmm.solve, reorder=False: the network's draws keyed by the graph's own
numbering) to 1e-10 in x, the objective and every history row, with the same iterations, status and message; runs to
a real tol stop where one process stops, by the certificate summed over the ranks (status "converged")."""

import numpy as np
import pytest
from distributed_workers import differences, init_group, report, spawn
from inequality_problems import D, mixed_constraints

import pdmm

N = 16
TOL = 1e-10
LOSSY = pdmm.Network(drop=0.2, seed=3)


def _equalities(graph, seed=2):
    """One equality row per edge, random A_ij and A_ji, b_ij = A_ij p_i + A_ji p_j at a random point p: feasible."""
    rng = np.random.default_rng(seed)
    p = {v: rng.normal(size=D) for v in graph}
    constraints = {}
    for i, j in graph.edges:
        A_ij, A_ji = rng.normal(size=(1, D)), rng.normal(size=(1, D))
        constraints[i, j] = (A_ij, A_ji, A_ij @ p[i] + A_ji @ p[j])
    return constraints


def _problems():
    """{(constraints, batch): problem}: equality edge matrices on least squares, mixed equalities and inequalities
    (three edges in four, mixed_constraints) on averaging, each with one and with three instances."""
    graph = pdmm.topology("random_geometric", n=N, seed=1)
    rng = np.random.default_rng(4)
    equal, mixed = _equalities(graph), mixed_constraints(graph)
    problems = {}
    for batch in (1, 3):
        shape = (N,) if batch == 1 else (batch, N)
        H, y = rng.normal(size=(*shape, 5, D)), rng.normal(size=(*shape, 5))
        problems["equal", batch] = pdmm.least_squares(graph, H, y, constraints=equal)
        problems["mixed", batch] = pdmm.averaging(graph, rng.normal(size=(*shape, D)), constraints=mixed)
    return problems


def _runs():
    """(name, problem key, solve keywords): every method x constraints x batch x network for 15 iterations, every
    row recorded; a round-robin partition (nearly every edge cut); the privacy measures (sums over every rank's
    edges); real tols, the stopping test's certificate on every rank's edges."""
    runs = []
    for method in ("pdmm", "qa-pdmm"):
        for kind in ("equal", "mixed"):
            for batch in (1, 3):
                for label, network in (("ideal", None), ("lossy", LOSSY)):
                    keywords = dict(method=method, max_iter=15, tol=0, record_every=1, network=network)
                    runs.append((f"{method}_{kind}_B{batch}_{label}", (kind, batch), keywords))
        # the certificate's norms summed over the ranks; with inequalities, its complementary slackness too
        runs.append((f"{method}_equal_tol", ("equal", 1), dict(method=method, max_iter=3000, tol=1e-6, rho=3.0)))
        runs.append((f"{method}_mixed_tol", ("mixed", 3), dict(method=method, max_iter=3000, tol=1e-8)))
    runs.append(("pdmm_mixed_round_robin", ("mixed", 3), dict(max_iter=15, tol=0, partition="round_robin")))
    privacy = pdmm.Network(privacy=0.5, drop=0.2, seed=3)
    runs.append(("pdmm_mixed_privacy", ("mixed", 1), dict(max_iter=15, tol=0, network=privacy)))
    return runs


def _worker(rank, world, port, out, timeout):
    init_group(rank, world, port, timeout)
    problems, found = _problems(), {}
    for name, key, keywords in _runs():
        alone = pdmm.solve(problems[key], reorder=False, **{k: v for k, v in keywords.items() if k != "partition"})
        if keywords.get("partition") == "round_robin":
            keywords = {**keywords, "partition": np.arange(N) % world}
        found[name] = differences(alone, pdmm.solve(problems[key], backend="distributed", **keywords))
        found[name]["iterations"] = alone.iterations
    report(rank, found, out)


@pytest.fixture(scope="module", params=[2, 4])
def compared(request, tmp_path_factory):
    return spawn(_worker, request.param, tmp_path_factory.mktemp("distributed_edges"), timeout=120.0)


@pytest.mark.parametrize("name", [name for name, _, _ in _runs()])
def test_edge_matrices_match_one_process(compared, name):
    """x, the objective and every history row to 1e-10 (sums over the ranks are taken in another order); the
    iterations, status, rows and message exactly; the lossy network's message and bit counts exactly."""
    found = compared[name]
    assert found["x"] <= TOL and found["fun"] <= TOL and found["history"] <= TOL, found
    assert found["same"] and found["counts"], found


@pytest.mark.parametrize("name", [name for name, _, _ in _runs() if name.endswith("_tol")])
def test_edge_matrices_stop_where_one_process_stops(compared, name):
    """The certificate and the feasibility test, summed over the ranks, stop the run at one process's iteration."""
    found = compared[name]
    assert found["status"] == "converged" and 0 < found["iterations"] < 3000 and found["same"], found


def test_the_mixed_problems_have_equality_and_inequality_edges():
    """Without both kinds of edge the runs above would not test the inequality mask's slicing by the ranks' edge
    ids."""
    problems = _problems()
    assert problems["equal", 1].inequality is None and not problems["equal", 1].is_consensus
    below = problems["mixed", 3].inequality
    assert below is not None and 0 < int(below.sum()) < len(below)
