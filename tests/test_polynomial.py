"""bridge.polynomial: polynomial filters of a Metropolis matrix against eigendecompositions and least squares."""

import mpmath
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from bridge.polynomial import (
    apply_filter,
    chebyshev_basis,
    distinct,
    expected_error,
    fit_filter,
    nontrivial_spectrum,
    oracle_filter,
)


def metropolis(G):
    """Metropolis-Hastings weights from their definition, one edge at a time (an independent reference)."""
    nodes = list(G.nodes)
    W = np.zeros((len(nodes), len(nodes)))
    for u, v in G.edges:
        i, j = nodes.index(u), nodes.index(v)
        W[i, j] = W[j, i] = 1 / (1 + max(G.degree(u), G.degree(v)))
    return W + np.diag(1 - W.sum(1))


def monomial_best(spectrum, degree):
    """The best p (p(1) = 1) by least squares in the monomial basis: p(l) = 1 + sum_k b_k (l^k - 1)."""
    columns = np.stack([spectrum**k - 1 for k in range(1, degree + 1)], axis=1)
    b = np.linalg.lstsq(columns, -np.ones(len(spectrum)), rcond=None)[0]
    return lambda lam: 1 + sum(b[k - 1] * (lam**k - 1) for k in range(1, degree + 1))


def dense_filter(W, a, p):
    """p(W) a by eigendecomposition, for a (B, n)."""
    values, vectors = np.linalg.eigh(W)
    return (vectors @ np.diag(p(values)) @ vectors.T @ a.T).T


def mp_best_error(spectrum, degree):
    """The smallest root mean p^2 over the spectrum, p(1) = 1, by least squares at 120 digits (mpmath)."""
    mpmath.mp.dps = 120
    lam = [mpmath.mpf(float(v)) for v in spectrum]
    B = mpmath.matrix([[v**k - 1 for k in range(1, degree + 1)] for v in lam])
    b = mpmath.lu_solve(B.T * B, B.T * mpmath.matrix([-1] * len(lam)))
    values = [1 + sum(b[k - 1] * (v**k - 1) for k in range(1, degree + 1)) for v in lam]
    return float(mpmath.sqrt(sum(v**2 for v in values) / len(values)))


GRAPHS = {
    "ring of 8": nx.cycle_graph(8),
    "3x3 grid": nx.grid_2d_graph(3, 3),
    "geometric": nx.random_geometric_graph(30, 0.35, seed=3),
}


@pytest.mark.parametrize("name", GRAPHS)
def test_the_oracle_is_the_least_squares_polynomial_and_vanishes_at_the_number_of_distinct_eigenvalues(name):
    G = GRAPHS[name]
    W = metropolis(G)
    spectrum = nontrivial_spectrum(W)
    values, _ = distinct(spectrum)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(W))[:-1], spectrum, atol=1e-12)  # 1 is the largest
    count = len(values)
    assert count == len(np.unique(np.round(spectrum, 8)))
    a = np.random.default_rng(0).normal(size=(3, len(G)))
    x_star = a.mean(1, keepdims=True)
    for r in range(1, min(count, 6)):
        oracle = oracle_filter(spectrum, r)
        reference = monomial_best(spectrum, r)
        assert oracle.expected_error() == pytest.approx(np.sqrt(np.mean(reference(spectrum) ** 2)), rel=1e-8)
        assert oracle.expected_error() == pytest.approx(np.sqrt(np.mean(oracle.values(spectrum) ** 2)), rel=1e-10)
        assert oracle.values(np.ones(1))[0] == pytest.approx(1, abs=1e-12)
        np.testing.assert_allclose(oracle.apply(W, a), dense_filter(W, a, reference), atol=1e-9)
    if name == "geometric":
        return
    assert oracle_filter(spectrum, count - 1).expected_error() > 1e-5  # one degree less cannot reach 0
    assert oracle_filter(spectrum, count).exact  # r = the number of distinct eigenvalues: p vanishes on them all
    np.testing.assert_allclose(oracle_filter(spectrum, count).apply(W, a), np.broadcast_to(x_star, a.shape))
    zero = monomial_best(spectrum, count)  # the exact claim, independently: least squares reaches 0 there
    np.testing.assert_allclose(dense_filter(W, a, zero), np.broadcast_to(x_star, a.shape), atol=1e-8)


@pytest.mark.parametrize("G,degrees", [(nx.cycle_graph(66), (8, 24, 32)), (nx.grid_2d_graph(6, 6), (8, 16, 24))])
def test_the_oracle_is_the_best_polynomial_at_high_degree_against_120_digit_least_squares(G, degrees):
    """Rings of 66 (33 distinct eigenvalues) and grids: where a Chebyshev-basis solve loses the bound."""
    spectrum = nontrivial_spectrum(metropolis(G))
    for r in degrees:
        assert oracle_filter(spectrum, r).expected_error() == pytest.approx(mp_best_error(spectrum, r), rel=1e-6)


def test_the_fitted_filter_equals_the_oracle_on_the_graph_it_was_fitted_to():
    """fit_filter (a Chebyshev-basis least squares, safeguard off) and oracle_filter (Lanczos) are two codes."""
    G = GRAPHS["geometric"]
    W = metropolis(G)
    spectrum = nontrivial_spectrum(W)
    a = np.random.default_rng(1).normal(size=(4, len(G)))
    for r in (1, 3, 5):
        fitted = fit_filter([spectrum], r, safeguard=False)
        np.testing.assert_allclose(apply_filter(W, a, fitted), oracle_filter(spectrum, r).apply(W, a), atol=1e-8)
        assert expected_error(fitted, spectrum) == pytest.approx(oracle_filter(spectrum, r).expected_error(), rel=1e-8)
    other = nontrivial_spectrum(metropolis(nx.random_geometric_graph(30, 0.35, seed=4)))
    assert (
        expected_error(fit_filter([other], 3, safeguard=False), spectrum) > oracle_filter(spectrum, 3).expected_error()
    )


def test_the_safeguarded_filter_never_expands_and_the_unguarded_one_does_on_another_topology():
    tuning = [nontrivial_spectrum(metropolis(nx.random_geometric_graph(40, 0.3, seed=s))) for s in range(3)]
    ring = nontrivial_spectrum(metropolis(nx.cycle_graph(40)))
    grid = np.cos(np.linspace(0, np.pi, 20001))
    for r in (2, 6, 12):
        guarded = fit_filter(tuning, r)
        assert np.sum(guarded) == pytest.approx(1, abs=1e-12)  # p(1) = 1: the mean is kept
        assert np.abs(chebyshev_basis(grid, r) @ guarded).max() <= 1 + 1e-4
        assert expected_error(guarded, ring) <= 1 + 1e-4
        # on the tuning graphs the bound costs something, and it is the better filter of the two there only unguarded
        free = fit_filter(tuning, r, safeguard=False)
        assert sum(expected_error(free, s) ** 2 for s in tuning) <= sum(expected_error(guarded, s) ** 2 for s in tuning)
    assert expected_error(fit_filter(tuning, 12, safeguard=False), ring) > 1  # diverges on the ring


def test_a_filter_after_r_rounds_has_heard_only_r_hops():
    G = nx.path_graph(9)
    W = sp.csr_array(metropolis(G))
    a = np.random.default_rng(2).normal(size=(1, 9))
    moved = a.copy()
    moved[0, 0] += 1.0
    spectrum = nontrivial_spectrum(W)
    for r in (1, 2, 4):
        c = np.random.default_rng(r).normal(size=r + 1)
        changed = np.abs(apply_filter(W, a, c) - apply_filter(W, moved, c))[0] > 0
        assert changed.tolist() == [k <= r for k in range(9)]
        bound = oracle_filter(spectrum, r)  # the bound applies its polynomial by the same kind of recurrence
        changed = np.abs(bound.apply(W, a) - bound.apply(W, moved))[0] > 0
        assert changed.tolist() == [k <= r for k in range(9)]


def test_refusals_and_the_chebyshev_basis():
    x = np.linspace(-1, 1, 7)
    np.testing.assert_allclose(chebyshev_basis(x, 4), np.polynomial.chebyshev.chebvander(x, 4), atol=1e-14)
    with pytest.raises(ValueError, match="degree"):
        fit_filter([np.array([0.5])], 0)
    with pytest.raises(ValueError, match="degree"):
        apply_filter(np.eye(2), np.ones((1, 2)), np.array([1.0]))
