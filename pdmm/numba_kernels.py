"""The numba kernels of pdmm.draws and pdmm.masked: what they compute on CPU tensors, compiled once per process and
cached on disk by numba. Importing this module imports numba, so pdmm imports it only when a CPU network run first
needs a kernel (pdmm.draws.numba_kernels), and not at all where numba is not installed: the torch expressions of
those modules then give the same bits (docs/guide/network.md, "How the events are drawn")."""

from typing import Any

import numba

from .splitmix import C1, C2, GAMMA, SHIFTS


@numba.njit(inline="always")
def mixed(key, t):
    """All 64 bits of draw t from key (uint64 key, int t), as a uint64."""
    u64 = numba.uint64
    z = u64(key) + u64(t + 1) * u64(GAMMA)
    z = (z ^ (z >> u64(SHIFTS[0]))) * u64(C1)
    z = (z ^ (z >> u64(SHIFTS[1]))) * u64(C2)
    return z ^ (z >> u64(SHIFTS[2]))


@numba.njit(inline="always")
def uniform(key, t):
    """u(key, t) of pdmm.draws.uniform on uint64 key and int t: the draw's upper 32 bits as an int64."""
    return numba.int64(mixed(key, t) >> numba.uint64(32))


@numba.njit(nogil=True, cache=True)
def fractions_at(out, key, index, batch, width, p):
    """pdmm.draws.fractions_at: out[(e B + b) w + k] from trial (index[e] B + b) w + k, top p bits over 2^p."""
    shift, scale = numba.uint64(64 - p), 2.0**-p
    for e in range(len(index)):
        for b in range(batch):
            trial, at = (index[e] * batch + b) * width, (e * batch + b) * width
            for k in range(width):
                out[at + k] = numba.float64(mixed(key, trial + k) >> shift) * scale


@numba.njit(nogil=True, cache=True)
def below_one(out, key, limit):
    """pdmm.draws.below with one bound for all trials."""
    for t in range(len(out)):
        out[t] = uniform(key, t) < limit


@numba.njit(nogil=True, cache=True)
def below_at(out, key, index, limit, batch):
    """pdmm.draws.below_at."""
    if batch == 1:
        for e in range(len(index)):
            out[e] = uniform(key, index[e]) < limit
        return
    for e in range(len(index)):
        for b in range(batch):
            out[e * batch + b] = uniform(key, index[e] * batch + b) < limit


@numba.njit(nogil=True, cache=True)
def below_each(out, key, limits):
    """pdmm.draws.below with one bound per trial."""
    for t in range(len(out)):
        out[t] = uniform(key, t) < limits[t]


@numba.njit(nogil=True, cache=True)
def below_each_at(out, key, index, limits, batch):
    """pdmm.draws.below_each_at."""
    for e in range(len(index)):
        for b in range(batch):
            t = e * batch + b
            out[t] = uniform(key, index[e] * batch + b) < limits[t]


@numba.njit(nogil=True, cache=True)
def gathered(out, mask, index, batch):
    """pdmm.masked.gathered over flattened rows."""
    if batch == 1:
        for e in range(len(index)):
            out[e] = mask[index[e]]
        return
    for e in range(len(index)):
        for b in range(batch):
            out[e * batch + b] = mask[index[e] * batch + b]


@numba.njit(nogil=True, cache=True)
def choose(out, new, old, mask):
    """Row r: new[r] where mask[r], else old[r] (one number per row, as bit patterns; a branch-free blend)."""
    for r in range(len(mask)):
        keep = numba.int64(mask[r]) - 1  # 0 where new is chosen, all ones where old is
        a, b = new[r], old[r]
        out[r] = a ^ ((a ^ b) & keep)


@numba.njit(nogil=True, cache=True)
def count(mask, out):
    """pdmm.masked.count over flattened rows, into out (B,), zeros on entry."""
    batch = len(out)
    if batch == 1:
        total = 0
        for r in range(len(mask)):
            total += mask[r]
        out[0] = total
        return
    for r in range(len(mask)):
        out[r % batch] += mask[r]


_DRAWN_KERNELS: dict[tuple, Any] = {}  # compiled exchanged_drawn kernels by their flags


def exchanged_drawn(has_s, has_l, has_k, has_d):
    """The kernel of pdmm.masked.exchanged_drawn for one combination of events, compiled at its first use in a
    process (about 0.5 s): the flags are constants of the closure, so each loop carries only its own draws and stays
    vectorised (one kernel testing four flags per row ran 1.5x slower)."""
    flags = has_s, has_l, has_k, has_d
    if flags not in _DRAWN_KERNELS:

        @numba.njit(nogil=True)
        def kernel(out, y, rev, held, key_s, index_s, bound_s, key_l, index_l, bound_l, kept, key_d, bound_d):
            for e in range(len(rev)):
                out[e] = y[rev[e]]
            sent, delivered = 0, 0
            for e in range(len(rev)):
                s = True
                if has_s:
                    s = uniform(key_s, index_s[e]) < bound_s
                if has_l:
                    s = s & (uniform(key_l, index_l[e]) < bound_l)
                d = s
                if has_k:
                    d = d & kept[e]
                if has_d:
                    d = d & (uniform(key_d, e) < bound_d)
                sent += s
                delivered += d
                keep = numba.int64(d) - 1
                a, b = out[e], held[e]
                out[e] = a ^ ((a ^ b) & keep)
            return sent, delivered

        _DRAWN_KERNELS[flags] = kernel
    return _DRAWN_KERNELS[flags]
