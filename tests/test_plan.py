"""pdmm.plan and the methods' Capabilities (docs/guide/solve.md, "Plan and run").

Each method's Capabilities record is checked against what the method really does (its constructor, pdmm.solve's
refusals, the messages the simulated network's channel counts, where its limit lies over a lossy network); plan
refuses each bad input with the message pdmm.solve gives; and solve(problem, **kw) is plan(problem, **kw).run(),
bit for bit.
"""

import inspect

import numpy as np
import pytest
import torch
from same_result import assert_same_result

import pdmm
import pdmm.distributed
from pdmm.protocol import Capabilities

N = 8
A = np.arange(N, dtype=float) ** 1.5
MEAN = np.full((N, 1), A.mean())


def ring(constraints="consensus"):
    """The averaging problem on a ring of N nodes: f_i(x) = 1/2 (x - a_i)^2, solved by x_i = mean(a)."""
    return pdmm.averaging(pdmm.topology("ring", n=N), A, constraints=constraints)


def edge_matrices(inequality=False):
    """The same problem with its consensus written as edge matrices x_i - x_j = 0 (one edge x_0 - x_1 <= 0)."""
    G = pdmm.topology("ring", n=N)
    one, zero = np.eye(1), np.zeros(1)
    constraints = {(i, j): (one, -one, zero) for i, j in G.edges}
    if inequality:
        constraints[(0, 1)] = (one, -one, zero, "<=")
    return pdmm.averaging(G, A, constraints=constraints)


def refused(method, **kw):
    """Whether pdmm.solve refuses the run (a ValueError), after checking that it runs otherwise."""
    try:
        pdmm.solve(ring() if "problem" not in kw else kw.pop("problem"), method=method, max_iter=3, tol=0, **kw)
    except ValueError:
        return True
    return False


METHODS = list(pdmm.METHODS)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_declares_frozen_capabilities(method):
    capabilities = pdmm.METHODS[method].capabilities
    assert isinstance(capabilities, Capabilities)
    with pytest.raises(AttributeError):
        capabilities.rho = not capabilities.rho  # type: ignore[misc]


@pytest.mark.parametrize("method", METHODS)
def test_parameters_are_the_constructors(method):
    signature = inspect.signature(pdmm.METHODS[method]).parameters.values()
    own = [p.name for p in signature if p.default is not p.empty and p.kind is not p.KEYWORD_ONLY]
    capabilities = pdmm.METHODS[method].capabilities
    assert list(capabilities.parameters) == own
    assert capabilities.step == ("alpha" in own) and capabilities.theta == ("theta" in own)
    assert capabilities.eta == ("eta" in own)


@pytest.mark.parametrize("method", METHODS)
def test_rho_capability_is_what_the_method_takes(method):
    capabilities, problem = pdmm.METHODS[method].capabilities, ring()
    if capabilities.rho:  # rho=None means 1.0, a given rho is what the run uses; the class needs a number
        assert pdmm.solve(problem, method=method, max_iter=2, tol=0).params["rho"] == 1.0
        assert pdmm.solve(problem, method=method, rho=3.0, max_iter=2, tol=0).params["rho"] == 3.0
        graph, local, edges = problem.compile("cpu", torch.float64)
        with pytest.raises((TypeError, ValueError)):
            pdmm.METHODS[method](graph, local, edges, None)
    else:
        with pytest.raises(ValueError, match="no penalty parameter"):
            pdmm.solve(problem, method=method, rho=1.0)


@pytest.mark.parametrize("method", METHODS)
def test_x0_capability_is_whether_the_start_moves_the_run(method):
    x0, capabilities = np.linspace(-5, 5, N).reshape(N, 1), pdmm.METHODS[method].capabilities
    step = {"alpha": 0.5} if capabilities.step else {}  # nids' alpha="auto" = 1/L lands on a from any x0 here
    if capabilities.x0:
        zero = pdmm.solve(ring(), method=method, max_iter=2, tol=0, **step).x
        moved = pdmm.solve(ring(), method=method, max_iter=2, tol=0, x0=x0, **step).x
        assert not np.allclose(zero, moved)
    else:
        assert refused(method, x0=x0)


NETWORKS = {
    "network": pdmm.Network(drop=0.2, seed=1),
    "privacy": pdmm.Network(privacy=1.0, seed=1),
    "wake_one": pdmm.Network(wake="one", seed=1),
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("effect", list(NETWORKS))
def test_network_capabilities_are_what_solve_runs(method, effect):
    capabilities = pdmm.METHODS[method].capabilities
    takes = capabilities.network and getattr(capabilities, effect)
    assert refused(method, network=NETWORKS[effect]) == (not takes)


@pytest.mark.parametrize("method", [m for m in METHODS if pdmm.METHODS[m].capabilities.network])
def test_vectors_sent_and_silent_rounds_are_what_the_channel_counts(method):
    capabilities, rounds = pdmm.METHODS[method].capabilities, 6
    problem = ring()
    result = pdmm.solve(
        problem, method=method, max_iter=rounds, tol=0, network=pdmm.Network(seed=0), history=("messages",),
        record_every=1,
    )  # fmt: skip
    k = np.arange(1, rounds + 1)
    expected = problem.compiled.num_edges * capabilities.vectors_sent * np.maximum(k - capabilities.silent_rounds, 0)
    np.testing.assert_array_equal(result.history["messages"], expected)


@pytest.mark.parametrize("method", [m for m in METHODS if pdmm.METHODS[m].capabilities.network])
def test_biased_under_loss_is_where_a_lossy_network_keeps_the_method_off_the_solution(method):
    result = pdmm.solve(
        ring(), method=method, max_iter=800, tol=0, network=pdmm.Network(drop=0.2, seed=3), reference=MEAN,
        history=("error",),
    )  # fmt: skip
    error = result.history["error"][-1]
    assert (error > 1e-3) == pdmm.METHODS[method].capabilities.biased_under_loss, error


@pytest.mark.parametrize("method", METHODS)
def test_problem_kinds_are_what_the_method_solves(method):
    capabilities = pdmm.METHODS[method].capabilities
    assert refused(method, problem=edge_matrices()) == (not capabilities.edge_matrices)
    assert refused(method, problem=edge_matrices(inequality=True)) == (not capabilities.inequalities)
    regression = pdmm.least_squares(pdmm.topology("ring", n=N), np.ones((N, 2, 1)), np.ones((N, 2)))
    assert refused(method, problem=regression) == capabilities.averaging_only


@pytest.mark.parametrize("method", METHODS)
def test_multipliers_node_form_compile_and_distributed_capabilities(method):
    cls, problem = pdmm.METHODS[method], ring()
    capabilities = cls.capabilities
    assert callable(getattr(cls, "multipliers", None)) == capabilities.multipliers
    assert refused(method, form="nodes") == (not capabilities.node_form)
    assert refused(method, compile=True) == (not capabilities.compile)
    try:  # the distributed engine's refusals: plan's for the methods on a mixing matrix, the engine's for the rest
        pdmm.plan(problem, method=method, backend="distributed")
        pdmm.distributed.check_supported(method, "cpu", False)
        runs = True
    except ValueError:
        runs = False
    assert runs == capabilities.distributed


def test_tune_tunes_what_the_capabilities_say():
    for name, cls in pdmm.METHODS.items():
        expected = "rho" if cls.capabilities.rho else "alpha" if cls.capabilities.step else None
        assert pdmm.tuning.TUNED.get(name) == expected


BAD = {
    "unknown method": dict(method="newton"),
    "negative rho": dict(rho=-1.0),
    "nan rho": dict(rho=float("nan")),
    "rho beyond float64": dict(rho=1e300),
    "rho for dgd": dict(method="dgd", rho=1.0),
    "max_iter": dict(max_iter=0),
    "tol": dict(tol=1.5),
    "dtype": dict(dtype=torch.int32),
    "seed": dict(seed=2**64),
    "device": dict(device="meta"),
    "history": dict(history=["loss"]),
    "target without reference": dict(target=1e-3),
    "theta": dict(theta=2.0),
    "eta": dict(method="qa-pdmm", eta="big"),
    "alpha": dict(method="extra", alpha=-1.0),
    "gossip x0": dict(method="gossip", x0=np.zeros((N, 1))),
    "gossip network": dict(method="gossip", network=pdmm.Network(drop=0.1)),
    "chebyshev compile": dict(method="chebyshev", compile=True),
    "admm privacy": dict(method="admm", network=pdmm.Network(privacy=1.0)),
    "dgd wake one": dict(method="dgd", network=pdmm.Network(wake="one")),
    "node form admm": dict(method="admm", form="nodes"),
    "on_divergence": dict(on_divergence="ignore"),
    "unknown parameter": dict(step=0.1),
    "callback": dict(callback=3),
    "network type": dict(network="lossy"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_plan_refuses_each_bad_input_with_the_message_solve_gives(name):
    with pytest.raises((ValueError, TypeError)) as planned:
        pdmm.plan(ring(), **BAD[name])
    with pytest.raises((ValueError, TypeError)) as solved:
        pdmm.solve(ring(), **BAD[name])
    assert type(planned.value) is type(solved.value)
    assert str(planned.value) == str(solved.value)


RUNS = {
    "pdmm": dict(method="pdmm", rho=2.0, reference=MEAN),
    "averaged qa-pdmm": dict(method="qa-pdmm", theta=0.5, x0="random", seed=4),
    "admm lossy": dict(method="admm", network=pdmm.Network(drop=0.2, seed=1), max_iter=200),
    "dgd lossy": dict(method="dgd", network=pdmm.Network(drop=0.1, bits=8, seed=2), max_iter=100, tol=0),
    "chebyshev": dict(method="chebyshev"),
    "nids renumbered": dict(method="nids", reorder=True, history=("residual", "objective")),
    "pdmm node form": dict(method="pdmm", form="nodes", record_every=3),
    "inequalities": dict(method="pdmm", problem=edge_matrices(inequality=True), max_iter=300),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_solve_is_plan_then_run_bit_for_bit(name):
    kw = dict(RUNS[name])
    problem = kw.pop("problem", ring())
    solved = pdmm.solve(problem, **kw)
    planned = pdmm.plan(problem, **kw)
    assert planned.capabilities is pdmm.METHODS[kw["method"]].capabilities
    for ran in (planned.run(), planned.run()):  # the second run builds the method afresh and repeats the first
        assert_same_result(ran, solved)


def test_plan_resolves_the_defaults_solve_runs_with():
    options = pdmm.plan(ring(), method="dgd", dtype=torch.float32, target=1e-4, reference=MEAN).options
    stopping, recording = options.stopping, options.recording
    assert (options.rho, stopping.tol, stopping.check_every, recording.record_every) == (None, 1e-5, 1, 1)
    assert recording.history == ("residual", "error", "messages", "bits")
    assert pdmm.plan(ring()).options.rho == 1.0


@pytest.mark.parametrize("first", ["original", "referenced"])
def test_with_reference_leaves_the_plan_it_was_called_on_unchanged(first):
    """Plan.with_reference returns a new plan and changes nothing in the old one: its options and built method stay,
    and each plan, run in either order, gives what pdmm.solve gives with its own settings, bit for bit."""
    settings = dict(method="pdmm", max_iter=30, tol=0, network=pdmm.Network(drop=0.3, seed=2), reorder=True)
    planned = pdmm.plan(ring(), history=("residual",), **settings)
    options, built = planned.options, planned.ready[0]
    later = planned.with_reference(MEAN)
    assert planned.options is options and len(planned.ready) == 1 and planned.ready[0] is built
    assert planned.options.recording.reference is None and later.options.recording.reference is MEAN
    expected = {
        "original": pdmm.solve(ring(), history=("residual",), **settings),
        "referenced": pdmm.solve(ring(), reference=MEAN, history=("residual", "error"), **settings),
    }
    plans = {"original": planned, "referenced": later}
    for name in (first, *(other for other in plans if other != first)):
        assert_same_result(plans[name].run(), expected[name])
