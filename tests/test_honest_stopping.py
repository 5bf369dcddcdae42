"""A stopping test that a degenerate run cannot pass (issue 29, item 3): "converged" needs the residual, the change
of x and the change of the method's whole state below tol; a run whose state stops changing short of tol is
"stalled"; a network over which nothing can happen, and a rho beyond what the dtype resolves, are refused; a run
with a stopping test that ends without meeting it warns (pdmm.ConvergenceWarning)."""
import json
import warnings

import numpy as np
import pytest
import torch

import pdmm
from experiments.cli import main

G = pdmm.topology("random_geometric", n=30, seed=0)
A = np.random.default_rng(0).normal(size=(30, 3))


def averaging():
    return pdmm.averaging(G, A)


def error(result):
    return float(result.history["error"][-1].max())


def test_a_huge_rho_no_longer_converges_to_x0():
    """rho = 1e12 pins x near 0 (residual 1e-13, error 1) while the multipliers still move: not converged."""
    with pytest.warns(pdmm.ConvergenceWarning, match="reached max_iter"):
        result = pdmm.solve(averaging(), rho=1e12, reference="cvxpy")
    assert not result.converged and result.status == "max_iter" and result.iterations == 1000
    assert error(result) > 0.9


def test_float32_with_rho_1e6_no_longer_converges_with_error_one():
    with pytest.warns(pdmm.ConvergenceWarning):
        result = pdmm.solve(averaging(), rho=1e6, dtype=torch.float32, reference="cvxpy")
    assert not result.converged and error(result) > 0.9


def test_a_normal_run_still_converges_to_the_right_answer_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = pdmm.solve(averaging(), reference="cvxpy")
    assert result.converged and result.status == "converged" and error(result) < 1e-8


def test_a_state_frozen_short_of_tol_is_stalled_not_converged():
    """float32 cannot reach tol = 1e-12: the iterates reach a floating-point fixed point and stay there."""
    with pytest.warns(pdmm.ConvergenceWarning, match="stopped changing"):
        result = pdmm.solve(averaging(), dtype=torch.float32, tol=1e-12, max_iter=5000)
    assert result.stalled and result.status == "stalled" and not result.converged and result.iterations < 5000


def test_tol_zero_runs_every_iteration_and_never_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = pdmm.solve(averaging(), tol=0, max_iter=50)
    assert result.iterations == 50 and result.status == "max_iter"


@pytest.mark.parametrize("network, reason", [(pdmm.Network(wake=0.0), "wake=0"), (pdmm.Network(edge_up=0.0), "edge_up=0"),
                                             (pdmm.Network(drop=1.0), "drop=1"),
                                             (pdmm.Network(wake=[0.0] * 30), "wake=0 for every node")])
def test_a_network_over_which_nothing_can_happen_is_refused(network, reason):
    with pytest.raises(ValueError, match=reason):
        pdmm.solve(averaging(), network=network)


@pytest.mark.parametrize("rho, dtype", [(1e17, torch.float64), (1e8, torch.float32)])
def test_a_rho_beyond_what_the_dtype_resolves_is_refused(rho, dtype):
    with pytest.raises(ValueError, match="beyond what float"):
        pdmm.solve(averaging(), rho=rho, dtype=dtype)


def test_status_says_diverged_and_interrupted():
    with pytest.raises(pdmm.DivergenceError) as caught:
        pdmm.solve(averaging(), method="chebyshev", interval=(0.5, 0.9))
    assert caught.value.result.status == "diverged" and not caught.value.result.converged


def test_a_result_built_by_hand_keeps_converged_and_gets_its_status():
    result = pdmm.Result(x=np.zeros((2, 1)), iterations=3, converged=True, history={}, method="pdmm", params={},
                         nodes=[0, 1], seconds=0.0)
    assert result.status == "converged" and not result.stalled
    with pytest.raises(ValueError, match="status"):
        pdmm.Result(x=np.zeros((2, 1)), iterations=3, converged=True, history={}, method="pdmm", params={},
                    nodes=[0, 1], seconds=0.0, status="stalled")


def run(tmp_path, capsys, *options):
    code = main(["solve", "--no-progress", "--nodes", "30", *options, "--out", str(tmp_path / "out")])
    return code, capsys.readouterr()


def test_the_solve_command_says_not_converged_for_a_huge_rho(tmp_path, capsys):
    code, printed = run(tmp_path, capsys, "--rho", "1e12")
    assert code == 0 and "pdmm: not converged after 1000 iterations" in printed.out
    assert "ConvergenceWarning" not in printed.err  # the summary line says it
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["methods"]["pdmm"]["status"] == "max_iter" and not config["methods"]["pdmm"]["converged"]


def test_the_solve_command_says_stalled(tmp_path, capsys):
    code, printed = run(tmp_path, capsys, "--dtype", "float32", "--tol", "1e-12", "--iters", "5000")
    assert code == 0 and "pdmm: stalled after" in printed.out


@pytest.mark.parametrize("options, flag", [(["--wake", "0"], "--wake"), (["--edge-up", "0"], "--edge-up"),
                                           (["--drop", "1"], "--drop"), (["--rho", "1e17"], "rho=1e+17")])
def test_the_solve_command_refuses_what_cannot_progress_in_one_line(tmp_path, capsys, options, flag):
    with pytest.raises(SystemExit) as caught:
        run(tmp_path, capsys, *options)
    err = capsys.readouterr().err
    assert caught.value.code == 2 and flag in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
