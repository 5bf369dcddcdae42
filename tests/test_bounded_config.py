"""Every config field bounded and typed before anything is built, checkpoints checked before they are read, a
diverged run recorded as diverged, and Ctrl-C honoured by every command (docs/guide/training.md, "Memory and
limits"; docs/guide/runs.md, "Ctrl-C")."""

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_runs import MODULAR, TINY, TRAIN, forge

import pdmm
from experiments import memory
from experiments.checkpoints import load_weights
from experiments.cli import main
from experiments.config import load_config
from experiments.errors import UsageError
from experiments.tasks import TASKS, build_task

CHAR = [  # a char_lm run of a second on the shipped corpus
    "train",
    "shakespeare_char_cpu",
    "--data",
    "builtin:tinyshakespeare",
    *[
        f"--set={s}"
        for s in (
            "model.n_layer=1",
            "model.n_head=2",
            "model.d_model=16",
            "train.block_size=16",
            "train.batch_size=4",
            "train.warmup_iters=2",
            "train.eval_interval=5",
            "train.eval_iters=2",
            "train.checkpoint_interval=5",
            "task.sample_length=0",
        )
    ],
    "--no-progress",
]
PYTHON = [sys.executable, "-m", "experiments"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def fails(capsys, argv):
    """Run the CLI on argv, expecting exit status 2 and one error line without a traceback; returns the line."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and "\n" not in err and "Traceback" not in err, err
    return err


def strict_json(path):
    """The JSON in `path`, refusing NaN and Infinity (which json.loads accepts by default)."""

    def refuse(constant):
        raise AssertionError(f"{path} holds {constant}")

    return json.loads(Path(path).read_text(), parse_constant=refuse)


# ---- config fields: typed and bounded before anything is built -------------------------------------------------


@pytest.mark.parametrize(
    "setting, culprit",
    [
        ("model.send_width=9223372036854775808", "model.send_width must be an integer from"),
        ("model.n_layer=2147483648", "model.n_layer must be an integer from"),
        ("model.d_model=9223372036854775807", "model.d_model must be an integer from"),
        ("task.p=x", "task.p must be an integer, got 'x'"),
        ("task.p=nan", "task.p must be an integer, got nan"),
        ("task.p=inf", "task.p must be an integer, got inf"),
    ],
)
def test_a_value_out_of_type_or_range_is_one_line_before_anything_is_built(tmp_path, capsys, setting, culprit):
    """No C++ overflow trace (send_width 2^63), no Python one (task.p=x reached int() in the estimate)."""
    argv = [*TRAIN, f"--set={setting}", "--out", str(tmp_path / "r")]
    assert culprit in fails(capsys, argv)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "text", ["train = 5\n", '[[task]]\nname = "modular"\n', '[task]\nname = "modular"\n[[model]]\n']
)
def test_a_config_whose_table_is_not_a_table_is_one_line(tmp_path, capsys, text):
    (tmp_path / "bad.toml").write_text(text)
    assert "must be a table of keys" in fails(
        capsys, ["train", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "r")]
    )
    with_set = ["train", str(tmp_path / "bad.toml"), "--set=train.lr=0.1", "--set=model.n_layer=1", "--out", "r"]
    assert "table of keys" in fails(capsys, with_set)  # --set into a table that is not one


@pytest.fixture
def nothing_built(monkeypatch):
    """Every task's constructor fails the test: a refusal must come before any task data is allocated. The machine
    is taken to have 16 GB available, so the refusals do not depend on it."""

    def built(self, config):
        raise AssertionError(f"task {config.task.name} was built")

    for cls in TASKS.values():
        monkeypatch.setattr(cls, "__init__", built)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 16 * 10**9)


P = 30_000
ABSURD = [  # (config, settings, the field the refusal names, bytes the build needs at least, counted independently)
    ("modular97", ["task.p=30000", "train.batch_size=8"], "task.p=30000", 48 * P * P),  # (p^2, 2) + (p^2, 4) int64
    ("modular97", ["model.kind=convex", "model.gates=1000000"], "model.gates=1000000", 1_000_000 * 97 * 4 * 128 * 4),
    ("modular97", ["model.send_width=10000000"], "model.send_width=10000000", 128 * 15_000_000 * 4),  # c_attn alone
    ("graph_consensus", ["task.val_graphs=100000000"], "task.val_graphs=100000000", 100_000_000 * 16 * 64 * 12),
    ("shakespeare_char_cpu", ["task.sample_length=1000000000"], "task.sample_length=1000000000", 8 * 10**9),
]


@pytest.mark.parametrize("name, settings, field, need", ABSURD, ids=[a[2] for a in ABSURD])
def test_what_a_task_or_model_allocates_is_in_the_estimate(
    tmp_path, capsys, nothing_built, name, settings, field, need
):
    """The p^2 pair table, convex gates, a wide send, validation sets and the sample: refused up front in one line
    that names the field, with an estimate at least what the tensors need (counted here from their shapes)."""
    argv = ["train", name, "--data", "builtin:tinyshakespeare", *[f"--set={s}" for s in settings]]
    message = fails(capsys, [*argv, "--out", str(tmp_path / "r")])
    assert field in message and "more than the 16 GB available" in message
    assert float(re.search(r"needs about ([0-9.e+]+) GB", message).group(1)) * 1e9 >= need


SMALL_GRAPHS = [
    "task.n_min=16",
    "task.n_max=16",
    "task.radius=0",
    "train.batch_size=64",
    "model.n_layer=1",
    "model.d_model=8",
    "model.n_head=2",
]


def retained_bytes(task):
    """Bytes of the tensors a built task keeps: its splits, or its held-out graphs' features and values."""
    tensors = [t for split in getattr(task, "splits", {}).values() for t in split]
    tensors += [t for _, features, a in getattr(task, "val", []) for t in (features, a)]
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize(
    "name, settings",
    [
        ("modular97", ["task.p=1500", "train.batch_size=8"]),
        ("graph_consensus", ["task.val_graphs=2000", *SMALL_GRAPHS]),
    ],
)
def test_the_estimate_covers_the_data_a_built_task_keeps(monkeypatch, name, settings):
    """Measured, not assumed: with only the bytes the built task keeps available, the config is refused (the model
    and its activations are small: the data must be in the estimate for that)."""
    config = load_config(name, [*settings, "train.memory_check=false"])
    kept = retained_bytes(build_task(config))
    assert kept > 10 * (memory.estimate(config)["total_bytes"])  # without the data, the estimate is far below
    monkeypatch.setattr(memory, "available_bytes", lambda device: kept)
    with pytest.raises(UsageError, match=re.escape(settings[0])):
        build_task(load_config(name, settings))


def test_a_sweep_checks_every_task_option_before_the_first_run(tmp_path, capsys):
    out = tmp_path / "s"
    argv = [
        "sweep",
        MODULAR,
        *[f"--set={s}" for s in TINY],
        "--grid",
        "task.op=+,x",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert "task.op must be one of" in fails(capsys, argv)
    assert not out.exists() or not any(path.is_dir() for path in out.iterdir())  # no member was trained


@pytest.mark.parametrize(
    "graph, message",
    [
        (["--graph", "barabasi_albert", "--graph-param", "m=1.5"], "m must be an integer, got 1.5"),
        (["--graph", "small_world", "--graph-param", "k=2.5"], "k must be an integer, got 2.5"),
        (["--graph", "random_geometric", "--graph-param", "radius=nan"], "radius must be finite"),
    ],
)
def test_a_topology_parameter_of_the_wrong_kind_is_named(tmp_path, capsys, graph, message):
    argv = ["solve", *graph, "--nodes", "12", "--no-progress", "--out", str(tmp_path / "s")]
    assert message in fails(capsys, argv)


def test_complex_data_is_refused_not_cast_to_real(tmp_path, capsys):
    G = pdmm.topology("ring", 6)
    for a in (np.ones((6, 2)) + 1j, torch.ones(6, 2, dtype=torch.complex64)):
        with pytest.raises(ValueError, match="a is complex"):
            pdmm.averaging(G, a)
    with pytest.raises(ValueError, match="y is complex"):
        pdmm.least_squares(G, np.ones((6, 3, 2)), np.ones((6, 3)) * 1j)
    local = pdmm.averaging(G, np.ones((6, 2))).local
    local.q = local.q.to(torch.complex128)  # a local function built by hand
    with pytest.raises(ValueError, match="Quadratic.q is complex"):
        local.to("cpu", torch.float64)
    np.savez(tmp_path / "complex.npz", a=np.ones((12, 3)) * (1 + 2j))
    argv = ["solve", "--data", str(tmp_path / "complex.npz"), "--nodes", "12", "--no-progress"]
    assert "a is complex (complex128)" in fails(capsys, [*argv, "--out", str(tmp_path / "s")])
    assert not (tmp_path / "s" / "result.npz").exists()


# ---- divergence ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [1, 10])
def test_a_run_that_diverges_ends_diverged_with_exit_1_never_finished(tmp_path, capsys, steps):
    """lr 1e30: the loss of step 2 is NaN (10 steps), or the one step's update leaves the weights and val_loss NaN
    (1 step, which used to finish with status "finished" and NaN in metrics.jsonl and summary.json)."""
    out = tmp_path / "r"
    argv = [*CHAR, "--set=train.lr=1e30", f"--set=train.max_iters={steps}", "--out", str(out)]
    assert main(argv) == 1
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("pdmm-bridge train: diverged:") and f"at step {min(steps, 2)}" in line
    summary = strict_json(out / "summary.json")
    assert summary["status"] == "diverged" and summary["steps"] == min(steps, 2)
    rows = [json.loads(row, parse_constant=float) for row in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(value) for row in rows for value in row.values())
    assert not (out / "ckpt.pt").exists()  # no checkpoint holds the diverged weights


# ---- checkpoints: size and state checked before they are used ------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished tiny run: ckpt.prev.pt at step 2, ckpt.pt at step 4."""
    out = tmp_path_factory.mktemp("trained") / "run"
    assert main([*TRAIN, "--out", str(out)]) == 0
    return out


@pytest.fixture
def halfway(trained, tmp_path):
    """A copy of the run as it was at step 2 (its ckpt.prev.pt as ckpt.pt, no summary): a resume trains on."""
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    (copy / "ckpt.prev.pt").rename(copy / "ckpt.pt")
    (copy / "summary.json").unlink()
    forge(copy, "ckpt.pt")  # recorded as the run's own, so what refuses a crafted one below is the resume's checks
    return copy


def sparse_3_gb(path, start=b""):
    """`path` as a 3 GB file holding `start` and then a hole (nothing written: a file cut or padded by truncate)."""
    path.write_bytes(start)
    os.truncate(path, 3 * 2**30)
    return path


@pytest.mark.parametrize("start", [b"", b"PK\x03\x04"], ids=["zeros", "archive start"])
def test_a_3_gb_checkpoint_is_refused_by_its_size_before_it_is_read(trained, tmp_path, start):
    torch.manual_seed(0)
    model = build_task(load_config(MODULAR, TINY)).build_model()
    path = sparse_3_gb(tmp_path / "ckpt.pt", start)
    before, began = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(UsageError) as refused:
        load_weights(model, path)
    assert time.perf_counter() - began < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # kB: nothing read
    message = str(refused.value)
    assert "3,221,225,472 bytes, more than a checkpoint of this model can be" in message and "pickle" not in message


def test_a_3_gb_ckpt_pt_is_refused_by_resume_and_probe_in_one_line(halfway, capsys):
    sparse_3_gb(halfway / "ckpt.pt", (halfway / "ckpt.pt").read_bytes())
    # resume refuses a ckpt.pt whose size differs from the one it wrote (ownership, no byte hashed); probe, which
    # only reads, refuses it by its size before reading it
    resume = [*TRAIN, "--out", str(halfway), "--resume"]
    probe = ["probe", str(halfway), "--batches", "1"]
    for argv, expected in (
        (resume, "holds ckpt.pt, which pdmm-bridge did not write or which changed"),
        (probe, "3,221,225,472 bytes"),
    ):
        message = fails(capsys, argv)
        assert expected in message and "pickle" not in message
    assert not (halfway / "summary.json").exists()


def test_a_file_that_is_no_archive_is_not_called_a_pickle(tmp_path):
    (tmp_path / "ckpt.pt").write_bytes(bytes(4096))
    with pytest.raises(UsageError, match="does not begin as a torch.save archive") as refused:
        load_weights(torch.nn.Linear(2, 2), tmp_path / "ckpt.pt")
    assert "pickle" not in str(refused.value)


CRAFTED = {
    "step 10^6": lambda c: c["state"].update(step=10**6),
    "step 2^63+5": lambda c: c["state"].update(step=2**63 + 5),
    "step -1": lambda c: c["state"].update(step=-1),
    "elapsed inf": lambda c: c["state"].update(elapsed=float("inf")),
    "elapsed nan": lambda c: c["state"].update(elapsed=float("nan")),
    "stopped without a rule": lambda c: c["state"].update(stopped=True),
    "optimizer step -5": lambda c: [s.update(step=torch.tensor(-5.0)) for s in c["optimizer"]["state"].values()],
    "NaN weight": lambda c: next(iter(c["model"].values())).view(-1)[0].fill_(float("nan")),
}


@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_checkpoint_state_is_refused_and_never_reaches_a_summary(halfway, capsys, craft):
    checkpoint = torch.load(halfway / "ckpt.pt", weights_only=True)
    craft(checkpoint)
    torch.save(checkpoint, halfway / "ckpt.pt")
    forge(halfway, "ckpt.pt")  # as a hostile sender would: the marker is plain JSON
    rows = (halfway / "metrics.jsonl").read_bytes()
    message = fails(capsys, [*TRAIN, "--out", str(halfway), "--resume"])
    assert "ckpt.pt" in message and "did not write" not in message
    assert not (halfway / "summary.json").exists() and (halfway / "metrics.jsonl").read_bytes() == rows


def test_the_untouched_checkpoint_resumes_to_the_same_summary(trained, halfway):
    """The checks refuse only what no run writes: the real step-2 checkpoint resumes to the run's own end."""
    assert main([*TRAIN, "--out", str(halfway), "--resume"]) == 0
    mine, theirs = strict_json(halfway / "summary.json"), strict_json(trained / "summary.json")
    assert mine["status"] == "finished" and mine["final"] == theirs["final"]


# ---- Ctrl-C --------------------------------------------------------------------------------------------------------


def interrupt(argv, stream, marker, ignored=False, settle=0.0):
    """Start `pdmm-bridge argv`, send SIGINT `settle` seconds after `marker` has appeared on `stream` ("stdout" or
    "stderr"); returns (exit status, seconds from SIGINT to exit, stderr). ignored: start it with SIGINT ignored,
    as a script's background job is."""
    process = subprocess.Popen(
        [*PYTHON, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None,
    )
    watched, seen = getattr(process, stream), []
    while marker not in "".join(seen):
        line = watched.readline()
        assert line, f"ended before {marker!r}: {''.join(seen)}"
        seen.append(line)
    time.sleep(settle)
    process.send_signal(signal.SIGINT)
    sent = time.perf_counter()
    _, stderr = process.communicate(timeout=300)
    return process.returncode, time.perf_counter() - sent, stderr


def test_ctrl_c_stops_network_sweep_and_records_no_interrupted_solve(tmp_path):
    """It used to run on, count the interrupted solve as "not reached" and exit 0. Target 1e-300 is never reached:
    every solve runs its 3000 iterations (a second or two), so the SIGINT, half a second after a cell's line, lands
    inside the next one."""
    out = tmp_path / "ns"
    argv = [
        "network-sweep",
        "--nodes",
        "30",
        "--seeds",
        "2",
        "--iters",
        "3000",
        "--target",
        "1e-300",
        "--out",
        str(out),
    ]
    code, seconds, stderr = interrupt(argv, "stderr", "ideal  pdmm:", settle=0.5)
    assert code == 130 and seconds < 15 and "Traceback" not in stderr
    assert "interrupted (Ctrl-C); no results written: run the same command again" in stderr.splitlines()[-1]
    assert not any((out / name).exists() for name in ("network_sweep.json", "network_sweep.md", "network_sweep.png"))


def test_ctrl_c_stops_learn_pdmm_started_with_sigint_ignored(tmp_path):
    """A script's background job starts with SIGINT ignored; `kill -INT` used to leave learn-pdmm running to the end
    (train, which sets its own handler, stopped)."""
    out = tmp_path / "lp"
    argv = ["learn-pdmm", "--layers", "2,8", "--train-graphs", "2", "--test-graphs", "1", "--steps", "400"]
    code, seconds, stderr = interrupt([*argv, "--out", str(out)], "stdout", "K = 2:", ignored=True)
    assert code == 130 and seconds < 15 and "Traceback" not in stderr
    assert (
        stderr.strip() == "pdmm-bridge learn-pdmm: interrupted (Ctrl-C); no results written: run the same command again"
    )
    assert not (out / "results.json").exists() and not (out / "results.md").exists()
