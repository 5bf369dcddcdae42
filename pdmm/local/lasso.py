"""Lasso local functions f_i(x) = 1/2 x^T P_i x - q_i^T x + r_i + t ||x||_1 (least squares + l1)."""
import cvxpy as cp
import torch

from .base import add, eigenvalue_range, is_scalar, spd_solver
from .quadratic import Quadratic

INNER_MAX_ITER = 2000
INNER_TOL = 1e-14


def soft_threshold(v, t):
    """argmin_x t ||x||_1 + 1/2 ||x - v||^2 = sign(v) max(|v| - t, 0)."""
    return torch.sign(v) * torch.clamp(v.abs() - t, min=0)


class Lasso(Quadratic):
    """Quadratic plus t ||x||_1 at every node; not smooth, so QA-PDMM refuses it."""

    smooth = False

    def __init__(self, P, q, r, t):
        super().__init__(P, q, r)
        self.t = t

    def value(self, x):
        return super().value(x) + self.t * x.abs().sum(-1).sum(0)

    def gradient(self, x):
        raise ValueError("the lasso objective is not differentiable; QA-PDMM needs smooth f_i")

    def smoothness(self):
        raise ValueError("the lasso objective is not smooth; QA-PDMM needs an L-smooth f_i")

    def prox(self, curvature):
        """argmin 1/2 x^T M_i x - (q_i - u_i)^T x + t ||x||_1 with M_i = P_i + C_i.

        Diagonal M_i: closed form, soft_threshold(v, t) / M_i. Otherwise a batched ADMM inner
        solver (x = z split, Cholesky of M_i + sigma_i I cached, warm-started across calls).
        """
        d = self.q.shape[-1]
        M = add(self.P, curvature, d)
        if is_scalar(M):
            inverse = spd_solver(M)
            return lambda u: inverse(soft_threshold(self.q - u, self.t))
        low, high = eigenvalue_range(M, d)
        sigma = torch.sqrt(low.clamp(min=1e-12) * high).unsqueeze(-1)  # balances the two ADMM steps
        inverse = spd_solver(M + sigma.unsqueeze(-1) * torch.eye(d, dtype=M.dtype, device=M.device))
        warm = {}

        def solve(u):
            v = self.q - u
            z = warm.get("z", torch.zeros_like(v))
            w = warm.get("w", torch.zeros_like(v))
            scale = INNER_TOL * (1 + v.abs().max())
            for _ in range(INNER_MAX_ITER):
                x = inverse(v + sigma * (z - w))
                z_old, z = z, soft_threshold(x + w, self.t / sigma)
                w = w + x - z
                if bool(((x - z).abs().max() <= scale) & ((sigma * (z - z_old)).abs().max() <= scale)):
                    break
            warm.update(z=z, w=w)
            return z

        return solve

    def cvxpy_value(self, xs, b):
        return super().cvxpy_value(xs, b) + self.t * sum(cp.norm1(x) for x in xs)
