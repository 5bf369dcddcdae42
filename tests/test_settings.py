"""pdmm.Stopping, pdmm.Recording and pdmm.Engine, pdmm.solve's settings in groups (docs/guide/solve.md, "Plan and
run").

Each group refuses each bad value when made, with the exception and message pdmm.solve gives for the same keyword
(solve's own refusal is the reference); pdmm.plan given the groups runs bit for bit as pdmm.solve given the keywords;
a keyword next to its group is refused in one line.
"""

import dataclasses

import numpy as np
import pytest
import torch
from same_result import assert_same_result

import pdmm

N = 8
A = np.arange(N, dtype=float) ** 1.5
MEAN = np.full((N, 1), A.mean())


def ring():
    """The averaging problem on a ring of N nodes: f_i(x) = 1/2 (x - a_i)^2, solved by x_i = mean(a)."""
    return pdmm.averaging(pdmm.topology("ring", n=N), A)


BAD = [  # (group, the keywords of one bad setting)
    (pdmm.Stopping, {"max_iter": 0}),
    (pdmm.Stopping, {"max_iter": 2.5}),
    (pdmm.Stopping, {"tol": 1.0}),
    (pdmm.Stopping, {"tol": -1e-3}),
    (pdmm.Stopping, {"tol": True}),
    (pdmm.Stopping, {"check_every": 0}),
    (pdmm.Stopping, {"on_divergence": "warn"}),
    (pdmm.Recording, {"record_every": -1}),
    (pdmm.Recording, {"record_every": 1.0}),
    (pdmm.Recording, {"callback": 3}),
    (pdmm.Engine, {"backend": "mpi"}),
    (pdmm.Engine, {"partition": [0] * N}),
    (pdmm.Engine, {"form": "matrix"}),
    (pdmm.Engine, {"backend": "distributed", "reorder": True}),
    (pdmm.Engine, {"dtype": torch.float16}),
    (pdmm.Engine, {"device": "meta"}),
    (pdmm.Engine, {"device": "nowhere"}),
]


@pytest.mark.parametrize("group, keywords", BAD, ids=[f"{g.__name__}-{k}" for g, k in BAD])
def test_each_group_refuses_a_bad_value_as_solve_does(group, keywords):
    with pytest.raises((ValueError, TypeError)) as by_solve:
        pdmm.solve(ring(), **keywords)
    with pytest.raises(type(by_solve.value)) as by_group:
        group(**keywords)
    assert str(by_group.value) == str(by_solve.value)
    assert "\n" not in str(by_group.value)


def test_the_groups_are_frozen_and_take_solves_defaults():
    for group in (pdmm.Stopping, pdmm.Recording, pdmm.Engine):
        made = group()
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, dataclasses.fields(group)[0].name, None)
    plain = pdmm.plan(ring()).options
    assert (plain.stopping.max_iter, plain.stopping.on_divergence, plain.engine) == (1000, "raise", pdmm.Engine())


RUNS = [  # (method, keywords of pdmm.solve, the same settings as groups)
    (
        "pdmm",
        dict(max_iter=300, tol=1e-9, check_every=7, history=("residual", "error"), record_every=3, reference=MEAN),
        dict(
            stopping=pdmm.Stopping(max_iter=300, tol=1e-9, check_every=7),
            recording=pdmm.Recording(history=("residual", "error"), record_every=3, reference=MEAN),
        ),
    ),
    (
        "extra",
        dict(max_iter=200, target=1e-6, reference=MEAN, dtype=torch.float32, reorder=True, alpha="auto"),
        dict(
            stopping=pdmm.Stopping(max_iter=200, target=1e-6),
            recording=pdmm.Recording(reference=MEAN),
            engine=pdmm.Engine(dtype=torch.float32, reorder=True),
            alpha="auto",
        ),
    ),
    (
        "chebyshev",
        dict(max_iter=80, interval=(-0.2, 0.95), on_divergence="return", form="edges"),
        dict(
            stopping=pdmm.Stopping(max_iter=80, on_divergence="return"),
            engine=pdmm.Engine(form="edges"),
            interval=(-0.2, 0.95),
        ),
    ),
]


@pytest.mark.parametrize("method, keywords, groups", RUNS, ids=[r[0] for r in RUNS])
def test_plan_given_the_groups_runs_as_solve_given_the_keywords(method, keywords, groups):
    solved = pdmm.solve(ring(), method=method, **keywords)
    planned = pdmm.plan(ring(), method=method, **groups)
    ran = planned.run()
    assert_same_result(ran, solved)


@pytest.mark.parametrize(
    "keywords, message",
    [
        (dict(tol=1e-6, stopping=pdmm.Stopping()), "give tol= or stopping=, not both"),
        (dict(history=(), recording=pdmm.Recording()), "give history= or recording=, not both"),
        (dict(dtype=torch.float32, engine=pdmm.Engine()), "give dtype= or engine=, not both"),
    ],
)
def test_a_keyword_next_to_its_group_is_refused_in_one_line(keywords, message):
    with pytest.raises(ValueError) as err:
        pdmm.plan(ring(), **keywords)
    assert str(err.value) == message


def test_a_group_of_the_wrong_kind_is_refused():
    with pytest.raises(TypeError, match=r"^engine must be a pdmm.Engine or None, got Stopping$"):
        pdmm.plan(ring(), engine=pdmm.Stopping())


def test_a_keyword_at_its_default_next_to_its_group_leaves_the_group():
    options = pdmm.plan(ring(), max_iter=1000, stopping=pdmm.Stopping(max_iter=5, tol=0)).options
    assert (options.stopping.max_iter, options.stopping.tol) == (5, 0)
