"""Edge constraints A_ij x_i + A_ji x_j = b_ij, or <= b_ij (docs/theory/problem.md section 1), as operators on
directed edges.

Directed edge e = i->j carries A_e = A_ij (the matrix node i applies) and b_e = b_ij. PDMM's
z-form (docs/theory/pdmm.md section 4) keeps one dual vector z_{i|j} per directed edge; with penalty c = rho (the
words gather, aggregate, exchange and fuse as docs/theory/pdmm.md section 14 defines them):

    aggregate: u_i = sum_{j in N_i} A_ij^T (z_{i|j} - c b_ij / 2)      (node i's linear term)
    curvature: C_i = c sum_{j in N_i} A_ij^T A_ij                       (node i's quadratic term)
    messages:  y_{i|j} = z_{i|j} + 2c (A_ij x_i - b_ij / 2)
    reflect:   z_{i|j} <- y_{j|i}                   on an equality edge
               z_{i|j} <- max(y_{j|i}, -y_{i|j})    on an inequality edge, per row (docs/pdmm_inequality.md)

c is a number or one value per instance, a tensor (1, B, 1) that broadcasts against the state (E, B, m) (a grid of
rho values run as one batch, docs/decentralised.md section 8).

Both operators also run on a rank's part of the graph (pdmm.halo.PartGraph, backend="distributed"): what they read
at an edge's far end, x_j and the reverse edge's rows, comes through the part's halo exchanges (far_end,
graph.exchange), never by a global index (docs/guide/distributed.md, "What runs on the engine").
"""

from collections.abc import Callable

import torch

from .edge_index import CompiledGraph, select
from .halo import PartGraph


def far_end(graph: CompiledGraph, edges: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> x_j at the far end j of each of the graph's `edges` (local edge indices, (k,) int64): (n, ...) -> (k, ...).
    On a whole graph x[dst[edges]]; on a rank's part the rows of its ghosts come through its node halo, one
    exchange per call, which every rank of the part makes at once (pdmm.halo.PartGraph.gather_neighbour)."""
    if isinstance(graph, PartGraph):
        assert graph.halo is not None and graph.ghost_of_edge is not None
        halo, rows = graph.halo, graph.ghost_of_edge[edges]
        return lambda x: select(halo(x), rows)
    rows = graph.dst[edges]
    return lambda x: select(x, rows)


class Consensus:
    """A_ij = s_ij I with s_ij = +1 if i < j else -1, b_ij = 0: x_i = x_j on every edge.

    The edge state is kept signed, w_e = s_e z_e, which removes every sign from the loop:
    u_i = sum_e w_e and, since s_{j|i} = -s_{i|j}, the message becomes -2c x_i - w_e
    (scaling the n node rows, not the E edge rows).
    """

    inequality = None
    row_size = None  # every row (+-I, -+I) has size 1: the stopping test takes the residual as it is

    def __init__(self, graph):
        self.graph = graph
        self.near, self.far = graph.src[graph.forward], far_end(graph, graph.forward)  # i and x_j, per edge {i < j}

    def state_shape(self, batch, dim):
        return (self.graph.num_edges, batch, dim)

    def curvature(self, rho):
        """C_i = rho d_i I, as a (n, 1) scalar per node, (n, B) for a per-instance rho (1, B, 1)."""
        return (rho * self.graph.degree.to(self.graph.sign.dtype).view(-1, 1, 1))[..., 0]

    def aggregate(self, w, rho):
        """u_i = sum_{e at i} w_e (edge -> node, docs/theory/pdmm.md section 14): node i's linear term."""
        return self.graph.aggregate(w)

    def messages(self, w, x, rho):
        return self.graph.gather_sub((-2 * rho) * x, w)

    def reflect(self, y, received):
        """The new edge state from the messages received (every edge an equality): received itself."""
        return received

    def carried(self, y, rho):
        """The x_i a message carries if its state were 0: y = -2c x_i (signed state)."""
        return y / (-2 * rho)

    def residual(self, x):
        """A_ij x_i + A_ji x_j - b_ij = +-(x_i - x_j), one row per undirected edge {i, j}: (E/2, B, d)."""
        return select(x, self.near) - self.far(x)


class EdgeMatrices:
    """General per-edge matrices: A (E, m, d) with A[e] = A_ij for e = i->j, b (E, m) with b[e] = b_ij;
    inequality: None (all equalities) or (E,) bool, True where edge e's constraint is A_ij x_i + A_ji x_j <= b_ij.
    On a rank's part (pdmm.halo.PartGraph) the rows are those of the rank's own edges, in their order; A_ji is read
    from the reverse edge through graph.exchange, one exchange at construction, which every rank makes at once."""

    def __init__(self, graph, A, b, inequality=None):
        self.graph, self.A, self.b = graph, A, b
        self.inequality = None if inequality is None else inequality.reshape(-1, 1, 1)  # (E, 1, 1) for (E, B, m)
        forward = graph.forward  # one directed edge i->j per undirected edge, for residuals
        self.near, self.far = graph.src[forward], far_end(graph, forward)
        self.forward_terms = A[forward], graph.exchange(A)[forward], b[forward].unsqueeze(1)
        self.forward_inequality = None if inequality is None else self.inequality[forward]
        # per row of each undirected edge, (E/2, 1, m): the larger norm of its two coefficient rows (1 for a zero row),
        # the size in which the stopping test measures that row's residual (docs/guide/solve.md, "The stopping test")
        size = torch.maximum(*(torch.linalg.vector_norm(t, dim=-1) for t in self.forward_terms[:2]))
        self.row_size = torch.where(size > 0, size, 1).unsqueeze(1)
        self.pseudo_inverse = None  # A_ij^+, for what a message carries (pdmm.network privacy measures)

    def state_shape(self, batch, dim):
        return (self.graph.num_edges, batch, self.A.shape[1])

    def curvature(self, rho):
        """C_i = rho sum_j A_ij^T A_ij, as (n, 1, d, d), (n, B, d, d) for a per-instance rho (1, B, 1)."""
        gram = self.graph.aggregate(torch.einsum("emd,emk->edk", self.A, self.A)).unsqueeze(1)
        return (rho.unsqueeze(-1) if torch.is_tensor(rho) else rho) * gram

    def aggregate(self, z, rho):
        """u_i = sum_{j in N_i} A_ij^T (z_{i|j} - rho b_ij / 2) (edge -> node, docs/theory/pdmm.md section 14)."""
        return self.graph.aggregate(torch.einsum("emd,ebm->ebd", self.A, z - (rho / 2) * self.b.unsqueeze(1)))

    def messages(self, z, x, rho):
        Ax = torch.einsum("emd,ebd->ebm", self.A, self.graph.gather(x))
        return z + (2 * rho) * (Ax - self.b.unsqueeze(1) / 2)

    def reflect(self, y, received):
        """z_{i|j} <- 2 P(y)_{i|j} - y_{i|j}, P the projection onto {lambda_{i|j} = lambda_{j|i}, >= 0 on an
        inequality}: received = y_{j|i} on equalities, max(y_{j|i}, -y_{i|j}) on inequalities
        (docs/pdmm_inequality.md)."""
        if self.inequality is None:
            return received
        return torch.where(self.inequality, torch.maximum(received, -y), received)

    def carried(self, y, rho):
        """The x_i a message carries if z_{i|j} were 0: A_ij^+ (y / 2c + b_ij / 2) (least norm when m < d)."""
        if self.pseudo_inverse is None:
            self.pseudo_inverse = torch.linalg.pinv(self.A)  # (E, d, m), once per run
        return torch.einsum("edm,ebm->ebd", self.pseudo_inverse, y / (2 * rho) + self.b.unsqueeze(1) / 2)

    def values(self, x):
        """A_ij x_i + A_ji x_j - b_ij, one row per undirected edge: (E/2, B, m)."""
        A_ij, A_ji, b = self.forward_terms
        return (
            torch.einsum("emd,ebd->ebm", A_ij, select(x, self.near))
            + torch.einsum("emd,ebd->ebm", A_ji, self.far(x))
            - b
        )

    def residual(self, x):
        """A_ij x_i + A_ji x_j - b_ij (its positive part on inequalities), one row per undirected edge: (E/2, B, m)."""
        r = self.values(x)
        return r if self.forward_inequality is None else torch.where(self.forward_inequality, r.clamp(min=0), r)
