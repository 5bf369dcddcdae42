"""The Metropolis mixing matrix written entry by entry from its definition, for the tests to compare with."""

import numpy as np


def metropolis(G):
    """W_ij = 1 / (1 + max(d_i, d_j)) on edges, W_ii = 1 - sum_j W_ij, in list(G.nodes) order, entry by entry."""
    nodes = list(G.nodes)
    W = np.zeros((len(nodes), len(nodes)))
    for u, v in G.edges():
        i, j = nodes.index(u), nodes.index(v)
        W[i, j] = W[j, i] = 1 / (1 + max(G.degree(u), G.degree(v)))
    for i in range(len(nodes)):
        W[i, i] = 1 - sum(W[i, j] for j in range(len(nodes)) if j != i)
    return W
