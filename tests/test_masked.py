"""pdmm.masked: the numba kernels against plain Python loops over the rows, bit for bit, and the torch path
where autograd must see the selection."""

import numpy as np
import pytest
import torch
from extras import needs_extra

from pdmm import draws, masked


def loop_choose(mask, new, old):
    out = old.clone()
    for r in range(mask.shape[0]):
        for b in range(mask.shape[1]):
            if mask[r, b]:
                out[r, b] = new[r, b]
    return out


@pytest.fixture(params=["numba kernel", "torch expression"])
def path(request, monkeypatch):
    if request.param == "torch expression":
        monkeypatch.setattr(draws, "NUMBA", False)
    else:
        needs_extra("numba")
    return request.param


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch, width", [(1, ()), (1, (1,)), (3, (2,)), (2, (2, 3))])
@pytest.mark.parametrize("taken", [0.2, 0.7])
def test_choose_and_exchanged_equal_loops_over_the_rows(path, dtype, batch, width, taken):
    """taken: the fraction of rows that take new (rows of several numbers start from the larger side)."""
    generator = torch.Generator().manual_seed(batch)
    E = 40
    mask = torch.rand(E, batch, generator=generator) < taken
    new, old = (torch.randn(E, batch, *width, generator=generator).to(dtype) for _ in range(2))
    new[0, 0] = float("nan")  # a NaN row is carried as bits, not compared
    rev = torch.randperm(E, generator=generator)
    expected = loop_choose(mask, new, old)
    got = masked.choose(mask, new, old)
    assert torch.equal(got.nan_to_num(7.0), expected.nan_to_num(7.0)) and got.dtype == dtype
    expected = loop_choose(mask, new[rev], old)
    for index in (rev, rev.to(torch.int32)):
        assert torch.equal(masked.exchanged(mask, new, index, old).nan_to_num(7.0), expected.nan_to_num(7.0))
    assert torch.equal(masked.count(mask), mask.sum(0))


def test_choose_keeps_its_inputs_and_takes_non_contiguous_ones(path):
    new, old = torch.randn(8, 2, 3).transpose(1, 2).contiguous().transpose(1, 2), torch.randn(8, 2, 3)
    before = new.clone(), old.clone()
    mask = torch.tensor([[True, False]] * 8)
    out = masked.choose(mask, new, old)
    assert torch.equal(out[:, 0], new[:, 0]) and torch.equal(out[:, 1], old[:, 1])
    assert torch.equal(new, before[0]) and torch.equal(old, before[1])


@pytest.mark.parametrize("batch", [1, 3])
def test_gathered_equals_a_loop(path, batch):
    generator = torch.Generator().manual_seed(batch)
    mask = torch.rand(10, batch, generator=generator) < 0.6
    index = torch.randint(10, (30,), generator=generator)
    expected = torch.tensor([[bool(mask[i, b]) for b in range(batch)] for i in index.tolist()])
    for kind in (torch.int32, torch.int64):
        assert torch.equal(masked.gathered(mask, index.to(kind)), expected)


def test_gradients_flow_through_the_torch_path():
    new, old = torch.randn(6, 1, 2, requires_grad=True), torch.randn(6, 1, 2, requires_grad=True)
    mask = torch.tensor([[True], [False]] * 3)
    masked.choose(mask, new, old).sum().backward()
    assert torch.equal(new.grad[:, 0, 0], mask[:, 0].double().float())
    assert torch.equal(old.grad[:, 0, 0], (~mask[:, 0]).float())
    y = torch.randn(6, 1, 2, requires_grad=True)
    masked.exchanged(mask, y, torch.arange(6).flip(0), old.detach()).sum().backward()
    assert np.array_equal(y.grad[:, 0, 0].numpy(), mask[:, 0].flip(0).float().numpy())
