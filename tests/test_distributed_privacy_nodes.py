"""The partitioned engine (pdmm.solve(backend="distributed"), pdmm/distributed.py, pdmm/halo.py) with network
privacy and in the node form, against one process (docs/guide/distributed.md, "What runs on the engine").

One spawn per world (2 and 4 gloo processes) runs every case: network privacy (z^0 perturbed by draws keyed by
global edge ids; the privacy measures summed over the ranks), with and without lost messages, for pdmm and qa-pdmm,
equal to one process that is not renumbered (reorder=False) in x, every history entry (the message and bit counts
exactly) and the stopping decision; the node form (form="nodes": the adjacency product over a rank's rows through
the node halo) equal to one process's node form; and the network entries of a row summed in one all-reduce.
"""

import numpy as np
import pytest
import torch
from distributed_workers import differences, report, spawn
from distributed_workers import init_group as init

import pdmm
from pdmm.solve import LARGE_GRAPH_EDGES

TOL = 1e-10
ROWS = 12  # rows recorded by the collective-counting runs (tol=0, record_every=1)


def _problems():
    """Problems whose f_i have a unique argmin (the privacy measures' reference point): averaging (quadratic) and
    ridge least squares (smooth, for qa-pdmm too)."""
    rng = np.random.default_rng(11)
    graph = pdmm.Graph.random_geometric(20, seed=6)
    H, y = rng.normal(size=(2, 20, 4, 3)), rng.normal(size=(2, 20, 4))
    return {
        "averaging": pdmm.averaging(graph, rng.normal(size=(2, 20, 2))),
        "least_squares": pdmm.least_squares(graph, H, y, ridge=0.1),
    }


PRIVATE = {
    "private": pdmm.Network(privacy=0.5, seed=3),
    "private_lossy": pdmm.Network(privacy=0.5, drop=0.2, seed=3),
}


def _runs():
    """(name, problem, keywords, one process's extra keywords): the privacy runs and the node-form runs."""
    problems = _problems()
    runs = []
    for method in ("pdmm", "qa-pdmm"):
        for kind, problem in problems.items():
            for label, network in PRIVATE.items():
                fixed = dict(method=method, network=network, record_every=1)
                runs.append((f"{method}_{kind}_{label}", problem, fixed, {}))
            stopped = dict(method=method, network=PRIVATE["private"], max_iter=300, tol=1e-4)
            runs.append((f"{method}_{kind}_private_tol", problem, stopped, {}))
            nodes = dict(method=method, form="nodes", record_every=1, x0="random")
            runs.append((f"{method}_{kind}_nodes", problem, nodes, {}))
            runs.append(
                (f"{method}_{kind}_nodes_tol", problem, dict(method=method, form="nodes", max_iter=1000, tol=1e-8), {})
            )
    averaging = problems["averaging"]
    runs.append(("pdmm_nodes_theta_half", averaging, dict(form="nodes", theta=0.5, record_every=1), {}))
    runs.append(("pdmm_nodes_round_robin", averaging, dict(form="nodes", record_every=1, x0="random"), {"cut": True}))
    return runs


def _counted(run):
    """run()'s Result and the number of torch.distributed.all_reduce calls it made."""
    original, calls = torch.distributed.all_reduce, [0]

    def counting(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    torch.distributed.all_reduce = counting
    try:
        return run(), calls[0]
    finally:
        torch.distributed.all_reduce = original


def _collectives_per_row():
    """All-reduces added by the network's history entries, for ROWS recorded rows: the counts alone, and the counts
    with the privacy measures, over the same run recording only the residual."""
    problem = _problems()["averaging"]
    found = {}
    for label, network in (("counts", pdmm.Network(drop=0.2, seed=3)), ("privacy", PRIVATE["private"])):
        keywords = dict(network=network, max_iter=ROWS, tol=0, record_every=1, backend="distributed")
        _, plain = _counted(lambda: pdmm.solve(problem, history=("residual",), **keywords))  # noqa: B023
        _, more = _counted(lambda: pdmm.solve(problem, history=None, **keywords))  # noqa: B023
        found[label] = more - plain
    return found


def _worker(rank, world, port, out, timeout):
    init(rank, world, port, timeout)
    found = {}
    for name, problem, keywords, extra in _runs():
        keywords = {"max_iter": 15, "tol": 0, **keywords}
        alone = pdmm.solve(problem, reorder=False, **keywords)
        partition = np.arange(problem.n) % world if extra.get("cut") else None
        found[name] = differences(alone, pdmm.solve(problem, backend="distributed", partition=partition, **keywords))
    found["collectives_per_row"] = _collectives_per_row()
    report(rank, found, out)


@pytest.fixture(scope="module", params=[2, 4])
def compared(request, tmp_path_factory):
    return spawn(_worker, request.param, tmp_path_factory.mktemp("distributed_privacy_nodes"))


@pytest.mark.parametrize("name", [name for name, *_ in _runs()])
def test_partitioned_run_equals_one_process(compared, name):
    """x, the objective, every history row (privacy measures included; message and bit counts exactly), the
    iterations and the status equal one process's to 1e-10."""
    found = compared[name]
    assert found["x"] <= TOL and found["fun"] <= TOL and found["history"] <= TOL, found
    assert found["same"] and found["counts"], found
    assert found["status"] == ("converged" if name.endswith("_tol") else "max_iter"), found


@pytest.mark.parametrize("name", [name for name, *_ in _runs() if "private" in name])
def test_privacy_measures_are_recorded(compared, name):
    assert {"privacy_x", "privacy_messages", "messages", "bits"} <= set(compared[name]["names"]), compared[name]


def test_network_entries_cost_one_all_reduce_per_row(compared):
    """The message and bit counts (and with privacy the measures' sums) of a row: one all-reduce, not one each."""
    assert compared["collectives_per_row"] == {"counts": ROWS, "privacy": ROWS}, compared["collectives_per_row"]


def test_distributed_form_is_chosen_by_size():
    """form=None: the node form from LARGE_GRAPH_EDGES directed edges of the whole graph, with its
    stopping test every 50 iterations, as on one process; the edge form below; form="edges" keeps it."""
    n = LARGE_GRAPH_EDGES // 2  # a ring of n nodes has 2n directed edges
    large, small = pdmm.averaging(pdmm.topology("ring", n=n), np.zeros(n)), _problems()["averaging"]
    chosen = pdmm.plan(large, backend="distributed").options
    assert chosen.node_form and chosen.stopping.check_every == 50
    assert not pdmm.plan(large, backend="distributed", form="edges").options.node_form
    assert not pdmm.plan(small, backend="distributed").options.node_form
    assert not pdmm.plan(large, backend="distributed", method="admm").options.node_form


def test_node_form_with_a_network_is_refused_on_the_engine():
    with pytest.raises(ValueError, match="form='nodes' is not available here: a simulated network"):
        pdmm.plan(_problems()["averaging"], backend="distributed", form="nodes", network=PRIVATE["private"])
