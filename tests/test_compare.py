"""graph_consensus (the task) and pdmm-bridge compare (transformers vs PDMM round by round)."""
import csv
import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch

import pdmm
from experiments.cli import main
from experiments.compare_command import classical_errors
from experiments.config import load_config
from experiments.tasks import build_task
from experiments.tasks.graph_consensus import disagreement_error, node_features
from experiments.train import train

CONFIG = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "graph_consensus.toml"
TINY = ["train.max_iters=6", "train.eval_interval=3", "train.checkpoint_interval=3", "model.n_layer=3",
        "model.d_model=16", "model.n_head=2", "train.batch_size=4", "task.val_graphs=2"]


def test_graph_consensus_batches_and_the_disagreement_error():
    task = build_task(load_config(CONFIG, TINY))
    graph, features, a = task.train_batch(torch.Generator().manual_seed(0))
    assert features.shape == (4, graph.n, 2) and a.shape == (4, graph.n)
    torch.testing.assert_close(features[..., 0], a)
    G = nx.path_graph(3)
    assert torch.allclose(node_features(G, torch.zeros(1, 3))[0, :, 1], torch.log1p(torch.tensor([1.0, 2.0, 1.0])))
    x_star = a.mean(1, keepdim=True)
    torch.testing.assert_close(disagreement_error(a, a), torch.ones(4))  # keeping a_i: error 1
    torch.testing.assert_close(disagreement_error(x_star.expand_as(a), a), torch.zeros(4))
    halfway = (a + x_star) / 2
    torch.testing.assert_close(disagreement_error(halfway, a), torch.full((4,), 0.5))


def test_graph_consensus_training_reports_error_per_run(tmp_path):
    summary = train(load_config(CONFIG, TINY), tmp_path / "run", progress=False)
    assert set(summary["final"]) == {"val_loss", "val_error"} and 0 < summary["final"]["val_error"] < 10
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    errors = [row["val_error"] for row in evals if "val_error" in row]
    assert summary["best"]["val_error"] == min(errors)  # an error is minimised, like a loss


def test_classical_errors_are_pdmm_solve_errors_per_round():
    G = pdmm.topology("ring", n=6, seed=0)
    a = np.random.default_rng(0).normal(size=(3, 6)) + 1
    e = classical_errors("pdmm", {"theta": 1.0}, 0.5, 4, [(G, a)])
    assert e.shape == (4, 3)
    x = np.asarray(pdmm.solve(pdmm.averaging(G, a[..., None]), rho=0.5, max_iter=2, tol=0, x0=a[..., None]).x)[..., 0]
    x_star = a.mean(1, keepdims=True)
    direct = np.linalg.norm(x - x_star, axis=1) / np.linalg.norm(a - x_star, axis=1)
    np.testing.assert_allclose(e[1].numpy(), direct, rtol=1e-10)


def test_compare_writes_one_csv_row_per_method_set_and_round(tmp_path):
    out = tmp_path / "cmp"
    assert main(["compare", str(CONFIG), "--residuals", "standard,accumulated", *[f"--set={s}" for s in TINY],
                 "--test-graphs", "1", "--out", str(out), "--no-progress", "--results", str(tmp_path / "R.md")]) == 0
    with open(out / "compare.csv") as f:
        rows = list(csv.DictReader(f))
    methods = {"transformer (standard)", "transformer (accumulated)", "pdmm (theta 1)", "pdmm (theta 1/2)", "qa-pdmm",
               "admm", "learned pdmm"}
    sets = {"training family", "larger graphs", "small world", "grid"}
    assert {(r["method"], r["set"], int(r["round"])) for r in rows} == {(m, s, k) for m in methods for s in sets
                                                                       for k in (1, 2, 3)}
    assert len(rows) == len(methods) * len(sets) * 3
    assert all(0 < float(r["error_p10"]) <= float(r["error_p90"]) for r in rows)
    assert (out / "compare.png").is_file() and "<!-- begin compare -->" in (tmp_path / "R.md").read_text()
    with pytest.raises(SystemExit):  # the trained runs are reused only under the same config
        main(["compare", str(CONFIG), "--residuals", "standard", *[f"--set={s}" for s in TINY], "--set=model.beta=0.5",
              "--test-graphs", "1", "--out", str(out), "--no-progress"])


def test_compare_rejects_other_tasks(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["compare", str(CONFIG.parent / "modular97.toml"), "--out", str(tmp_path / "c")])
    assert "graph_consensus" in capsys.readouterr().err


@pytest.mark.parametrize("method,params", [("pdmm", {"theta": 1.0}), ("pdmm", {"theta": 0.5}), ("qa-pdmm", {}),
                                           ("admm", {})])
def test_round_r_of_every_classical_method_has_heard_only_r_hops(method, params):
    """From x0 = a, as compare runs them, a change at node 0 of a path reaches node k at round k, not before."""
    G = nx.path_graph(8)
    a = np.random.default_rng(0).normal(size=(8, 1))
    moved = a.copy()
    moved[0] += 1.0
    for rounds in (1, 2, 3):
        x = [np.asarray(pdmm.solve(pdmm.averaging(G, values), method=method, rho=0.7, max_iter=rounds, tol=0,
                                   x0=values, **params).x) for values in (a, moved)]
        changed = np.abs(x[0] - x[1])[:, 0] > 1e-12
        assert changed.tolist() == [k <= rounds for k in range(8)], (rounds, changed)
