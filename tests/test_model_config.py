"""The [model] table embeds attention.AttentionConfig (docs/guide/training.md, "Configs"): every committed config
resolves to the AttentionConfig its file's keys and the documented defaults give, field by field; the resolved
config is written back as the committed run directories hold it, byte for byte; and the config code loads without
torch."""

import dataclasses
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from experiments.config import attention_config, load_config, to_toml
from experiments.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "experiments" / "configs").rglob("*.toml"))
RUN_CONFIGS = sorted((ROOT / "docs" / "repro").rglob("config.toml"))  # written by `pdmm-bridge train` before
# ModelConfig embedded AttentionConfig
DEFAULTS = {  # what a [model] table without attention keys resolved to before (AttentionConfig's, bias false)
    "d_model": 128,
    "n_head": 4,
    "residual": "standard",
    "gamma": 1.0,
    "beta": 1.0,
    "kernel": "softmax",
    "symmetric": False,
    "dropout": 0.0,
    "bias": False,
    "probe": False,
    "self_loops": True,
    "send_width": None,
}


def expected_attention(path: Path) -> dict:
    """The AttentionConfig fields of the config file `path`, read straight from its [model] table: each key it
    sets (send_width 0 for None), else DEFAULTS."""
    table = tomllib.loads(path.read_text()).get("model", {})
    fields = {name: table.get(name, default) for name, default in DEFAULTS.items()}
    return {**fields, "send_width": fields["send_width"] or None}


@pytest.mark.parametrize("path", CONFIGS + RUN_CONFIGS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_committed_config_resolves_to_the_attentionconfig_its_keys_give(path):
    assert dataclasses.asdict(load_config(path).model.attention) == expected_attention(path)


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_committed_run_config_is_written_back_byte_for_byte(path):
    assert to_toml(load_config(path)) == path.read_text()


def test_a_value_attentionconfig_refuses_is_one_usage_error_when_the_config_loads():
    with pytest.raises(UsageError, match=r"^\[model\]: d_model \(64\) must be divisible by n_head \(3\)$"):
        load_config(CONFIGS[0], ["model.n_head=3"])
    with pytest.raises(UsageError, match=r"^model.dropout must be < 1, got 1.5$"):  # the key's own check first
        load_config(CONFIGS[0], ["model.dropout=1.5"])


def test_the_config_code_and_attentionconfig_load_without_torch():
    code = (
        "import sys, experiments.config, attention\n"
        "assert attention.AttentionConfig(residual='belief').residual_spec.orthogonal\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "attention.GPT  # a model: imported on first use\n"
        "assert 'torch' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_a_model_that_turns_its_probes_on_leaves_the_runs_config_as_it_was():
    config = load_config(CONFIGS[0])
    layers = attention_config(config.model)
    layers.probe = True  # what bridge.probe does to a built model's layers
    assert config.model.attention.probe is False and attention_config(config.model).probe is False
