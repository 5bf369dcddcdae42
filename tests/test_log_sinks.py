"""--log tensorboard|wandb|mlflow: each sink read back offline (TensorBoard's event reader, the W&B offline run
file, an MLflow file store) holds every row metrics.jsonl holds, the config and the summary; a resumed run does not
show its re-run steps twice; a missing package or a failing sink is one line, never a lost run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from extras import needs_extra
from tiny_runs import relink_after_step

import experiments.train as train_module
from experiments import log_sinks
from experiments.cli import main
from experiments.runs import read_metrics

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--set",
    'task.data="builtin:tinyshakespeare"',
    "--set",
    "model.n_layer=1",
    "--set",
    "model.n_head=2",
    "--set",
    "model.d_model=16",
    "--set",
    "train.block_size=16",
    "--set",
    "train.batch_size=4",
    "--set",
    "train.warmup_iters=1",
    "--set",
    "train.eval_interval=3",
    "--set",
    "train.eval_iters=1",
    "--set",
    "train.log_interval=1",
    "--set",
    "task.sample_length=4",
]


def train_run(out, *extra, steps=6):
    assert main([*train_argv(out, steps), "--no-progress", *extra]) == 0


def train_argv(out, steps=6):
    return ["train", "shakespeare_char_cpu", *TINY, "--set", f"train.max_iters={steps}", "--out", str(out)]


def expected(out):
    """{metric: {step: value}} of the run's metrics.jsonl (the last row of a step logged twice)."""
    series = {}
    for row in read_metrics(out / "metrics.jsonl"):
        for key, value in row.items():
            if key != "step":
                series.setdefault(key, {})[row["step"]] = value
    return series


def test_tensorboard_holds_every_row_the_config_and_the_summary(tmp_path):
    needs_extra("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    train_run(out, "--log", "tensorboard")
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "images": 0}).Reload()
    for metric, values in expected(out).items():
        logged = {event.step: event.value for event in events.Scalars(metric)}
        assert logged == pytest.approx(values, rel=1e-6), metric  # stored as float32
    assert set(events.Tags()["tensors"]) >= {"config/text_summary", "summary/text_summary"}
    assert events.Tags()["images"] == ["curves"]


def test_a_resumed_run_shows_each_step_once_in_tensorboard(tmp_path):
    needs_extra("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    train_run(out, "--log", "tensorboard", steps=3)
    assert main(["train", "shakespeare_char_cpu", *TINY, "--set", "train.max_iters=6", "--out", str(out),
                 "--extend", "--no-progress", "--log", "tensorboard"]) == 0  # fmt: skip
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    steps = [event.step for event in events.Scalars("train_loss")]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_mlflow_file_store_holds_every_row_params_and_artifacts(tmp_path, monkeypatch):
    needs_extra("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "run"
    train_run(out, "--log", "mlflow")
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("run")
    (run,) = client.search_runs([experiment.experiment_id])
    run_id = json.loads((out / "meta.json").read_text())["run_id"]
    assert run.data.tags[log_sinks.TAG] == run_id and run.info.status == "FINISHED"
    assert run.data.params["model.n_layer"] == "1" and run.data.params["train.max_iters"] == "6"
    for metric, values in expected(out).items():
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, metric)}
        assert history == pytest.approx(values, rel=1e-12), metric
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts >= {"config.toml", "summary.json", "curves.png"}


def wandb_records(path):
    """The protobuf records of a W&B run file: a 7-byte header (":W&B", magic, version), then records in
    LevelDB's log format (32 KiB blocks; each piece a 4-byte checksum, 2-byte length, 1-byte type: 1 whole,
    2 first, 3 middle, 4 last; a block's last < 7 bytes are padding)."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    position, records, pending = 7, [], b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        length, kind = int.from_bytes(data[position + 4 : position + 6], "little"), data[position + 6]
        if kind == 0:  # zeros to the end of the block
            position += left
            continue
        piece = data[position + 7 : position + 7 + length]
        position += 7 + length
        pending = piece if kind in (1, 2) else pending + piece
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_wandb_offline_run_holds_every_row_and_the_summary(tmp_path, monkeypatch):
    needs_extra("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    train_run(out, "--log", "wandb")
    (log_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    history, summary, config = {}, {}, {}
    for record in wandb_records(log_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            for key, value in items.items():
                history.setdefault(key, {})[items["_step"]] = value
        elif kind == "summary":
            summary.update({item.key: json.loads(item.value_json) for item in record.summary.update})
        elif kind == "run":
            config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
    for metric, values in expected(out).items():
        assert {step: history[metric][step] for step in values} == pytest.approx(values, rel=1e-12), metric
    final = json.loads((out / "summary.json").read_text())["final"]["val_loss"]
    assert summary["final.val_loss"] == pytest.approx(final)
    assert config["model.n_layer"] == 1 and config["train.max_iters"] == 6


def test_a_sweep_logs_each_run_to_one_mlflow_experiment(tmp_path, monkeypatch):
    needs_extra("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "sweep"
    argv = ["sweep", "shakespeare_char_cpu", *TINY, "--set", "train.max_iters=3", "--seeds", "0,1"]
    assert main([*argv, "--out", str(out), "--no-progress", "--log", "mlflow"]) == 0
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    runs = client.search_runs([client.get_experiment_by_name("sweep").experiment_id])
    assert sorted(run.info.run_name for run in runs) == ["seed=0", "seed=1"]


def test_a_missing_package_is_one_line_before_anything_is_written(tmp_path):
    code = (
        "import sys; sys.modules['mlflow'] = None\n"  # an import that fails, as where mlflow is not installed
        "from experiments.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    out = tmp_path / "run"
    argv = ["train", "shakespeare_char_cpu", *TINY, "--set", "train.max_iters=2", "--out", str(out), "--log", "mlflow"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert 'needs the mlflow package: pip install "pdmm-bridge[mlflow]"' in done.stderr
    assert not out.exists()


def test_a_sink_that_fails_mid_run_is_dropped_and_the_run_finishes(tmp_path, monkeypatch, capsys):
    needs_extra("tensorboard")

    def broken(self, row):
        raise OSError("disk full")

    monkeypatch.setattr(log_sinks.TensorBoardSink, "row", broken)
    out = tmp_path / "run"
    train_run(out, "--log", "tensorboard")
    assert "--log tensorboard stopped (logging a row): disk full" in capsys.readouterr().err
    assert (out / "summary.json").is_file() and len(read_metrics(out / "metrics.jsonl")) == 6


@pytest.mark.slow  # 20 s; compare hands the same LogTarget to train, whose sinks the tests above read back
def test_compare_logs_each_transformer_training_run(tmp_path):
    needs_extra("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = ROOT / "experiments" / "configs" / "graph_consensus.toml"
    tiny = ["train.max_iters=4", "train.eval_interval=2", "train.checkpoint_interval=2", "model.n_layer=2",
            "model.d_model=16", "model.n_head=2", "train.batch_size=4", "task.val_graphs=2", "task.n_min=8",
            "task.n_max=12", "task.radius=0", "train.log_interval=1"]  # fmt: skip
    out = tmp_path / "cmp"
    argv = ["compare", str(config), "--residuals", "standard", "--tied", "none", "--widths", "4", "--seeds", "0"]
    argv += ["--rounds", "3", "--test-graphs", "1", "--tune-graphs", "1", "--learned-steps", "2"]
    argv += ["--finetune-steps", "2", *[f"--set={s}" for s in tiny], "--out", str(out), "--no-progress"]
    assert main([*argv, "--log", "tensorboard"]) == 0
    runs = sorted(p for p in (out / "runs").rglob("metrics.jsonl"))
    assert len(runs) == 2  # the standard row and the width-limited row
    for metrics in runs:
        events = EventAccumulator(str(metrics.parent / "tensorboard"), size_guidance={"scalars": 0}).Reload()
        logged = {event.step: event.value for event in events.Scalars("train_loss")}
        assert logged == pytest.approx(expected(metrics.parent)["train_loss"], rel=1e-6)


def moved_mid_run(monkeypatch, tmp_path, sink):
    """Train into RUN with --log `sink`, and after step 3 (the sink open) rename RUN to MOVED and put a link to
    ELSEWHERE at its name; ELSEWHERE holds the sink's folders, so that a write by path there would succeed.
    Returns (MOVED, ELSEWHERE)."""
    out, moved, elsewhere = tmp_path / "run", tmp_path / "moved", tmp_path / "elsewhere"
    for folder in ("tensorboard", "wandb"):
        (elsewhere / folder).mkdir(parents=True)
    write_row = train_module.write_row
    relink_after_step(monkeypatch, out, moved, elsewhere)
    train_run(out, "--log", sink)
    monkeypatch.setattr(train_module, "write_row", write_row)  # the runs after this one keep their directory
    return moved, elsewhere


def files_under(directory):
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*") if not path.is_dir())


def test_tensorboard_writes_into_the_run_directory_even_when_it_is_renamed_and_linked_mid_run(tmp_path, monkeypatch):
    needs_extra("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    moved, elsewhere = moved_mid_run(monkeypatch, tmp_path, "tensorboard")
    assert files_under(elsewhere) == []
    events = EventAccumulator(str(moved / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    for metric, values in expected(moved).items():
        assert {event.step: event.value for event in events.Scalars(metric)} == pytest.approx(values, rel=1e-6)
    assert main([*train_argv(moved), "--no-progress", "--force"]) == 0  # its event files are owned: removed
    assert not (moved / "tensorboard").exists()


def test_wandb_writes_into_the_run_directory_even_when_it_is_renamed_and_linked_mid_run(tmp_path, monkeypatch):
    needs_extra("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    moved, elsewhere = moved_mid_run(monkeypatch, tmp_path, "wandb")
    assert files_under(elsewhere) == []
    (log_file,) = (moved / "wandb").glob("offline-run-*/run-*.wandb")
    logged = {
        int(json.loads(item.value_json))
        for record in wandb_records(log_file)
        if record.WhichOneof("record_type") == "history"
        for item in record.history.item
        if (item.key or "/".join(item.nested_key)) == "_step"
    }
    assert logged >= {row["step"] for row in read_metrics(moved / "metrics.jsonl")}
    assert main([*train_argv(moved), "--no-progress", "--force"]) == 0  # wandb's files are owned, its links gone
    assert not (moved / "wandb").exists()


@pytest.mark.parametrize("sink, planted", [("tensorboard", "events"), ("wandb", ".wandb")])
def test_a_link_planted_in_a_sinks_folder_is_refused_and_nothing_lands_at_its_target(tmp_path, capsys, sink, planted):
    needs_extra(sink)
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    train_run(out, steps=3)
    elsewhere.mkdir()
    (out / sink).mkdir()
    (out / sink / planted).symlink_to(elsewhere)
    with pytest.raises(SystemExit) as exit:
        main([*train_argv(out), "--no-progress", "--extend", "--log", sink])
    err = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and f"{sink}/{planted} is a link" in err and "\n" not in err
    assert files_under(elsewhere) == []


def test_what_tensorboard_wrote_is_owned_and_a_file_planted_in_its_folder_is_not(tmp_path, capsys):
    needs_extra("tensorboard")
    out = tmp_path / "run"
    train_run(out, "--log", "tensorboard", steps=3)
    (out / "tensorboard" / "notes.txt").write_text("mine")
    train_run(out, "--log", "tensorboard", "--extend")  # to step 6: the sink opens beside the planted file
    with pytest.raises(SystemExit) as exit:
        main([*train_argv(out), "--no-progress", "--force"])
    err = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and "tensorboard/notes.txt" in err and "events" not in err and "\n" not in err
    assert (out / "tensorboard" / "notes.txt").read_text() == "mine"
    (out / "tensorboard" / "notes.txt").unlink()
    assert main([*train_argv(out), "--no-progress", "--force"]) == 0 and not (out / "tensorboard").exists()


KILL_AT_STEP_4 = """
import os, signal, sys
from experiments import train
real = train.write_row
def killing(file, row):
    if row["step"] == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(file, row)
train.write_row = killing
from experiments.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_with_tensorboard_open_resumes_and_force_refuses_its_unrecorded_events(tmp_path):
    """A SIGKILL while the sink is open: its event file was never recorded, so it is not the project's; the run
    resumes, and --force refuses in one line naming that file, deleting nothing (docs/guide/runs.md)."""
    needs_extra("tensorboard")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = [*train_argv(out), "--set", "train.checkpoint_interval=2", "--no-progress"]
    killed = subprocess.run([sys.executable, "-c", KILL_AT_STEP_4, *argv, "--log", "tensorboard"], env=env)
    assert killed.returncode == -9
    (events,) = (out / "tensorboard").iterdir()
    before = events.read_bytes()
    force = [sys.executable, "-m", "experiments", *argv, "--force"]
    resume = [sys.executable, "-m", "experiments", *argv, "--resume", "--log", "tensorboard"]
    named = []
    for command in (force, resume, force):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        if command is resume:
            assert done.returncode == 0, done.stderr
            continue
        err = done.stderr.strip()
        assert done.returncode == 2 and "\n" not in err and "Traceback" not in err, err
        named.append(err)
        assert events.read_bytes() == before
    assert "holds tensorboard/;" in named[0]  # nothing there is the project's before the resume
    assert f"holds tensorboard/{events.name};" in named[1]  # after it, only the killed session's file is not
    assert [row["step"] for row in read_metrics(out / "metrics.jsonl")] == list(range(1, 7))
    assert len(list((out / "tensorboard").iterdir())) == 2  # the resumed session's events, recorded, beside it
