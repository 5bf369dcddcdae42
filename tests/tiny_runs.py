"""What the run-directory tests share: `Crash` and `Faults`, simulated kills at a run's write points; a modular
training run of about a second (checkpoints at steps 2 and 4); `fails`, which runs the command line expecting one
error line; `relink_after_step`, which moves a run's directory mid-run and links its name elsewhere; `forge`, which
records a crafted file in a run's marker as a hostile sender can (the marker is plain JSON); and `stub_plots`,
which makes a run's curves.png a stub file."""

import hashlib
import json
import os
from pathlib import Path

import pytest

import experiments.rundir as rundir
import experiments.train as train_module
from experiments.cli import main
from experiments.rundir import MARKER

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
MODULAR = str(CONFIGS / "modular97.toml")
TINY = [
    "task.p=5",
    "model.d_model=8",
    "model.n_head=2",
    "train.max_iters=4",
    "train.eval_interval=2",
    "train.checkpoint_interval=2",
    "train.eval_iters=1",
    "train.patience=5",
]
TRAIN = ["train", MODULAR, *[f"--set={s}" for s in TINY], "--no-progress"]


def fails(capsys, argv, code=2):
    """Run the CLI on argv, expecting exit `code` and one error line; returns the line."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit.value.code == code and "\n" not in err and "Traceback" not in err, err
    return err


def forge(directory: Path, *names: str) -> None:
    """Record the present bytes of `names` in `directory`'s marker, as a hostile sender does: ownership then
    holds, and what a command checks beyond it must refuse the crafted files."""
    marker = json.loads((directory / MARKER).read_text())
    for name in names:
        data = (directory / name).read_bytes()
        marker["files"][name] = [{"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
    (directory / MARKER).write_text(json.dumps(marker))


def stub_plots(monkeypatch) -> None:
    """curves.png as a stub file written through rundir: drawing it is most of a tiny run's time and no part of
    what the run-directory tests check (use as `quick_plots = pytest.fixture(autouse=True)(stub_plots)`)."""
    monkeypatch.setattr(
        train_module, "plot_training", lambda rows, path, title, best_step=None: rundir.write_file(path, "curves")
    )


def relink_after_step(monkeypatch, out: Path, moved: Path, elsewhere: Path, step: int = 3) -> None:
    """Make the next training run rename its directory `out` to `moved`, and put a link to `elsewhere` at `out`,
    right after it writes the metrics row of `step` (a writer by path would then land in `elsewhere`)."""
    write_row = train_module.write_row

    def relink(file, row):
        write_row(file, row)
        if row["step"] == step:
            out.rename(moved)
            out.symlink_to(elsewhere, target_is_directory=True)

    monkeypatch.setattr(train_module, "write_row", relink)


class Crash(BaseException):
    """A simulated kill: no handler in the code under test catches it (only `finally` blocks run)."""


class Faults:
    """Counts a run's write points (os.replace, os.fsync, metrics rows) and kills the run at the `at`-th.

    A kill at a rename or fsync happens just before it; a kill at a metrics row leaves half the row on disk."""

    def __init__(self, monkeypatch, at=None):
        self.calls, self.at = 0, at
        replace, fsync, write_row = os.replace, os.fsync, train_module.write_row
        monkeypatch.setattr(os, "replace", lambda *args, **kwargs: self.point(replace, *args, **kwargs))
        monkeypatch.setattr(os, "fsync", lambda fd: self.point(fsync, fd))
        monkeypatch.setattr(train_module, "write_row", lambda file, row: self.point(write_row, file, row))

    def point(self, real, *args, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            if real.__name__ == "write_row":
                file, row = args
                file.write(json.dumps(row)[:20])  # a torn line, as SIGKILL mid-write leaves
                file.flush()
            raise Crash(f"killed at write point {self.at}")
        return real(*args, **kwargs)
