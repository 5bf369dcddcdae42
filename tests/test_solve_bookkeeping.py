"""pdmm.solve's bookkeeping: history= selects what is recorded, record_every= thins the rows (by
default to the iterations of the stopping test), check_every= spaces the stopping and divergence
tests, the residual is computed only where a row or a test needs it, and nothing is read back from
the device between tests; checked against runs with other settings and a plain loop over PDMM.step."""

import importlib

import numpy as np
import pytest
import torch

import pdmm
from pdmm.network import Network

loop_module = importlib.import_module("pdmm.loop")  # the iteration loop of both engines, where the test reads
G = pdmm.topology("random_geometric", n=30, seed=1)


def averaging(batch=None, seed=0):
    rng = np.random.default_rng(seed)
    return pdmm.averaging(G, rng.normal(size=(30, 3) if batch is None else (batch, 30, 3)))


def loop_stop(problem, tol, every, max_iter=1000, rho=1.0):
    """(iteration, x) where solve(check_every=every) should stop on an averaging problem, from PDMM.step and numpy:
    the first multiple of `every` (or max_iter) at which the residual RMS over the edges is <= tol * max(1, RMS of
    x) and the certificate holds at the average xbar (docs/guide/solve.md, "The stopping test"): with
    grad f_i(x) = x - a_i, ||n xbar - sum_i a_i|| <= tol * sum_i (||xbar|| + ||a_i||)."""
    graph, local, edges = problem.compile("cpu", torch.float64)
    algorithm = pdmm.METHODS["pdmm"](graph, local, edges, rho)
    state = algorithm.init(torch.zeros(problem.n, 1, problem.dim, dtype=torch.float64))
    a = local.q[:, 0].numpy()
    index = {v: k for k, v in enumerate(G.nodes)}
    i, j = np.array([(index[u], index[v]) for u, v in G.edges]).T
    rms = lambda v: np.sqrt((v**2).sum(-1).mean())  # noqa: E731
    for k in range(1, max_iter + 1):
        state = algorithm.step(state)
        x = state["x"][:, 0].numpy()
        xbar = x.mean(0)
        certified = np.linalg.norm(len(x) * xbar - a.sum(0)) <= tol * (
            len(x) * np.linalg.norm(xbar) + np.linalg.norm(a, axis=1).sum()
        )
        if (k % every == 0 or k == max_iter) and rms(x[i] - x[j]) <= tol * max(1.0, rms(x)) and certified:
            return k, x
    return max_iter, x


@pytest.mark.parametrize("every", [1, 7, 10])
def test_the_stopping_test_runs_every_check_every_iterations(every):
    problem = averaging()
    iteration, x = loop_stop(problem, 1e-10, every)
    result = pdmm.solve(problem, check_every=every)
    assert result.converged and result.iterations == iteration and result.iterations % every == 0
    np.testing.assert_array_equal(result.x, x)  # the state of the iteration it stopped at
    np.testing.assert_array_equal(result.history["iteration"], np.arange(every, iteration + 1, every))


def test_check_every_moves_the_stop_by_less_than_the_interval_and_keeps_x():
    problem = averaging(batch=2)
    every_one = pdmm.solve(problem, check_every=1, tol=1e-12)  # x changes by up to ~10 tol per iteration
    for every in (3, 10, 25):
        spaced = pdmm.solve(problem, check_every=every, tol=1e-12)
        assert spaced.converged and 0 <= spaced.iterations - every_one.iterations < every
        np.testing.assert_allclose(spaced.x, every_one.x, rtol=0, atol=1e-10)
    assert pdmm.solve(problem).iterations == pdmm.solve(problem, check_every=10).iterations  # the default


@pytest.mark.parametrize("network", [None, Network(drop=0.3, bits=12, dither=True, seed=3)])
def test_record_every_keeps_exactly_every_kth_row(network):
    problem = averaging(batch=2)
    x_star = pdmm.reference(problem)
    options = dict(max_iter=60, tol=0, reference=x_star, network=network)
    full = pdmm.solve(problem, record_every=1, **options)
    thin = pdmm.solve(problem, record_every=7, **options)
    assert list(thin.history["iteration"]) == [7, 14, 21, 28, 35, 42, 49, 56, 60]  # and the last iteration
    assert set(thin.history) == set(full.history) == {"iteration", "time", "residual", "error", "messages", "bits"}
    np.testing.assert_array_equal(full.history["iteration"], np.arange(1, 61))
    for key, values in full.history.items():
        if key != "time":  # the loop's clock, not a number of the run
            np.testing.assert_array_equal(thin.history[key], values[thin.history["iteration"] - 1], err_msg=key)
    np.testing.assert_array_equal(thin.x, full.x)


@pytest.mark.parametrize(
    "network, max_iter, tol",
    [(None, 45, 0), (Network(drop=0.3, bits=12, dither=True, seed=3), 45, 0), (None, 1000, 1e-10)],
)
def test_the_default_history_holds_the_rows_of_a_full_run_at_the_tests(network, max_iter, tol):
    """Default: rows at iterations 10, 20, ... and the last, no objective, each bitwise a record_every=1 row."""
    problem = averaging(batch=2)
    options = dict(max_iter=max_iter, tol=tol, reference=pdmm.reference(problem), network=network)
    default = pdmm.solve(problem, **options)
    full = pdmm.solve(problem, record_every=1, **options)
    assert default.iterations == full.iterations and default.converged == full.converged == (tol > 0)
    last = default.iterations
    expected = [*range(10, last + 1, 10), *([last] if last % 10 else [])]
    np.testing.assert_array_equal(default.history["iteration"], expected)
    assert set(default.history) == set(full.history) == {"iteration", "time", "residual", "error", "messages", "bits"}
    for key, values in full.history.items():
        if key != "time":  # the loop's clock, not a number of the run
            np.testing.assert_array_equal(default.history[key], values[np.array(expected) - 1], err_msg=key)
    np.testing.assert_array_equal(default.x, full.x)


def test_the_default_record_interval_follows_the_test_interval():
    problem = averaging()
    assert list(pdmm.solve(problem, max_iter=30, tol=0, check_every=7).history["iteration"]) == [7, 14, 21, 28, 30]
    assert list(pdmm.solve(problem, max_iter=30, tol=0, check_every=7, record_every=None).history["iteration"]) == [
        7,
        14,
        21,
        28,
        30,
    ]


@pytest.mark.parametrize(
    "options, iterations",
    [
        ({}, [1, 10, 20, 30, 40, 45]),  # the divergence baseline, then the tests (which record the rows)
        ({"history": ()}, [1, 10, 20, 30, 40, 45]),
        ({"history": ("messages",)}, [1, 10, 20, 30, 40, 45]),
        ({"record_every": 7}, [1, 7, 10, 14, 20, 21, 28, 30, 35, 40, 42, 45]),
        ({"record_every": 1}, list(range(1, 46))),
        ({"check_every": 1, "history": ()}, list(range(1, 46))),
    ],
)
def test_the_residual_is_computed_once_where_a_row_or_a_test_needs_it(monkeypatch, options, iterations):
    calls = []
    residual = pdmm.constraints.Consensus.residual
    monkeypatch.setattr(pdmm.constraints.Consensus, "residual", lambda self, x: calls.append(1) or residual(self, x))
    steps = []
    step = pdmm.METHODS["pdmm"].step
    monkeypatch.setattr(pdmm.METHODS["pdmm"], "step", lambda self, state: steps.append(len(calls)) or step(self, state))
    pdmm.solve(averaging(), max_iter=45, tol=0, **options)
    steps.append(len(calls))  # calls before iteration k's step at steps[k - 1]; at the end at steps[45]
    assert [k for k in range(1, 46) if steps[k] - steps[k - 1]] == iterations
    assert len(calls) == len(iterations)


def test_the_residual_is_the_rms_consensus_discrepancy_of_the_iterate():
    problem = averaging()
    index = {v: k for k, v in enumerate(G.nodes)}
    i, j = np.array([(index[u], index[v]) for u, v in G.edges]).T
    for k in (1, 5, 23):
        result = pdmm.solve(problem, max_iter=k, tol=0, history=("residual", "objective"), check_every=4)
        x = result.x
        np.testing.assert_allclose(
            result.history["residual"][-1], np.sqrt(((x[i] - x[j]) ** 2).sum(-1).mean()), rtol=1e-12
        )
        a = problem.local.q[:, 0].numpy()
        np.testing.assert_allclose(result.history["objective"][-1], 0.5 * ((x - a) ** 2).sum(), rtol=1e-12)


def test_history_records_only_what_was_asked():
    problem, x_star = averaging(), np.zeros((30, 3))
    assert set(pdmm.solve(problem, max_iter=5, tol=0).history) == {"iteration", "time", "residual", "messages", "bits"}
    assert set(pdmm.solve(problem, max_iter=5, tol=0, reference=x_star).history) == {
        "iteration",
        "time",
        "residual",
        "messages",
        "bits",
        "error",
    }
    assert set(pdmm.solve(problem, max_iter=5, tol=0, history=()).history) == {"iteration", "time"}
    assert set(pdmm.solve(problem, max_iter=5, tol=0, history="bits").history) == {"iteration", "time", "bits"}
    picked = pdmm.solve(
        problem, max_iter=5, tol=0, reference=x_star, history=["error", "residual"], record_every=1
    ).history
    assert set(picked) == {"iteration", "time", "residual", "error"} and picked["error"].shape == (5,)
    private = pdmm.solve(problem, max_iter=5, tol=0, network=Network(privacy=1.0), history={"privacy_x"})
    assert set(private.history) == {"iteration", "time", "privacy_x"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"history": ("residual", "cost")}, r"unknown history entries \['cost'\]; choose from residual, objective"),
        ({"history": 3}, "history must be None or a collection of names"),
        ({"history": ("error",)}, "history 'error' needs a reference"),
        ({"history": ("privacy_messages",)}, r"need network=pdmm.Network\(privacy=...\)"),
        ({"record_every": 0}, "record_every must be None or an integer >= 1, got 0"),
        ({"record_every": True}, "record_every must be None or an integer >= 1, got True"),
        ({"check_every": 2.5}, "check_every must be None or an integer >= 1, got 2.5"),
    ],
)
def test_bad_bookkeeping_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pdmm.solve(averaging(), **kwargs)


def test_the_objective_is_computed_only_when_asked(monkeypatch):
    calls = []
    value = pdmm.Quadratic.value
    monkeypatch.setattr(pdmm.Quadratic, "value", lambda self, x: calls.append(1) or value(self, x))
    problem = averaging()
    lean = pdmm.solve(problem, max_iter=40, tol=0, record_every=1)  # the default history has no objective
    assert len(calls) == 1 and lean.iterations == 40  # once, at the end: Result.fun
    calls.clear()
    pdmm.solve(problem, max_iter=40, tol=0, history=("residual", "objective"), record_every=4)
    assert len(calls) == 10 + 1


def test_no_host_read_between_tests(monkeypatch):
    """Only the test every check_every iterations reads from the device: 10 more iterations, one more read."""
    reads = []
    for name in ("__bool__", "__float__", "__int__", "item", "tolist", "numpy", "cpu"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor, name, lambda self, *a, _f=original, _n=name, **k: reads.append(_n) or _f(self, *a, **k)
        )
    counts = {}
    for max_iter in (100, 200):
        reads.clear()
        pdmm.solve(averaging(batch=2), max_iter=max_iter, tol=0, reference=np.zeros((30, 3)))
        counts[max_iter] = list(reads)
    extra = list(counts[200])
    for name in counts[100]:
        extra.remove(name)
    assert extra == ["tolist"] * 10


@pytest.mark.parametrize("history", [None, ()])
def test_divergence_is_found_at_the_next_test_with_the_run_so_far(history):
    rng = np.random.default_rng(0)
    problem = pdmm.least_squares(pdmm.topology("ring", n=6), rng.normal(size=(6, 5, 3)), rng.normal(size=(6, 5)))
    options = dict(method="qa-pdmm", eta=0.01, max_iter=5000, history=history)
    with pytest.raises(pdmm.DivergenceError, match="qa-pdmm diverged at iteration") as every_one:
        pdmm.solve(problem, check_every=1, **options)
    with pytest.raises(pdmm.DivergenceError, match="qa-pdmm diverged at iteration") as spaced:
        pdmm.solve(problem, **options)
    full, result = every_one.value.result, spaced.value.result
    first = full.iterations
    assert result.iterations == 10 * -(-first // 10) and f"iteration {result.iterations}:" in str(spaced.value)
    assert not result.converged and result.history["iteration"][-1] == result.iterations
    if history is None:  # rows at the tests, grown 10^6-fold from iteration 1's residual
        np.testing.assert_array_equal(result.history["iteration"], np.arange(10, result.iterations + 1, 10))
        assert result.history["residual"][-1] > 1e6 * full.history["residual"][0]
        np.testing.assert_array_equal(result.history["residual"][: first // 10], full.history["residual"][9:first:10])


@pytest.mark.parametrize("where", ["step", "objective", "test"])
def test_an_interrupt_keeps_state_and_rows_in_step(monkeypatch, where):
    """Ctrl-C in iteration 13 (in the step, while recording, or in the test) returns iterations 1-12."""
    calls = []

    def interrupt_on_13th(original):
        def wrapped(*args, **kwargs):
            calls.append(1)
            if len(calls) == 13:
                raise KeyboardInterrupt
            return original(*args, **kwargs)

        return wrapped

    problem = averaging()
    options = dict(tol=0, check_every=1, history=("residual", "objective", "messages"))
    plain = pdmm.solve(problem, max_iter=12, **options)
    if where == "step":
        monkeypatch.setattr(pdmm.METHODS["pdmm"], "step", interrupt_on_13th(pdmm.METHODS["pdmm"].step))
    elif where == "objective":
        monkeypatch.setattr(pdmm.Quadratic, "value", interrupt_on_13th(pdmm.Quadratic.value))
    else:
        monkeypatch.setattr(loop_module, "read", interrupt_on_13th(loop_module.read))
    result = pdmm.solve(problem, max_iter=100, **options)
    assert result.interrupted and not result.converged and result.iterations == 12
    np.testing.assert_array_equal(result.x, plain.x)
    for key, values in plain.history.items():
        if key != "time":  # the loop's clock, not a number of the run
            np.testing.assert_array_equal(result.history[key], values, err_msg=key)


def test_history_grows_past_its_first_allocation():
    problem = pdmm.averaging(pdmm.topology("ring", n=6), np.arange(6.0))
    long = pdmm.solve(problem, max_iter=5000, tol=0, history=("residual",), record_every=1)
    short = pdmm.solve(problem, max_iter=4500, tol=0, history=("residual",), record_every=1)
    assert long.history["residual"].shape == (5000,)
    np.testing.assert_array_equal(long.history["residual"][:4500], short.history["residual"])


def test_a_target_is_tested_every_iteration_unless_spaced():
    problem = averaging()
    x_star = np.tile(problem.local.q[:, 0].numpy().mean(0), (30, 1))
    exact = pdmm.solve(problem, reference=x_star, target=1e-4, tol=0)
    error = exact.history["error"]
    assert exact.converged and error[-1] <= 1e-4 < error[-2]
    spaced = pdmm.solve(problem, reference=x_star, target=1e-4, tol=0, check_every=5)
    assert spaced.converged and spaced.iterations % 5 == 0 and spaced.iterations >= exact.iterations
    assert spaced.history["error"][-1] <= 1e-4
