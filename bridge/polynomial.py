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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cvxpy as cp
import numpy as np
import numpy.typing as npt
import scipy.linalg
import scipy.sparse as sp

Matrix = Any  # an (n, n) numpy array or scipy sparse matrix: anything with W @ x

POINTS_PER_DEGREE = 200  # the safeguard |p| <= 1 is imposed at the extrema of T_N, N = 200 degree (>= 2000):
OVERSHOOT = 1e-4  # between them |p| may exceed 1 by about (pi / 200)^2 / 8 = 3e-5; checked on a finer grid


def nontrivial_spectrum(W: Matrix) -> np.ndarray:
    """The eigenvalues of the symmetric mixing matrix W other than one eigenvalue 1 (that of the all-ones
    vector), ascending: (n - 1,)."""
    W = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    values = scipy.linalg.eigvalsh(W)
    return np.delete(values, np.argmin(np.abs(values - 1)))


def chebyshev_basis(points: npt.ArrayLike, degree: int) -> np.ndarray:
    """(len(points), degree + 1): T_0..T_degree at `points` (in [-1, 1]), by the three-term recurrence."""
    points = np.asarray(points, dtype=np.float64)
    out = np.empty((len(points), degree + 1))
    out[:, 0] = 1.0
    if degree >= 1:
        out[:, 1] = points
    for k in range(1, degree):
        out[:, k + 1] = 2 * points * out[:, k] - out[:, k - 1]
    return out


def expected_error(coefficients: np.ndarray, spectrum: np.ndarray) -> float:
    """sqrt(1 / (n - 1) sum_j p(lambda_j)^2): the root expected squared error of p on a graph with that
    nontrivial spectrum, relative to the initial disagreement (module docstring)."""
    values = chebyshev_basis(spectrum, len(coefficients) - 1) @ coefficients
    return float(np.sqrt(np.mean(values**2)))


def fit_filter(spectra: Sequence[np.ndarray], degree: int, safeguard: bool = True) -> np.ndarray:
    """Chebyshev coefficients (degree + 1,) of the p with p(1) = 1 minimising
    sum_g 1 / (n_g - 1) sum_j p(lambda_j^g)^2 over the nontrivial spectra of the tuning graphs; with
    `safeguard`, subject to -1 <= p <= 1 at 200 degree Chebyshev points of [-1, 1] (a quadratic program,
    solved with cvxpy; the bound keeps the coefficients small, so the Chebyshev basis is well conditioned),
    else in closed form (minimal_filter). docs/averaging.md sections 4, 7.

    Parameters
    ----------
    spectra : sequence of numpy.ndarray
        The nontrivial spectrum (n_g - 1,) of each tuning graph's W (nontrivial_spectrum).
    degree : int
        The polynomial's degree r >= 1, the rounds it runs.
    safeguard : bool
        Impose -1 <= p <= 1 on [-1, 1].

    Returns
    -------
    numpy.ndarray
        (degree + 1,) Chebyshev coefficients c_0..c_r, summing to 1 (p(1) = 1).

    Raises
    ------
    ValueError
        When degree < 1.
    RuntimeError
        When cvxpy fails, or the fitted p exceeds 1 + 1e-4 in size between the points.
    """
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


@dataclass(frozen=True)
class OrthogonalFilter:
    """p = sum_k c_k q_k, the q_k orthonormal for a spectrum's weighted points (lanczos), by the recurrence
    beta_{k+1} q_{k+1}(x) = (x - alpha_k) q_k(x) - beta_k q_{k-1}(x), q_0 = 1 / beta_0, q_{-1} = 0. exact: the
    degree reached the number of distinct points, where p vanishes on all of them and p(W) a = x* exactly."""

    alpha: np.ndarray
    beta: np.ndarray
    coefficients: np.ndarray
    exact: bool = False

    def apply(self, W: Matrix, a: npt.ArrayLike) -> np.ndarray:
        """p(W) a, (..., n), for values a (..., n): one product with W per degree, like apply_filter."""
        a = np.asarray(a, dtype=np.float64)
        if self.exact:
            return np.broadcast_to(a.mean(-1, keepdims=True), a.shape).copy()
        flat = a.reshape(-1, a.shape[-1]).T
        previous, current = np.zeros_like(flat), flat / self.beta[0]
        total = self.coefficients[0] * current
        for k in range(len(self.alpha)):
            previous, current = (
                current,
                (W @ current - self.alpha[k] * current - self.beta[k] * previous) / self.beta[k + 1],
            )
            total = total + self.coefficients[k + 1] * current
        return total.T.reshape(a.shape)

    def values(self, x: npt.ArrayLike) -> np.ndarray:
        """p at the points x."""
        x = np.asarray(x, dtype=np.float64)
        if self.exact:
            raise ValueError("an exact filter is defined by vanishing on its spectrum; it has no stored values")
        previous, current = np.zeros_like(x), np.full_like(x, 1 / self.beta[0])
        total = self.coefficients[0] * current
        for k in range(len(self.alpha)):
            previous, current = current, ((x - self.alpha[k]) * current - self.beta[k] * previous) / self.beta[k + 1]
            total = total + self.coefficients[k + 1] * current
        return total

    def expected_error(self) -> float:
        """The root expected squared error on the spectrum it was built for: sqrt(sum_k c_k^2) (orthonormality,
        weights summing to 1); 0 when exact."""
        return 0.0 if self.exact else float(np.sqrt(np.sum(self.coefficients**2)))


def lanczos(values: np.ndarray, weights: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """(alpha, beta, exhausted): the recurrence coefficients alpha_0.., beta_0.. of the polynomials orthonormal
    for the discrete measure sum_j w_j delta(v_j), by Lanczos on diag(v) from sqrt(w) with full
    reorthogonalisation, for up to `steps` steps; exhausted when the measure's distinct points (fewer than
    steps + 1) were all used, the last step that fits being done."""
    start = np.sqrt(weights)
    beta, vectors, alpha = [float(np.linalg.norm(start))], [start / np.linalg.norm(start)], []
    scale = max(float(np.abs(values).max()), 1.0)
    for k in range(steps):
        w = values * vectors[-1]
        alpha.append(float(vectors[-1] @ w))
        w = w - alpha[-1] * vectors[-1] - (beta[-1] * vectors[-2] if k else 0)
        for _ in range(2):  # twice is enough (Parlett)
            w = w - np.stack(vectors).T @ (np.stack(vectors) @ w)
        norm = float(np.linalg.norm(w))
        if norm < 1e-12 * scale:
            return np.array(alpha), np.array(beta), True
        beta.append(norm)
        vectors.append(w / norm)
    return np.array(alpha), np.array(beta), False


def oracle_filters(spectrum: npt.ArrayLike, degrees: Sequence[int]) -> dict[int, OrthogonalFilter]:
    """{degree: OrthogonalFilter} of the best p (p(1) = 1, degree <= r) for one graph's nontrivial spectrum,
    every eigenvalue weighted 1 / (n - 1): with q_k orthonormal for those weights, p = sum_k q_k(1) q_k / S_r,
    S_r = sum_{k <= r} q_k(1)^2 (the kernel polynomial), whose expected squared error is 1 / S_r; once r
    reaches the number of distinct eigenvalues p can vanish on all of them and the error is 0
    (docs/averaging.md section 7). One Lanczos run for every degree."""
    values, counts = distinct(spectrum)
    alpha, beta, exhausted = lanczos(values, counts / counts.sum(), max(degrees))
    q_at_one = [1 / beta[0]]  # q_k(1)
    for k in range(len(beta) - 1):
        q_at_one.append(((1 - alpha[k]) * q_at_one[k] - beta[k] * (q_at_one[k - 1] if k else 0)) / beta[k + 1])
    at_one = np.array(q_at_one)
    out = {}
    for r in degrees:
        if exhausted and r >= len(alpha):  # r >= the number of points the measure holds, to 1e-12
            out[r] = OrthogonalFilter(alpha[:0], beta[:1], at_one[:1], exact=True)
        else:
            out[r] = OrthogonalFilter(alpha[:r], beta[: r + 1], at_one[: r + 1] / np.sum(at_one[: r + 1] ** 2))
    return out


def oracle_filter(spectrum: npt.ArrayLike, degree: int) -> OrthogonalFilter:
    """The best polynomial filter of degree <= `degree` for one nontrivial spectrum (oracle_filters): the kernel
    polynomial p = sum_k q_k(1) q_k / S_r, expected squared error 1 / S_r (docs/averaging.md section 7).

    Parameters
    ----------
    spectrum : array_like
        The graph's nontrivial spectrum, (n - 1,).
    degree : int
        The degree r, the rounds it runs.

    Returns
    -------
    OrthogonalFilter
        Its apply(W, a) runs p(W) a; exact once r reaches the number of distinct eigenvalues.
    """
    return oracle_filters(spectrum, [degree])[degree]


def minimal_filter(values: np.ndarray, weights: np.ndarray, degree: int) -> np.ndarray:
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


def distinct(spectrum: npt.ArrayLike, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """(distinct eigenvalues, multiplicities): sorted eigenvalues closer than tol to the previous one are merged."""
    values = np.sort(np.asarray(spectrum, dtype=np.float64))
    starts = np.flatnonzero(np.concatenate([[True], np.diff(values) > tol]))
    return values[starts], np.diff(np.append(starts, len(values)))


def apply_filter(W: Matrix, a: npt.ArrayLike, coefficients: Sequence[float] | np.ndarray) -> np.ndarray:
    """p(W) a, (..., n), for values a (..., n) and W an (n, n) matrix (scipy sparse or dense): sum_k c_k T_k(W) a
    by the recurrence T_{k+1}(W) a = 2 W T_k(W) a - T_{k-1}(W) a, len(coefficients) - 1 rounds of one product
    with W each (docs/averaging.md section 7).

    Parameters
    ----------
    W : numpy.ndarray or scipy sparse matrix
        (n, n) mixing matrix.
    a : array_like
        (..., n) node values.
    coefficients : sequence of float
        Chebyshev coefficients c_0..c_r, r >= 1 (fit_filter).

    Returns
    -------
    numpy.ndarray
        (..., n) float64.

    Raises
    ------
    ValueError
        When fewer than two coefficients are given.
    """
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
