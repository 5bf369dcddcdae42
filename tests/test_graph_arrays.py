"""pdmm.Graph: graphs from arrays, scipy matrices and networkx compile to the fields of the per-edge loop;
the array generators against independent computations; every bad input named."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.spatial.distance import pdist, squareform

import pdmm


def loop_compiled(G):
    """The per-edge compilation pdmm used before pdmm.Graph (CompiledGraph.from_networkx), the reference."""
    nodes = list(G.nodes)
    index = {v: k for k, v in enumerate(nodes)}
    pairs = np.array([(index[u], index[v]) for u, v in G.edges if u != v], dtype=np.int64).reshape(-1, 2)
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    order = np.lexsort((dst, src))
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    m = len(pairs)
    partner = np.concatenate([np.arange(m, 2 * m), np.arange(m)])
    return pdmm.CompiledGraph.build(nodes, src[order], dst[order], position[partner[order]])


def assert_same_compiled(got, want):
    assert got.n == want.n and list(got.nodes) == list(want.nodes)
    for name in ("src", "dst", "rev", "sign", "forward", "degree"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert (got.incidence is None) == (want.incidence is None)
    if want.incidence is not None:
        for part in ("crow_indices", "col_indices", "values"):
            assert torch.equal(getattr(got.incidence, part)(), getattr(want.incidence, part)()), part


def unequal_degree_graphs():
    """Connected graphs with nodes 0..n-1 in order and unequal degrees (the sparse-incidence path)."""
    yield pdmm.topology("barabasi_albert", n=40, seed=1)
    yield pdmm.topology("erdos_renyi", n=60, seed=2)
    yield nx.convert_node_labels_to_integers(nx.star_graph(9))
    G = pdmm.topology("random_geometric", n=80, seed=3)
    yield nx.relabel_nodes(G, dict(enumerate(np.random.default_rng(0).permutation(80).tolist())))


def edge_arrays(G):
    """(src, dst) of G's edges (node labels 0..n-1 as indices)."""
    return np.array(list(G.edges), dtype=np.int64).reshape(-1, 2).T


@pytest.mark.parametrize("G", list(unequal_degree_graphs()))
def test_from_networkx_compiles_like_the_per_edge_loop(G):
    assert_same_compiled(pdmm.CompiledGraph.from_networkx(G), loop_compiled(G))
    assert_same_compiled(pdmm.CompiledGraph.from_graph(pdmm.Graph.from_networkx(G)), loop_compiled(G))


def test_from_networkx_keeps_labels_and_collapses_parallel_edges():
    G = nx.relabel_nodes(pdmm.topology("barabasi_albert", n=30, seed=4), lambda v: f"node{v}")
    shuffled = nx.Graph()  # string labels, inserted in a random order
    shuffled.add_nodes_from(np.random.default_rng(1).permutation(list(G.nodes)).tolist())
    shuffled.add_edges_from(G.edges)
    graph = pdmm.Graph.from_networkx(shuffled)
    assert graph.nodes == list(shuffled.nodes)
    assert_same_compiled(pdmm.CompiledGraph.from_graph(graph), loop_compiled(shuffled))
    multi = nx.MultiGraph(shuffled)
    multi.add_edges_from(list(shuffled.edges)[:5])  # parallel edges become one
    assert_same_compiled(pdmm.CompiledGraph.from_networkx(multi), loop_compiled(shuffled))


@pytest.mark.parametrize("G", list(unequal_degree_graphs())[:3])
def test_from_edges_collapses_repeats_reversals_and_self_loops(G):
    src, dst = edge_arrays(G)
    want = loop_compiled(G)
    assert_same_compiled(pdmm.CompiledGraph.from_graph(pdmm.Graph.from_edges(src, dst)), want)
    rng = np.random.default_rng(5)
    loops = [3, 3, G.number_of_nodes() - 1]
    messy_src = np.concatenate([src, dst, src[:7], loops])  # every edge reversed, some twice, three loops
    messy_dst = np.concatenate([dst, src, dst[:7], loops])
    order = rng.permutation(len(messy_src))
    for convert in (
        lambda a: a.astype(np.int32),
        lambda a: torch.from_numpy(a),
        lambda a: a.tolist(),
        lambda a: a.astype(np.uint16),
    ):
        with pytest.warns(UserWarning, match="the graph has 3 self-loop.s. .i, i.; they are ignored") as caught:
            graph = pdmm.Graph.from_edges(convert(messy_src[order]), convert(messy_dst[order]))
        assert caught[0].filename == __file__  # attributed to the caller, not to pdmm
        assert graph.nodes == range(G.number_of_nodes())
        assert_same_compiled(pdmm.CompiledGraph.from_graph(graph), want)


def test_from_scipy_takes_the_union_of_the_matrix_and_its_transpose():
    G = pdmm.topology("barabasi_albert", n=35, seed=6)
    src, dst = edge_arrays(G)
    n, want = G.number_of_nodes(), loop_compiled(G)
    weights = np.random.default_rng(0).uniform(0.5, 2, len(src))
    upper = sp.csr_matrix((weights, (np.minimum(src, dst), np.maximum(src, dst))), shape=(n, n))
    symmetric = sp.csr_array(upper + upper.T)
    u, v = next(nx.non_edges(G))
    lower = sp.coo_array(
        (np.r_[weights, 0.0], (np.r_[np.maximum(src, dst), u], np.r_[np.minimum(src, dst), v])), shape=(n, n)
    )  # one stored zero at (u, v), not an edge of G
    for matrix in (upper, symmetric, lower, symmetric.tolil(), upper.T.tocsc()):
        assert_same_compiled(pdmm.CompiledGraph.from_graph(pdmm.Graph.from_scipy(matrix)), want)
    with pytest.warns(UserWarning, match="2 self-loop"):
        looped = pdmm.Graph.from_scipy(symmetric + sp.diags_array(np.r_[1.0, 1.0, np.zeros(n - 2)]))
    assert_same_compiled(pdmm.CompiledGraph.from_graph(looped), want)


@pytest.mark.parametrize("seed", range(6))
def test_the_triangle_adjacency_and_components_equal_a_plain_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    m = int(rng.integers(1, 2 * n))
    src = rng.integers(n - 3, size=m)
    dst = (src + rng.integers(1, n - 3, size=m)) % (n - 3)  # no self loops; nodes n-3..n-1 have no edges
    graph = pdmm.Graph.from_edges(src, dst, n=n)
    i, j = graph.edges[:, 0], graph.edges[:, 1]
    want = sp.coo_array((np.ones(len(i)), (i, j)), shape=(n, n)).toarray()  # one entry per edge, above the diagonal
    got = graph.adjacency(triangle=True)
    assert got.dtype == np.float64 and got.nnz == len(i)
    np.testing.assert_array_equal(got.toarray(), want)
    G = nx.empty_graph(n)
    G.add_edges_from(graph.edges.tolist())
    assert graph.components == nx.number_connected_components(G)


def test_graph_round_trips_to_networkx_and_scipy():
    G = pdmm.topology("small_world", n=25, seed=7)
    graph = pdmm.Graph.from_networkx(G)
    back = graph.to_networkx()
    assert list(back.nodes) == list(G.nodes) and set(map(frozenset, back.edges)) == set(map(frozenset, G.edges))
    np.testing.assert_array_equal(graph.adjacency().toarray(), nx.to_numpy_array(G))
    np.testing.assert_array_equal(graph.degree, [d for _, d in G.degree])
    assert graph.number_of_edges() == G.number_of_edges() and graph.components == 1


def test_solve_on_a_graph_matches_networkx_and_the_mean():
    G = pdmm.topology("barabasi_albert", n=50, seed=8)
    a = np.random.default_rng(8).normal(size=(50, 3))
    src, dst = edge_arrays(G)
    nx_result = pdmm.solve(pdmm.averaging(G, a), rho=0.5)
    for graph in (pdmm.Graph.from_edges(dst, src), pdmm.Graph.from_networkx(G), nx.to_scipy_sparse_array(G)):
        result = pdmm.solve(pdmm.averaging(graph, a), rho=0.5)
        np.testing.assert_allclose(result.x, nx_result.x, rtol=0, atol=1e-12)
        assert result.iterations == nx_result.iterations and list(result.nodes) == list(range(50))
    np.testing.assert_allclose(nx_result.x, np.broadcast_to(a.mean(0), a.shape), rtol=0, atol=1e-8)


def test_every_constructor_and_edge_matrices_accept_a_graph():
    G = pdmm.topology("random_regular", n=12, seed=9, degree=3)
    graph = pdmm.Graph.from_networkx(G)
    rng = np.random.default_rng(9)
    H, y = rng.normal(size=(12, 4, 2)), rng.normal(size=(12, 4))
    P = np.broadcast_to(np.eye(2), (12, 2, 2)) * rng.uniform(1, 2, (12, 1, 1))
    builds = [
        lambda g: pdmm.least_squares(g, H, y, ridge=0.1),
        lambda g: pdmm.lasso(g, H, y, lam=0.5),
        lambda g: pdmm.logistic(g, H, np.sign(y)),
        lambda g: pdmm.quadratic(g, P, rng.normal(size=(12, 2))),
    ]
    for build in builds:
        want, got = build(G), build(graph)
        assert_same_compiled(got.compiled, want.compiled)
        assert got.graph is graph and want.graph is G  # Problem keeps the graph it was given
    edges = {(i, j): (np.eye(2), -np.eye(2), np.zeros(2)) for i, j in G.edges}
    a = rng.normal(size=(12, 2))
    x_nx = pdmm.solve(pdmm.averaging(G, a, constraints=edges), max_iter=300).x
    x_graph = pdmm.solve(pdmm.averaging(graph, a, constraints=edges), max_iter=300).x
    np.testing.assert_allclose(x_graph, x_nx, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        pdmm.reference(pdmm.averaging(graph, a, constraints=edges)),
        pdmm.reference(pdmm.averaging(G, a, constraints=edges)),
        rtol=0,
        atol=1e-8,
    )


# generators


def test_random_geometric_is_the_brute_force_set_of_close_pairs():
    n, radius, seed = 300, 0.15, 3
    graph = pdmm.Graph.random_geometric(n, radius, seed=seed)
    points = np.random.default_rng(seed).random((n, 2))  # the first draw (connected at this radius)
    points = points[np.lexsort((points[:, 0], np.floor(points[:, 1] / radius)))]  # numbered by strip, then x
    i, j = np.nonzero(np.triu(squareform(pdist(points)) <= radius, 1))
    np.testing.assert_array_equal(graph.edges, np.stack([i, j], 1))
    np.testing.assert_array_equal(pdmm.Graph.random_geometric(n, radius, seed=seed).edges, graph.edges)
    assert not np.array_equal(pdmm.Graph.random_geometric(n, radius, seed=seed + 1).edges, graph.edges)
    assert pdmm.Graph.random_geometric(200, seed=0).components == 1  # default radius sqrt(2 ln n / n)


@pytest.mark.parametrize("n, degree", [(4, 3), (10, 3), (12, 5), (50, 7), (21, 18), (20, 19), (1000, 4), (3000, 12)])
def test_random_regular_is_simple_and_regular(n, degree):
    graph = pdmm.Graph.random_regular(n, degree, seed=n)
    i, j = graph.edges.T
    assert np.all(i < j) and len(np.unique(i * n + j)) == len(i) == n * degree // 2  # no loops, no repeats
    np.testing.assert_array_equal(graph.degree, np.full(n, degree))
    assert graph.components == 1
    np.testing.assert_array_equal(pdmm.Graph.random_regular(n, degree, seed=n).edges, graph.edges)


@pytest.mark.parametrize("rows, cols, periodic", [(1, 7, False), (4, 6, False), (5, 3, True), (6, 8, True)])
def test_grid_equals_networkx_grid_2d_graph(rows, cols, periodic):
    want = nx.convert_node_labels_to_integers(nx.grid_2d_graph(rows, cols, periodic=periodic))  # (r, c) -> r * cols + c
    assert_same_compiled(pdmm.CompiledGraph.from_graph(pdmm.Graph.grid(rows, cols, periodic)), loop_compiled(want))


def test_erdos_renyi_counts_and_pairs_are_binomial_and_reproducible():
    n, p = 400, 0.05
    total = n * (n - 1) // 2
    counts = [pdmm.Graph.erdos_renyi(n, p, seed=s).number_of_edges() for s in range(20)]
    sd = np.sqrt(total * p * (1 - p))
    assert all(abs(c - total * p) < 5 * sd for c in counts) and len(set(counts)) > 10
    assert abs(np.mean(counts) - total * p) < 5 * sd / np.sqrt(20)
    np.testing.assert_array_equal(
        pdmm.Graph.erdos_renyi(n, p, seed=4).edges, pdmm.Graph.erdos_renyi(n, p, seed=4).edges
    )
    hits = np.zeros((12, 12))  # every pair equally likely: 400 samples of G(12, 0.5), each pair Binomial(400, 0.5)
    for s in range(400):
        i, j = pdmm.Graph.erdos_renyi(12, 0.5, seed=s).edges.T
        hits[i, j] += 1
    pair_hits = hits[np.triu_indices(12, 1)]
    assert np.all(np.abs(pair_hits - 200) < 5 * 10)  # sd = sqrt(400 / 4) = 10


def test_generated_graphs_solve():
    a = np.random.default_rng(0).normal(size=(64, 2))
    for graph in (
        pdmm.Graph.random_geometric(64, seed=1),
        pdmm.Graph.random_regular(64, 4, seed=1),
        pdmm.Graph.grid(8, 8),
        pdmm.Graph.erdos_renyi(64, seed=1),
    ):
        x = pdmm.solve(pdmm.averaging(graph, a), rho=1.0, max_iter=3000).x
        np.testing.assert_allclose(x, np.broadcast_to(a.mean(0), a.shape), rtol=0, atol=1e-8)


# bad input

BAD_EDGES = [
    (([0, -2], [1, 0]), {}, "node indices must be >= 0, got edge 1: .-2, 0."),
    (([0, 1], [1, 5]), {"n": 5}, "node index 5 is out of range for n=5 nodes .indices 0..4."),
    (([0.0, 1.0], [1.0, 2.0]), {}, "src must hold integer node indices, got dtype float64"),
    (([0, 1], [1.0, np.nan]), {}, "dst contains NaN; node indices must be integers"),
    (([True, False], [False, True]), {}, "src must hold integer node indices, got dtype bool"),
    (([0, 1, 2], [1, 2]), {}, "src and dst must have the same length, got 3 and 2"),
    (([], []), {"n": 4}, "the graph has 4 nodes and no edges; PDMM needs a connected graph"),
    (([[0, 1]], [[1, 2]]), {}, "src must be a 1-D array of node indices, got shape .1, 2."),
    (([0], [1]), {"n": 0}, "n must be an integer in 1..2147483648, got n=0"),
    (([0], [1]), {"n": 2.5}, "n must be an integer in 1..2147483648, got n=2.5"),
]


@pytest.mark.parametrize("args, kwargs, message", BAD_EDGES)
def test_from_edges_names_bad_input(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        pdmm.Graph.from_edges(*args, **kwargs)


def test_only_self_loops_warn_then_fail():
    with pytest.warns(UserWarning, match="2 self-loop"), pytest.raises(ValueError, match="3 nodes and no edges"):
        pdmm.Graph.from_edges([1, 2], [1, 2], n=3)


@pytest.mark.parametrize(
    "graph, components",
    [
        (lambda: pdmm.Graph.from_edges([0, 2], [1, 3]), 2),
        (lambda: pdmm.Graph.from_edges([0, 1], [1, 2], n=5), 3),  # nodes 3 and 4 have no edges
        (lambda: sp.csr_array(nx.to_scipy_sparse_array(nx.disjoint_union(nx.path_graph(3), nx.cycle_graph(4)))), 2),
    ],
)
def test_disconnected_graphs_name_their_components(graph, components):
    graph = graph()
    n = pdmm.array_graph.node_count(graph)
    with pytest.raises(ValueError, match=f"the graph is disconnected: it has {components} connected components; "):
        pdmm.averaging(graph, np.zeros((n, 1)))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: pdmm.Graph.from_scipy(np.eye(3)),
            TypeError,
            "from_scipy needs a scipy.sparse matrix or array, got ndarray",
        ),
        (
            lambda: pdmm.Graph.from_scipy(sp.csr_array(np.ones((2, 3)))),
            ValueError,
            r"must be square \(n, n\), got shape \(2, 3\)",
        ),
        (lambda: pdmm.Graph.from_scipy(sp.csr_array(np.array([[0, np.nan], [1, 0]]))), ValueError, "contains NaN"),
        (lambda: pdmm.Graph.from_networkx(nx.DiGraph([(0, 1)])), ValueError, "must be undirected"),
        (lambda: pdmm.Graph.from_networkx([(0, 1)]), TypeError, "from_networkx needs a networkx graph, got list"),
        (
            lambda: pdmm.averaging([(0, 1)], np.zeros((2, 1))),
            TypeError,
            "the graph must be a networkx graph, a pdmm.Graph or a scipy sparse adjacency matrix, got list",
        ),
        (lambda: pdmm.averaging(pdmm.Graph.grid(2, 3), np.zeros((5, 1))), ValueError, "a must have shape"),
        (
            lambda: pdmm.averaging(pdmm.Graph.grid(2, 3), np.zeros((6, 1)), constraints={(0, 4): (1, -1, 0)}),
            ValueError,
            "not edges of the graph",
        ),
        (lambda: pdmm.Graph.random_regular(11, 5), ValueError, "n \\* degree even, got n=11, degree=5"),
        (lambda: pdmm.Graph.random_regular(6, 6), ValueError, "integer degree in 1..n-1, got degree=6 for n=6"),
        (lambda: pdmm.Graph.random_regular(1000, 1), ValueError, "no connected sample in 100 tries"),
        (lambda: pdmm.Graph.erdos_renyi(10, 1.5), ValueError, "erdos_renyi needs 0 < p <= 1, got p=1.5"),
        (lambda: pdmm.Graph.random_geometric(10, 0), ValueError, "random_geometric needs radius > 0, got radius=0"),
        (lambda: pdmm.Graph.random_geometric(50, 0.01), ValueError, "no connected sample in 100 tries with n=50"),
        (lambda: pdmm.Graph.random_geometric(1), ValueError, "integer n in 2..2147483648 nodes, got n=1"),
        (lambda: pdmm.Graph.grid(0, 4), ValueError, "rows must be an integer >= 1, got 0"),
        (lambda: pdmm.Graph.grid(4, 2, periodic=True), ValueError, "cols must be an integer >= 3, got 2"),
        (lambda: pdmm.Graph.grid(1, 1), ValueError, "a grid needs at least 2 nodes"),
    ],
)
def test_bad_graphs_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_networkx_self_loops_still_warn_from_the_callers_line():
    G = nx.cycle_graph(5)
    G.add_edges_from([(2, 2)])
    with pytest.warns(UserWarning, match="the graph has 1 self-loop") as caught:
        problem = pdmm.averaging(G, np.zeros((5, 1)))
    assert caught[0].filename == __file__
    assert_same_compiled(problem.compiled, loop_compiled(G))
