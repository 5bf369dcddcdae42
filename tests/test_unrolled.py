"""bridge.UnrolledPDMM: the iterates of pdmm.solve layer by layer, and gradients through them."""

import numpy as np
import pytest
import torch
from torch.func import functional_call

import pdmm
from bridge import UnrolledPDMM

TOPOLOGIES = [("ring", {}), ("random_geometric", {}), ("barabasi_albert", {"m": 1})]  # the last is a tree


def make_problem(kind, topology, params, batch=None):
    G = pdmm.topology(topology, n=12, seed=3, **params)
    rng = np.random.default_rng(0)
    lead = () if batch is None else (batch,)
    if kind == "averaging":
        return pdmm.averaging(G, rng.normal(size=(*lead, 12, 3)))
    return pdmm.least_squares(G, rng.normal(size=(*lead, 12, 4, 3)), rng.normal(size=(*lead, 12, 4)), ridge=0.1)


@pytest.mark.parametrize("topology,params", TOPOLOGIES)
@pytest.mark.parametrize("kind", ["averaging", "least_squares"])
@pytest.mark.parametrize("method,theta", [("pdmm", 1.0), ("pdmm", 0.5), ("qa-pdmm", 1.0)])
def test_layers_equal_pdmm_solve_iterate_by_iterate(kind, topology, params, method, theta):
    problem = make_problem(kind, topology, params)
    xs = UnrolledPDMM(layers=6, method=method, rho=0.7, theta=theta)(problem)
    assert xs.shape == (6, 12, 3) and xs.dtype == torch.float64
    for k in range(1, 7):
        result = pdmm.solve(problem, method=method, rho=0.7, theta=theta, max_iter=k, tol=0)
        np.testing.assert_allclose(xs[k - 1].numpy(), np.asarray(result.x), rtol=0, atol=1e-10)
    assert (xs[-1] - xs[0]).abs().max() > 1e-3  # the layers do move


@pytest.mark.parametrize("consensus,start", [(False, False), (True, False), (True, True)])
def test_per_layer_rho_equals_lambda_form_pdmm_with_rho_k_in_iteration_k(consensus, start):
    """Changing rho between layers keeps the multipliers: the lambda-form loop with rho_k per iteration."""
    from pdmm_loop_reference import loop_pdmm_lambda, setup

    G, P, q, edges = setup(seed=2, consensus=consensus)
    x0 = np.random.default_rng(1).normal(size=q.shape) if start else np.zeros_like(q)
    rhos = np.array([0.4, 1.3, 0.7, 2.0, 0.9, 0.5])
    model = UnrolledPDMM(layers=6, learnable=True)
    with torch.no_grad():
        model.log_rho.copy_(torch.as_tensor(np.log(rhos)))
        model.theta_logit.fill_(50.0)  # theta = 1 to rounding
    xs = model(pdmm.quadratic(G, P, q, constraints=edges), x0=x0).detach().numpy()
    expected = loop_pdmm_lambda(G, P, q, edges, rhos, x0, 6)
    for k in range(6):
        np.testing.assert_allclose(xs[k], expected[k], rtol=0, atol=1e-10, err_msg=f"layer {k + 1}")


def test_batched_problems_give_k_b_n_d_iterates():
    problem = make_problem("averaging", "ring", {}, batch=4)
    xs = UnrolledPDMM(layers=3)(problem)
    assert xs.shape == (3, 4, 12, 3)
    result = pdmm.solve(problem, method="pdmm", rho=1.0, max_iter=3, tol=0)
    np.testing.assert_allclose(xs[-1].numpy(), np.asarray(result.x), rtol=0, atol=1e-10)


@pytest.mark.parametrize("method", ["pdmm", "qa-pdmm"])
def test_gradients_reach_every_rho_and_theta_and_match_finite_differences(method):
    problem = make_problem("least_squares", "random_geometric", {})
    model = UnrolledPDMM(layers=4, method=method, rho=0.8, theta=0.9, learnable=True)
    x_star = torch.as_tensor(np.asarray(pdmm.reference(problem)))

    def error(log_rho, theta_logit):
        xs = functional_call(model, {"log_rho": log_rho, "theta_logit": theta_logit}, (problem,))
        return ((xs[-1] - x_star) ** 2).sum()

    params = (model.log_rho.detach().clone().requires_grad_(), model.theta_logit.detach().clone().requires_grad_())
    assert torch.autograd.gradcheck(error, params)
    error(*params).backward()
    assert (params[0].grad.abs() > 0).all()  # every layer's rho shapes the last iterate
    assert (params[1].grad[:-1].abs() > 0).all()  # the last layer's theta only shapes z after x^K


def test_learnable_parameters_stay_in_range():
    model = UnrolledPDMM(layers=3, rho=2.0, theta=1.0, learnable=True)
    with torch.no_grad():
        model.log_rho.fill_(-50.0)
        model.theta_logit.copy_(torch.tensor([-50.0, 0.0, 50.0]))
    rho, theta = model.rho().detach(), model.theta().detach()
    assert (rho > 0).all() and ((theta > 0) & (theta <= 1)).all()
    assert theta[0] > 0 and float(theta[2]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(layers=0), "layers"),
        (dict(method="admm"), "unknown method"),
        (dict(rho=0.0), "rho"),
        (dict(theta=1.5), "theta"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        UnrolledPDMM(**kwargs)


def test_a_start_x0_in_the_problems_layout_matches_pdmm_solve():
    for batch in (None, 3):
        problem = make_problem("least_squares", "ring", {}, batch=batch)
        x0 = np.random.default_rng(4).normal(size=(12, 3) if batch is None else (batch, 12, 3))
        xs = UnrolledPDMM(layers=4, rho=0.9)(problem, x0=x0)
        result = pdmm.solve(problem, method="pdmm", rho=0.9, max_iter=4, tol=0, x0=x0)
        np.testing.assert_allclose(xs[-1].numpy(), np.asarray(result.x), rtol=0, atol=1e-10)
