"""Quadratic local functions f_i(x) = 1/2 x^T P_i x - q_i^T x (averaging, least squares, general)."""

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .base import LocalFunction, add, column_list, eigenvalue_range, is_scalar, multiply, rows_times, spd_solver


class Quadratic(LocalFunction):
    """f_i(x) = 1/2 x^T P_i x - q_i^T x (docs/theory/problem.md section 5).

    The x-update solves (P_i + C_i) x = q_i - u_i (closed form, one factorisation per solve).
    Least squares also passes its data, f_i = 1/2 ||H_i x - y_i||^2 + ridge/2 ||x||^2 with
    P_i = H_i^T H_i + ridge I, q_i = H_i^T y_i (H = None: identity); values are then computed in
    that form, which includes the constant 1/2 ||y_i||^2 and avoids cancellation.

    Parameters
    ----------
    P : torch.Tensor
        (n, B) for P_i = p_i I, or (n, B, d, d) symmetric positive semidefinite.
    q : torch.Tensor
        (n, B, d).
    H : torch.Tensor or None
        Least squares' design matrices (n, B, k, d); None: no data form, or the identity where y is given.
    y : torch.Tensor or None
        Least squares' targets (n, B, k), or None.
    ridge : float
        Least squares' ridge weight.
    """

    def __init__(
        self,
        P: torch.Tensor,
        q: torch.Tensor,
        H: torch.Tensor | None = None,
        y: torch.Tensor | None = None,
        ridge: float = 0.0,
    ):
        self.P, self.q = P, q
        self.H, self.y, self.ridge = H, y, ridge
        self.shape = tuple(q.shape)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        if self.y is None:
            return ((0.5 * multiply(self.P, x) - self.q) * x).sum(-1).sum(0)
        fit = x if self.H is None else torch.einsum("nbkd,nbd->nbk", self.H, x)
        return 0.5 * (((fit - self.y) ** 2).sum(-1) + self.ridge * (x * x).sum(-1)).sum(0)

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        return multiply(self.P, x) - self.q

    def prox(self, curvature: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        solve = spd_solver(add(self.P, curvature, self.q.shape[-1]))
        return lambda u: solve(self.q - u)

    def smoothness(self) -> torch.Tensor:
        return eigenvalue_range(self.P, self.q.shape[-1])[1].expand(self.q.shape[:2])

    def strong_convexity(self) -> torch.Tensor:
        return eigenvalue_range(self.P, self.q.shape[-1])[0].expand(self.q.shape[:2])

    def cvxpy_data(self, b: int) -> dict[str, np.ndarray | list[np.ndarray]]:
        if self.y is not None:
            data: dict[str, np.ndarray | list[np.ndarray]] = {"y": self.y[:, b].cpu().numpy()}
            if self.H is not None:
                data["H"] = column_list(self.H[:, b].cpu().numpy())
            return data
        data = {"q": self.q[:, b].cpu().numpy()}
        if is_scalar(self.P):
            data["root"] = np.sqrt(np.clip(self.P[:, b].cpu().numpy(), 0, None))[:, None]
        else:
            data["root"] = column_list(_psd_root(self.P[:, b].cpu().numpy()))
        return data

    def cvxpy_expression(self, X: Any, data: dict[str, Any]) -> Any:
        import cvxpy as cp  # imported here: a plain `import pdmm` stays fast

        if "y" in data:
            fit = rows_times(data["H"], X) if "H" in data else X
            return 0.5 * cp.sum_squares(fit - data["y"]) + 0.5 * self.ridge * cp.sum_squares(X)
        root = data["root"]
        square = cp.sum_squares(rows_times(root, X) if isinstance(root, list) else cp.multiply(root, X))
        return 0.5 * square - cp.sum(cp.multiply(data["q"], X))


def _psd_root(P):
    """R with R^T R = P for symmetric positive semidefinite P, or one per node for P (n, d, d) (so cvxpy sees a sum
    of squares)."""
    w, V = np.linalg.eigh((P + np.swapaxes(P, -1, -2)) / 2)
    return np.swapaxes(V * np.sqrt(np.clip(w, 0, None))[..., None, :], -1, -2)
