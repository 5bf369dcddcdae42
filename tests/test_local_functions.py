"""Each local function's pieces on their own: the x-update (prox) against cvxpy, the gradient
against autograd of the value, and the smoothness / strong-convexity constants against Hessians."""

import cvxpy as cp
import numpy as np
import pytest
import torch

import pdmm

N, D = 4, 3


def problems():
    rng = np.random.default_rng(0)
    G = pdmm.topology("ring", n=N)
    H, y = rng.normal(size=(N, 5, D)), rng.normal(size=(N, 5))
    diagonal = np.stack([np.diag(rng.uniform(0.5, 2.0, size=D)) for _ in range(N)])
    return {
        "averaging": pdmm.averaging(G, rng.normal(size=(N, D))),
        "least_squares": pdmm.least_squares(G, H, y, ridge=0.3),
        "lasso": pdmm.lasso(G, H, y, lam=8.0),
        "lasso_diagonal": pdmm.lasso(G, diagonal, rng.normal(size=(N, D)), lam=4.0),
        "logistic": pdmm.logistic(G, H, np.sign(y), reg=0.2),
    }


def prox_by_cvxpy(local, u, C):
    """argmin_x f_i(x) + u_i^T x + 1/2 x^T C_i x, node by node, with cvxpy."""
    out = np.zeros_like(u)
    for i in range(N):
        x = cp.Variable(D)
        X = cp.vstack([x if k == i else np.zeros(D) for k in range(N)])  # f_k(0) for k != i is a constant
        objective = local.cvxpy_value(X, 0) + u[i] @ x + 0.5 * cp.quad_form(x, C[i])
        cp.Problem(cp.Minimize(objective)).solve(
            solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11
        )
        out[i] = x.value
    return out


@pytest.mark.parametrize("name", list(problems()))
@pytest.mark.parametrize("curvature", ["scalar", "matrix"])
def test_prox_matches_cvxpy(name, curvature):
    local = problems()[name].local
    rng = np.random.default_rng(1)
    u = 3 * rng.normal(size=(N, D))
    if curvature == "scalar":
        c = rng.uniform(0.5, 2.0, size=N)
        C_torch, C = torch.tensor(c).unsqueeze(1), c[:, None, None] * np.eye(D)
    else:
        M = rng.normal(size=(N, D, D))
        C = M @ M.transpose(0, 2, 1) + 0.1 * np.eye(D)
        C_torch = torch.tensor(C).unsqueeze(1)
    prox = local.prox(C_torch)
    x = prox(torch.tensor(u).unsqueeze(1))[:, 0].numpy()
    np.testing.assert_allclose(x, prox_by_cvxpy(local, u, C), atol=1e-6)
    again = prox(torch.tensor(u).unsqueeze(1))[:, 0].numpy()  # warm-started second call
    np.testing.assert_allclose(again, x, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in problems() if not n.startswith("lasso")])
def test_gradient_is_the_derivative_of_value(name):
    local = problems()[name].local
    x = torch.randn(N, 1, D, dtype=torch.float64, requires_grad=True)
    local.value(x).sum().backward()
    torch.testing.assert_close(local.gradient(x.detach()), x.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in problems() if not n.startswith("lasso")])
def test_constants_bound_the_hessian(name):
    local = problems()[name].local
    L, m = local.smoothness()[:, 0], local.strong_convexity()[:, 0]
    for _ in range(5):
        x = torch.randn(D, dtype=torch.float64) * 3
        for i in range(N):

            def f_i(v, i=i):
                xs = torch.zeros(N, 1, D, dtype=torch.float64)
                xs[i, 0] = v
                return local.value(xs).sum()

            eig = torch.linalg.eigvalsh(torch.autograd.functional.hessian(f_i, x))
            assert eig[-1] <= L[i] * (1 + 1e-10) and eig[0] >= m[i] * (1 - 1e-10) - 1e-12


def test_lasso_is_not_smooth():
    local = problems()["lasso"].local
    assert not local.smooth
    with pytest.raises(ValueError, match="not smooth"):
        local.smoothness()
