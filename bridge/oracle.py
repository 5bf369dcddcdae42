"""The r-hop ball average: what a node can know after r rounds of talking to its neighbours.

After r rounds node i can have heard exactly the values a_j of the nodes within r hops, its ball
B_r(i). For i.i.d. values around an unknown offset the best estimate of mean(a) it can form is
their mean, x_i^r = (1 / |B_r(i)|) sum_{j in B_r(i)} a_j, so no algorithm that exchanges with
neighbours once per round can be expected to beat it; PDMM with rho = 1 from x^0 = a equals it
at round 1. Once r reaches a node's eccentricity the ball is the whole graph and the error is 0.

G is any graph pdmm accepts: a networkx graph (nodes in G.nodes order), a pdmm.Graph or a scipy
sparse adjacency matrix.
"""

import networkx as nx
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

import pdmm
from pdmm.array_graph import as_graph


def ball_membership(G: "nx.Graph | pdmm.Graph | sp.sparray", rounds: int) -> list[sp.csr_array]:
    """[(n, n) sparse 0/1 matrix M_r, M_r[i, j] = 1 iff dist(i, j) <= r, for r = 1..rounds], nodes in G.nodes order."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    graph = as_graph(G)
    step = (graph.adjacency() + sp.eye_array(graph.n, format="csr")) > 0
    reach, out = step, []
    for r in range(rounds):
        if r:
            reach = (reach @ step) > 0
        out.append(reach.astype(np.float64))
    return out


def ball_oracle(G: "nx.Graph | pdmm.Graph | sp.sparray", a: npt.ArrayLike, rounds: int) -> np.ndarray:
    """(rounds, ..., n, d) ball averages x^1..x^R of the node values `a`, shaped (..., n, d) with
    n in G.nodes order (any leading batch axes).

    ``x_i^r = (1 / |B_r(i)|) sum_{j in B_r(i)} a_j``, B_r(i) the nodes within r hops of i (the module docstring;
    docs/averaging.md section 7).

    Parameters
    ----------
    G : networkx.Graph, pdmm.Graph or scipy sparse array
        The graph.
    a : array_like
        (..., n, d) node values.
    rounds : int
        R >= 1.

    Returns
    -------
    numpy.ndarray
        (R, ..., n, d) float64.

    Raises
    ------
    ValueError
        When rounds < 1 or a is not (..., n, d).
    TypeError
        When G is none of the graph types pdmm accepts.
    """
    a, n = np.asarray(a, dtype=np.float64), as_graph(G).n
    if a.ndim < 2 or a.shape[-2] != n:
        raise ValueError(f"a must have shape (..., n, d) with n = {n} nodes, got {a.shape}")
    moved = np.moveaxis(a, -2, 0).reshape(n, -1)  # (n, everything else)
    out = []
    for member in ball_membership(G, rounds):
        average = (member @ moved) / member.sum(axis=1)[:, None]
        out.append(np.moveaxis(average.reshape(np.moveaxis(a, -2, 0).shape), 0, -2))
    return np.stack(out)


def bayes_ball_oracle(
    G: "nx.Graph | pdmm.Graph | sp.sparray",
    a: npt.ArrayLike,
    rounds: int,
    offset_var: float,
    noise_var: npt.ArrayLike,
) -> np.ndarray:
    """(rounds, B, n) posterior means E[mean(a) | the values in B_r(i)] for values a (B, n) drawn as
    a_j = mu + s z_j with mu ~ N(0, offset_var) and noise_var = s^2 known, (B,) or a number.

    With a ball of b values summing to S, E[mu | ball] = S offset_var / (b offset_var + s^2), so
    x_i = (S + (n - b) E[mu | ball]) / n. It knows the prior and s, more than any node does, so no
    method has a smaller mean squared error; as offset_var -> inf it is the ball average
    (docs/averaging.md section 7).

    Parameters
    ----------
    G : networkx.Graph, pdmm.Graph or scipy sparse array
        The graph.
    a : array_like
        (B, n) node values.
    rounds : int
        R >= 1.
    offset_var : float
        The prior variance of the offset mu.
    noise_var : array_like
        s^2 per instance, (B,), or one number.

    Returns
    -------
    numpy.ndarray
        (R, B, n) float64.

    Raises
    ------
    ValueError
        When rounds < 1 or a is not (B, n).
    TypeError
        When G is none of the graph types pdmm accepts.
    """
    a, n = np.asarray(a, dtype=np.float64), as_graph(G).n
    if a.ndim != 2 or a.shape[1] != n:
        raise ValueError(f"a must have shape (B, n) with n = {n} nodes, got {a.shape}")
    noise_var = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), (a.shape[0],))[:, None]
    out = []
    for member in ball_membership(G, rounds):
        sums, size = (member @ a.T).T, member.sum(axis=1)[None, :]  # (B, n), (1, n)
        offset = sums * offset_var / (size * offset_var + noise_var)
        out.append((sums + (n - size) * offset) / n)
    return np.stack(out)
