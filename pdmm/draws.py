"""Counter-based random draws for simulated networks: trial t of a stream's iteration k is one number.

    u(key, t) = mix(key + (t + 1) gamma) >> 32        (a uniform 32-bit integer; arithmetic mod 2^64)
    mix(z)    = z ^= z >> 30; z *= C1; z ^= z >> 27; z *= C2; z ^= z >> 31

which is output t + 1 of SplitMix64 (Steele, Lea and Flood, OOPSLA 2014) from the state `key`, and
key = stream_key(seed, stream, k) is itself a SplitMix64 output of the seed, the stream and k. A
trial with probability p succeeds when u < round(p 2^32) (`bound`), exact to 2^-32. As every draw
is a function of its address, a trial costs the same anywhere: the whole iteration's trials are one
vectorised pass with no sequential generator state, the CPU kernels (numba's, in pdmm.numba_kernels, where it
is installed; compiled once and cached) and the torch expression (any device; the reference the kernels are
tested against) give the same bits, and nothing is read back from the device. The quantiser's dither and
stochastic rounding and the privacy noise take all 64 bits: `fractions` and `fractions_at` (the dtype's top
significand bits, a uniform number in [0, 1)) and `normals_at` (Box-Muller of two streams' fractions). Trials
are numbered by global node and edge ids, so a part of a graph draws what one process draws for it
(docs/guide/network.md, "Partitioned runs").
"""

import functools
import math
from types import ModuleType

import numpy as np
import torch

from .splitmix import C1, C2, GAMMA, MASK, SHIFTS

NUMBA = True  # False: the torch expression on the CPU too, as where numba is not installed (tests compare the two)


def numba_kernels() -> ModuleType | None:
    """pdmm.numba_kernels, the CPU kernels of this module and pdmm.masked, imported (and numba with it) at the first
    call, so a plain `import pdmm` never loads numba; None where numba is not installed (the optional `numba` extra)
    or NUMBA is False, and the torch expression then serves the CPU, more slowly and with the same bits
    (docs/guide/network.md, "How the events are drawn")."""
    return _import_kernels() if NUMBA else None


@functools.cache
def _import_kernels() -> ModuleType | None:
    try:
        from . import numba_kernels as kernels
    except ModuleNotFoundError as err:
        if err.name != "numba":
            raise
        return None
    return kernels


def mix(z):
    """SplitMix64's output function on a Python integer mod 2^64."""
    z = ((z ^ (z >> SHIFTS[0])) * C1) & MASK
    z = ((z ^ (z >> SHIFTS[1])) * C2) & MASK
    return z ^ (z >> SHIFTS[2])


def stream_key(seed, stream, iteration):
    """The key of draw `iteration` of `stream` (small integers naming the kind of event) under `seed`."""
    key = mix((seed * GAMMA) & MASK)
    key = mix((key + (stream + 1) * GAMMA) & MASK)
    return mix((key + (iteration + 1) * GAMMA) & MASK)


def uniform(key, t):
    """u(key, t) for a Python integer t: the reference of one draw."""
    return mix((key + (t + 1) * GAMMA) & MASK) >> 32


def index(key, t, n):
    """A uniform integer in [0, n) from the 64 bits of draw t (bias below n / 2^64): the reference and only form."""
    return (mix((key + (t + 1) * GAMMA) & MASK) * n) >> 64


def bound(p):
    """The threshold of a 32-bit draw: u < bound(p) with probability p (to 2^-32); 2^32 at p = 1."""
    return round(float(p) * 2**32)


def below(key, count, bounds, device, kernel=True):
    """(count,) bool: trial t a success when u(key, t) < its bound (bounds: one int for all, or a (count,)
    int64 tensor). kernel: the numba kernel where the tensors are on the CPU (else the torch expression)."""
    kernels = numba_kernels() if kernel and torch.device(device).type == "cpu" else None
    if kernels is not None:
        out = torch.empty(count, dtype=torch.bool)
        if torch.is_tensor(bounds):
            kernels.below_each(out.numpy(), np.uint64(key), bounds.numpy())
        else:
            kernels.below_one(out.numpy(), np.uint64(key), bounds)
        return out
    return _uniform_tensor(key, torch.arange(count, dtype=torch.int64, device=device)) < bounds


def below_at(key, index, bound, batch, device, kernel=True):
    """(len(index) * batch,) bool: entry e B + b is trial index[e] B + b, a success when its draw is below
    `bound` (one int): a node's or an undirected edge's event read off per directed edge, drawn where it is
    used rather than gathered (the same draws as `below` over the trials)."""
    kernels = numba_kernels() if kernel and torch.device(device).type == "cpu" else None
    if kernels is not None:
        out = torch.empty(len(index) * batch, dtype=torch.bool)
        kernels.below_at(out.numpy(), np.uint64(key), index.numpy(), bound, batch)
        return out
    return _uniform_tensor(key, _trials(index, batch, device)) < bound


def below_each_at(key, index, bounds, batch, device, kernel=True):
    """(len(index) * batch,) bool: entry e B + b is trial index[e] B + b, a success when its draw is below
    bounds[e B + b] (an int64 tensor of len(index) * batch): `below` with one bound per trial over the trials of
    the items in `index` (global node or edge ids of a part, docs/guide/network.md, "How the events are drawn"),
    the same draws as `below` over all the items' trials."""
    kernels = numba_kernels() if kernel and torch.device(device).type == "cpu" else None
    if kernels is not None:
        out = torch.empty(len(index) * batch, dtype=torch.bool)
        kernels.below_each_at(out.numpy(), np.uint64(key), index.numpy(), bounds.numpy(), batch)
        return out
    return _uniform_tensor(key, _trials(index, batch, device)) < bounds


def fractions(key, trials, dtype):
    """Uniform numbers in [0, 1) of a floating dtype, one per int64 trial in `trials` (any shape): the top p bits
    of draw t's 64, times 2^-p, p the dtype's significand bits (53 for float64, 24 for float32), so every value
    is exact in the dtype and below 1 (the torch expression, on any device)."""
    p = _significand(dtype)
    return _shift(_mixed_tensor(key, trials), 64 - p).to(dtype) * 2.0**-p


def fractions_at(key, index, batch, width, dtype, device, kernel=True):
    """(len(index), batch, width) `fractions` of rows of `width` numbers: entry (e, b, k) is trial
    (index[e] B + b) w + k, so an edge's numbers depend on its (global) id alone. kernel: numba's on the CPU
    (the same bits as the torch expression, several times faster)."""
    kernels = numba_kernels() if kernel and torch.device(device).type == "cpu" else None
    if kernels is None:
        rows = _trials(index, batch, device).unsqueeze(1) * width + torch.arange(width, device=device)
        return fractions(key, rows.view(len(index), batch, width), dtype)
    out = torch.empty(len(index), batch, width, dtype=torch.float64)
    kernels.fractions_at(out.view(-1).numpy(), np.uint64(key), index.numpy(), batch, width, _significand(dtype))
    return out.to(dtype)


def normals_at(key, angle_key, index, batch, width, dtype, device):
    """(len(index), batch, width) standard normal numbers by Box-Muller from the `fractions_at` u of `key` and v of
    `angle_key` at the same entry: sqrt(-2 log(1 - u)) cos(2 pi v) (1 - u in (0, 1], so the logarithm is finite)."""
    u, v = (fractions_at(k, index, batch, width, dtype, device) for k in (key, angle_key))
    return torch.sqrt(-2 * torch.log1p(-u)) * torch.cos(2 * math.pi * v)


def _significand(dtype):
    """The significand bits p of a floating dtype (eps = 2^(1 - p)): 53 for float64, 24 for float32."""
    return 1 - round(math.log2(torch.finfo(dtype).eps))


def _trials(index, batch, device):
    """(len(index) * batch,) int64: trials index[e] B + b in the order e B + b."""
    return (index.to(torch.int64).unsqueeze(1) * batch + torch.arange(batch, device=device)).reshape(-1)


def _signed(value):
    """An integer mod 2^64 as the int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift(z, s):
    """The logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _uniform_tensor(key, t):
    """u(key, t) for an int64 tensor t: the torch expression of `uniform`."""
    return _shift(_mixed_tensor(key, t), 32)


def _mixed_tensor(key, t):
    """All 64 bits of draw t, as int64 bit patterns, for an int64 tensor t (int64 products wrap mod 2^64)."""
    z = (t + 1) * _signed(GAMMA) + _signed(key)
    z = (z ^ _shift(z, SHIFTS[0])) * _signed(C1)
    z = (z ^ _shift(z, SHIFTS[1])) * _signed(C2)
    return z ^ _shift(z, SHIFTS[2])
