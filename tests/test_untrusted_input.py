"""Files from someone else never run code: checkpoints, --data archives, graph files and sweep run names."""

import json
import os
import pickle
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_runs import forge

import pdmm
from experiments.checkpoints import CHECKPOINT, best_weights, load_checkpoint
from experiments.cli import main
from experiments.config import load_config, to_tables
from experiments.errors import UsageError
from experiments.grid import run_name
from experiments.runs import sweep_runs
from experiments.train import train

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
TINY = [
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
]  # graph_consensus in seconds, as in test_compare.py
COMPARE = [
    "compare",
    str(CONFIGS / "graph_consensus.toml"),
    "--residuals",
    "standard",
    "--tied",
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
    *[f"--set={s}" for s in TINY],
    "--no-progress",
]


class Payload:
    """Unpickling this creates the file `marker`: the code a crafted file would run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def unpickles_code(load, marker):
    """Whether `load()` ran the payload (it creates `marker`); the marker is removed again."""
    load()
    ran = marker.exists()
    marker.unlink(missing_ok=True)
    return ran


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A tiny compare directory whose trained run's ckpt.pt and best.pt carry a live payload, and a sweep.json asking
    `report` to probe that run: (compare dir, run dir, marker)."""
    root = tmp_path_factory.mktemp("planted")
    out, marker = root / "cmp", root / "marker"
    assert main([*COMPARE, "--out", str(out)]) == 0
    run_dir = out / "runs" / run_name({"model.residual": "standard", "task.tied": False}, 0)
    for path in (run_dir / CHECKPOINT, best_weights(run_dir)):  # compare loads the best weights (train.patience > 0)
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["extra"] = Payload(marker)
        torch.save(checkpoint, path)
        forge(path.parent, path.name)  # recorded in the marker, as a sender can: the loader itself must refuse it
        assert unpickles_code(lambda path=path: torch.load(path, weights_only=False), marker)  # the plant is live
    (out / "seeds" / "seed=0.json").unlink()  # compare must load the trained model again
    (out / "runs" / "sweep.json").write_text(
        json.dumps(
            {
                "report": {"probe": True},
                "runs": [{"name": run_dir.name, "overrides": {}, "seed": 0, "status": "finished", "error": None}],
            }
        )
    )
    return out, run_dir, marker


@pytest.mark.parametrize("command", ["probe", "report", "compare", "train --resume"])
def test_a_pickled_payload_in_ckpt_pt_is_refused_by_every_command_that_opens_it(planted, command):
    out, run_dir, marker = planted
    args = {
        "probe": ["probe", str(run_dir)],
        "report": ["report", str(out / "runs")],
        "compare": [*COMPARE, "--out", str(out)],
        "train --resume": ["train", str(run_dir / "config.toml"), "--out", str(run_dir), "--resume", "--no-progress"],
    }
    result = subprocess.run(
        [sys.executable, "-m", "experiments", *args[command]],
        capture_output=True,
        text=True,
        cwd=out.parent,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    error = result.stderr.strip()
    assert not marker.exists()
    assert result.returncode != 0 and "Traceback" not in result.stderr
    opened = best_weights(run_dir) if command == "compare" else run_dir / CHECKPOINT
    assert "\n" not in error and f"refusing to load {opened}" in error and "run code" in error


def test_a_checkpoint_holds_only_what_weights_only_loading_accepts(tmp_path):
    config = load_config(
        CONFIGS / "modular97.toml", ["task.p=5", "train.max_iters=2", "model.d_model=8", "model.n_head=2"]
    )
    train(config, tmp_path / "run", progress=False)
    checkpoint = torch.load(tmp_path / "run" / CHECKPOINT, weights_only=True)
    assert set(checkpoint) == {"model", "optimizer", "rng", "cuda_rng", "state", "config", "run_id", "config_hash"}
    assert checkpoint["rng"].dtype == torch.uint8 and checkpoint["state"]["step"] == 2
    assert checkpoint["config"] == to_tables(config)


def test_weights_that_do_not_fit_the_model_are_one_line_errors(tmp_path, capsys):
    config = load_config(
        CONFIGS / "modular97.toml", ["task.p=5", "train.max_iters=2", "model.d_model=8", "model.n_head=2"]
    )
    train(config, tmp_path / "run", progress=False)
    checkpoint = torch.load(tmp_path / "run" / CHECKPOINT, weights_only=True)
    name = next(iter(checkpoint["model"]))
    checkpoint["model"][name] = torch.zeros(3, 3, 3)
    torch.save(checkpoint, tmp_path / "run" / CHECKPOINT)
    forge(tmp_path / "run", CHECKPOINT)  # recorded in the marker, so the resume's own check is what refuses it
    with pytest.raises(SystemExit) as stop:
        main(["probe", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "do not fit" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):
        main(["train", str(tmp_path / "run" / "config.toml"), "--out", str(tmp_path / "run"), "--resume"])
    assert "does not fit" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty, truncated"),
        (b"PK\x03\x04 not really a zip", "empty, truncated"),
        (pickle.dumps({"model": Payload("MARKER")}), "refusing to load"),
        (b"just some text", "empty, truncated"),
    ],
    ids=["empty", "bad zip", "plain pickle", "text"],
)
def test_unreadable_or_foreign_checkpoints_are_one_line_errors(tmp_path, monkeypatch, content, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / CHECKPOINT).write_bytes(content)
    with pytest.raises(UsageError, match=message) as error:
        load_checkpoint(tmp_path / CHECKPOINT)
    assert str(tmp_path / CHECKPOINT) in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "MARKER").exists()


def test_a_checkpoint_without_the_needed_entries_is_refused(tmp_path):
    torch.save({"model": {}}, tmp_path / CHECKPOINT)
    with pytest.raises(UsageError, match="not a pdmm-bridge checkpoint: it has no optimizer, rng, state"):
        load_checkpoint(tmp_path / CHECKPOINT, ("model", "optimizer", "rng", "state"))
    torch.save(torch.zeros(3), tmp_path / CHECKPOINT)
    with pytest.raises(UsageError, match="it has no model"):
        load_checkpoint(tmp_path / CHECKPOINT)


def test_a_pickled_object_array_in_the_data_archive_is_refused(tmp_path, capsys):
    data, marker = tmp_path / "data.npz", tmp_path / "marker"
    np.savez(data, a=np.array([Payload(marker)], dtype=object))
    with pytest.raises(SystemExit) as exit:
        main(
            [
                "solve",
                "--no-progress",
                "--graph",
                "ring",
                "--nodes",
                "4",
                "--data",
                str(data),
                "--out",
                str(tmp_path / "out"),
            ]
        )
    message = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and not marker.exists()
    assert message.startswith(f"pdmm-bridge solve: error: could not read data file {data}: Object arrays")
    assert "\n" not in message
    assert unpickles_code(lambda: np.load(data, allow_pickle=True)["a"], marker)  # the payload was live


GRAPHML = (
    '<graphml xmlns="http://graphml.graphdrawing.org/xmlns"><key id="d0" for="node" attr.name="label" '
    'attr.type="string"/><graph edgedefault="undirected"><node id="a"><data key="d0">{body}</data></node>'
    '<node id="b"/><edge source="a" target="b"/></graph></graphml>'
)
LAUGHS = "".join(f'<!ENTITY e{i} "{f"&e{i - 1};" * 10}">' for i in range(1, 10))  # e9: 10^9 "lol"s


@pytest.mark.parametrize(
    "doctype, body",
    [
        ('<!DOCTYPE graphml [<!ENTITY e SYSTEM "file://{secret}">]>', "&e;"),
        (f'<!DOCTYPE graphml [<!ENTITY e0 "lol">{LAUGHS}]>', "&e9;"),
        ('<!DOCTYPE graphml SYSTEM "http://127.0.0.1:9/graphml.dtd">', "a"),
    ],
    ids=["external entity", "billion laughs", "external dtd"],
)
def test_graphml_with_a_doctype_is_refused_in_bounded_time_and_memory(tmp_path, doctype, body):
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    path = tmp_path / "g.graphml"
    path.write_text('<?xml version="1.0"?>\n' + doctype.format(secret=secret) + GRAPHML.format(body=body))
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(ValueError, match="DOCTYPE") as error:
        pdmm.load_graph(path)
    assert time.perf_counter() - start < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # kB
    assert str(error.value).startswith(f"could not read graph file {path}: ") and "secret" not in str(error.value)


def test_edge_list_columns_after_the_two_nodes_are_never_evaluated(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("0 1 {'weight': 2}\n1 2 {'w': __import__('os').system('touch marker')}\n")
    G = pdmm.load_graph(path)
    assert sorted(G.edges) == [(0, 1), (1, 2)] and all(d == {} for _, _, d in G.edges(data=True))


@pytest.mark.parametrize("value", ["../../x", "/etc", ".", "..", "..\\..\\x", "a/../../b", "%2F.."])
def test_a_run_name_is_one_path_component_inside_out(tmp_path, value):
    for assignment in ({"task.x": value}, {f"task.{value}": "v"}):
        name = run_name(assignment, 0)
        assert name not in (".", "..") and "/" not in name and "\\" not in name
        assert (tmp_path / name).resolve().parent == tmp_path.resolve()


def test_hostile_grid_values_make_run_directories_only_inside_out(tmp_path):
    out, outside = tmp_path / "sweep", tmp_path / "abs"
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
            f"task.data=../../escape,{outside},.,..",
            "--out",
            str(out),
        ]
    )
    assert code == 0  # modular reads no task.data: every run trains, each into its own directory
    assert [p.name for p in tmp_path.iterdir()] == ["sweep"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(
        run_name({"task.data": v}, 0) for v in ["../../escape", str(outside), ".", ".."]
    )


@pytest.mark.parametrize("name", ["../elsewhere", "/tmp", "..", "a/b"])
def test_a_sweep_json_cannot_point_report_outside_the_sweep(tmp_path, name):
    (tmp_path / "sweep.json").write_text(json.dumps({"runs": [{"name": name, "status": "finished"}]}))
    with pytest.raises(UsageError, match="outside the sweep directory"):
        sweep_runs(tmp_path)
