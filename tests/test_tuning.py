"""pdmm.tune: the grid value it picks is the one a brute-force loop over full runs picks, its default grids, its
refusals; `pdmm-bridge solve --tune` end to end with the two-panel plot of the real-data example."""

import csv
import json

import matplotlib.image
import numpy as np
import pytest
from extras import needs_extra

import pdmm
from experiments.cli import main
from pdmm.tuning import ALPHA_FACTORS, RHO_GRID, default_grid


@pytest.fixture(scope="module")
def tiny():
    """Least squares on a 6-node ring, d = 2, and its cvxpy solution."""
    rng = np.random.default_rng(0)
    problem = pdmm.least_squares(pdmm.topology("ring", n=6), rng.normal(size=(6, 4, 2)), rng.normal(size=(6, 4)))
    return problem, pdmm.reference(problem)


def brute_force(problem, x_star, method, parameter, values, target, budget, **params):
    """The rule from every value's full run, recorded at every iteration: the first iteration whose error is at most
    target, fewest wins (then the smaller error there, then the earlier value); if none gets there, the smallest
    error after the budget; a diverged run never wins."""
    reached, final = [], []
    for index, value in enumerate(values):
        try:
            result = pdmm.solve(
                problem,
                method=method,
                reference=x_star,
                tol=0,
                max_iter=budget,
                record_every=1,
                **{parameter: value},
                **params,
            )
        except pdmm.DivergenceError:
            continue
        errors = result.history["error"]
        below = np.flatnonzero(errors <= target)
        if len(below):
            reached.append((below[0] + 1, errors[below[0]], index))
        final.append((errors[-1], index))
    return values[min(reached)[2]] if reached else values[min(final)[1]]


@pytest.mark.parametrize(
    "method, params, budget",
    [
        ("pdmm", {}, 150),
        ("pdmm", {"theta": 0.5}, 150),
        ("admm", {}, 150),
        ("qa-pdmm", {}, 150),
        ("extra", {}, 150),
        ("nids", {}, 150),
        ("gradient-tracking", {}, 400),
        ("dgd", {}, 150),  # reaches no target: the smallest error after the budget
        ("pdmm", {}, 12),  # a budget too short for any value: the same fallback
    ],
)
def test_tune_picks_the_value_a_brute_force_loop_picks(tiny, method, params, budget):
    problem, x_star = tiny
    parameter = pdmm.tuning.TUNED[method]
    values = default_grid(problem, method, **params)
    tuning = pdmm.tune(problem, method, reference=x_star, max_iter=budget, target=1e-6, **params)
    assert tuning.parameter == parameter and [trial.value for trial in tuning.trials] == list(values)
    assert tuning.value == brute_force(problem, x_star, method, parameter, values, 1e-6, budget, **params)
    assert tuning.best.reached == (method != "dgd" and budget > 12)
    if method != "dgd" and budget > 12:  # the grid holds values both sides of the best, and some diverge
        assert not tuning.at_edge


def test_ties_go_to_the_smaller_error_then_to_the_earlier_value(tiny):
    problem, x_star = tiny
    twice = pdmm.tune(problem, "pdmm", reference=x_star, values=[2.0, 0.5, 2.0], max_iter=400)
    first, _, again = twice.trials  # the third run, cut at the first's iterations, still reaches the target there
    assert twice.value == 2.0 and again.reached and again.iterations == first.iterations
    trials = [
        pdmm.tuning.Trial(1.0, 40, True, 5e-7, False),
        pdmm.tuning.Trial(2.0, 40, True, 2e-7, False),
        pdmm.tuning.Trial(3.0, 41, True, 1e-9, False),
        pdmm.tuning.Trial(4.0, 30, False, 1e-3, False),
    ]
    assert pdmm.tuning._choose(trials) == 2.0
    assert (
        pdmm.tuning._choose(
            [pdmm.tuning.Trial(1.0, 9, False, np.inf, True), pdmm.tuning.Trial(2.0, 50, False, 0.1, False)]
        )
        == 2.0
    )


def test_default_grids_are_the_stated_ones(tiny):
    problem, _ = tiny
    np.testing.assert_allclose(default_grid(problem, "admm"), 10.0 ** (np.arange(-8, 9) / 4), rtol=1e-15)
    assert len(RHO_GRID) == 17 and len(ALPHA_FACTORS) == 15
    L = float(problem.local.smoothness().max())
    np.testing.assert_allclose(default_grid(problem, "nids"), 2 ** (np.arange(-2, 13) / 2) / L, rtol=1e-12)  # auto 1/L
    low, _ = pdmm.spectral_interval(pdmm.mixing_matrix(problem.graph, "lazy_metropolis"))
    np.testing.assert_allclose(
        default_grid(problem, "extra", mixing="lazy_metropolis")[2], (1 + low) / (2 * L), rtol=1e-12
    )


@pytest.mark.parametrize(
    "call, culprit",
    [
        (lambda p, x: pdmm.tune(p, "gossip", reference=x), "'gossip' has no rho or step size to tune"),
        (lambda p, x: pdmm.tune(p, "pdmm", reference=x, rho=2.0), "tune chooses rho for pdmm"),
        (lambda p, x: pdmm.tune(p, "extra", reference=x, alpha=0.1), "tune chooses alpha for extra"),
        (lambda p, x: pdmm.tune(p, "pdmm", reference=x, values=[1.0, -2.0]), "values must be finite numbers > 0"),
        (lambda p, x: pdmm.tune(p, "pdmm", reference=x, target=0), "target must be a finite number > 0"),
        (
            lambda p, x: pdmm.tune(p, "extra", reference=x, values=[1e3, 1e4], max_iter=200),
            "every value of the grid diverged",
        ),
    ],
)
def test_bad_tuning_requests_are_one_line_errors(tiny, call, culprit):
    with pytest.raises(ValueError) as err:
        call(*tiny)
    assert culprit in str(err.value) and "\n" not in str(err.value)


def test_solve_tune_runs_each_method_at_its_tuned_value_and_plot_draws_error_against_iteration_and_bits(tmp_path):
    needs_extra("sklearn")  # the breast-cancer data
    out, figure = tmp_path / "bc", tmp_path / "bc.png"
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
                "5",
                "--compare",
                "pdmm,pdmm:theta=0.5,nids,dgd,extra:alpha=0.01",
                "--tune",
                "--iters",
                "40",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    methods = json.loads((out / "config.json").read_text())["methods"]
    with open(out / "tuning.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    for label, entry in methods.items():
        if label == "extra:alpha=0.01":  # its spec sets alpha: not tuned
            assert "tuning" not in entry
            continue
        tuning = entry["tuning"]
        assert label.endswith(f":{tuning['parameter']}={tuning['value']:.3g}")
        assert entry["params"][tuning["parameter"]] == tuning["value"] and tuning["max_iter"] == 40
        chosen = [row for row in rows if row["method"] == label and row["chosen"] == "1"]
        assert len(chosen) == 1 and float(chosen[0]["value"]) == pytest.approx(tuning["value"], rel=1e-5)
        assert len([row for row in rows if row["method"] == label]) == len(tuning["grid"])
    assert {label.split(":")[0] for label in methods} == {"pdmm", "nids", "dgd", "extra"} and len(methods) == 5
    assert main(["plot", str(out), "--metric", "error", "--x", "iteration,bits", "--out", str(figure)]) == 0
    assert matplotlib.image.imread(figure).shape[1] > 2 * matplotlib.image.imread(figure).shape[0]  # two panels wide


@pytest.mark.parametrize(
    "options, culprit",
    [
        (["--tune", "--reference", "none"], "--tune measures the error against the cvxpy solution"),
        (["--tune", "--rho", "2"], "--tune chooses rho"),
        (["--tune", "--compare", "gossip,pdmm:rho=1"], "--tune has nothing to tune"),
        (["--tune", "0"], "argument --tune: must be > 0"),
        (["--tune", "--nproc", "2"], "--tune runs in this process"),
    ],
)
def test_solve_refuses_a_tune_it_cannot_do_in_one_line(tmp_path, capsys, options, culprit):
    with pytest.raises(SystemExit) as exit:
        main(["solve", "--no-progress", "--nodes", "8", *options, "--out", str(tmp_path / "run")])
    message = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and "\n" not in message and culprit in message
    assert not (tmp_path / "run").exists()


def test_plot_refuses_an_unknown_axis_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["plot", str(tmp_path), "--x", "iteration,seconds"])
    message = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and "\n" not in message and "expected distinct axes" in message
