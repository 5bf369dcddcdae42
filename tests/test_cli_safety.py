"""Nothing overwritten without --force, Ctrl-C in train and sweep, sweep grids checked up front, clear --set errors."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_runs import write_run

from experiments.cli import main
from experiments.config import load_config
from experiments.errors import UsageError, package_version
from experiments.results_doc import replace_section, stored_scale
from experiments.runs import expand, group_runs

CONFIG = str(Path(__file__).resolve().parents[1] / "experiments" / "configs" / "modular97.toml")
TINY = [
    "task.p=11",
    "model.d_model=16",
    "model.n_head=2",
    "model.dropout=0.1",
    "train.eval_interval=50",
    "train.eval_iters=2",
]
PYTHON = [sys.executable, "-m", "experiments"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny models: threads only contend


def error_of(capsys, argv):
    """The one error line of a command that must fail with exit status 2."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    message = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and "\n" not in message
    return message


def test_a_section_from_a_larger_run_is_kept_without_force(tmp_path):
    path = tmp_path / "R.md"
    path.write_text("# R\n\n<!-- begin old -->\nno sizes\n<!-- end old -->\n")
    assert stored_scale(path.read_text(), "old") == {}
    replace_section(path, "old", "now sized", scale={"steps": 10, "seeds": 1})  # an unsized marker is replaced
    replace_section(path, "a", "big", scale={"steps": 1000, "seeds": 5})
    assert '<!-- begin a {"steps": 1000, "seeds": 5} -->' in path.read_text()
    for smaller in ({"steps": 10, "seeds": 5}, {"steps": 1000, "seeds": 2}, None):
        with pytest.raises(UsageError, match=r"section a .*steps 1000, seeds 5.*--force"):
            replace_section(path, "a", "small", scale=smaller)
    assert "big" in path.read_text()
    replace_section(path, "a", "bigger", scale={"steps": 2000, "seeds": 5})
    replace_section(path, "a", "forced", scale={"steps": 1, "seeds": 1}, force=True)
    text = path.read_text()
    assert "forced" in text and "bigger" not in text and "now sized" in text and text.count("<!-- end a -->") == 1
    assert stored_scale(text, "a") == {"steps": 1, "seeds": 1}


def sweep_dir(root, seeds, max_iters=100):
    for seed in seeds:
        write_run(root / f"seed={seed}", seed=seed)
        config = root / f"seed={seed}" / "config.toml"
        config.write_text(config.read_text().replace("max_iters = 100", f"max_iters = {max_iters}"))
    return root


def test_report_replaces_nothing_without_force_and_records_its_scale(tmp_path, capsys):
    big, small, results = sweep_dir(tmp_path / "big", (0, 1)), sweep_dir(tmp_path / "small", (0,)), tmp_path / "R.md"
    assert main(["report", str(big), "--results", str(results)]) == 0
    assert stored_scale(results.read_text(), "repro-big") == {"steps": 100, "seeds": 2}
    assert "report.md exists" in error_of(capsys, ["report", str(big)])
    assert main(["report", str(big), "--force"]) == 0
    (small.parent / "big_copy").mkdir()
    small = small.rename(tmp_path / "big_copy" / "big")  # same section name, fewer seeds
    before = results.read_text()
    message = error_of(capsys, ["report", str(small), "--results", str(results)])
    assert "section repro-big" in message and "seeds 2" in message and "seeds 1" in message and "--force" in message
    assert results.read_text() == before and not (small / "report.md").exists()
    assert main(["report", str(small), "--results", str(results), "--force"]) == 0
    assert stored_scale(results.read_text(), "repro-big") == {"steps": 100, "seeds": 1}


def test_plot_and_sweep_refuse_what_they_did_not_make(tmp_path, capsys):
    run = sweep_dir(tmp_path / "runs", (0,))
    (tmp_path / "fig.png").write_text("precious")
    assert "fig.png exists" in error_of(capsys, ["plot", str(run), "--out", str(tmp_path / "fig.png")])
    assert (tmp_path / "fig.png").read_text() == "precious"
    assert main(["plot", str(run), "--out", str(tmp_path / "fig.png"), "--force"]) == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    argv = [
        "sweep",
        CONFIG,
        "--no-progress",
        *[f"--set={s}" for s in TINY],
        "--set=train.max_iters=2",
        "--out",
        str(tmp_path / "mine"),
    ]
    assert "not empty" in error_of(capsys, argv)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    "grid, culprit",
    [
        ("model.residual=standard,beleif", "--grid model.residual=\"beleif\": unknown model.residual 'beleif'"),
        ("model.kernel=softmax,cosine", "unknown model.kernel 'cosine'"),
        ("model.n_head=4,3", "--grid model.n_head=3: [model]: d_model (128) must be divisible by n_head (3)"),
        ("model.residul=belief", "unknown key model.residul"),
        ("train.lr=0.1,-1", "train.lr must be > 0"),
        ("task.colour=red", "task.colour"),
    ],
)
def test_sweep_checks_every_grid_value_before_the_first_run(tmp_path, capsys, grid, culprit):
    message = error_of(capsys, ["sweep", CONFIG, "--grid", grid, "--out", str(tmp_path / "s")])
    assert culprit in message
    assert not (tmp_path / "s").exists()


def test_set_names_itself_as_the_source_of_an_unknown_key():
    with pytest.raises(UsageError, match=r"^--set: unknown key\(s\) model.residul"):
        load_config(CONFIG, ["model.residul=belief"])
    with pytest.raises(UsageError, match=r"^--set: unknown table"):
        load_config(CONFIG, ["optim.lr=1"])


def test_labels_leave_out_keys_the_run_does_not_use(tmp_path):
    for name, model in [
        ("a", {"residual": "belief", "gamma": 1.0}),
        ("b", {"residual": "belief", "gamma": 3.0}),
        ("c", {"residual": "attentionx", "gamma": 3.0}),
        ("d", {"residual": "standard", "gamma": 1.0}),
    ]:
        write_run(tmp_path / name, model=model)
    groups = group_runs(expand([tmp_path]))
    assert {name: len(runs) for name, runs in groups.items()} == {
        "residual=belief": 2,
        "residual=attentionx, gamma=3.0": 1,
        "residual=standard": 1,
    }


def wait_for_rows(path, count, process):
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        if path.is_file() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} never reached {count} rows")


def rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_ctrl_c_in_train_checkpoints_and_the_printed_command_resumes_exactly(tmp_path):
    argv = [
        "train",
        CONFIG,
        *[f"--set={s}" for s in TINY],
        "--set=train.max_iters=1500",
        "--set=train.checkpoint_interval=1000",
        "--no-progress",
    ]
    subprocess.run([*PYTHON, *argv, "--out", str(tmp_path / "whole")], check=True, capture_output=True, env=ENV)
    victim = subprocess.Popen(
        [*PYTHON, *argv, "--out", str(tmp_path / "cut")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    wait_for_rows(tmp_path / "cut" / "metrics.jsonl", 300, victim)
    victim.send_signal(signal.SIGINT)
    _, stderr = victim.communicate(timeout=60)
    assert victim.returncode == 130 and "Traceback" not in stderr and stderr.count("\n") == 1
    step = len(rows(tmp_path / "cut"))
    assert 300 <= step < 1000 and f"at step {step}, checkpoint saved" in stderr
    command = shlex.split(stderr.split("resume with: ")[1])
    assert command[:2] == ["pdmm-bridge", "train"] and "--resume" in command
    subprocess.run([*PYTHON, *command[1:]], check=True, capture_output=True, env=ENV)
    assert rows(tmp_path / "cut") != [] and [
        (r["step"], r["train_loss"], r.get("val_loss")) for r in rows(tmp_path / "cut")
    ] == [(r["step"], r["train_loss"], r.get("val_loss")) for r in rows(tmp_path / "whole")]


def test_ctrl_c_in_a_sweep_prints_the_command_that_resumes_it(tmp_path):
    out = tmp_path / "s"
    argv = [
        "sweep",
        CONFIG,
        *[f"--set={s}" for s in TINY],
        "--set=train.max_iters=600",
        "--grid",
        "model.residual=standard,belief",
        "--no-progress",
        "--out",
        str(out),
    ]
    victim = subprocess.Popen([*PYTHON, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    wait_for_rows(out / "residual=standard,seed=0" / "metrics.jsonl", 100, victim)
    victim.send_signal(signal.SIGINT)
    _, stderr = victim.communicate(timeout=60)
    assert victim.returncode == 130 and "Traceback" not in stderr and "residual=standard,seed=0 at step" in stderr
    assert [r["status"] for r in json.loads((out / "sweep.json").read_text())["runs"]] == ["pending", "pending"]
    command = shlex.split(stderr.split("resume with the same command: ")[1])
    resumed = subprocess.run([*PYTHON, *command[1:]], capture_output=True, text=True, env=ENV)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr
    assert [r["status"] for r in json.loads((out / "sweep.json").read_text())["runs"]] == ["finished", "finished"]
    assert json.loads((out / "sweep.json").read_text())["version"] == package_version()
    assert [r["step"] for r in rows(out / "residual=standard,seed=0")] == list(range(1, 601))
