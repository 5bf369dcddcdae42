"""Selection by row masks, as pdmm.network applies its events: torch.where, fused into one pass on the CPU.

    choose(mask, new, old)             = torch.where(mask, new, old)          over rows (N, B, ...)
    exchanged(mask, y, rev, held)      = torch.where(mask, y[rev], held)      the exchange of what is delivered
    count(mask)                        = mask.sum(0)                          (B,) int64
    edge_masks(awake, dst, up, ..., kept) = sending = awake[dst] & up, delivered = sending & kept   (E, B)

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
    source = fix if rev is None else rev.to(torch.int64).index_select(0, fix // B) * B + fix % B
    return out.view(rows, -1).index_copy_(0, fix, new.reshape(rows, -1).index_select(0, source)).view(out.shape)


def count(mask):
    """(B,) int64: the True entries of mask (N, B) per column."""
    if draws.numba is None or mask.device.type != "cpu":
        return mask.sum(0)
    out = torch.zeros(mask.shape[1], dtype=torch.int64)
    _count_numba(mask.contiguous().view(-1).numpy(), out.numpy())
    return out


def edge_masks(awake, dst, up, undirected, kept):
    """(sending, delivered), (E, B) bool: sending = awake[dst] & up, delivered = sending & kept, by receiving
    edge; awake (n, B) by node, up (F, B) by undirected edge (undirected (E,): each edge's) or, undirected None,
    (E, B) by edge; kept (E, B). Any of awake, up, kept None for all True; sending None if awake and up are."""
    if awake is None and up is None:
        return None, kept
    if draws.numba is None or dst.device.type != "cpu" or (up is not None and undirected is None):
        sending = _and(None if awake is None else awake.index_select(0, dst),
                       None if up is None else up if undirected is None else up.index_select(0, undirected))
        return sending, _and(sending, kept)
    E, B = len(dst), (awake if awake is not None else up).shape[1]
    sending = torch.empty(E, B, dtype=torch.bool)
    delivered = sending if kept is None else torch.empty(E, B, dtype=torch.bool)
    none = torch.empty(0, dtype=torch.bool).numpy()
    flat = [none if m is None else m.contiguous().view(-1).numpy() for m in (awake, up, kept)]
    _edge_masks_numba(sending.view(-1).numpy(), delivered.view(-1).numpy(), *flat, dst.numpy(),
                      (dst if up is None else undirected).numpy(), B)
    return sending, delivered


def _and(a, b):
    """a & b of two masks, either None for all True."""
    return b if a is None else a if b is None else a & b


if numba is not None:
    @numba.njit(nogil=True, cache=True)
    def _edge_masks_numba(sending, delivered, awake, up, kept, dst, undirected, batch):
        """edge_masks over flattened rows e B + b; an empty awake, up or kept is all True (branch-free bytes)."""
        wake, link, keep = len(awake) > 0, len(up) > 0, len(kept) > 0
        if batch == 1:  # one instance: loops the compiler keeps tight
            for e in range(len(dst)):
                sending[e] = (awake[dst[e]] if wake else True) & (up[undirected[e]] if link else True)
            if keep:
                for e in range(len(dst)):
                    delivered[e] = sending[e] & kept[e]
            return
        for e in range(len(dst)):
            sender, pair = dst[e] * batch, (undirected[e] if link else 0) * batch
            for b in range(batch):
                r = e * batch + b
                s = (awake[sender + b] if wake else True) & (up[pair + b] if link else True)
                sending[r] = s
                if keep:
                    delivered[r] = s & kept[r]

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
