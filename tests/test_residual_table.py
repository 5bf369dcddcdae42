"""The residual table (attention/residuals.py, docs/guide/attention.md "The residual table"): it names every residual
AttentionConfig accepts, its rows agree with what the layer computes, "accumulated" refuses to run without the
model's memory, and the experiments read a residual's knobs from it."""

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import attention
from attention import (
    RESIDUAL_KNOBS,
    RESIDUAL_TABLE,
    RESIDUALS,
    AttentionConfig,
    Block,
    GraphAttention,
    MultiHeadAttention,
    TokenGraph,
)
from attention.mha import SignalMemory
from experiments.probing import probe_gamma
from experiments.runs import Run, group_runs

B, T, C, NH = 2, 6, 16, 4
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "attention.md"


def documented_residuals():
    """The residual names of the guide's switch table: the rows from `residual` down to the next field."""
    rows = GUIDE.read_text().split("| `residual` |", 1)[1].split("| `kernel` |", 1)[0]
    return re.findall(r'\| `"(\w+)"` \|', "| `residual` |" + rows)


def test_the_table_names_exactly_the_residuals_attentionconfig_accepts_and_the_guide_documents():
    names = documented_residuals()
    assert names == ["standard", "attentionx", "belief", "belief_star", "concat", "accumulated"]
    assert list(RESIDUAL_TABLE) == names and RESIDUALS == tuple(names)
    for name in names:
        config = AttentionConfig(d_model=C, n_head=NH, residual=name)
        assert config.residual_spec is RESIDUAL_TABLE[name] and RESIDUAL_TABLE[name].name == name
    for other in ("differential", "symmetric", "linear", "Standard", ""):  # kernels and switches are not residuals
        with pytest.raises(ValueError, match=f"unknown residual {other!r}; choose one of standard, attentionx"):
            AttentionConfig(d_model=C, n_head=NH, residual=other)


@pytest.mark.parametrize("residual", RESIDUALS)
def test_each_signal_is_as_wide_as_its_row_says(residual):
    spec, config = RESIDUAL_TABLE[residual], AttentionConfig(d_model=C, n_head=NH, residual=residual)
    mh, v = torch.randn(B, T, 12, dtype=torch.float64), torch.randn(B, T, 12, dtype=torch.float64)  # w_v = 12
    assert spec.signal(mh, v, config).shape == (B, T, spec.width * 12)


def layers_with(residual, **knobs):
    """Three float64 layers of `residual` with fixed weights (seed 0 for every knob setting)."""
    torch.manual_seed(0)
    config = AttentionConfig(d_model=C, n_head=NH, residual=residual, **knobs)
    return [MultiHeadAttention(config, layer_index=index + 1).double() for index in range(3)]


def stack_output(layers, x):
    """x plus each layer's update in turn, one SignalMemory through all of them (as the models do)."""
    memory = SignalMemory()
    for layer in layers:
        x = x + layer(x, TokenGraph.causal(T), memory)
    return x


@pytest.mark.parametrize("residual", RESIDUALS)
@pytest.mark.parametrize("knob", RESIDUAL_KNOBS)
def test_a_knob_changes_the_output_exactly_where_the_table_lists_it(residual, knob):
    x = torch.randn(B, T, C, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    low, high = (stack_output(layers_with(residual, **{knob: value}), x) for value in (0.5, 2.0))
    changed = (high - low).abs().max().item() > 1e-6
    assert changed == (knob in RESIDUAL_TABLE[residual].knobs), (residual, knob)
    if not changed:
        assert torch.equal(high, low)


@pytest.mark.parametrize("make", [MultiHeadAttention, GraphAttention, Block], ids=lambda c: c.__name__)
def test_accumulated_without_a_memory_raises_naming_it(make):
    torch.manual_seed(0)
    layer = make(AttentionConfig(d_model=C, n_head=NH, residual="accumulated"), 1)
    x = torch.randn(B, T, C)
    with pytest.raises(ValueError, match=r"residual 'accumulated' adds the earlier layers' updates: pass the Sig"):
        layer(x, TokenGraph.causal(T))
    torch.manual_seed(0)
    standard = make(AttentionConfig(d_model=C, n_head=NH), 1)  # same weights: a fresh memory is the standard update
    torch.testing.assert_close(layer(x, TokenGraph.causal(T), SignalMemory()), standard(x, TokenGraph.causal(T)))


@pytest.mark.parametrize("residual", [name for name in RESIDUALS if not RESIDUAL_TABLE[name].needs_memory])
def test_the_other_residuals_need_no_memory(residual):
    layer = MultiHeadAttention(AttentionConfig(d_model=C, n_head=NH, residual=residual), 1)
    x = torch.randn(B, T, C)
    torch.testing.assert_close(layer(x, TokenGraph.causal(T)), layer(x, TokenGraph.causal(T), SignalMemory()))


def run(residual, gamma, seed):
    return Run(
        Path(f"{residual}-{gamma}-{seed}"),
        {"model": {"residual": residual, "gamma": gamma}, "train": {"seed": seed}},
        [],
        None,
        None,
    )


def labels(runs):
    return {name: [r.name for r in members] for name, members in group_runs(runs).items()}


def test_run_labels_name_a_knob_only_where_the_table_lists_it(monkeypatch):
    """A gamma set on a belief run is left out of its label (the table: belief reads no gamma); once the table
    says belief reads gamma, the experiments tell those runs apart by it."""
    runs = [run(name, gamma, seed) for name in ("attentionx", "belief") for gamma in (1.0, 3.0) for seed in (0, 1)]
    assert labels(runs) == {
        "residual=attentionx, gamma=1.0": ["attentionx-1.0-0", "attentionx-1.0-1"],
        "residual=attentionx, gamma=3.0": ["attentionx-3.0-0", "attentionx-3.0-1"],
        "residual=belief": ["belief-1.0-0", "belief-3.0-0", "belief-1.0-1", "belief-3.0-1"],  # by seed
    }
    assert probe_gamma(SimpleNamespace(residual="attentionx", gamma=3.0)) == 3.0
    assert probe_gamma(SimpleNamespace(residual="belief", gamma=3.0)) == 1.0
    reads_gamma = dataclasses.replace(RESIDUAL_TABLE["belief"], knobs=("gamma",))
    monkeypatch.setitem(attention.RESIDUAL_TABLE, "belief", reads_gamma)
    assert "residual=belief, gamma=3.0" in labels(runs)
    assert probe_gamma(SimpleNamespace(residual="belief", gamma=3.0)) == 3.0
    assert "residual=unknown" in labels([run("unknown", 1.0, 0), run("unknown", 3.0, 0), run("belief", 1.0, 0)])
