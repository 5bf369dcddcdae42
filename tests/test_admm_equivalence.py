"""docs/theory/pdmm.md section 9: averaged PDMM (theta = 1/2), consensus, zero start gives the x iterates of
edge-based ADMM."""

import numpy as np
import pytest

import pdmm

ITERATIONS = 40


def problems():
    rng = np.random.default_rng(0)
    for kind in ["random_geometric", "barabasi_albert"]:
        G = pdmm.topology(kind, n=12, seed=2)
        n = G.number_of_nodes()
        H = rng.normal(size=(n, 5, 3))
        y = rng.normal(size=(n, 5))
        yield f"averaging-{kind}", pdmm.averaging(G, rng.normal(size=(2, n, 3)))
        yield f"least_squares-{kind}", pdmm.least_squares(G, H, y, ridge=0.1)
        yield f"lasso-{kind}", pdmm.lasso(G, H, y, lam=5.0)
        yield f"logistic-{kind}", pdmm.logistic(G, H, np.sign(y), reg=0.2)


@pytest.mark.parametrize("rho", [0.3, 2.0])
@pytest.mark.parametrize("name, problem", list(problems()))
def test_theta_half_equals_admm(name, problem, rho, device):
    for k in (1, 2, 5, ITERATIONS):
        averaged = pdmm.solve(problem, method="pdmm", theta=0.5, rho=rho, max_iter=k, tol=0, device=device).x
        admm = pdmm.solve(problem, method="admm", rho=rho, max_iter=k, tol=0, device=device).x
        np.testing.assert_allclose(averaged, admm, rtol=0, atol=1e-9, err_msg=f"{name}, iteration {k}")
        if k == 5:
            plain = pdmm.solve(problem, method="pdmm", theta=1.0, rho=rho, max_iter=k, tol=0, device=device).x
            assert np.abs(plain - admm).max() > 1e-4, "theta = 1 is a different iteration: the check can fail"
