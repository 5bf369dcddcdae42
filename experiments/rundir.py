"""Run-directory I/O: every file a pdmm-bridge command writes into an output directory goes through here.

docs/guide/runs.md states the guarantees. An output directory (a run, a sweep, a compare, solve or learn-pdmm
directory) is claimed with `claim`, which creates it and writes the marker MARKER: the command's
name on its first line, then one line per path (relative to the directory) the project wrote
there, a directory with a trailing "/". `write_file`, `open_append`, `save_figure`, `copy_file`
and `make_dir` record what they write in the marker of the nearest marked directory above it
(before writing, so a kill never leaves an unlisted file), and `clear` (--force) removes only
what the markers list, refusing, with the names, a directory that holds anything else.

Writes never follow a symbolic link: a link at the file, at its temporary file NAME.tmp or at a
directory between the marked directory and the file (the run directory itself, a sweep member)
is refused in one line; temporary files are created exclusively (O_EXCL | O_NOFOLLOW) in the
file's directory, fsynced and renamed over the file with os.replace, so a kill leaves the old
file or the new one. The one file written in place, metrics.jsonl (`open_append`, `truncate`), is refused
when it has another hard link, which could be a file elsewhere. Reads (`read_text`, `read_bytes`, `inside`)
refuse a file whose real path leads outside the directory it is read from, and anything but a regular file
(a named pipe would block the reader for ever).
"""

import contextlib
import csv
import io
import os
import stat
from pathlib import Path

from .common import UsageError, WriteError

MARKER = ".pdmm-bridge-output"  # names the command that made an output directory, then what it wrote there
NAME_MAX = 255  # bytes in one file or directory name on Linux and macOS file systems
PATH_MAX = 4096  # bytes in a path the Linux kernel accepts (macOS: 1024, where the OS error says so)


def check_length(path) -> None:
    """UsageError when `path` has a name over NAME_MAX bytes, or is over PATH_MAX bytes in all: the file system
    would refuse it with an OSError wherever it is first used."""
    long = next((part for part in Path(path).parts if len(os.fsencode(part)) > NAME_MAX), None)
    if long is not None:
        raise UsageError(
            f"{path}: the name {long[:40]}... is {len(os.fsencode(long))} bytes, over the {NAME_MAX} a "
            "file or directory name may hold"
        )
    if len(os.fsencode(str(path))) >= PATH_MAX:
        raise UsageError(
            f"{str(path)[:60]}... is a path of {len(os.fsencode(str(path)))} bytes, over the "
            f"{PATH_MAX - 1} a path may hold"
        )


def refuse_link(path: Path) -> None:
    """UsageError when `path` is a symbolic link (nothing is written through one) or too long (check_length)."""
    check_length(path)
    if Path(path).is_symlink():
        raise UsageError(f"{path} is a symbolic link; pdmm-bridge writes into real directories and files only")


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
    """The bytes of regular file `path` (inside(path, root) first); OSError is a UsageError naming it, and a file
    of more than `limit` bytes (None: no limit) is TooLarge, refused before any of it is read.

    The file is opened without blocking (O_NONBLOCK) and refused unless it is a regular file, so a named
    pipe or a device planted at a run file's name is one error line, not a reader waiting for ever."""
    try:
        fd = os.open(inside(path, root), os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as file:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise UsageError(f"cannot read {path}: not a regular file")
            if limit is not None and status.st_size > limit:
                raise TooLarge(path, status.st_size, limit)
            return file.read()
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror or err}") from None


def read_text(path, root=None) -> str:
    """read_bytes decoded as UTF-8; undecodable bytes are a UsageError naming the file."""
    try:
        return read_bytes(path, root).decode()
    except UnicodeDecodeError as err:
        raise UsageError(f"cannot read {path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


def _nofollow(path, flags):
    """An `open` opener that never follows a link at the last component."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def _marked_root(directory: Path) -> Path | None:
    """The nearest directory at or above `directory` holding MARKER, refusing links on the way; None if none."""
    directory = Path(os.path.abspath(directory))
    chain = (directory, *directory.parents)
    for depth, candidate in enumerate(chain):
        if (candidate / MARKER).is_file() or (candidate / MARKER).is_symlink():
            for step in chain[: depth + 1]:
                refuse_link(step)
            return candidate
    return None


def manifest(root: Path) -> tuple[str | None, list[str]]:
    """(command, [relative paths written]) from the marker of `root`; (None, []) without one."""
    marker = Path(root) / MARKER
    if not (marker.is_file() or marker.is_symlink()):
        return None, []
    lines = read_text(marker).splitlines()
    return (lines[0].strip() if lines else None), [line for line in lines[1:] if line]


def _write_marker(root: Path, command: str | None, entries: list[str]) -> None:
    _replace(Path(root) / MARKER, "\n".join([command or "", *entries]) + "\n")


def _record(path: Path, directory: bool = False) -> None:
    """List `path` in the marker of the nearest marked directory above it (refusing links on the way)."""
    path = Path(os.path.abspath(path))
    refuse_link(path)
    root = _marked_root(path.parent)
    if root is None:
        return
    entry = path.relative_to(root).as_posix() + ("/" if directory else "")
    command, entries = manifest(root)
    if entry not in entries:
        _write_marker(root, command, [*entries, entry])


def _replace(path: Path, data, keep=None) -> None:
    """Write `data` to NAME.tmp (created exclusively, never through a link), fsync it and rename it over `path`."""
    tmp = path.with_name(path.name + ".tmp")
    refuse_link(path)
    refuse_link(tmp)
    made = False
    try:
        tmp.unlink(missing_ok=True)  # a killed write's leftover (a link was refused above)
        with open(tmp, "xb", opener=_nofollow) as file:
            made = True
            file.write(data.encode() if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        if keep is not None and path.exists():
            refuse_link(keep)
            os.replace(path, keep)
        os.replace(tmp, path)
        sync_directory(path.parent)
    except OSError as err:
        if made:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise WriteError(f"cannot write {path}: {err.strerror or err}") from None


def write_file(path, data, keep=None) -> None:
    """Write `data` (str or bytes) to `path` via a fsynced temporary file and a rename: never half a file.

    With `keep`, the file `path` held before is renamed to `keep` first (so one good copy always exists).
    A link at `path`, NAME.tmp, `keep` or a directory up to the marked one is a UsageError; an OSError is
    a WriteError naming `path` (the temporary file is removed)."""
    path = Path(path)
    _record(path)
    if keep is not None:
        _record(Path(keep))
    _replace(path, data, keep)


def _own(file) -> None:
    """UsageError (the file closed) when open `file`, about to be written in place, has another hard link: a
    name elsewhere, maybe outside the run directory, would see the change too."""
    links = os.fstat(file.fileno()).st_nlink
    if links > 1:
        file.close()
        raise UsageError(
            f"{file.name} has {links} hard links; pdmm-bridge writes in place only into a file of its "
            "own (copy the run directory without hard links)"
        )


def open_append(path):
    """`path` opened to append text (created if absent), never through a link or into a file with another hard
    link (_own); for metrics.jsonl."""
    path = Path(path)
    _record(path)
    try:
        file = open(path, "a", opener=_nofollow)
    except OSError as err:
        raise WriteError(f"cannot write {path}: {err.strerror or err}") from None
    _own(file)
    return file


def truncate(path, size: int) -> None:
    """Cut file `path` to `size` bytes, never through a link or in a file with another hard link (_own)."""
    refuse_link(path)
    try:
        with open(path, "r+b", opener=_nofollow) as file:
            _own(file)
            file.truncate(size)
    except OSError as err:
        raise WriteError(f"cannot write {path}: {err.strerror or err}") from None


def remove(path) -> None:
    """Remove file `path` if it exists; a link there is refused (UsageError)."""
    refuse_link(path)
    try:
        Path(path).unlink(missing_ok=True)
    except OSError as err:
        raise WriteError(f"cannot remove {path}: {err.strerror or err}") from None


def make_dir(path) -> Path:
    """Create directory `path` (and its parents), recorded as written; a link there is a UsageError."""
    path = Path(path)
    refuse_link(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create {path}: {err.strerror or err}") from None
    _record(path, directory=True)
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


def sync_directory(path) -> None:
    """fsync directory `path`, so the renames inside it survive a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_leftover(path) -> bool:
    """The marker, or a temporary file a killed write leaves behind (NAME.tmp): never results."""
    return path.name.endswith(".tmp") or path.name == MARKER


def claim(path, command: str, force: bool = False, reusable: bool = False) -> Path:
    """Create the output directory `path` of `command` ("solve", "train", ...) and mark it; returns it as a Path.

    An absent or empty directory is created and marked with MARKER. A non-empty one is refused
    unless `force` (write into it), or `reusable` (commands that pick up their own earlier work, like
    compare) and marked by the same command. A link at `path` is refused. What the marker lists stays."""
    path = Path(path)
    refuse_link(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} is a file, not a directory")
    owner, entries = manifest(path) if path.is_dir() else (None, [])
    if path.is_dir() and not all(is_leftover(p) for p in path.iterdir()) and not force:
        if not (reusable and owner == command):
            raise UsageError(
                f"{path} already exists and is not empty; choose another --out or pass --force to write into it"
            )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot write to {path}: {err.strerror or err}") from None
    try:
        _write_marker(path, command, entries)
    except WriteError as err:
        raise UsageError(str(err)) from None
    return path


def unclaim(path, made: bool) -> None:
    """Undo `claim` for a command that failed before writing anything into `path`: remove the marker when it is
    all the directory holds, and the directory too when the command `made` it. A refused run leaves nothing
    behind."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir() or any(item.name != MARKER for item in path.iterdir()):
        return
    with contextlib.suppress(OSError):  # a marker left behind is harmless
        (path / MARKER).unlink(missing_ok=True)
        if made:
            path.rmdir()


def check_new_file(path, force: bool = False) -> Path:
    """`path` as a Path, refused when it exists (a file this command would replace) unless `force`, and
    refused when it is a link (even with `force`)."""
    path = Path(path)
    refuse_link(path)
    if path.exists() and not force:
        raise UsageError(f"{path} exists; choose another name or pass --force to replace it")
    return path


def _foreign(directory: Path, root: Path, entries: set, ours: list) -> list[str]:
    """The paths under `directory` that the marker of `root` (or a nested marker) does not list; the listed
    ones are appended to `ours` (files first, then their directories)."""
    foreign = []
    for item in sorted(directory.iterdir()):
        relative = item.relative_to(root).as_posix()
        if item.is_symlink():
            foreign.append(relative)
        elif item.is_dir():
            if (item / MARKER).is_file():
                _, nested = manifest(item)
                found = _foreign(item, item, set(nested), ours)
            elif relative + "/" in entries:
                found = _foreign(item, root, entries, ours)
            else:
                found = [relative + "/"]
            foreign += [
                f"{item.relative_to(root).as_posix()}/{name}" if (item / MARKER).is_file() else name for name in found
            ]
            if not found:
                ours.append(item)
        elif item.name.removesuffix(".tmp") == MARKER or relative.removesuffix(".tmp") in entries:
            ours.append(item)
        else:
            foreign.append(relative)
    return foreign


def clear(path, legacy: tuple = ()) -> None:
    """Empty output directory `path` of what the project wrote there (--force), keeping the directory.

    The marker lists what may go; a directory without one (made before markers existed) may lose the
    names in `legacy`. Anything else there is a UsageError naming it, and then nothing is removed."""
    path = Path(path)
    refuse_link(path)
    command, entries = manifest(path)
    listed = set(entries) if command is not None else set(legacy)
    ours = []
    foreign = _foreign(path, path, listed, ours)
    if foreign:
        shown = ", ".join(foreign[:8]) + (f" and {len(foreign) - 8} more" if len(foreign) > 8 else "")
        raise UsageError(
            f"--force removes only what pdmm-bridge wrote, and {path} also holds {shown}; "
            "move those away or choose another --out"
        )
    try:
        for item in ours:
            if item.is_dir():
                item.rmdir()  # emptied just before: files come before their directories
            else:
                item.unlink()
    except OSError as err:
        raise WriteError(f"cannot remove {item}: {err.strerror or err}") from None


def rename(source, target) -> None:
    """os.replace(source, target) within a directory, refusing links at either end; an OSError is a WriteError."""
    refuse_link(source)
    _record(Path(target))
    try:
        os.replace(source, target)
    except OSError as err:
        raise WriteError(f"cannot write {target}: {err.strerror or err}") from None
