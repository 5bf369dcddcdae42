"""Hostile run directories (issue 29, part A): links planted where the project writes, --force beside a user's
files, foreign checkpoints, altered run files, typos in grids: each one error line, nothing written outside."""
import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import experiments.rundir as rundir
from experiments.cli import main
from experiments.common import UsageError
from experiments.compare_command import check_seed_file, saved_seed
from experiments.rundir import MARKER
from experiments.sweep_command import run_name

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
TINY = ["task.p=5", "model.d_model=8", "model.n_head=2", "train.max_iters=4", "train.eval_interval=2",
        "train.checkpoint_interval=2", "train.eval_iters=1", "train.patience=5"]
TRAIN = ["train", str(CONFIGS / "modular97.toml"), *[f"--set={s}" for s in TINY], "--no-progress"]
EXTEND = ["--extend", "--set=train.max_iters=6"]
SWEEP = ["sweep", str(CONFIGS / "modular97.toml"), *[f"--set={s}" for s in TINY], "--seeds", "0", "--no-progress"]


def fails(capsys, argv, code=2):
    """Run the CLI on argv, expecting exit `code` and one error line; returns the line."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit.value.code == code and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run (plateau rule on, so best.pt exists), trained once for the module."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main([*TRAIN, "--out", str(out)]) == 0
    return out


@pytest.fixture
def run(finished, tmp_path):
    """A fresh copy of the finished run."""
    copy = tmp_path / "run"
    shutil.copytree(finished, copy, symlinks=True)
    return copy


def plant(path, outside):
    """Put a link at `path` to a file in `outside` holding b"precious"; returns the target."""
    target = outside / path.name
    target.write_bytes(b"precious")
    path.unlink(missing_ok=True)
    path.symlink_to(target)
    return target


RUN_WRITES = ["config.toml", "meta.json", "metrics.jsonl", "ckpt.pt", "ckpt.prev.pt", "best.pt", "summary.json",
              "curves.png", MARKER, "ckpt.pt.tmp", "ckpt.prev.pt.tmp", "best.pt.tmp", "summary.json.tmp",
              "config.toml.tmp", "meta.json.tmp", "curves.png.tmp", MARKER + ".tmp"]


@pytest.mark.parametrize("name", RUN_WRITES)
def test_a_link_at_any_path_a_resumed_run_writes_is_refused_and_its_target_is_untouched(run, tmp_path, capsys, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = plant(run / name, outside)
    err = fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
    assert "symbolic link" in err and name.split(".tmp")[0] in err
    assert target.read_bytes() == b"precious" and (run / name).is_symlink() and os.listdir(outside) == [name]


@pytest.mark.parametrize("name", ["config.toml.tmp", "meta.json.tmp", MARKER + ".tmp"])
def test_a_link_in_a_new_run_directory_is_refused(tmp_path, capsys, name):
    outside, out = tmp_path / "outside", tmp_path / "run"
    outside.mkdir()
    out.mkdir()
    target = plant(out / name, outside)
    assert "symbolic link" in fails(capsys, [*TRAIN, "--out", str(out)])
    assert target.read_bytes() == b"precious"


def test_a_run_directory_that_is_a_link_is_refused(run, tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(run)
    before = sorted(os.listdir(run))
    assert "symbolic link" in fails(capsys, [*TRAIN, "--out", str(link), *EXTEND])
    assert "symbolic link" in fails(capsys, [*TRAIN, "--out", str(link), "--force"])
    assert sorted(os.listdir(run)) == before


@pytest.mark.parametrize("name", ["probe.json", "probe.png"])
def test_probe_refuses_a_link_at_its_outputs(run, tmp_path, capsys, name):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = plant(run / name, outside)
    assert "symbolic link" in fails(capsys, ["probe", str(run), "--batches", "1", "--force"])
    assert target.read_bytes() == b"precious"


def sweep_of(run, tmp_path):
    """A sweep directory holding a copy of `run` as its one member, with its sweep.json."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    shutil.copytree(run, sweep / "seed=0")
    (sweep / "sweep.json").write_text(json.dumps({"config": "x", "grid": {}, "seeds": [0], "runs": [
        {"name": "seed=0", "overrides": {}, "seed": 0, "status": "finished", "error": None}]}))
    return sweep


@pytest.mark.parametrize("name", ["report.md", "plot_val_loss.png", "report.md.tmp", "sweep.json"])
def test_report_refuses_a_link_in_the_sweep(run, tmp_path, capsys, name):
    sweep = sweep_of(run, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = plant(sweep / name, outside)
    assert "symbolic link" in fails(capsys, ["report", str(sweep), "--force"])
    assert target.read_bytes() == b"precious"


def test_a_sweep_member_that_is_a_link_is_refused_before_any_run(tmp_path, capsys):
    outside, out = tmp_path / "outside", tmp_path / "sweep"
    outside.mkdir()
    out.mkdir()
    (out / "seed=0").symlink_to(outside, target_is_directory=True)
    assert "symbolic link" in fails(capsys, [*SWEEP, "--out", str(out), "--force"])
    assert os.listdir(outside) == [] and not (out / "sweep.json").exists()


def test_report_refuses_a_member_linked_outside_the_sweep(run, tmp_path, capsys):
    sweep = sweep_of(run, tmp_path)
    shutil.rmtree(sweep / "seed=0")
    (sweep / "seed=0").symlink_to(run, target_is_directory=True)
    assert "outside" in fails(capsys, ["report", str(sweep)])


def test_sweep_json_as_a_link_and_its_temporary_file_are_refused(tmp_path, capsys):
    outside, out = tmp_path / "outside", tmp_path / "sweep"
    outside.mkdir()
    out.mkdir()
    target = plant(out / "sweep.json.tmp", outside)
    assert "symbolic link" in fails(capsys, [*SWEEP, "--out", str(out)])
    assert target.read_bytes() == b"precious"


def test_compare_refuses_links_at_its_runs_and_seeds(tmp_path, capsys):
    config = str(CONFIGS / "graph_consensus.toml")
    small = ["--set=train.max_iters=2", "--set=model.n_layer=2", "--set=model.d_model=8", "--set=model.n_head=2",
             "--rounds", "2", "--widths", "none", "--tied", "none", "--residuals", "standard", "--seeds", "0",
             "--no-progress"]
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("runs", "seeds"):
        out = tmp_path / name
        out.mkdir()
        (out / MARKER).write_text("compare\n")
        (out / name).symlink_to(outside, target_is_directory=True)
        err = fails(capsys, ["compare", config, *small, "--out", str(out)])
        assert "symbolic link" in err and name in err
    assert os.listdir(outside) == []


def test_force_refuses_to_remove_what_the_project_did_not_write(run, tmp_path, capsys):
    (run / "thesis.tex").write_text("years of work")
    (run / "data").mkdir()
    (run / "data" / "x.csv").write_text("1,2")
    err = fails(capsys, [*TRAIN, "--out", str(run), "--force"])
    assert "thesis.tex" in err and "data/" in err
    assert (run / "thesis.tex").is_file() and (run / "data" / "x.csv").is_file() and (run / "ckpt.pt").is_file()
    user = tmp_path / "user"
    user.mkdir()
    (user / "config.toml").write_text("[task]\n")
    (user / "thesis.tex").write_text("years of work")
    assert "thesis.tex" in fails(capsys, [*TRAIN, "--out", str(user), "--force"])
    assert (user / "config.toml").is_file() and (user / "thesis.tex").is_file()


def test_force_removes_what_the_project_wrote_there(run, capsys):
    assert main(["probe", str(run), "--batches", "1"]) == 0  # probe.json, probe.png: listed in the run's marker
    (run / "summary.json.tmp").write_text("a killed write's leftover")
    assert main([*TRAIN, "--out", str(run), "--force"]) == 0
    assert not (run / "probe.json").exists() and not (run / "summary.json.tmp").exists()
    assert (run / "summary.json").is_file()


def test_resume_refuses_a_checkpoint_from_another_run(run, tmp_path, capsys):
    other = tmp_path / "other"
    assert main([*TRAIN, "--set=train.seed=1", "--set=train.lr=0.002", "--out", str(other)]) == 0
    twin = tmp_path / "twin"  # the same config: only the run id tells it apart
    assert main([*TRAIN, "--out", str(twin)]) == 0
    for source in (other, twin):
        shutil.copyfile(source / "ckpt.pt", run / "ckpt.pt")
        rows = (run / "metrics.jsonl").read_bytes()
        assert "belongs to another run" in fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
        assert (run / "metrics.jsonl").read_bytes() == rows


def test_resume_refuses_metrics_altered_in_the_middle_before_training(run, capsys):
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = "#" * (len(lines[1]) - 1) + "\n"  # garbage of the same length: the checkpoint still fits
    (run / "metrics.jsonl").write_text("".join(lines))
    before = (run / "ckpt.pt").read_bytes()
    err = fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
    assert "metrics.jsonl, line 2" in err
    assert (run / "ckpt.pt").read_bytes() == before and (run / "metrics.jsonl").read_text() == "".join(lines)


@pytest.mark.parametrize("entries", [
    {"model": 5}, {"model": {"w": "text"}}, {"model": {}, "optimizer": [], "rng": torch.zeros(3, dtype=torch.uint8),
                                             "state": {"step": 1, "metrics_bytes": 0}},
    {"rng": "x"}, {"state": {"step": "one", "metrics_bytes": 0}}, {"state": {"step": 1, "metrics_bytes": -5}}])
def test_crafted_weights_only_checkpoints_are_one_line(run, capsys, entries):
    checkpoint = torch.load(run / "ckpt.pt", weights_only=True)
    torch.save({**checkpoint, **entries}, run / "ckpt.pt")
    torch.save({**checkpoint, **entries}, run / "ckpt.prev.pt")
    assert "ckpt" in fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
    if "model" in entries:
        assert "ckpt.pt" in fails(capsys, ["probe", str(run), "--batches", "1", "--force"])


SWEEP_SHAPES = [[], {"runs": {}}, {"runs": [1]}, {"runs": [{"status": "finished"}]}, {"runs": [{"name": "../x"}]},
                {"runs": [{"name": "seed=0", "status": "done"}]}, {"runs": [{"name": "seed=0", "overrides": []}]},
                {"runs": [{"name": "seed=0", "seed": "zero"}]}, {"runs": [{"name": "seed=0"}, {"name": "seed=0"}]},
                {"runs": [], "grid": [1]}, {"runs": [{"name": "seed=0", "error": 3}]}]


@pytest.mark.parametrize("shape", SWEEP_SHAPES)
def test_a_hand_edited_sweep_json_is_one_line(run, tmp_path, capsys, shape):
    sweep = sweep_of(run, tmp_path)
    (sweep / "sweep.json").write_text(json.dumps(shape))
    for command in (["report", str(sweep)], ["plot", str(sweep)]):
        assert "sweep.json" in fails(capsys, command)


@pytest.mark.parametrize("value", ['"abc"', "[1]", "{}", "true"])
def test_non_numeric_metric_values_are_one_line_in_plot_and_report(run, tmp_path, capsys, value):
    sweep = sweep_of(run, tmp_path)
    metrics = sweep / "seed=0" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"train_loss": ', f'"train_loss": {value}, "was": ', 1)
    metrics.write_text("".join(lines))
    for command in (["report", str(sweep)], ["plot", str(sweep), "--out", str(tmp_path / "p.png")]):
        assert "metrics.jsonl, line 2" in fails(capsys, command)


@pytest.mark.parametrize("summary", ['[]', '{"status": 1}', '{"status": "finished", "final": {"val_loss": "x"}}',
                                     '{"status": "finished", "steps": "ten"}'])
def test_a_malformed_summary_is_one_line(run, tmp_path, capsys, summary):
    (run / "summary.json").write_text(summary)
    assert "summary.json" in fails(capsys, ["plot", str(run), "--out", str(tmp_path / "p.png")])


@pytest.mark.parametrize("saved", [[], {"key": 1}, {"key": 1, "fitted": [], "curves": [], "log_errors": {}},
                                   {"key": 1, "fitted": {}, "curves": [1], "log_errors": {}},
                                   {"key": 1, "fitted": {}, "curves": [], "log_errors": {"no tab": [1.0]}},
                                   {"key": 1, "fitted": {}, "curves": [], "log_errors": {"a\tb": ["x"]}}])
def test_malformed_compare_seed_files_are_one_line(tmp_path, saved):
    path = tmp_path / "seed=0.json"
    path.write_text(json.dumps(saved))
    with pytest.raises(UsageError, match="seed=0.json"):
        saved_seed(path, key=1)
    path.write_text("{not json")
    with pytest.raises(UsageError, match="seed=0.json"):
        saved_seed(path, key=1)
    check_seed_file({"key": 1, "fitted": {}, "curves": [{}], "log_errors": {"a\tb": [1.0, None]}}, path)


def test_run_names_over_255_bytes_are_one_line(tmp_path, capsys):
    with pytest.raises(UsageError, match="255"):
        run_name({"task.data": "x" * 300}, 0)
    assert "300 bytes" in fails(capsys, [*TRAIN, "--out", str(tmp_path / ("r" * 300))])


def test_a_full_disk_while_writing_a_plot_is_one_line_exit_1(run, tmp_path, capsys, monkeypatch):
    real_open = open

    def full(path, *args, **kwargs):
        if str(path).endswith(".png.tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(rundir, "open", full, raising=False)
    err = fails(capsys, ["plot", str(run), "--out", str(tmp_path / "p.png")], code=1)
    assert "No space left on device" in err and "p.png" in err and not list(tmp_path.glob("p.png*"))


def test_typos_in_grids_and_lists_fail_before_anything_runs_or_is_written(tmp_path, capsys):
    out = tmp_path / "compare"
    config = str(CONFIGS / "graph_consensus.toml")
    assert "beleif" in fails(capsys, ["compare", config, "--residuals", "standard,beleif", "--out", str(out)])
    assert "beleif" in fails(capsys, ["compare", config, "--tied", "beleif", "--out", str(out)])
    assert "beleif" in fails(capsys, ["compare", config, "--width-residual", "beleif", "--out", str(out)])
    assert "beleif" in fails(capsys, [*SWEEP, "--grid", "model.residual=standard,beleif", "--out", str(out)])
    assert not out.exists()


def test_network_sweep_writes_only_into_its_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["network-sweep", "--nodes", "8", "--seeds", "2", "--iters", "50"]) == 0
    assert os.listdir(tmp_path) == ["runs"] and os.listdir(tmp_path / "runs") == ["network-sweep"]
    assert sorted(os.listdir(tmp_path / "runs" / "network-sweep")) == [MARKER, "network_sweep.md", "network_sweep.png"]


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**20) | st.floats(allow_nan=True) |
                    st.text(max_size=8), lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.sampled_from(["step", "val_loss", "train_loss", "status", "runs", "name",
                                                     "final", "seed", "key", "fitted", "curves", "log_errors"]),
                                    inner, max_size=4), max_leaves=8)


def one_line_or_success(capsys, argv):
    """main(argv) returns 0 or exits 2 with one error line; anything else (a traceback) fails the test."""
    try:
        assert main(argv) == 0
    except SystemExit as exit:
        err = capsys.readouterr().err.strip()
        assert exit.code == 2 and "\n" not in err and "Traceback" not in err, err
    capsys.readouterr()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=JSON, sweep=JSON, summary=JSON)
def test_any_run_file_content_is_success_or_one_line(finished, tmp_path, capsys, row, sweep, summary):
    base = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    shutil.copytree(finished, base / "seed=0")
    run = base / "seed=0"
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join([lines[0], json.dumps(row) + "\n", *lines[1:]]))
    (run / "summary.json").write_text(json.dumps(summary))
    (base / "sweep.json").write_text(json.dumps(sweep))
    one_line_or_success(capsys, ["report", str(base), "--metrics", "val_loss"])
    one_line_or_success(capsys, ["plot", str(run), "--out", str(base / "p.png")])
    try:
        saved_seed(base / "sweep.json", key=None)  # the same contents as a compare seed file
    except UsageError:
        pass
