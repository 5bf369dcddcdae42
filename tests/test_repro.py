"""The reproductions: [sweep] / [report] tables, early stopping, convex attention in the runner, the
report's paired differences and verdicts, and every committed repro config run end to end at a tiny size."""
import json
from pathlib import Path

import numpy as np
import pytest

from experiments.cli import main
from experiments.common import UsageError
from experiments.config import load_config
from experiments.repro_report import claim_sentences, first_step, paired_differences, significance, threshold_table
from experiments.runs import Run, group_runs
from experiments.train import train

ROOT = Path(__file__).resolve().parents[1]
CORPUS = "builtin:tinyshakespeare"  # the corpus shipped in experiments/data
REPRO = ROOT / "experiments" / "configs" / "repro"
TINY = ["train.max_iters=2", "train.eval_interval=1", "train.eval_iters=1", "train.warmup_iters=1",
        "train.checkpoint_interval=1"]


def tiny(*extra):
    return [arg for setting in [*TINY, *extra] for arg in ("--set", setting)]


@pytest.mark.parametrize("name", sorted(path.stem for path in REPRO.glob("*.toml")))
def test_each_repro_config_runs_and_reports_at_a_tiny_size(name, tmp_path, capsys):
    """CI's guard against rot: one seed, two steps, then the report with its [report] extras."""
    out, results = tmp_path / name, tmp_path / "docs" / "RESULTS.md"
    assert main(["sweep", str(REPRO / f"{name}.toml"), "--seeds", "0", "--data", str(CORPUS), "--out", str(out),
                 "--no-progress", *tiny()]) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert all(entry["status"] == "finished" for entry in sweep["runs"]) and sweep["report"]["title"]
    assert main(["report", str(out), "--results", str(results)]) == 0
    report, section = (out / "report.md").read_text(), results.read_text()
    assert report.startswith(f"# {sweep['report']['title']}") and "**Source claim**" in report
    assert f"<!-- begin repro-{name} " in section and f"## {sweep['report']['title']}" in section
    for link in [line[line.index("](") + 2:-1] for line in section.splitlines() if line.startswith("![")]:
        assert (results.parent / link).is_file()
    if sweep["report"].get("claims"):
        assert "Verdict on the source's claims" in report


def test_sweep_table_variants_are_crossed_with_the_grid_and_set_sits_between_them(tmp_path):
    """--set beats a variant's value (batch size) and loses to the grid point (kernel)."""
    out = tmp_path / "s"
    assert main(["sweep", str(REPRO / "linear_char.toml"), "--seeds", "3", "--data", str(CORPUS), "--out", str(out),
                 "--no-progress", *tiny("train.batch_size=2", "model.n_layer=1", "model.d_model=16",
                                        "model.kernel=diff")]) == 0
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert len(runs) == 3 * 2 and {r["seed"] for r in runs} == {3}
    configs = [load_config(out / r["name"] / "config.toml") for r in runs]
    assert {(c.train.block_size, c.model.kernel) for c in configs} == {(b, k) for b in (64, 256, 1024)
                                                                       for k in ("softmax", "linear")}
    assert {c.train.batch_size for c in configs} == {2}  # --set beats the variants' batch sizes


def test_sweep_seeds_must_be_distinct(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["sweep", str(REPRO / "linear_char.toml"), "--out", str(tmp_path / "s"), "--seeds", "0,0"])
    assert "distinct" in capsys.readouterr().err


def test_unknown_sweep_keys_are_errors(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text((REPRO / "attentionx_digits.toml").read_text().replace("[sweep]", "[sweep]\nrepeats = 2"))
    with pytest.raises(SystemExit):
        main(["sweep", str(config), "--out", str(tmp_path / "s")])
    assert "unknown key(s) repeats in [sweep]" in capsys.readouterr().err


def modular(tmp_path, *extra):
    return load_config(REPRO / "grokking_mod97.toml", ["train.max_iters=40", "train.eval_interval=5",
                                                       "model.d_model=32", *extra])


def test_early_stop_ends_the_run_at_the_first_evaluation_that_reaches_the_target(tmp_path):
    summary = train(modular(tmp_path, "train.stop_metric=train_acc", "train.stop_value=0.0"), tmp_path / "r",
                    progress=False)
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert summary["steps"] == 5 and summary["stopped_early"] and rows[-1]["step"] == 5
    unreachable = train(modular(tmp_path, "train.stop_metric=val_acc", "train.stop_value=1.5"), tmp_path / "u",
                        progress=False)
    assert unreachable["steps"] == 40 and not unreachable["stopped_early"]
    with pytest.raises(UsageError, match="train.stop_metric must be one of"):
        train(modular(tmp_path, "train.stop_metric=accuracy"), tmp_path / "bad", progress=False)


def test_convex_kind_trains_only_z_and_fits_its_training_pairs(tmp_path):
    config = modular(tmp_path, "model.kind=convex", "model.gates=4", "model.group_lasso=1e-4", "train.lr=1e-2",
                     "train.min_lr=1e-2", "train.weight_decay=0", "train.max_iters=60", "train.eval_interval=60",
                     "task.p=11")
    summary = train(config, tmp_path / "c", progress=False)
    assert summary["params"] == 4 * 11 * 4 * 32  # n d c h with n = 4 tokens, c = p outputs
    assert summary["final"]["train_acc"] > 0.9


@pytest.mark.parametrize("setting,message", [("model.kind=convex", "only available for task modular"),
                                             ("model.kind=mlp", "model.kind must be one of")])
def test_convex_kind_errors(tmp_path, capsys, setting, message):
    with pytest.raises(SystemExit):
        main(["train", str(REPRO / "attentionx_digits.toml"), "--set", setting, "--out", str(tmp_path / "r"),
              *tiny()])
    assert message in capsys.readouterr().err


def fake_run(tmp_path, residual, seed, val_acc, accs=None):
    config = {"model": {"residual": residual}, "train": {"seed": seed}}
    metrics = [{"step": step, "val_acc": acc} for step, acc in zip((10, 20, 30), accs or (0.1, 0.5, val_acc))]
    return Run(tmp_path / f"{residual}{seed}", config, metrics, {"status": "finished", "final": {"val_acc": val_acc}},
               None)


def test_paired_differences_pair_by_seed_and_verdicts_follow_the_sign_and_the_noise(tmp_path):
    base = [fake_run(tmp_path, "standard", s, acc) for s, acc in enumerate((0.90, 0.80, 0.85))]
    better = [fake_run(tmp_path, "x", s, acc) for s, acc in enumerate((0.92, 0.83, 0.86))]
    noisy = [fake_run(tmp_path, "y", s, acc) for s, acc in enumerate((0.95, 0.75, 0.85))]
    runs, keys = base + better + noisy, ["model.residual"]
    diffs = paired_differences(better, runs, {"model.residual": "standard"}, "val_acc", keys)
    np.testing.assert_allclose(diffs, [0.02, 0.03, 0.01])  # seed by seed, not mean - mean of unpaired runs
    mean, std, n, real = significance(diffs)
    assert (round(mean, 10), round(std, 10), n, real) == (0.02, 0.01, 3, True)
    claims = [{"variant": {"model.residual": name}, "than": {"model.residual": "standard"}, "metric": "val_acc"}
              for name in ("x", "y")]
    claims.append({"variant": {"model.residual": "standard"}, "than": {"model.residual": "x"}, "metric": "val_acc"})
    agree, noise, disagree = claim_sentences(claims, runs, keys)
    assert "**agrees" in agree and "within seed noise" in noise and "**disagrees" in disagree


def test_steps_to_a_threshold_and_the_delay_between_two(tmp_path):
    fast = fake_run(tmp_path, "x", 0, 0.95, accs=(0.2, 0.95, 0.99))
    assert first_step(fast, "val_acc", 0.9) == 20 and first_step(fast, "val_acc", 0.999) is None
    slow = fake_run(tmp_path, "x", 1, 0.5, accs=(0.1, 0.2, 0.5))
    for run in (fast, slow):
        run.metrics = [{**row, "train_acc": 1.0} for row in run.metrics]
    table = threshold_table(group_runs([fast, slow], ["model.residual"]), {"train_acc": 0.99, "val_acc": 0.9})
    assert table[-1] == "| residual=x | 10 ± 0 | 20 (1/2 reached) | 10 (1/2 reached) |"
