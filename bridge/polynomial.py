"""Polynomial filters of a mixing matrix: the linear schemes that send one number per edge and round.

r rounds of any scheme in which every node sends one number per round, each a fixed linear
combination of what it holds (gossip, Chebyshev-accelerated gossip, any fixed-coefficient
recursion on W), give x^r = p(W) a for a polynomial p of degree <= r with p(1) = 1 (so that the
mean is kept). On averaging instances a = mu 1 + s z with z ~ N(0, I), the expected squared error
relative to the initial disagreement is

    E ||p(W) a - x*||^2 / E ||a - x*||^2 = 1 / (n - 1) sum_{j >= 2} p(lambda_j)^2

over the eigenvalues lambda_2..lambda_n of W other than its eigenvalue 1 (docs/averaging.md
section 4; the rows and the safeguard: section 7). Two rows of bridge.comparison come from this:

- fit_filter: the p of each degree that minimises that error summed over the spectra of the
  tuning graphs, with the safeguard |p(x)| <= 1 on [-1, 1] (so no graph whose W has its spectrum
  in [-1, 1], Metropolis weights included, sees its disagreement grow): an algorithm, fitted
  once on tuning data and run unchanged on every held-out graph;
- oracle_filter: the p minimising it for one graph's own spectrum, the best polynomial filter of
  that W in expectation: a bound on linear schemes with those weights, not an algorithm (it needs
  the spectrum of the graph it runs on). Its error is 0 once r reaches the number of distinct
  eigenvalues other than 1.

Polynomials are held as coefficients c_0..c_r in the Chebyshev basis on [-1, 1], p = sum c_k T_k,
and applied with the three-term recurrence T_{k+1}(W) a = 2 W T_k(W) a - T_{k-1}(W) a: one
product with W, one number per edge, per round.
"""
import warnings

import cvxpy as cp
import numpy as np
import scipy.linalg
import scipy.sparse as sp

POINTS_PER_DEGREE = 200  # the safeguard |p| <= 1 is imposed at the extrema of T_N, N = 200 degree (>= 2000):
OVERSHOOT = 1e-4  # between them |p| may exceed 1 by about (pi / 200)^2 / 8 = 3e-5; checked on a finer grid


def nontrivial_spectrum(W):
    """The eigenvalues of the symmetric mixing matrix W other than one eigenvalue 1 (that of the all-ones
    vector), ascending: (n - 1,)."""
    W = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    values = scipy.linalg.eigvalsh(W)
    return np.delete(values, np.argmin(np.abs(values - 1)))


def chebyshev_basis(points, degree):
    """(len(points), degree + 1): T_0..T_degree at `points` (in [-1, 1]), by the three-term recurrence."""
    points = np.asarray(points, dtype=np.float64)
    out = np.empty((len(points), degree + 1))
    out[:, 0] = 1.0
    if degree >= 1:
        out[:, 1] = points
    for k in range(1, degree):
        out[:, k + 1] = 2 * points * out[:, k] - out[:, k - 1]
    return out


def expected_error(coefficients, spectrum):
    """sqrt(1 / (n - 1) sum_j p(lambda_j)^2): the root expected squared error of p on a graph with that
    nontrivial spectrum, relative to the initial disagreement (module docstring)."""
    values = chebyshev_basis(spectrum, len(coefficients) - 1) @ coefficients
    return float(np.sqrt(np.mean(values ** 2)))


def fit_filter(spectra, degree, safeguard=True):
    """Chebyshev coefficients (degree + 1,) of the p with p(1) = 1 minimising
    sum_g 1 / (n_g - 1) sum_j p(lambda_j^g)^2 over the nontrivial spectra of the tuning graphs; with
    `safeguard`, subject to |p| <= 1 at 200 degree Chebyshev points of [-1, 1] (a quadratic program,
    solved with cvxpy; the bound keeps the coefficients small, so the Chebyshev basis is well conditioned),
    else in closed form (minimal_filter)."""
    if degree < 1:
        raise ValueError(f"degree must be >= 1, got {degree}")
    values = np.concatenate(spectra)
    weights = np.concatenate([np.full(len(s), 1 / (len(s) * len(spectra))) for s in spectra])
    if not safeguard:
        return minimal_filter(values, weights, degree)
    c = cp.Variable(degree + 1)
    points = max(2000, POINTS_PER_DEGREE * degree)
    grid = np.cos(np.pi * np.arange(points + 1) / points)  # extrema of T_N, +-1 included
    constraints = [cp.sum(c) == 1, cp.abs(chebyshev_basis(grid, degree) @ c) <= 1]  # T_k(1) = 1 for every k
    rows = chebyshev_basis(values, degree) * np.sqrt(weights)[:, None]
    problem = cp.Problem(cp.Minimize(cp.sum_squares(rows @ c)), constraints)
    with warnings.catch_warnings():  # "solution may be inaccurate": the safeguard is checked below either way
        warnings.simplefilter("ignore", UserWarning)
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    if c.value is None or problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"fitting a degree-{degree} filter failed: cvxpy reports {problem.status}")
    coefficients = np.asarray(c.value) / np.sum(c.value)  # p(1) = 1 exactly
    peak = np.abs(chebyshev_basis(np.cos(np.linspace(0, np.pi, 8 * points)), degree) @ coefficients).max()
    if peak > 1 + OVERSHOOT:  # between the points, or an inaccurate solve: the safeguard must hold on all of [-1, 1]
        raise RuntimeError(f"the degree-{degree} filter reaches |p| = 1 + {peak - 1:.3g} on [-1, 1]")
    return coefficients


def oracle_filter(spectrum, degree):
    """Chebyshev coefficients of the best p (p(1) = 1, degree <= `degree`) for one graph's nontrivial
    spectrum: minimal_filter with every eigenvalue weighted alike."""
    values, weights = distinct(spectrum)  # a repeated eigenvalue is one condition on p, counted with its weight
    return minimal_filter(values, weights.astype(np.float64), degree)


def minimal_filter(values, weights, degree):
    """Chebyshev coefficients c minimising ||B c||^2 = sum_j w_j p(v_j)^2 subject to p(1) = 1^T c = 1, B the
    weighted basis at the points v_j. Where some c in the null space of B has 1^T c != 0 the minimum is 0 (p
    vanishes at every point): c is the projection of 1 on that null space, scaled; otherwise
    c = M^+ 1 / (1^T M^+ 1) with M = B^T B (the kernel polynomial of the weighted points). One SVD of B."""
    basis = chebyshev_basis(values, degree) * np.sqrt(weights)[:, None]
    _, s, vt = np.linalg.svd(basis)
    ones = np.ones(degree + 1)
    rank = int(np.sum(s > s[0] * 1e-12))
    null, kept = vt[rank:].T, vt[:rank].T
    projected = null @ (null.T @ ones)
    if ones @ projected > 1e-8 * (degree + 1):
        return projected / (ones @ projected)
    inverse = kept @ ((kept.T @ ones) / s[:rank] ** 2)
    return inverse / (ones @ inverse)


def distinct(spectrum, tol=1e-9):
    """(distinct eigenvalues, multiplicities): sorted eigenvalues closer than tol to the previous one are merged."""
    values = np.sort(np.asarray(spectrum, dtype=np.float64))
    starts = np.flatnonzero(np.concatenate([[True], np.diff(values) > tol]))
    return values[starts], np.diff(np.append(starts, len(values)))


def apply_filter(W, a, coefficients):
    """p(W) a, (..., n), for values a (..., n) and W an (n, n) matrix (scipy sparse or dense): sum_k c_k T_k(W) a
    by the recurrence, len(coefficients) - 1 rounds of one product with W each."""
    if len(coefficients) < 2:
        raise ValueError("a filter needs degree >= 1 (at least two coefficients)")
    a = np.asarray(a, dtype=np.float64)
    flat = a.reshape(-1, a.shape[-1]).T  # (n, everything else)
    previous, current = flat, W @ flat
    total = coefficients[0] * previous + coefficients[1] * current
    for k in range(1, len(coefficients) - 1):
        previous, current = current, 2 * (W @ current) - previous
        total = total + coefficients[k + 1] * current
    return total.T.reshape(a.shape)
