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


@pytest.mark.parametrize(
    "network, reason",
    [
        (pdmm.Network(wake=0.0), "wake=0"),
        (pdmm.Network(edge_up=0.0), "edge_up=0"),
        (pdmm.Network(drop=1.0), "drop=1"),
        (pdmm.Network(wake=[0.0] * 30), "wake=0 for every node"),
    ],
)
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
    result = pdmm.Result(
        x=np.zeros((2, 1)),
        iterations=3,
        converged=True,
        history={},
        method="pdmm",
        params={},
        nodes=[0, 1],
        seconds=0.0,
    )
    assert result.status == "converged" and not result.stalled
    with pytest.raises(ValueError, match="status"):
        pdmm.Result(
            x=np.zeros((2, 1)),
            iterations=3,
            converged=True,
            history={},
            method="pdmm",
            params={},
            nodes=[0, 1],
            seconds=0.0,
            status="stalled",
        )


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


@pytest.mark.parametrize(
    "options, flag",
    [
        (["--wake", "0"], "--wake"),
        (["--edge-up", "0"], "--edge-up"),
        (["--drop", "1"], "--drop"),
        (["--rho", "1e17"], "rho=1e+17"),
    ],
)
def test_the_solve_command_refuses_what_cannot_progress_in_one_line(tmp_path, capsys, options, flag):
    with pytest.raises(SystemExit) as caught:
        run(tmp_path, capsys, *options)
    err = capsys.readouterr().err
    assert caught.value.code == 2 and flag in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def closed_form_least_squares(H, y):
    """argmin sum_i 1/2 ||H_i x - y_i||^2, from the normal equations (numpy, independent of pdmm and cvxpy)."""
    return np.linalg.solve(np.einsum("nki,nkj->ij", H, H), np.einsum("nki,nk->i", H, y))


@pytest.mark.parametrize("method", ["pdmm", "admm", "qa-pdmm", "extra", "nids", "gradient-tracking", "gossip"])
@pytest.mark.parametrize("size", [1e-6, 1e-12])
def test_small_data_converges_to_the_right_answer_not_to_zero(method, size):
    """The test's floor was 1: data of size 1e-12 was "converged" at iteration 10 with error 0.27 (0.5 for
    gradient tracking); the floor is now the problem's own scale."""
    rng = np.random.default_rng(3)
    H, y = rng.normal(size=(30, 10, 3)), size * rng.normal(size=(30, 10))
    problem = pdmm.least_squares(G, H, y) if method != "gossip" else pdmm.averaging(G, size * A)
    x_star = closed_form_least_squares(H, y) if method != "gossip" else size * A.mean(0)
    result = pdmm.solve(problem, method=method, max_iter=20000)
    assert result.converged
    assert np.linalg.norm(result.x - x_star) / np.linalg.norm(np.broadcast_to(x_star, result.x.shape)) < 1e-7


def test_data_beyond_what_the_dtype_resolves_is_refused():
    with pytest.raises(ValueError, match=r"scale \(about 1\.\d+e-200.*rescale the data"):
        pdmm.solve(pdmm.averaging(G, 1e-200 * A))
    with pytest.raises(ValueError, match="beyond what float32 resolves"):
        pdmm.solve(pdmm.averaging(G, 1e-14 * A), dtype=torch.float32)


def test_a_huge_eta_no_longer_converges_at_x0_and_an_unresolvable_one_is_refused():
    """eta = 1e12 moves x by 1e-12 of a gradient step: "converged" at iteration 10 with error 1 before."""
    with pytest.warns(pdmm.ConvergenceWarning):
        result = pdmm.solve(averaging(), method="qa-pdmm", eta=1e12, reference="cvxpy")
    assert not result.converged and error(result) > 0.9
    with pytest.raises(ValueError, match=r"eta=1e\+20 is beyond what float64 resolves"):
        pdmm.solve(averaging(), method="qa-pdmm", eta=1e20)


@pytest.mark.parametrize("method", ["dgd", "extra", "nids", "gradient-tracking"])
def test_a_tiny_alpha_no_longer_converges_at_x0_and_an_unresolvable_one_is_refused(method):
    rng = np.random.default_rng(4)
    problem = pdmm.least_squares(G, rng.normal(size=(30, 10, 3)), rng.normal(size=(30, 10)))
    with pytest.warns(pdmm.ConvergenceWarning):
        result = pdmm.solve(problem, method=method, alpha=1e-12, max_iter=300, reference="cvxpy")
    assert not result.converged and error(result) > 0.9
    with pytest.raises(ValueError, match="alpha=1e-20 is below what float64 resolves"):
        pdmm.solve(problem, method=method, alpha=1e-20)


@pytest.mark.parametrize("method", ["pdmm", "dgd"])
def test_a_network_whose_nodes_almost_never_wake_is_not_converged(method):
    """With wake = 1e-300 nothing ever moves, so a step's change is 0 and x^0 = 0 has residual 0: the test now
    measures the ideal step from the state reached, which moves."""
    problem = (
        averaging()
        if method == "pdmm"
        else pdmm.least_squares(
            G, *(lambda r: (r.normal(size=(30, 10, 3)), r.normal(size=(30, 10))))(np.random.default_rng(5))
        )
    )
    with pytest.warns(pdmm.ConvergenceWarning):
        result = pdmm.solve(problem, method=method, network=pdmm.Network(wake=1e-300), max_iter=200)
    assert not result.converged and result.status == "max_iter"


@pytest.mark.parametrize("seed", [2, 4])
def test_a_first_iteration_in_which_nothing_moved_is_no_divergence(seed):
    """Two nodes awake with probability 0.3: when neither woke at iteration 1 its residual was 0, and any residual
    later was "a residual grown 10^6-fold" (DivergenceError). The mean of a is the answer."""
    a = np.array([[1.0], [3.0]])
    result = pdmm.solve(
        pdmm.averaging(pdmm.topology("path", 2), a), theta=0.5, network=pdmm.Network(wake=0.3, seed=seed), max_iter=3000
    )
    assert result.converged and np.allclose(result.x, 2.0, atol=1e-8)


def path_problem(n=4):
    return pdmm.averaging(pdmm.topology("path", n), np.arange(float(n))[:, None])


@pytest.mark.parametrize(
    "network",
    [
        lambda c: pdmm.Network(drop={(1, 2): 1.0, (2, 1): 1.0}),
        lambda c: pdmm.Network(
            drop=[1.0 if {s, d} == {1, 2} else 0.0 for s, d in zip(c.src.tolist(), c.dst.tolist(), strict=False)]
        ),
        lambda c: pdmm.Network(edge_up=[[(0, 1)], [(2, 3)]]),
        lambda c: pdmm.Network(wake={node: 0.0 for node in range(4)}),
    ],
)
def test_per_edge_and_per_node_settings_that_cut_the_graph_are_refused(network):
    problem = path_problem()
    with pytest.raises(ValueError, match="splits the graph into 2 parts|wake=0 for every node"):
        pdmm.solve(problem, network=network(problem.compiled))


def test_an_edge_lost_for_good_is_not_converged_off_the_mean():
    """Both directions of one ring edge lost: its z never moves, and the lossy step's fixed point is the consensus
    1.875, not the mean 2.5 ("converged" there before); the ideal step from it moves that z, so not converged."""
    ring = pdmm.averaging(pdmm.topology("ring", 6), np.arange(6.0)[:, None])
    with pytest.warns(pdmm.ConvergenceWarning):
        result = pdmm.solve(ring, theta=0.5, network=pdmm.Network(drop={(0, 1): 1.0, (1, 0): 1.0}), max_iter=2000)
    assert not result.converged and not np.allclose(result.x, 2.5, atol=1e-3)


@pytest.mark.parametrize("lost", [(0, 1), (1, 0), (1, 2), (2, 1)])
@pytest.mark.parametrize("theta", [1.0, 0.5])
def test_a_message_lost_one_way_for_good_is_converged_only_at_the_mean(lost, theta):
    path = pdmm.averaging(pdmm.topology("path", 3), np.array([[0.0], [3.0], [6.0]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pdmm.ConvergenceWarning)
        result = pdmm.solve(path, theta=theta, network=pdmm.Network(drop={lost: 1.0}), max_iter=2000)
    assert not result.converged or np.allclose(result.x, 3.0, atol=1e-8)


def test_a_rho_too_small_for_the_dtype_is_refused_and_a_small_one_is_named():
    with pytest.raises(ValueError, match="rho=1e-300 is below what float64 resolves"):
        pdmm.solve(averaging(), rho=1e-300)
    with pytest.warns(pdmm.ConvergenceWarning, match=r"rho=1e-12 is far below the problem's curvature"):
        pdmm.solve(averaging(), rho=1e-12, max_iter=50)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_theta_below_what_the_dtype_resolves_is_refused(dtype):
    with pytest.raises(ValueError, match="theta=1e-30 is below what float"):
        pdmm.solve(averaging(), theta=1e-30, dtype=dtype)


@pytest.mark.parametrize(
    "options, culprit",
    [
        (["--method", "qa-pdmm", "--eta", "1e308"], "qa-pdmm: eta=1e+308 is beyond what float64 resolves"),
        (["--compare", "dgd:alpha=1e-300"], "dgd:alpha=1e-300: alpha=1e-300 is below what float64 resolves"),
        (["--rho", "1e-300"], "pdmm: rho=1e-300 is below what float64 resolves"),
        (["--theta", "1e-300"], "pdmm: theta=1e-300 is below what float64 resolves"),
        (["--tol", "1"], "argument --tol: must be a number >= 0 and below 1"),
    ],
)
def test_the_solve_command_refuses_unresolvable_steps_in_one_line(tmp_path, capsys, options, culprit):
    from solve_cli import assert_refused_in_one_line

    assert_refused_in_one_line(tmp_path / "out", capsys, options, culprit, nodes=30)


def test_the_solve_command_refuses_data_beyond_the_dtype_in_one_line(tmp_path, capsys):
    path = tmp_path / "tiny.npz"
    np.savez(path, a=1e-200 * A)
    from solve_cli import assert_refused_in_one_line

    assert_refused_in_one_line(tmp_path / "out", capsys, ["--data", str(path)], "rescale the data", nodes=30)


def test_the_solve_command_names_a_rho_far_from_the_curvature(tmp_path, capsys):
    code, printed = run(tmp_path, capsys, "--rho", "1e-12", "--iters", "50")
    assert code == 0 and "pdmm: not converged after 50 iterations: rho=1e-12 is far below" in printed.out


def test_edge_constraints_with_a_small_offset_are_solved_to_tol_relative_to_it():
    """minimise sum_i x_i^2 / 2 s.t. x_i - x_{i+1} = b_i on a path: the least-norm solution pinv(D) b. With every
    f_i minimised at 0 the scale is the constraints' (||b|| / ||A||): at b ~ 1e-12 the run stopped at error 5e-5."""
    D = np.array([[1.0, -1, 0, 0], [0, 1, -1, 0], [0, 0, 1, -1]])
    b = 1e-12 * np.array([1.0, 2.0, 3.0])
    constraints = {(i, i + 1): (np.eye(1), -np.eye(1), b[i : i + 1]) for i in range(3)}
    problem = pdmm.quadratic(pdmm.topology("path", 4), np.tile(np.eye(1), (4, 1, 1)), np.zeros((4, 1)), constraints)
    result = pdmm.solve(problem, max_iter=5000)
    x_star = np.linalg.pinv(D) @ b
    assert result.converged and np.linalg.norm(result.x[:, 0] - x_star) / np.linalg.norm(x_star) < 1e-8
