"""Grid values on the batch axis (pdmm/batch_runs.py, bridge.comparison.grid_errors): every value's iterates, errors,
trial and the value chosen are those of its own run with a number, pdmm.solve's or the classical rows' one-value
path, to 1e-12, for every tuned method and on grids where some values diverge."""

import math

import numpy as np
import pytest
import torch

import pdmm
from bridge import comparison
from bridge.consensus import GraphFamily
from bridge.selection import refine
from pdmm.batch_runs import per_instance
from pdmm.methods import METHODS
from pdmm.tuning import TUNED, default_grid

RTOL = 1e-12


@pytest.fixture(scope="module")
def tiny():
    """Least squares on a 6-node ring, two instances, d = 2, and its cvxpy solution."""
    rng = np.random.default_rng(0)
    problem = pdmm.least_squares(
        pdmm.topology("ring", n=6), rng.normal(size=(2, 6, 4, 2)), rng.normal(size=(2, 6, 4)), ridge=0.1
    )
    return problem, pdmm.reference(problem)


@pytest.fixture(scope="module")
def logistic():
    """Logistic regression on an 8-node ring, two instances: pdmm's x-update is a Newton loop per instance."""
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(2, 8, 20, 3)), np.sign(rng.normal(size=(2, 8, 20)))
    problem = pdmm.logistic(pdmm.topology("ring", n=8), X, y, reg=0.1)
    return problem, pdmm.reference(problem)


@pytest.fixture(scope="module")
def lasso():
    """The lasso on an 8-node ring, two instances, d = 3: pdmm's x-update is ADMM polished per instance."""
    rng = np.random.default_rng(2)
    problem = pdmm.lasso(pdmm.topology("ring", n=8), rng.normal(size=(2, 8, 5, 3)), rng.normal(size=(2, 8, 5)), lam=0.3)
    return problem, pdmm.reference(problem)


# (method, its fixed parameters, budget); qa-pdmm with a small eta diverges at most values of rho, the step-size
# methods diverge at the top of their default grids
CASES = [
    ("pdmm", {}, 150),
    ("pdmm", {"theta": 0.5}, 150),
    ("admm", {}, 150),
    ("qa-pdmm", {}, 150),
    ("qa-pdmm", {"eta": "small"}, 150),
    ("dgd", {}, 150),
    ("extra", {}, 150),
    ("nids", {}, 150),
    ("gradient-tracking", {}, 400),
]


def fixed(problem, params):
    """params with eta="small" replaced by 0.4 L, an eta at which qa-pdmm diverges for most rho."""
    if params.get("eta") == "small":
        return {**params, "eta": 0.4 * float(problem.local.smoothness().max())}
    return params


def separate_trials(problem, x_star, method, values, budget, target, **params):
    """pdmm.tune's rule from one pdmm.solve per value, each with the number (the reference): (iterations, reached,
    error, diverged) per value and the chosen value, each later value's budget cut to the fewest iterations to the
    target before it."""
    parameter, trials = TUNED[method], []
    for value in values:
        try:
            result = pdmm.solve(
                problem,
                method=method,
                reference=x_star,
                tol=0,
                target=target,
                max_iter=budget,
                history=("error",),
                **{parameter: float(value)},
                **params,
            )
        except pdmm.DivergenceError as err:
            trials.append((err.result.iterations, False, math.inf, True))
            continue
        error = float(np.max(result.history["error"][-1]))
        trials.append((result.iterations, error <= target, error, False))
        if trials[-1][1]:
            budget = min(budget, result.iterations)
    reached = [(t[0], t[2], i) for i, t in enumerate(trials) if t[1]]
    finite = [(t[2], i) for i, t in enumerate(trials) if not t[3]]
    return trials, values[min(reached)[2] if reached else min(finite)[1]]


def assert_same_trials(tuning, trials):
    assert len(tuning.trials) == len(trials)
    for trial, (iterations, reached, error, diverged) in zip(tuning.trials, trials, strict=True):
        assert (trial.iterations, trial.reached, trial.diverged) == (iterations, reached, diverged), trial
        assert trial.error == pytest.approx(error, rel=RTOL, abs=RTOL) if math.isfinite(error) else trial.error == error


@pytest.mark.parametrize("method, params, budget", CASES)
def test_tune_in_one_batch_equals_one_run_per_value(tiny, method, params, budget):
    problem, x_star = tiny
    params = fixed(problem, params)
    values = default_grid(problem, method, **params)
    tuning = pdmm.tune(problem, method, reference=x_star, max_iter=budget, **params)
    trials, chosen = separate_trials(problem, x_star, method, values, budget, pdmm.tuning.TARGET, **params)
    assert_same_trials(tuning, trials)
    assert tuning.value == chosen
    if method in ("extra", "nids", "gradient-tracking", "dgd") or "eta" in params:
        assert any(t[3] for t in trials) and not all(t[3] for t in trials)  # the grid holds diverging values


@pytest.mark.parametrize("case", ["logistic", "lasso"])
@pytest.mark.parametrize("method", ["pdmm", "admm"])
def test_prox_solvers_keep_each_value_to_its_own_run(request, case, method):
    """pdmm's and admm's x-updates on logistic (Newton) and lasso (polished ADMM) iterate until each instance is done:
    a value's run in the batch is its own."""
    problem, x_star = request.getfixturevalue(case)
    values = np.array([0.1, 0.5, 2.0, 8.0])
    tuning = pdmm.tune(problem, method, reference=x_star, values=values, max_iter=120)
    trials, chosen = separate_trials(problem, x_star, method, values, 120, pdmm.tuning.TARGET)
    assert_same_trials(tuning, trials)
    assert tuning.value == chosen


def test_a_network_runs_one_value_at_a_time_and_picks_as_before(tiny):
    problem, x_star = tiny
    network = pdmm.Network(drop=0.1, seed=3)
    values = np.array([0.5, 1.0, 2.0])
    tuning = pdmm.tune(problem, "pdmm", reference=x_star, values=values, max_iter=200, network=network)
    trials, chosen = separate_trials(problem, x_star, "pdmm", values, 200, pdmm.tuning.TARGET, network=network)
    assert_same_trials(tuning, trials)
    assert tuning.value == chosen


def test_small_batches_of_values_carry_the_budget_over(tiny, monkeypatch):
    """The grid split into batches of two values (BATCH_BYTES) gives the trials of one batch."""
    problem, x_star = tiny
    whole = pdmm.tune(problem, "extra", reference=x_star, max_iter=150)
    monkeypatch.setattr(
        pdmm.batch_runs, "BATCH_BYTES", 2 * problem.compiled.num_edges * problem.batch * problem.dim * 8
    )
    pieces = pdmm.tune(problem, "extra", reference=x_star, max_iter=150)
    assert [(t.iterations, t.reached, t.error, t.diverged) for t in pieces.trials] == [
        (t.iterations, t.reached, t.error, t.diverged) for t in whole.trials
    ]


@pytest.mark.parametrize("method, params", [(m, p) for m, p, _ in CASES])
def test_iterates_and_errors_per_round_equal_the_runs_with_a_number(tiny, method, params):
    """The method stepped on the tiled problem with the grid on the batch axis against pdmm.solve with each number:
    x after the last round and the error of every round, up to where a diverging run stops."""
    problem, x_star = tiny
    params = fixed(problem, params)
    parameter, values, rounds = TUNED[method], default_grid(problem, method, **params), 60
    G, B = len(values), problem.batch
    graph, local, edges = problem.tiled(G).compile("cpu", torch.float64)
    grid = per_instance(values, B, torch.empty(0, dtype=torch.float64))
    rho = grid.view(1, -1, 1) if parameter == "rho" else None
    algorithm = METHODS[method](graph, local, edges, rho, **params, **({} if rho is not None else {"alpha": grid}))
    state = algorithm.init(torch.zeros(problem.n, G * B, problem.dim, dtype=torch.float64))
    star = torch.as_tensor(np.moveaxis(x_star, 0, 1)).repeat(1, G, 1)
    errors = []
    for _ in range(rounds):
        state = algorithm.step(state)
        errors.append(
            torch.linalg.vector_norm(state["x"] - star, dim=(0, 2)) / torch.linalg.vector_norm(star, dim=(0, 2))
        )
    errors = torch.stack(errors).view(rounds, G, B).numpy()
    x = state["x"].view(problem.n, G, B, problem.dim)
    diverged = 0
    for g, value in enumerate(values):
        try:
            result = pdmm.solve(
                problem,
                method=method,
                reference=x_star,
                tol=0,
                max_iter=rounds,
                record_every=1,
                history=("error",),
                **{parameter: float(value)},
                **params,
            )
        except pdmm.DivergenceError as err:
            result, diverged = err.result, diverged + 1
        else:
            np.testing.assert_allclose(x[:, g].permute(1, 0, 2).numpy(), result.x, rtol=RTOL, atol=0)
        done = len(result.history["error"])
        np.testing.assert_allclose(errors[:done, g], result.history["error"], rtol=RTOL, atol=0)
    assert diverged < G


@pytest.fixture(scope="module")
def averaging_sets():
    """Compare's tuning instances and its ring set (on which chebyshev's tuned intervals diverge)."""
    setting = comparison.Setting(GraphFamily("random_geometric", 12, 18), depth=4, rounds=12, tune_graphs=2, batch=4)
    sets, tuning, _ = setting.draw(0)
    return comparison.compiled(tuning), comparison.compiled(sets["ring"][:2])


def start_grid(name):
    """The values a classical row's search starts from ([None] for gossip, which has nothing to tune)."""
    search = comparison.TUNED[name][3]
    return [None] if search is None else [search.value(p) for p in search.start]


@pytest.mark.parametrize("name", list(comparison.TUNED))
def test_classical_rows_on_the_batch_axis_equal_one_run_per_value(averaging_sets, name):
    method, fixed_params, key, _ = comparison.TUNED[name]
    grid = start_grid(name)
    for instances in averaging_sets:
        batched = comparison.grid_errors(method, fixed_params, key, grid, 30, instances)
        separate = torch.stack(
            [
                comparison.classical_errors(
                    method, fixed_params if v is None else {**fixed_params, key: v}, 30, instances
                )
                for v in grid
            ]
        )
        finite = torch.isfinite(separate)
        assert torch.equal(finite, torch.isfinite(batched))
        np.testing.assert_allclose(batched[finite].numpy(), separate[finite].numpy(), rtol=RTOL, atol=0)
    if name == "chebyshev":  # the grid holds intervals that blow up on rings: they are kept apart
        assert separate.abs().max() > 1e6


def test_tune_classical_chooses_the_values_one_run_per_value_chooses(averaging_sets):
    """tune_classical (batched runs) chooses what bridge.selection.refine chooses when every value it proposes is
    scored by a run of its own, and never worse than the start grid's best."""
    tuning, ring = averaging_sets
    setting = comparison.Setting(GraphFamily("random_geometric", 12, 18), depth=4, rounds=12, tune_graphs=2, batch=4)
    for name in ("pdmm", "chebyshev"):
        method, fixed_params, key, search = comparison.TUNED[name]
        result = comparison.SeedResult()
        comparison.tune_classical(
            name, setting, tuning, tuning, {"ring": ring}, comparison.runs._Recorder(setting, result), result
        )

        def one_by_one(values, last, method=method, fixed_params=fixed_params, key=key):
            return np.stack(
                [
                    comparison.mean_log(comparison.classical_errors(method, {**fixed_params, key: v}, last, tuning))
                    for v in values
                ]
            )

        refined = refine(search, one_by_one, range(1, 13), comparison.TUNE_TOLERANCE)
        expected = {r: comparison.tuning._plain(search.value(p)) for r, p in refined.choice.items()}
        assert result.fitted[f"{name}: {key} per round"] == expected
        start = one_by_one(start_grid(name), 12)
        assert all(refined.score[r] <= start[:, r - 1].min() + 1e-12 for r in range(1, 13))


def test_per_instance_parameters_are_checked(tiny):
    problem, _ = tiny
    graph, local, edges = problem.compile("cpu", torch.float64)
    with pytest.raises(ValueError, match="alpha must be"):
        METHODS["extra"](graph, local, edges, None, alpha=torch.tensor([0.1, -0.1], dtype=torch.float64))
    with pytest.raises(ValueError, match="for every instance"):
        METHODS["chebyshev"](
            *pdmm.averaging(pdmm.topology("ring", n=6), np.ones((2, 6, 1))).compile("cpu", torch.float64),
            None,
            interval=(torch.tensor([-0.5, 0.5]), torch.tensor([0.9, 0.4])),
        )


@pytest.mark.parametrize("case", ["logistic", "lasso"])
def test_an_instance_that_blew_up_leaves_the_x_update_of_the_others_as_it_was(request, case):
    """The iterative x-updates (Newton for logistic, polished ADMM for the lasso) stop each instance on its own test:
    instance 0's x is the same, bit for bit, whether instance 1 beside it is sound or has u = inf."""
    problem, _ = request.getfixturevalue(case)
    graph, local, edges = problem.compile("cpu", torch.float64)
    u = torch.randn(local.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    broken = u.clone()
    broken[:, 1] = math.inf
    sound = local.prox(edges.curvature(1.0))(u)
    beside = local.prox(edges.curvature(1.0))(broken)
    assert torch.equal(beside[:, 0], sound[:, 0])
