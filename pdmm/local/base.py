"""What every local function f_i supplies, and per-node linear algebra shared by them.

Tensors are node-major: x is (n, B, d) for n nodes, B independent instances, x_i in R^d.
A per-node curvature C_i is either a scalar multiple of I, stored (n, 1) or (n, B), or a
matrix, stored (n, 1, d, d) or (n, B, d, d).
"""

from collections.abc import Callable
from typing import Any, Self

import numpy as np
import torch


class LocalFunction:
    """f(x) = sum_i f_i(x_i) over the nodes, one instance per batch entry (docs/theory/problem.md section 5).

    Subclasses set `shape = (n, B, d)` and define value, gradient, prox and, if smooth, the
    constants L_i and m_i. Tensors are node-major: x is (n, B, d).
    """

    smooth = True
    uniform_prox = False  # whether composite()'s r_i is the same function at every node (see composite)
    shape: tuple[int, ...]  # (n, B, d), set by every subclass

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """sum_i f_i(x_i) per instance.

        Parameters
        ----------
        x : torch.Tensor
            (n, B, d) the nodes' points.

        Returns
        -------
        torch.Tensor
            (B,) the objective of each instance.
        """
        raise NotImplementedError

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """grad f_i(x_i) for every node.

        Parameters
        ----------
        x : torch.Tensor
            (n, B, d) the nodes' points.

        Returns
        -------
        torch.Tensor
            (n, B, d) the gradients.

        Raises
        ------
        ValueError
            Where f_i is not differentiable (Lasso).
        """
        raise NotImplementedError

    def prox(self, curvature: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """The PDMM x-update, the fuse (docs/theory/pdmm.md section 14): u -> argmin_x f_i(x) + u_i^T x +
        1/2 x^T C_i x, node by node.

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
            Where some x-update has no unique minimiser (f_i + C_i not strictly convex).
        """
        raise NotImplementedError

    def smoothness(self) -> torch.Tensor:
        """L_i, a Lipschitz constant of grad f_i.

        Returns
        -------
        torch.Tensor
            (n, B) one constant per node and instance.

        Raises
        ------
        ValueError
            Where f_i is not smooth (Lasso).
        """
        raise NotImplementedError

    def strong_convexity(self) -> torch.Tensor:
        """m_i, the strong-convexity modulus of f_i.

        Returns
        -------
        torch.Tensor
            (n, B) one modulus per node and instance (0 where f_i is not strongly convex).
        """
        raise NotImplementedError

    def composite(self) -> "tuple[LocalFunction, Callable | None]":
        """f_i = s_i + r_i, as the proximal gradient methods use it (PG-EXTRA and NIDS, docs/decentralised.md
        sections 3-4). A smooth f is (self, None); a non-smooth one overrides this or is refused.

        Returns
        -------
        smooth : LocalFunction
            s, a smooth local function (gradient, smoothness).
        prox_r : Callable or None
            prox_r(v, step) = argmin_x step r_i(x) + 1/2 ||x - v||^2 node by node, step a number or a tensor
            broadcasting against v; None where r = 0. Where `uniform_prox` is True, r_i is the same r at every
            node, so that prox_r(v, n step) is the prox of sum_i r_i at a point v shared by the n nodes (the
            consensus optimality certificate, pdmm.certificate; docs/guide/solve.md, "The stopping test").

        Raises
        ------
        ValueError
            Where f is not smooth and has no such split.
        """
        if self.smooth:
            return self, None
        raise ValueError(
            f"{type(self).__name__} is not smooth and has no proximal split f_i = s_i + r_i (LocalFunction.composite)"
        )

    def cvxpy_value(self, X: Any, b: int) -> Any:
        """sum_i f_i(X_i) for instance b as one vectorised cvxpy expression over the stacked data (pdmm.reference
        solves with it; one expression, not one per node, so that cvxpy builds it in time linear in n). By default
        cvxpy_expression(X, cvxpy_data(b)): a subclass supplies those two, or overrides this (and is then compiled
        once per instance, whatever it inherits).

        Parameters
        ----------
        X : cvxpy expression
            (n, d), row i the point of node i (for a consensus problem, every row the shared x).
        b : int
            The instance, 0..B-1.

        Returns
        -------
        cvxpy.Expression
            The objective of instance b.
        """
        data = self.cvxpy_data(b)
        if data is None:
            raise NotImplementedError(f"{type(self).__name__} defines no cvxpy objective (cvxpy_value)")
        return self.cvxpy_expression(X, data)

    def cvxpy_data(self, b: int) -> "dict[str, np.ndarray | list[np.ndarray]] | None":
        """The arrays instance b's cvxpy objective is built from, by name: cvxpy_expression takes them, or cvxpy
        Parameters of the same shapes, so that pdmm.reference compiles one problem for B instances and only
        assigns each instance's values (docs/guide/solve.md, "The reference"). None (the default) where a class
        builds its objective in cvxpy_value alone: each instance is then compiled on its own.

        Parameters
        ----------
        b : int
            The instance, 0..B-1.

        Returns
        -------
        dict or None
            name -> a 2-D array (or a list of them); the same names and shapes for every instance.
        """
        return None

    def cvxpy_expression(self, X: Any, data: dict[str, Any]) -> Any:
        """sum_i f_i(X_i) from cvxpy_data's arrays or cvxpy Parameters standing for them (a DPP expression:
        each Parameter multiplies only expressions free of parameters).

        Parameters
        ----------
        X : cvxpy expression
            (n, d), row i the point of node i.
        data : dict
            cvxpy_data's names, each an array or a Parameter of its shape (lists likewise).

        Returns
        -------
        cvxpy.Expression
        """
        raise NotImplementedError(f"{type(self).__name__} defines no cvxpy_expression")

    def nodes(self, rows: torch.Tensor) -> Self:
        """The local function of the nodes `rows`, in that order: every node-major tensor (first axis n)
        indexed, the others shared.

        Parameters
        ----------
        rows : torch.Tensor
            (k,) int64 node indices.

        Returns
        -------
        LocalFunction
            The same kind of local function on k nodes.
        """
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

    def tiled(self, copies: int) -> Self:
        """The local function of `copies` copies of every instance, one after the other: instance c B + b of the
        result is instance b (B' = copies B; a grid of parameter values run as one batch, docs/decentralised.md
        section 8). Every tensor whose first two axes are (n, B) is repeated along the second, the others shared.

        Parameters
        ----------
        copies : int
            How many copies, >= 1.

        Returns
        -------
        LocalFunction
            The same kind of local function on copies B instances.
        """
        n, batch = self.shape[:2]
        tiled = object.__new__(type(self))
        tiled.__dict__.update(
            {
                k: v.repeat(1, copies, *[1] * (v.dim() - 2))
                if torch.is_tensor(v) and v.dim() >= 2 and tuple(v.shape[:2]) == (n, batch)
                else v
                for k, v in self.__dict__.items()
            }
        )
        tiled.shape = (n, copies * batch, *self.shape[2:])
        return tiled

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Self:
        """A copy with every floating-point tensor on `device` in `dtype`.

        Parameters
        ----------
        device : torch.device or str
            Where the tensors go.
        dtype : torch.dtype
            The float dtype.

        Returns
        -------
        LocalFunction
            The copy.

        Raises
        ------
        ValueError
            For a complex tensor, which a cast to `dtype` would make real by dropping its imaginary part.
        """
        complex_ = [k for k, v in self.__dict__.items() if torch.is_tensor(v) and v.is_complex()]
        if complex_:
            raise ValueError(
                f"{type(self).__name__}.{complex_[0]} is complex; pdmm solves real problems and does not drop the "
                "imaginary part"
            )
        moved = object.__new__(type(self))
        moved.__dict__.update(
            {
                k: v.to(device, dtype) if torch.is_tensor(v) and v.is_floating_point() else v
                for k, v in self.__dict__.items()
            }
        )
        return moved


def rows_times(M: Any, X: Any) -> Any:
    """The cvxpy expression whose row i is M_i X_i: M (n, k, d) an array, or its d columns M[:, :, j] as (n, k)
    arrays or cvxpy Parameters (column_list); X an (n, d) cvxpy expression; (n, k), built as d broadcast
    products (one expression, whatever n)."""
    import cvxpy as cp  # imported here: a plain `import pdmm` stays fast

    columns = column_list(M) if isinstance(M, np.ndarray) else M
    return sum(cp.multiply(column, X[:, j : j + 1]) for j, column in enumerate(columns))


def column_list(M: np.ndarray) -> list[np.ndarray]:
    """The d columns M[:, :, j] of an (n, k, d) array, each (n, k) and contiguous (cvxpy Parameters are 2-D)."""
    return [np.ascontiguousarray(M[:, :, j]) for j in range(M.shape[-1])]


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
