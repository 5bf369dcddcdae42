"""Pieces every pdmm-bridge command shares: the usage error, argument types, graphs, the version."""
import argparse
import contextlib
import math
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

import pdmm


class UsageError(Exception):
    """Bad input from the command line; the CLI prints it as one `error:` line and exits with code 2."""


class WriteError(UsageError):
    """A file could not be written (disk full, read-only directory, file size limit); what it replaced is intact."""


def write_atomic(path, data, keep=None):
    """Write `data` (str or bytes) to `path` via a fsynced temporary file and a rename: never half a file.

    With `keep`, the file `path` held before is renamed to `keep` first (so one good copy always exists).
    An OSError is a WriteError naming `path`; the temporary file is removed.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as file:
            file.write(data.encode() if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        if keep is not None and path.exists():
            os.replace(path, keep)
        os.replace(tmp, path)
        sync_directory(path.parent)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise WriteError(f"cannot write {path}: {err.strerror or err}") from None


def sync_directory(path):
    """fsync directory `path`, so the renames inside it survive a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_leftover(path):
    """A temporary file a killed write leaves behind (NAME.tmp, .write-test): never part of the results."""
    return path.name.endswith(".tmp") or path.name == ".write-test"


OWNER_FILE = ".pdmm-bridge-output"  # names the command that made an output directory


def claim_output_dir(path, command, force=False, reusable=False):
    """Create the output directory `path` of `command` ("solve", "compare", ...) and return it as a Path.

    An absent or empty directory is created and marked with OWNER_FILE. A non-empty one is refused
    unless `force`, or `reusable` (commands that pick up their own earlier work, like compare) and
    marked by the same command.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} is a file, not a directory")
    if path.is_dir() and any(path.iterdir()) and not force:
        owner = path / OWNER_FILE
        if not (reusable and owner.is_file() and owner.read_text().strip() == command):
            raise UsageError(f"{path} already exists and is not empty; choose another --out or pass --force "
                             "to write into it")
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / OWNER_FILE).write_text(command + "\n")
    except OSError as err:
        raise UsageError(f"cannot write to {path}: {err.strerror or err}") from None
    return path


def check_new_file(path, force=False):
    """`path` as a Path, refused when it exists (a file this command would replace) unless `force`."""
    path = Path(path)
    if path.exists() and not force:
        raise UsageError(f"{path} exists; choose another name or pass --force to replace it")
    return path


tune_allocator = pdmm.tune_allocator  # moved to pdmm (pdmm.solve applies it on large runs); kept importable here


def package_version():
    """The installed pdmm-bridge version, or "unknown" when running from an uninstalled checkout."""
    try:
        return version("pdmm-bridge")
    except PackageNotFoundError:
        return "unknown"


def positive(kind):
    """An argparse type: `kind(text)` that must be finite and > 0."""
    def parse(text):
        value = kind(text)
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be > 0 and finite, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names it in "invalid int value: 'x'"
    return parse


def number(text):
    """An int if `text` is one, else a float ("3" -> 3, "0.2" -> 0.2)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def key_value(text):
    """An argparse type for KEY=VALUE with a numeric VALUE: returns (KEY, number)."""
    key, sep, value = text.partition("=")
    if not (sep and key):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, number(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the value of {key} must be a number, got {value!r}") from None


def device(text):
    """An argparse type: a torch device name that this machine has ("cpu", "cuda", "cuda:1")."""
    try:
        parsed = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"not a torch device: {text!r}") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text} requested but CUDA is not available on this machine")
    return text


def build_graph(spec, n, seed, params):
    """pdmm.topology(spec, n, seed, **params) for a topology name, else pdmm.load_graph(spec) for a file."""
    try:
        if spec in pdmm.TOPOLOGIES:
            return pdmm.topology(spec, n, seed=seed, **params)
        if not Path(spec).is_file():
            raise UsageError(f"--graph {spec!r} is neither a topology ({', '.join(sorted(pdmm.TOPOLOGIES))}) "
                             "nor an existing graph file")
        if params:
            raise UsageError(f"--graph-param applies to named topologies, not to the graph file {spec}")
        return pdmm.load_graph(spec)
    except (ValueError, TypeError) as err:
        raise UsageError(str(err)) from None
