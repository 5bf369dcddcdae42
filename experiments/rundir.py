"""Run-directory I/O: every file a pdmm-bridge command writes into an output directory goes through here.

docs/guide/runs.md ("Output directories: the marker, `--force` and the lock") states the guarantees. This module
is the face the commands use: it routes a path through the directory that holds it. The work is done by three
modules with one job each:

- experiments/rundir_descriptors.py: a directory opened once as a descriptor (RunDirectory), every file opened,
  renamed, appended to and removed relative to it, with O_NOFOLLOW;
- experiments/rundir_ownership.py: ownership by content (the marker, MARKER, records each file's size and
  sha256), and `claim`, which opens, locks and marks an output directory, `--force` removing only owned files;
- experiments/rundir_lock.py: the exclusive lock (LOCK, flock, naming its holder), and the directories this
  process holds (`held`, `release`, `release_all`).

The path functions here (write_file, open_append, make_dir, read_bytes, ...) route a path inside a directory this
process holds through its descriptor, and any other path through a directory opened for that one call (locking
and recording in the nearest marked directory above it, if any).
"""

import contextlib
import csv
import errno
import io
import os
import stat
from pathlib import Path

from .errors import UsageError, WriteError
from .rundir_descriptors import (
    DIRECTORY,
    NAME_MAX,
    PATH_MAX,
    READ,
    AppendFile,
    RunDirectory,
    check_length,
    link_error,
    refuse_link,
)
from .rundir_lock import LOCK, held, held_as, held_root, release, release_all
from .rundir_ownership import (
    MARKER,
    MARKER_BYTES,
    adopt,
    claim,
    first_link,
    lock_and_load,
    open_root,
    unclaim,
    unowned,
)

__all__ = [
    "LOCK",
    "MARKER",
    "MARKER_BYTES",
    "NAME_MAX",
    "PATH_MAX",
    "AppendFile",
    "RunDirectory",
    "TooLarge",
    "adopt",
    "first_link",
    "check_length",
    "check_new_file",
    "claim",
    "copy_file",
    "held",
    "inside",
    "make_dir",
    "open_append",
    "read_bytes",
    "read_text",
    "refuse_link",
    "refuse_links",
    "release",
    "release_all",
    "remove",
    "rename",
    "save_figure",
    "truncate",
    "unclaim",
    "unowned",
    "write_csv",
    "write_file",
]


def refuse_links(directory: Path, names) -> None:
    """refuse_link for each of `names` in `directory` and its temporary file NAME.tmp, and for the marker; also
    refused: something there that is not a regular file (a directory named summary.json), which a write at
    the end of a run would fail on."""
    for name in (*names, MARKER):
        for path in (Path(directory) / name, Path(directory) / f"{name}.tmp"):
            refuse_link(path)
            if path.exists() and not path.is_file():
                raise UsageError(f"{path} is not a regular file; pdmm-bridge writes only files there")


def inside(path, root=None) -> Path:
    """`path` as a Path, refused (UsageError) when its real path leads outside `root` (default: its directory)."""
    path = Path(path)
    base = os.path.realpath(path.parent if root is None else root)
    real = os.path.realpath(path)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise UsageError(
            f"{path} is a symbolic link leading outside {path.parent if root is None else root}; refusing to read it"
        )
    return path


class TooLarge(UsageError):
    """read_bytes refused a file larger than its limit, before reading any of it; `size` is the file's size."""

    def __init__(self, path, size: int, limit: int):
        super().__init__(f"refusing to read {path}: it is {size:,} bytes, more than the {limit:,} it may hold")
        self.size = size


def read_bytes(path, root=None, limit: int | None = None) -> bytes:
    """The bytes of regular file `path`; OSError is a UsageError naming it, and a file of more than `limit` bytes
    (None: no limit) is TooLarge, refused before any of it is read.

    In a directory this process holds (claim) the file is read through the directory's descriptor, never
    through a link; elsewhere inside(path, root) is checked first. The file is opened without blocking
    (O_NONBLOCK) and refused unless it is a regular file, so a named pipe or a device planted at a run file's
    name is one error line, not a reader waiting for ever."""
    try:
        found = held_root(Path(os.path.abspath(path)).parent)
        if found is not None:
            directory = found[0].descend(found[1], create=False)
            fd = os.open(Path(path).name, READ, dir_fd=directory.fd)
        else:
            fd = os.open(inside(path, root), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as file:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise UsageError(f"cannot read {path}: not a regular file")
            if limit is not None and status.st_size > limit:
                raise TooLarge(path, status.st_size, limit)
            return file.read()
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise link_error(path) from None
        raise UsageError(f"cannot read {path}: {err.strerror or err}") from None


def read_text(path, root=None) -> str:
    """read_bytes decoded as UTF-8; undecodable bytes are a UsageError naming the file."""
    try:
        return read_bytes(path, root).decode()
    except UnicodeDecodeError as err:
        raise UsageError(f"cannot read {path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


# paths routed through the directories that hold them


def _marked_root(directory: Path) -> Path | None:
    """The nearest directory at or above `directory` holding MARKER, None if none."""
    for candidate in (directory, *directory.parents):
        if os.path.lexists(candidate / MARKER):
            return candidate
    return None


def _open_for_write(directory: Path, create: bool) -> tuple[RunDirectory, list[str], bool]:
    """(a root for writing into absolute `directory`, the names down to it, whether it was opened for this write
    alone): a held one, else the nearest marked directory above, locked, else `directory` itself."""
    found = held_root(directory)
    if found is not None:
        return found[0], found[1], False
    marked = _marked_root(directory)
    try:
        if marked is None:  # no output directory: a link in the path the user gave is followed
            if create:
                directory.mkdir(parents=True, exist_ok=True)
            return open_root(os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), directory), [], True
        refuse_link(marked)
        root = open_root(os.open(marked, DIRECTORY), marked)
    except OSError as err:
        raise WriteError(f"cannot write to {directory}: {err.strerror or err}") from None
    same = held_as(os.fstat(root.fd))
    if same is not None:  # a held directory by another spelling
        root.close()
        return same, list(directory.relative_to(marked).parts), False
    lock_and_load(root)
    return root, list(directory.relative_to(marked).parts), True


@contextlib.contextmanager
def _located(path, create: bool = False):
    """(RunDirectory of `path`'s directory, `path`'s name), for one write."""
    path = Path(os.path.abspath(path))
    check_length(path)
    root, parts, transient = _open_for_write(path.parent, create)
    try:
        try:
            directory = root.descend(parts, create)
        except FileNotFoundError as err:
            raise WriteError(f"cannot write {path}: {err.strerror}") from None
        yield directory, path.name
    finally:
        if transient:
            root.close()


def write_file(path, data, keep=None) -> None:
    """Write `data` (str or bytes) to `path` via a fsynced temporary file and a rename: never half a file.

    With `keep`, the file `path` held before is renamed to `keep` (beside it) first, so one good copy always
    exists. A link at `path`, NAME.tmp or `keep` is a UsageError; an OSError is a WriteError naming `path`
    (the temporary file is removed). RunDirectory.write states the rest (docs/guide/runs.md)."""
    path = Path(path)
    refuse_link(path)
    with _located(path) as (directory, name):
        directory.write(name, data, None if keep is None else Path(keep).name)


def open_append(path) -> AppendFile:
    """`path` opened to append text (created if absent), never through a link or into a file with another hard
    link; for metrics.jsonl, in a directory this process holds."""
    path = Path(os.path.abspath(path))
    found = held_root(path.parent)
    if found is None:
        raise UsageError(f"{path.parent} is not an output directory this command holds")
    return found[0].descend(found[1], create=False).append(path.name)


def truncate(path, size: int) -> None:
    """Cut file `path` to `size` bytes, never through a link or in a file with another hard link."""
    refuse_link(path)
    with _located(path) as (directory, name):
        directory.truncate(name, size)


def remove(path) -> None:
    """Remove file `path` if it exists; a link there is refused (UsageError)."""
    refuse_link(path)
    with _located(path) as (directory, name):
        directory.remove(name)


def rename(source, target) -> None:
    """Rename file `source` over `target` in the same directory, refusing links at either end."""
    refuse_link(source)
    with _located(target) as (directory, name):
        directory.replace(Path(source).name, name)


def make_dir(path) -> Path:
    """Create directory `path` (and its parents); a link there is a UsageError, an existing directory is left as
    it is (nothing written, nothing locked)."""
    path = Path(path)
    refuse_link(path)
    if path.is_dir():
        return path
    with _located(path, create=True) as (directory, name):
        directory.subdir(name)
    return path


def save_figure(fig, path, **options) -> None:
    """fig.savefig into memory in the format of `path`'s suffix, then write_file(path): no link is followed."""
    path = Path(path)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=path.suffix.lstrip(".").lower() or "png", **options)
    except ValueError as err:
        raise UsageError(f"cannot write the figure {path}: {err}") from None
    write_file(path, buffer.getvalue())


def write_csv(path, rows, columns=None) -> None:
    """`rows` as a CSV file through write_file: dicts under a header of `columns`, or (columns None)
    sequences written as they are."""
    text = io.StringIO(newline="")
    if columns is None:
        csv.writer(text).writerows(rows)
    else:
        writer = csv.DictWriter(text, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
    write_file(path, text.getvalue())


def copy_file(source, target) -> None:
    """write_file(target) with the bytes of `source` (a file inside its own directory)."""
    write_file(target, read_bytes(source))


def check_new_file(path, force: bool = False) -> Path:
    """`path` as a Path, refused when it exists (a file this command would replace) unless `force`, and
    refused when it is a link (even with `force`)."""
    path = Path(path)
    refuse_link(path)
    if path.exists() and not force:
        raise UsageError(f"{path} exists; choose another name or pass --force to replace it")
    return path
