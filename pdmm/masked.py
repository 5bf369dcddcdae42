"""Selection by row masks, as pdmm.network applies its events: torch.where, or numba kernels on the CPU.

    choose(mask, new, old)             = torch.where(mask, new, old)          over rows (N, B, ...)
    exchanged(mask, y, rev, held)      = torch.where(mask, y[rev], held)      the exchange of what is delivered
    exchanged_drawn(y, rev, held, ...) = exchanged with the mask drawn in the kernel (pdmm.draws), B = 1, one number
    count(mask)                        = mask.sum(0)                          (B,) int64
    gathered(mask, index)              = mask[index]                          node masks read per edge

On the CPU, with numba and no gradient to track: rows of one number go through numba kernels (the
gather, then a branch-free blend of bit patterns, no branch to mispredict; exchanged is
exchanged_drawn with its mask given); rows of several numbers
start from the side most rows take and copy the others' rows over it (index_copy_), so each row is
read about once, as in the bare exchange. With one instance and one number per row, the exchange
can draw the mask itself (exchanged_drawn), so no mask is written and read back. Elsewhere, and
where autograd must see the selection (bridge.UnrolledPDMM), torch.where runs. All give the same bits.
"""

import math

import numpy as np
import torch

from . import draws

INTEGER_VIEWS = {8: torch.int64, 4: torch.int32, 2: torch.int16}  # element size -> integer of the same bits


def _kernel_for(mask, *tensors):
    """Whether the numba kernels serve these tensors: on the CPU, a width with an integer view, no gradient to track,
    and the kernels at hand (draws.numba_kernels: numba installed and draws.NUMBA, which tests may unset)."""
    if mask.device.type != "cpu" or tensors[0].element_size() not in INTEGER_VIEWS or draws.numba_kernels() is None:
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
    draws.numba_kernels().choose(_bits(out), _bits(new), _bits(old), mask.contiguous().view(-1).numpy())
    return out


def exchanged(mask, y, rev, held):
    """y[rev] where mask, else held: mask (E, B) bool, y and held (E, B, ...), rev (E,) int32 or int64."""
    if not _kernel_for(mask, y, held):
        return torch.where(_widen(mask, held), y.index_select(0, rev), held)
    if math.prod(held.shape[1:]) > 1:
        return _by_rows(mask, y, held, rev)
    return exchanged_drawn(y, rev, held, None, None, mask.contiguous(), None)[0]  # the mask given, nothing drawn


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
    kernels = draws.numba_kernels() if mask.device.type == "cpu" else None
    if kernels is None:
        return mask.sum(0)
    out = torch.zeros(mask.shape[1], dtype=torch.int64)
    kernels.count(mask.contiguous().view(-1).numpy(), out.numpy())
    return out


def drawn_in_kernel(y, held, drawn):
    """Whether exchanged_drawn serves this exchange: numba, the CPU, one instance and one number per row, no
    gradient to track, and the channel's sender and link events drawn per edge (`drawn`)."""
    return drawn and math.prod(held.shape[1:]) == 1 and _kernel_for(held, y, held)


def exchanged_drawn(y, rev, held, sender, link, kept, dropped):
    """(out, sent, delivered): exchanged(mask, y, rev, held) for one instance and one number per row with the mask
    drawn inside the kernel's blend loop, mask[e] = sending[e] & kept[e], sending[e] the draws of sender and link,
    each (key, index (E,), bound) for trial index[e] of a stream (pdmm.draws.below_at) or None (always); kept
    (E,) bool, or (key, bound) for trial e of a stream (`dropped`: drawn here), or both None. sent and
    delivered: (1,) int64 counts of the sending and delivered rows. Numba's kernel: called where drawn_in_kernel
    (or, from exchanged, _kernel_for) holds."""
    none = torch.empty(0, dtype=rev.dtype).numpy()
    (key_s, index_s, bound_s), (key_l, index_l, bound_l) = (
        (0, none, 0) if draw is None else (np.uint64(draw[0]), draw[1].numpy(), draw[2]) for draw in (sender, link)
    )
    key_d, bound_d = (0, 0) if dropped is None else dropped
    out = torch.empty_like(held, memory_format=torch.contiguous_format)
    kernel = draws.numba_kernels().exchanged_drawn(
        sender is not None, link is not None, kept is not None, dropped is not None
    )
    sent, delivered = kernel(
        _bits(out),
        _bits(y),
        rev.numpy(),
        _bits(held),
        np.uint64(key_s),
        index_s,
        bound_s,
        np.uint64(key_l),
        index_l,
        bound_l,
        torch.empty(0, dtype=torch.bool).numpy() if kept is None else kept.reshape(-1).numpy(),
        np.uint64(key_d),
        bound_d,
    )
    return out, torch.tensor([sent]), torch.tensor([delivered])


def gathered(mask, index):
    """mask[index]: (n, B) bool rows gathered to (E, B) by an int32 or int64 index (E,)."""
    kernels = draws.numba_kernels() if index.device.type == "cpu" else None
    if kernels is None:
        return mask.index_select(0, index)
    out = torch.empty(len(index), mask.shape[1], dtype=torch.bool)
    kernels.gathered(out.view(-1).numpy(), mask.contiguous().view(-1).numpy(), index.numpy(), mask.shape[1])
    return out
