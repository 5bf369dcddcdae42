"""DGD, EXTRA / PG-EXTRA, NIDS and gradient tracking (pdmm.decentralised, docs/decentralised.md): against cvxpy,
iterate by iterate against per-node loops written here from the papers' equations, their message and bit counts,
their refusals and the solve command's specs for them."""

import csv
import json

import networkx as nx
import numpy as np
import pytest
import solve_cli
import torch
from mixing_reference import metropolis

import pdmm
from experiments.cli import main
from experiments.runs import load_solve
from experiments.solve_curves import with_counts
from pdmm.decentralised import DGD, EXTRA, NIDS, GradientTracking
from pdmm.local import LocalFunction

METHODS = ("dgd", "extra", "nids", "gradient-tracking")
EXACT = ("extra", "nids", "gradient-tracking")  # converge to the solution with a constant step
PROXIMAL = ("extra", "nids")  # run lasso in their proximal form
ROUNDS = 30


def graph(n=10, seed=1):
    return pdmm.topology("random_geometric", n=n, seed=seed)


def data(n, rows=6, d=3, batch=None, seed=0):
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    H = rng.normal(size=(*lead, n, rows, d))
    y = (H @ rng.normal(size=(*lead, 1, d, 1)))[..., 0] + 0.3 * rng.normal(size=(*lead, n, rows))
    return H, y


def problem(kind, n=10, batch=None, seed=0):
    G = graph(n)
    rng = np.random.default_rng(seed + 10)
    lead = () if batch is None else (batch,)
    H, y = data(n, batch=batch, seed=seed)
    if kind == "averaging":
        return pdmm.averaging(G, 2 + rng.normal(size=(*lead, n, 3)))
    if kind == "least squares":
        return pdmm.least_squares(G, H, y, ridge=0.1)
    if kind == "logistic":
        return pdmm.logistic(G, H, np.sign(y), reg=0.5)
    if kind == "quadratic":
        M = rng.normal(size=(*lead, n, 3, 3))
        return pdmm.quadratic(G, M @ np.swapaxes(M, -1, -2) + 0.1 * np.eye(3), rng.normal(size=(*lead, n, 3)))
    return pdmm.lasso(G, H, y, lam=20.0)


def relative_error(x, x_star):
    return np.linalg.norm(x - x_star) / np.linalg.norm(x_star)


# --- convergence to the centralised solution ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["averaging", "least squares", "logistic", "quadratic"])
@pytest.mark.parametrize("method", EXACT)
def test_converges_to_the_cvxpy_solution(method, kind, device):
    p = problem(kind)
    result = pdmm.solve(p, method=method, max_iter=20000, tol=1e-13, reference="cvxpy", device=device)
    assert result.converged, result
    assert relative_error(result.x, result.reference) < 1e-8


@pytest.mark.parametrize("method", PROXIMAL)
def test_the_proximal_forms_converge_on_lasso(method, device):
    p = problem("lasso")
    result = pdmm.solve(p, method=method, max_iter=20000, tol=1e-13, reference="cvxpy", device=device)
    assert result.converged and relative_error(result.x, result.reference) < 1e-8
    assert 0 < np.sum(np.abs(result.reference[0]) < 1e-6) < 3, "lam should zero some but not all coordinates"


@pytest.mark.parametrize("method", METHODS)
def test_batched_instances_each_converge_with_their_own_step(method):
    p = problem("least squares", batch=2)
    result = (
        pdmm.solve(p, method=method, max_iter=3000, tol=1e-13, reference="cvxpy", step="diminishing")
        if method == "dgd"
        else pdmm.solve(p, method=method, max_iter=20000, tol=1e-13, reference="cvxpy")
    )
    assert result.x.shape == (2, 10, 3) and result.history["error"].shape[1] == 2
    if method != "dgd":
        assert result.converged and relative_error(result.x, result.reference) < 1e-8
    else:
        assert np.all(np.diff(result.history["error"], axis=0) < 0)


def dgd_limit(p, W, alpha):
    """The fixed point of constant-step DGD on an averaging problem: (I - W) x + alpha (x - a) = 0, per coordinate."""
    a = p.local.q.numpy()[:, 0]
    return np.linalg.solve((1 + alpha) * np.eye(len(W)) - W, alpha * a)


def test_constant_step_dgd_stops_in_an_order_alpha_neighbourhood_and_never_passes_the_stopping_test():
    p = problem("averaging")
    W = pdmm.mixing_matrix(p.graph).toarray()
    x_star = np.tile(p.local.q.numpy()[:, 0].mean(0), (10, 1))
    errors = []
    for alpha in (0.1, 0.05, 0.025):
        result = pdmm.solve(p, method="dgd", alpha=alpha, max_iter=3000, tol=1e-12)
        assert not result.converged and result.iterations == 3000
        np.testing.assert_allclose(result.x, dgd_limit(p, W, alpha), rtol=0, atol=1e-10)
        errors.append(relative_error(result.x, x_star))
    assert errors[0] > 1e-3
    ratios = np.array(errors[1:]) / errors[:-1]
    assert np.all((0.5 < ratios) & (ratios < 0.6)), ratios  # O(alpha): halving alpha about halves the error


def test_diminishing_step_dgd_keeps_reducing_the_error_slowly():
    p = problem("least squares")
    result = pdmm.solve(p, method="dgd", step="diminishing", max_iter=4000, reference="cvxpy", record_every=1)
    error = result.history["error"]
    checkpoints = error[[9, 99, 999, 3999]]
    assert np.all(np.diff(checkpoints) < 0) and not result.converged
    constant = pdmm.solve(p, method="dgd", max_iter=4000, reference="cvxpy").history["error"][-1]
    assert checkpoints[-1] < constant / 10  # past the constant step's neighbourhood
    assert checkpoints[-1] > 1e-4  # but far from 1e-8: O(1 / sqrt(k))-type progress


# --- iterate by iterate against the papers' equations, one node at a time ------------------------------------------


class Nodes:
    """The local data of a least squares or lasso problem, node by node: gradients of the smooth part and the
    prox of the l1 part, with the mixing matrix's entries; instance b, arrays per node (d,)."""

    def __init__(self, H, y, W, t=0.0):
        self.H, self.y, self.W, self.t = H, y, W, t
        self.n = len(W)
        self.neighbours = [[j for j in range(self.n) if j != i and W[i, j] != 0] for i in range(self.n)]

    def grad(self, b, i, x):
        return self.H[b, i].T @ (self.H[b, i] @ x - self.y[b, i])

    def L(self, b):
        return max(np.linalg.eigvalsh(self.H[b, i].T @ self.H[b, i])[-1] for i in range(self.n))

    def mix(self, i, x, tilde=False):
        """sum_j W_ij x_j over i and its neighbours, or with W~ = (I + W) / 2."""
        weight = (lambda i, j: ((i == j) + self.W[i, j]) / 2) if tilde else (lambda i, j: self.W[i, j])
        return weight(i, i) * x[i] + sum(weight(i, j) * x[j] for j in self.neighbours[i])

    def prox(self, v, alpha):
        return np.sign(v) * np.maximum(np.abs(v) - alpha * self.t, 0)


def dgd_loop(nodes, b, x0, alpha, rounds, diminishing):
    xs, x = [], x0.copy()
    for k in range(rounds):
        step = alpha / np.sqrt(k + 1) if diminishing else alpha
        x = np.array([nodes.mix(i, x) - step * nodes.grad(b, i, x[i]) for i in range(nodes.n)])
        xs.append(x)
    return xs


def extra_loop(nodes, b, x0, alpha, rounds):
    """EXTRA, Shi et al. 2015: x^1 = W x^0 - a grad f(x^0), x^{k+2} = (I + W) x^{k+1} - W~ x^k - a (g^{k+1} - g^k)."""
    n = nodes.n
    previous = x0
    x = np.array([nodes.mix(i, x0) - alpha * nodes.grad(b, i, x0[i]) for i in range(n)])
    xs = [x]
    for _ in range(rounds - 1):
        new = np.array(
            [
                x[i]
                + nodes.mix(i, x)
                - nodes.mix(i, previous, tilde=True)
                - alpha * (nodes.grad(b, i, x[i]) - nodes.grad(b, i, previous[i]))
                for i in range(n)
            ]
        )
        previous, x = x, new
        xs.append(x)
    return xs


def pg_extra_loop(nodes, b, x0, alpha, rounds):
    """PG-EXTRA, Shi et al. 2015: x^{1/2} = W x^0 - a grad s(x^0), x^1 = prox(x^{1/2}),
    x^{k+3/2} = W x^{k+1} + x^{k+1/2} - W~ x^k - a (grad s(x^{k+1}) - grad s(x^k)), x^{k+2} = prox(x^{k+3/2})."""
    n = nodes.n
    half = np.array([nodes.mix(i, x0) - alpha * nodes.grad(b, i, x0[i]) for i in range(n)])
    previous, x = x0, nodes.prox(half, alpha)
    xs = [x]
    for _ in range(rounds - 1):
        half = np.array(
            [
                nodes.mix(i, x)
                + half[i]
                - nodes.mix(i, previous, tilde=True)
                - alpha * (nodes.grad(b, i, x[i]) - nodes.grad(b, i, previous[i]))
                for i in range(n)
            ]
        )
        previous, x = x, nodes.prox(half, alpha)
        xs.append(x)
    return xs


def nids_loop(nodes, b, x0, alpha, rounds):
    """NIDS, Li, Shi, Yan 2019, W~ = (I + W) / 2: z^1 = x^0 - a grad s(x^0), x^1 = prox(z^1),
    z^{k+1} = z^k - x^k + W~ (2 x^k - x^{k-1} - a grad s(x^k) + a grad s(x^{k-1})), x^{k+1} = prox(z^{k+1})."""
    n = nodes.n
    z = np.array([x0[i] - alpha * nodes.grad(b, i, x0[i]) for i in range(n)])
    previous, x = x0, nodes.prox(z, alpha)
    xs = [x]
    for _ in range(rounds - 1):
        sent = np.array(
            [
                2 * x[i] - previous[i] - alpha * nodes.grad(b, i, x[i]) + alpha * nodes.grad(b, i, previous[i])
                for i in range(n)
            ]
        )
        z = np.array([z[i] - x[i] + nodes.mix(i, sent, tilde=True) for i in range(n)])
        previous, x = x, nodes.prox(z, alpha)
        xs.append(x)
    return xs


def tracking_loop(nodes, b, x0, alpha, rounds):
    """DIGing: y^0 = grad f(x^0), x^{k+1} = W x^k - a y^k, y^{k+1} = W y^k + grad f(x^{k+1}) - grad f(x^k)."""
    n = nodes.n
    x = x0
    y = np.array([nodes.grad(b, i, x0[i]) for i in range(n)])
    xs = []
    for _ in range(rounds):
        new = np.array([nodes.mix(i, x) - alpha * y[i] for i in range(n)])
        y = np.array([nodes.mix(i, y) + nodes.grad(b, i, new[i]) - nodes.grad(b, i, x[i]) for i in range(n)])
        x = new
        xs.append(x)
    return xs


def default_alpha(method, L, lowest):
    """docs/decentralised.md section 6."""
    return {
        "dgd": (1 + lowest) / (2 * L),
        "extra": (1 + lowest) / (2 * L),
        "nids": 1 / L,
        "gradient-tracking": (1 + lowest) ** 2 / (4 * L),
    }[method]


LOOPS = {
    ("dgd", "least squares"): lambda *a: dgd_loop(*a, diminishing=False),
    ("dgd:diminishing", "least squares"): lambda *a: dgd_loop(*a, diminishing=True),
    ("extra", "least squares"): extra_loop,
    ("extra", "lasso"): pg_extra_loop,
    ("nids", "least squares"): nids_loop,
    ("nids", "lasso"): nids_loop,
    ("gradient-tracking", "least squares"): tracking_loop,
}


@pytest.mark.parametrize("alpha", ["auto", 0.03])
@pytest.mark.parametrize("spec, kind", LOOPS, ids=[f"{m}-{k}" for m, k in LOOPS])
def test_every_iterate_is_the_papers_per_node_recursion(spec, kind, alpha, device):
    n, B, d = 8, 2, 2
    G = graph(n, seed=3)
    H, y = data(n, rows=4, d=d, batch=B, seed=5)
    lam = 10.0  # the prox zeroes entries on the way: 150-210 of the 480 numbers of 30 iterates
    p = pdmm.least_squares(G, H, y) if kind == "least squares" else pdmm.lasso(G, H, y, lam=lam)
    nodes = Nodes(H, y, metropolis(G), t=lam / n if kind == "lasso" else 0.0)
    x0 = np.random.default_rng(6).normal(size=(B, n, d))
    method, _, step = spec.partition(":")
    params = {"step": step} if step else {}
    lowest = np.linalg.eigvalsh(nodes.W)[0]
    for b in range(B):
        a = default_alpha(method, nodes.L(b), lowest) if alpha == "auto" else alpha
        expected = LOOPS[(spec, kind)](nodes, b, x0[b], a, ROUNDS)
        assert kind != "lasso" or sum((x == 0).sum() for x in expected) > 100
        for k in range(1, ROUNDS + 1):
            x = pdmm.solve(p, method=method, alpha=alpha, max_iter=k, tol=0, x0=x0, device=device, **params).x
            np.testing.assert_allclose(x[b], expected[k - 1], rtol=1e-12, atol=1e-12, err_msg=f"iteration {k}")


def test_a_mixing_matrix_given_as_an_array_runs_like_its_kind_also_when_renumbered():
    p = problem("least squares")
    W = metropolis(p.graph)
    order = np.random.default_rng(0).permutation(10)
    for method in METHODS:
        by_kind = pdmm.solve(p, method=method, max_iter=40, tol=0).x
        np.testing.assert_allclose(
            pdmm.solve(p, method=method, max_iter=40, tol=0, mixing=W).x, by_kind, rtol=0, atol=1e-13
        )
        np.testing.assert_allclose(
            pdmm.solve(p, method=method, max_iter=40, tol=0, mixing=W, reorder=order).x, by_kind, rtol=0, atol=1e-12
        )


def test_lazy_metropolis_is_another_run_that_converges():
    p = problem("least squares")
    default = pdmm.solve(p, method="extra", max_iter=30, tol=0)
    lazy = pdmm.solve(p, method="extra", mixing="lazy_metropolis", max_iter=20000, tol=1e-13, reference="cvxpy")
    assert not np.allclose(pdmm.solve(p, method="extra", mixing="lazy_metropolis", max_iter=30, tol=0).x, default.x)
    assert lazy.converged and relative_error(lazy.x, lazy.reference) < 1e-8


# --- the step sizes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_auto_alpha_is_the_documented_rule_per_instance(method):
    p = problem("logistic", batch=2)
    graph_, local, edges = p.compile("cpu", torch.float64)
    algorithm = pdmm.METHODS[method](graph_, local, edges, None)
    lowest = np.linalg.eigvalsh(metropolis(p.graph))[0]
    X = p.local.X.numpy()
    for b in range(2):  # logistic: L_i = lambda_max(X_i^T X_i) / 4 + reg
        L = max(np.linalg.eigvalsh(X[i, b].T @ X[i, b])[-1] / 4 + 0.5 for i in range(10))
        assert algorithm.alpha[0, b, 0].item() == pytest.approx(default_alpha(method, L, lowest), rel=1e-12)


def test_a_step_far_above_the_bound_diverges():
    with pytest.raises(pdmm.DivergenceError, match="extra diverged"):
        pdmm.solve(problem("least squares"), method="extra", alpha=1.0, max_iter=2000)


# --- messages and bits ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, bits", [(torch.float64, 64), (torch.float32, 32)])
@pytest.mark.parametrize("method", METHODS)
def test_messages_and_bits_are_what_the_products_with_W_carry(method, dtype, bits, monkeypatch):
    """Every product with W sends, per directed edge, one vector of d numbers for every d columns it multiplies;
    the counts must be the running total of what the steps multiplied."""
    p = problem("least squares")
    E, d = p.compiled.num_edges, p.dim
    carried, per_step = [], []
    product = pdmm.mixing.MixingProduct.__call__

    def counting(self, x, *args, **kwargs):
        carried.append(x.shape[-1] // d)
        return product(self, x, *args, **kwargs)

    def stepping(step):
        def counted(self, state):
            carried.clear()
            new = step(self, state)
            per_step.append(sum(carried))
            return new

        return counted

    cls = pdmm.METHODS[method]
    monkeypatch.setattr(pdmm.mixing.MixingProduct, "__call__", counting)
    monkeypatch.setattr(cls, "step", stepping(cls.step))
    result = pdmm.solve(p, method=method, max_iter=25, tol=0, dtype=dtype, record_every=1)
    vectors = np.cumsum(per_step) * E
    np.testing.assert_array_equal(result.history["messages"], vectors)
    np.testing.assert_array_equal(result.history["bits"], vectors * d * bits)
    expected = {"dgd": 1, "extra": 1, "nids": 1, "gradient-tracking": 2}[method]
    assert per_step == ([0] if method == "nids" else [expected]) + [expected] * 24  # NIDS: its first step is local


# --- Ctrl-C and options --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_ctrl_c_returns_the_iterations_done(method, monkeypatch):
    cls, calls = pdmm.METHODS[method], []
    step = cls.step

    def interrupting(self, state):
        calls.append(1)
        if len(calls) == 13:
            raise KeyboardInterrupt
        return step(self, state)

    monkeypatch.setattr(cls, "step", interrupting)
    result = pdmm.solve(problem("least squares"), method=method, max_iter=100, tol=0)
    monkeypatch.setattr(cls, "step", step)
    assert result.interrupted and result.iterations == 12
    np.testing.assert_array_equal(result.x, pdmm.solve(problem("least squares"), method=method, max_iter=12, tol=0).x)


def test_x0_is_taken_and_zero_by_default():
    p = problem("least squares")
    zeros = pdmm.solve(p, method="extra", max_iter=5, tol=0, x0=np.zeros((10, 3))).x
    np.testing.assert_array_equal(pdmm.solve(p, method="extra", max_iter=5, tol=0).x, zeros)
    assert not np.allclose(pdmm.solve(p, method="extra", max_iter=5, tol=0, x0="random").x, zeros)


def test_params_record_what_was_given_and_classes_are_registered():
    assert [pdmm.METHODS[m] for m in METHODS] == [DGD, EXTRA, NIDS, GradientTracking]
    result = pdmm.solve(problem("averaging"), method="gradient-tracking", alpha=0.2, max_iter=5)
    assert result.params == {"alpha": 0.2}


# --- refusals ------------------------------------------------------------------------------------------------------

G6 = pdmm.topology("ring", n=6)


def least_squares_on(G, **kwargs):
    H, y = data(G.number_of_nodes())
    return pdmm.least_squares(G, H, y, **kwargs)


def half_ring_mixing():
    """Zero diagonal, 1/2 per edge on an even ring: symmetric and stochastic, eigenvalue -1 (bipartite)."""
    return (np.roll(np.eye(6), 1, 1) + np.roll(np.eye(6), -1, 1)) / 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rho": 1.0}, "has no penalty parameter: leave rho out"),
        (
            {"network": pdmm.Network(privacy=1.0)},
            "^network privacy perturbs the dual variables z of pdmm and qa-pdmm; "
            "(dgd|extra|nids|gradient-tracking) has none",
        ),
        ({"form": "nodes"}, "form='nodes' is not available here"),
        ({"mixing": "uniform"}, "unknown mixing kind 'uniform'"),
        ({"mixing": np.ones((6, 6)) / 6}, "nonzero off the graph"),
        ({"mixing": np.eye(6)}, "in 6 separate parts"),
        ({"mixing": half_ring_mixing()}, "needs the mixing matrix's smallest eigenvalue above -1, got -1"),
        (
            {"mixing": 2 * np.eye(6) - metropolis(G6)},
            "needs every eigenvalue of the mixing matrix but that of the all-ones vector below 1",
        ),
        ({"mixing": metropolis(G6) + 1e-3 * np.eye(6)}, "rows of the mixing matrix must sum to 1"),
        ({"alpha": 0}, "alpha must be 'auto' or a finite number > 0, got 0"),
        ({"alpha": -0.1}, "alpha must be 'auto' or a finite number > 0"),
        ({"alpha": float("nan")}, "alpha must be 'auto' or a finite number > 0"),
        ({"alpha": "fast"}, "alpha must be 'auto' or a finite number > 0, got 'fast'"),
        ({"theta": 0.5}, "bad parameter"),
    ],
)
@pytest.mark.parametrize("method", METHODS)
def test_options_they_do_not_take_are_refused_in_one_line(method, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message) as error:
        pdmm.solve(least_squares_on(G6), method=method, **kwargs)
    assert "\n" not in str(error.value)


def test_only_dgd_takes_a_step_schedule():
    with pytest.raises(ValueError, match="step must be 'constant' or 'diminishing', got 'fast'"):
        pdmm.solve(least_squares_on(G6), method="dgd", step="fast")
    with pytest.raises(TypeError, match="bad parameter"):
        pdmm.solve(least_squares_on(G6), method="extra", step="diminishing")


EDGE_MATRICES = {(i, (i + 1) % 6): (np.eye(3), -np.eye(3), np.zeros(3)) for i in range(6)}


class Absolute(LocalFunction):
    """f_i(x) = ||x - a_i||_1: not smooth, and no proximal split given."""

    smooth = False

    def __init__(self, a):
        self.a, self.shape = a, tuple(a.shape)


@pytest.mark.parametrize(
    "method, make, message",
    [
        *[
            (
                m,
                lambda: least_squares_on(G6, constraints=EDGE_MATRICES),
                "solves consensus problems only "
                r"\(constraints='consensus'\); this problem has edge-matrix constraints",
            )
            for m in METHODS
        ],
        *[
            (
                m,
                lambda: least_squares_on(G6, constraints={k: (*v, "<=") for k, v in EDGE_MATRICES.items()}),
                "solves consensus problems only",
            )
            for m in METHODS
        ],
        *[
            (
                m,
                lambda: pdmm.lasso(G6, *data(6), lam=1.0),
                f"^{m} needs smooth local functions; Lasso is not smooth "
                r"\(its proximal form runs with method='extra' \(PG-EXTRA\) or 'nids'\)$",
            )
            for m in ("dgd", "gradient-tracking")
        ],
        *[
            (
                m,
                lambda: pdmm.Problem(G6, Absolute(torch.zeros(6, 1, 2))),
                "^Absolute is not smooth and has no proximal "
                r"split f_i = s_i \+ r_i \(LocalFunction.composite\)$",
            )
            for m in PROXIMAL
        ],
        *[
            (
                m,
                lambda: pdmm.Problem(G6, Absolute(torch.zeros(6, 1, 2))),
                f"^{m} needs smooth local functions; Absolute is not smooth$",
            )
            for m in ("dgd", "gradient-tracking")
        ],
    ],
)
def test_problems_they_cannot_solve_are_refused_in_one_line(method, make, message):
    with pytest.raises(ValueError, match=message) as error:
        pdmm.solve(make(), method=method)
    assert "\n" not in str(error.value)


def test_the_constructor_itself_refuses_rho():
    graph_, local, edges = least_squares_on(G6).compile("cpu", torch.float64)
    with pytest.raises(ValueError, match="^extra has no penalty parameter rho"):
        EXTRA(graph_, local, edges, 1.0)


# --- the solve and plot commands -----------------------------------------------------------------------------------


def solve_command(out, *options):
    return solve_cli.solve_command(out, *options, nodes=15)


def test_the_command_compares_every_method_with_their_specs_and_plots_them(tmp_path):
    out = tmp_path / "run"
    labels = [
        "pdmm",
        "dgd",
        "extra",
        "nids",
        "gradient-tracking",
        "extra:alpha=0.05",
        "dgd:step=diminishing",
        "nids:mixing=lazy_metropolis",
    ]
    assert solve_command(out, "--problem", "least_squares", "--iters", "3000", "--compare", ",".join(labels)) == 0
    with open(out / "history.csv", newline="") as file:
        assert list(dict.fromkeys(row["method"] for row in csv.DictReader(file))) == labels
    methods = json.loads((out / "config.json").read_text())["methods"]
    assert methods["extra:alpha=0.05"]["params"] == {"mixing": "metropolis", "alpha": 0.05}
    assert methods["dgd:step=diminishing"]["params"] == {"mixing": "metropolis", "alpha": "auto", "step": "diminishing"}
    assert all(methods[label]["converged"] and methods[label]["error"] < 1e-8 for label in labels if "dgd" not in label)
    assert not methods["dgd"]["converged"] and methods["dgd"]["iterations"] == 3000
    E = 2 * nx.number_of_edges(pdmm.topology("random_geometric", n=15, seed=0))
    assert methods["gradient-tracking"]["messages"] == 2 * E * methods["gradient-tracking"]["iterations"]
    assert methods["nids"]["messages"] == E * (methods["nids"]["iterations"] - 1)
    for x in ("iteration", "bits"):
        figure = tmp_path / f"{x}.png"
        assert main(["plot", str(out), "--x", x, "--out", str(figure)]) == 0
        assert figure.read_bytes()[:4] == b"\x89PNG"
    run = load_solve(out)  # the plot's bits of an ideal-network run: none in NIDS's first, local, iteration
    bits = with_counts(run, "nids", run.curves["nids"], "bits")["bits"]
    per_round = methods["nids"]["bits"] / (methods["nids"]["iterations"] - 1)
    np.testing.assert_allclose(bits, per_round * np.arange(methods["nids"]["iterations"]), rtol=1e-12)


@pytest.mark.parametrize(
    "options, culprit",
    [
        (["--problem", "lasso", "--method", "dgd"], "dgd: dgd needs smooth local functions; Lasso is not smooth"),
        (["--method", "extra", "--rho", "2"], "--rho does not apply to extra"),
        (["--method", "extra:rho=2"], "extra takes mixing=VALUE, alpha=VALUE"),
        (["--method", "nids", "--privacy", "1"], "nids: network privacy perturbs the dual variables z"),
        (["--method", "nids:alpha=-1"], "alpha: must be 'auto' or a number > 0"),
        (["--method", "dgd:step=fast"], "step: must be one of constant, diminishing"),
        (["--method", "gradient-tracking:step=diminishing"], "gradient-tracking takes mixing=VALUE, alpha=VALUE"),
    ],
)
def test_the_command_refuses_in_one_line_with_status_2(tmp_path, capsys, options, culprit):
    solve_cli.assert_refused_in_one_line(tmp_path / "run", capsys, options, culprit, nodes=15)
