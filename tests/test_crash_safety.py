"""Crash safety by fault injection: kill or fail a run at every write point, resume, get the same bits."""

import errno
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny_runs import Crash, Faults, forge, stub_plots

import experiments.rundir_descriptors as descriptors
import experiments.train as train_module
from experiments.checkpoints import has_checkpoint, load_checkpoint
from experiments.cli import main
from experiments.config import load_config
from experiments.runs import TornLine, load_run
from experiments.train import learning_rate, train

CONFIG = str(Path(__file__).resolve().parents[1] / "experiments" / "configs" / "modular97.toml")
TINY = [
    "task.p=11",
    "model.d_model=16",
    "model.n_head=2",
    "model.dropout=0.1",
    "train.warmup_iters=2",
    "train.eval_interval=4",
    "train.eval_iters=2",
    "train.max_iters=10",
    "train.checkpoint_interval=3",
]
ARGV = ["train", CONFIG, *[f"--set={s}" for s in TINY], "--no-progress"]
PYTHON = [sys.executable, "-m", "experiments"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


quick_plots = pytest.fixture(autouse=True)(stub_plots)


def tiny(*extra):
    return load_config(CONFIG, [*TINY, *extra])


def bits(run):
    """What must not change with a crash: every metric row but its wall time, and the final weights."""
    rows = [{k: v for k, v in row.items() if k != "time"} for row in load_run(run).metrics]
    return rows, load_checkpoint(Path(run) / "ckpt.pt")["model"]


def assert_same_bits(a, b):
    (rows_a, weights_a), (rows_b, weights_b) = bits(a), bits(b)
    assert rows_a == rows_b
    assert weights_a.keys() == weights_b.keys() and all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


def recover(config, out):
    """What a user does after a crash: --resume when there is a checkpoint, else start again with --force."""
    return train(config, out, resume=has_checkpoint(out), force=not has_checkpoint(out), progress=False)


def test_a_kill_at_every_write_point_then_resume_gives_the_uninterrupted_bits(tmp_path, monkeypatch, capsys):
    config = tiny()
    with monkeypatch.context() as patch:
        counter = Faults(patch)
        train(config, tmp_path / "whole", progress=False)
    assert counter.calls > 30  # rows, checkpoints (tmp fsync, keep, rename, directory), config, meta, summary
    for at in range(1, counter.calls + 1):
        out = tmp_path / f"killed-{at}"
        with monkeypatch.context() as patch:
            Faults(patch, at)
            with pytest.raises(Crash):
                train(config, out, progress=False)
        recover(config, out)
        assert_same_bits(out, tmp_path / "whole")
        assert (
            json.loads((out / "summary.json").read_text())["final"]
            == json.loads((tmp_path / "whole" / "summary.json").read_text())["final"]
        )
    assert "Traceback" not in capsys.readouterr().err


def whole_run(argv, out):
    """The uninterrupted run, in a subprocess like the killed ones (same torch threads and global state)."""
    done = subprocess.run([*PYTHON, *argv, "--out", str(out)], capture_output=True, text=True, env=ENV)
    assert done.returncode == 0, done.stderr


KILLER = """
import os, signal, sys
from experiments import train
real = {target}
calls = []
def killing(*args, **kwargs):
    calls.append(1)
    if len(calls) == {at}:
        {before}
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
{patch} = killing
from experiments.cli import main
sys.exit(main(sys.argv[1:]))
"""
KILLS = {  # a real SIGKILL inside a checkpoint write (ckpt.pt renamed away, its successor not yet in place) and mid-row
    "between the renames of a checkpoint": dict(
        target="os.replace", at=11, before="pass", patch="os.replace"
    ),  # 1-10: the marker and its updates, config.toml, meta.json, the first checkpoint, ckpt.pt -> ckpt.prev.pt
    "in the middle of a metrics row": dict(
        target="train.write_row",
        at=8,
        patch="train.write_row",
        before='args[0].write(\'{"step": 8, "tra\'); args[0].flush()',
    ),
}


@pytest.mark.parametrize("moment", KILLS)
def test_a_real_sigkill_inside_a_write_then_resume_gives_the_uninterrupted_bits(tmp_path, moment):
    whole_run(ARGV, tmp_path / "whole")
    script = KILLER.format(**KILLS[moment])
    killed = subprocess.run(
        [sys.executable, "-c", script, *ARGV, "--out", str(tmp_path / "killed")],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "killed" / "summary.json").exists()
    resumed = subprocess.run(
        [*PYTHON, *ARGV, "--out", str(tmp_path / "killed"), "--resume"], capture_output=True, text=True, env=ENV
    )
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr
    assert_same_bits(tmp_path / "killed", tmp_path / "whole")


@pytest.mark.slow  # 2 minutes; the kill at every write point and the real SIGKILLs inside writes run in CI
def test_twenty_seeded_random_sigkills_then_resume_give_the_uninterrupted_bits(tmp_path):
    """SIGKILL from outside at 20 seeded random moments (start-up, steps, evaluations, checkpoint writes),
    each followed by what a user does: --resume when a checkpoint exists, else start again with --force."""
    longer = [*ARGV, "--set=train.max_iters=60"]
    whole_run(longer, tmp_path / "whole")
    start = time.perf_counter()  # an uninterrupted run as a process: the kills fall within its duration
    timing = subprocess.run([*PYTHON, *longer, "--out", str(tmp_path / "timing")], capture_output=True, env=ENV)
    duration = time.perf_counter() - start
    assert timing.returncode == 0
    argv = [*PYTHON, *longer, "--out", str(tmp_path / "killed")]
    rng = random.Random(0)
    killed = 0
    for _ in range(20):
        out = tmp_path / "killed"
        again = ["--resume"] if has_checkpoint(out) else ["--force"] if out.exists() else []
        process = subprocess.Popen([*argv, *again], stderr=subprocess.PIPE, text=True, env=ENV)
        try:
            process.wait(timeout=rng.uniform(0.05, 0.8) * duration)
        except subprocess.TimeoutExpired:
            process.kill()
            killed += 1
        stderr = process.communicate()[1]
        assert "Traceback" not in stderr
        if process.returncode == 0:
            break
    assert killed >= 10  # most attempts were cut off, not finished
    out = tmp_path / "killed"
    again = ["--resume"] if has_checkpoint(out) else ["--force"]
    if not (out / "summary.json").is_file():
        final = subprocess.run([*argv, *again], capture_output=True, text=True, env=ENV)
        assert final.returncode == 0 and "Traceback" not in final.stderr
    assert_same_bits(out, tmp_path / "whole")


def crash_at_step(monkeypatch, config, out, step):
    """Run `config` into `out` and kill it while it writes the metrics row of `step` (half the row on disk)."""
    write_row = train_module.write_row

    def torn_at_step(file, row):
        if row["step"] == step:
            file.write(json.dumps(row)[:15])
            file.flush()
            raise Crash
        write_row(file, row)

    with monkeypatch.context() as patch:
        patch.setattr(train_module, "write_row", torn_at_step)
        with pytest.raises(Crash):
            train(config, out, progress=False)


def test_a_truncated_checkpoint_falls_back_to_the_previous_one_and_none_is_one_error(tmp_path, monkeypatch, capsys):
    train(tiny(), tmp_path / "whole", progress=False)
    out = tmp_path / "cut"
    crash_at_step(monkeypatch, tiny(), out, 8)  # checkpoints at steps 3 (ckpt.prev.pt) and 6 (ckpt.pt)
    data = (out / "ckpt.pt").read_bytes()
    (out / "ckpt.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(SystemExit):  # bytes pdmm-bridge did not write are never replaced, a bad checkpoint's too
        main([*ARGV, "--out", str(out), "--resume"])
    assert "ckpt.pt, which pdmm-bridge did not write" in capsys.readouterr().err
    forge(out, "ckpt.pt")  # a marker that vouches for them: the resume's own checks fall back past it
    assert main([*ARGV, "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "ckpt.pt" in err and "truncated" in err and "ckpt.prev.pt (step 3)" in err
    assert_same_bits(out, tmp_path / "whole")
    for name in ("ckpt.pt", "ckpt.prev.pt"):
        (out / name).write_bytes(data[:100])
    forge(out, "ckpt.pt", "ckpt.prev.pt")
    with pytest.raises(SystemExit) as exit:
        main([*ARGV, "--out", str(out), "--resume"])
    err = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and err.count("\n") == 0 and "no checkpoint can be used" in err
    assert "ckpt.pt" in err and "ckpt.prev.pt" in err and "Traceback" not in err


def test_a_torn_metrics_line_is_skipped_by_readers_and_repaired_by_resume(tmp_path, monkeypatch, capsys):
    train(tiny(), tmp_path / "whole", progress=False)
    out = tmp_path / "torn"
    crash_at_step(monkeypatch, tiny(), out, 8)
    assert not (out / "metrics.jsonl").read_text().endswith("\n")
    with pytest.warns(TornLine, match="line 8 is cut short"):
        assert [row["step"] for row in load_run(out).metrics] == list(range(1, 8))
    with pytest.warns(TornLine, match="line 8 is cut short"):
        assert main(["plot", str(out), "--metric", "train_loss", "--out", str(tmp_path / "loss.png")]) == 0
    train(tiny(), out, resume=True, progress=False)
    assert (out / "metrics.jsonl").read_text().count("\n") == 10
    assert_same_bits(out, tmp_path / "whole")


@pytest.mark.parametrize("finished", [True, False])
def test_extend_continues_from_the_checkpoint_to_the_new_max_iters(tmp_path, monkeypatch, finished):
    out = tmp_path / "run"
    if finished:
        train(tiny(), out, progress=False)
    else:
        crash_at_step(monkeypatch, tiny(), out, 8)
    before = [row for row in load_run(out).metrics if row["step"] <= (10 if finished else 6)]
    assert main([*ARGV, "--out", str(out), "--extend", "--set=train.max_iters=16"]) == 0
    rows = load_run(out).metrics
    assert [row["step"] for row in rows] == list(range(1, 17)) and rows[: len(before)] == before
    assert rows[len(before)]["lr"] == learning_rate(len(before), tiny("train.max_iters=16").train)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["extended"][0]["at_step"] == len(before)
    assert meta["extended"][0]["train.max_iters"] == {"from": 10, "to": 16}
    assert json.loads((out / "summary.json").read_text())["steps"] == 16
    assert load_checkpoint(out / "ckpt.pt", ("state",))["state"]["step"] == 16


def test_extend_refuses_other_changes_and_a_lower_max_iters(tmp_path, capsys):
    assert main([*ARGV, "--out", str(tmp_path / "run")]) == 0
    for setting, message in [
        ("model.d_model=32", "--extend changes only"),
        ("train.max_iters=8", "above the run's 10"),
    ]:
        with pytest.raises(SystemExit):
            main([*ARGV, "--out", str(tmp_path / "run"), "--extend", f"--set={setting}"])
        err = capsys.readouterr().err.strip()
        assert message in err and err.count("\n") == 0
    with pytest.raises(SystemExit):
        main([*ARGV, "--out", str(tmp_path / "run"), "--resume", "--set=train.max_iters=16"])
    assert "pass --extend" in capsys.readouterr().err


SWEEP = [
    "sweep",
    CONFIG,
    *[f"--set={s}" for s in TINY],
    "--grid",
    "train.plateau_metric=val_loss,val_los,val_acc",
    "--no-progress",
]  # val_los is no metric of the task: that run fails when it starts (a config error is refused before the sweep)


class KillAtRename:
    """Counts the renames onto files called `name` and kills the command just before the `at`-th."""

    def __init__(self, monkeypatch, name, at=None):
        self.name, self.at, self.calls, self.replace = name, at, 0, os.replace
        monkeypatch.setattr(os, "replace", self.rename)

    def rename(self, src, dst, **dir_fds):
        self.calls += Path(dst).name == self.name
        if self.calls == self.at and Path(dst).name == self.name:
            raise Crash
        return self.replace(src, dst, **dir_fds)


def test_a_sweep_killed_at_every_write_of_sweep_json_resumes_without_redoing_or_forgetting(
    tmp_path, monkeypatch, capsys
):
    with monkeypatch.context() as patch:
        counter = KillAtRename(patch, "sweep.json")
        assert main([*SWEEP, "--out", str(tmp_path / "whole")]) == 1
    assert counter.calls == 4  # at the start and after each of the three runs
    for at in range(1, counter.calls + 1):
        out = tmp_path / f"killed-{at}"
        with monkeypatch.context() as patch:
            KillAtRename(patch, "sweep.json", at)
            with pytest.raises(Crash):
                main([*SWEEP, "--out", str(out)])
        finished = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/summary.json")}
        capsys.readouterr()
        assert main([*SWEEP, "--out", str(out)]) == 1
        assert capsys.readouterr().out.count("finished earlier, skipped") == len(finished)
        assert {name: (out / name / "summary.json").stat().st_mtime_ns for name in finished} == finished
        statuses = [(r["status"], bool(r["error"])) for r in json.loads((out / "sweep.json").read_text())["runs"]]
        assert statuses == [("finished", False), ("failed", True), ("finished", False)]
        for run in ("plateau_metric=val_loss,seed=0", "plateau_metric=val_acc,seed=0"):
            assert_same_bits(out / run, tmp_path / "whole" / run)


def test_a_sweep_killed_mid_run_resumes_it_and_keeps_the_failure_record(tmp_path, monkeypatch, capsys):
    assert main([*SWEEP, "--out", str(tmp_path / "whole")]) == 1
    out = tmp_path / "killed"
    write_row = train_module.write_row

    def kill_in_third_run(file, row):
        if "plateau_metric=val_acc" in file.name and row["step"] == 8:
            raise Crash
        write_row(file, row)

    with monkeypatch.context() as patch:
        patch.setattr(train_module, "write_row", kill_in_third_run)
        with pytest.raises(Crash):
            main([*SWEEP, "--out", str(out)])
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["finished", "failed", "pending"] and "val_los" in runs[1]["error"]
    assert main([*SWEEP, "--out", str(out)]) == 1
    assert [r["status"] for r in json.loads((out / "sweep.json").read_text())["runs"]] == [
        "finished",
        "failed",
        "finished",
    ]
    assert_same_bits(out / "plateau_metric=val_acc,seed=0", tmp_path / "whole" / "plateau_metric=val_acc,seed=0")


def test_a_full_disk_is_one_error_line_and_the_last_good_checkpoint_stays(tmp_path, monkeypatch, capsys):
    train(tiny(), tmp_path / "whole", progress=False)
    out = tmp_path / "full"
    real_open, saved = open, []

    def disk_full_after_two_checkpoints(path, *args, **kwargs):
        if str(path).endswith("ckpt.pt.tmp"):
            saved.append(path)
            if len(saved) > 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(descriptors, "open", disk_full_after_two_checkpoints, raising=False)
        with pytest.raises(SystemExit) as exit:
            main([*ARGV, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert exit.value.code == 1 and err.count("\n") == 0 and "Traceback" not in err  # a runtime failure
    assert "ckpt.pt" in err and "No space left on device" in err and "last good checkpoint is intact" in err
    assert load_checkpoint(out / "ckpt.pt", ("state",))["state"]["step"] == 6 and not list(out.glob("*.tmp"))
    assert main([*ARGV, "--out", str(out), "--resume"]) == 0
    assert_same_bits(out, tmp_path / "whole")


def test_a_file_size_limit_is_one_error_line_and_the_run_resumes_after(tmp_path):
    out = tmp_path / "run"
    subprocess.run([*PYTHON, *ARGV, "--out", str(out)], check=True, capture_output=True, env=ENV)
    limit = (out / "ckpt.pt").stat().st_size // 2

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    extend = [*PYTHON, *ARGV, "--out", str(out), "--extend", "--set=train.max_iters=16"]
    limited = subprocess.run(extend, capture_output=True, text=True, env=ENV, preexec_fn=small_files)
    assert limited.returncode == 1 and "Traceback" not in limited.stderr
    assert (
        limited.stderr.strip().count("\n") == 0 and "ckpt.pt" in limited.stderr and "File too large" in limited.stderr
    )
    assert load_checkpoint(out / "ckpt.pt", ("state",))["state"]["step"] == 10
    assert (
        subprocess.run(
            [*PYTHON, *ARGV, "--out", str(out), "--resume", "--set=train.max_iters=16"], capture_output=True, env=ENV
        ).returncode
        == 0
    )
    assert [row["step"] for row in load_run(out).metrics] == list(range(1, 17))
