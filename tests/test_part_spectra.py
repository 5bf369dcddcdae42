"""The mixing methods on parts that hold only their rows (pdmm/parts.py PartProblem.spectra, pdmm/mixing.py
run_interval; docs/guide/distributed.md, "Each rank holds its part"): dgd, extra, nids, gradient-tracking and
chebyshev without interval= on PartProblems given the whole graph's spectra equal the whole problem on the same
ranks (1e-12) and one process, not renumbered (1e-10), on 2 and 4 gloo processes; parts without the spectra, with
another kind's, or given different spectra on different ranks are refused in one line on every rank; shards written
by `pdmm-bridge partition` carry the whole graph's spectra, and a part loaded from them runs the methods."""

from pathlib import Path

import numpy as np
import pytest
from distributed_workers import init_group, report, spawn_each

import pdmm
import pdmm.shards as shards
from experiments.cli import main
from pdmm.mixing import DENSE_LIMIT, mixing_matrix, mixing_spectra, spectral_interval
from pdmm.parts import PartProblem
from pdmm.synthetic import make_data, make_problem

WHOLE_TOL = 1e-12
ONE_PROCESS_TOL = 1e-10
SHARD_NODES, SHARD_PARTS = 30, 2


def _problems():
    rng = np.random.default_rng(7)
    graph = pdmm.Graph.random_geometric(24, seed=4)
    H, y = rng.normal(size=(2, 24, 4, 3)), rng.normal(size=(2, 24, 4))
    large = pdmm.Graph.random_regular(DENSE_LIMIT + 52, degree=3, seed=1)  # spectra by eigsh (Lanczos)
    return {
        "averaging": pdmm.averaging(graph, rng.normal(size=(2, 24, 2))),
        "least_squares": pdmm.least_squares(graph, H, y),
        "lasso": pdmm.lasso(graph, H, y, lam=0.3),
        "large": pdmm.averaging(large, rng.normal(size=(large.n, 2))),
    }


def _runs():
    """(name, problem, solve keywords): every method that reads W's spectrum, each mixing kind, alpha="auto"."""
    run = dict(max_iter=30, tol=0, record_every=1)
    return [
        ("dgd_metropolis", "least_squares", dict(method="dgd", mixing="metropolis", **run)),
        ("dgd_diminishing_max_degree", "averaging", dict(method="dgd", mixing="max_degree", step="diminishing", **run)),
        ("extra_lazy_metropolis", "least_squares", dict(method="extra", mixing="lazy_metropolis", **run)),
        ("pg_extra_lasso", "lasso", dict(method="extra", **run)),
        ("nids_lasso_max_degree", "lasso", dict(method="nids", mixing="max_degree", **run)),
        ("gradient_tracking_metropolis", "least_squares", dict(method="gradient-tracking", **run)),
        ("chebyshev_metropolis", "averaging", dict(method="chebyshev", **run)),
        ("chebyshev_lazy_metropolis", "averaging", dict(method="chebyshev", mixing="lazy_metropolis", **run)),
        ("nids_drop", "least_squares", dict(method="nids", network=pdmm.Network(drop=0.2, seed=3), **run)),
        ("chebyshev_large_eigsh", "large", dict(method="chebyshev", max_iter=10, tol=0)),
        ("dgd_large_eigsh", "large", dict(method="dgd", max_iter=10, tol=0)),
    ]


def _owner(n, world, seed=3):
    """A random owner array giving every rank at least one node."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, world, size=n)
    owner[rng.choice(n, size=world, replace=False)] = np.arange(world)
    return owner


def _summary(result):
    return dict(
        x=np.asarray(result.x).tolist(),
        iterations=result.iterations,
        status=result.status,
        history={k: np.asarray(v).tolist() for k, v in result.history.items() if k != "time"},
    )


def _refusal(part, **keywords):
    """The one-line message of pdmm.solve on a part, or "no error"."""
    try:
        pdmm.solve(part, backend="distributed", max_iter=2, tol=0, **keywords)
    except ValueError as err:
        return str(err)
    return "no error"


def _spectra_worker(rank, world, port, out, timeout):
    init_group(rank, world, port, timeout)
    problems = _problems()
    spectra = {kind: mixing_spectra(problem.compiled) for kind, problem in problems.items()}
    found = {}
    for name, kind, keywords in _runs():
        problem = problems[kind]
        owner = _owner(problem.n, world)
        part = PartProblem.of(problem, owner, rank, world, spectra=spectra[kind])
        found[name] = dict(
            whole=_summary(pdmm.solve(problem, backend="distributed", partition=owner, **keywords)),
            part=_summary(pdmm.solve(part, backend="distributed", **keywords)),
        )
    problem = problems["averaging"]
    owner = _owner(problem.n, world)
    bare = PartProblem.of(problem, owner, rank, world)
    only = PartProblem.of(problem, owner, rank, world, spectra={"metropolis": spectra["averaging"]["metropolis"]})
    low, high = spectra["averaging"]["metropolis"]
    differ = PartProblem.of(problem, owner, rank, world, spectra={"metropolis": (low, high + 1e-15 * rank)})
    found["refused"] = dict(
        **{method: _refusal(bare, method=method) for method in ("dgd", "extra", "nids", "gradient-tracking")},
        chebyshev=_refusal(bare, method="chebyshev"),
        other_kind=_refusal(only, method="dgd", mixing="lazy_metropolis"),
        differ=_refusal(differ, method="dgd"),
    )
    report(rank, found, out, each=True)


@pytest.fixture(scope="module", params=[2, 4])
def ranks(request, tmp_path_factory):
    """Every rank's findings, [rank] -> dict, for P = 2 and 4 processes."""
    world = request.param
    return spawn_each(_spectra_worker, world, tmp_path_factory.mktemp(f"spectra{world}"), timeout=120.0)


def _close(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))))


def test_mixing_spectra_are_the_whole_graphs_intervals():
    """mixing_spectra: spectral_interval of each kind's matrix, the dense eigenvalues below DENSE_LIMIT nodes."""
    graph = _problems()["averaging"].compiled
    found = mixing_spectra(graph)
    assert sorted(found) == sorted(pdmm.mixing.KINDS)
    for kind, (low, high) in found.items():
        eigenvalues = np.linalg.eigvalsh(mixing_matrix(graph, kind).toarray())
        assert abs(low - eigenvalues[0]) <= 1e-13 and abs(high - eigenvalues[-2]) <= 1e-13
        assert (low, high) == spectral_interval(mixing_matrix(graph, kind))


@pytest.mark.parametrize("name", [name for name, _, _ in _runs()])
def test_parts_with_spectra_equal_the_whole_problem_and_one_process(ranks, name):
    """Parts given the whole graph's spectra run the method to the whole problem's result on the same ranks (1e-12)
    and to one process's, not renumbered (1e-10): the same alpha="auto", the same Chebyshev interval."""
    kind, keywords = next((k, kw) for n, k, kw in _runs() if n == name)
    alone = pdmm.solve(_problems()[kind], reorder=False, **keywords)
    for found in ranks:
        whole, part = found[name]["whole"], found[name]["part"]
        assert _close(part["x"], whole["x"]) <= WHOLE_TOL
        assert _close(part["x"], alone.x) <= ONE_PROCESS_TOL
        assert (part["iterations"], part["status"]) == (alone.iterations, alone.status)
        for k, values in part["history"].items():
            scale = max(1.0, float(np.abs(np.asarray(alone.history[k])).max()))
            assert _close(values, alone.history[k]) <= ONE_PROCESS_TOL * scale, k


def test_parts_without_their_spectra_are_one_line_on_every_rank(ranks):
    """A part without spectra (every mixing method), or with another kind's only: one line naming what to give;
    parts given different spectra on different ranks: one line on every rank."""
    for found in ranks:
        refused = found["refused"]
        for method in ("dgd", "extra", "nids", "gradient-tracking", "chebyshev"):
            message = refused[method]
            assert message.startswith("the 'metropolis' mixing matrix's spectrum needs the whole graph"), message
            assert "spectra={'metropolis': (lambda_min, lambda_2)}" in message
        assert "interval=" in refused["chebyshev"]
        assert "spectra={'lazy_metropolis'" in refused["other_kind"]
        assert "differ" in refused["differ"] and "spectra" in refused["differ"]
        assert all("\n" not in message for message in refused.values())


@pytest.mark.parametrize(
    "spectra, words",
    [
        ({"uniform": (0.0, 0.5)}, "unknown mixing kind 'uniform'"),
        ({"metropolis": (0.5, 0.1)}, "lambda_min <= lambda_2"),
        ({"metropolis": (float("nan"), 0.1)}, "finite"),
        ({"metropolis": (0.1,)}, "spectra['metropolis'] must be"),
        ([("metropolis", (0.0, 0.5))], "spectra must map"),
    ],
)
def test_a_part_refuses_bad_spectra_in_one_line(spectra, words):
    problem = _problems()["averaging"]
    with pytest.raises(ValueError) as err:
        PartProblem.of(problem, _owner(problem.n, 2), 0, 2, spectra=spectra)
    assert str(err.value).startswith("PartProblem.spectra") and words in str(err.value)
    assert "\n" not in str(err.value)


def _shard_problem():
    """The problem `pdmm-bridge partition random_geometric --nodes 30 --problem least_squares` builds."""
    graph = pdmm.topology("random_geometric", SHARD_NODES, seed=0)
    return make_problem("least_squares", graph, make_data("least_squares", SHARD_NODES, 3, 10, None, 0))


def _partitioned(directory):
    out = directory / "shards"
    arguments = ["partition", "random_geometric", "--nodes", str(SHARD_NODES), "--problem", "least_squares"]
    assert main([*arguments, "--parts", str(SHARD_PARTS), "--out", str(out)]) == 0
    return out


def test_the_partition_command_writes_the_whole_graphs_spectra(tmp_path, capsys):
    """The manifest's spectra are mixing_spectra of the whole compiled graph, exactly (JSON keeps every float);
    shards.load gives them to the part; the printed line says what they cost."""
    out = _partitioned(tmp_path)
    assert "of it the mixing spectra" in capsys.readouterr().out
    expected = mixing_spectra(_shard_problem().compiled)
    manifest = shards.read_manifest(out)
    assert manifest["spectra"] == {kind: list(ends) for kind, ends in expected.items()}
    assert shards.load(out, 1, SHARD_PARTS).spectra == expected


def _shard_worker(rank, world, port, out, timeout):
    init_group(rank, world, port, timeout)
    part = shards.load(Path(out).parent / "shards", rank, world)
    found = {
        method: _summary(pdmm.solve(part, backend="distributed", method=method, max_iter=30, tol=0))
        for method in ("dgd", "extra", "nids", "gradient-tracking")
    }
    report(rank, found, out, each=True)


def test_a_part_loaded_from_shards_runs_the_mixing_methods(tmp_path):
    """Each rank loads its shard alone and runs dgd, extra, nids and gradient tracking (alpha="auto" from the
    manifest's spectra) to one process's result on the whole problem (1e-10)."""
    _partitioned(tmp_path)
    problem = _shard_problem()
    for found in spawn_each(_shard_worker, SHARD_PARTS, tmp_path, timeout=120.0):
        for method, got in found.items():
            alone = pdmm.solve(problem, method=method, max_iter=30, tol=0, reorder=False)
            assert _close(got["x"], alone.x) <= ONE_PROCESS_TOL, method
            assert got["iterations"] == alone.iterations
