"""pdmm-bridge probe on runs of every residual signal (and a ViT), and on a run without a checkpoint."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from extras import needs_extra

from attention import RESIDUALS, AttentionConfig, MultiHeadAttention, TokenGraph
from bridge.probe import STATISTICS, layer_statistics, output_projection
from experiments.cli import main
from experiments.config import load_config
from experiments.errors import package_version
from experiments.train import train

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
CORPUS = "builtin:tinyshakespeare"  # the corpus shipped in experiments/data
TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.d_model=16",
    "train.block_size=16",
    "train.batch_size=4",
    "train.max_iters=2",
    "train.eval_interval=2",
    "train.eval_iters=1",
    "task.sample_length=0",
]


@pytest.mark.parametrize("residual", RESIDUALS)
def test_probe_reports_every_layer_for_every_residual(tmp_path, residual):
    run = tmp_path / residual
    train(
        load_config(
            CONFIGS / "shakespeare_char_cpu.toml", [*TINY, f'task.data="{CORPUS}"', f"model.residual={residual}"]
        ),
        run,
        progress=False,
    )
    assert main(["probe", str(run), "--batches", "2"]) == 0
    record = json.loads((run / "probe.json").read_text())
    assert len(record["layers"]) == 2 and record["residual"] == residual and record["version"] == package_version()
    assert all(set(layer) == set(STATISTICS) and all(np.isfinite(list(layer.values()))) for layer in record["layers"])
    assert (run / "probe.png").is_file() and record["pdmm_residual_normalised"][0] == 1.0


def test_probe_works_on_a_vit_run(tmp_path):
    needs_extra("sklearn")
    run = tmp_path / "vit"
    train(
        load_config(
            CONFIGS / "digits_vit.toml",
            ["train.max_iters=2", "train.eval_interval=2", "model.n_layer=2", "model.d_model=16", "model.n_head=2"],
        ),
        run,
        progress=False,
    )
    assert main(["probe", str(run), "--out", str(tmp_path / "p")]) == 0
    assert len(json.loads((tmp_path / "p" / "probe.json").read_text())["layers"]) == 2


def test_probe_needs_a_checkpoint(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.toml").write_text((CONFIGS / "digits_vit.toml").read_text())
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and "no ckpt.pt" in capsys.readouterr().err


def test_probe_statistics_against_a_hand_computation_of_one_layer():
    """Every statistic from the layer's own weights, by the equations of docs/theory/residuals.md section 14, token
    by token."""
    torch.manual_seed(0)
    config = AttentionConfig(d_model=8, n_head=2, bias=True, probe=True)
    layer = MultiHeadAttention(config).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)  # the residual stream; the layer reads LN(x) in a block
    with torch.no_grad():
        y = layer(x, TokenGraph.full(5))
    q, k, v = (
        x @ w.T + b
        for w, b in zip(layer.c_attn.weight.detach().split(8), layer.c_attn.bias.detach().split(8), strict=False)
    )
    w_o = layer.c_proj.weight.detach()
    sums = dict.fromkeys(["phi", "delta", "wdelta", "cos_delta", "cos_mh", "cos_update"], 0.0)
    for batch in range(2):
        for i in range(5):
            mh = torch.cat(
                [
                    sum(
                        torch.softmax(
                            torch.stack(
                                [q[batch, i, h * 4 : (h + 1) * 4] @ k[batch, j, h * 4 : (h + 1) * 4] for j in range(5)]
                            )
                            / 2.0,
                            0,
                        )[j]
                        * v[batch, j, h * 4 : (h + 1) * 4]
                        for j in range(5)
                    )
                    for h in range(2)
                ]
            )  # softmax over all tokens j, per head
            vi, xi = v[batch, i], x[batch, i]
            delta = mh - (mh @ vi) / (vi @ vi) * vi

            def cos(a, b):
                return float(a @ b / (a.norm() * b.norm()))

            for key, value in (
                ("phi", (vi - 3 * mh).norm() / vi.norm()),
                ("delta", delta.norm() / mh.norm()),
                ("wdelta", (w_o @ delta).norm() / (w_o @ mh).norm()),
                ("cos_delta", cos(w_o @ delta, xi)),
                ("cos_mh", cos(w_o @ mh, xi)),
                ("cos_update", cos(y[batch, i], xi)),
            ):
                sums[key] += float(value) / 10
    stats = layer_statistics({**layer.probes, "token": x}, gamma=3.0, w_o=output_projection(layer))
    assert stats == pytest.approx(
        {
            "phi_ratio": sums["phi"],
            "delta_ratio": sums["delta"],
            "wdelta_ratio": sums["wdelta"],
            "cos_delta_wo": sums["cos_delta"],
            "cos_mh_wo": sums["cos_mh"],
            "cos_update": sums["cos_update"],
        },
        rel=1e-9,
    )
    assert stats["wdelta_ratio"] != pytest.approx(stats["delta_ratio"], rel=1e-3)  # W^o changes the ratio


def test_probe_token_is_the_residual_stream_and_tied_models_are_refused(tmp_path, capsys):
    from attention import AttentionConfig, Block

    block = Block(AttentionConfig(d_model=8, n_head=2, probe=True), layer_index=1)
    x = torch.randn(2, 5, 8)
    block(x)
    torch.testing.assert_close(block.attn.probes["token"], x)  # not LN(x), which the attention reads
    torch.testing.assert_close(block.attn.probes["input"], block.ln_1(x).detach())
    run = tmp_path / "tied"
    train(
        load_config(
            CONFIGS / "graph_consensus.toml",
            [
                "train.max_iters=2",
                "train.eval_interval=2",
                "model.n_layer=2",
                "model.d_model=16",
                "model.n_head=2",
                "train.batch_size=2",
                "task.val_graphs=1",
                "task.tied=true",
            ],
        ),
        run,
        progress=False,
    )
    with pytest.raises(SystemExit):
        main(["probe", str(run)])
    assert "tied" in capsys.readouterr().err
