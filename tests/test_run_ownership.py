"""Output directories are owned by content, written through one descriptor and held by one command
(docs/guide/runs.md, "Output directories: the marker, `--force` and the lock").

Each test reproduces a defect found by attacking a fresh clone: --force trusting a marker that lists the user's
files, a planted marker letting compare / learn-pdmm / network-sweep overwrite the user's outputs, solve --force
replacing files no marker lists, a renamed-and-linked run directory receiving the checkpoint elsewhere, and two
commands writing one directory at once. The reference is the user's files themselves: their bytes before and
after the command.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_runs import MODULAR, TINY, TRAIN, fails, relink_after_step, stub_plots

import experiments.rundir as rundir
import experiments.train as train_module
from experiments.checkpoints import load_checkpoint
from experiments.cli import main
from experiments.config import load_config
from experiments.errors import UsageError
from experiments.rundir import LOCK, MARKER
from experiments.runs import read_metrics
from experiments.train import train

ROOT = Path(__file__).resolve().parents[1]
PYTHON = [sys.executable, "-m", "experiments"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
USER_FILES = {"thesis.tex": b"years of work", "data/x.csv": b"1,2\n", ".git/HEAD": b"ref: refs/heads/main\n"}


quick_plots = pytest.fixture(autouse=True)(stub_plots)


def plant(directory: Path, files: dict) -> None:
    """The user's `files` ({relative path: bytes}) in `directory`."""
    for rel, data in files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_bytes(data)


def untouched(directory: Path, files: dict) -> bool:
    return all((directory / rel).read_bytes() == data for rel, data in files.items())


def format_1(command: str, *paths: str) -> str:
    """A marker as pdmm-bridge 0.5 wrote it: the command, then the paths it claims to have written."""
    return "\n".join([command, *paths]) + "\n"


def format_2(command: str, *paths: str) -> str:
    """A forged marker of this version's format recording `paths` with contents the user's files do not have."""
    forged = [{"size": 13, "sha256": hashlib.sha256(b"something else").hexdigest()}]
    files = {path: forged for path in paths if not path.endswith("/")}  # this format records files only
    return json.dumps({"pdmm-bridge-output": 2, "command": command, "files": files})


MARKERS = {"format 1": format_1, "format 2": format_2}


@pytest.mark.parametrize("kind", MARKERS)
def test_force_keeps_what_a_planted_marker_lists(tmp_path, capsys, kind):
    out = tmp_path / "received"
    plant(out, USER_FILES)
    (out / MARKER).write_text(MARKERS[kind]("train", "thesis.tex", "data/", "data/x.csv", ".git/", ".git/HEAD"))
    err = fails(capsys, [*TRAIN, "--out", str(out), "--force"])
    assert "thesis.tex" in err and "data/" in err and ".git/" in err
    assert untouched(out, USER_FILES) and not (out / "config.toml").exists() and not (out / LOCK).exists()


def test_force_keeps_a_file_the_project_wrote_but_the_user_changed(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TRAIN, "--out", str(out)]) == 0
    edited = (out / "config.toml").read_bytes() + b"# my notes\n"
    (out / "config.toml").write_bytes(edited)
    assert "config.toml" in fails(capsys, [*TRAIN, "--out", str(out), "--force"])
    assert (out / "config.toml").read_bytes() == edited
    (out / "config.toml").unlink()  # what is left is the project's own: --force starts the run again
    assert main([*TRAIN, "--out", str(out), "--force"]) == 0 and (out / "config.toml").is_file()


COMMANDS = {  # a command family, its cheapest run, and the output a planted marker used to let it overwrite
    "compare": (["compare", "--from", str(ROOT / "docs" / "compare")], "compare.md"),
    "learn-pdmm": (
        ["learn-pdmm", "--layers", "3", "--train-graphs", "1", "--test-graphs", "1", "--steps", "2"],
        "results.md",
    ),
    "network-sweep": (["network-sweep", "--nodes", "8", "--seeds", "2", "--iters", "50"], "network_sweep.md"),
}


@pytest.mark.parametrize("kind", MARKERS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_planted_marker_does_not_let_a_command_overwrite_the_users_outputs(tmp_path, capsys, command, kind):
    argv, output = COMMANDS[command]
    out = tmp_path / "mine"
    mine = {output: b"# my own notes\n", "compare.json": b'{"mine": true}'}
    plant(out, mine)
    (out / MARKER).write_text(MARKERS[kind](command, *mine))
    fails(capsys, [*argv, "--out", str(out)])  # format 1: not its own directory; format 2: compare.md not its own
    assert untouched(out, mine)
    assert output in fails(capsys, [*argv, "--out", str(out), "--force"])
    assert untouched(out, mine)


def test_solve_force_keeps_the_users_files_at_its_output_names(tmp_path, capsys):
    out = tmp_path / "mine"
    mine = {name: f"my {name}\n".encode() for name in ("config.json", "history.csv", "result.npz", "convergence.png")}
    plant(out, mine)
    argv = ["solve", "--no-progress", "--nodes", "15", "--out", str(out), "--force"]
    err = fails(capsys, argv)
    assert all(name in err for name in mine) and untouched(out, mine)
    (out / MARKER).write_text(format_1("solve", *mine))
    assert "config.json" in fails(capsys, argv) and untouched(out, mine)


def test_solve_force_replaces_its_own_outputs(tmp_path):
    out = tmp_path / "solve"
    assert main(["solve", "--no-progress", "--nodes", "15", "--out", str(out)]) == 0
    (out / "notes.txt").write_text("mine")
    before = (out / "config.json").stat().st_mtime_ns
    assert main(["solve", "--no-progress", "--nodes", "15", "--iters", "7", "--out", str(out), "--force"]) == 0
    assert (out / "config.json").stat().st_mtime_ns != before and (out / "notes.txt").read_text() == "mine"


def test_a_sweep_member_with_a_planted_marker_keeps_the_users_files(tmp_path, capsys):
    out = tmp_path / "sweep"
    member = out / "seed=0"
    plant(member, USER_FILES)
    (member / MARKER).write_text(format_1("train", "thesis.tex", "data/", "data/x.csv", ".git/", ".git/HEAD"))
    argv = ["sweep", MODULAR, *[f"--set={s}" for s in TINY], "--seeds", "0", "--no-progress", "--out", str(out)]
    assert main([*argv, "--force"]) == 1  # the member fails, and says why
    assert "thesis.tex" in capsys.readouterr().err
    assert untouched(member, USER_FILES) and json.loads((out / "sweep.json").read_text())["runs"][0]["status"] == (
        "failed"
    )


def test_renaming_the_run_directory_mid_run_and_linking_its_name_elsewhere_redirects_no_write(tmp_path, monkeypatch):
    out, moved, elsewhere = tmp_path / "run", tmp_path / "moved", tmp_path / "elsewhere"
    elsewhere.mkdir()
    relink_after_step(monkeypatch, out, moved, elsewhere)
    config = load_config(MODULAR, [*TINY, "train.max_iters=8", "train.checkpoint_interval=3"])
    summary = train(config, out, progress=False)
    assert os.listdir(elsewhere) == [] and out.is_symlink()
    assert summary["steps"] == 8 and load_checkpoint(moved / "ckpt.pt", ("state",))["state"]["step"] == 8
    assert [row["step"] for row in read_metrics(moved / "metrics.jsonl")] == list(range(1, 9))
    assert (moved / "summary.json").is_file() and (moved / "curves.png").is_file()


def wait_for(condition, process, what):
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"{what} never happened (exit status {process.poll()})")


def rows_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


LONG = ["--set=train.max_iters=100000", "--set=train.eval_interval=100000", "--set=train.checkpoint_interval=10"]


@pytest.fixture
def never_trains(monkeypatch):
    """A command of this process that gets past the lock fails at once instead of training for long."""

    def refuse(*args, **kwargs):
        raise AssertionError("a second command got past the lock and began to train")

    monkeypatch.setattr(train_module, "run_steps", refuse)


def stopped(first):
    """Ctrl-C to the first command once the second was refused: it checkpoints its last whole step and exits 130."""
    assert first.poll() is None  # the refusals came while it ran
    first.send_signal(signal.SIGINT)
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 130 and "Traceback" not in stderr, stderr


def whole(run: Path) -> None:
    """The run's rows are its own, each step once and in order, up to the checkpoint that counts them all."""
    steps = [row["step"] for row in read_metrics(run / "metrics.jsonl")]
    state = load_checkpoint(run / "ckpt.pt", ("state",))["state"]
    assert steps == list(range(1, state["step"] + 1))
    assert state["metrics_bytes"] == (run / "metrics.jsonl").stat().st_size


def test_a_second_train_on_a_run_directory_in_use_fails_naming_the_holder(tmp_path, capsys, never_trains):
    out = tmp_path / "run"
    argv = [*TRAIN, *LONG]
    first = subprocess.Popen(
        [*PYTHON, *argv, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    try:
        wait_for(lambda: rows_in(out / "metrics.jsonl") >= 20 and (out / "ckpt.pt").is_file(), first, "20 rows")
        for extra in ([], ["--force"], ["--resume"]):
            err = fails(capsys, [*argv, "--out", str(out), *extra])
            assert f"in use by pdmm-bridge train (pid {first.pid} on " in err, err
    finally:
        stopped(first)
    whole(out)
    assert not (out / LOCK).exists()


def test_a_second_sweep_on_a_sweep_directory_in_use_fails_naming_the_holder(tmp_path, capsys, never_trains):
    out = tmp_path / "sweep"
    argv = ["sweep", MODULAR, *[f"--set={s}" for s in TINY], *LONG, "--seeds", "0,1", "--no-progress"]
    first = subprocess.Popen(
        [*PYTHON, *argv, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    try:
        wait_for(lambda: (out / "seed=0" / "ckpt.pt").is_file(), first, "the first member's checkpoint")
        err = fails(capsys, [*argv, "--out", str(out)])
        assert f"in use by pdmm-bridge sweep (pid {first.pid} on " in err, err
    finally:
        stopped(first)
    whole(out / "seed=0")
    assert [run["status"] for run in json.loads((out / "sweep.json").read_text())["runs"]] == ["pending"] * 2


BAD_MARKERS = {
    "a path out of the directory": json.dumps(
        {"pdmm-bridge-output": 2, "command": "train", "files": {"../outside": [{"size": 1, "sha256": "0" * 64}]}}
    ),
    "an absolute path": json.dumps(
        {"pdmm-bridge-output": 2, "command": "train", "files": {"/etc/passwd": [{"size": 1, "sha256": "0" * 64}]}}
    ),
    "a content without a hash": json.dumps(
        {"pdmm-bridge-output": 2, "command": "train", "files": {"thesis.tex": [{"size": 13}]}}
    ),
    "broken JSON": '{"pdmm-bridge-output": 2, "command": ',
    "JSON nested too deeply": "{" + '"a": [' * 100_000,
}


@pytest.mark.parametrize("marker", BAD_MARKERS)
def test_a_malformed_marker_is_one_line_and_nothing_is_removed(tmp_path, capsys, marker):
    out = tmp_path / "received"
    plant(out, USER_FILES)
    (out / MARKER).write_text(BAD_MARKERS[marker])
    assert "is not a pdmm-bridge marker" in fails(capsys, [*TRAIN, "--out", str(out), "--force"])
    assert untouched(out, USER_FILES)


def test_a_marker_over_the_size_limit_is_refused_unread(tmp_path, capsys, monkeypatch):
    out = tmp_path / "received"
    plant(out, USER_FILES)
    with open(out / MARKER, "wb") as marker:
        marker.truncate(rundir.MARKER_BYTES + 1)  # sparse: nothing to read, and nothing is

    def no_reading(*args, **kwargs):
        raise AssertionError("the marker was read")

    monkeypatch.setattr(rundir.RunDirectory, "read", no_reading)
    assert "more than a marker holds" in fails(capsys, [*TRAIN, "--out", str(out), "--force"])
    assert untouched(out, USER_FILES)


def test_a_lock_file_the_project_did_not_write_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TRAIN, "--out", str(out)]) == 0 and not (out / LOCK).exists()
    (out / LOCK).write_text("my notes\n")
    assert LOCK in fails(capsys, [*TRAIN, "--out", str(out), "--force"])
    assert (out / LOCK).read_text() == "my notes\n"


def test_a_write_never_replaces_a_file_the_claimed_directory_does_not_own(tmp_path):
    out = rundir.claim(tmp_path / "out", "solve", writes=("config.json",))
    try:
        rundir.write_file(out / "config.json", "{}")
        (out / "history.csv").write_text("mine")  # appears after the claim: no check at the start saw it
        with pytest.raises(UsageError, match="history.csv was not written by pdmm-bridge"):
            rundir.write_file(out / "history.csv", "ours")
        with pytest.raises(UsageError, match="history.csv was not written by pdmm-bridge"):
            rundir.remove(out / "history.csv")
        rundir.write_file(out / "config.json", "{ }")  # its own file: replaced
    finally:
        rundir.release(out)
    assert (out / "history.csv").read_text() == "mine" and (out / "config.json").read_text() == "{ }"
    assert json.loads((out / MARKER).read_text())["files"]["config.json"] == [
        {"size": 3, "sha256": hashlib.sha256(b"{ }").hexdigest()}
    ]
