"""What every local function f_i supplies, and per-node linear algebra shared by them.

Tensors are node-major: x is (n, B, d) for n nodes, B independent instances, x_i in R^d.
A per-node curvature C_i is either a scalar multiple of I, stored (n, 1) or (n, B), or a
matrix, stored (n, 1, d, d) or (n, B, d, d).
"""

from collections.abc import Callable

import torch


class LocalFunction:
    """f(x) = sum_i f_i(x_i) over the nodes, one instance per batch entry.

    Subclasses set `shape = (n, B, d)` and define value, gradient, prox and, if smooth, the
    constants L_i and m_i.
    """

    smooth = True

    def value(self, x):
        """sum_i f_i(x_i) per instance: (n, B, d) -> (B,)."""
        raise NotImplementedError

    def gradient(self, x):
        """grad f_i(x_i) for every node: (n, B, d) -> (n, B, d)."""
        raise NotImplementedError

    def prox(self, curvature):
        """A map u -> argmin_x f_i(x) + u_i^T x + 1/2 x^T C_i x, node by node (the PDMM x-update)."""
        raise NotImplementedError

    def smoothness(self):
        """L_i, a Lipschitz constant of grad f_i: (n, B)."""
        raise NotImplementedError

    def strong_convexity(self):
        """m_i, the strong-convexity modulus of f_i: (n, B)."""
        raise NotImplementedError

    def composite(self) -> "tuple[LocalFunction, Callable | None]":
        """(s, prox_r) for f_i = s_i + r_i, as the proximal gradient methods use it (PG-EXTRA and NIDS,
        docs/decentralised.md sections 3-4): s a smooth LocalFunction (gradient, smoothness) and
        prox_r(v, step) = argmin_x step r_i(x) + 1/2 ||x - v||^2 node by node, step a number or a
        tensor broadcasting against v. A smooth f is (self, None); a non-smooth one overrides this
        or is refused (ValueError)."""
        if self.smooth:
            return self, None
        raise ValueError(
            f"{type(self).__name__} is not smooth and has no proximal split f_i = s_i + r_i (LocalFunction.composite)"
        )

    def cvxpy_value(self, xs, b):
        """sum_i f_i(xs[i]) for instance b as a cvxpy expression (xs: n expressions of shape (d,))."""
        raise NotImplementedError

    def nodes(self, rows):
        """The local function of the nodes `rows` ((k,) int64 tensor), in that order: every node-major
        tensor (first axis n) indexed, the others shared."""
        n = self.shape[0]
        part = object.__new__(type(self))
        part.__dict__.update(
            {
                k: v.index_select(0, rows) if torch.is_tensor(v) and v.dim() and v.shape[0] == n else v
                for k, v in self.__dict__.items()
            }
        )
        part.shape = (len(rows), *self.shape[1:])
        return part

    def to(self, device, dtype):
        """A copy with every tensor on `device` in `dtype`."""
        moved = object.__new__(type(self))
        moved.__dict__.update(
            {
                k: v.to(device, dtype) if torch.is_tensor(v) and v.is_floating_point() else v
                for k, v in self.__dict__.items()
            }
        )
        return moved


def is_scalar(M):
    """True for a per-node scalar curvature (n, B), False for matrices (n, B, d, d)."""
    return M.dim() == 2


def multiply(M, x):
    """M_i x_i for per-node scalars or matrices: (n, B, d) -> (n, B, d)."""
    return M.unsqueeze(-1) * x if is_scalar(M) else (M @ x.unsqueeze(-1)).squeeze(-1)


def add(P, C, dim):
    """P_i + C_i for per-node scalars or matrices (broadcast over the batch)."""
    if is_scalar(P) and is_scalar(C):
        return P + C
    eye = torch.eye(dim, dtype=C.dtype, device=C.device)
    as_matrix = lambda M: M[..., None, None] * eye if is_scalar(M) else M  # noqa: E731
    return as_matrix(P) + as_matrix(C)


def spd_solver(M):
    """v -> M_i^{-1} v_i node by node, for positive definite M (Cholesky factor computed once)."""
    if is_scalar(M):
        if bool((M <= 0).any()):
            raise ValueError("a node's local curvature is not positive; the x-update has no unique minimiser")
        return lambda v: v / M.unsqueeze(-1)
    L, info = torch.linalg.cholesky_ex(M)
    if bool((info != 0).any()):
        bad = int(torch.nonzero(info.reshape(info.shape[0], -1).any(1))[0])
        raise ValueError(
            f"node {bad}: f_i's Hessian + rho sum_j A_ij^T A_ij is not positive definite, so the "
            "x-update has no unique minimiser; add a ridge term or use full-rank edge matrices"
        )
    return lambda v: torch.cholesky_solve(v.unsqueeze(-1), L).squeeze(-1)


def eigenvalue_range(M, dim):
    """(smallest, largest) eigenvalue of each per-node scalar or matrix, each (n, B)."""
    if is_scalar(M):
        return M, M
    eig = torch.linalg.eigvalsh(M)
    return eig[..., 0], eig[..., -1]
