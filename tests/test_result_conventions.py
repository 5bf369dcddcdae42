"""pdmm.Result read as scipy.optimize.OptimizeResult readers read it (fun, nit, success, message, mapping access),
on_divergence="return", and Result.history_frame (docs/guide/solve.md, "The Result"). fun is checked against the
objective written out in numpy at the returned x and against scipy.optimize.minimize on the centralised problem;
the frame against the history arrays."""

import numpy as np
import pytest
import scipy.optimize
from extras import hide, needs_extra

import pdmm
from pdmm.loop import Result

RNG = np.random.default_rng(7)
A = RNG.normal(size=(9, 2))  # averaging data at 9 nodes, d = 2
H, Y = RNG.normal(size=(9, 4, 3)), RNG.normal(size=(9, 4))  # lasso: 4 rows of 3 features per node
LAM = 0.8


def graph():
    """A connected graph whose numbering reverse Cuthill-McKee changes (a random geometric graph)."""
    return pdmm.topology("random_geometric", n=9, seed=3)


def averaging_objective(x, a):
    """sum_i 1/2 ||x_i - a_i||^2, per instance for (B, n, d)."""
    return 0.5 * ((x - a) ** 2).sum(axis=(-2, -1))


def lasso_objective(x):
    """sum_i 1/2 ||H_i x_i - y_i||^2 + (LAM / n) ||x_i||_1 (pdmm.lasso's split of the weight LAM)."""
    residual = np.einsum("nkd,nd->nk", H, x) - Y
    return 0.5 * (residual**2).sum() + LAM / len(x) * np.abs(x).sum()


def scipy_reader(result):
    """What code written for scipy.optimize.OptimizeResult reads: attributes and keys of the same names."""
    return result.success, result.status, result.message, result.nit, result.fun, result["x"], "fun" in result


@pytest.mark.parametrize("reorder", [False, True], ids=["given order", "renumbered"])
def test_fun_is_the_objective_at_the_returned_x(reorder):
    result = pdmm.solve(pdmm.averaging(graph(), A), reorder=reorder, history=("residual", "objective"))
    assert isinstance(result.fun, float)
    assert result.fun == pytest.approx(averaging_objective(result.x, A), rel=1e-13)
    assert result.fun == result.history["objective"][-1]  # the last row is the returned iterate
    lasso = pdmm.solve(pdmm.lasso(graph(), H, Y, lam=LAM), reorder=reorder, max_iter=40, tol=0)
    assert lasso.fun == pytest.approx(lasso_objective(lasso.x), rel=1e-13)


def test_fun_of_a_batch_is_one_per_instance():
    a = RNG.normal(size=(3, 9, 2))
    result = pdmm.solve(pdmm.averaging(graph(), a), max_iter=7, tol=0)
    assert result.fun.shape == (3,)
    np.testing.assert_allclose(result.fun, averaging_objective(result.x, a), rtol=1e-13)


def test_a_converged_run_reads_as_scipys_minimize_of_the_centralised_problem():
    """The consensus solution minimises sum_i f_i(x) over one x: scipy.optimize.minimize on that sum finds the
    same point and value, and the same reader takes both results."""
    result = pdmm.solve(pdmm.averaging(graph(), A), tol=1e-10)
    central = scipy.optimize.minimize(lambda x: averaging_objective(np.broadcast_to(x, A.shape), A), np.zeros(2))
    ours, theirs = scipy_reader(result), scipy_reader(central)
    assert ours[0] is True and theirs[0]
    assert ours[1] == "converged" and ours[2].startswith("converged: ") and ours[3] == result.iterations > 0
    assert ours[4] == pytest.approx(theirs[4], rel=1e-8)
    np.testing.assert_allclose(ours[5], np.broadcast_to(theirs[5], A.shape), atol=1e-6)
    assert ours[6] and theirs[6]


def test_the_result_is_a_read_only_mapping_over_its_fields_and_scipys_names():
    result = pdmm.solve(pdmm.averaging(graph(), A), max_iter=5, tol=0)
    fields = ["x", "iterations", "converged", "history", "method", "params", "nodes", "seconds", "reference"]
    fields += ["interrupted", "network", "status", "message", "fun"]
    assert list(result.keys()) == [*fields, "nit", "success"] and len(result) == len(fields) + 2
    as_dict = dict(result)
    assert all(as_dict[key] is getattr(result, key) for key in fields)
    assert (as_dict["nit"], as_dict["success"]) == (5, False) and result["status"] == "max_iter"
    assert "x" in result and "nit" in result and "stalled" not in result and "jac" not in result
    with pytest.raises(KeyError, match="jac"):
        result["jac"]
    with pytest.raises(TypeError):
        result["x"] = None  # type: ignore[index]
    assert result.get("jac") is None and result.iterations == 5  # today's names are unchanged


def test_a_result_built_by_hand_has_no_fun_and_its_iterations_as_nit():
    result = Result(np.zeros((2, 1)), 9, False, {}, "pdmm", {}, [0, 1], 0.0, status="interrupted")
    assert result.fun is None and result.nit == 9 and result["success"] is False
    assert result.message == "interrupted (Ctrl-C) at iteration 9"


def diverging():
    """A chebyshev run whose interval misses the mixing matrix's spectrum: it diverges (docs/averaging.md 5)."""
    return pdmm.averaging(pdmm.topology("ring", n=8), np.arange(8.0)), dict(method="chebyshev", interval=(-0.2, 0.95))


def test_on_divergence_return_gives_the_result_the_error_holds():
    problem, keywords = diverging()
    keywords |= dict(history=("residual", "objective"), record_every=1)
    with pytest.raises(pdmm.DivergenceError) as raised:
        pdmm.solve(problem, **keywords)
    returned = pdmm.solve(problem, on_divergence="return", **keywords)
    held = raised.value.result
    assert returned.status == held.status == "diverged" and not returned.success and not returned.converged
    assert returned.message == held.message == str(raised.value)
    assert returned.iterations == held.iterations and returned.history["iteration"][-1] == returned.iterations
    np.testing.assert_array_equal(returned.x, held.x)
    for name in ("iteration", "residual", "objective"):
        np.testing.assert_array_equal(returned.history[name], held.history[name])
    assert returned.history["residual"][-1] > 1e6 * returned.history["residual"][0]  # the divergence test's growth
    assert returned.fun == pytest.approx(averaging_objective(returned.x, np.arange(8.0)[:, None]), rel=1e-12)


@pytest.mark.parametrize("value", ["ignore", "Return", None, True])
def test_on_divergence_takes_raise_or_return_only(value):
    problem, _ = diverging()
    with pytest.raises(ValueError, match=r"^on_divergence must be 'raise' or 'return', got " + repr(value) + "$"):
        pdmm.solve(problem, on_divergence=value)


def test_history_frame_has_a_row_per_recorded_row():
    needs_extra("frames")
    result = pdmm.solve(pdmm.averaging(graph(), A), history=("residual", "objective"), record_every=3)
    frame = result.history_frame()
    assert list(frame.columns) == ["iteration", "time", "residual", "objective"] and len(frame) > 2
    for name, values in result.history.items():
        np.testing.assert_array_equal(frame[name].to_numpy(), values)


def test_history_frame_of_a_batch_has_a_row_per_recorded_row_and_instance():
    needs_extra("frames")
    a = RNG.normal(size=(3, 9, 2))
    result = pdmm.solve(pdmm.averaging(graph(), a), history=("residual", "objective"), max_iter=12, tol=0)
    frame = result.history_frame()
    rows = len(result.history["iteration"])
    assert list(frame.columns) == ["iteration", "instance", "time", "residual", "objective"]
    assert len(frame) == 3 * rows
    for b in range(3):
        mine = frame[frame["instance"] == b]
        np.testing.assert_array_equal(mine["iteration"].to_numpy(), result.history["iteration"])
        np.testing.assert_array_equal(mine["time"].to_numpy(), result.history["time"])
        np.testing.assert_array_equal(mine["residual"].to_numpy(), result.history["residual"][:, b])
        np.testing.assert_array_equal(mine["objective"].to_numpy(), result.history["objective"][:, b])


def test_history_frame_without_pandas_names_the_extra(monkeypatch):
    result = pdmm.solve(pdmm.averaging(graph(), A), max_iter=3, tol=0)
    hide(monkeypatch, "pandas")
    with pytest.raises(ImportError) as err:
        result.history_frame()
    assert str(err.value) == 'Result.history_frame needs pandas: pip install "pdmm-bridge[frames]"'
