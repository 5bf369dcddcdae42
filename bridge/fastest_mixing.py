"""Fastest distributed linear averaging (FDLA): Xiao and Boyd's symmetric mixing matrix of least spectral norm.

For a connected undirected graph with n nodes and m edges e = {i, j}, a_e = e_i - e_j and J = 1 1^T / n,
edge weights w in R^m give the mixing matrix

    W(w) = I - sum_e w_e a_e a_e^T = I - A^T diag(w) A        (A: the m x n incidence matrix, rows a_e^T)

which is symmetric, has W 1 = 1 and is zero off the edges and the diagonal for every w (negative weights
included). Gossip x <- W x contracts the disagreement by rho(w) = ||W(w) - J||_2 = max(lambda_2, -lambda_n)
per round (docs/averaging.md section 2), and FDLA (L. Xiao and S. Boyd, "Fast linear iterations for distributed
averaging", Systems & Control Letters 53, 2004; docs/averaging.md section 8) chooses w minimising it: the
semidefinite program

    minimise s  over (w, s)  subject to  Z_1 = s I - (W(w) - J) >= 0,   Z_2 = s I + (W(w) - J) >= 0,

with dual: maximise tr((I - J)(X_1 - X_2)) over X_1, X_2 >= 0 with tr X_1 + tr X_2 = 1 and
a_e^T (X_1 - X_2) a_e = 0 for every edge; each dual feasible point bounds the optimum rho* from below.
The weights need the whole graph offline, so in this project they give a reference row, not an algorithm a
node can run.

fastest_mixing_weights solves it with a barrier (interior-point) method (S. Boyd and L. Vandenberghe, "Convex
Optimization", 2004, sections 11.3 and 11.6): Newton steps with backtracking on

    phi_t(w, s) = t s - log det Z_1 - log det Z_2

from Metropolis weights, for increasing t. The constraint matrices a_e a_e^T have rank one, so Newton's
matrix (the Hessian of phi_t) is, with P_k = A Z_k^{-1} A^T,

    H_ef = (P_1)_ef^2 + (P_2)_ef^2,    H_es = ||Z_1^{-1} a_e||^2 - ||Z_2^{-1} a_e||^2,
    H_ss = ||Z_1^{-1}||_F^2 + ||Z_2^{-1}||_F^2

as in the dual-scaling method for rank-one constraints of S. J. Benson, Y. Ye and X. Zhang (SIAM J. Optim. 10,
2000): each step costs two n x n Cholesky inverses, the entries of H, and one (m + 1) x (m + 1) Cholesky
factorisation, O(n^3 + m^3). The Newton direction d of phi_t' satisfies H d = -(t' c - g) with g_l = tr(Z^{-1} F_l)
(F_l the derivative of diag(Z_1, Z_2) along variable l, c the unit vector of s), and that makes

    X_k = Z_k^{-1} (Z_k - dZ_k) Z_k^{-1} / t'

satisfy the dual's linear constraints exactly (Benson, Ye and Zhang; the centred case is Boyd and Vandenberghe
section 11.2.2); it is dual feasible where Z_k - dZ_k >= 0, a Cholesky test, and then rho* >= s - gap with
gap = tr(Z X) = (2 n - d^T g) / t'. d is linear in t', so every step tries t' = t, 2 t, .., 16 t with one
factorisation and keeps the best lower bound LB; t is then raised (never lowered) to 1.5 (2 n) / (s - LB), so
that a centred point's gap 2 n / t is two thirds of the certified one. The method stops when s - LB <= tol: the
returned W then has ||W - J||_2 <= s <= rho* + tol (to round-off). From Metropolis weights, tol = 1e-6 took 10
to 16 steps on graphs of up to 20 nodes, and 23 steps, 1.4 s and 2.5 s on one core, on a 24 x 24 grid (576
nodes, 1104 edges) and on a 384-node random geometric graph of radius 0.1 (2055 edges), whose time is mostly
the (m + 1) x (m + 1) factorisation; Newton's matrix is built by a numba kernel where numba is installed.

A smooth upper bound, (1 / beta) log sum_j 2 cosh(beta lambda_j(W - J)), minimised by L-BFGS with beta
increasing, was tried first and rejected: at the optimum of the geometric graph above about ten eigenvalues meet
at each end of the spectrum, and after 2000 eigendecompositions it was still 3e-4 above rho*.
fastest_mixing_weights_cvxpy solves the same program with cvxpy (Clarabel where installed), for graphs of up to
100 nodes: the reference the tests compare against.
"""

import warnings
from typing import Any

import cvxpy as cp
import networkx as nx
import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.linalg import lapack

from pdmm.loop import ConvergenceWarning

try:
    import numba
except ImportError:  # no wheel for this platform: the numpy expression builds Newton's matrix, more slowly
    numba = None  # type: ignore[assignment]  # numba is optional: None marks its absence, tested before each use

Matrix = Any  # an (n, n) numpy array or scipy sparse matrix

CVXPY_LIMIT = 100  # fastest_mixing_weights_cvxpy: most nodes (its SDP has two n x n blocks)
SYMMETRY = 1e-9  # spectral_norm: largest |W - W^T| and |W 1 - 1| accepted
S_START = 0.1  # the start: s = rho + S_START (1 - rho) for the Metropolis weights' rho
GAP_TRIES = (1, 2, 4, 8, 16)  # the multiples t' / t tried for a lower bound each step
CENTRING = 1.5  # t <- CENTRING (2 n) / (s - LB)
ARMIJO = 0.1  # the backtracking line search's sufficient decrease
SMALLEST_STEP = 1e-10  # a step below this fraction of the Newton step: stalled


def spectral_norm(W: Matrix) -> float:
    """||W - 11^T / n||_2 = max(lambda_2, -lambda_n) of a symmetric W with W 1 = 1: the largest |eigenvalue| of W
    other than the eigenvalue 1 of the all-ones vector, gossip's contraction per round (docs/averaging.md
    section 2).

    Parameters
    ----------
    W : array_like or scipy sparse matrix
        The (n, n) mixing matrix, dense or sparse; computed densely (scipy.linalg.eigvalsh of W - J).

    Returns
    -------
    float
        max |lambda_j(W - J)|, 0 for W = J.

    Raises
    ------
    ValueError
        If W is not square, or not symmetric or its rows do not sum to 1 (both to SYMMETRY).
    """
    W = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] == 0:
        raise ValueError(f"the mixing matrix must be square and non-empty, got shape {W.shape}")
    asymmetry, sums = np.abs(W - W.T).max(), np.abs(W.sum(axis=1) - 1).max()
    if asymmetry > SYMMETRY:
        raise ValueError(f"the mixing matrix is not symmetric: max |W - W^T| = {asymmetry:.3g}")
    if sums > SYMMETRY:
        raise ValueError(f"the rows of the mixing matrix must sum to 1: max |W 1 - 1| = {sums:.3g}")
    values = scipy.linalg.eigvalsh(W - 1.0 / len(W))
    return float(max(values[-1], -values[0], 0.0))


def fastest_mixing_weights(G: nx.Graph, tol: float = 1e-6, max_iter: int = 100) -> sp.csr_array:
    """Xiao and Boyd's fastest-mixing weights of G: the W = I - sum_e w_e a_e a_e^T minimising ||W - 11^T / n||_2,
    by the barrier method of the module docstring, started from Metropolis weights.

    Parameters
    ----------
    G : networkx.Graph
        A connected undirected graph without self-loops, at least 2 nodes (a multigraph's parallel edges count
        once). Cost per Newton step O(n^3 + m^3) time and (m + 1)^2 floats of memory for m edges.
    tol : float
        The duality gap to reach: the returned W has ||W - J||_2 <= rho* + tol, rho* the optimum (to round-off).
    max_iter : int
        Most Newton steps (10 to 25 reached tol = 1e-6 on the graphs of the module docstring).

    Returns
    -------
    scipy.sparse.csr_array
        W, (n, n) float64 in list(G.nodes) order: symmetric, rows summing to 1, zero off the edges and the
        diagonal; weights may be negative. Where max_iter or round-off stops the method before tol, the iterate
        with the least upper bound s, after a ConvergenceWarning giving its gap.

    Raises
    ------
    TypeError
        If G is not a networkx graph.
    ValueError
        For a directed graph, one with fewer than 2 nodes, a self-loop or more than one component; for tol <= 0
        or max_iter < 1.
    """
    n, i, j = _edges(G)
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be at least 1, got {max_iter}")
    w, upper, lower, steps, stopped = _interior_point(n, i, j, tol, max_iter)
    if upper - lower > tol:
        warnings.warn(
            f"fastest_mixing_weights stopped ({stopped}) after {steps} Newton steps with duality gap "
            f"{upper - lower:.3g} > tol = {tol:.3g}; returning the best weights found",
            ConvergenceWarning,
            stacklevel=2,
        )
    return _mixing(n, i, j, w)


def fastest_mixing_weights_cvxpy(G: nx.Graph) -> sp.csr_array:
    """The fastest-mixing weights of G solved as the SDP of the module docstring with cvxpy, for small graphs: the
    reference fastest_mixing_weights is tested against. The solver is Clarabel (an interior-point method, to about
    1e-8) where installed, else cvxpy's default (SCS's first-order answer can be 1e-5 above the optimum).

    Parameters
    ----------
    G : networkx.Graph
        A connected undirected graph without self-loops, 2 to CVXPY_LIMIT nodes.

    Returns
    -------
    scipy.sparse.csr_array
        W, (n, n) float64 in list(G.nodes) order, as fastest_mixing_weights.

    Raises
    ------
    TypeError
        If G is not a networkx graph.
    ValueError
        For the graphs fastest_mixing_weights refuses and for more than CVXPY_LIMIT nodes.
    RuntimeError
        If the solver does not report an optimal solution.
    """
    n, i, j = _edges(G)
    if n > CVXPY_LIMIT:
        raise ValueError(f"fastest_mixing_weights_cvxpy is for graphs of at most {CVXPY_LIMIT} nodes, got {n}")
    m = len(i)
    incidence = sp.csr_array((np.r_[np.ones(m), -np.ones(m)], (np.r_[np.arange(m), np.arange(m)], np.r_[i, j])), (m, n))
    w, s = cp.Variable(m), cp.Variable()
    centred = np.eye(n) - np.full((n, n), 1.0 / n) - incidence.T @ cp.diag(w) @ incidence  # W(w) - J
    centred = (centred + centred.T) / 2  # symmetric by construction; this tells cvxpy so
    problem = cp.Problem(cp.Minimize(s), [s * np.eye(n) - centred >> 0, s * np.eye(n) + centred >> 0])
    problem.solve(solver=cp.CLARABEL if cp.CLARABEL in cp.installed_solvers() else None)
    if problem.status != cp.OPTIMAL or w.value is None:
        raise RuntimeError(f"cvxpy did not solve the fastest-mixing SDP: status {problem.status}")
    return _mixing(n, i, j, np.asarray(w.value, dtype=np.float64))


def _edges(G: nx.Graph) -> tuple[int, np.ndarray, np.ndarray]:
    """n and the edges (i, j), i < j, as int64 arrays of positions in list(G.nodes), one per edge, after the
    checks fastest_mixing_weights documents."""
    if not isinstance(G, nx.Graph):
        raise TypeError(f"expected a networkx graph, got {type(G).__name__}")
    if G.is_directed():
        raise ValueError("fastest-mixing weights need an undirected graph; got a directed one")
    n = G.number_of_nodes()
    if n < 2:
        raise ValueError(f"fastest-mixing weights need a graph of at least 2 nodes; this one has {n}")
    loops = nx.number_of_selfloops(G)
    if loops:
        raise ValueError(f"the graph has {loops} self-loop(s); mixing weights live on edges between distinct nodes")
    if not nx.is_connected(G):
        components = nx.number_connected_components(G)
        raise ValueError(f"the graph is not connected ({components} components); no mixing matrix averages it")
    index = {node: k for k, node in enumerate(G.nodes)}
    pairs = np.sort(np.array([(index[u], index[v]) for u, v in G.edges()], dtype=np.int64), axis=1)
    pairs = np.unique(pairs, axis=0)  # a multigraph's parallel edges once
    return n, np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])


def _mixing(n: int, i: np.ndarray, j: np.ndarray, w: np.ndarray) -> sp.csr_array:
    """W(w) = I - A^T diag(w) A as a CSR float64 array: w_e at (i, j) and (j, i), 1 - sum of row i's weights at
    (i, i)."""
    diagonal = 1 - np.bincount(i, w, n) - np.bincount(j, w, n)
    rows = np.r_[i, j, np.arange(n)]
    cols = np.r_[j, i, np.arange(n)]
    return sp.csr_array((np.r_[w, w, diagonal], (rows, cols)), shape=(n, n), dtype=np.float64)


def _laplacian(n: int, i: np.ndarray, j: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A^T diag(w) A, dense: -w_e at (i, j) and (j, i), the weighted degree on the diagonal."""
    L = np.zeros((n, n))
    L[i, j] = -w
    L[j, i] = -w
    L[np.arange(n), np.arange(n)] = np.bincount(i, w, n) + np.bincount(j, w, n)
    return L


def _logdet(Z: np.ndarray) -> float | None:
    """log det Z of a symmetric Z by Cholesky, None where Z is not positive definite. Overwrites Z."""
    factor, info = lapack.dpotrf(Z.T, lower=1, clean=0, overwrite_a=1)  # Z.T: Z in Fortran order, no copy
    return None if info else 2 * float(np.log(np.diag(factor)).sum())


def _inverse(Z: np.ndarray) -> tuple[np.ndarray, float] | None:
    """(Z^{-1}, log det Z) of a symmetric Z by Cholesky, None where Z is not positive definite."""
    factor, info = lapack.dpotrf(Z.T, lower=1, clean=0)
    if info:
        return None
    logdet = 2 * float(np.log(np.diag(factor)).sum())
    inverse, info = lapack.dpotri(factor, lower=1)
    if info:
        return None
    return np.tril(inverse) + np.tril(inverse, -1).T, logdet


def _newton_matrix_numpy(Z1inv: np.ndarray, Z2inv: np.ndarray, i: np.ndarray, j: np.ndarray, H: np.ndarray) -> None:
    """H[:m, :m] = P_1 * P_1 + P_2 * P_2 (entrywise), P_k = A Z_k^{-1} A^T, in full."""
    m = len(i)
    for k, Zinv in enumerate((Z1inv, Z2inv)):
        rows = np.ascontiguousarray((Zinv[i] - Zinv[j]).T)  # (n, m): column e is Z^{-1} a_e
        P = rows[i] - rows[j]
        if k == 0:
            np.multiply(P, P, out=H[:m, :m])
        else:
            H[:m, :m] += P * P


if numba is not None:

    @numba.njit(nogil=True, cache=True)
    def _newton_matrix_numba(Z1inv, Z2inv, i, j, H):
        """H[f, e] = (a_e^T Z_1^{-1} a_f)^2 + (a_e^T Z_2^{-1} a_f)^2 for e >= f (the upper triangle of the
        C-ordered H, the lower one of H.T, which is what LAPACK reads)."""
        m, n = i.shape[0], Z1inv.shape[0]
        v1 = np.empty(n)
        v2 = np.empty(n)
        for f in range(m):
            for k in range(n):  # Z^{-1} a_f
                v1[k] = Z1inv[i[f], k] - Z1inv[j[f], k]
                v2[k] = Z2inv[i[f], k] - Z2inv[j[f], k]
            for e in range(f, m):
                p = v1[i[e]] - v1[j[e]]
                q = v2[i[e]] - v2[j[e]]
                H[f, e] = p * p + q * q


def _newton_matrix(Z1inv: np.ndarray, Z2inv: np.ndarray, i: np.ndarray, j: np.ndarray, H: np.ndarray) -> None:
    """The edge block of Newton's matrix into H[:m, :m]: at least its upper triangle (C order), by the numba
    kernel where numba is installed, else by numpy in full."""
    if numba is not None:
        _newton_matrix_numba(Z1inv, Z2inv, i, j, H)
    else:
        _newton_matrix_numpy(Z1inv, Z2inv, i, j, H)


def _slacks(n: int, i: np.ndarray, j: np.ndarray, w: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray]:
    """(Z_1, Z_2) = (s I - (W(w) - J), s I + (W(w) - J)), dense, with W(w) - J = I - J - A^T diag(w) A."""
    shifted = np.full((n, n), 1.0 / n) + _laplacian(n, i, j, w)  # J + A^T diag(w) A
    identity = np.eye(n)
    return (s - 1) * identity + shifted, (s + 1) * identity - shifted


def _newton_system(
    Z1inv: np.ndarray, Z2inv: np.ndarray, i: np.ndarray, j: np.ndarray, H: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Newton's equations of phi_t at the point with inverse slacks Z1inv, Z2inv, for every t at once:
    (g, towards_c, centring) with g_l = tr(Z^{-1} F_l) (variables w_1..w_m, s) and the direction
    d(t) = t towards_c + centring solving H d = -(t c - g). H ((m + 1)^2, C order) is workspace, overwritten.
    None where the Cholesky factorisation of H fails (round-off near the optimum)."""
    m = len(i)
    edges = np.arange(m)
    R1, R2 = Z1inv[i] - Z1inv[j], Z2inv[i] - Z2inv[j]  # row e: (Z_k^{-1} a_e)^T
    g = np.empty(m + 1)
    g[:m] = (R1[edges, i] - R1[edges, j]) - (R2[edges, i] - R2[edges, j])  # a_e^T Z_1^{-1} a_e - a_e^T Z_2^{-1} a_e
    g[m] = np.trace(Z1inv) + np.trace(Z2inv)
    _newton_matrix(Z1inv, Z2inv, i, j, H)
    H[:m, m] = np.einsum("ek,ek->e", R1, R1) - np.einsum("ek,ek->e", R2, R2)
    H[m, :m] = H[:m, m]
    H[m, m] = np.einsum("ab,ab->", Z1inv, Z1inv) + np.einsum("ab,ab->", Z2inv, Z2inv)
    factor, info = lapack.dpotrf(H.T, lower=1, clean=0, overwrite_a=1)  # H.T: Fortran order, lower = H's upper
    if info:
        return None
    unit = np.zeros(m + 1)
    unit[m] = 1.0  # c: the objective is s
    return g, -lapack.dpotrs(factor, unit, lower=1)[0], lapack.dpotrs(factor, g, lower=1)[0]


def _dual_bound(
    Z1: np.ndarray,
    Z2: np.ndarray,
    s: float,
    i: np.ndarray,
    j: np.ndarray,
    newton: tuple[np.ndarray, np.ndarray, np.ndarray],
    t: float,
) -> float | None:
    """The lower bound s - tr(Z X) = s - (2 n - d(t)^T g) / t on the optimum from the dual point
    X_k = Z_k^{-1} (Z_k - dZ_k) Z_k^{-1} / t of Newton's direction d(t) (module docstring); None where X is not
    positive semidefinite (Z_k - dZ_k not positive definite, to a Cholesky test)."""
    g, towards_c, centring = newton
    n, m = len(Z1), len(i)
    d = t * towards_c + centring
    dL = _laplacian(n, i, j, d[:m])
    identity = np.eye(n)
    if _logdet(Z1 - d[m] * identity - dL) is None or _logdet(Z2 - d[m] * identity + dL) is None:
        return None
    return s - (2 * n - d @ g) / t


def _interior_point(
    n: int, i: np.ndarray, j: np.ndarray, tol: float, max_iter: int
) -> tuple[np.ndarray, float, float, int, str]:
    """The barrier method of the module docstring: (w, s, LB, steps, why it stopped) with w the weights of the
    least upper bound s seen, ||W(w) - J||_2 <= s, and LB the best lower bound on the optimum."""
    m = len(i)
    degree = np.bincount(i, minlength=n) + np.bincount(j, minlength=n)
    w = 1.0 / (1 + np.maximum(degree[i], degree[j]))  # Metropolis weights
    rho = scipy.linalg.eigvalsh(np.eye(n) - np.full((n, n), 1.0 / n) - _laplacian(n, i, j, w))
    rho_start = max(rho[-1], -rho[0], 0.0)
    s = rho_start + S_START * (1 - rho_start)
    best_w, best_s, lower = w.copy(), s, -np.inf
    H = np.empty((m + 1, m + 1))
    t = 0.0
    stopped = "max_iter"
    steps = 0
    while steps < max_iter:
        steps += 1
        Z1, Z2 = _slacks(n, i, j, w, s)
        first, second = _inverse(Z1), _inverse(Z2)
        if first is None or second is None:
            stopped = "lost feasibility to round-off"
            break
        (Z1inv, logdet1), (Z2inv, logdet2) = first, second
        newton = _newton_system(Z1inv, Z2inv, i, j, H)
        if newton is None:
            stopped = "Newton's matrix lost definiteness to round-off"
            break
        g, towards_c, centring = newton
        if t == 0.0:
            t = g[m]  # the s-gradient t - g_s of phi_t is zero at the start
        for multiple in GAP_TRIES:
            bound = _dual_bound(Z1, Z2, s, i, j, newton, t * multiple)
            if bound is None:
                break
            lower = max(lower, bound)
        if best_s - lower <= tol:
            stopped = "tol"
            break
        if np.isfinite(lower):
            t = max(t, CENTRING * 2 * n / (s - lower))
        direction = t * towards_c + centring
        gradient = -g
        gradient[m] += t  # grad phi_t = t c - g
        decrement = -gradient @ direction  # lambda^2
        value = t * s - logdet1 - logdet2
        alpha = 1.0
        while alpha >= SMALLEST_STEP:
            w_new, s_new = w + alpha * direction[:m], s + alpha * direction[m]
            Z1_new, Z2_new = _slacks(n, i, j, w_new, s_new)
            new1 = _logdet(Z1_new)
            new2 = _logdet(Z2_new) if new1 is not None else None  # None: outside the feasible set
            if new1 is not None and new2 is not None and t * s_new - new1 - new2 <= value - ARMIJO * alpha * decrement:
                break
            alpha /= 2
        else:
            stopped = "the line search stalled"
            break
        w, s = w_new, s_new
        if s < best_s:
            best_w, best_s = w.copy(), s
    return best_w, best_s, lower, steps, stopped
