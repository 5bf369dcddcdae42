"""experiments.frames: the committed linear_char runs (docs/repro) as DataFrames, checked against the files
themselves, the report's table and a resumed run's repeated rows."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from extras import needs_extra

from experiments.errors import UsageError
from experiments.frames import metrics_frame, summary_frame
from experiments.runs import read_metrics

needs_extra("frames")
SWEEP = Path(__file__).resolve().parents[1] / "docs" / "repro" / "linear_char"


def test_every_metrics_row_of_a_sweep_is_a_row():
    frame = metrics_frame(SWEEP)
    runs = sorted(p for p in SWEEP.iterdir() if (p / "metrics.jsonl").is_file())
    assert frame["run"].nunique() == len(runs) == 30
    assert {"model.kernel", "train.block_size", "seed", "step", "train_loss", "val_loss"} <= set(frame.columns)
    for run in runs[:3]:
        rows = read_metrics(run / "metrics.jsonl")
        mine = frame[frame["run"] == run.name]
        assert len(mine) == len(rows)
        np.testing.assert_array_equal(mine["train_loss"], [row["train_loss"] for row in rows])
        assert set(mine["seed"]) == {int(run.name.rsplit("seed=", 1)[1])}


def test_the_summary_frame_holds_each_runs_summary_and_gives_the_reports_means():
    frame = summary_frame(SWEEP)
    assert len(frame) == 30 and frame["finished"].all()
    run = SWEEP / frame["run"].iloc[0]
    summary = json.loads((run / "summary.json").read_text())
    assert frame["final.val_loss"].iloc[0] == summary["final"]["val_loss"]
    assert frame["seconds_per_step"].iloc[0] == summary["seconds_per_step"]
    means = frame.groupby(["model.kernel", "train.block_size"])["final.val_loss"].mean()
    assert round(means["softmax", 64], 3) == 2.359 and round(means["linear", 64], 3) == 2.383  # docs/RESULTS.md


def test_a_step_logged_twice_keeps_its_last_row(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(next(p for p in SWEEP.iterdir() if p.is_dir()), run)
    rows = read_metrics(run / "metrics.jsonl")
    again = {**rows[-1], "train_loss": 99.0}  # a resumed run re-logs the steps after its checkpoint
    with open(run / "metrics.jsonl", "a") as file:
        file.write(json.dumps(again) + "\n")
    frame = metrics_frame(run, config="all")
    assert len(frame) == len(rows) and frame["train_loss"].iloc[-1] == 99.0
    assert "model.n_layer" in frame.columns


def test_what_is_not_a_run_is_refused(tmp_path):
    with pytest.raises(UsageError, match="not a run directory"):
        metrics_frame(tmp_path)
    with pytest.raises(ValueError, match="config must be 'differing' or 'all'"):
        summary_frame(SWEEP, config="some")
