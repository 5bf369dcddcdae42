"""pdmm-bridge solve: method specs, Ctrl-C, output safety, graph input checks, and plotting solve directories."""

import csv
import inspect
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import pdmm
import pdmm.datasets
import pdmm.decentralised
import pdmm.mixing
import pdmm.npz
import pdmm.tuning
from experiments import solve_names
from experiments.cli import main
from pdmm.synthetic import KINDS


def solve(out, *options):
    return main(["solve", "--no-progress", *options, "--out", str(out)])


def methods_in(out):
    with open(out / "history.csv", newline="") as file:
        return list(dict.fromkeys(row["method"] for row in csv.DictReader(file)))


def test_compare_specs_are_separate_labelled_runs_with_their_own_parameters(tmp_path):
    out = tmp_path / "run"
    assert (
        solve(out, "--nodes", "20", "--theta", "0.5", "--compare", "pdmm:theta=1,pdmm,admm,qa-pdmm:eta=safe:rho=2") == 0
    )
    labels = ["pdmm:theta=1", "pdmm", "admm", "qa-pdmm:eta=safe:rho=2"]
    assert methods_in(out) == labels
    params = {
        label: entry["params"] for label, entry in json.loads((out / "config.json").read_text())["methods"].items()
    }
    assert params == {
        "pdmm:theta=1": {"rho": 1.0, "theta": 1.0},
        "pdmm": {"rho": 1.0, "theta": 0.5},
        "admm": {"rho": 1.0},
        "qa-pdmm:eta=safe:rho=2": {"rho": 2.0, "theta": 0.5, "eta": "safe"},
    }
    with np.load(out / "result.npz") as result:
        assert set(result) == {*(f"x_{label}" for label in labels), "x_star"}
        np.testing.assert_allclose(result["x_pdmm"], result["x_admm"], atol=1e-8)  # theta 1/2 is ADMM


def spec_keys(cls):
    """The KEYs a spec of method class `cls` takes, read from the class: rho where its capabilities say it takes
    one, then its constructor's parameters with a default (the keyword-only network channel aside), the interval as
    low, high."""
    names = ["rho"] * cls.capabilities.rho + [
        name
        for name, p in inspect.signature(cls).parameters.items()
        if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.KEYWORD_ONLY
    ]
    return tuple(key for name in names for key in (("low", "high") if name == "interval" else (name,)))


def test_the_parsers_names_are_pdmms_registries():
    """solve's parser lists and checks these names without importing pdmm: each must be the registry it copies."""
    assert list(solve_names.METHODS) == list(pdmm.METHODS)
    assert solve_names.METHODS == {name: spec_keys(cls) for name, cls in pdmm.METHODS.items()}
    assert solve_names.PROBLEMS == KINDS and solve_names.TOPOLOGIES == tuple(pdmm.TOPOLOGIES)
    assert solve_names.MIXINGS == pdmm.mixing.KINDS and solve_names.STEPS == pdmm.decentralised.STEPS
    assert solve_names.DATASETS == tuple(pdmm.datasets.DATASETS)
    assert all(isinstance(getattr(torch, name), torch.dtype) for name in solve_names.DTYPES)
    assert solve_names.BREAST_CANCER_L2 == pdmm.datasets.BREAST_CANCER_L2
    assert (solve_names.NPZ_LIMIT, solve_names.NPZ_RATIO) == (pdmm.npz.NPZ_LIMIT, pdmm.npz.NPZ_RATIO)
    assert solve_names.TUNE_TARGET == pdmm.tuning.TARGET


@pytest.mark.parametrize(
    "spec, culprit",
    [
        ("pdmm:theta=2", "theta must be in (0, 1]"),
        ("pdmm:eta=L", "eta=L"),
        ("pdmm,pdmm", "distinct"),
        ("newton", "unknown method 'newton'"),
        ("admm:rho=-1", "rho"),
        ("qa-pdmm:eta=fast", "eta"),
    ],
)
def test_bad_specs_are_one_error_line_and_write_nothing(tmp_path, capsys, spec, culprit):
    with pytest.raises(SystemExit) as exit:
        solve(tmp_path / "run", "--nodes", "10", "--compare", spec)
    message = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and "\n" not in message and culprit in message
    assert not (tmp_path / "run").exists()


def test_an_existing_output_is_refused_without_force(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        solve(out, "--nodes", "10", "--reference", "none")
    assert "--force" in capsys.readouterr().err and not (out / "config.json").exists()
    assert solve(out, "--nodes", "10", "--reference", "none", "--force") == 0
    assert (out / "config.json").is_file() and (out / "notes.txt").read_text() == "mine"


def test_ctrl_c_writes_what_ran_marked_interrupted_and_exits_130(tmp_path):
    out = tmp_path / "run"
    victim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "experiments",
            "solve",
            "--graph",
            "ring",
            "--nodes",
            "2000",
            "--iters",
            "100000000",
            "--tol",
            "0",
            "--reference",
            "none",
            "--compare",
            "pdmm,admm",
            "--no-progress",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not any(out.glob(".*")) and time.time() < deadline:  # claimed just before the first method starts
        time.sleep(0.05)
    time.sleep(2)
    victim.send_signal(signal.SIGINT)
    stdout, stderr = victim.communicate(timeout=60)
    assert victim.returncode == 130 and "Traceback" not in stderr
    assert stderr.count("\n") == 1 and "interrupted" in stderr and "admm not run" in stderr
    config = json.loads((out / "config.json").read_text())
    iterations = config["methods"]["pdmm"]["iterations"]
    assert config["interrupted"] and config["methods"]["pdmm"]["interrupted"] and list(config["methods"]) == ["pdmm"]
    assert 0 < iterations < 100000000 and f"interrupted after {iterations} iterations" in stdout
    assert methods_in(out) == ["pdmm"] and (out / "convergence.png").is_file()
    with np.load(out / "result.npz") as result:
        assert result["x_pdmm"].shape == (2000, 3)


def test_self_loops_warn_and_a_disconnected_file_is_named(tmp_path, capsys):
    (tmp_path / "loop.txt").write_text("0 1\n1 2\n2 0\n2 2\n")
    (tmp_path / "two.txt").write_text("0 1\n2 3\n")
    assert solve(tmp_path / "a", "--graph", str(tmp_path / "loop.txt"), "--reference", "none") == 0
    assert "warning: the graph has 1 self-loop(s)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        solve(tmp_path / "b", "--graph", str(tmp_path / "two.txt"))
    message = capsys.readouterr().err
    assert "disconnected: it has 2 connected components" in message and "synthetic data" not in message


def test_plot_draws_several_solve_directories_one_line_per_method(tmp_path, capsys):
    assert solve(tmp_path / "a", "--nodes", "10", "--compare", "pdmm,admm") == 0
    assert solve(tmp_path / "b", "--nodes", "10", "--reference", "none") == 0
    from experiments.plots import plot_convergence
    from experiments.runs import load_solve

    runs = [load_solve(tmp_path / name) for name in ("a", "b")]
    assert main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").is_file()
    curves = {f"{run.path.name}: {label}": curve for run in runs for label, curve in run.curves.items()}
    figure = plot_convergence(curves, tmp_path / "q.png", "t", ("residual", "error", "objective"))
    residual, error, objective = figure.axes
    assert [line.get_label() for line in residual.lines] == ["a: pdmm", "a: admm", "b: pdmm"]
    assert [line.get_label() for line in error.lines] == ["a: pdmm", "a: admm"]  # b has no reference
    np.testing.assert_allclose(objective.lines[2].get_ydata(), runs[1].curves["pdmm"]["objective"])
    with pytest.raises(SystemExit):
        main(["plot", str(tmp_path / "a"), "--metric", "val_loss"])
    assert "residual, error, objective" in capsys.readouterr().err


@pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)
def test_nproc_runs_the_partitioned_engine_as_one_job_and_matches_one_process(tmp_path):
    common = ["--nodes", "40", "--problem", "least_squares", "--iters", "300", "--no-progress"]
    run = [sys.executable, "-m", "experiments", "solve", *common]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = subprocess.run(
        [*run, "--nproc", "2", "--out", str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=300
    )
    assert two.returncode == 0, two.stderr
    assert main(["solve", *common, "--out", str(tmp_path / "one")]) == 0
    split, whole = (np.load(tmp_path / name / "result.npz") for name in ("two", "one"))
    np.testing.assert_allclose(split["x_pdmm"], whole["x_pdmm"], rtol=0, atol=1e-12)
    rows = {name: list(csv.DictReader(open(tmp_path / name / "history.csv"))) for name in ("two", "one")}
    assert len(rows["two"]) == len(rows["one"]) > 10
    np.testing.assert_allclose(
        [float(r["residual"]) for r in rows["two"]], [float(r["residual"]) for r in rows["one"]], rtol=1e-9
    )
    assert json.loads((tmp_path / "two" / "config.json").read_text())["args"]["nproc"] == 2


@pytest.mark.parametrize(
    "option, culprit",
    [
        (["--nodes", "3", "--nproc", "4"], "more than the graph's 3 nodes"),
        (["--method", "dgd", "--privacy", "1.0"], "privacy"),
    ],
)
def test_nproc_refuses_what_the_partitioned_engine_does_not_run_before_starting(tmp_path, capsys, option, culprit):
    with pytest.raises(SystemExit) as exit:
        main(["solve", "--nodes", "20", "--nproc", "2", *option, "--out", str(tmp_path / "out"), "--no-progress"])
    assert exit.value.code == 2 and culprit in capsys.readouterr().err and not (tmp_path / "out").exists()
