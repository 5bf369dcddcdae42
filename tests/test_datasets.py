"""pdmm.datasets: the breast-cancer data as a logistic-regression problem split over a graph's nodes, and
`pdmm-bridge solve --data builtin:breast_cancer`."""

import json

import numpy as np
import pytest
import torch
from extras import needs_extra

import pdmm
from experiments.cli import main
from pdmm.datasets import breast_cancer, breast_cancer_rows, node_arrays, split_rows

needs_extra("sklearn")  # the data and the reference solution; tests/test_without_extras.py: the refusal without it
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402


def test_rows_are_the_standardised_features_with_an_intercept_and_labels_plus_minus_one():
    X, y = breast_cancer_rows()
    raw, target = load_breast_cancer(return_X_y=True)
    assert X.shape == (569, 31) and y.shape == (569,)
    np.testing.assert_allclose(X[:, :30].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(X[:, :30].std(0), 1, rtol=1e-12)
    np.testing.assert_array_equal(X[:, 30], 1)
    np.testing.assert_allclose(X[:, :30] * raw.std(0) + raw.mean(0), raw, rtol=1e-12, atol=1e-12)  # z-scores
    assert set(y) == {-1.0, 1.0} and (y == 1).sum() == 357 and np.array_equal(y == 1, target == 1)


@pytest.mark.parametrize("nodes", [1, 7, 20, 569])
def test_the_split_covers_every_row_exactly_once_in_parts_of_nearly_equal_size(nodes):
    parts = split_rows(569, nodes, seed=3)
    assert len(parts) == nodes
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(569))
    assert {len(part) for part in parts} <= {569 // nodes, -(-569 // nodes)}
    assert all(np.array_equal(a, b) for a, b in zip(parts, split_rows(569, nodes, seed=3), strict=False))
    if 1 < nodes < 569:
        assert not np.array_equal(parts[0], split_rows(569, nodes, seed=4)[0])


def test_each_node_holds_its_rows_and_zero_padding_changes_no_gradient():
    G = pdmm.topology("random_geometric", n=20, seed=0)
    problem = breast_cancer(G, l2=4.0, seed=1)
    X, y = breast_cancer_rows()
    parts = split_rows(569, 20, seed=1)
    assert (problem.n, problem.batch, problem.dim) == (20, 1, 31)
    held = problem.local.X[:, 0].numpy()  # (n, k, d): 29 rows a node, the 11 shorter parts padded with one zero row
    assert held.shape == (20, 29, 31)
    for i, part in enumerate(parts):
        np.testing.assert_array_equal(held[i, : len(part)], X[part])
        np.testing.assert_array_equal(problem.local.y[i, 0, : len(part)].numpy(), y[part])
        assert not held[i, len(part) :].any()
    assert problem.local.reg == pytest.approx(4.0 / 20)
    x = np.random.default_rng(0).normal(size=(20, 1, 31))
    gradient = problem.local.gradient(torch.from_numpy(x)).numpy()[:, 0]
    for i, part in enumerate(parts):  # sum_r -y_r a_r sigmoid(-y_r a_r^T x) + reg x, over the node's own rows
        margins = y[part] * (X[part] @ x[i, 0])
        expected = -(X[part] * (y[part] / (1 + np.exp(margins)))[:, None]).sum(0) + 0.2 * x[i, 0]
        np.testing.assert_allclose(gradient[i], expected, rtol=1e-10)


def test_the_solution_is_scikit_learns_on_every_graph():
    X, y = breast_cancer_rows()
    # the same objective: C sum of losses + 1/2 ||w||^2 with C = 1 / l2, the intercept a penalised column
    sklearn = LogisticRegression(C=1 / 10, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y).coef_[0]
    for G in (pdmm.topology("random_geometric", n=20, seed=0), pdmm.topology("ring", n=7)):
        x_star = pdmm.reference(breast_cancer(G))
        np.testing.assert_allclose(x_star, np.tile(sklearn, (len(G), 1)), atol=1e-6)


@pytest.mark.parametrize(
    "call, culprit",
    [
        (lambda: breast_cancer(pdmm.topology("ring", n=5), l2=0), "l2 must be > 0"),
        (lambda: breast_cancer(pdmm.topology("ring", n=5), l2=-1.0), "l2 must be a finite number >= 0"),
        (lambda: breast_cancer(pdmm.topology("ring", n=5), l2=float("nan")), "l2 must be"),
        (lambda: breast_cancer(pdmm.topology("path", n=570)), "at most 569"),
        (lambda: breast_cancer(pdmm.topology("ring", n=5), seed=0.5), "seed must be an integer"),
        (lambda: split_rows(10, 0), "nodes must be an integer >= 1"),
    ],
)
def test_bad_inputs_are_one_line_errors(call, culprit):
    with pytest.raises(ValueError) as err:
        call()
    assert culprit in str(err.value) and "\n" not in str(err.value)


def test_node_arrays_pad_short_parts_with_zero_rows_labelled_plus_one():
    X, y = np.arange(10.0).reshape(5, 2), np.array([1.0, -1, 1, -1, -1])
    X_nodes, y_nodes = node_arrays(X, y, [np.array([4, 0, 2]), np.array([1, 3])])
    np.testing.assert_array_equal(X_nodes[1], [[2, 3], [6, 7], [0, 0]])
    np.testing.assert_array_equal(y_nodes, [[-1, 1, 1], [-1, -1, 1]])


def test_solve_reads_the_builtin_data_and_its_whole_weight(tmp_path):
    out = tmp_path / "bc"
    assert (
        main(
            [
                "solve",
                "--no-progress",
                "--problem",
                "logistic",
                "--data",
                "builtin:breast_cancer",
                "--nodes",
                "6",
                "--reg",
                "20",
                "--iters",
                "30",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    config = json.loads((out / "config.json").read_text())
    assert config["args"]["reg"] == 20 and config["graph"]["n"] == 6
    with np.load(out / "result.npz") as result:
        np.testing.assert_allclose(
            result["x_star"],
            pdmm.reference(breast_cancer(pdmm.topology("random_geometric", n=6, seed=0), l2=20.0)),
            atol=1e-8,
        )
    assert (
        main(
            [
                "solve",
                "--no-progress",
                "--problem",
                "logistic",
                "--data",
                "builtin:breast_cancer",
                "--nodes",
                "6",
                "--iters",
                "1",
                "--reference",
                "none",
                "--out",
                str(tmp_path / "default"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "default" / "config.json").read_text())["args"]["reg"] == 10.0


@pytest.mark.parametrize(
    "options, culprit",
    [
        (["--data", "builtin:breast_cancer"], "is a logistic data set; pass --problem logistic"),
        (["--problem", "logistic", "--data", "builtin:iris"], "unknown data set 'builtin:iris'"),
        (["--problem", "logistic", "--data", "builtin:breast_cancer", "--dim", "3"], "--dim size synthetic data"),
        (["--problem", "logistic", "--data", "builtin:breast_cancer", "--nodes", "600"], "at most 569"),
        (["--problem", "logistic", "--data", "builtin:breast_cancer", "--reg", "0"], "l2 must be > 0"),
    ],
)
def test_solve_refuses_bad_builtin_data_options_in_one_line(tmp_path, capsys, options, culprit):
    with pytest.raises(SystemExit) as exit:
        main(["solve", "--no-progress", *options, "--out", str(tmp_path / "run")])
    message = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and "\n" not in message and culprit in message
    assert not (tmp_path / "run").exists()
