"""Small inputs, bounded memory, one line per error (issue 29, items 5 and 6): npz headers checked before any data
is read, a config's memory estimated before the model is built, edge lists read at C speed, and the solve and
config inputs that used to end in a traceback."""

import resource
import time
import zipfile

import numpy as np
import pytest
from numpy.lib import format as npy

import pdmm
from experiments import memory
from experiments.cli import main, out_of_memory
from experiments.config import load_config
from experiments.errors import UsageError
from experiments.tasks import build_task
from pdmm.npz import NpzError, check_npz, read_npz


def npz_declaring(path, shape, data_bytes, compression=zipfile.ZIP_DEFLATED):
    """An .npz whose one member declares `shape` float64 and holds `data_bytes` zero bytes of data."""
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        with archive.open("a.npy", "w", force_zip64=True) as member:
            npy.write_array_header_1_0(member, {"descr": "<f8", "fortran_order": False, "shape": shape})
            for start in range(0, data_bytes, 2**22):
                member.write(bytes(min(2**22, data_bytes - start)))
    return path


def test_an_npz_bomb_is_refused_from_its_headers_before_reading(tmp_path):
    """A member of 200 MB of zeros compresses about 1000:1: refused by the ratio, in milliseconds, nothing read."""
    path = npz_declaring(tmp_path / "bomb.npz", (25_000_000,), 200_000_000)
    assert path.stat().st_size < 1_000_000
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(NpzError, match=r"declares 200 MB from .* compressed, more than 200:1"):
        read_npz(path)
    assert time.perf_counter() - start < 0.5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 20_000  # kB


def test_an_npz_header_declaring_gigabytes_it_does_not_hold_is_refused(tmp_path):
    path = npz_declaring(tmp_path / "liar.npz", (500_000_000,), 1000, compression=zipfile.ZIP_STORED)
    with pytest.raises(NpzError, match=r"declares shape \(500000000,\) of float64 \(4 GB\) but holds"):
        check_npz(path)


def test_an_npz_above_the_limit_or_with_objects_is_refused_and_a_normal_one_read(tmp_path):
    np.savez(tmp_path / "ok.npz", a=np.arange(1000.0), H=np.ones((10, 4, 3)))
    assert check_npz(tmp_path / "ok.npz") == 8000 + 960
    assert read_npz(tmp_path / "ok.npz")["H"].shape == (10, 4, 3)
    with pytest.raises(NpzError, match="more than the limit of 4 kB"):
        read_npz(tmp_path / "ok.npz", limit=4000)
    np.savez(tmp_path / "objects.npz", a=np.array([{}, 1], dtype=object))
    with pytest.raises(NpzError, match="holds Python objects"):
        read_npz(tmp_path / "objects.npz")


def test_the_solve_command_refuses_an_npz_bomb_in_one_line(tmp_path, capsys):
    path = npz_declaring(tmp_path / "bomb.npz", (25_000_000,), 200_000_000)
    with pytest.raises(SystemExit) as caught:
        main(["solve", "--no-progress", "--data", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and len(err.strip().splitlines()) == 1 and "more than 200:1" in err


def config(*overrides):
    return load_config("shakespeare_char_cpu", list(overrides))


def test_an_absurd_config_is_refused_with_its_estimate_before_the_task_is_built():
    with pytest.raises(UsageError, match=r"needs about [0-9.e+]+ GB \(model.n_layer=1000000, .* parameters.*available"):
        build_task(config("model.n_layer=1000000"))
    with pytest.raises(UsageError, match="train.memory_check=false"):
        build_task(config("train.batch_size=1000000000"))


def test_the_memory_check_can_be_turned_off_and_passes_the_built_in_configs():
    assert memory.estimate(config())["total_bytes"] < 1e9
    huge = config("model.n_layer=1000000", "train.memory_check=false")
    memory.check_memory(huge)  # no refusal: the brave may try
    assert memory.estimate(huge)["parameters"] > 1e11


def test_the_train_command_refuses_an_absurd_config_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["train", "shakespeare_char_cpu", "--set", "model.d_model=1000000", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and len(err.strip().splitlines()) == 1 and "GB" in err


@pytest.mark.parametrize("seed", [2**32, 2**61, 2**64])
def test_a_train_seed_out_of_range_is_a_config_error(seed):
    with pytest.raises(UsageError, match="train.seed must be an integer from 0 to 2\\^32 - 1"):
        config(f"train.seed={seed}")


def test_allocation_failures_are_recognised():
    assert out_of_memory(MemoryError()) and out_of_memory(
        RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 8 bytes")
    )
    assert not out_of_memory(RuntimeError("shape mismatch"))


def test_a_huge_batch_fails_in_one_line_with_exit_1(tmp_path, capsys, monkeypatch):
    def refuse(*_, **__):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: not enough memory: you "
            "tried to allocate 1000000000000 bytes."
        )

    monkeypatch.setattr(pdmm, "solve", refuse)
    monkeypatch.setattr(pdmm.Plan, "run", refuse)  # the command runs the plans its checks built
    with pytest.raises(SystemExit) as caught:
        main(["solve", "--no-progress", "--nodes", "10", "--reference", "none", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert caught.value.code == 1 and err.count("\n") == 1 and "out of memory" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "options, message",
    [
        (["--tol", "-1"], "argument --tol: must be a number >= 0 and below 1"),
        (["--tol", "nan"], "argument --tol: must be a number >= 0 and below 1"),
        (["--tol", "1e308"], "argument --tol: must be a number >= 0 and below 1"),
        (["--seed", "-1"], "argument --seed: must be an integer from 0"),
        (["--seed", str(2**64)], "argument --seed: must be an integer from 0"),
        (["--device", "meta"], "argument --device: 'meta' holds no data"),
    ],
)
def test_solve_arguments_that_used_to_end_in_a_traceback_are_one_line(tmp_path, capsys, options, message):
    with pytest.raises(SystemExit) as caught:
        main(["solve", "--no-progress", *options, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and message in err and err.count("\n") == 1


def test_the_python_api_refuses_the_meta_device():
    with pytest.raises(ValueError, match="'meta' holds no data"):
        pdmm.solve(pdmm.averaging(pdmm.topology("ring", 5), np.zeros((5, 1))), device="meta")


def write_edge_list(path, n, m, seed=0):
    rng = np.random.default_rng(seed)
    pairs = np.column_stack([np.arange(n - 1), np.arange(1, n)])  # a path: connected
    src = rng.integers(n, size=m - len(pairs))
    pairs = np.vstack([pairs, np.column_stack([src, (src + 1 + rng.integers(n - 1, size=len(src))) % n])])  # no loops
    with open(path, "w") as file:
        file.write("# an edge list\n")
        np.savetxt(file, pairs, fmt="%d")
    return pairs


def test_an_edge_list_reads_as_networkx_reads_it(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("# c\n5 3 {'w': 1}\n3 07\n\n x \n07 5 # tail\n")
    G = pdmm.load_graph(path)
    assert list(G.nodes) == ["5", "3", "07"] and sorted(G.edges) == [("3", "07"), ("5", "07"), ("5", "3")]
    path.write_text("10 2\n2 -3\n-3 10\n4 4\n4 2\n")
    G = pdmm.load_graph(path)
    assert list(G.nodes) == [10, 2, -3, 4] and G.has_edge(4, 4)
    with pytest.warns(UserWarning, match="1 self-loop"):
        graph = pdmm.load_graph(path, arrays=True)
    assert graph.nodes == [10, 2, -3, 4] and graph.number_of_edges() == 4


def test_a_graph_file_that_cannot_be_read_names_the_reason(tmp_path):
    path = tmp_path / "g.txt"
    path.write_bytes(b"0 1\n\xff\xfe 2\n")
    with pytest.raises(ValueError, match=r"could not read graph file .*: 'utf-8' codec can't decode"):
        pdmm.load_graph(path)


@pytest.mark.slow
def test_a_20_mb_edge_list_loads_in_seconds_in_memory_proportional_to_its_edges(tmp_path):
    path = tmp_path / "big.txt"
    write_edge_list(path, 1_000_000, 1_700_000)
    assert path.stat().st_size > 20e6
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    graph = pdmm.load_graph(path, arrays=True)
    assert time.perf_counter() - start < 20  # 4 s on a busy 2-core machine
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 600_000  # kB: 223 MB measured
    assert graph.n == 1_000_000 and graph.components == 1


def test_a_2_mb_edge_list_loads_fast_and_solves(tmp_path, capsys):
    path = tmp_path / "g.txt"
    write_edge_list(path, 100_000, 170_000)
    start = time.perf_counter()
    graph = pdmm.load_graph(path, arrays=True)
    assert time.perf_counter() - start < 3 and graph.n == 100_000
    small = tmp_path / "small.txt"
    write_edge_list(small, 200, 400)
    assert (
        main(
            [
                "solve",
                "--no-progress",
                "--graph",
                str(small),
                "--reference",
                "none",
                "--iters",
                "20",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )


def test_one_long_label_does_not_widen_every_label(tmp_path):
    """One 3000-character label among 200,000 edges made every label a 3000-byte array entry (1.2 GB here, 5.6 GB
    at a million edges): chunks with a label over LONG_LABEL bytes are numbered through a dict instead."""
    path = tmp_path / "long.txt"
    pairs = write_edge_list(path, 50_000, 200_000)
    with open(path, "a") as file:
        file.write("A" * 3000 + " 0\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    labels, src, dst = pdmm.graph_files.read_edge_list(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300_000  # kB
    assert len(src) == len(pairs) + 1 and labels[src[-1]] == "A" * 3000 and labels[dst[-1]] == "0"
    text = [(labels[i], labels[j]) for i, j in zip(src[:-1].tolist(), dst[:-1].tolist(), strict=False)]
    assert text == [(str(i), str(j)) for i, j in pairs.tolist()]  # the edges and their order as written


def test_a_graph_file_larger_than_memory_allows_is_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "g.txt"
    write_edge_list(path, 2000, 5000)
    monkeypatch.setattr(pdmm.graph_files, "available_memory", lambda: 10 * path.stat().st_size - 1)
    with pytest.raises(ValueError, match=r"would take about .* of memory, more than the .* available"):
        pdmm.load_graph(path, arrays=True)
    monkeypatch.setattr(pdmm.graph_files, "available_memory", lambda: 10 * path.stat().st_size)
    assert pdmm.load_graph(path, arrays=True).n == 2000
    assert pdmm.graph_files.available_memory() is None or pdmm.graph_files.available_memory() > 0


def test_synthetic_data_larger_than_memory_allows_is_refused_before_drawing(tmp_path, capsys, monkeypatch):
    """--samples 3000000 on 100 nodes asked for about 29 GB and got it where the machine had it (or a kill)."""
    import pdmm.synthetic

    monkeypatch.setattr(pdmm.synthetic, "available_memory", lambda: 10**9)
    with pytest.raises(
        ValueError,
        match=r"shape 100 x 3000000 x 3 would take about 28\.8 GB of memory, more than "
        r"the 1 GB available",
    ):
        pdmm.synthetic.make_data("least_squares", 100, 3, 3_000_000)
    assert pdmm.synthetic.make_data("least_squares", 100, 3, 10)["H"].shape == (100, 10, 3)
    with pytest.raises(SystemExit) as caught:
        main(
            [
                "solve",
                "--no-progress",
                "--problem",
                "least_squares",
                "--samples",
                "3000000",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and "28.8 GB" in err and not (tmp_path / "out").exists()


def test_the_solve_command_refuses_data_with_an_empty_axis_in_one_line(tmp_path, capsys):
    """a of shape (100, 0) ended in an IndexError traceback from the stopping test's scale."""
    np.savez(tmp_path / "empty.npz", a=np.ones((100, 0)))
    with pytest.raises(SystemExit) as caught:
        main(["solve", "--no-progress", "--data", str(tmp_path / "empty.npz"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and "axis of length 0" in err


def test_a_reference_cvxpy_cannot_compute_is_one_line_exit_1(tmp_path, capsys):
    """lam = 1e308: CLARABEL fails; the SolverError was a traceback. The run itself needs no reference."""
    rng = np.random.default_rng(0)
    problem = pdmm.lasso(pdmm.topology("ring", 6), rng.normal(size=(6, 4, 2)), rng.normal(size=(6, 4)), lam=1e308)
    with pytest.raises(RuntimeError, match=r"cvxpy could not solve the centralised problem \(instance 0\)"):
        pdmm.reference(problem)
    with pytest.raises(SystemExit) as caught:
        main(
            [
                "solve",
                "--no-progress",
                "--problem",
                "lasso",
                "--lam",
                "1e308",
                "--nodes",
                "10",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    err = capsys.readouterr().err
    assert caught.value.code == 1 and err.count("\n") == 1 and "rerun with --reference none" in err
    assert (
        main(
            [
                "solve",
                "--no-progress",
                "--problem",
                "lasso",
                "--lam",
                "1e308",
                "--nodes",
                "10",
                "--reference",
                "none",
                "--out",
                str(tmp_path / "none"),
            ]
        )
        == 0
    )
    with np.load(tmp_path / "none" / "result.npz") as result:  # lam beyond |sum_i H_i^T y_i|: the minimiser is 0
        assert not result["x_pdmm"].any()
