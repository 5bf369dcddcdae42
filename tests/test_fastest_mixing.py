"""bridge.fastest_mixing: the barrier method against cvxpy's SDP, closed forms and the structure of a mixing matrix."""

from functools import cache

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from extras import needs_extra

import pdmm
from bridge import fastest_mixing
from bridge.fastest_mixing import fastest_mixing_weights, fastest_mixing_weights_cvxpy, spectral_norm

SMALL = {
    "path": nx.path_graph(6),
    "grid": nx.convert_node_labels_to_integers(nx.grid_2d_graph(4, 4)),
    "geometric": nx.random_geometric_graph(20, 0.35, seed=0),
    "lollipop": nx.lollipop_graph(5, 4),
    "barbell": nx.barbell_graph(4, 2),
    "star": nx.star_graph(6),
}


def rate(W):
    """max(lambda_2, -lambda_n) from the sorted eigenvalues of a dense symmetric W (the definition)."""
    values = np.sort(np.linalg.eigvalsh(W))[::-1]
    return max(values[1], -values[-1])


def metropolis_rate(G):
    return rate(pdmm.mixing_matrix(G, "metropolis").toarray())


@cache
def optimum(name):
    """The rate of cvxpy's (Clarabel's) fastest-mixing weights of SMALL[name]."""
    return rate(fastest_mixing_weights_cvxpy(SMALL[name]).toarray())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_matches_cvxpy_and_beats_metropolis(name):
    """Within tol = 1e-6 above Clarabel's optimum (1e-7 its own accuracy), and well below Metropolis weights'
    rate on every one of these graphs."""
    G = SMALL[name]
    assert nx.is_connected(G)
    ours = rate(fastest_mixing_weights(G).toarray())
    assert optimum(name) - 1e-7 <= ours <= optimum(name) + 1e-6
    assert ours < metropolis_rate(G) - 1e-3


@pytest.mark.parametrize("tol", [1e-2, 1e-4, 1e-6])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_certificate(name, tol):
    """The method's bounds bracket the optimum, lower <= rho* <= rate(W) <= upper, and stop within tol."""
    n, i, j = fastest_mixing._edges(SMALL[name])
    w, upper, lower, steps, stopped = fastest_mixing._interior_point(n, i, j, tol, 100)
    ours = rate(fastest_mixing._mixing(n, i, j, w).toarray())
    assert stopped == "tol" and upper - lower <= tol
    assert steps <= 20  # 10 to 16 at tol = 1e-6; one lower bound per step (no t' > t) takes about 30
    assert lower <= optimum(name) + 1e-7 and optimum(name) - 1e-7 <= ours <= upper + 1e-12


@pytest.mark.parametrize("name", ["path", "lollipop"])
def test_clear_gain_over_metropolis(name):
    """Metropolis is far from optimal on a path and a lollipop: FDLA gains more than 0.03 on both."""
    G = SMALL[name]
    assert metropolis_rate(G) - spectral_norm(fastest_mixing_weights(G)) > 0.03


@pytest.mark.parametrize("n", [10, 11])
def test_cycle_closed_form(n):
    """C_n is edge-transitive, so uniform weights w = 2 / (l_2 + l_n) of its Laplacian's eigenvalues are optimal,
    with rate (l_n - l_2) / (l_n + l_2) (Xiao and Boyd 2004)."""
    G = nx.cycle_graph(n)
    laplacian = np.sort(np.linalg.eigvalsh(nx.laplacian_matrix(G).toarray().astype(float)))
    l2, ln = laplacian[1], laplacian[-1]
    closed = (ln - l2) / (ln + l2)
    W = fastest_mixing_weights(G).toarray()
    assert closed - 1e-9 <= rate(W) <= closed + 1e-6
    np.testing.assert_allclose(W[np.arange(n), (np.arange(n) + 1) % n], 2 / (l2 + ln), atol=1e-3)  # found: uniform


def test_star_closed_form_and_node_order():
    """The star with 6 leaves (edge-transitive): w = 2 / (1 + 7) on every edge, rate 6 / 8; with string labels and
    the hub listed last, row 6 of W is the hub's (W_hub,hub = 1 - 6 / 4) and the leaves' diagonal is 3 / 4."""
    G = nx.Graph()
    G.add_nodes_from([f"leaf{k}" for k in range(6)] + ["hub"])
    G.add_edges_from(("hub", f"leaf{k}") for k in (3, 0, 5, 1, 4, 2))
    W = fastest_mixing_weights(G).toarray()
    assert abs(rate(W) - 0.75) <= 1e-6
    np.testing.assert_allclose(np.diag(W), [0.75] * 6 + [-0.5], atol=1e-4)
    np.testing.assert_allclose(W[6, :6], 0.25, atol=1e-4)


@pytest.mark.parametrize("n", [2, 6])
def test_complete_graph(n):
    """On K_n the optimum is W = 11^T / n, rate 0."""
    W = fastest_mixing_weights(nx.complete_graph(n)).toarray()
    assert spectral_norm(W) <= 1e-6
    np.testing.assert_allclose(W, np.full((n, n), 1 / n), atol=1e-6)


def test_structure_and_node_order():
    """Symmetric, rows summing to 1, zero off the edges, rows in list(G.nodes) order: permuted integer labels
    and strings, each a valid pdmm mixing matrix of its graph, with the rate of the unlabelled graph."""
    base = SMALL["lollipop"]
    order = [3, 8, 0, 6, 1, 7, 4, 2, 5]
    permuted = nx.Graph()
    permuted.add_nodes_from(order)
    permuted.add_edges_from(base.edges)
    strings = nx.Graph()
    strings.add_nodes_from(f"v{k}" for k in order[::-1])
    strings.add_edges_from((f"v{u}", f"v{v}") for u, v in base.edges)
    expected = spectral_norm(fastest_mixing_weights(base))
    for G in (permuted, strings):
        W = fastest_mixing_weights(G)
        assert isinstance(W, sp.csr_array) and W.dtype == np.float64 and W.shape == (9, 9)
        dense = W.toarray()
        assert np.array_equal(dense, dense.T)
        assert np.abs(dense.sum(axis=1) - 1).max() <= 1e-12
        nodes = list(G.nodes)
        for a in range(9):
            for b in range(9):
                if a != b and not G.has_edge(nodes[a], nodes[b]):
                    assert dense[a, b] == 0
        assert np.count_nonzero(dense - np.diag(np.diag(dense))) == 2 * G.number_of_edges()
        pdmm.check_mixing(W, G)
        assert abs(spectral_norm(W) - expected) <= 1e-6


@pytest.mark.parametrize("name", ["lollipop", "path"])
def test_dual_point(name):
    """The dual point of Newton's direction, built here from its formula and the constraint matrices, satisfies
    the dual's constraints tr X_1 + tr X_2 = 1 and a_e^T (X_1 - X_2) a_e = 0; the lower bound the method takes
    from it is its dual objective tr((I - J)(X_1 - X_2)) where X_1 and X_2 are PSD, and none where either is not.
    Points: Metropolis and Clarabel's optimal weights, s a little above their rate, t from 1/8 to 512 times the
    starting one; among them each block is the one that fails somewhere."""
    G = SMALL[name]
    n, i, j = fastest_mixing._edges(G)
    m = len(i)
    incidence = np.zeros((m, n))
    incidence[np.arange(m), i], incidence[np.arange(m), j] = 1, -1
    verdicts = set()
    for W, above in [(pdmm.mixing_matrix(G, "metropolis"), 0.05), (fastest_mixing_weights_cvxpy(G), 0.01)]:
        W = W.toarray()
        for s in (spectral_norm(W) + above, spectral_norm(W) + 5 * above):
            Z1, Z2 = s * np.eye(n) - (W - 1 / n), s * np.eye(n) + (W - 1 / n)
            Z1inv, Z2inv = np.linalg.inv(Z1), np.linalg.inv(Z2)
            newton = fastest_mixing._newton_system(Z1inv, Z2inv, i, j, np.empty((m + 1, m + 1)))
            for t in newton[0][m] * 2.0 ** np.arange(-3, 10):
                d = t * newton[1] + newton[2]
                dZ = incidence.T @ np.diag(d[:m]) @ incidence  # the change of W - J is -A^T diag(dw) A
                X1 = Z1inv @ (Z1 - (d[m] * np.eye(n) + dZ)) @ Z1inv / t
                X2 = Z2inv @ (Z2 - (d[m] * np.eye(n) - dZ)) @ Z2inv / t
                assert np.trace(X1) + np.trace(X2) == pytest.approx(1, abs=1e-9)
                np.testing.assert_allclose(np.einsum("ea,ab,eb->e", incidence, X1 - X2, incidence), 0, atol=1e-9)
                bound = fastest_mixing._dual_bound(Z1.copy(), Z2.copy(), s, i, j, newton, t)
                least = np.linalg.eigvalsh(X1).min(), np.linalg.eigvalsh(X2).min()
                if min(least) > 1e-12:
                    assert bound == pytest.approx(np.trace((np.eye(n) - 1 / n) @ (X1 - X2)), abs=1e-9)
                elif min(least) < -1e-12:
                    assert bound is None
                verdicts.add((bool(least[0] > 0), bool(least[1] > 0)))
    assert {(True, True), (True, False), (False, True)} <= verdicts


def test_tol_and_max_iter():
    """A loose tol stops early, still within tol of the optimum; max_iter too small warns and returns a valid
    mixing matrix."""
    G = SMALL["lollipop"]
    loose = spectral_norm(fastest_mixing_weights(G, tol=1e-2))
    assert optimum("lollipop") - 1e-7 <= loose <= optimum("lollipop") + 1e-2
    with pytest.warns(pdmm.ConvergenceWarning, match="duality gap"):
        W = fastest_mixing_weights(G, max_iter=2)
    pdmm.check_mixing(W, G)
    with pytest.raises(ValueError, match="tol"):
        fastest_mixing_weights(G, tol=0)
    with pytest.raises(ValueError, match="max_iter"):
        fastest_mixing_weights(G, max_iter=0)


@pytest.mark.parametrize(
    "G, match",
    [
        (nx.disjoint_union(nx.path_graph(3), nx.path_graph(2)), "not connected"),
        (nx.empty_graph(1), "at least 2 nodes"),
        (nx.empty_graph(0), "at least 2 nodes"),
        (nx.Graph([(0, 1), (1, 2), (1, 1)]), "self-loop"),
        (nx.DiGraph([(0, 1), (1, 0)]), "undirected"),
    ],
)
def test_bad_graphs(G, match):
    for solve in (fastest_mixing_weights, fastest_mixing_weights_cvxpy):
        with pytest.raises(ValueError, match=match):
            solve(G)


def test_cvxpy_refuses_large_graphs():
    with pytest.raises(ValueError, match="at most 100 nodes"):
        fastest_mixing_weights_cvxpy(nx.path_graph(101))


def test_spectral_norm():
    """max(lambda_2, -lambda_n): each side decides on a 2-node graph; sparse and dense agree with the definition
    on Metropolis weights; an asymmetric matrix or rows not summing to 1 are refused."""
    assert spectral_norm(np.array([[0.1, 0.9], [0.9, 0.1]])) == pytest.approx(0.8)  # -lambda_n
    assert spectral_norm(np.array([[0.8, 0.2], [0.2, 0.8]])) == pytest.approx(0.6)  # lambda_2
    W = pdmm.mixing_matrix(SMALL["lollipop"], "metropolis")
    assert spectral_norm(W) == pytest.approx(rate(W.toarray()), abs=1e-12)
    assert spectral_norm(W.toarray()) == pytest.approx(rate(W.toarray()), abs=1e-12)
    with pytest.raises(ValueError, match="not symmetric"):
        spectral_norm(np.array([[0.5, 0.5], [0.4, 0.6]]))
    with pytest.raises(ValueError, match="sum to 1"):
        spectral_norm(np.array([[0.5, 0.4], [0.4, 0.5]]))


def test_newton_matrix_kernels_agree():
    """The numba kernel's upper triangle equals the numpy expression's (a_e^T Z_1^-1 a_f)^2 + (a_e^T Z_2^-1 a_f)^2."""
    needs_extra("numba")
    n, i, j = fastest_mixing._edges(SMALL["geometric"])
    rng = np.random.default_rng(0)
    Z1inv, Z2inv = (x @ x.T for x in rng.standard_normal((2, n, n)))
    m = len(i)
    by_numba, by_numpy = np.zeros((m + 1, m + 1)), np.zeros((m + 1, m + 1))
    fastest_mixing._newton_matrix_numba(Z1inv, Z2inv, i, j, by_numba)
    fastest_mixing._newton_matrix_numpy(Z1inv, Z2inv, i, j, by_numpy)
    incidence = np.zeros((m, n))
    incidence[np.arange(m), i], incidence[np.arange(m), j] = 1, -1
    direct = (incidence @ Z1inv @ incidence.T) ** 2 + (incidence @ Z2inv @ incidence.T) ** 2
    np.testing.assert_allclose(by_numpy[:m, :m], direct, rtol=1e-10)
    np.testing.assert_allclose(np.triu(by_numba[:m, :m]), np.triu(direct), rtol=1e-10)


def test_without_numba(monkeypatch):
    """Without numba the numpy expression builds Newton's matrix: the same optimum."""
    monkeypatch.setattr(fastest_mixing, "numba", None)
    ours = spectral_norm(fastest_mixing_weights(SMALL["geometric"]))
    assert optimum("geometric") - 1e-7 <= ours <= optimum("geometric") + 1e-6
