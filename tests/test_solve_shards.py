"""`pdmm-bridge solve --shards DIR` (issue 43, part 4): each process of the job loads only its part of the shards
`pdmm-bridge partition` wrote, and x comes back as one file per part. The reference is the same problem solved whole
(`solve --graph ... --nproc 2`, and one process for one part): the parts' x, put back together by their node ids,
equal its x, and history.csv is its history. What the manifest fixes or what needs the whole problem is refused in
one line, exit 2; so is a job of another size than the manifest's parts, and a part file that changed."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from experiments.cli import main

GRAPH = ["random_geometric", "--nodes", "40", "--problem", "least_squares", "--seed", "3"]
WHOLE = ["--graph", *GRAPH, "--reference", "none"]  # the same problem, built whole by solve
RUNS = ["--compare", "pdmm,admm", "--iters", "150", "--no-progress"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
gloo = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Shard directories of the problem GRAPH names: p1 (one part) and p2 (two parts, METIS)."""
    root = tmp_path_factory.mktemp("shards")
    for parts in (1, 2):
        assert main(["partition", *GRAPH, "--parts", str(parts), "--out", str(root / f"p{parts}")]) == 0
    return root


def _solve(*options):
    """`python -m experiments solve OPTIONS` in a process of its own (a --nproc job starts its processes)."""
    command = [sys.executable, "-m", "experiments", "solve", *options]
    return subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)


def _refused(argv, capsys):
    """(exit status, stderr) of `pdmm-bridge ARGV` run here."""
    try:
        code = main(argv)
    except SystemExit as exit:
        code = exit.code
    return code, capsys.readouterr().err.strip()


def _reassembled(out):
    """{x_<label>: the whole x} from OUT/x/part-*.npz, each part's rows put at its nodes' global ids, which must
    cover 0..n-1 once."""
    parts = [np.load(path) for path in sorted((out / "x").glob("part-*.npz"))]
    nodes = np.concatenate([part["nodes"] for part in parts])
    assert np.array_equal(np.sort(nodes), np.arange(len(nodes)))
    x = {}
    for key in (key for key in parts[0].files if key.startswith("x_")):
        x[key] = np.empty((len(nodes), *parts[0][key].shape[1:]))
        for part in parts:
            x[key][part["nodes"]] = part[key]
    return x


def _history(out):
    with open(out / "history.csv", newline="") as file:
        return list(csv.DictReader(file))


@gloo
def test_two_parts_on_two_processes_are_the_whole_problem_on_two_processes(shards, tmp_path):
    split = _solve("--shards", str(shards / "p2"), "--nproc", "2", *RUNS, "--out", str(tmp_path / "split"))
    assert split.returncode == 0, split.stderr
    whole = _solve(*WHOLE, "--nproc", "2", *RUNS, "--out", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    x, reference = _reassembled(tmp_path / "split"), np.load(tmp_path / "whole" / "result.npz")
    assert sorted(x) == ["x_admm", "x_pdmm"]
    for key, value in x.items():
        np.testing.assert_allclose(value, reference[key], rtol=0, atol=1e-12)
    rows = _history(tmp_path / "split")
    assert len(rows) > 20 and rows == _history(tmp_path / "whole")
    assert not (tmp_path / "split" / "result.npz").exists()
    config = json.loads((tmp_path / "split" / "config.json").read_text())
    manifest = json.loads((shards / "p2" / "manifest.json").read_text())
    assert config["shards"] == {"dir": str(shards / "p2"), **manifest}
    assert config["graph"] == json.loads((tmp_path / "whole" / "config.json").read_text())["graph"]
    assert config["args"]["problem"] == "least_squares" and config["args"]["reference"] == "none"
    assert split.stdout.count(f"-> {tmp_path / 'split'}") == 2  # one summary line per run, by process 0 alone
    assert (tmp_path / "split" / "convergence.png").stat().st_size > 0


@gloo
def test_one_part_without_nproc_is_the_whole_problem_in_one_process(shards, tmp_path):
    assert main(["solve", "--shards", str(shards / "p1"), *RUNS, "--out", str(tmp_path / "part")]) == 0
    assert main(["solve", *WHOLE, *RUNS, "--out", str(tmp_path / "whole")]) == 0
    x, reference = _reassembled(tmp_path / "part"), np.load(tmp_path / "whole" / "result.npz")
    for key, value in x.items():
        np.testing.assert_allclose(value, reference[key], rtol=0, atol=1e-10)
    rows, whole = _history(tmp_path / "part"), _history(tmp_path / "whole")
    assert [row["method"] for row in rows] == [row["method"] for row in whole]
    np.testing.assert_allclose(
        [float(row["residual"]) for row in rows], [float(row["residual"]) for row in whole], rtol=1e-9
    )
    assert not torch.distributed.is_initialized()  # the group of one process made for the part is gone


@pytest.mark.parametrize(
    "options, culprit",
    [
        (["--nodes", "40"], "--nodes does not go with --shards"),
        (["--nod", "40"], "--nodes does not go with --shards"),  # argparse's abbreviation
        (["--graph", "torus"], "--graph does not go with --shards"),
        (["--graph-param", "radius=0.3"], "--graph-param does not go with --shards"),
        (["--data", "data.npz"], "--data does not go with --shards"),
        (["--dim", "3"], "--dim does not go with --shards"),
        (["--samples", "10"], "--samples does not go with --shards"),
        (["--batch", "2"], "--batch does not go with --shards"),
        (["--problem", "least_squares"], "--problem does not go with --shards"),  # even the manifest's own
        (["--ridge", "0"], "--ridge does not go with --shards"),
        (["--lam", "0.1"], "--lam does not go with --shards"),
        (["--reg", "1"], "--reg does not go with --shards"),
        (["--reference", "cvxpy"], "--reference cvxpy needs the whole problem"),
        (["--tune"], "--tune needs the whole problem"),
        (["--nproc", "3"], "holds 2 parts, one per process, but --nproc is 3: run it with --nproc 2"),
        ([], "holds 2 parts, one per process, but --nproc is 1: run it with --nproc 2"),
    ],
)
def test_what_the_manifest_fixes_or_the_whole_problem_needs_is_refused_in_one_line(
    shards, tmp_path, capsys, options, culprit
):
    out = tmp_path / "out"
    code, message = _refused(["solve", "--shards", str(shards / "p2"), *options, "--out", str(out)], capsys)
    assert code == 2 and "\n" not in message and culprit in message, message
    assert not out.exists()


def test_a_job_of_another_size_than_the_parts_is_refused_in_one_line(shards, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")  # process 0 of a job torchrun started with 3 processes
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    out = tmp_path / "out"
    code, message = _refused(["solve", "--shards", str(shards / "p2"), "--out", str(out)], capsys)
    assert code == 2 and "\n" not in message, message
    assert "holds 2 parts, one per process, but this job has 3 processes" in message
    assert not out.exists() and not torch.distributed.is_initialized()


@gloo
def test_a_method_on_the_mixing_spectrum_runs_on_a_part_from_the_manifests_spectra(shards, tmp_path):
    """extra reads lambda_min of W, which no part can compute: the manifest's spectra (pdmm-bridge partition) give it,
    so the part runs it as the whole problem does."""
    runs = ["--compare", "pdmm,extra", "--iters", "150", "--no-progress"]
    assert main(["solve", "--shards", str(shards / "p1"), *runs, "--out", str(tmp_path / "part")]) == 0
    assert main(["solve", *WHOLE, *runs, "--out", str(tmp_path / "whole")]) == 0
    x, reference = _reassembled(tmp_path / "part"), np.load(tmp_path / "whole" / "result.npz")
    assert sorted(x) == ["x_extra", "x_pdmm"]
    for key, value in x.items():
        np.testing.assert_allclose(value, reference[key], rtol=0, atol=1e-10)


def test_a_directory_without_a_manifest_is_refused_in_one_line(tmp_path, capsys):
    code, message = _refused(["solve", "--shards", str(tmp_path), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "\n" not in message and "manifest.json: cannot read it" in message, message


@gloo
def test_a_changed_part_is_one_line_for_the_job(shards, tmp_path):
    changed = tmp_path / "changed"
    changed.mkdir()
    for name in ("manifest.json", "part-00000.npz", "part-00001.npz"):
        (changed / name).write_bytes((shards / "p2" / name).read_bytes())
    data = bytearray((changed / "part-00001.npz").read_bytes())
    data[-100] ^= 1
    (changed / "part-00001.npz").write_bytes(bytes(data))
    job = _solve("--shards", str(changed), "--nproc", "2", *RUNS, "--out", str(tmp_path / "out"))
    lines = job.stderr.strip().splitlines()
    assert job.returncode == 2 and len(lines) == 1, job.stderr
    assert "part-00001.npz: its sha256 is not the manifest's" in lines[0]
    assert not (tmp_path / "out" / "x").exists()


@gloo
def test_force_replaces_only_what_solve_wrote_and_no_stale_part_stays(shards, tmp_path, capsys):
    out = tmp_path / "out"
    two = _solve("--shards", str(shards / "p2"), "--nproc", "2", *RUNS, "--out", str(out))
    assert two.returncode == 0, two.stderr
    assert sorted(path.name for path in (out / "x").iterdir()) == ["part-00000.npz", "part-00001.npz"]
    assert main(["solve", "--shards", str(shards / "p1"), *RUNS, "--out", str(out), "--force"]) == 0
    assert sorted(path.name for path in (out / "x").iterdir()) == ["part-00000.npz"]  # rank 1's of the last run: gone
    assert len(np.load(out / "x" / "part-00000.npz")["nodes"]) == 40
    (out / "x" / "part-00007.npz").write_bytes(b"not pdmm-bridge's")
    code, message = _refused(["solve", "--shards", str(shards / "p1"), *RUNS, "--out", str(out), "--force"], capsys)
    assert code == 2 and "\n" not in message and "part-00007.npz was not written by pdmm-bridge" in message, message
    assert (out / "x" / "part-00007.npz").read_bytes() == b"not pdmm-bridge's"
