"""Gossip and Chebyshev-accelerated gossip (pdmm.methods), mixing matrices (pdmm.mixing) and the solve command's
specs for them, against references written from the definitions in docs/averaging.md."""

import csv
import json

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import solve_cli
import torch

import pdmm
import pdmm.mixing

KINDS = ("metropolis", "lazy_metropolis", "max_degree")
METHODS = ("gossip", "chebyshev")
ROUNDS = range(1, 13)


def labelled_graph(n=15, seed=2):
    """A connected geometric graph with string labels inserted in a shuffled order (node k is list(G.nodes)[k])."""
    H = nx.random_geometric_graph(n, 0.45, seed=seed)
    assert nx.is_connected(H)
    G = nx.Graph()
    G.add_nodes_from(f"v{k}" for k in np.random.default_rng(seed).permutation(n))
    G.add_edges_from((f"v{u}", f"v{v}") for u, v in H.edges())
    return G


def as_type(G, kind):
    """G as a networkx graph, a pdmm.Graph or a scipy adjacency matrix, all with list(G.nodes) as node order."""
    if kind == "networkx":
        return G
    if kind == "pdmm.Graph":
        return pdmm.Graph.from_networkx(G)
    return sp.csr_array(nx.to_scipy_sparse_array(G, nodelist=list(G.nodes)))


def loop_mixing(G, kind):
    """The dense mixing matrix from its definition, one edge at a time."""
    nodes = list(G.nodes)
    index = {v: k for k, v in enumerate(nodes)}
    degree = dict(G.degree())
    largest = max(degree.values())
    W = np.zeros((len(nodes), len(nodes)))
    for u, v in G.edges():
        w = 1 / (1 + largest) if kind == "max_degree" else 1 / (1 + max(degree[u], degree[v]))
        W[index[u], index[v]] = W[index[v], index[u]] = w
    for k in range(len(nodes)):
        W[k, k] = 1 - sum(W[k, j] for j in range(len(nodes)) if j != k)
    return (np.eye(len(nodes)) + W) / 2 if kind == "lazy_metropolis" else W


def chebyshev_reference(W, a, r, low, high):
    """T_r(t(W)) a / T_r(t(1)) by the eigendecomposition of the dense symmetric W; a (n, d)."""
    eigenvalues, V = np.linalg.eigh(W)
    t = lambda lam: (2 * lam - low - high) / (high - low)  # noqa: E731
    T = lambda y: np.polynomial.chebyshev.chebval(y, [0] * r + [1])  # noqa: E731
    p = T(t(eigenvalues)) / T(t(1.0))
    return V @ (p[:, None] * (V.T @ a))


def nontrivial_interval(W):
    """(smallest eigenvalue, largest but the 1 of the all-ones vector) of a connected mixing matrix, by numpy."""
    eigenvalues = np.linalg.eigvalsh(W)
    return eigenvalues[0], eigenvalues[-2]


def problem(n=20, d=3, batch=None, seed=0):
    G = pdmm.topology("random_geometric", n=n, seed=seed)
    shape = (n, d) if batch is None else (batch, n, d)
    return G, pdmm.averaging(G, np.random.default_rng(seed).normal(size=shape))


def rounds_of(p, method, r, **kwargs):
    return pdmm.solve(p, method=method, max_iter=r, tol=0, **kwargs)


# --- mixing matrices --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("graph_type", ["networkx", "pdmm.Graph", "scipy"])
@pytest.mark.parametrize("kind", KINDS)
def test_mixing_matrices_are_their_definitions_for_every_graph_type(kind, graph_type):
    G = labelled_graph()
    W = pdmm.mixing_matrix(as_type(G, graph_type), kind)
    assert isinstance(W, sp.csr_array) and W.dtype == np.float64 and W.shape == (15, 15)
    dense = W.toarray()
    np.testing.assert_allclose(dense, loop_mixing(G, kind), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(dense, dense.T)
    np.testing.assert_allclose(dense.sum(0), 1, rtol=0, atol=1e-14)
    np.testing.assert_allclose(dense.sum(1), 1, rtol=0, atol=1e-14)
    assert (dense >= 0).all() and (np.diag(dense) > 0).all()
    assert pdmm.check_mixing(W, as_type(G, graph_type)).shape == (15, 15)
    if kind == "lazy_metropolis":
        assert np.linalg.eigvalsh(dense)[0] >= 0


def test_an_unknown_kind_lists_the_kinds():
    with pytest.raises(
        ValueError, match="unknown mixing kind 'uniform'; choose one of metropolis, lazy_metropolis, max_degree"
    ):
        pdmm.mixing_matrix(labelled_graph(), "uniform")


def test_check_mixing_accepts_dense_and_sparse_matrices_as_csr_float64():
    G = labelled_graph()
    W = loop_mixing(G, "metropolis")
    for given in (W, sp.coo_matrix(W), sp.csc_array(W), torch.tensor(W)):
        checked = pdmm.check_mixing(given, G)
        assert isinstance(checked, sp.csr_array) and checked.dtype == np.float64
        np.testing.assert_array_equal(checked.toarray(), W)


def _tampered(kind):
    G = labelled_graph()
    W = loop_mixing(G, "metropolis")
    far = next((i, j) for i in range(15) for j in range(15) if i != j and W[i, j] == 0)
    if kind == "asymmetric":
        i, j = np.argwhere((W > 0) & ~np.eye(15, dtype=bool))[0]
        W[i, j] += 1e-9
        W[i, i] -= 1e-9
    elif kind == "rows":
        W *= 1.001
    elif kind == "off the graph":
        i, j = far
        W[i, j] = W[j, i] = 0.01
        W[i, i] -= 0.01
        W[j, j] -= 0.01
    elif kind == "shape":
        W = W[:-1]
    elif kind == "nan":
        W[0, 0] = np.nan
    return W, G


@pytest.mark.parametrize(
    "kind, message",
    [
        ("asymmetric", "not symmetric: max |W - W^T| = 1e-09"),
        ("rows", "rows of the mixing matrix must sum to 1: row"),
        ("off the graph", "nonzero off the graph: W\\["),
        ("shape", "must be n x n with n=15 nodes, got shape \\(14, 15\\)"),
        ("nan", "contains NaN or inf"),
    ],
)
def test_check_mixing_names_what_is_wrong_in_one_line(kind, message):
    W, G = _tampered(kind)
    with pytest.raises(ValueError, match=message) as error:
        pdmm.check_mixing(W, G)
    assert "\n" not in str(error.value)


def test_an_entry_off_the_graph_is_named_by_its_labels():
    W, G = _tampered("off the graph")
    with pytest.raises(ValueError) as error:
        pdmm.check_mixing(sp.csr_array(W), G)
    i, j = (int(k) for k in str(error.value).split("W[")[1].split("]")[0].split(", "))
    nodes = list(G.nodes)
    assert not G.has_edge(nodes[i], nodes[j]) and f"{nodes[i]!r} and {nodes[j]!r} are not neighbours" in str(
        error.value
    )


def test_spectral_interval_is_the_smallest_and_second_largest_eigenvalue():
    G = labelled_graph()
    for kind in KINDS:
        W = loop_mixing(G, kind)
        np.testing.assert_allclose(pdmm.spectral_interval(W), nontrivial_interval(W), rtol=0, atol=1e-13)


def test_spectral_interval_by_lanczos_contains_the_spectrum_to_its_tolerance(monkeypatch):
    monkeypatch.setattr(pdmm.mixing, "DENSE_LIMIT", 10)
    W = pdmm.mixing_matrix(pdmm.Graph.random_geometric(300, seed=1))
    low, high = pdmm.spectral_interval(W)
    true_low, true_high = nontrivial_interval(W.toarray())
    assert low <= true_low <= low + 1e-7 and high - 1e-7 <= true_high <= high
    assert pdmm.spectral_interval(W) == (low, high)  # a fixed start vector: reproducible


def test_spectral_interval_refuses_a_matrix_that_does_not_connect_the_nodes():
    W = sp.block_diag([pdmm.mixing_matrix(nx.path_graph(4)), pdmm.mixing_matrix(nx.cycle_graph(5))])
    with pytest.raises(ValueError, match="in 2 separate parts: averaging over a disconnected graph cannot converge"):
        pdmm.spectral_interval(W)


# --- the iterates -----------------------------------------------------------------------------------------------


def test_gossip_after_r_rounds_is_W_to_the_r_times_a(device):
    G, p = problem(batch=2, d=2)
    W, a = loop_mixing(G, "metropolis"), p.local.q.numpy()  # a: (n, B, d)
    for r in ROUNDS:
        x = rounds_of(p, "gossip", r, device=device).x  # (B, n, d)
        for b in range(2):
            np.testing.assert_allclose(x[b], np.linalg.matrix_power(W, r) @ a[:, b], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "mixing, interval",
    [("metropolis", None), ("lazy_metropolis", None), ("metropolis", (-0.6, 0.95)), ("max_degree", (0.1, 0.8))],
)
def test_chebyshev_after_r_rounds_is_the_scaled_chebyshev_polynomial_of_W(mixing, interval, device):
    G, p = problem(batch=2, d=2)
    W, a = loop_mixing(G, mixing), p.local.q.numpy()
    low, high = nontrivial_interval(W) if interval is None else interval
    for r in ROUNDS:
        x = rounds_of(p, "chebyshev", r, mixing=mixing, interval=interval, device=device).x
        for b in range(2):
            np.testing.assert_allclose(x[b], chebyshev_reference(W, a[:, b], r, low, high), rtol=0, atol=1e-12)


def test_a_mixing_matrix_given_as_an_array_runs_like_its_kind_also_when_renumbered():
    G, p = problem()
    W = loop_mixing(G, "max_degree")
    for method in METHODS:
        by_kind = rounds_of(p, method, 9, mixing="max_degree").x
        np.testing.assert_allclose(rounds_of(p, method, 9, mixing=W).x, by_kind, rtol=0, atol=1e-14)
        np.testing.assert_array_equal(rounds_of(p, method, 9, mixing=pdmm.mixing_matrix(G, "max_degree")).x, by_kind)
        order = np.random.default_rng(0).permutation(20)  # run node k is node order[k]: W is permuted for the run
        np.testing.assert_allclose(
            rounds_of(p, method, 9, mixing=sp.csr_array(W), reorder=order).x, by_kind, rtol=0, atol=1e-13
        )


def test_chebyshev_beats_gossip_on_its_interval_and_an_interval_that_misses_eigenvalues_diverges():
    G, p = problem()
    low = nontrivial_interval(loop_mixing(G, "metropolis"))[0]
    errors = {
        method: rounds_of(p, method, 30, reference=np.tile(p.local.q.numpy()[:, 0].mean(0), (20, 1))).history["error"][
            -1
        ]
        for method in METHODS
    }
    assert errors["chebyshev"] < errors["gossip"] / 10
    assert low < 0.49  # on (0.5, 0.99), |t(l)| > t(1) below low + high - 1 = 0.49: those components grow
    with pytest.raises(pdmm.DivergenceError):
        pdmm.solve(p, method="chebyshev", interval=(0.5, 0.99), max_iter=3000)


def test_one_nontrivial_eigenvalue_widens_the_default_interval_and_one_round_averages():
    K = nx.complete_graph(5)  # Metropolis: W = 11^T / 5, eigenvalues 1 and 0 (four times)
    a = np.random.default_rng(0).normal(size=(5, 2))
    np.testing.assert_allclose(
        rounds_of(pdmm.averaging(K, a), "chebyshev", 1).x, np.tile(a.mean(0), (5, 1)), rtol=0, atol=1e-15
    )


# --- convergence ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reference", ["cvxpy", "mean"])
@pytest.mark.parametrize("method", METHODS)
def test_converges_to_the_mean(method, reference, device):
    G, p = problem()
    mean = np.tile(p.local.q.numpy()[:, 0].mean(0), (20, 1))
    result = pdmm.solve(
        p, method=method, max_iter=5000, tol=1e-12, device=device, reference=mean if reference == "mean" else "cvxpy"
    )
    assert result.converged and result.iterations < 5000
    np.testing.assert_allclose(result.x, mean, rtol=0, atol=1e-10)
    assert result.history["error"][-1] < 1e-10 and result.params == {}


@pytest.mark.parametrize("method", METHODS)
def test_batched_instances_converge_each_to_its_mean(method):
    G, p = problem(batch=3, d=2)
    a = p.local.q.numpy().transpose(1, 0, 2)  # (B, n, d)
    result = pdmm.solve(p, method=method, max_iter=5000, tol=1e-12, mixing="lazy_metropolis")
    assert result.converged and result.x.shape == (3, 20, 2) and result.history["residual"].shape[1] == 3
    np.testing.assert_allclose(result.x, np.broadcast_to(a.mean(1, keepdims=True), a.shape), rtol=0, atol=1e-10)


@pytest.mark.parametrize("method", METHODS)
def test_float32_runs_to_its_tolerance(method):
    G, p = problem()
    result = pdmm.solve(p, method=method, dtype=torch.float32, max_iter=5000)
    assert result.converged and result.x.dtype == np.float32
    np.testing.assert_allclose(result.x, np.tile(p.local.q.numpy()[:, 0].mean(0), (20, 1)), rtol=0, atol=1e-4)


def test_a_unit_quadratic_is_an_averaging_problem():
    G, p = problem()
    a = p.local.q.numpy()[:, 0]
    unit = pdmm.quadratic(G, np.tile(np.eye(3), (20, 1, 1)), a)
    np.testing.assert_allclose(rounds_of(unit, "chebyshev", 7).x, rounds_of(p, "chebyshev", 7).x, rtol=0, atol=1e-15)


@pytest.mark.parametrize("method", METHODS)
def test_after_r_rounds_only_the_r_hop_ball_has_influenced_a_node(method):
    G = pdmm.topology("grid", n=36, rows=6)
    nodes = list(G.nodes)
    a = np.random.default_rng(3).normal(size=(36, 2))
    changed = a.copy()
    changed[14] += 1.0
    hops = nx.single_source_shortest_path_length(G, nodes[14])
    distance = np.array([hops[v] for v in nodes])
    for r in range(1, 7):
        x, y = (rounds_of(pdmm.averaging(G, values), method, r).x for values in (a, changed))
        np.testing.assert_array_equal(x[distance > r], y[distance > r])
        assert (x[distance == r] != y[distance == r]).all(axis=1).all()


# --- bookkeeping ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, bits", [(torch.float64, 64), (torch.float32, 32)])
@pytest.mark.parametrize("method", METHODS)
def test_messages_and_bits_are_one_number_of_width_d_per_directed_edge_and_round(method, dtype, bits):
    G, p = problem(d=3)
    directed = 2 * G.number_of_edges()
    history = rounds_of(p, method, 7, dtype=dtype, record_every=1).history
    rounds = np.arange(1, 8)
    np.testing.assert_array_equal(history["messages"], directed * rounds)
    np.testing.assert_array_equal(history["bits"], directed * rounds * 3 * bits)
    pdmm_history = rounds_of(p, "pdmm", 7, dtype=dtype, record_every=1).history
    np.testing.assert_array_equal(history["bits"], pdmm_history["bits"])


@pytest.mark.parametrize("method", METHODS)
def test_no_host_read_in_the_rounds_between_tests(monkeypatch, method):
    reads = []
    for name in ("__bool__", "__float__", "__int__", "item", "tolist", "numpy", "cpu"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor, name, lambda self, *a, _f=original, _n=name, **k: reads.append(_n) or _f(self, *a, **k)
        )
    G, p = problem()
    counts = {}
    for max_iter in (100, 200):
        reads.clear()
        rounds_of(p, method, max_iter)
        counts[max_iter] = list(reads)
    extra = list(counts[200])
    for name in counts[100]:
        extra.remove(name)
    assert extra == ["tolist"] * 10  # the stopping tests', one per check_every = 10 rounds


def test_rho_left_out_is_one_for_the_pdmm_family_bit_for_bit_and_absent_for_gossip():
    G, p = problem()
    for method in ("pdmm", "qa-pdmm", "admm"):
        default, one = pdmm.solve(p, method=method, max_iter=50), pdmm.solve(p, method=method, rho=1.0, max_iter=50)
        np.testing.assert_array_equal(default.x, one.x)
        assert default.params == one.params == {"rho": 1.0}
    assert pdmm.solve(p, method="chebyshev", max_iter=5, mixing="max_degree").params == {"mixing": "max_degree"}


# --- refusals ---------------------------------------------------------------------------------------------------

G6 = pdmm.topology("ring", n=6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rho": 1.0}, "has no penalty parameter: leave rho out"),
        ({"x0": "random"}, "starts from the node values, x\\^0 = a; x0= does not apply"),
        ({"x0": np.zeros((6, 1))}, "x0= does not apply"),
        (
            {"network": pdmm.Network(drop=0.1)},
            r"^network effects are not implemented for gossip/chebyshev: they compute "
            r"mean\(a\) as a fixed polynomial in W",
        ),
        ({"form": "nodes"}, "form='nodes' is not available here"),
        ({"mixing": "uniform"}, "unknown mixing kind 'uniform'"),
        ({"mixing": np.ones((6, 6)) / 6}, "nonzero off the graph"),
        ({"mixing": 0.5}, "must be a kind"),
        ({"theta": 0.5}, "bad parameter"),
    ],
)
@pytest.mark.parametrize("method", METHODS)
def test_options_the_averaging_methods_do_not_take_are_refused_in_one_line(method, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message) as error:
        pdmm.solve(pdmm.averaging(G6, np.arange(6.0)), method=method, **kwargs)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"interval": (0.5, 0.2)}, r"chebyshev needs -1 <= low < high < 1, got interval \(0.5, 0.2\)"),
        ({"interval": (-1.5, 0.9)}, "chebyshev needs -1 <= low < high < 1"),
        ({"interval": (0.0, 1.0)}, "chebyshev needs -1 <= low < high < 1"),
        ({"interval": (float("nan"), 0.5)}, "chebyshev needs -1 <= low < high < 1"),
        ({"interval": (0.1, 0.2, 0.3)}, "interval must be None or a pair"),
        ({"interval": 0.5}, "interval must be None or a pair"),
        ({"compile": True}, "compile=True is not implemented for chebyshev"),
    ],
)
def test_bad_chebyshev_options_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        pdmm.solve(pdmm.averaging(G6, np.arange(6.0)), method="chebyshev", **kwargs)
    assert "\n" not in str(error.value)


def test_a_default_interval_outside_minus_one_one_is_refused():
    W = loop_mixing(G6, "metropolis")
    W = 2 * np.eye(6) - W  # symmetric, rows summing to 1, on the graph, but its other eigenvalues 2 - lambda exceed 1
    with pytest.raises(ValueError, match="chebyshev needs -1 <= low < high < 1, got W's spectral interval"):
        pdmm.solve(pdmm.averaging(G6, np.arange(6.0)), method="chebyshev", mixing=W)


NOT_AVERAGING = {
    "least squares": lambda: pdmm.least_squares(G6, np.ones((6, 4, 2)), np.ones((6, 4))),
    "lasso": lambda: pdmm.lasso(G6, np.ones((6, 4, 2)), np.ones((6, 4)), lam=0.1),
    "logistic": lambda: pdmm.logistic(G6, np.ones((6, 4, 2)), np.ones((6, 4))),
    "weighted quadratic": lambda: pdmm.quadratic(G6, np.tile(2 * np.eye(2), (6, 1, 1)), np.ones((6, 2))),
    "edge matrices": lambda: pdmm.averaging(
        G6, np.arange(6.0), constraints={(i, (i + 1) % 6): (np.eye(1), -np.eye(1), np.zeros(1)) for i in range(6)}
    ),
}


@pytest.mark.parametrize("make", NOT_AVERAGING.values(), ids=NOT_AVERAGING)
@pytest.mark.parametrize("method", METHODS)
def test_other_problems_are_refused_in_one_line(method, make):
    with pytest.raises(ValueError, match="^gossip/chebyshev solve averaging problems only") as error:
        pdmm.solve(make(), method=method)
    assert "\n" not in str(error.value)


# --- the solve command ------------------------------------------------------------------------------------------


def solve_command(out, *options):
    return solve_cli.solve_command(out, *options, nodes=20)


def test_the_command_compares_pdmm_gossip_and_chebyshev_with_their_specs(tmp_path):
    out = tmp_path / "run"
    labels = ["pdmm", "gossip", "chebyshev", "chebyshev:mixing=lazy_metropolis:low=0:high=0.99"]
    assert solve_command(out, "--rho", "2", "--iters", "3000", "--compare", ",".join(labels)) == 0
    with open(out / "history.csv", newline="") as file:
        assert list(dict.fromkeys(row["method"] for row in csv.DictReader(file))) == labels
    methods = json.loads((out / "config.json").read_text())["methods"]
    assert {label: entry["params"] for label, entry in methods.items()} == {
        "pdmm": {"rho": 2.0, "theta": 1.0},
        "gossip": {"mixing": "metropolis"},
        "chebyshev": {"mixing": "metropolis", "interval": None},
        labels[3]: {"mixing": "lazy_metropolis", "interval": [0.0, 0.99]},
    }
    assert all(entry["converged"] and entry["error"] < 1e-8 for entry in methods.values())
    with np.load(out / "result.npz") as result:
        np.testing.assert_allclose(result["x_chebyshev"], result["x_star"], rtol=0, atol=1e-8)


@pytest.mark.parametrize(
    "options, culprit",
    [
        (["--problem", "lasso", "--method", "gossip"], "gossip: gossip/chebyshev solve averaging problems only"),
        (["--method", "chebyshev", "--rho", "2"], "--rho does not apply to chebyshev"),
        (["--method", "gossip:rho=2"], "gossip takes mixing=VALUE"),
        (["--method", "gossip", "--drop", "0.1"], "network effects are not implemented for gossip/chebyshev"),
        (["--method", "chebyshev:low=0.5"], "give low and high together"),
        (["--method", "chebyshev:low=0.9:high=0.5"], "chebyshev needs -1 <= low < high < 1"),
        (["--method", "chebyshev:mixing=uniform"], "mixing: must be one of metropolis, lazy_metropolis, max_degree"),
    ],
)
def test_the_command_refuses_in_one_line_with_status_2(tmp_path, capsys, options, culprit):
    solve_cli.assert_refused_in_one_line(tmp_path / "run", capsys, options, culprit, nodes=20)
