"""Shared by tests/test_plan.py and tests/test_settings.py: two pdmm.Results compared bit for bit."""

import numpy as np


def assert_same_result(ran, solved):
    """`ran` is `solved` bit for bit: status, iterations, message, parameters, x and every history column but the
    wall-clock "time"."""
    assert (ran.status, ran.iterations, ran.message, ran.params) == (
        solved.status,
        solved.iterations,
        solved.message,
        solved.params,
    )
    np.testing.assert_array_equal(ran.x, solved.x)
    assert ran.history.keys() == solved.history.keys()
    for key in solved.history.keys() - {"time"}:
        np.testing.assert_array_equal(ran.history[key], solved.history[key])
