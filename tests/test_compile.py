import numpy as np

import pdmm


def test_compiled_step_matches_eager():
    """solve(compile=True) runs the same arithmetic through torch.compile."""
    G = pdmm.topology("random_regular", n=40, seed=0)
    problem = pdmm.averaging(G, np.random.default_rng(0).normal(size=(40, 2)))
    eager = pdmm.solve(problem, rho=0.5, max_iter=60, tol=0, record_every=1)
    compiled = pdmm.solve(problem, rho=0.5, max_iter=60, tol=0, record_every=1, compile=True)
    np.testing.assert_allclose(compiled.x, eager.x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(compiled.history["residual"], eager.history["residual"], rtol=1e-9, atol=1e-15)
    assert eager.history["residual"][-1] < 1e-2 * eager.history["residual"][0]
