"""Logistic-regression local functions f_i(x) = sum_k log(1 + exp(-y_ik X_ik^T x)) + reg/2 ||x||^2."""

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .base import LocalFunction, add, column_list, eigenvalue_range, multiply, rows_times

NEWTON_MAX_ITER = 100
NEWTON_TOL = 1e-13


class Logistic(LocalFunction):
    """f_i(x) = sum_k log(1 + exp(-y_ik X_ik^T x)) + reg/2 ||x||^2 (docs/theory/problem.md section 5).

    Parameters
    ----------
    X : torch.Tensor
        (n, B, k, d) features.
    y : torch.Tensor
        (n, B, k) labels in {-1, +1}.
    reg : float
        The ridge weight, >= 0.
    """

    def __init__(self, X: torch.Tensor, y: torch.Tensor, reg: float):
        self.X, self.y, self.reg = X, y, reg
        self.shape = (*X.shape[:2], X.shape[-1])

    def _margins(self, x):
        return self.y * torch.einsum("nbkd,nbd->nbk", self.X, x)  # y_ik X_ik^T x

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(-self._margins(x)).sum((0, 2)) + 0.5 * self.reg * (x * x).sum((0, 2))

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        weight = -self.y * torch.sigmoid(-self._margins(x))
        return torch.einsum("nbkd,nbk->nbd", self.X, weight) + self.reg * x

    def _hessian(self, x):
        s = torch.sigmoid(self._margins(x))
        return torch.einsum("nbkd,nbk,nbke->nbde", self.X, s * (1 - s), self.X)

    def hessian(self, x: torch.Tensor) -> torch.Tensor:
        """The Hessian of f_i at x_i, X_i^T diag(s (1 - s)) X_i + reg I with s = sigmoid(y_ik X_ik^T x_i), for every
        node.

        Parameters
        ----------
        x : torch.Tensor
            (n, B, d) the nodes' points.

        Returns
        -------
        torch.Tensor
            (n, B, d, d).
        """
        d = self.X.shape[-1]
        return self._hessian(x) + self.reg * torch.eye(d, dtype=self.X.dtype, device=self.X.device)

    def prox(self, curvature: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """u -> argmin f_i(x) + u_i^T x + 1/2 x^T C_i x by batched Newton (warm-started, with backtracking), each
        instance until its own step is below NEWTON_TOL (relative to its largest entry of x in magnitude), so
        that an instance's x does not depend on the others of its batch.

        Parameters
        ----------
        curvature : torch.Tensor
            C_i: per-node scalars (n, 1) or (n, B), or matrices (n, 1, d, d) or (n, B, d, d).

        Returns
        -------
        Callable
            The map from u, (n, B, d), to the minimisers x, (n, B, d).
        """
        d = self.X.shape[-1]
        eye = torch.eye(d, dtype=self.X.dtype, device=self.X.device)
        warm: dict[str, torch.Tensor] = {}

        def phi(x, u):  # the x-update objective, node by node: (n, B)
            quad = 0.5 * (x * multiply(curvature, x)).sum(-1)
            return F.softplus(-self._margins(x)).sum(-1) + 0.5 * self.reg * (x * x).sum(-1) + (u * x).sum(-1) + quad

        def solve(u):
            x = warm.get("x", torch.zeros_like(u))
            active = torch.ones_like(x[:1, :, :1], dtype=torch.bool)  # (1, B, 1): instances still moving
            for _ in range(NEWTON_MAX_ITER):
                grad = self.gradient(x) + u + multiply(curvature, x)
                H = add(self._hessian(x) + self.reg * eye, curvature, d)
                step = -torch.linalg.solve(H, grad.unsqueeze(-1)).squeeze(-1)
                f0, t = phi(x, u), torch.ones_like(x[..., :1])
                for _ in range(40):  # halve the step where it does not decrease phi
                    worse = (phi(x + t * step, u) > f0 + 1e-15 * (1 + f0.abs())) & active[..., 0]
                    if not bool(worse.any()):
                        break
                    t = torch.where(worse.unsqueeze(-1), t / 2, t)
                move = t * step
                x = torch.where(active, x + move, x)
                # each instance stops on its own test (or once not finite), so that instances are independent runs
                finite = torch.isfinite(x).all(2).all(0)
                done = (move.abs().amax((0, 2)) <= NEWTON_TOL * (1 + x.abs().amax((0, 2)))) | ~finite
                active = active & ~done.view(1, -1, 1)
                if not bool(active.any()):
                    break
            warm["x"] = x.detach()
            return x

        return solve

    def smoothness(self) -> torch.Tensor:
        """L_i = lambda_max(X_i^T X_i) / 4 + reg (the logistic loss has curvature <= 1/4).

        Returns
        -------
        torch.Tensor
            (n, B) one constant per node and instance.
        """
        gram = torch.einsum("nbkd,nbke->nbde", self.X, self.X)
        return eigenvalue_range(gram, self.X.shape[-1])[1] / 4 + self.reg

    def strong_convexity(self) -> torch.Tensor:
        return torch.full(self.X.shape[:2], float(self.reg), dtype=self.X.dtype, device=self.X.device)

    def cvxpy_data(self, b: int) -> dict[str, np.ndarray | list[np.ndarray]]:
        signed = self.y[:, b, :, None].cpu().numpy() * self.X[:, b].cpu().numpy()  # y_ik X_ik, (n, k, d)
        return {"signed": column_list(signed)}

    def cvxpy_expression(self, X: Any, data: dict[str, Any]) -> Any:
        import cvxpy as cp  # imported here: a plain `import pdmm` stays fast

        return cp.sum(cp.logistic(-rows_times(data["signed"], X))) + 0.5 * self.reg * cp.sum_squares(X)
