"""pdmm.solve's callback, history["time"] and the Result's status, message and success (docs/guide/solve.md,
"Watching a run"): the callback sees every recorded row and exactly the run's x there (checked against runs
stopped by max_iter at that iteration), stops the run when it returns True, and every way a run ends is named."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch

import pdmm

G = pdmm.topology("random_geometric", n=30, seed=1)


def averaging(batch=None, seed=0):
    rng = np.random.default_rng(seed)
    return pdmm.averaging(G, rng.normal(size=(30, 3) if batch is None else (batch, 30, 3)))


def least_squares(seed=0):
    rng = np.random.default_rng(seed)
    return pdmm.least_squares(G, rng.normal(size=(30, 5, 3)), rng.normal(size=(30, 5)))


def test_the_callback_sees_every_recorded_row_and_the_runs_own_x():
    problem, seen = least_squares(), []
    result = pdmm.solve(problem, max_iter=20, tol=0, record_every=3, callback=seen.append)
    assert [s.iteration for s in seen] == list(result.history["iteration"]) == [3, 6, 9, 12, 15, 18, 20]
    np.testing.assert_array_equal([s.residual for s in seen], result.history["residual"])
    np.testing.assert_array_equal([s.time for s in seen], result.history["time"])
    for snapshot in seen:  # the state after `iteration` steps: a run stopped there by max_iter holds the same x
        stopped = pdmm.solve(problem, max_iter=snapshot.iteration, tol=0)
        np.testing.assert_array_equal(snapshot.x, stopped.x)
    assert not np.array_equal(seen[0].x, seen[-1].x)  # each snapshot its own copy, not a view of the live state


def test_a_snapshot_is_read_only():
    seen = []
    pdmm.solve(averaging(), max_iter=4, tol=0, record_every=2, callback=seen.append)
    with pytest.raises(ValueError, match="read-only"):
        seen[0].x[0, 0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].iteration = 7


def test_returning_true_stops_the_run_there_with_status_callback():
    problem = least_squares()
    result = pdmm.solve(problem, max_iter=500, record_every=4, callback=lambda s: s.iteration >= 12)
    assert result.iterations == 12 and result.status == "callback"
    assert not result.converged and not result.success and not result.interrupted
    assert result.message == "stopped by the callback at iteration 12"
    assert list(result.history["iteration"]) == [4, 8, 12]
    np.testing.assert_array_equal(result.x, pdmm.solve(problem, max_iter=12, tol=0).x)


def test_a_callback_returning_false_or_none_changes_nothing():
    problem = least_squares()
    plain = pdmm.solve(problem, max_iter=300, record_every=5)
    for answer in (False, None, 0):
        watched = pdmm.solve(problem, max_iter=300, record_every=5, callback=lambda s, a=answer: a)
        assert watched.status == plain.status and watched.iterations == plain.iterations
        np.testing.assert_array_equal(watched.x, plain.x)


def test_a_converged_row_stays_converged_whatever_the_callback_says():
    problem = averaging()
    plain = pdmm.solve(problem)
    assert plain.converged
    last = plain.iterations
    watched = pdmm.solve(problem, callback=lambda s: s.iteration == last)
    assert watched.status == "converged" and watched.success and watched.iterations == last


def test_the_callback_sees_x_in_the_graphs_node_order_when_the_run_renumbers():
    problem, seen = least_squares(), []
    order = np.random.default_rng(3).permutation(problem.n)  # the run's internal numbering
    pdmm.solve(problem, max_iter=12, tol=0, record_every=6, reorder=order, callback=seen.append)
    as_given = pdmm.solve(problem, max_iter=12, tol=0, reorder=False)
    np.testing.assert_allclose(seen[-1].x, as_given.x, rtol=1e-12, atol=1e-12)
    partial = pdmm.solve(problem, max_iter=6, tol=0, reorder=False)
    np.testing.assert_allclose(seen[0].x, partial.x, rtol=1e-12, atol=1e-12)


def test_a_batched_run_shows_one_residual_per_instance():
    seen = []
    result = pdmm.solve(averaging(batch=3), max_iter=10, tol=0, record_every=5, callback=seen.append)
    assert seen[0].x.shape == (3, 30, 3) and seen[0].residual.shape == (3,)
    np.testing.assert_array_equal(seen[-1].residual, result.history["residual"][-1])


def test_the_time_column_is_the_loops_clock():
    result = pdmm.solve(least_squares(), max_iter=50, tol=0, record_every=1, reference="cvxpy")
    times = result.history["time"]
    assert times.shape == result.history["iteration"].shape == (50,)
    assert times[0] >= 0 and np.all(np.diff(times) >= 0) and times[-1] <= result.seconds
    assert result.seconds < 5  # the cvxpy reference is solved before the clock starts (it alone takes longer)


def test_bad_callbacks_are_refused_before_any_work():
    with pytest.raises(TypeError, match="callback must be callable or None, got int"):
        pdmm.solve(averaging(), callback=3)
    with pytest.raises(ValueError, match="callback= applies to backend='local'"):
        pdmm.solve(averaging(), backend="distributed", callback=print)


def test_every_way_a_run_ends_is_named():
    converged = pdmm.solve(averaging(), tol=1e-8)
    assert converged.success and converged.message == (
        f"converged: the stopping test (tol=1e-08) passed at iteration {converged.iterations}"
    )
    with pytest.warns(pdmm.ConvergenceWarning):
        short = pdmm.solve(least_squares(), max_iter=5)
    assert short.status == "max_iter" and not short.success
    assert short.message == "stopped at max_iter (5 iterations) short of the stopping test (tol=1e-10)"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        every = pdmm.solve(averaging(), max_iter=7, tol=0)
    assert every.message == "ran all 7 iterations (max_iter); no stopping test was applied (tol=0)"
    with pytest.warns(pdmm.ConvergenceWarning):
        stalled = pdmm.solve(averaging(), dtype=torch.float32, tol=1e-12, max_iter=5000)
    assert stalled.status == "stalled" and stalled.message.startswith(f"stalled at iteration {stalled.iterations}")
    rng = np.random.default_rng(0)
    wild = pdmm.least_squares(G, rng.normal(size=(30, 5, 3)), rng.normal(size=(30, 5)))
    with pytest.raises(pdmm.DivergenceError) as caught:
        pdmm.solve(wild, method="qa-pdmm", eta=0.01, max_iter=5000)
    assert caught.value.result.status == "diverged" and caught.value.result.message == str(caught.value)
    assert str(caught.value).startswith("qa-pdmm diverged at iteration")


def test_a_result_built_by_hand_gets_a_message_for_its_status():
    result = pdmm.Result(np.zeros((2, 1)), 9, False, {}, "pdmm", {}, [0, 1], 0.0, status="interrupted")
    assert result.message == "interrupted (Ctrl-C) at iteration 9" and not result.success
    with pytest.raises(ValueError, match="status must be one of"):
        pdmm.Result(np.zeros((2, 1)), 9, True, {}, "pdmm", {}, [0, 1], 0.0, status="callback")
