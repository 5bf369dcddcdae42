"""Training with DistributedDataParallel under torchrun: P = 2 processes take the steps one process takes.

Each test launches real `torchrun` jobs (gloo on localhost) of a tiny modular-arithmetic run, so
the module takes a few minutes on a loaded two-core machine; the runs it compares are shared.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.checkpoints import has_checkpoint, load_checkpoint
from experiments.cli import main
from experiments.config import load_config
from experiments.errors import UsageError
from experiments.runs import load_run
from experiments.train import train
from experiments.world import World

pytestmark = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available() and sys.platform == "linux"),
    reason="needs torch.distributed with gloo, on Linux (/proc)",
)

CONFIG = str(Path(__file__).resolve().parents[1] / "experiments" / "configs" / "modular97.toml")
TINY = [
    "task.p=11",
    "model.d_model=16",
    "model.n_head=2",
    "train.batch_size=20",
    "train.lr=3e-3",
    "train.warmup_iters=2",
    "train.eval_interval=10",
    "train.max_iters=50",
    "train.checkpoint_interval=10",
]
ARGS = ["train", CONFIG, *[f"--set={s}" for s in TINY], "--no-progress"]
LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
ENV = {
    **{
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
    },
    "OMP_NUM_THREADS": "1",
}
TIMEOUT = 300  # seconds: a hung job fails the test instead of stalling the suite
KILL_AT = 25  # the run is SIGKILLed while rank 0 writes the metrics row of this step (checkpoint at step 20)

KILLER = (
    """
import json, os, signal, sys
from experiments import train

def kill_the_job():
    '''SIGKILL torchrun and every worker of this job (or this process alone without torchrun).'''
    if "TORCHELASTIC_RUN_ID" in os.environ:
        agent = os.getppid()
        workers = [int(name) for name in os.listdir("/proc") if name.isdigit() and parent(name) == agent]
        os.kill(agent, signal.SIGKILL)
        for pid in workers:
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)

def parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None

real = train.write_row
def killing(file, row):
    if row["step"] == KILL_AT:
        file.write(json.dumps(row)[:15])  # a torn row, as a kill mid-write leaves
        file.flush()
        kill_the_job()
    return real(file, row)
train.write_row = killing
from experiments.cli import main
sys.exit(main(sys.argv[1:]))
"""
).replace("KILL_AT", str(KILL_AT))


def launch(processes, out, *extra, script=None):
    """`pdmm-bridge train` of the tiny run into `out` as one plain process (processes=1) or under torchrun."""
    program = [str(script)] if script else ["-m", "experiments"]
    if processes == 1:
        argv = [sys.executable, *program, *ARGS, "--out", str(out), *extra]
    else:
        argv = [*LAUNCH, str(processes), *program, *ARGS, "--out", str(out), *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=TIMEOUT)


def finished(processes, out, *extra):
    done = launch(processes, out, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return out


def killed(processes, out, tmp):
    """The tiny run SIGKILLed (torchrun and all its workers) after its checkpoint at step 20."""
    script = tmp / "killer.py"
    script.write_text(KILLER)
    done = launch(processes, out, script=script)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]  # the process, or torchrun itself
    assert has_checkpoint(out) and not (out / "summary.json").exists()
    assert load_checkpoint(out / "ckpt.pt", ("state",))["state"]["step"] == 20
    return out


def curve(run):
    """Every metrics row but its wall time."""
    return [{k: v for k, v in row.items() if k != "time"} for row in load_run(run).metrics]


def weights(run):
    return load_checkpoint(Path(run) / "ckpt.pt")["model"]


def assert_close_runs(a, b, rtol=1e-5):
    """Same steps and metrics to float tolerance, and the same final weights to a tolerance."""
    rows_a, rows_b = curve(a), curve(b)
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b]
    assert [r.keys() for r in rows_a] == [r.keys() for r in rows_b]
    for key in rows_a[0]:
        np.testing.assert_allclose(
            [r.get(key, 0.0) for r in rows_a], [r.get(key, 0.0) for r in rows_b], rtol=rtol, atol=1e-7, err_msg=key
        )
    for key in ("val_acc", "train_acc"):  # counts of right answers: equal, not close
        assert [r.get(key) for r in rows_a] == [r.get(key) for r in rows_b]
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    flat_a, flat_b = (torch.cat([w[key].flatten() for key in sorted(w)]) for w in (wa, wb))
    # As a whole: Adam divides a gradient that should be zero (the key bias, which softmax ignores) by its
    # own size, so there rounding noise moves single weights by ~1e-5; every other weight agrees to ~1e-7.
    assert (flat_a - flat_b).norm() <= 1e-4 * flat_a.norm()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Uninterrupted runs of the same config: one plain process, and torchrun with 2 processes."""
    tmp = tmp_path_factory.mktemp("ddp")
    return {"one": finished(1, tmp / "one"), "two": finished(2, tmp / "two"), "tmp": tmp}


@pytest.fixture(scope="module")
def killed_two(runs):
    """The run at 2 processes, SIGKILLed with torchrun after its checkpoint at step 20 (kept unresumed)."""
    return killed(2, runs["tmp"] / "killed-two", runs["tmp"])


def test_two_processes_give_the_single_process_curve_and_weights(runs):
    one, two = runs["one"], runs["two"]
    losses = [r["train_loss"] for r in curve(one)]
    assert len(losses) == 50 and losses[-1] < losses[0] - 0.1  # the weights move: the comparison means something
    assert_close_runs(one, two)
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())  # no file per rank
    meta = json.loads((two / "meta.json").read_text())
    assert (meta["processes"], meta["backend"]) == (2, "gloo") and "processes" not in json.loads(
        (one / "meta.json").read_text()
    )
    summary = json.loads((two / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["steps"] == 50
    checkpoint = load_checkpoint(two / "ckpt.pt", ("model", "optimizer", "rng", "state"))
    assert not any(key.startswith("module.") for key in checkpoint["model"])  # the unwrapped model
    assert checkpoint["model"].keys() == weights(one).keys()


def test_a_sigkilled_torchrun_job_resumes_to_the_uninterrupted_metrics(runs, killed_two):
    out = runs["tmp"] / "resumed-two"
    shutil.copytree(killed_two, out)
    finished(2, out, "--resume")
    assert curve(out) == curve(runs["two"])  # same processes: the same bits
    assert all(torch.equal(weights(out)[k], weights(runs["two"])[k]) for k in weights(out))


def test_a_checkpoint_of_two_processes_resumes_on_one(runs, killed_two):
    out = runs["tmp"] / "two-then-one"
    shutil.copytree(killed_two, out)
    finished(1, out, "--resume")
    assert_close_runs(out, runs["one"])
    assert curve(out)[:20] == curve(runs["two"])[:20]  # the rows before the checkpoint are the job's own


def test_a_checkpoint_of_one_process_resumes_on_two(runs):
    out = killed(1, runs["tmp"] / "one-then-two", runs["tmp"])
    finished(2, out, "--resume")
    assert_close_runs(out, runs["two"])
    assert curve(out)[:20] == curve(runs["one"])[:20]


def test_a_batch_that_does_not_split_over_the_processes_is_one_clear_error(tmp_path):
    done = launch(2, tmp_path / "run", "--set=train.batch_size=5")
    assert done.returncode != 0
    assert (
        "the global batch of 5 examples does not split evenly over 2 processes" in done.stderr
        and "multiple of 2" in done.stderr
    ), done.stderr[-3000:]
    assert not (tmp_path / "run" / "config.toml").exists()


def test_the_shard_of_each_rank_is_its_contiguous_share_of_the_global_batch():
    x, y = torch.arange(12).reshape(6, 2), torch.arange(6)
    shards = [World(rank, 3).shard(("graph", x, y)) for rank in range(3)]
    assert all(shard[0] == "graph" for shard in shards)
    assert torch.equal(torch.cat([s[1] for s in shards]), x) and torch.equal(torch.cat([s[2] for s in shards]), y)
    assert World().shard((x, y)) == (x, y)
    with pytest.raises(UsageError, match="global batch of 6 examples does not split evenly over 4 processes"):
        World(0, 4).shard((x, y))


def test_torchrun_without_a_process_group_is_refused(tmp_path, monkeypatch):
    """A sweep (or a script) launched by torchrun, which sets up no process group: one clear error, no files."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="only `pdmm-bridge train` trains with several processes"):
        train(load_config(CONFIG, TINY), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_sweep_under_torchrun_is_refused_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as exit:
        main(["sweep", str(CONFIG), "--seeds", "0", "--out", str(tmp_path / "sweep")])
    assert (
        exit.value.code == 2
        and "a sweep runs as one process" in capsys.readouterr().err
        and not (tmp_path / "sweep").exists()
    )
