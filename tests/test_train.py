"""The experiment runner: configs, tasks, the training loop, determinism, resume, sweeps and bad input."""

import json
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import torch
from extras import needs_extra

from experiments.checkpoints import load_weights
from experiments.cli import main
from experiments.config import RunConfig, from_tables, load_config, to_toml
from experiments.errors import UsageError
from experiments.tasks import TASKS, build_task
from experiments.train import learning_rate, train

CORPUS = "builtin:tinyshakespeare"  # the corpus shipped in experiments/data
CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
TINY = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.d_model=16",
    "train.block_size=16",
    "train.batch_size=4",
    "train.warmup_iters=2",
    "train.eval_interval=5",
    "train.eval_iters=2",
    "train.checkpoint_interval=5",
    "train.max_iters=10",
    "task.sample_length=20",
]


def tiny_config(tmp_path, *extra):
    """The shipped Shakespeare config shrunk to seconds, on the shipped corpus."""
    return load_config(CONFIGS / "shakespeare_char_cpu.toml", [*TINY, f'task.data="{CORPUS}"', *extra])


def rows(run):
    return [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]


def losses(run):
    return [(r["step"], r["train_loss"], r.get("val_loss")) for r in rows(run)]


@pytest.mark.parametrize("name", ["shakespeare_char_cpu", "modular97", "digits_vit"])
def test_shipped_configs_load_and_round_trip_through_toml(name):
    config = load_config(CONFIGS / f"{name}.toml")
    assert from_tables(tomllib.loads(to_toml(config))) == config
    assert config.task.name in TASKS


def test_set_overrides_parse_toml_values_and_unknown_keys_are_errors():
    config = load_config(
        CONFIGS / "modular97.toml",
        ["model.residual=belief", "train.lr=3e-3", "model.symmetric=true", "task.op=/", "train.max_iters=7"],
    )
    assert (
        config.model.attention.residual,
        config.train.lr,
        config.model.attention.symmetric,
        config.task.options["op"],
        config.train.max_iters,
    ) == ("belief", 3e-3, True, "/", 7)
    for bad, message in [
        ("model.residul=belief", "unknown key"),
        ("optim.lr=1", "unknown table"),
        ("train.lr=-1", "must be > 0"),
        ("train.max_iters=2.5", "integer"),
        ("lr=1", "table.key"),
    ]:
        with pytest.raises(UsageError, match=message):
            load_config(CONFIGS / "modular97.toml", [bad])
    with pytest.raises(UsageError, match="unknown key.*task.colour"):
        build_task(load_config(CONFIGS / "modular97.toml", ["task.colour=red"]))


def test_the_model_table_has_a_key_for_every_attention_field_and_embeds_attentionconfig():
    """[model] names each AttentionConfig field but probe, flat; ModelConfig declares none of them but holds the
    layers' AttentionConfig, with AttentionConfig's defaults but bias (false), send_width written as 0 for None."""
    import dataclasses

    import attention
    from experiments.config import ModelConfig, attention_config, attention_keys, table_keys

    fields = [f.name for f in dataclasses.fields(attention.AttentionConfig)]
    assert attention_keys() == tuple(name for name in fields if name != "probe")
    assert [f.name for f in dataclasses.fields(ModelConfig)] == ["n_layer", "attention", "kind", "gates", "group_lasso"]
    assert set(table_keys("model")) == {"n_layer", *attention_keys(), "kind", "gates", "group_lasso"}
    model = ModelConfig()
    assert attention_config(model) == attention.AttentionConfig(bias=False)
    written = tomllib.loads(to_toml(RunConfig()))["model"]
    assert (written["bias"], written["send_width"]) == (False, 0)
    switches = dict(send_width=6, n_head=1, residual="belief", gamma=2.0, self_loops=False)
    wide = from_tables({"model": switches}).model
    assert attention_config(wide) == attention.AttentionConfig(**switches, bias=False)


def test_a_new_attention_field_reaches_the_model_from_its_config_key_alone(monkeypatch):
    """A field added to AttentionConfig needs no [model] declaration: its key is read, written and checked."""
    import dataclasses

    import attention
    import experiments.config

    @dataclasses.dataclass
    class Wider(attention.AttentionConfig):
        window: int | None = None

    monkeypatch.setattr(experiments.config, "AttentionConfig", Wider)
    assert load_config(CONFIGS / "modular97.toml", ["model.window=3"]).model.attention.window == 3
    default = load_config(CONFIGS / "modular97.toml").model
    assert default.attention.window is None and tomllib.loads(to_toml(RunConfig(model=default)))["model"]["window"] == 0
    with pytest.raises(UsageError, match="model.window must be an integer"):
        load_config(CONFIGS / "modular97.toml", ["model.window=wide"])


def test_a_convex_runs_label_leaves_out_every_attention_switch_but_d_model():
    """The convex kind reads d_model (its embeddings' width) and no other attention key (docs/guide/training.md)."""
    from experiments.config import attention_keys
    from experiments.runs import relevant

    flat = {"model.kind": "convex", "model.residual": "attentionx"}
    assert {key for key in attention_keys() if relevant(f"model.{key}", flat)} == {"d_model"}
    assert not relevant("model.n_layer", flat) and relevant("model.gates", flat)
    transformer = {"model.kind": "transformer", "model.residual": "attentionx"}
    assert all(relevant(f"model.{key}", transformer) for key in attention_keys() if key != "beta")


def test_learning_rate_warms_up_then_decays_to_min_lr():
    train_cfg = RunConfig().train
    assert learning_rate(0, train_cfg) < learning_rate(50, train_cfg) < train_cfg.lr
    assert learning_rate(train_cfg.warmup_iters, train_cfg) == pytest.approx(train_cfg.lr)
    assert learning_rate(train_cfg.max_iters, train_cfg) == pytest.approx(train_cfg.min_lr)
    middle = (train_cfg.warmup_iters + train_cfg.max_iters) / 2
    assert learning_rate(middle, train_cfg) == pytest.approx((train_cfg.lr + train_cfg.min_lr) / 2)


@pytest.mark.parametrize(
    "op,expected",
    [
        ("+", lambda a, b, p: (a + b) % p),
        ("-", lambda a, b, p: (a - b) % p),
        ("*", lambda a, b, p: a * b % p),
        ("/", lambda a, b, p: a * pow(b, p - 2, p) % p),
    ],
)
def test_modular_task_targets(op, expected):
    task = build_task(load_config(CONFIGS / "modular97.toml", ["task.p=7", f'task.op="{op}"']))
    inputs, targets = (torch.cat(parts) for parts in zip(*task.splits.values(), strict=False))
    assert len(targets) == 7 * (6 if op == "/" else 7)
    assert all(expected(a, b, 7) == c for (a, _, b, _), c in zip(inputs.tolist(), targets.tolist(), strict=False))
    assert (inputs[:, 1] == 7).all() and (inputs[:, 3] == 8).all()  # the op and "=" tokens


def test_char_lm_run_writes_every_file(tmp_path):
    out = tmp_path / "run"
    summary = train(tiny_config(tmp_path), out, progress=False)
    assert {"config.toml", "meta.json", "metrics.jsonl", "ckpt.pt", "summary.json", "curves.png", "sample.txt"} <= {
        p.name for p in out.iterdir()
    }
    table = rows(out)
    assert [r["step"] for r in table] == list(range(1, 11))
    assert all({"step", "train_loss", "time", "lr"} <= set(r) for r in table)
    assert [r["step"] for r in table if "val_loss" in r] == [5, 10]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["version"] and meta["torch"] == torch.__version__
    assert summary["final"]["val_loss"] == table[-1]["val_loss"] and summary["tokens_per_second"] > 0
    assert len((out / "sample.txt").read_text()) == 21
    assert load_config(out / "config.toml") == tiny_config(tmp_path)


@pytest.mark.parametrize("config", ["modular97", "digits_vit"])
def test_classification_tasks_train_and_report_accuracy(tmp_path, config):
    if config == "digits_vit":
        needs_extra("sklearn")
    settings = ["train.max_iters=4", "train.eval_interval=2", "model.d_model=16", "model.n_head=2"]
    if config == "modular97":
        settings.append("task.p=11")
    run_config = load_config(CONFIGS / f"{config}.toml", settings)
    summary = train(run_config, tmp_path / "run", progress=False)
    assert set(summary["final"]) == {"val_loss", "val_acc", "train_acc"}
    # recount the final accuracies by hand from the saved weights, one example at a time
    task = build_task(run_config)
    model = task.build_model().eval()
    load_weights(model, tmp_path / "run" / "ckpt.pt")
    with torch.no_grad():
        for split in ("train", "val"):
            inputs, labels = task.splits[split]
            logits = [model(x[None])[0] for x in inputs]
            predicted = [int((out[0, -1] if config == "modular97" else out[0]).argmax()) for out in logits]
            expected = sum(p == int(y) for p, y in zip(predicted, labels, strict=False)) / len(labels)
            assert summary["final"][f"{split}_acc"] == pytest.approx(expected, abs=1e-12)


def test_same_seed_gives_identical_losses_and_another_seed_does_not(tmp_path):
    config = tiny_config(tmp_path, "model.dropout=0.1")
    train(config, tmp_path / "a", progress=False)
    train(config, tmp_path / "b", progress=False)
    train(tiny_config(tmp_path, "model.dropout=0.1", "train.seed=1"), tmp_path / "c", progress=False)
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert losses(tmp_path / "a") != losses(tmp_path / "c")


def test_sigkill_mid_run_then_resume_gives_the_uninterrupted_metrics(tmp_path):
    command = [
        sys.executable,
        "-m",
        "experiments",
        "train",
        str(CONFIGS / "shakespeare_char_cpu.toml"),
        "--data",
        str(CORPUS),
        "--no-progress",
        *[f"--set={s}" for s in TINY],
        "--set=train.max_iters=1500",
        "--set=train.checkpoint_interval=50",
        "--set=model.dropout=0.1",
    ]
    subprocess.run([*command, "--out", str(tmp_path / "whole")], check=True, capture_output=True)
    victim = subprocess.Popen(
        [*command, "--out", str(tmp_path / "killed")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    metrics = tmp_path / "killed" / "metrics.jsonl"
    deadline = time.time() + 120
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 230) and time.time() < deadline:
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    logged = len(metrics.read_text().splitlines())
    assert 230 <= logged < 1500 and not (tmp_path / "killed" / "summary.json").exists()  # killed mid-way
    subprocess.run([*command, "--out", str(tmp_path / "killed"), "--resume"], check=True, capture_output=True)
    assert losses(tmp_path / "killed") == losses(tmp_path / "whole")
    whole, resumed = (json.loads((tmp_path / run / "summary.json").read_text()) for run in ("whole", "killed"))
    assert whole["final"] == resumed["final"] and whole["best"] == resumed["best"]


def test_ctrl_c_after_the_last_steps_check_finishes_the_run_and_still_stops_the_caller(tmp_path, monkeypatch, capsys):
    import experiments.train as train_module

    write_row = train_module.write_row

    def ctrl_c_at_the_last_row(file, row):  # SIGINT lands during the last step's evaluation
        write_row(file, row)
        if row["step"] == 10:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(train_module, "write_row", ctrl_c_at_the_last_row)
    with pytest.raises(KeyboardInterrupt, match="after the last step"):
        train(tiny_config(tmp_path), tmp_path / "run", progress=False)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 10
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    (tmp_path / "run" / "summary.json").unlink()
    code = main(
        [
            "train",
            str(CONFIGS / "shakespeare_char_cpu.toml"),
            "--no-progress",
            *[f"--set={s}" for s in TINY],
            f'--set=task.data="{CORPUS}"',
            "--out",
            str(tmp_path / "cli"),
        ]
    )
    assert code == 130 and "the run finished, results in" in capsys.readouterr().err


def test_sweep_report_and_plot_over_four_residuals_and_two_seeds(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            str(CONFIGS / "shakespeare_char_cpu.toml"),
            "--data",
            str(CORPUS),
            "--no-progress",
            *[f"--set={s}" for s in TINY],
            "--set=task.sample_length=0",
            "--set=train.max_iters=6",
            "--grid",
            "model.residual=standard,attentionx,belief,belief_star",
            "--seeds",
            "0,1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    record = json.loads((out / "sweep.json").read_text())
    assert [r["status"] for r in record["runs"]] == ["finished"] * 8
    assert (
        main(
            [
                "sweep",
                str(CONFIGS / "shakespeare_char_cpu.toml"),
                "--data",
                str(CORPUS),
                "--no-progress",
                *[f"--set={s}" for s in TINY],
                "--set=task.sample_length=0",
                "--set=train.max_iters=6",
                "--grid",
                "model.residual=standard,attentionx,belief,belief_star",
                "--seeds",
                "0,1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.count("finished earlier, skipped") == 8
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    for residual in ("standard", "attentionx", "belief", "belief_star"):
        row = next(line for line in report.splitlines() if line.startswith(f"| residual={residual} |"))
        assert "2/2" in row and " ± " in row
    from experiments.plots import plot_metric
    from experiments.runs import expand

    figure = plot_metric(expand([out]), "val_loss", tmp_path / "curves.png")
    assert (tmp_path / "curves.png").is_file() and (out / "plot_val_loss.png").is_file()
    assert sorted(line.get_label().split(" (")[0] for line in figure.axes[0].get_lines()) == [
        "residual=attentionx",
        "residual=belief",
        "residual=belief_star",
        "residual=standard",
    ]


def test_a_failing_run_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            str(CONFIGS / "shakespeare_char_cpu.toml"),
            "--data",
            str(CORPUS),
            "--no-progress",
            *[f"--set={s}" for s in TINY],
            "--set=train.max_iters=2",
            "--set=task.sample_length=0",
            "--grid",
            "train.plateau_metric=val_los,val_loss",
            "--out",
            str(out),
        ]
    )  # the task logs no val_los, which the run finds when it builds its task
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert code == 1 and [r["status"] for r in runs] == ["failed", "finished"]
    assert "train.plateau_metric must be one of the metrics" in runs[0]["error"]
    assert main(["report", str(out)]) == 0
    assert "plateau_metric=val_los,seed=0`: failed" in (out / "report.md").read_text()


@pytest.mark.parametrize("problem", ["missing", "empty", "one character", "one distinct character"])
def test_bad_corpus_is_a_clear_error(tmp_path, capsys, problem):
    path = tmp_path / "corpus.txt"
    if problem != "missing":
        path.write_text({"empty": "", "one character": "a", "one distinct character": "a" * 1000}[problem])
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "train",
                str(CONFIGS / "shakespeare_char_cpu.toml"),
                "--data",
                str(path),
                *[f"--set={s}" for s in TINY],
                "--out",
                str(tmp_path / "r"),
            ]
        )
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and ("not found" in error if problem == "missing" else "distinct" in error)


@pytest.mark.parametrize(
    "setting,message",
    [
        ("task.name=poetry", "unknown task 'poetry'"),
        ("train.device=gpu", "torch device"),
        ("model.n_head=3", "divisible"),
        ("model.residual=beleif", "unknown model.residual 'beleif'; choose one of standard, attentionx"),
    ],
)
def test_bad_config_values_are_clear_errors(tmp_path, capsys, setting, message):
    with pytest.raises(SystemExit):
        main(
            [
                "train",
                str(CONFIGS / "shakespeare_char_cpu.toml"),
                "--data",
                str(CORPUS),
                *[f"--set={s}" for s in TINY],
                "--set",
                setting,
                "--out",
                str(tmp_path / "r"),
            ]
        )
    assert message in capsys.readouterr().err


def test_run_directories_are_never_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "train",
        str(CONFIGS / "shakespeare_char_cpu.toml"),
        "--data",
        str(CORPUS),
        "--no-progress",
        *[f"--set={s}" for s in TINY],
        "--out",
        str(out),
    ]
    assert main(args) == 0
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(SystemExit):
        main(args)
    assert "--force" in capsys.readouterr().err and (out / "metrics.jsonl").read_text() == before
    assert main([*args, "--force", "--set=train.seed=3"]) == 0 and (out / "metrics.jsonl").read_text() != before


def test_resume_and_output_errors(tmp_path, capsys):
    base = ["train", str(CONFIGS / "shakespeare_char_cpu.toml"), "--data", str(CORPUS), *[f"--set={s}" for s in TINY]]
    (tmp_path / "empty").mkdir()
    for out, extra, message in [
        (tmp_path / "empty", ["--resume"], "no ckpt.pt"),
        (tmp_path / "nothing", ["--resume"], "no ckpt.pt"),
        (tmp_path / "file.txt" / "run", [], "cannot write"),
    ]:
        (tmp_path / "file.txt").write_text("a file, not a directory")
        with pytest.raises(SystemExit):
            main([*base, "--out", str(out), *extra])
        assert message in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    with pytest.raises(SystemExit):
        main([*base, "--out", str(tmp_path / "r"), "--resume", "--set=model.residual=belief"])
    assert "differs" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("residual", ["standard", "belief_star"])
def test_compiled_training_matches_eager(tmp_path, residual):
    """torch.compile (train.compile = true) changes speed, not the losses (to float32 rounding). ~1 min."""
    eager = train(tiny_config(tmp_path, f"model.residual={residual}"), tmp_path / "eager", progress=False)
    compiled = train(
        tiny_config(tmp_path, f"model.residual={residual}", "train.compile=true"), tmp_path / "compiled", progress=False
    )
    for (step, a, _va), (_, b, _vb) in zip(losses(tmp_path / "eager"), losses(tmp_path / "compiled"), strict=False):
        assert a == pytest.approx(b, rel=1e-4), step
    assert compiled["final"]["val_loss"] == pytest.approx(eager["final"]["val_loss"], rel=1e-4)


def test_force_refuses_to_delete_a_directory_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep me")
    with pytest.raises(SystemExit):
        main(
            [
                "train",
                str(CONFIGS / "shakespeare_char_cpu.toml"),
                "--data",
                str(CORPUS),
                *[f"--set={s}" for s in TINY],
                "--out",
                str(tmp_path / "data"),
                "--force",
            ]
        )
    assert "also holds precious.txt" in capsys.readouterr().err and (tmp_path / "data" / "precious.txt").is_file()


def test_grid_values_become_safe_directory_names(tmp_path):
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep",
            str(CONFIGS / "modular97.toml"),
            "--no-progress",
            "--set=task.p=5",
            "--set=train.max_iters=2",
            "--set=model.d_model=8",
            "--set=model.n_head=2",
            "--grid",
            "task.op=+,/",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["op=%2F,seed=0", "op=+,seed=0"]
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").read_text().count("| op=") == 2


def test_training_and_resume_run_on_the_device(tmp_path, device, monkeypatch):
    """A crash at step 5 (after the checkpoint at 3), then --resume: the uninterrupted run's metrics."""
    from experiments.tasks.char_lm import CharLM

    config = tiny_config(
        tmp_path, f'train.device="{device}"', "train.max_iters=6", "train.checkpoint_interval=3", "model.dropout=0.1"
    )
    train(config, tmp_path / "whole", progress=False)
    draw = CharLM.train_batch
    calls = []

    def crash_at_step_5(self, generator):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("simulated crash")
        return draw(self, generator)

    monkeypatch.setattr(CharLM, "train_batch", crash_at_step_5)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(config, tmp_path / "part", progress=False)
    monkeypatch.setattr(CharLM, "train_batch", draw)
    train(config, tmp_path / "part", resume=True, progress=False)
    assert losses(tmp_path / "part") == losses(tmp_path / "whole")
    assert (tmp_path / "part" / "sample.txt").is_file()


def bar_lines(err, prefix):
    """The states a progress bar drew on stderr (tqdm rewrites its line with \\r) whose text starts with `prefix`."""
    return [line.strip() for line in err.replace("\r", "\n").splitlines() if line.strip().startswith(prefix)]


def test_a_sweeps_bar_counts_runs_of_the_whole_sweep_from_those_finished_and_no_progress_silences_it(tmp_path, capsys):
    from tiny_runs import MODULAR
    from tiny_runs import TINY as TINY_MODULAR

    sweep = ["sweep", MODULAR, *[f"--set={s}" for s in TINY_MODULAR], "--grid", "train.plateau_metric=val_los,val_loss"]
    sweep += ["--out", str(tmp_path / "sweep")]  # the task logs no val_los: that run fails, the sweep goes on
    assert main(sweep) == 1
    drawn = bar_lines(capsys.readouterr().err, "run ")
    assert drawn[0].startswith("run 1 of 2") and "0/2 [" in drawn[0] and "2/2 [" in drawn[-1]
    assert any(line.startswith("run 2 of 2") for line in drawn)
    assert main(sweep) == 1  # the failed run is retried; the finished one counts from the start
    drawn = bar_lines(capsys.readouterr().err, "run ")
    assert "1/2 [" in drawn[0] and "2/2 [" in drawn[-1] and not any("0/2 [" in line for line in drawn)
    assert main([*sweep, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "failed" in err and "/2 [" not in err and "it/s" not in err
