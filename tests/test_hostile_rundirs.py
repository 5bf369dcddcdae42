"""Hostile run directories (issue 29, part A): links planted where the project writes, --force beside a user's
files, foreign checkpoints, altered run files, typos in grids: each one error line, nothing written outside."""

import errno
import json
import os
import resource
import shutil
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_runs import CONFIGS, TINY, TRAIN, fails, forge

import experiments.rundir_descriptors as descriptors
from bridge.comparison import check_seed_json
from experiments.cli import main, out_of_memory
from experiments.compare_runs import SeedFiles
from experiments.errors import UsageError
from experiments.grid import run_name
from experiments.results_doc import replace_section
from experiments.rundir import MARKER

EXTEND = ["--extend", "--set=train.max_iters=6"]
SWEEP = ["sweep", str(CONFIGS / "modular97.toml"), *[f"--set={s}" for s in TINY], "--seeds", "0", "--no-progress"]


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


RUN_WRITES = [
    "config.toml",
    "meta.json",
    "metrics.jsonl",
    "ckpt.pt",
    "ckpt.prev.pt",
    "best.pt",
    "summary.json",
    "curves.png",
    MARKER,
    "ckpt.pt.tmp",
    "ckpt.prev.pt.tmp",
    "best.pt.tmp",
    "summary.json.tmp",
    "config.toml.tmp",
    "meta.json.tmp",
    "curves.png.tmp",
    MARKER + ".tmp",
]


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
    (sweep / "sweep.json").write_text(
        json.dumps(
            {
                "config": "x",
                "grid": {},
                "seeds": [0],
                "runs": [{"name": "seed=0", "overrides": {}, "seed": 0, "status": "finished", "error": None}],
            }
        )
    )
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
    small = [
        "--set=train.max_iters=2",
        "--set=model.n_layer=2",
        "--set=model.d_model=8",
        "--set=model.n_head=2",
        "--rounds",
        "2",
        "--widths",
        "none",
        "--tied",
        "none",
        "--residuals",
        "standard",
        "--seeds",
        "0",
        "--no-progress",
    ]
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("runs", "seeds"):
        out = tmp_path / name
        out.mkdir()
        (out / name).symlink_to(outside, target_is_directory=True)
        err = fails(capsys, ["compare", config, *small, "--out", str(out), "--force"])
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
    assert main(["probe", str(run), "--batches", "1"]) == 0  # probe.json, probe.png: recorded in the run's marker
    (run / "summary.json.tmp").write_text("")  # a write killed before its first byte: removing it loses nothing
    assert main([*TRAIN, "--out", str(run), "--force"]) == 0
    assert not (run / "probe.json").exists() and not (run / "summary.json.tmp").exists()
    assert (run / "summary.json").is_file()
    (run / "config.toml.tmp").write_text("not what pdmm-bridge wrote")
    assert "config.toml.tmp" in fails(capsys, [*TRAIN, "--out", str(run), "--force"])
    assert (run / "config.toml.tmp").read_text() == "not what pdmm-bridge wrote"


def test_resume_refuses_a_checkpoint_from_another_run(run, tmp_path, capsys):
    other = tmp_path / "other"
    assert main([*TRAIN, "--set=train.seed=1", "--set=train.lr=0.002", "--out", str(other)]) == 0
    twin = tmp_path / "twin"  # the same config: only the run id tells it apart
    assert main([*TRAIN, "--out", str(twin)]) == 0
    for source in (other, twin):
        shutil.copyfile(source / "ckpt.pt", run / "ckpt.pt")
        rows = (run / "metrics.jsonl").read_bytes()
        assert "ckpt.pt, which pdmm-bridge did not write" in fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
        forge(run, "ckpt.pt")
        assert "belongs to another run" in fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
        assert (run / "metrics.jsonl").read_bytes() == rows


def test_resume_refuses_metrics_altered_in_the_middle_before_training(run, capsys):
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = "#" * (len(lines[1]) - 1) + "\n"  # garbage of the same length: the checkpoint still fits
    (run / "metrics.jsonl").write_text("".join(lines))
    forge(run, "metrics.jsonl")
    before = (run / "ckpt.pt").read_bytes()
    err = fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
    assert "metrics.jsonl, line 2" in err
    assert (run / "ckpt.pt").read_bytes() == before and (run / "metrics.jsonl").read_text() == "".join(lines)


@pytest.mark.parametrize(
    "entries",
    [
        {"model": 5},
        {"model": {"w": "text"}},
        {
            "model": {},
            "optimizer": [],
            "rng": torch.zeros(3, dtype=torch.uint8),
            "state": {"step": 1, "metrics_bytes": 0},
        },
        {"rng": "x"},
        {"state": {"step": "one", "metrics_bytes": 0}},
        {"state": {"step": 1, "metrics_bytes": -5}},
    ],
)
def test_crafted_weights_only_checkpoints_are_one_line(run, capsys, entries):
    checkpoint = torch.load(run / "ckpt.pt", weights_only=True)
    torch.save({**checkpoint, **entries}, run / "ckpt.pt")
    torch.save({**checkpoint, **entries}, run / "ckpt.prev.pt")
    forge(run, "ckpt.pt", "ckpt.prev.pt")
    err = fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
    assert "ckpt" in err and "did not write" not in err
    if "model" in entries:
        assert "ckpt.pt" in fails(capsys, ["probe", str(run), "--batches", "1", "--force"])


SWEEP_SHAPES = [
    [],
    {"runs": {}},
    {"runs": [1]},
    {"runs": [{"status": "finished"}]},
    {"runs": [{"name": "../x"}]},
    {"runs": [{"name": "seed=0", "status": "done"}]},
    {"runs": [{"name": "seed=0", "overrides": []}]},
    {"runs": [{"name": "seed=0", "seed": "zero"}]},
    {"runs": [{"name": "seed=0"}, {"name": "seed=0"}]},
    {"runs": [], "grid": [1]},
    {"runs": [{"name": "seed=0", "error": 3}]},
    {"runs": [{"name": "seed=0", "status": "finished"}], "grid": {"model.residual": 5}},
    {"runs": [{"name": "x" * 300}]},
    {"runs": [{"name": "a\0b"}]},
    {"runs": [{"name": "\ud800"}]},
]


@pytest.mark.parametrize("shape", SWEEP_SHAPES)
def test_a_hand_edited_sweep_json_is_one_line(run, tmp_path, capsys, shape):
    sweep = sweep_of(run, tmp_path)
    (sweep / "sweep.json").write_text(json.dumps(shape))
    for command in (["report", str(sweep)], ["plot", str(sweep)]):
        assert "sweep.json" in fails(capsys, command)


@pytest.mark.parametrize("value", ['"abc"', "[1]", "{}", "true", "1" + "0" * 400])
def test_non_numeric_metric_values_are_one_line_in_plot_and_report(run, tmp_path, capsys, value):
    sweep = sweep_of(run, tmp_path)
    metrics = sweep / "seed=0" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"train_loss": ', f'"train_loss": {value}, "was": ', 1)
    metrics.write_text("".join(lines))
    for command in (["report", str(sweep)], ["plot", str(sweep), "--out", str(tmp_path / "p.png")]):
        assert "metrics.jsonl, line 2" in fails(capsys, command)


@pytest.mark.parametrize(
    "summary",
    [
        "[]",
        '{"status": 1}',
        '{"status": "finished", "final": {"val_loss": "x"}}',
        '{"status": "finished", "steps": "ten"}',
    ],
)
def test_a_malformed_summary_is_one_line(run, tmp_path, capsys, summary):
    (run / "summary.json").write_text(summary)
    assert "summary.json" in fails(capsys, ["plot", str(run), "--out", str(tmp_path / "p.png")])


@pytest.mark.parametrize(
    "saved",
    [
        [],
        {"key": 1},
        {"key": 1, "fitted": [], "curves": [], "log_errors": {}},
        {"key": 1, "fitted": {}, "curves": [1], "log_errors": {}},
        {"key": 1, "fitted": {}, "curves": [], "log_errors": {"no tab": [1.0]}},
        {"key": 1, "fitted": {}, "curves": [], "log_errors": {"ball oracle\tb": ["x"]}},
    ],
)
def test_malformed_compare_seed_files_are_one_line(tmp_path, saved):
    path = tmp_path / "seed=0.json"
    path.write_text(json.dumps(saved))
    with pytest.raises(UsageError, match="seed=0.json"):
        SeedFiles(tmp_path, 1, 2).load(0)
    path.write_text("{not json")
    with pytest.raises(UsageError, match="seed=0.json"):
        SeedFiles(tmp_path, 1, 2).load(0)
    curve = {"method": "transformer (standard)", "seed": 0, "step": 3, "val_loss": 1.5, "val_error": None}
    check_seed_json({"key": 1, "fitted": {}, "curves": [curve], "log_errors": {"ball oracle\tb": [1.0, None]}})


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

    monkeypatch.setattr(descriptors, "open", full, raising=False)
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
    assert sorted(os.listdir(tmp_path / "runs" / "network-sweep")) == [
        MARKER,
        "network_sweep.json",
        "network_sweep.md",
        "network_sweep.png",
    ]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**20) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "step",
                    "val_loss",
                    "train_loss",
                    "status",
                    "runs",
                    "name",
                    "final",
                    "seed",
                    "key",
                    "fitted",
                    "curves",
                    "log_errors",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=8,
)


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
    (base / "seed=0.json").write_text(json.dumps(sweep))  # the same contents as a compare seed file
    try:
        SeedFiles(base, None, 2).load(0)
    except UsageError:
        pass


# Found by attacking a fresh clone (issue 29, review): each failed before its fix.


def test_a_hard_linked_metrics_file_is_refused_and_the_other_name_untouched(run, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.link(run / "metrics.jsonl", outside / "metrics.jsonl")
    before = (outside / "metrics.jsonl").read_bytes()
    assert "hard links" in fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
    assert (outside / "metrics.jsonl").read_bytes() == before


def test_a_directory_at_a_file_the_resume_writes_is_refused_before_training(run, capsys):
    (run / "summary.json").unlink()
    (run / "summary.json").mkdir()
    rows = (run / "metrics.jsonl").read_bytes()
    assert "not a regular file" in fails(capsys, [*TRAIN, "--out", str(run), "--resume"])
    assert (run / "metrics.jsonl").read_bytes() == rows


def test_a_named_pipe_in_a_run_is_one_line_not_a_reader_waiting_for_ever(run, tmp_path):
    sweep = sweep_of(run, tmp_path)
    (sweep / "seed=0" / "config.toml").unlink()
    os.mkfifo(sweep / "seed=0" / "config.toml")
    result = subprocess.run(
        [sys.executable, "-m", "experiments", "report", str(sweep)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 2 and "not a regular file" in result.stderr and "Traceback" not in result.stderr


def test_plot_without_out_draws_into_its_one_directory_never_the_current_one(run, tmp_path, capsys, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["plot", str(run)]) == 0 and (run / "plot_val_loss.png").is_file()
    assert "--out" in fails(capsys, ["plot", str(run), str(run), "--force"])
    assert os.listdir(here) == []
    assert "no run logs" in fails(
        capsys, ["plot", str(run), "--metric", "nothing", "--out", str(tmp_path / "new/p.png")]
    )
    assert not (tmp_path / "new").exists()


def wrong_optimizer_shape(checkpoint):
    state = next(iter(checkpoint["optimizer"]["state"].values()))
    state["exp_avg"] = torch.zeros(1)


def wrong_optimizer_setting(checkpoint):
    checkpoint["optimizer"]["param_groups"][0]["betas"] = "x"


def wrong_rng_size(checkpoint):
    checkpoint["rng"] = torch.zeros(3, dtype=torch.uint8)


def wrong_rng_bytes(checkpoint):
    checkpoint["rng"] = torch.randint(
        0, 256, checkpoint["rng"].shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )


@pytest.mark.parametrize("craft", [wrong_optimizer_shape, wrong_optimizer_setting, wrong_rng_size, wrong_rng_bytes])
def test_a_checkpoint_whose_state_cannot_be_loaded_is_refused_before_training(run, capsys, craft):
    for name in ("ckpt.pt", "ckpt.prev.pt"):
        checkpoint = torch.load(run / name, weights_only=True)
        craft(checkpoint)
        torch.save(checkpoint, run / name)
    forge(run, "ckpt.pt", "ckpt.prev.pt")
    rows = (run / "metrics.jsonl").read_bytes()
    assert "does not fit this config" in fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
    assert (run / "metrics.jsonl").read_bytes() == rows


@pytest.mark.parametrize("meta", ['"abc"', "[1]", '{"run_id": 5}', '{"extended": 5}'])
def test_a_malformed_meta_json_is_one_line(run, tmp_path, capsys, meta):
    if "extended" in meta:  # the run's own id, so only extended is wrong
        meta = json.dumps({**json.loads((run / "meta.json").read_text()), "extended": 5})
    (run / "meta.json").write_text(meta)
    forge(run, "meta.json")
    err = fails(capsys, [*TRAIN, "--out", str(run), *EXTEND])
    assert "meta.json" in err and "did not write" not in err
    assert "meta.json" in fails(capsys, ["report", str(sweep_of(run, tmp_path))])


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: "train = 5\n",
        lambda text: text.replace("seed = 0", 'seed = "x"'),
        lambda text: text.replace("max_iters = 4", 'max_iters = "x"'),
        lambda text: "a = " + "[" * 100_000 + "]" * 100_000,
    ],
)
def test_a_malformed_config_toml_in_a_sweep_is_one_line(run, tmp_path, capsys, edit):
    sweep = sweep_of(run, tmp_path)
    shutil.copytree(sweep / "seed=0", sweep / "seed=1")
    (sweep / "sweep.json").unlink()
    config = sweep / "seed=1" / "config.toml"
    config.write_text(edit(config.read_text()))
    for command in (["report", str(sweep)], ["plot", str(sweep)]):
        assert "seed=1" in fails(capsys, command)


@pytest.mark.parametrize("where", ["sweep.json", "metrics.jsonl"])
def test_json_nested_too_deeply_is_one_line(run, tmp_path, capsys, where):
    sweep = sweep_of(run, tmp_path)
    deep = "[" * 100_000 + "]" * 100_000
    if where == "sweep.json":
        (sweep / "sweep.json").write_text(deep)
    else:
        with open(sweep / "seed=0" / "metrics.jsonl", "a") as file:
            file.write(f'{{"step": 9, "x": {deep}}}\n')
    assert "nested too deeply" in fails(capsys, ["report", str(sweep)])
    assert "nested too deeply" in fails(capsys, [*TRAIN, f"--set=model.n_layer={deep}", "--out", str(tmp_path / "x")])


def test_a_step_beyond_int64_is_one_line(run, capsys, tmp_path):
    with open(run / "metrics.jsonl", "a") as file:
        file.write(json.dumps({"step": 10**30, "train_loss": 1.0}) + "\n")
    assert "2^63" in fails(capsys, ["plot", str(run), "--metric", "train_loss", "--out", str(tmp_path / "p.png")])


def limit_memory():
    """8 GB of address space for a child process: a regression that allocates without bound fails there alone."""
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def run_limited(argv):
    """`pdmm-bridge argv` in a child process under limit_memory; its CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "experiments", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=limit_memory,
    )


def refused(argv):
    """The one error line of `pdmm-bridge argv` run under limit_memory, which must exit with status 2."""
    result = run_limited(argv)
    err = result.stderr.strip()
    assert result.returncode == 2 and "\n" not in err and "Traceback" not in err, err
    return err


def test_an_absurd_config_is_refused_before_allocating_and_leaves_no_directory(tmp_path, capsys):
    out = tmp_path / "run"
    err = refused([*TRAIN, "--set=model.n_layer=1000000", "--out", str(out)])
    assert "needs about" in err and "GB" in err and "memory_check=false" in err and not out.exists()
    assert "train.device" in fails(capsys, [*TRAIN, "--set=train.device=meta", "--out", str(out)])
    assert "train.plateau_metric" in fails(capsys, [*TRAIN, "--set=train.plateau_metric=nothing", "--out", str(out)])
    assert not out.exists()
    err = refused([*SWEEP, "--grid", "model.n_layer=1,1000000", "--out", str(out)])
    assert "n_layer=1000000,seed=0" in err and "needs about" in err and not out.exists()


def test_an_allocation_failure_is_one_line_exit_1(tmp_path):
    assert out_of_memory(
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
            "allocate memory: you tried to allocate 120000000000 bytes."
        )
    )
    # under limit_memory the 4e10-byte weights of d_model = 100000 cannot be had, whatever the machine
    result = run_limited(
        [*TRAIN, "--set=model.d_model=100000", "--set=train.memory_check=false", "--out", str(tmp_path / "run")]
    )
    assert result.returncode == 1 and "out of memory" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_force_keeps_a_hand_written_config_toml_alone_in_a_directory(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.toml").write_text("# my notes\n[task]\n")
    assert "config.toml" in fails(capsys, [*TRAIN, "--out", str(out), "--force"])
    assert (out / "config.toml").read_text() == "# my notes\n[task]\n"


def test_a_path_over_path_max_is_one_line(tmp_path, capsys):
    long = tmp_path.joinpath(*["d" * 250] * 18)
    for argv in ([*TRAIN, "--out", str(long)], [*SWEEP, "--out", str(long)], ["report", str(long)]):
        assert "a path may hold" in fails(capsys, argv)


@pytest.mark.parametrize(
    "text",
    [
        "<!-- begin repro-sweep -->\nhalf\n",
        "<!-- begin repro-sweep {bad} -->\n<!-- end repro-sweep -->\n",
        '<!-- begin repro-sweep {"steps": "x"} -->\n<!-- end repro-sweep -->\n',
    ],
)
def test_a_hand_edited_results_section_is_refused_before_the_report(run, tmp_path, capsys, text):
    sweep = sweep_of(run, tmp_path)
    results = tmp_path / "RESULTS.md"
    results.write_text(text)
    assert "RESULTS.md" in fails(capsys, ["report", str(sweep), "--results", str(results)])
    assert not (sweep / "report.md").exists() and results.read_text() == text
    with pytest.raises(UsageError):
        replace_section(results, "repro-sweep", "new")


def test_a_results_file_that_is_a_link_is_refused_before_the_report(run, tmp_path, capsys):
    sweep = sweep_of(run, tmp_path)
    target = tmp_path / "theirs.md"
    target.write_text("# theirs\n")
    (tmp_path / "RESULTS.md").symlink_to(target)
    assert "symbolic link" in fails(capsys, ["report", str(sweep), "--results", str(tmp_path / "RESULTS.md")])
    assert not (sweep / "report.md").exists() and target.read_text() == "# theirs\n"


@pytest.mark.parametrize(
    "config, history",
    [
        ("[]", "method,iteration,residual\npdmm,1,0.5\n"),
        ('{"methods": {"pdmm": 5}}', "method,iteration,residual\npdmm,1,0.5\n"),
        ("{}", "method,iteration,residual\npdmm,1,0.5,7\n"),
    ],
)
def test_a_malformed_solve_directory_is_one_line_in_plot(tmp_path, capsys, config, history):
    solve = tmp_path / "solve"
    solve.mkdir()
    (solve / "config.json").write_text(config)
    (solve / "history.csv").write_text(history)
    assert str(solve) in fails(capsys, ["plot", str(solve), "--out", str(tmp_path / "p.png")])


SEED_SHAPES = [
    {"key": 1, "fitted": {}, "curves": [], "log_errors": {}},
    {"key": 1, "fitted": {}, "curves": [{"method": 1}], "log_errors": {"ball oracle\tb": [1.0]}},
    {"key": 1, "fitted": {"training": 5}, "curves": [], "log_errors": {"ball oracle\tb": [1.0]}},
    {"key": 1, "fitted": {"pdmm: rho per round": {"1": "x"}}, "curves": [], "log_errors": {"ball oracle\tb": [1.0]}},
    {
        "key": 1,
        "fitted": {"best classical per round": {"1": 2.0}},
        "curves": [],
        "log_errors": {"ball oracle\tb": [1.0]},
    },
]


@pytest.mark.parametrize("saved", SEED_SHAPES)
def test_more_malformed_compare_seed_files_are_one_line(tmp_path, saved):
    path = tmp_path / "seed=0.json"
    path.write_text(json.dumps(saved))
    with pytest.raises(UsageError, match="seed=0.json"):
        SeedFiles(tmp_path, 1, 1).load(0)


def test_a_compare_seed_file_with_rows_of_another_length_is_refused(tmp_path):
    path = tmp_path / "seed=0.json"
    path.write_text(json.dumps({"key": 1, "fitted": {}, "curves": [], "log_errors": {"ball oracle\tb": [1.0, None]}}))
    assert SeedFiles(tmp_path, 1, 2).load(0) is not None
    with pytest.raises(UsageError, match="must hold 3 numbers, one per round"):
        SeedFiles(tmp_path, 1, 3).load(0)


COMPARE = [
    "compare",
    str(CONFIGS / "graph_consensus.toml"),
    "--residuals",
    "standard",
    "--tied",
    "none",
    "--widths",
    "none",
    "--seeds",
    "0",
    "--rounds",
    "2",
    "--test-graphs",
    "1",
    "--tune-graphs",
    "1",
    "--learned-steps",
    "1",
    "--finetune-steps",
    "1",
    *[
        f"--set={s}"
        for s in (
            "train.max_iters=6",
            "train.eval_interval=3",
            "train.checkpoint_interval=3",
            "model.n_layer=2",
            "model.d_model=16",
            "model.n_head=2",
            "train.batch_size=4",
            "task.val_graphs=2",
            "task.n_min=8",
            "task.n_max=12",
            "task.radius=0",
        )
    ],
    "--no-progress",
]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """A finished tiny compare directory (one seed, one trained row), made once for the module."""
    out = tmp_path_factory.mktemp("compared") / "cmp"
    assert main([*COMPARE, "--out", str(out)]) == 0
    return out


def trained_run(out):
    return next((out / "runs").iterdir())


@pytest.mark.parametrize("edit", ["summary", "val_error", "seed files"])
def test_a_compare_directory_edited_by_hand_is_one_line(compared, tmp_path, capsys, edit):
    out = tmp_path / "cmp"
    shutil.copytree(compared, out)
    if edit == "seed files":  # a second seed's file with the first one's key but a row less
        saved = json.loads((out / "seeds" / "seed=0.json").read_text())
        saved["log_errors"].pop(next(iter(saved["log_errors"])))
        (out / "seeds" / "seed=1.json").write_text(json.dumps(saved))
        argv = [*COMPARE, "--seeds", "0,1", "--out", str(out)]
    else:
        (out / "seeds" / "seed=0.json").unlink()  # so compare reads the trained run again
        if edit == "summary":
            (trained_run(out) / "summary.json").write_text("[1]")
        else:
            metrics = trained_run(out) / "metrics.jsonl"
            metrics.write_text(
                "".join(
                    json.dumps({k: v for k, v in json.loads(line).items() if k != "val_error"}) + "\n"
                    for line in metrics.read_text().splitlines()
                )
            )
        argv = [*COMPARE, "--out", str(out)]
    assert {"summary": "summary.json", "val_error": "val_error", "seed files": "hold different rows"}[edit] in fails(
        capsys, argv
    )


def test_compare_refuses_absurd_rounds_before_anything(tmp_path):
    assert "at most 10000" in refused([*COMPARE, "--rounds", "1000000000", "--out", str(tmp_path / "c")])
    assert not (tmp_path / "c").exists()


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: (d / "compare.json").write_text("[]"),
        lambda d: edit_json(d / "compare.json", lambda meta: meta.update(rounds="x")),
        lambda d: edit_json(d / "compare.json", lambda meta: meta.update(fitted={"0": {"training": 5}})),
        lambda d: (d / "seeds.csv").write_text((d / "seeds.csv").read_text().replace(",0,1,", ",0,0,", 1)),
        lambda d: (d / "seeds.csv").write_text((d / "seeds.csv").read_text().replace(",0,1,", ",0,100000000000,", 1)),
        lambda d: (d / "curves.csv").write_text("method,seed\na,0\n"),
        lambda d: (d / "seeds.csv").write_text((d / "seeds.csv").read_text() + "a" * 200_000 + "\n"),
    ],
    ids=["meta list", "rounds text", "fitted", "round 0", "round 1e11", "curves columns", "huge field"],
)
def test_compare_from_a_hand_edited_directory_is_one_line(compared, tmp_path, capsys, edit):
    source = tmp_path / "source"
    shutil.copytree(compared, source)
    edit(source)
    assert "--from" in fails(capsys, ["compare", "--from", str(source), "--out", str(tmp_path / "again")])
    assert not (tmp_path / "again").exists()
