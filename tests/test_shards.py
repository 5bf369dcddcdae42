"""pdmm/shards.py and `pdmm-bridge partition`: each part a rank loads alone holds what pdmm.halo.local_part computes
from the whole problem (ids) and the whole problem's local functions at its nodes; the parts together are the whole
compiled graph and the data; hostile shard directories are refused in one line naming the file."""

import hashlib
import io
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from extras import needs
from tiny_runs import fails

import pdmm
import pdmm.shards as shards
from experiments.cli import main
from experiments.rundir import MARKER
from pdmm.halo import local_part
from pdmm.network import GlobalIds
from pdmm.synthetic import KINDS, make_data, make_problem

GRAPH = pdmm.Graph.random_geometric(36, seed=2)
WORLD = 3


def _whole(kind, batch):
    data = make_data(kind, GRAPH.number_of_nodes(), dim=2, samples=4, batch=batch, seed=1)
    return data, make_problem(kind, GRAPH, data, ridge=0.5, lam=0.2, reg=0.3)


def _owner(n, world=WORLD):
    """A scattered partition: most edges cross it."""
    return np.random.default_rng(world).permutation(np.arange(n) % world)


def _written(tmp_path, kind="least_squares", batch=None, world=WORLD):
    data, problem = _whole(kind, batch)
    owner = _owner(problem.n, world)
    out = tmp_path / "shards"
    shards.write(problem, owner, out, kind, data, ridge=0.5, lam=0.2, reg=0.3)
    return data, problem, owner, out


def _tensors(local):
    return {key: value for key, value in vars(local).items() if torch.is_tensor(value)}


@pytest.mark.parametrize("batch", [None, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_each_part_is_local_parts_ids_and_the_whole_local_functions_rows(tmp_path, kind, batch):
    data, problem, owner, out = _written(tmp_path, kind, batch)
    whole = problem.compiled
    for rank in range(WORLD):
        ids, local, manifest = shards.part_arrays(out, rank, WORLD)
        part, own = local_part(whole, owner, rank, WORLD, SimpleNamespace(all_to_all=None))
        edges = np.flatnonzero(owner[whole.src.numpy()] == rank)
        reference = GlobalIds.of(whole, own, edges)
        assert np.array_equal(ids["nodes"], own) and np.array_equal(ids["nodes"], part.nodes)
        assert np.array_equal(ids["src"], part.src.numpy()) and np.array_equal(ids["dst"], part.dst.numpy())
        assert np.array_equal(ids["edge_id"], reference.edges.numpy())
        assert np.array_equal(ids["rev_id"], reference.reverse.numpy())
        assert np.array_equal(ids["undirected_id"], reference.undirected.numpy())
        assert np.array_equal(ids["peer"], owner[part.dst.numpy()])
        assert all(array.dtype == np.int64 for array in ids.values())
        assert np.all(np.diff(ids["nodes"]) > 0) and np.all(np.diff(ids["edge_id"]) > 0)  # global order
        expected = problem.local.nodes(torch.from_numpy(own))
        assert type(local) is type(expected) and local.shape == expected.shape
        assert _tensors(local).keys() == _tensors(expected).keys()
        assert all(torch.equal(value, _tensors(expected)[key]) for key, value in _tensors(local).items())
        assert {k: v for k, v in vars(local).items() if not torch.is_tensor(v)} == {
            k: v for k, v in vars(expected).items() if not torch.is_tensor(v)
        }
    assert (manifest["n"], manifest["edges"], manifest["parts"]) == (problem.n, whole.num_edges, WORLD)
    assert (manifest["batch"], manifest["dim"], manifest["batched"]) == (problem.batch, problem.dim, problem.batched)
    assert manifest["cut"] == int(np.count_nonzero(owner[whole.src.numpy()] != owner[whole.dst.numpy()]))
    expected = pdmm.mixing.mixing_spectra(whole)  # the whole graph's, exactly: JSON keeps every float
    assert manifest["spectra"] == {kind: list(ends) for kind, ends in expected.items()}


@pytest.mark.parametrize("kind", ["averaging", "logistic"])
def test_the_parts_together_are_the_whole_graph_and_data(tmp_path, kind):
    data, problem, owner, out = _written(tmp_path, kind, batch=3)
    whole = problem.compiled
    pieces = [shards.part_arrays(out, rank, WORLD)[0] for rank in range(WORLD)]
    edge_id = np.concatenate([p["edge_id"] for p in pieces])
    order = np.argsort(edge_id)
    assert np.array_equal(edge_id[order], np.arange(whole.num_edges))
    for key, column in (("src", None), ("dst", whole.dst), ("rev_id", whole.rev)):
        got = np.concatenate([p["nodes"][p["src"]] if key == "src" else p[key] for p in pieces])[order]
        assert np.array_equal(got, (whole.src if column is None else column).numpy())
    nodes = np.concatenate([p["nodes"] for p in pieces])
    assert np.array_equal(np.sort(nodes), np.arange(problem.n))
    for key, array in data.items():
        axis = int(array.ndim == pdmm.synthetic.BATCHED_NDIM[key])
        rows = [np.load(out / shards.part_name(r))[f"data_{key}"] for r in range(WORLD)]
        rebuilt = np.empty_like(array)
        index = [slice(None)] * array.ndim
        index[axis] = nodes
        rebuilt[tuple(index)] = np.concatenate(rows, axis=axis)
        assert np.array_equal(rebuilt, array)


def test_a_rank_reads_its_part_alone(tmp_path):
    _, problem, owner, out = _written(tmp_path)
    for rank in (0, 2):
        (out / shards.part_name(rank)).unlink()
    ids, local, _ = shards.part_arrays(out, 1, WORLD)
    assert np.array_equal(ids["nodes"], np.flatnonzero(owner == 1)) and local.shape[0] == len(ids["nodes"])


@pytest.mark.parametrize("batch", [None, 3])
@pytest.mark.parametrize("kind", ["averaging", "lasso"])
def test_load_is_the_part_problem_cut_from_the_whole_problem(tmp_path, kind, batch):
    """What a rank loads is exactly pdmm.PartProblem.of's cut of the whole problem: every field, every tensor."""
    _, problem, owner, out = _written(tmp_path, kind, batch)
    for rank in range(WORLD):
        loaded, cut = shards.load(out, rank, WORLD), pdmm.PartProblem.of(problem, owner, rank, WORLD)
        assert isinstance(loaded, pdmm.PartProblem)
        for name in ("n", "num_edges", "batched", "rank", "world"):
            assert getattr(loaded, name) == getattr(cut, name), name
        assert loaded.spectra == pdmm.mixing.mixing_spectra(problem.compiled)
        for name in ("nodes", "src", "dst", "edge_id", "rev_id", "peer", "undirected_id"):
            assert np.array_equal(getattr(loaded, name), getattr(cut, name)), name
        mine, theirs = _tensors(loaded.local), _tensors(cut.local)
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def _rewrite(out, rank, change):
    """Part `rank` rewritten with change(arrays) applied and its sha256 recorded in the manifest, as a hostile or
    buggy writer would: only the content checks stand between it and a rank."""
    path = out / shards.part_name(rank)
    arrays = dict(np.load(path))
    change(arrays)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())
    _record(out, rank)


def _record(out, rank):
    manifest = json.loads((out / shards.MANIFEST).read_text())
    data = (out / shards.part_name(rank)).read_bytes()
    manifest["files"][shards.part_name(rank)] = hashlib.sha256(data).hexdigest()
    (out / shards.MANIFEST).write_text(json.dumps(manifest))


def _refused(out, match, rank=1, world=WORLD):
    with pytest.raises(shards.ShardError) as caught:
        shards.part_arrays(out, rank, world)
    message = str(caught.value)
    assert "\n" not in message and match in message, message
    return message


def _shift(key, by):
    def change(arrays):
        arrays[key] = arrays[key] + by

    return change


def _swap_two(key):
    def change(arrays):
        arrays[key][[0, 1]] = arrays[key][[1, 0]]

    return change


def _cut_file(out, rank=1):
    path = out / shards.part_name(rank)
    path.write_bytes(path.read_bytes()[:-100])


@pytest.mark.parametrize(
    "spoil, match",
    [
        (lambda out: _cut_file(out) or _record(out, 1), "not a readable .npz archive"),  # truncated, sha recorded
        (_cut_file, "sha256 is not the manifest's"),  # truncated behind the manifest's back
        (lambda out: _rewrite(out, 1, _shift("dst", 10**6)), "dst holds ids outside"),
        (lambda out: _rewrite(out, 1, _swap_two("rev_id")), "rev_id and undirected_id must follow"),
        (lambda out: _rewrite(out, 1, _shift("rev_id", 1)), "rev_id"),
        (lambda out: _rewrite(out, 1, _swap_two("undirected_id")), "undirected_id"),
        (lambda out: _rewrite(out, 1, _swap_two("nodes")), "strictly ascending"),
        (lambda out: _rewrite(out, 1, _shift("peer", 1)), "peer"),
        (lambda out: _rewrite(out, 1, lambda a: a.update(src=a["src"].astype(np.int32))), "int64"),
        (lambda out: _rewrite(out, 1, lambda a: a.update(data_H=a["data_H"][:-1])), "H must have shape"),
        (lambda out: _rewrite(out, 1, lambda a: a.update(extra=np.zeros(1))), "holds arrays"),
    ],
)
def test_a_hostile_or_damaged_part_is_one_line_naming_it(tmp_path, spoil, match):
    _, _, _, out = _written(tmp_path)
    spoil(out)
    assert shards.part_name(1) in _refused(out, match)
    shards.part_arrays(out, 0, WORLD)  # the other parts still load


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("n", 10**15, "cannot connect"),
        ("n", 2**70, "n must be an integer"),
        ("edges", 7, "even"),
        ("parts", 2, "files must name"),
        ("format", "pdmm-shards/0", "not a pdmm-shards/1 manifest"),
        ("problem", "ridge", "unknown problem"),
        ("files", {"part-00000.npz": "0" * 64}, "files must name"),
        ("lam", -1, "finite numbers >= 0"),
        ("spectra", {"uniform": [0.0, 0.5]}, "unknown mixing kind 'uniform'"),
        ("spectra", {"metropolis": [0.5]}, "spectra['metropolis'] must be"),
        ("spectra", {"metropolis": [float("nan"), 0.5]}, "finite"),
        ("spectra", {"metropolis": [0.5, 0.1]}, "lambda_min <= lambda_2"),
        ("spectra", [], "spectra must map mixing kinds"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_it(tmp_path, field, value, match):
    _, _, _, out = _written(tmp_path)
    manifest = json.loads((out / shards.MANIFEST).read_text())
    manifest[field] = value
    (out / shards.MANIFEST).write_text(json.dumps(manifest))
    assert shards.MANIFEST in _refused(out, match)


def test_a_manifest_without_spectra_is_refused(tmp_path):
    _, _, _, out = _written(tmp_path)
    manifest = json.loads((out / shards.MANIFEST).read_text())
    del manifest["spectra"]
    (out / shards.MANIFEST).write_text(json.dumps(manifest))
    _refused(out, "missing ['spectra']")


def test_a_rank_of_another_world_is_refused(tmp_path):
    _, _, _, out = _written(tmp_path)
    _refused(out, "written for 3 ranks, not for a world of 2", world=2)
    _refused(out, "rank must be an integer from 0 to 2", rank=3)


def test_a_huge_manifest_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    _, _, _, out = _written(tmp_path)
    monkeypatch.setattr(shards, "MANIFEST_LIMIT", 100)
    _refused(out, "at most 100 bytes")
    os.unlink(out / shards.MANIFEST)
    _refused(out, "is this a shard directory?")


def test_the_writer_refuses_an_owner_that_leaves_a_rank_empty_or_names_no_rank(tmp_path):
    data, problem = _whole("averaging", None)
    for owner, match in (
        (np.where(_owner(problem.n) == 1, 2, _owner(problem.n)), "rank 1 has none"),
        (np.full(problem.n, problem.n), r"integers in \[0, n\)"),
        (np.zeros(problem.n - 1, dtype=np.int64), "owner must be"),
    ):
        with pytest.raises(ValueError, match=match):
            shards.write(problem, owner, tmp_path / "out", "averaging", data)
    assert not (tmp_path / "out").exists()


def test_links_are_refused_where_shards_are_read_and_written(tmp_path):
    data, problem, owner, out = _written(tmp_path)
    moved = tmp_path / "elsewhere.npz"
    os.replace(out / shards.part_name(1), moved)
    os.symlink(moved, out / shards.part_name(1))
    _refused(out, "cannot read it")
    link = tmp_path / "link"
    os.symlink(tmp_path / "real", link)
    with pytest.raises(shards.ShardError, match="symbolic link"):
        shards.write(problem, owner, link, "least_squares", data)
    assert not (tmp_path / "real").exists()


def _partition(out, *options, parts=3):
    return main(["partition", "random_geometric", "--nodes", "30", "--parts", str(parts), *options, "--out", str(out)])


def test_the_command_writes_shards_of_the_problem_solve_builds(tmp_path, capsys):
    out = tmp_path / "shards"
    assert _partition(out, "--problem", "lasso", "--batch", "2", "--method", "blocks") == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and "3 parts (blocks)" in line and "cut" in line
    G = pdmm.topology("random_geometric", 30, seed=0)
    data = make_data("lasso", 30, 3, 10, 2, 0)
    problem = make_problem("lasso", G, data, lam=0.1)
    owner = pdmm.distributed.blocks(30, 3)
    for rank in range(3):
        ids, local, manifest = shards.part_arrays(out, rank, 3)
        expected = problem.local.nodes(torch.from_numpy(np.flatnonzero(owner == rank)))
        assert np.array_equal(ids["nodes"], np.flatnonzero(owner == rank))
        assert all(torch.equal(value, _tensors(expected)[key]) for key, value in _tensors(local).items())
    assert manifest["partition"] == "blocks" and manifest["problem"] == "lasso"
    assert _partition(out, "--force", parts=2) == 0  # its own shards replaced: the third part goes
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, *shards.file_names(2)])


def test_the_command_reads_a_data_file(tmp_path):
    data = make_data("logistic", 30, 2, 5, None, 4)
    np.savez(tmp_path / "data.npz", **data)
    out = tmp_path / "shards"
    assert _partition(out, "--problem", "logistic", "--data", str(tmp_path / "data.npz"), "--method", "blocks") == 0
    ids, local, manifest = shards.part_arrays(out, 2, 3)
    assert manifest["partition"] == "blocks" and local.shape == (len(ids["nodes"]), 1, 2)
    assert torch.equal(local.X[:, 0], torch.from_numpy(data["X"][ids["nodes"]]))


def test_the_command_cuts_with_metis_where_pymetis_is_installed(tmp_path):
    needs("pymetis", "distributed")
    out = tmp_path / "shards"
    assert _partition(out, "--problem", "averaging") == 0
    G = pdmm.topology("random_geometric", 30, seed=0)
    owner = pdmm.distributed.partition(pdmm.averaging(G, np.zeros((30, 1))).compiled, 3)
    assert not np.array_equal(owner, pdmm.distributed.blocks(30, 3))  # METIS's cut, not the fallback's blocks
    for rank in range(3):
        ids, _, manifest = shards.part_arrays(out, rank, 3)
        assert np.array_equal(ids["nodes"], np.flatnonzero(owner == rank))
    assert manifest["partition"] == "metis"


def test_the_command_refuses_in_one_line(tmp_path, capsys):
    out = tmp_path / "shards"
    assert "more parts than the graph's 30 nodes" in fails(
        capsys, ["partition", "ring", "--nodes", "30", "--parts", "31", "--out", str(out)]
    )
    assert "built-in" in fails(
        capsys,
        [
            "partition",
            "ring",
            "--nodes",
            "30",
            "--parts",
            "2",
            "--problem",
            "logistic",
            "--data",
            "builtin:breast_cancer",
            "--out",
            str(out),
        ],
    )
    assert not out.exists()
    target = tmp_path / "target"
    target.mkdir()
    os.symlink(target, tmp_path / "link")
    assert "symbolic link" in fails(capsys, ["partition", "ring", "--parts", "2", "--out", str(tmp_path / "link")])
    assert list(target.iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert "removes only what pdmm-bridge wrote" in fails(
        capsys, ["partition", "ring", "--parts", "2", "--out", str(mine), "--force"]
    )
    assert (mine / "notes.txt").read_text() == "keep me" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert "not empty" in fails(capsys, ["partition", "ring", "--parts", "2", "--out", str(mine)])
