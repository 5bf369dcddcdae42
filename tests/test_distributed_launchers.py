"""The standard launchers of a solve job (issue 43, part 5; docs/guide/distributed.md): Slurm's variables mapped to
torch's, a Slurm job step and a two-node torchrun job (c10d rendezvous) through the command line, each equal to one
process; and the solve command building each run's method once (the plans it checked are the plans it runs)."""

import csv
import importlib
import json
import os
import random
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from same_result import assert_same_result
from tiny_runs import fails

import pdmm
from experiments import launch
from experiments.cli import main
from experiments.errors import UsageError

gloo = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)
ENV = {
    name: value
    for name, value in os.environ.items()
    if name not in launch.TORCH_VARIABLES and not name.startswith(("SLURM_", "TORCHELASTIC_", "PDMM_BRIDGE_"))
}
ENV["OMP_NUM_THREADS"] = "1"
JOB = ["--nodes", "24", "--problem", "least_squares", "--iters", "150", "--reference", "none", "--no-progress"]
SLURM = {  # one task of `srun --nodes 4 --ntasks 7` (three nodes of two tasks, one of one): the fourth task
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "7",
    "SLURM_STEP_NUM_TASKS": "7",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_TASKS_PER_NODE": "2(x3),1",
    "SLURM_JOB_NODELIST": "gpu[01-03,07]",
    "SLURM_JOB_ID": "4242",
}


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({}, dict(RANK="3", WORLD_SIZE="7", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", MASTER_ADDR="gpu01")),
        ({"SLURM_NODEID": "3", "SLURM_PROCID": "6", "SLURM_LOCALID": "0"}, dict(RANK="6", LOCAL_WORLD_SIZE="1")),
        ({"SLURM_NTASKS_PER_NODE": "4"}, dict(LOCAL_WORLD_SIZE="4")),  # --ntasks-per-node wins over the job's list
        ({"SLURM_NTASKS_PER_NODE": "4", "SLURM_STEP_TASKS_PER_NODE": "3,2,1,1"}, dict(LOCAL_WORLD_SIZE="2")),
        ({"SLURM_STEP_NUM_TASKS": "5"}, dict(WORLD_SIZE="5")),  # an `srun -n 5` step in a 7-task allocation
        ({"SLURM_STEP_TASKS_PER_NODE": "3,2,1,1"}, dict(LOCAL_WORLD_SIZE="2")),  # the step's, over the job's
        ({"SLURM_JOB_NODELIST": "cpu3,gpu[01-04]"}, dict(MASTER_ADDR="cpu3")),
        ({"SLURM_JOB_NODELIST": "rack[2-3]-n[008,010-012],x"}, dict(MASTER_ADDR="rack2-n008")),  # zero padding kept
        ({"SLURM_STEP_NODELIST": "node[5-6]"}, dict(MASTER_ADDR="node5")),  # the step's nodes, over the job's
        ({"SLURM_JOB_NODELIST": "node17.cluster.example"}, dict(MASTER_ADDR="node17.cluster.example")),
        ({"SLURM_JOB_ID": "1234567"}, dict(MASTER_PORT=str(20000 + 1234567 % 20000))),
        ({"SLURM_JOB_ID": "4242"}, dict(MASTER_PORT="24242")),
        ({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}, dict(MASTER_ADDR="10.0.0.1", MASTER_PORT="29500")),
        ({"LOCAL_WORLD_SIZE": "8", "SLURM_TASKS_PER_NODE": "garbage"}, dict(LOCAL_WORLD_SIZE="8")),  # not read
    ],
)
def test_slurm_variables_map_to_torchs(changes, expected):
    environ = {**SLURM, **changes}
    mapped = launch.slurm_environment(environ)
    assert sorted(mapped) == sorted(launch.TORCH_VARIABLES)
    for name, value in expected.items():
        assert mapped[name] == value, name
    assert environ == {**SLURM, **changes}  # only read


@pytest.mark.parametrize(
    "changes, culprit",
    [
        ({"SLURM_PROCID": None}, "SLURM_PROCID is not set"),
        ({"SLURM_PROCID": "x"}, "SLURM_PROCID='x' is not a whole number >= 0"),
        ({"SLURM_PROCID": "-1"}, "SLURM_PROCID='-1'"),
        ({"SLURM_PROCID": "7"}, "SLURM_PROCID=7 is not below SLURM_STEP_NUM_TASKS=7"),
        ({"SLURM_STEP_NUM_TASKS": "0"}, "SLURM_STEP_NUM_TASKS='0' is not a whole number >= 1"),
        ({"SLURM_STEP_NUM_TASKS": None, "SLURM_NTASKS": "0"}, "SLURM_NTASKS='0' is not a whole number >= 1"),
        ({"SLURM_LOCALID": ""}, "SLURM_LOCALID=''"),
        ({"SLURM_TASKS_PER_NODE": "2(x"}, "SLURM_TASKS_PER_NODE='2(x' is not a list of task counts"),
        ({"SLURM_TASKS_PER_NODE": "2(x0)"}, "SLURM_TASKS_PER_NODE='2(x0)'"),
        ({"SLURM_TASKS_PER_NODE": None}, "neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set"),
        ({"SLURM_NODEID": "4"}, "SLURM_NODEID=4 has no entry in SLURM_TASKS_PER_NODE='2(x3),1'"),
        ({"SLURM_JOB_NODELIST": "gpu[01-04"}, "SLURM_JOB_NODELIST='gpu[01-04' is not a Slurm host list"),
        ({"SLURM_JOB_NODELIST": "gpu[a-b]"}, "SLURM_JOB_NODELIST='gpu[a-b]'"),
        ({"SLURM_JOB_NODELIST": "a,,b"}, "SLURM_JOB_NODELIST='a,,b'"),
        ({"SLURM_JOB_NODELIST": None}, "SLURM_JOB_NODELIST is not set"),
        ({"SLURM_JOB_ID": "12a"}, "SLURM_JOB_ID='12a'"),
    ],
)
def test_malformed_slurm_variables_are_named_in_one_line(changes, culprit):
    environ = {name: value for name, value in {**SLURM, **changes}.items() if value is not None}
    with pytest.raises(UsageError) as refused:
        launch.slurm_environment(environ)
    assert culprit in str(refused.value) and "\n" not in str(refused.value)


def test_the_solve_command_refuses_a_malformed_slurm_step_in_one_line(tmp_path, monkeypatch, capsys):
    for name in (*launch.TORCH_VARIABLES, launch.REPORTS):
        monkeypatch.delenv(name, raising=False)
    step = {**SLURM, "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_TASKS_PER_NODE": "2(x"}
    for name, value in step.items():
        monkeypatch.setenv(name, value)
    line = fails(capsys, ["solve", "--nodes", "10", "--no-progress", "--out", str(tmp_path / "out")])
    assert line == "pdmm-bridge solve: error: SLURM_TASKS_PER_NODE='2(x' is not a list of task counts such as '2(x3),1'"
    assert not (tmp_path / "out").exists() and "RANK" not in os.environ


def test_slurm_task_is_a_step_of_several_tasks_without_torchs_variables():
    assert launch.slurm_task(SLURM)
    assert not launch.slurm_task({**SLURM, "RANK": "3"})  # torchrun under srun: torchrun's variables
    assert not launch.slurm_task({**SLURM, "SLURM_STEP_NUM_TASKS": "1"})  # --nproc inside a one-task step
    batch = {name: value for name, value in SLURM.items() if name != "SLURM_STEP_NUM_TASKS"}
    assert not launch.slurm_task(batch)  # --nproc in the batch script of an sbatch --ntasks 7: srun set nothing
    assert not launch.slurm_task({})


def _one_process(tmp_path):
    """The job's problem solved by one process: its result.npz and history.csv rows."""
    assert main(["solve", *JOB, "--out", str(tmp_path / "one")]) == 0
    return _outputs(tmp_path / "one")


def _outputs(out):
    return np.load(out / "result.npz"), list(csv.DictReader(open(out / "history.csv")))


def _assert_same_job(split, whole):
    (x, rows), (x_one, rows_one) = split, whole
    np.testing.assert_allclose(x["x_pdmm"], x_one["x_pdmm"], rtol=0, atol=1e-12)
    assert len(rows) == len(rows_one) > 10
    residual = [[float(row["residual"]) for row in r] for r in (rows, rows_one)]
    np.testing.assert_allclose(*residual, rtol=1e-9)


def _free_port(low=1024, high=65536):
    """A TCP port in [low, high) that nothing on 127.0.0.1 listens on now."""
    for port in random.sample(range(low, high), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port")


def _finish(processes, timeout=300):
    """Every process's (exit status, stderr), killing the rest once one fails or time is up."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        if any(p.returncode not in (None, 0) for p in processes):
            break
        time.sleep(0.1)
    for p in processes:
        if p.poll() is None:
            p.kill()
    return [(p.wait(), p.stderr.read()) for p in processes]


@pytest.mark.slow  # 26 s here (two cores, load 7): mostly each process importing torch
@gloo
def test_a_slurm_step_of_two_tasks_runs_the_job_and_matches_one_process(tmp_path):
    """Two processes as `srun --ntasks 2` starts them (Slurm's variables only, no launcher): the address from the
    node list, the port from the job id."""
    port = _free_port(20000, 40000)
    slurm = {
        "SLURM_NTASKS": "2",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_TASKS_PER_NODE": "2",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "127.0.0.1",
        "SLURM_JOB_ID": str(3 * 20000 + port - 20000),
    }
    out = tmp_path / "slurm"
    tasks = [
        subprocess.Popen(
            [sys.executable, "-m", "experiments", "solve", *JOB, "--out", str(out)],
            env={**ENV, **slurm, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    ended = _finish(tasks)
    assert [code for code, _ in ended] == [0, 0], ended
    assert json.loads((out / "config.json").read_text())["args"]["nproc"] == 2
    _assert_same_job(_outputs(out), _one_process(tmp_path))


@pytest.mark.slow  # 28-42 s here (two cores, load 7): six processes importing torch
@gloo
def test_a_two_node_torchrun_job_with_c10d_rendezvous_matches_one_process(tmp_path):
    """Two torchrun agents, as on two machines (--nnodes 2, 2 processes each, c10d rendezvous at the first
    one's address; here both on localhost), run one job of 4 processes through the command line."""
    endpoint = f"127.0.0.1:{_free_port()}"
    out = tmp_path / "torchrun"
    node = [
        *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2"),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "launchers"),
        *("-m", "experiments", "solve", *JOB, "--out", str(out)),
    ]
    agents = [
        subprocess.Popen(node, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in (0, 1)
    ]
    ended = _finish(agents)
    assert [code for code, _ in ended] == [0, 0], ended
    assert json.loads((out / "config.json").read_text())["args"]["nproc"] == 4
    _assert_same_job(_outputs(out), _one_process(tmp_path))


def test_the_solve_command_builds_each_run_once_and_runs_as_pdmm_solve(tmp_path, monkeypatch):
    """The runs check_methods planned are the runs solved: pdmm.solve's _prepare (the method built on the problem)
    once per run, not once to check and once to run; and each run's x and history are pdmm.solve's for the same
    settings, bit for bit (the reference, solved after the checks, given by Plan.with_reference)."""
    solve_module = importlib.import_module("pdmm.solve")
    built = []
    prepare = solve_module._prepare

    def counted(problem, options):
        built.append((problem, options.method))
        return prepare(problem, options)

    monkeypatch.setattr(solve_module, "_prepare", counted)
    options = ["--nodes", "12", "--compare", "pdmm,admm,extra", "--iters", "60", "--drop", "0.1", "--seed", "3"]
    assert main(["solve", *options, "--no-progress", "--out", str(tmp_path / "out")]) == 0
    assert [method for _, method in built] == ["pdmm", "admm", "extra"]
    problem = built[0][0]
    monkeypatch.setattr(solve_module, "_prepare", prepare)
    saved, rows = _outputs(tmp_path / "out")
    for label in ("pdmm", "admm", "extra"):
        solved = pdmm.solve(
            problem,
            method=label,
            rho=None if label == "extra" else 1.0,
            max_iter=60,
            reference=saved["x_star"],
            network=pdmm.Network(drop=0.1, seed=3),
            history=["residual", "objective", "error", "messages", "bits"],
            record_every=1,
            on_divergence="return",
        )
        np.testing.assert_array_equal(saved[f"x_{label}"], solved.x)
        own = [row for row in rows if row["method"] == label]
        for column in ("residual", "objective", "error", "messages", "bits"):
            np.testing.assert_array_equal([float(row[column]) for row in own], solved.history[column])


def test_a_plan_given_its_reference_later_runs_as_one_planned_with_it():
    """Plan.with_reference: the method built once, the Result bit for bit pdmm.solve's with the reference."""
    problem = pdmm.averaging(pdmm.topology("grid", n=16), np.arange(16.0))
    x_star = np.full((16, 1), 7.5)
    network = pdmm.Network(drop=0.2, seed=1)
    settings = dict(method="pdmm", theta=0.5, max_iter=40, tol=0, network=network, reorder=True)
    planned = pdmm.plan(problem, history=("residual", "bits"), **settings)
    built = planned.ready[0]
    later = planned.with_reference(x_star)
    assert later.ready is planned.ready and planned.ready[0] is built  # not built again; the first plan left alone
    assert later.options.recording.history == ("residual", "error", "bits")
    solved = pdmm.solve(problem, reference=x_star, history=("residual", "error", "bits"), **settings)
    assert_same_result(later.run(), solved)
    assert not planned.ready  # later's run took the built method; planned builds its own
    with pytest.raises(ValueError, match="reference"):
        pdmm.plan(problem, **settings).with_reference(np.zeros((3, 1)))
