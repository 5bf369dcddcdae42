"""Lasso local functions f_i(x) = 1/2 ||H_i x - y_i||^2 + t ||x||_1 (least squares + l1)."""

from collections.abc import Callable
from typing import Any

import torch

from .base import add, eigenvalue_range, is_scalar, multiply, spd_solver
from .quadratic import Quadratic

INNER_MAX_ITER = 5000
POLISH_EVERY = 10


def soft_threshold(v, t):
    """argmin_x t ||x||_1 + 1/2 ||x - v||^2 = sign(v) max(|v| - t, 0)."""
    return torch.sign(v) * torch.clamp(v.abs() - t, min=0)


class Lasso(Quadratic):
    """Quadratic plus t ||x||_1 at every node: f_i(x) = 1/2 x^T P_i x - q_i^T x + t ||x||_1
    (docs/theory/problem.md section 5); not smooth, so QA-PDMM refuses it.

    Parameters
    ----------
    P : torch.Tensor
        (n, B) for P_i = p_i I, or (n, B, d, d) symmetric positive semidefinite.
    q : torch.Tensor
        (n, B, d).
    t : float
        The l1 weight at every node, >= 0.
    H : torch.Tensor or None
        The design matrices (n, B, k, d) of the least-squares part, or None.
    y : torch.Tensor or None
        Its targets (n, B, k), or None.
    """

    smooth = False
    uniform_prox = True  # r_i = t ||x||_1 at every node

    def __init__(
        self, P: torch.Tensor, q: torch.Tensor, t: float, H: torch.Tensor | None = None, y: torch.Tensor | None = None
    ):
        super().__init__(P, q, H, y)
        self.t = t

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return super().value(x) + self.t * x.abs().sum(-1).sum(0)

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("the lasso objective is not differentiable; QA-PDMM needs smooth f_i")

    def smoothness(self) -> torch.Tensor:
        raise ValueError("the lasso objective is not smooth; QA-PDMM needs an L-smooth f_i")

    def prox(self, curvature: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """u -> argmin 1/2 x^T M_i x - (q_i - u_i)^T x + t ||x||_1 with M_i = P_i + C_i, node by node.

        Diagonal M_i: closed form, soft_threshold(v, t) / M_i. Otherwise a batched ADMM inner
        solver (x = z split, Cholesky of M_i + sigma_i I cached) whose support and signs are
        polished to the exact solution: solve M_SS x_S = v_S - t sign_S on the support S and keep
        it if the KKT conditions hold, each instance at its own first such polish (so that an instance's x does not
        depend on the others of its batch). Warm-started across calls, so once the support settles one
        polish per call suffices.

        Parameters
        ----------
        curvature : torch.Tensor
            C_i: per-node scalars (n, 1) or (n, B), or matrices (n, 1, d, d) or (n, B, d, d).

        Returns
        -------
        Callable
            The map from u, (n, B, d), to the minimisers x, (n, B, d).

        Raises
        ------
        ValueError
            Where some M_i is not positive definite (no unique minimiser).
        """
        d = self.q.shape[-1]
        M = add(self.P, curvature, d)
        diagonal = M.unsqueeze(-1) if is_scalar(M) else torch.diagonal(M, dim1=-2, dim2=-1)
        if is_scalar(M) or bool((M == torch.diag_embed(diagonal)).all()):
            if bool((diagonal <= 0).any()):
                raise ValueError("a node's x-update has no unique minimiser: P_i + C_i has a zero on its diagonal")
            return lambda u: soft_threshold(self.q - u, self.t) / diagonal
        low, high = eigenvalue_range(M, d)
        sigma = torch.sqrt(low.clamp(min=1e-12) * high).unsqueeze(-1)  # balances the two ADMM steps
        eye = torch.eye(d, dtype=M.dtype, device=M.device)
        inverse = spd_solver(M + sigma.unsqueeze(-1) * eye)
        warm: dict[str, torch.Tensor] = {}

        def polish(v, z):
            """The exact minimiser with z's support and signs, and where the KKT conditions hold, (1, B, 1) per
            instance."""
            support, signs = z != 0, torch.sign(z)
            both = support.unsqueeze(-1) & support.unsqueeze(-2)
            x = spd_solver(torch.where(both, M, eye))(torch.where(support, v - self.t * signs, 0))
            size = v.abs().amax((0, 2), keepdim=True)
            slack = (v - multiply(M, x)).abs() <= self.t * (1 + 1e-9) + 1e-13 * (1 + size)
            return x, torch.where(support, torch.sign(x) == signs, slack).all(2, keepdim=True).all(0, keepdim=True)

        def solve(u):
            v = self.q - u
            z = warm.get("z", torch.zeros_like(v))
            w = warm.get("w", torch.zeros_like(v))
            polished, open = z, torch.ones_like(z[:1, :, :1], dtype=torch.bool)  # open: instances not yet polished
            for _ in range(0, INNER_MAX_ITER, POLISH_EVERY):
                x, exact = polish(v, z)
                polished = torch.where(exact & open, x, polished)  # each instance at its first exact polish
                open = open & ~exact
                if not bool(open.any()):
                    break
                for _ in range(POLISH_EVERY):
                    x = inverse(v + sigma * (z - w))
                    z = soft_threshold(x + w, self.t / sigma)
                    w = w + x - z
            x = torch.where(open, z, polished)
            warm.update(z=x.detach(), w=torch.where(open, w, (v - multiply(M, x)) / sigma).detach())  # ADMM's dual
            return x

        return solve

    def composite(self) -> "tuple[Quadratic, Callable]":
        """The split f_i = s_i + r_i, r_i = t ||x||_1 (docs/decentralised.md sections 3-4).

        Returns
        -------
        smooth : Quadratic
            s_i(x) = 1/2 x^T P_i x - q_i^T x, the least-squares part.
        prox_r : Callable
            prox_r(v, step) = soft_threshold(v, step t), the prox of r_i.
        """
        return Quadratic(self.P, self.q, self.H, self.y), lambda v, step: soft_threshold(v, step * self.t)

    def cvxpy_expression(self, X: Any, data: dict[str, Any]) -> Any:
        import cvxpy as cp  # imported here: a plain `import pdmm` stays fast

        return super().cvxpy_expression(X, data) + self.t * cp.sum(cp.abs(X))
