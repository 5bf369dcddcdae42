"""Counter-based random draws for simulated networks: trial t of a stream's iteration k is one number.

    u(key, t) = mix(key + (t + 1) gamma) >> 32        (a uniform 32-bit integer; arithmetic mod 2^64)
    mix(z)    = z ^= z >> 30; z *= C1; z ^= z >> 27; z *= C2; z ^= z >> 31

which is output t + 1 of SplitMix64 (Steele, Lea and Flood, OOPSLA 2014) from the state `key`, and
key = stream_key(seed, stream, k) is itself a SplitMix64 output of the seed, the stream and k. A
trial with probability p succeeds when u < round(p 2^32) (`bound`), exact to 2^-32. As every draw
is a function of its address, a trial costs the same anywhere: the whole iteration's trials are one
vectorised pass with no sequential generator state, the CPU kernels (numba's, in pdmm.numba_kernels, where it
is installed; compiled once and cached) and the torch expression (any device; the reference the kernels are
tested against) give the same bits, and nothing is read back from the device.
"""

import functools
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
    trials = index.to(torch.int64).unsqueeze(1) * batch + torch.arange(batch, device=device)
    return _uniform_tensor(key, trials.reshape(-1)) < bound


def _signed(value):
    """An integer mod 2^64 as the int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift(z, s):
    """The logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _uniform_tensor(key, t):
    """u(key, t) for an int64 tensor t: the torch expression of `uniform` (int64 products wrap mod 2^64)."""
    z = (t + 1) * _signed(GAMMA) + _signed(key)
    z = (z ^ _shift(z, SHIFTS[0])) * _signed(C1)
    z = (z ^ _shift(z, SHIFTS[1])) * _signed(C2)
    z = z ^ _shift(z, SHIFTS[2])
    return _shift(z, 32)
