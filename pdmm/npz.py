"""Reading .npz archives that may come from anyone: every array's header checked before its data is read.

An .npz file is a zip archive of .npy members; each member's header declares its dtype and shape, so
the memory its array needs is known before a byte of data is decompressed. `read_npz` refuses an
archive whose arrays would need more than `limit` bytes in all (NPZ_LIMIT by default), or whose
members declare more data than they could hold: more than the zip entry's own size, or more than
`ratio` (NPZ_RATIO) times the member's compressed size (real data compresses by far less; a
"zip bomb" of zeros by about 1000:1). Object dtypes (pickles, which could run code) are refused too.
docs/guide/solve_cli.md states these limits.
"""

import math
import zipfile
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

NPZ_LIMIT = 2**30  # bytes: the arrays of one archive, all together
NPZ_RATIO = 200  # the largest decompressed / compressed size of a member
HEADERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}  # .npy versions read


class NpzError(ValueError):
    """An .npz archive refused before its data was read, or one that could not be read; the message is one line."""


def read_npz(path: str | Path, limit: int = NPZ_LIMIT, ratio: float = NPZ_RATIO) -> dict[str, np.ndarray]:
    """{name: array} of the .npz archive at `path`, after check_npz has accepted every member's header."""
    check_npz(path, limit, ratio)
    try:
        with np.load(path, allow_pickle=False) as archive:
            return dict(archive)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise NpzError(f"{path}: {err}") from None


def check_npz(path: str | Path, limit: int = NPZ_LIMIT, ratio: float = NPZ_RATIO) -> int:
    """The bytes the arrays of the .npz archive at `path` declare, all together; NpzError (one line naming the
    member) for a member that is not .npy, has an object dtype, declares more than its zip entry holds or more
    than `ratio` times its compressed size, or when the total exceeds `limit`. Reads the headers only."""
    total = 0
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                total += _member_bytes(archive, info, ratio)
    except (OSError, zipfile.BadZipFile, EOFError) as err:
        raise NpzError(f"{path}: not a readable .npz archive ({err})") from None
    except NpzError as err:
        raise NpzError(f"{path}: {err}") from None
    if total > limit:
        raise NpzError(f"{path}: its arrays declare {_size(total)}, more than the limit of {_size(limit)}")
    return total


def _member_bytes(archive: zipfile.ZipFile, info: zipfile.ZipInfo, ratio: float) -> int:
    """The data bytes one member's .npy header declares, checked against its dtype, its entry and `ratio`."""
    if not info.filename.endswith(".npy"):
        raise NpzError(f"member {info.filename!r} is not an .npy array")
    with archive.open(info) as member:
        try:
            version = npy.read_magic(member)
            if version not in HEADERS:
                raise ValueError(f".npy format version {version[0]}.{version[1]}; this reader takes 1.0 and 2.0")
            shape, _, dtype = HEADERS[version](member)
        except (ValueError, EOFError) as err:
            raise NpzError(f"member {info.filename!r} has no valid .npy header ({err})") from None
    if dtype.hasobject:
        raise NpzError(
            f"Object arrays are refused: member {info.filename!r} holds Python objects (dtype {dtype}), "
            "which could run code"
        )
    declared = math.prod(shape) * dtype.itemsize
    if declared > info.file_size:
        raise NpzError(
            f"member {info.filename!r} declares shape {shape} of {dtype} ({_size(declared)}) but holds "
            f"{_size(info.file_size)}"
        )
    if info.compress_type != zipfile.ZIP_STORED and declared > ratio * max(info.compress_size, 1):
        raise NpzError(
            f"member {info.filename!r} declares {_size(declared)} from {_size(info.compress_size)} "
            f"compressed, more than {ratio:g}:1"
        )
    return declared


def _size(nbytes: int) -> str:
    """A byte count for people: 3.9 MB, 4.3 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} bytes"
