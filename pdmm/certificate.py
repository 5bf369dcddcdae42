"""The first-order optimality certificate of pdmm.solve's stopping test (docs/guide/solve.md, "The stopping test").

A run is "converged" only where this certificate holds at the iterate itself, besides the constraint residual test
of pdmm.loop.Bookkeeping: it measures how far x is from satisfying the problem's optimality conditions, relative to
the size of the terms that must cancel there, instead of estimating it from how much x moved. Per instance:

consensus (x_i = x_j on every edge), at the average xbar = mean_i x_i, g_i = grad s_i(xbar) (s_i = f_i, or the smooth
part of f_i = s_i + r):

    smooth f_i:        R = ||sum_i g_i||
    f_i = s_i + r:     R = L ||xbar - prox_{n r / L}(xbar - sum_i g_i / L)||,  L = sum_i L_i  (the prox-gradient map)
    scale              G = sum_i (||g_i - grad s_i(0)|| + ||grad s_i(0)||)  (+ L where the problem's scale is 0)

edge matrices (A_ij x_i + A_ji x_j = b_ij, or <= b_ij), at every node's own x_i, with lam_ij the method's multipliers
(the projection of its two ends' estimates: their average, clipped at 0 on inequality rows, pdmm.methods.PDMM.
multipliers) and p_i = sum_j A_ij^T lam_ij:

    smooth f_i:        R = ||grad s(x) + p||_F
    f_i = s_i + r_i:   R = ||L (x - prox_{r / L}(x - (grad s(x) + p) / L))||_F,  L = max_i L_i
    scale              G = ||grad s(x) - grad s(0)||_F + ||grad s(0)||_F + ||p||_F  (+ ||L_i||_F where the scale is 0)
    inequality rows:   K = sum lam_ij max(b_ij - A_ij x_i - A_ji x_j, 0)  (complementary slackness)

The certificate holds where R <= tol G (and K <= tol G sqrt(n) S, S the stopping test's scale of x), every number
finite. A relative change of the data by tol moves the gradients by about tol G (rounding: by about eps G), so the
test is scale-free and rounding does not keep it from passing: xbar is the exact minimiser of a problem whose
gradients are changed by at most tol G. Measured at check iterations only (pdmm.loop.iterate), batched over the
instances, without reading anything back from the device.
"""

import math
from collections.abc import Callable
from typing import Any

import torch

from .constraints import Consensus
from .halo import PartGraph
from .local import LocalFunction


def node_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum over the nodes (first axis) of a node tensor: (n, ...) -> (...)."""
    return t.sum(0)


def optimality_certificate(
    local: LocalFunction,
    edges: Any,
    curvature: torch.Tensor | None,
    scale: torch.Tensor | None,
    *,
    multipliers: Callable[[dict], torch.Tensor] | None = None,
    count: int | None = None,
    summed: Callable[[torch.Tensor], torch.Tensor] = node_sum,
) -> "Certificate | None":
    """The certificate of one run (this module's docstring), or None where the problem's optimality cannot be
    certified: a smooth part without a gradient, a non-smooth part without the curvature of the smooth one (the
    prox-gradient map needs 1 / L) or, with consensus, not the same r at every node (LocalFunction.uniform_prox); edge
    matrices without the method's multipliers (the methods on a mixing matrix, which refuse them anyway). A run
    without a certificate is never "converged" by the stopping test (docs/guide/solve.md, "The stopping test").

    Parameters
    ----------
    local : pdmm.LocalFunction
        The run's local functions (the nodes of this process), on the run's device and in its dtype.
    edges : pdmm.constraints.Consensus or pdmm.constraints.EdgeMatrices
        The run's edge operator.
    curvature : torch.Tensor or None
        L_i of the smooth part for every node of the problem, (n, B) (pdmm.building.local_curvature), or None.
    scale : torch.Tensor or None
        The problem's scale per instance, (B,) (pdmm.building.problem_scale), or None.
    multipliers : callable or None
        state -> the method's multiplier estimates per directed edge, (E, B, m), whose projection (both ends averaged,
        clipped at 0 on inequality rows) is the certificate's multiplier (pdmm.methods.PDMM.multipliers).
    count : int or None
        The problem's number of nodes; None: local's.
    summed : callable
        The sum over the problem's nodes of a node tensor of this process (the distributed engine adds the ranks').

    Returns
    -------
    Certificate or None
    """
    try:
        smooth, prox_r = local.composite()
    except ValueError:
        return None
    if prox_r is not None and (curvature is None or (isinstance(edges, Consensus) and not local.uniform_prox)):
        return None
    if not isinstance(edges, Consensus) and multipliers is None:
        return None
    like = edges.graph.sign
    curvature = None if curvature is None else curvature.to(like.device, like.dtype)
    absolute = None if scale is None or curvature is None else (scale == 0).to(like.device)
    return Certificate(
        smooth, prox_r, edges, curvature, absolute, multipliers, local.shape[0] if count is None else count, summed
    )


class Certificate:
    """The optimality test of one run (this module's docstring); built by optimality_certificate."""

    def __init__(
        self,
        smooth: LocalFunction,
        prox_r: Callable | None,
        edges: Any,
        curvature: torch.Tensor | None,
        absolute: torch.Tensor | None,
        multipliers: Callable[[dict], torch.Tensor] | None,
        count: int,
        summed: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        self.smooth, self.prox_r, self.edges, self.curvature = smooth, prox_r, edges, curvature
        self.absolute, self.multipliers, self.count, self.summed = absolute, multipliers, count, summed
        self.origin: torch.Tensor | None = None  # grad s_i(0), (n, B, d), computed at the first test

    def holds(self, state: dict, tol: float, size: torch.Tensor) -> torch.Tensor:
        """(B,) bool: whether the certificate holds at `state` with tolerance tol > 0; size: the stopping test's
        scale of x per instance, S = max(s, RMS of x) (pdmm.loop.Bookkeeping.scale)."""
        x = state["x"]
        if self.origin is None:
            self.origin = self.smooth.gradient(torch.zeros_like(x))
        if isinstance(self.edges, Consensus):
            residual, scale = self.consensus(x, self.origin)
            slack = None
        else:
            residual, scale, slack = self.constrained(state, self.origin)
        holds = torch.isfinite(residual) & torch.isfinite(scale) & (residual <= tol * scale)
        if slack is not None:
            holds &= torch.isfinite(slack) & (slack <= tol * scale * math.sqrt(self.count) * size)
        return holds

    def consensus(self, x: torch.Tensor, origin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, G) per instance, (B,) each, at the average of x (consensus constraints); origin: grad s_i(0)."""
        average = self.summed(x) / self.count  # (B, d)
        gradient = self.smooth.gradient(average.expand_as(x))
        size = torch.linalg.vector_norm(gradient - origin, dim=-1) + torch.linalg.vector_norm(origin, dim=-1)
        sums = self.summed(torch.cat([gradient, size.unsqueeze(-1)], -1))  # one sum over the nodes: (B, d + 1)
        total, scale = sums[:, :-1], sums[:, -1]
        L = None if self.curvature is None else self.curvature.sum(0)  # the smoothness of sum_i s_i
        if L is not None and self.absolute is not None:
            scale = scale + torch.where(self.absolute, L, 0)
        if self.prox_r is None or L is None:  # L is known wherever r is (optimality_certificate)
            return torch.linalg.vector_norm(total, dim=-1), scale
        step = (1 / L).unsqueeze(-1)
        moved = average - self.prox_r(average - step * total, self.count * step)  # prox of sum_i r = n r
        return L * torch.linalg.vector_norm(moved, dim=-1), scale

    def constrained(self, state: dict, origin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(R, G, K) per instance, (B,) each (K None without inequality rows), at x and the method's multipliers
        (edge matrices; optimality_certificate builds none without them); origin: grad s_i(0)."""
        x, edges, curvature = state["x"], self.edges, self.curvature
        graph, frobenius = edges.graph, lambda t: torch.linalg.vector_norm(t, dim=(0, 2))
        assert self.multipliers is not None  # optimality_certificate: edge matrices only with multipliers
        estimate = self.multipliers(state)
        multiplier = (estimate + graph.exchange(estimate)) / 2  # one value per edge: both ends' estimates averaged
        if edges.inequality is not None:
            multiplier = torch.where(edges.inequality, multiplier.clamp(min=0), multiplier)
        pull = graph.aggregate(torch.einsum("emd,ebm->ebd", edges.A, multiplier))  # sum_j A_ij^T lam_ij
        gradient = self.smooth.gradient(x)
        if self.prox_r is None or curvature is None:  # the curvature is known wherever r is (optimality_certificate)
            stationarity = gradient + pull
        else:
            L = curvature.amax(0).view(1, -1, 1)
            stationarity = L * (x - self.prox_r(x - (gradient + pull) / L, 1 / L))
        slack = self.slackness(x, multiplier)
        if isinstance(graph, PartGraph):  # a rank's part: every rank's sums of squares and slack, one all-reduce
            norms, slack = self.summed_norms([stationarity, gradient - origin, origin, pull], slack)
        else:
            norms = [frobenius(t) for t in (stationarity, gradient - origin, origin, pull)]
        scale = norms[1] + norms[2] + norms[3]
        if curvature is not None and self.absolute is not None:
            scale = scale + torch.where(self.absolute, torch.linalg.vector_norm(curvature, dim=0), 0)
        return norms[0], scale, slack

    def summed_norms(
        self, tensors: list[torch.Tensor], slack: torch.Tensor | None
    ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """The Frobenius norm per instance, (B,), of each node tensor (n_r, B, d) over every rank's nodes, and the
        slack sum K over every rank's edges (None stays None): the ranks' sums of squares and slack added in one
        call of `summed` (docs/guide/distributed.md, "What runs on the engine")."""
        squares = [(t * t).sum((0, 2)) for t in tensors] + ([] if slack is None else [slack])
        sums = self.summed(torch.stack(squares, -1).unsqueeze(0))  # (B, len(tensors) [+ 1])
        norms = list(torch.sqrt(sums[:, : len(tensors)]).unbind(-1))
        return norms, None if slack is None else sums[:, -1]

    def slackness(self, x: torch.Tensor, multiplier: torch.Tensor) -> torch.Tensor | None:
        """K per instance, (B,): the multipliers of the inequality rows times their slack (this process's edges);
        None without them."""
        edges = self.edges
        if edges.forward_inequality is None:
            return None
        slack = (-edges.values(x)).clamp(min=0)  # (E/2, B, m): b_ij - A_ij x_i - A_ji x_j where positive
        held = multiplier.index_select(0, edges.graph.forward) * slack
        return torch.where(edges.forward_inequality, held, 0).sum((0, 2))
