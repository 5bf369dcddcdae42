"""pdmm-bridge probe on runs of every residual signal (and a ViT), and on a run without a checkpoint."""
import json
from pathlib import Path

import pytest
import torch

from attention import RESIDUALS
from experiments.cli import main
from experiments.config import load_config
from bridge.probe import layer_statistics
from experiments.train import train

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
CORPUS = "builtin:tinyshakespeare"  # the corpus shipped in experiments/data
TINY = ["model.n_layer=2", "model.n_head=2", "model.d_model=16", "train.block_size=16", "train.batch_size=4",
        "train.max_iters=2", "train.eval_interval=2", "train.eval_iters=1", "task.sample_length=0"]


@pytest.mark.parametrize("residual", RESIDUALS)
def test_probe_reports_every_layer_for_every_residual(tmp_path, residual):
    run = tmp_path / residual
    train(load_config(CONFIGS / "shakespeare_char_cpu.toml", [*TINY, f'task.data="{CORPUS}"',
                                                              f"model.residual={residual}"]), run, progress=False)
    assert main(["probe", str(run), "--batches", "2"]) == 0
    record = json.loads((run / "probe.json").read_text())
    assert len(record["layers"]) == 2 and record["residual"] == residual
    assert all(0 <= layer["delta_ratio"] <= 1 + 1e-6 and -1 <= layer["cos_update"] <= 1 for layer in record["layers"])
    assert (run / "probe.png").is_file() and record["pdmm_residual_normalised"][0] == 1.0


def test_probe_works_on_a_vit_run(tmp_path):
    run = tmp_path / "vit"
    train(load_config(CONFIGS / "digits_vit.toml", ["train.max_iters=2", "train.eval_interval=2", "model.n_layer=2",
                                                    "model.d_model=16", "model.n_head=2"]), run, progress=False)
    assert main(["probe", str(run), "--out", str(tmp_path / "p")]) == 0
    assert len(json.loads((tmp_path / "p" / "probe.json").read_text())["layers"]) == 2


def test_probe_needs_a_checkpoint(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.toml").write_text((CONFIGS / "digits_vit.toml").read_text())
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and "no ckpt.pt" in capsys.readouterr().err


def test_layer_statistics_against_direct_formulas():
    mh, v, x, y = (torch.randn(2, 5, 8, dtype=torch.float64) for _ in range(4))
    stats = layer_statistics({"mh": mh, "v": v, "token": x, "update": y}, gamma=3.0)
    alpha = (mh * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True)
    assert stats["phi_ratio"] == pytest.approx(((v - 3 * mh).norm(dim=-1) / v.norm(dim=-1)).mean().item())
    assert stats["delta_ratio"] == pytest.approx(((mh - alpha * v).norm(dim=-1) / mh.norm(dim=-1)).mean().item())
    cos = (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1))
    assert stats["cos_update"] == pytest.approx(cos.mean().item())


def test_probe_token_is_the_residual_stream_and_tied_models_are_refused(tmp_path, capsys):
    from attention import AttentionConfig, Block
    block = Block(AttentionConfig(d_model=8, n_head=2, probe=True), layer_index=1)
    x = torch.randn(2, 5, 8)
    block(x)
    torch.testing.assert_close(block.attn.probes["token"], x)  # not LN(x), which the attention reads
    torch.testing.assert_close(block.attn.probes["input"], block.ln_1(x).detach())
    run = tmp_path / "tied"
    train(load_config(CONFIGS / "graph_consensus.toml", ["train.max_iters=2", "train.eval_interval=2", "model.n_layer=2",
                                                         "model.d_model=16", "model.n_head=2", "train.batch_size=2",
                                                         "task.val_graphs=1", "task.tied=true"]), run, progress=False)
    with pytest.raises(SystemExit):
        main(["probe", str(run)])
    assert "tied" in capsys.readouterr().err
