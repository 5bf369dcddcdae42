"""Selection by row masks, as pdmm.network applies its events: torch.where, or numba kernels on the CPU.

    choose(mask, new, old)             = torch.where(mask, new, old)          over rows (N, B, ...)
    exchanged(mask, y, rev, held)      = torch.where(mask, y[rev], held)      the exchange of what is delivered
    count(mask)                        = mask.sum(0)                          (B,) int64
    gathered(mask, index)              = mask[index]                          node masks read per edge

On the CPU, with numba and no gradient to track: rows of one number go through numba kernels (the
gather, then a branch-free blend of bit patterns, no branch to mispredict); rows of several numbers
start from the side most rows take and copy the others' rows over it (index_copy_), so each row is
read about once, as in the bare exchange. Elsewhere, and where autograd must see the selection
(bridge.UnrolledPDMM), torch.where runs. All give the same bits.
"""
import math

import torch

from . import draws
from .draws import numba

INTEGER_VIEWS = {8: torch.int64, 4: torch.int32, 2: torch.int16}  # element size -> integer of the same bits


def _kernel_for(mask, *tensors):
    """Whether the numba kernels serve these tensors: numba present (draws.numba, which tests may unset), on the
    CPU, a width with an integer view, no gradient to track."""
    if draws.numba is None or mask.device.type != "cpu" or tensors[0].element_size() not in INTEGER_VIEWS:
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _bits(t):
    """t contiguous and flattened, viewed as integers of its width (numpy)."""
    return t.contiguous().view(-1).view(INTEGER_VIEWS[t.element_size()]).numpy()


def _widen(mask, like):
    return mask.view(*mask.shape, *[1] * (like.dim() - mask.dim()))


def choose(mask, new, old):
    """new where mask, else old: mask (N, B) bool, new and old (N, B, ...)."""
    if not _kernel_for(mask, new, old):
        return torch.where(_widen(mask, new), new, old)
    if math.prod(new.shape[1:]) > 1:
        return _by_rows(mask, new, old)
    out = torch.empty_like(new, memory_format=torch.contiguous_format)
    _choose_numba(_bits(out), _bits(new), _bits(old), mask.contiguous().view(-1).numpy())
    return out


def exchanged(mask, y, rev, held):
    """y[rev] where mask, else held: mask (E, B) bool, y and held (E, B, ...), rev (E,) int32 or int64."""
    if not _kernel_for(mask, y, held):
        return torch.where(_widen(mask, held), y.index_select(0, rev), held)
    if math.prod(held.shape[1:]) > 1:
        return _by_rows(mask, y, held, rev)
    out = torch.empty_like(held, memory_format=torch.contiguous_format)
    _exchanged_numba(_bits(out), _bits(y), rev.numpy(), _bits(held), mask.contiguous().view(-1).numpy())
    return out


def _by_rows(mask, new, old, rev=None):
    """choose (rev None) or exchanged for rows of several numbers: start from the side most rows take
    (new[rev], or old) and copy the other side's rows over it, so each row is read once, as in a gather."""
    rows, B = mask.numel(), mask.shape[1]
    flat = mask.reshape(-1)
    if 2 * int(count(mask).sum()) >= rows:
        out = new.index_select(0, rev) if rev is not None else new.clone(memory_format=torch.contiguous_format)
        fix = torch.nonzero(~flat).squeeze(1)
        return out.view(rows, -1).index_copy_(0, fix, old.reshape(rows, -1).index_select(0, fix)).view(out.shape)
    out = old.clone(memory_format=torch.contiguous_format)
    fix = torch.nonzero(flat).squeeze(1)
    source = fix if rev is None else rev.index_select(0, fix // B).to(torch.int64) * B + fix % B
    return out.view(rows, -1).index_copy_(0, fix, new.reshape(rows, -1).index_select(0, source)).view(out.shape)


def count(mask):
    """(B,) int64: the True entries of mask (N, B) per column."""
    if draws.numba is None or mask.device.type != "cpu":
        return mask.sum(0)
    out = torch.zeros(mask.shape[1], dtype=torch.int64)
    _count_numba(mask.contiguous().view(-1).numpy(), out.numpy())
    return out


def gathered(mask, index):
    """mask[index]: (n, B) bool rows gathered to (E, B) by an int32 or int64 index (E,)."""
    if draws.numba is None or index.device.type != "cpu":
        return mask.index_select(0, index)
    out = torch.empty(len(index), mask.shape[1], dtype=torch.bool)
    _gathered_numba(out.view(-1).numpy(), mask.contiguous().view(-1).numpy(), index.numpy(), mask.shape[1])
    return out


if numba is not None:
    @numba.njit(nogil=True, cache=True)
    def _gathered_numba(out, mask, index, batch):
        """`gathered` over flattened rows."""
        if batch == 1:
            for e in range(len(index)):
                out[e] = mask[index[e]]
            return
        for e in range(len(index)):
            for b in range(batch):
                out[e * batch + b] = mask[index[e] * batch + b]

    @numba.njit(nogil=True, cache=True)
    def _choose_numba(out, new, old, mask):
        """Row r: new[r] where mask[r], else old[r] (one number per row, as bit patterns; a branch-free blend)."""
        for r in range(len(mask)):
            keep = numba.int64(mask[r]) - 1  # 0 where new is chosen, all ones where old is
            a, b = new[r], old[r]
            out[r] = a ^ ((a ^ b) & keep)

    @numba.njit(nogil=True, cache=True)
    def _exchanged_numba(out, y, rev, held, mask):
        """Row e: y[rev[e]] where mask[e], else held[e] (one number per row): the gather, then a blend over
        contiguous rows (vectorised; no branch to mispredict)."""
        for e in range(len(rev)):
            out[e] = y[rev[e]]
        for e in range(len(rev)):
            keep = numba.int64(mask[e]) - 1
            a, b = out[e], held[e]
            out[e] = a ^ ((a ^ b) & keep)

    @numba.njit(nogil=True, cache=True)
    def _count_numba(mask, out):
        batch = len(out)
        if batch == 1:
            total = 0
            for r in range(len(mask)):
                total += mask[r]
            out[0] = total
            return
        for r in range(len(mask)):
            out[r % batch] += mask[r]
