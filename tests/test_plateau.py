"""Training until validation stops improving: the plateau rule (bridge.fitting; train.patience, min_delta,
plateau_metric), the same rule in the comparison's fits (adam_keep_best), best.pt, summary.json's stopped_by and
best_step, and resume after a kill."""

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_runs import Crash, Faults, stub_plots  # Crash, Faults: the same simulated kills at the run's write points

from bridge.fitting import FitLog, adam_keep_best, plateau
from experiments.checkpoints import best_weights, has_checkpoint, load_checkpoint
from experiments.cli import main
from experiments.config import load_config
from experiments.plots import plot_training
from experiments.runs import load_run
from experiments.train import train

CONFIG = str(Path(__file__).resolve().parents[1] / "experiments" / "configs" / "modular97.toml")
TINY = [
    "task.p=11",
    "task.train_fraction=0.8",
    "model.n_layer=1",
    "model.d_model=8",
    "model.n_head=2",
    "train.lr=1e-2",
    "train.min_lr=1e-2",  # constant after warm-up: the schedule does not depend on max_iters
    "train.warmup_iters=2",
    "train.eval_interval=2",
    "train.checkpoint_interval=3",
    "train.max_iters=100",
    "train.patience=3",
]
ARGV = ["train", CONFIG, *[f"--set={s}" for s in TINY], "--no-progress"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TIMING = ("wall_seconds", "seconds_per_step", "tokens_per_second")  # what differs between identical runs


quick_plots = pytest.fixture(autouse=True)(stub_plots)  # test_curves_mark_the_best_step draws one


def tiny(*extra):
    return load_config(CONFIG, [*TINY, *extra])


def evaluations(run):
    """(step, val_loss) of the evaluation rows of run directory `run`."""
    return [(row["step"], row["val_loss"]) for row in load_run(run).metrics if "val_loss" in row]


def weights(path):
    return load_checkpoint(path)["model"]


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def summary(run, drop=TIMING):
    return {k: v for k, v in json.loads((Path(run) / "summary.json").read_text()).items() if k not in drop}


def assert_same_run(a, b):
    """Every metric row but its time, the summary but its timings, ckpt.pt's weights and plateau state, best.pt."""
    strip = [{k: v for k, v in row.items() if k != "time"} for row in load_run(a).metrics]
    assert strip == [{k: v for k, v in row.items() if k != "time"} for row in load_run(b).metrics]
    assert summary(a) == summary(b)
    ckpt_a, ckpt_b = load_checkpoint(Path(a) / "ckpt.pt"), load_checkpoint(Path(b) / "ckpt.pt")
    assert same_weights(ckpt_a["model"], ckpt_b["model"])
    plateau_state = ("step", "stopped", "best_value", "best_step", "since_best")
    assert {k: ckpt_a["state"][k] for k in plateau_state} == {k: ckpt_b["state"][k] for k in plateau_state}
    best_a, best_b = load_checkpoint(Path(a) / "best.pt"), load_checkpoint(Path(b) / "best.pt")
    assert best_a["step"] == best_b["step"] and same_weights(best_a["model"], best_b["model"])


@pytest.mark.parametrize(
    "values,patience,min_delta,expected",
    [
        ([], 2, 0.0, (False, None)),
        ([3.0, 2.0, 1.0], 1, 0.0, (False, 2)),  # every evaluation improves
        ([1.0, 2.0, 3.0, 4.0], 0, 0.0, (False, 0)),  # patience 0: the rule is off
        ([1.0, 2.0, 3.0, 0.5], 2, 0.0, (True, 0)),  # stops at the second without improvement
        ([1.0, 1.0, 1.0], 2, 0.0, (True, 0)),  # an equal value is no improvement
        ([1.0, 1.0, 1.0], 3, 0.0, (False, 0)),
        ([1.0, 2.0, 0.9, 2.0, 0.8, 2.0], 2, 0.0, (False, 4)),  # an improvement restarts the count
        ([1.0, 2.0, 0.9, 2.0, 2.0, 0.1], 2, 0.0, (True, 2)),  # ... which counts evaluations in a row
        ([1.0, 0.995, 0.991, 0.9905], 3, 0.01, (True, 0)),  # less than 1 % below the best does not count ...
        ([1.0, 0.995, 0.991, 0.989], 3, 0.01, (False, 3)),  # ... measured from the best, not the last value
        ([1.0, 0.5, 0.4999], 1, 0.01, (True, 1)),  # relative to the new best
    ],
)
def test_the_rule_for_lower_is_better_metrics(values, patience, min_delta, expected):
    assert plateau(values, patience, min_delta) == expected


@pytest.mark.parametrize(
    "values,patience,min_delta,expected",
    [
        ([0.2, 0.5, 0.4, 0.5, 0.6], 2, 0.0, (True, 1)),  # an equal accuracy is no improvement
        ([0.2, 0.5, 0.4, 0.6, 0.5], 2, 0.0, (False, 3)),
        ([0.5, 0.504, 0.5049], 2, 0.01, (True, 0)),  # not 1 % above 0.5
        ([0.5, 0.504, 0.506], 2, 0.01, (False, 2)),
        ([0.5, 0.1, 0.2], 2, 0.0, (True, 0)),  # lower values never improve
    ],
)
def test_the_rule_for_higher_is_better_metrics(values, patience, min_delta, expected):
    assert plateau(values, patience, min_delta, lower=False) == expected


def fit_log_before_the_shared_rule(losses, validation, steps, patience, min_delta):
    """The FitLog adam_keep_best returned before it applied bridge.fitting's plateau rule: its loop as it was, with
    the losses given in advance (`validation` None: no validation loss) and the parameters left out."""
    log, best, since, previous = FitLog(), None, 0, 0
    for step in range(steps + 1):
        log.losses.append(losses[step])
        if validation is not None:
            log.validation.append(validation[step])
        watched = log.losses if validation is None else log.validation
        if not (math.isfinite(log.losses[-1]) and math.isfinite(watched[-1])):
            log.stopped_by = "not finite"
            break
        improved = best is None or watched[-1] < watched[log.best_step]
        if improved:
            best, log.best_step = step, step
        gained = improved and (step == 0 or watched[-1] < watched[previous] - min_delta * abs(watched[previous]))
        previous, since = (step, 0) if gained else (previous, since + 1)
        if validation is not None and since >= patience:
            log.stopped_by = "plateau"
            break
        if step == steps:
            break
    return log


class Scripted(torch.nn.Module):
    """A model whose training loss is the next of `losses` (float64, exactly) and whose gradient is 0."""

    def __init__(self, losses):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
        self.losses = iter(losses)

    def forward(self):
        return next(self.losses) * (1 + self.weight * 0)  # times 1: exactly the loss, a -0.0 included


def scripted_fit(losses, validation, steps, patience, min_delta):
    """adam_keep_best's FitLog when the training and validation losses before step k are losses[k], validation[k]."""
    model, held = Scripted(losses), iter(validation or [])
    return adam_keep_best(
        model, model, steps, 0.1, None if validation is None else lambda: next(held), patience, min_delta
    )


FIRST = st.one_of(st.sampled_from([-1.0, 0.0, 1.0]), st.floats(-3.0, 3.0))
MOVES = st.lists(  # each next value from an earlier one (index modulo the values so far)
    st.tuples(st.integers(0, 29), st.sampled_from(["tie", "edge", "below", "above", "new"]), st.floats(-3.0, 3.0)),
    max_size=29,
)
ENDS = st.sampled_from([[], [math.nan], [math.inf], [-math.inf]])  # a fit that stops being finite


def losses_from(first, moves, min_delta):
    """Values that repeat earlier ones ("tie"), sit exactly on the rule's edge x - |x| min_delta of an earlier x, or
    one float below or above it, or are new."""
    values = [first]
    for index, how, new in moves:
        x = values[index % len(values)]
        edge = x - abs(x) * min_delta
        near = {"below": math.nextafter(edge, -math.inf), "above": math.nextafter(edge, math.inf)}
        values.append({"tie": x, "edge": edge, "new": new, **near}[how])
    return values


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    first=FIRST,
    moves=MOVES,
    end=ENDS,
    patience=st.integers(1, 6),
    min_delta=st.sampled_from([0.0, 1e-3, 0.01, 0.5]),
    validated=st.booleans(),
    nan_in_training=st.booleans(),
)
def test_fits_stop_and_keep_as_before_the_shared_rule(
    first, moves, end, patience, min_delta, validated, nan_in_training
):
    """Random loss sequences with ties, plateaus, values on the rule's edge and a non-finite end: adam_keep_best on
    bridge.fitting's plateau rule gives the FitLog (losses, validation losses, best step, stop reason) of its own
    counter before, and stops where `plateau` says the rule stops."""
    values = losses_from(first, moves, min_delta)
    sequence, steps = [*values, *end], len(values) + len(end) - 1
    if not validated:  # the training loss is watched, and every step runs
        losses, validation = sequence, None
    elif nan_in_training:  # the training loss stops being finite, the validation loss does not
        losses, validation = [*[0.0] * len(values), *end], [*values, *[0.0] * len(end)]
    else:
        losses, validation = [0.0] * len(sequence), sequence
    new = scripted_fit(losses, validation, steps, patience, min_delta)
    old = fit_log_before_the_shared_rule(losses, validation, steps, patience, min_delta)
    assert repr(new) == repr(old)  # every float exactly (repr round-trips), and a NaN equal to a NaN
    if validated and new.stopped_by == "plateau":
        assert (
            plateau(new.validation, patience, min_delta)[0] and not plateau(new.validation[:-1], patience, min_delta)[0]
        )


def test_patience_zero_never_stops_a_fit():
    """Patience 0 is "never", in fits as in training: before, a fit with patience 0 stopped at its first step."""
    values = [3.0, 2.0, 2.0, 2.0, 1.0]
    log = scripted_fit([0.0] * 5, values, 4, 0, 0.0)
    assert (log.stopped_by, log.validation, log.best_step) == ("cap", values, 4)


@pytest.mark.parametrize("min_delta", [0.0, 0.002])
def test_a_run_stops_at_the_plateau_and_best_pt_holds_the_best_evaluations_weights(tmp_path, min_delta):
    out = tmp_path / "run"
    result = train(tiny(f"train.min_delta={min_delta}"), out, progress=False)
    steps, values = zip(*evaluations(out), strict=False)
    stop, best = plateau(values, 3, min_delta)
    assert stop and not plateau(values[:-1], 3, min_delta)[0]  # it ran until the evaluation that ends the rule
    assert best == len(values) - 1 - 3  # ... three evaluations after the best
    assert all(value >= values[best] * (1 - min_delta) for value in values[best + 1 :])
    assert result["stopped_by"] == "plateau" and result["stopped_early"]
    assert result["steps"] == steps[-1] < 100 and result["best_step"] == steps[best]
    assert load_checkpoint(out / "best.pt", ("step",))["step"] == steps[best]
    assert best_weights(out) == out / "best.pt"
    short = tmp_path / "short"  # the same config trained to max_iters = best_step: bit for bit best.pt
    train(tiny(f"train.min_delta={min_delta}", f"train.max_iters={steps[best]}"), short, progress=False)
    assert same_weights(weights(out / "best.pt"), weights(short / "ckpt.pt"))


def test_the_cap_the_target_and_patience_zero_are_reported(tmp_path):
    capped = train(tiny("train.max_iters=12"), tmp_path / "capped", progress=False)
    assert (capped["stopped_by"], capped["steps"], capped["stopped_early"]) == ("max_iters", 12, False)
    steps, values = zip(*evaluations(tmp_path / "capped"), strict=False)
    assert capped["best_step"] == steps[plateau(values, 3)[1]] and (tmp_path / "capped" / "best.pt").is_file()
    target = train(tiny("train.stop_metric=train_acc", "train.stop_value=0.0"), tmp_path / "target", progress=False)
    assert (target["stopped_by"], target["steps"], target["best_step"]) == ("stop_metric", 2, 2)
    off = tmp_path / "off"  # patience 0: the same training, without best.pt
    result = train(tiny("train.patience=0", "train.max_iters=12"), off, progress=False)
    assert (result["stopped_by"], result["steps"], result["best_step"]) == ("max_iters", 12, None)
    assert not (off / "best.pt").exists() and best_weights(off) == off / "ckpt.pt"
    assert same_weights(weights(off / "ckpt.pt"), weights(tmp_path / "capped" / "ckpt.pt"))


def test_another_plateau_metric_and_higher_is_better(tmp_path):
    result = train(tiny("train.plateau_metric=val_acc", "train.patience=2"), tmp_path / "acc", progress=False)
    rows = [row for row in load_run(tmp_path / "acc").metrics if "val_acc" in row]
    stop, best = plateau([row["val_acc"] for row in rows], 2, lower=False)
    assert stop and result["stopped_by"] == "plateau" and result["best_step"] == rows[best]["step"]


def test_a_kill_at_every_third_write_point_then_resume_gives_the_uninterrupted_run(tmp_path, monkeypatch):
    """Kills before every third rename, fsync (best.pt's included) or metrics row, each followed by what a
    user does: --resume when there is a checkpoint, else start again with --force."""
    config = tiny()
    with monkeypatch.context() as patch:
        counter = Faults(patch)
        whole = train(config, tmp_path / "whole", progress=False)
    assert whole["stopped_by"] == "plateau" and counter.calls > 100
    for at in range(1, counter.calls + 1, 3):
        out = tmp_path / f"killed-{at}"
        with monkeypatch.context() as patch:
            Faults(patch, at)
            with pytest.raises(Crash):
                train(config, out, progress=False)
        train(config, out, resume=has_checkpoint(out), force=not has_checkpoint(out), progress=False)
        assert_same_run(out, tmp_path / "whole")


KILLER = """
import os, signal, sys
from experiments import train
real, saved = train.save_atomic, []
def killing(obj, path, keep=None):
    real(obj, path, keep)
    saved.append(path.name)
    if saved.count("best.pt") == 3:  # the third best written, after the last checkpoint
        os.kill(os.getpid(), signal.SIGKILL)
train.save_atomic = killing
import experiments.train as train_module
from experiments.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_real_sigkill_after_a_new_best_then_resume_gives_the_uninterrupted_run(tmp_path):
    python = [sys.executable, "-m", "experiments"]
    subprocess.run([*python, *ARGV, "--out", str(tmp_path / "whole")], check=True, capture_output=True, env=ENV)
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, *ARGV, "--out", str(tmp_path / "killed")], capture_output=True, env=ENV
    )
    assert killed.returncode == -signal.SIGKILL
    state = load_checkpoint(tmp_path / "killed" / "ckpt.pt", ("state",))["state"]
    assert state["best_step"] < state["step"] < load_checkpoint(tmp_path / "killed" / "best.pt", ("step",))["step"]
    subprocess.run(
        [*python, *ARGV, "--out", str(tmp_path / "killed"), "--resume"], check=True, capture_output=True, env=ENV
    )
    assert_same_run(tmp_path / "killed", tmp_path / "whole")


def test_a_run_stopped_by_plateau_stays_stopped_and_is_not_extended(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*ARGV, "--out", str(out)]) == 0
    rows = (out / "metrics.jsonl").read_text()
    assert main([*ARGV, "--out", str(out), "--resume"]) == 0
    assert (out / "metrics.jsonl").read_text() == rows and summary(out)["stopped_by"] == "plateau"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main([*ARGV, "--out", str(out), "--extend", "--set=train.max_iters=200"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "plateau rule" in err
    assert (out / "metrics.jsonl").read_text() == rows and (out / "summary.json").is_file()


def test_extend_of_a_run_capped_before_its_plateau_trains_on_to_it(tmp_path):
    train(tiny(), tmp_path / "whole", progress=False)
    out = tmp_path / "capped"
    train(tiny("train.max_iters=8"), out, progress=False)
    assert summary(out)["stopped_by"] == "max_iters"
    assert main([*ARGV, "--out", str(out), "--extend"]) == 0  # max_iters back to 100: the same constant rate
    assert_same_run(out, tmp_path / "whole")


@pytest.mark.parametrize(
    "setting,message",
    [
        ("train.patience=-1", "train.patience must be >= 0, got -1"),
        ("train.patience=1.5", "train.patience must be an integer"),
        ("train.min_delta=-0.1", "train.min_delta must be >= 0, got -0.1"),
        ("train.min_delta=1", "train.min_delta must be < 1, got 1.0"),
        (
            "train.plateau_metric=accuracy",
            "train.plateau_metric must be one of the metrics task modular logs (val_loss, val_acc, train_acc)",
        ),
    ],
)
def test_bad_plateau_settings_are_one_line_errors(tmp_path, capsys, setting, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*ARGV, f"--set={setting}", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err


def test_curves_mark_the_best_step(tmp_path):
    rows = [
        {"step": 1, "train_loss": 2.0},
        {"step": 2, "train_loss": 1.5, "val_loss": 1.4},
        {"step": 4, "train_loss": 1.0, "val_loss": 1.6},
    ]
    marked = plot_training(rows, tmp_path / "marked.png", "t", best_step=2)
    lines = {line.get_label(): list(line.get_xdata()) for line in marked.axes[0].get_lines()}
    assert lines["best (step 2)"] == [2, 2] and (tmp_path / "marked.png").is_file()
    plain = plot_training(rows, tmp_path / "plain.png", "t")
    assert [line.get_label() for line in plain.axes[0].get_lines()] == ["train loss", "validation loss"]
