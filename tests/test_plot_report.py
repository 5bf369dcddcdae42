"""pdmm-bridge plot and report on synthetic run directories written in the trainer's format."""

import json
import statistics

import numpy as np
import pytest
from fake_runs import EVALS, write_run

from experiments.cli import main
from experiments.plots import plot_metric
from experiments.runs import expand, group_runs, load_run


@pytest.fixture
def sweep(tmp_path):
    """2 variants x 2 finished seeds, belief seed 2 failed at step 30, standard seed 2 pending (no directory)."""
    root = tmp_path / "sweep"
    entries, evals = [], {}
    for residual in ("standard", "belief"):
        for seed in (0, 1, 2):
            name = f"residual={residual},seed={seed}"
            status = "finished" if seed < 2 else "failed" if residual == "belief" else "pending"
            if status != "pending":
                evals[name] = write_run(root / name, residual, seed, 100 if seed < 2 else 30, status == "finished")
            entries.append(
                {
                    "name": name,
                    "overrides": {"model.residual": residual},
                    "seed": seed,
                    "status": status,
                    "error": "RuntimeError: loss is nan" if status == "failed" else None,
                }
            )
    (root / "sweep.json").write_text(
        json.dumps(
            {
                "config": "char.toml",
                "grid": {"model.residual": ["standard", "belief"]},
                "seeds": [0, 1, 2],
                "runs": entries,
            }
        )
    )
    return root, evals


def test_runs_group_by_the_config_keys_that_differ_seed_excepted(sweep, tmp_path):
    root, _ = sweep
    groups = group_runs(expand([root]))
    assert {name: [run.seed for run in runs] for name, runs in groups.items()} == {
        "residual=standard": [0, 1],
        "residual=belief": [0, 1, 2],
    }
    for kernel, symmetric in (("softmax", False), ("diff", True)):
        write_run(tmp_path / f"{kernel}", seed=3, model={"kernel": kernel, "symmetric": symmetric})
    write_run(tmp_path / "diff_seed4", seed=4, model={"kernel": "diff", "symmetric": True})
    labels = group_runs(expand([tmp_path / "softmax", tmp_path / "diff", tmp_path / "diff_seed4"]))
    assert {name: len(runs) for name, runs in labels.items()} == {
        "kernel=softmax, symmetric=False": 1,
        "kernel=diff, symmetric=True": 2,
    }
    assert list(group_runs(expand([tmp_path / "diff", tmp_path / "diff_seed4"]))) == ["char_lm"]


def test_a_killed_runs_cut_last_line_is_ignored(sweep):
    root, _ = sweep
    run = load_run(root / "residual=belief,seed=2")
    assert [row["step"] for row in run.metrics] == [0, 10, 20, 30] and run.summary is None
    assert [run.name for run in expand([root]) if run.failed] == ["residual=belief,seed=2"]


def cell_values(text):
    return [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]


def test_report_has_one_row_per_variant_with_mean_and_std_over_finished_seeds(sweep, capsys):
    root, evals = sweep
    assert main(["report", str(root)]) == 0
    assert capsys.readouterr().out.strip() == str(root / "report.md")
    report = (root / "report.md").read_text()
    head, rule, *rows = cell_values(report)
    head = [h.strip() for h in head]
    assert head[:4] == ["variant", "seeds", "final val_loss", "best val_loss"] and head[-3:] == [
        "params",
        "s/step",
        "tokens/s",
    ]
    assert "final train_acc" in head and len(rows) == 2
    for row, residual in zip(rows, ("standard", "belief"), strict=False):
        cells = dict(zip(head, (c.strip() for c in row), strict=False))
        assert cells["variant"] == f"residual={residual}" and cells["seeds"] == "2/3"
        runs = [evals[f"residual={residual},seed={seed}"] for seed in (0, 1)]
        for metric, pick in (("val_loss", min), ("val_acc", max), ("train_acc", max)):
            for kind, values in (("final", [e[metric][-1] for e in runs]), ("best", [pick(e[metric]) for e in runs])):
                expected = f"{statistics.mean(values):.4g} ± {statistics.stdev(values):.2g}"
                assert cells[f"{kind} {metric}"] == expected
        assert cells["params"] == "12,345" and cells["tokens/s"] == "1,500"
        assert float(cells["s/step"]) == pytest.approx(0.0525, rel=1e-3)
    below = report[report.index("Runs not finished") :]
    assert "`residual=belief,seed=2`: failed (last step 30; RuntimeError: loss is nan)" in below
    assert "`residual=standard,seed=2`: pending, no run directory" in below
    for metric in ("val_loss", "val_acc"):
        assert f"![{metric}](plot_{metric}.png)" in report
        assert (root / f"plot_{metric}.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_draws_one_curve_per_variant_on_the_steps_all_seeds_logged(sweep, tmp_path, capsys):
    root, evals = sweep
    runs = [run for run in expand([root]) if not run.failed]
    fig = plot_metric(runs, "val_loss", tmp_path / "loss.png")
    by_step, by_time = fig.axes
    assert len(by_step.lines) == len(by_time.lines) == 2
    assert [line.get_label() for line in by_step.lines] == ["residual=standard (2 seeds)", "residual=belief (2 seeds)"]
    belief = by_step.lines[1]
    np.testing.assert_array_equal(belief.get_xdata(), EVALS)
    expected = np.mean([evals[f"residual=belief,seed={seed}"]["val_loss"] for seed in (0, 1)], axis=0)
    np.testing.assert_allclose(belief.get_ydata(), expected)
    np.testing.assert_allclose(by_time.lines[1].get_xdata(), np.array(EVALS) * 0.05 * 1.05)

    assert main(["plot", str(root), "--metric", "train_loss"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(root / "plot_train_loss.png") and "failed run(s) residual=belief,seed=2" in err
    assert (root / "plot_train_loss.png").is_file()


@pytest.mark.parametrize(
    "command, culprit",
    [
        (["plot", "{tmp}"], "not a run directory"),
        (["plot", "{tmp}/missing"], "no such directory"),
        (["plot", "{broken}"], "cannot read the config"),
        (["plot", "{sweep}", "--metric", "val_perplexity"], "val_perplexity"),
        (["report", "{failed}"], "no finished run"),
        (["report", "{sweep}", "--metrics", "val_perplexity"], "val_perplexity"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_code_2(sweep, tmp_path, capsys, command, culprit):
    root, _ = sweep
    (tmp_path / "empty").mkdir()
    failed = tmp_path / "failed"
    write_run(failed / "run0", last_step=30, finished=False)
    write_run(tmp_path / "broken")
    (tmp_path / "broken" / "config.toml").write_text("[model\nresidual = belief\n")
    with pytest.raises(SystemExit) as exit:
        main(
            [
                arg.format(tmp=tmp_path / "empty", sweep=root, failed=failed, broken=tmp_path / "broken")
                for arg in command
            ]
        )
    assert exit.value.code == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith(f"pdmm-bridge {command[0]}: error: ") and "\n" not in message
    assert culprit in message
    if "val_perplexity" in command and command[0] == "plot":
        assert "train_loss, lr, val_loss, val_acc, train_acc" in message
