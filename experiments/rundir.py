"""Run-directory I/O: every file a pdmm-bridge command writes into an output directory goes through here.

docs/guide/runs.md ("Output directories: the marker, `--force` and the lock") states the guarantees. An output
directory (a run, a sweep, a compare, solve, learn-pdmm or network-sweep directory) is claimed with `claim`:
opened once as a directory file descriptor (O_DIRECTORY | O_NOFOLLOW), locked for the command's life (LOCK,
fcntl.flock, non-blocking: a second command there is refused, naming the holder) and marked with MARKER, a
JSON record of the command and, per path the project wrote there, the contents it wrote: size and sha256 (for
metrics.jsonl, written by appending, the prefix written so far). A file is the project's ("owned") while its
contents are one of those recorded; a claimed directory never has a file replaced or removed that is not.

Every write is a RunDirectory call on that descriptor: files are opened with os.open(name, dir_fd=...,
O_NOFOLLOW), written to NAME.tmp (created exclusively), fsynced and renamed with os.replace(src_dir_fd=,
dst_dir_fd=), so a kill leaves the old file or the new one, and renaming the directory mid-run, with a link
put in its place, cannot redirect a write. The marker records a write's contents before the rename (the old
and the new ones both, until the next marker write), so a kill at any moment leaves every file the project
wrote owned. The path functions (write_file, open_append, make_dir, read_bytes, ...) route a path inside a
directory this process holds through its descriptor, and any other path through a directory opened for that
one call (locking and recording in the nearest marked directory above it, if any).
"""

import contextlib
import csv
import errno
import fcntl
import hashlib
import io
import json
import os
import socket
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path

from .errors import UsageError, WriteError

MARKER = ".pdmm-bridge-output"  # the command that made an output directory and the contents it wrote there
LOCK = ".pdmm-bridge-lock"  # flock-ed by the one command writing into the directory; names it (pid, command, start)
RESERVED = (MARKER, MARKER + ".tmp", LOCK)  # the project's bookkeeping, never results
FORMAT = 2  # the marker's format: JSON with contents (1: a command name, then bare paths; owns nothing)
MARKER_BYTES = 16 * 2**20  # a larger marker is refused before it is read
STATES = 8  # contents recorded per path at most (the newest kept)
NAME_MAX = 255  # bytes in one file or directory name on Linux and macOS file systems
PATH_MAX = 4096  # bytes in a path the Linux kernel accepts (macOS: 1024, where the OS error says so)
CHUNK = 2**20
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FORMS = ({"size", "sha256"}, {"size", "sha256", "append", "dev", "ino"}, {"dev", "ino"})
_held: dict[str, "RunDirectory"] = {}  # absolute path -> the claimed directories this process holds
_unlocked_warned: list[str] = []


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


def _link_error(path) -> UsageError:
    return UsageError(f"{path} is a symbolic link; pdmm-bridge writes into real directories and files only")


def refuse_link(path: Path) -> None:
    """UsageError when `path` is a symbolic link (nothing is written through one) or too long (check_length)."""
    check_length(path)
    if Path(path).is_symlink():
        raise _link_error(path)


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
        found = _held_root(Path(os.path.abspath(path)).parent)
        if found is not None:
            directory = found[0].descend(found[1], create=False)
            fd = os.open(Path(path).name, _READ, dir_fd=directory.fd)
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
            raise _link_error(path) from None
        raise UsageError(f"cannot read {path}: {err.strerror or err}") from None


def read_text(path, root=None) -> str:
    """read_bytes decoded as UTF-8; undecodable bytes are a UsageError naming the file."""
    try:
        return read_bytes(path, root).decode()
    except UnicodeDecodeError as err:
        raise UsageError(f"cannot read {path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


# Recorded contents ("states"): {"size", "sha256"} a whole file; {"size", "sha256", "append", "dev", "ino"} the
# prefix of a file written by appending (a prefix of 0 bytes proves nothing, so that one needs the inode
# too); {"dev", "ino"} the temporary file of a write in progress.


def _content(data) -> dict:
    return {"size": memoryview(data).nbytes, "sha256": hashlib.sha256(data).hexdigest()}


def _stamp(st: os.stat_result) -> tuple:
    """What changes whenever a file's contents do (ctime cannot be set back by a user)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _union(old: list, new: list) -> list:
    kept = [state for state in old if state not in new] + list(new)
    return kept[-STATES:]


def _number(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _state_problem(state) -> str | None:
    if not isinstance(state, dict) or set(state) not in [set(form) for form in _FORMS]:
        return f"a recorded content must have the keys size and sha256 (or dev and ino), got {str(state)[:60]}"
    if not all(_number(state[key]) for key in ("size", "dev", "ino") if key in state):
        return "size, dev and ino must be integers from 0 to 2^63"
    digest = state.get("sha256", "0" * 64)
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        return "sha256 must be 64 lowercase hexadecimal digits"
    if "append" in state and state["append"] is not True:
        return "append must be true"
    return None


def plain_relative(rel) -> bool:
    """Whether `rel` names a path inside a directory: relative, "/"-separated parts that are neither empty, "."
    nor "..", each a name a file system accepts (docs/guide/runs.md: what the marker may name)."""
    if not isinstance(rel, str) or "\0" in rel or rel.startswith("/"):
        return False
    try:
        parts = [part.encode("utf-8", "surrogateescape") for part in rel.split("/")]
    except UnicodeEncodeError:
        return False
    return len(rel) < PATH_MAX and all(part not in (b"", b".", b"..") and len(part) <= NAME_MAX for part in parts)


def _marker_problem(marker) -> str | None:
    """What is wrong with a parsed marker (None: nothing)."""
    if not isinstance(marker, dict) or set(marker) != {"pdmm-bridge-output", "command", "files"}:
        return "expected an object with pdmm-bridge-output, command and files"
    if marker["pdmm-bridge-output"] != FORMAT:
        return f"format {str(marker['pdmm-bridge-output'])[:20]}, this version reads {FORMAT}"
    command, files = marker["command"], marker["files"]
    if not (command is None or isinstance(command, str) and len(command) <= 64):
        return "command must be a name"
    if not isinstance(files, dict):
        return "files must be an object"
    for rel, states in files.items():
        if not plain_relative(rel):
            return f"{rel[:60]!r} is not a relative path inside the directory (no '..', no leading '/')"
        if not isinstance(states, list) or not 0 < len(states) <= STATES:
            return f"{rel}: expected a list of 1 to {STATES} recorded contents"
        problem = next((p for p in map(_state_problem, states) if p), None)
        if problem:
            return f"{rel}: {problem}"
    return None


def _parse_marker(data: bytes, where) -> tuple[str | None, dict, bool]:
    """(command, {path: [states]}, whether the marker is of format 1, which records no contents) of marker bytes
    `data`; UsageError naming `where` for anything else."""
    bad = f"{where} is not a pdmm-bridge marker"
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{bad}: not UTF-8 text; remove it") from None
    if not text.lstrip().startswith("{"):  # format 1: a command name, then paths: they prove nothing
        lines = text.splitlines()
        command = lines[0].strip() if lines else ""
        return (command if 0 < len(command) <= 64 else None), {}, True
    try:
        marker = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{bad}: {str(err)[:80] or 'nested too deeply'}; remove it") from None
    problem = _marker_problem(marker)
    if problem:
        raise UsageError(f"{bad}: {problem}; remove it")
    return marker["command"], {rel: list(states) for rel, states in marker["files"].items()}, False


def _digest(fd: int, size: int) -> str:
    """sha256 of the first `size` bytes of open file `fd` (all it has, when shorter)."""
    digest, at = hashlib.sha256(), 0
    while at < size:
        chunk = os.pread(fd, min(CHUNK, size - at), at)
        if not chunk:
            break
        digest.update(chunk)
        at += len(chunk)
    return digest.hexdigest()


class RunDirectory:
    """A directory opened once as a file descriptor; every write into it and its subdirectories goes through it.

    The root (a claimed or marked directory, or a plain directory for one write) holds the marker's records;
    its subdirectories (`subdir`) share them, under their relative path. In a claimed directory (`strict`)
    a file is replaced or removed only when it is owned: its contents are recorded (docs/guide/runs.md).
    Errors: a link or a non-regular file where one is written, or a file not owned in a claimed
    directory, is a UsageError; an OSError while writing is a WriteError naming the file.
    """

    def __init__(self, fd: int, path, root: "RunDirectory | None" = None, prefix: str = ""):
        self.fd, self.closed = fd, False
        self.path, self.prefix = Path(path), prefix
        self.root = self if root is None else root
        if root is None:
            self.command: str | None = None
            self.files: dict[str, list] | None = None  # None: a directory without a marker (nothing recorded)
            self.legacy = False  # a format-1 marker: nothing owned
            self.strict = False
            self.known: dict[str, tuple] = {}  # path -> (stamp, state): contents checked or written this session
            self.appends: dict[str, AppendFile] = {}
            self.subdirs: dict[str, RunDirectory] = {}
            self.lock: int | None = None
            self.lock_ours = False  # the lock file was made by this command, or taken over by start()
            self.dirty = False

    # reading the directory

    def _rel(self, name: str) -> str:
        return self.prefix + name

    def _stat(self, name: str) -> os.stat_result | None:
        """lstat of `name` here, None when absent; another OSError is a WriteError naming it."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise WriteError(f"cannot read {self.path / name}: {err.strerror or err}") from None

    def owned_state(self, name: str, st: os.stat_result | None = None) -> dict | None:
        """The recorded contents that file `name` holds now, None when it holds none of them (or is no file)."""
        st = self._stat(name) if st is None else st
        root, rel = self.root, self._rel(name)
        if st is None or not stat.S_ISREG(st.st_mode) or root.files is None:
            return None
        if rel in root.appends:
            return root.appends[rel].state()
        known = root.known.get(rel)
        if known is not None and known[0] == _stamp(st):
            return known[1]
        states = root.files.get(rel, [])
        if not states:
            return None
        try:
            fd = os.open(name, _READ, dir_fd=self.fd)
        except OSError:
            return None
        try:
            digests: dict[int, str] = {}
            for state in states:
                if _matches(state, st, lambda size: digests.setdefault(size, _digest(fd, size))):
                    root.known[rel] = (_stamp(st), state)
                    return state
        finally:
            os.close(fd)
        return None

    def _existing(self, name: str) -> tuple[os.stat_result | None, dict | None]:
        """(stat of `name`, None when absent; its recorded contents, None when none); a link or a non-regular file
        is a UsageError, and so, in a claimed directory, is a file the project cannot show it wrote."""
        st = self._stat(name)
        if st is None:
            return None, None
        if stat.S_ISLNK(st.st_mode):
            raise _link_error(self.path / name)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{self.path / name} is not a regular file; pdmm-bridge writes only files there")
        state = self.owned_state(name, st)
        if state is None and self.root.strict:
            raise UsageError(
                f"{self.path / name} was not written by pdmm-bridge, or has changed since; it is left as it is "
                "(move it away or choose another --out)"
            )
        return st, state

    def read(self, name: str, limit: int = -1) -> bytes:
        """The bytes of regular file `name` (never through a link), at most `limit` of them (-1: all)."""
        fd = os.open(name, _READ, dir_fd=self.fd)
        with open(fd, "rb") as file:
            return file.read(limit)

    # writing

    def _opener(self, name, flags):
        return os.open(name, flags | os.O_NOFOLLOW, 0o666, dir_fd=self.fd)

    def _clear_leftover(self, name: str) -> None:
        """Remove `name`, a temporary file a killed write left, if the project may: owned or empty, or anything
        but a link in a directory without a claim."""
        st = self._stat(name)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            raise _link_error(self.path / name)
        if self.root.strict and not (st.st_size == 0 or self.owned_state(name, st)):
            raise UsageError(f"{self.path / name} was not written by pdmm-bridge; remove it or choose another --out")
        os.unlink(name, dir_fd=self.fd)

    def write(self, name: str, data, keep: str | None = None) -> None:
        """Write `data` (str or bytes) to `name` via NAME.tmp, fsynced and renamed over it: never half a file.

        With `keep`, the file `name` held before is renamed to `keep` first (so one good copy always exists).
        The contents are recorded in the marker before the renames (docs/guide/runs.md)."""
        data = data.encode() if isinstance(data, str) else data
        where, tmp, root = self.path / name, name + ".tmp", self.root
        old_st, old = self._existing(name)
        if keep is not None and old_st is not None:
            self._existing(keep)
        new, made = _content(data), False
        try:
            self._clear_leftover(tmp)
            with open(tmp, "xb", opener=self._opener) as file:
                made = True
                st = os.fstat(file.fileno())
                staged = {self._rel(tmp): [{"dev": st.st_dev, "ino": st.st_ino}], self._rel(name): [new]}
                if keep is not None and old is not None:
                    staged[self._rel(keep)] = [old]
                root.stage(staged)
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            if keep is not None and old_st is not None:
                os.replace(name, keep, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            made = False
            os.fsync(self.fd)
        except OSError as err:
            if made:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=self.fd)
            raise WriteError(f"cannot write {where}: {err.strerror or err}") from None
        settled = {self._rel(tmp): None, self._rel(name): [new]}
        if keep is not None and old_st is not None:
            settled[self._rel(keep)] = None if old is None else [old]
        root.settle(settled)
        self._remember(name, new)
        if keep is not None and old is not None:
            self._remember(keep, old)

    def _remember(self, name: str, state: dict) -> None:
        st = self._stat(name)
        if st is not None and self.root.files is not None:
            self.root.known[self._rel(name)] = (_stamp(st), state)

    def append(self, name: str) -> "AppendFile":
        """`name` opened to append (created if absent; owned if it exists), never through a link or into a file
        with another hard link (a name elsewhere would see the change)."""
        self._existing(name)
        try:
            fd = os.open(name, _APPEND, 0o666, dir_fd=self.fd)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / name}: {err.strerror or err}") from None
        try:
            self._own(fd, name)
            file = AppendFile(self, name, fd)
        except BaseException:
            os.close(fd)
            raise
        self.root.appends[self._rel(name)] = file
        self.root.stage({})
        return file

    def _own(self, fd: int, name: str) -> None:
        links = os.fstat(fd).st_nlink
        if links > 1:
            raise UsageError(
                f"{self.path / name} has {links} hard links; pdmm-bridge writes in place only into a file of its "
                "own (copy the run directory without hard links)"
            )

    def truncate(self, name: str, size: int) -> None:
        """Cut file `name` (owned, one hard link) to `size` bytes, recording the prefix that remains."""
        self._existing(name)
        try:
            fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / name}: {err.strerror or err}") from None
        try:
            self._own(fd, name)
            st = os.fstat(fd)
            kept = {"size": size, "sha256": _digest(fd, size), "append": True, "dev": st.st_dev, "ino": st.st_ino}
            self.root.stage({self._rel(name): [kept]})
            os.ftruncate(fd, size)
            self.root.settle({self._rel(name): [kept]})
            self._remember(name, kept)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / name}: {err.strerror or err}") from None
        finally:
            os.close(fd)

    def replace(self, source: str, target: str) -> None:
        """Rename file `source` over `target` (both owned, if they exist, in a claimed directory)."""
        _, state = self._existing(source)
        self._existing(target)
        try:
            if state is not None:
                self.root.stage({self._rel(target): [state]})
            os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.fsync(self.fd)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / target}: {err.strerror or err}") from None
        self.root.settle({self._rel(source): None, self._rel(target): None if state is None else [state]})
        if state is not None:
            self._remember(target, state)

    def remove(self, name: str) -> None:
        """Remove file `name` if it exists (owned, in a claimed directory); a link there is refused."""
        st, _ = self._existing(name)
        if st is None:
            return
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError as err:
            raise WriteError(f"cannot remove {self.path / name}: {err.strerror or err}") from None
        self.root.settle({self._rel(name): None})

    def subdir(self, name: str, create: bool = True) -> "RunDirectory":
        """Subdirectory `name`, opened once through this one (made first when `create`); a link is refused."""
        rel = self._rel(name) + "/"
        found = self.root.subdirs.get(rel)
        if found is not None:
            return found
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=self.fd)
            fd = os.open(name, _DIRECTORY, dir_fd=self.fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise _link_error(self.path / name) from None
            if err.errno == errno.ENOENT:
                raise
            raise UsageError(f"cannot create {self.path / name}: {err.strerror or err}") from None
        child = RunDirectory(fd, self.path / name, root=self.root, prefix=rel)
        self.root.subdirs[rel] = child
        return child

    def descend(self, parts, create: bool) -> "RunDirectory":
        """The subdirectory `parts` (names, outermost first) below this one, through subdir."""
        directory = self
        for part in parts:
            directory = directory.subdir(part, create)
        return directory

    # the marker and the lock (root only)

    def stage(self, updates: dict) -> None:
        """Add contents to the records (each path keeps those it had too) and write the marker now."""
        if self.files is None:
            return
        for rel, states in updates.items():
            self.files[rel] = _union(self.files.get(rel, []), states)
        self.save()

    def settle(self, updates: dict) -> None:
        """Set the records of paths (None: forget one) after a write completed; the marker is written later."""
        if self.files is None:
            return
        for rel, states in updates.items():
            if states is None:
                self.files.pop(rel, None)
                self.known.pop(rel, None)
            else:
                self.files[rel] = states
        self.dirty = True

    def save(self) -> None:
        """Write the marker (through MARKER.tmp, fsynced and renamed), with the open append files' contents."""
        if self.files is None:
            return
        for rel, file in self.appends.items():
            self.files[rel] = _union([file.opened], [file.state()])
        paths = ",\n".join(f"{json.dumps(rel)}: {json.dumps(states)}" for rel, states in sorted(self.files.items()))
        data = f'{{"pdmm-bridge-output": {FORMAT}, "command": {json.dumps(self.command)}, "files": {{\n{paths}\n}}}}\n'
        tmp = MARKER + ".tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)
            fd = os.open(tmp, _NEW, 0o666, dir_fd=self.fd)
            with open(fd, "wb") as marker:
                marker.write(data.encode())
                marker.flush()
                os.fsync(fd)
            os.replace(tmp, MARKER, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / MARKER}: {err.strerror or err}") from None
        self.dirty = False

    def load_marker(self) -> None:
        """Read the marker, defensively: a regular file of at most MARKER_BYTES, in the schema _marker_problem
        checks; none: nothing recorded (the directory holds nothing of the project's)."""
        where = self.path / MARKER
        st = self._stat(MARKER)
        if st is None:
            self.command, self.files, self.legacy = None, {}, False
            return
        if stat.S_ISLNK(st.st_mode):
            raise _link_error(where)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{where} is not a regular file; pdmm-bridge writes only files there")
        if st.st_size > MARKER_BYTES:
            raise UsageError(f"{where} is {st.st_size} bytes, more than a marker holds ({MARKER_BYTES}); remove it")
        try:
            data = self.read(MARKER, MARKER_BYTES + 1)
        except OSError as err:
            raise UsageError(f"cannot read {where}: {err.strerror or err}") from None
        self.command, self.files, self.legacy = _parse_marker(data, where)

    def take_lock(self) -> os.stat_result | None:
        """flock LOCK (made if absent), not waiting: UsageError naming the holder when another command holds it.
        A lock file the holder removed as it let go is not the one there now: then the one there is taken.
        Without locks on this file system (some network mounts): one warning line, and no lock."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            try:
                try:
                    fd = os.open(LOCK, flags | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=self.fd)
                    self.lock_ours = True
                except FileExistsError:
                    fd = os.open(LOCK, flags, dir_fd=self.fd)
                    self.lock_ours = False
            except OSError as err:
                if err.errno == errno.ELOOP:
                    raise _link_error(self.path / LOCK) from None
                raise UsageError(f"cannot lock {self.path}: {err.strerror or err}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise UsageError(
                    f"{self.path} is in use by {holder}; wait for it to end or choose another --out"
                ) from None
            except OSError as err:
                os.close(fd)
                if str(self.path) not in _unlocked_warned:
                    _unlocked_warned.append(str(self.path))
                    print(
                        f"pdmm-bridge: warning: cannot lock {self.path} ({err.strerror or err}); nothing stops "
                        "a second command writing there",
                        file=sys.stderr,
                    )
                return None
            st, now = os.fstat(fd), self._stat(LOCK)
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                self.lock = fd
                return st
            os.close(fd)

    def start(self, command: str) -> None:
        """Record this command as the directory's and write its name, pid and start time into the lock file."""
        self.command, self.strict, self.lock_ours = command, True, True
        if self.lock is None:
            self.save()
            return
        info = json.dumps(
            {
                "pid": os.getpid(),
                "command": command,
                "host": socket.gethostname(),
                "started": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        ).encode()
        self.stage({LOCK: [_content(info)]})
        try:
            os.ftruncate(self.lock, 0)
            os.pwrite(self.lock, info, 0)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / LOCK}: {err.strerror or err}") from None
        self.settle({LOCK: [_content(info)]})

    def check_lock_file(self, st: os.stat_result | None) -> None:
        """UsageError unless the lock file just taken is the project's: one hard link, and empty or owned."""
        if st is None or self.lock is None:
            return
        self._own(self.lock, LOCK)
        if st.st_size and self.owned_state(LOCK, st) is None:
            raise UsageError(
                f"{self.path / LOCK} holds something pdmm-bridge did not write; remove it if no pdmm-bridge "
                "command is writing there"
            )

    def close(self, save: bool = True) -> None:
        """Close the open append files, write the marker if it changed (save), let go of the lock (removing the
        lock file when it is this command's), and close every descriptor. A root only; idempotent."""
        if self.root is not self or self.closed:
            return
        try:
            for file in list(self.appends.values()):
                file.close()
            if save and self.dirty:
                with contextlib.suppress(WriteError):  # the marker written last records every write already
                    self.save()
        finally:
            if self.lock is not None:
                with contextlib.suppress(OSError, WriteError):
                    st, now = os.fstat(self.lock), self._stat(LOCK)
                    if self.lock_ours and now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                        os.unlink(LOCK, dir_fd=self.fd)
                os.close(self.lock)
                self.lock = None
            for child in self.subdirs.values():
                os.close(child.fd)
            self.subdirs.clear()
            os.close(self.fd)
            self.closed = True
            for key in [key for key, held in _held.items() if held is self]:
                del _held[key]


def _matches(state: dict, st: os.stat_result, digest) -> bool:
    """Whether a file (stat `st`; digest(n): sha256 of its first n bytes) holds recorded contents `state`."""
    same_file = (st.st_dev, st.st_ino) == (state.get("dev"), state.get("ino"))
    if "sha256" not in state:
        return same_file
    if state.get("append"):
        if st.st_size < state["size"]:
            return False
        return same_file if state["size"] == 0 else digest(state["size"]) == state["sha256"]
    return st.st_size == state["size"] and digest(st.st_size) == state["sha256"]


def _holder(fd: int) -> str:
    """Who holds a lock file, from what it holds ("pdmm-bridge train (pid 12, host h, started ...)")."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode())
        return f"pdmm-bridge {info['command']} (pid {int(info['pid'])} on {info['host']}, started {info['started']})"
    except (OSError, ValueError, TypeError, KeyError):
        return "another pdmm-bridge command"


class AppendFile:
    """A file opened to append text (metrics.jsonl): what is written is hashed as it goes, so the marker records
    the prefix written so far (docs/guide/runs.md). Unbuffered: each write is one os.write."""

    def __init__(self, directory: RunDirectory, name: str, fd: int):
        self.directory, self.fd, self.name, self.closed = directory, fd, str(directory.path / name), False
        self._rel = directory._rel(name)
        st = os.fstat(fd)
        self._identity = {"dev": st.st_dev, "ino": st.st_ino}
        self._digest, self._size = hashlib.sha256(), 0
        while chunk := os.pread(fd, CHUNK, self._size):
            self._digest.update(chunk)
            self._size += len(chunk)
        self.opened = self.state()

    def state(self) -> dict:
        return {"size": self._size, "sha256": self._digest.hexdigest(), "append": True, **self._identity}

    def write(self, text: str) -> int:
        view = memoryview(text.encode())
        while view:
            written = os.write(self.fd, view)
            self._digest.update(view[:written])
            self._size += written
            view = view[written:]
        return len(text)

    def flush(self) -> None:
        """Nothing to do: every write went to the file."""

    def tell(self) -> int:
        return self._size

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.closed:
            return
        root = self.directory.root
        root.appends.pop(self._rel, None)
        with contextlib.suppress(OSError):
            root.known[self._rel] = (_stamp(os.fstat(self.fd)), self.state())
        root.settle({self._rel: _union([self.opened], [self.state()])})
        os.close(self.fd)
        self.closed = True


# the directories this process holds, and paths routed through them


def _held_root(directory: Path) -> tuple[RunDirectory, list[str]] | None:
    """(the deepest held directory at or above absolute `directory`, the names from it down to `directory`)."""
    best = None
    for key, held in _held.items():
        if str(directory) == key or str(directory).startswith(key.rstrip(os.sep) + os.sep):
            if best is None or len(key) > len(best[0]):
                best = (key, held)
    if best is None:
        return None
    return best[1], list(directory.relative_to(best[0]).parts)


def _marked_root(directory: Path) -> Path | None:
    """The nearest directory at or above `directory` holding MARKER, None if none."""
    for candidate in (directory, *directory.parents):
        if os.path.lexists(candidate / MARKER):
            return candidate
    return None


def _open_for_write(directory: Path, create: bool) -> tuple[RunDirectory, list[str], bool]:
    """(a root for writing into absolute `directory`, the names down to it, whether it was opened for this write
    alone): a held one, else the nearest marked directory above, locked, else `directory` itself."""
    found = _held_root(directory)
    if found is not None:
        return found[0], found[1], False
    marked = _marked_root(directory)
    try:
        if marked is None:  # no output directory: a link in the path the user gave is followed
            if create:
                directory.mkdir(parents=True, exist_ok=True)
            return RunDirectory(os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), directory), [], True
        refuse_link(marked)
        root = RunDirectory(os.open(marked, _DIRECTORY), marked)
    except OSError as err:
        raise WriteError(f"cannot write to {directory}: {err.strerror or err}") from None
    st = os.fstat(root.fd)
    for held in _held.values():
        mine = os.fstat(held.fd)
        if (mine.st_dev, mine.st_ino) == (st.st_dev, st.st_ino):  # a held directory by another spelling
            root.close()
            return held, list(directory.relative_to(marked).parts), False
    try:
        taken = root.take_lock()
        root.load_marker()
        root.check_lock_file(taken)
    except BaseException:
        root.close(save=False)
        raise
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
    found = _held_root(path.parent)
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


# claiming an output directory


def claim(
    path,
    command: str,
    force: bool = False,
    reusable: bool = False,
    writes: tuple = (),
    clear: bool = False,
    refusal: str | None = None,
) -> Path:
    """Create (if absent), open, lock and mark the output directory `path` of `command`; returns it as a Path.

    The directory is held, locked, until release(path) (release_all at the end of a command); every write
    into it goes through its descriptor. A directory holding nothing (but the marker, the lock and empty
    or owned temporary files, which are removed) is taken, its records started afresh. A non-empty one:
    with `clear` (train), refused (`refusal`) unless `force`, then emptied of every owned file (and of the
    directories that held only those), refused naming the rest if anything else is there; otherwise
    written into only with `force`, or, when `reusable`, when the marker names `command` (its own earlier
    work), and refused when one of `writes` (the files the command replaces) exists and is not owned. A link at
    `path`, at one of `writes`, the marker or the lock, or another command holding the lock, is a UsageError
    before anything is written (docs/guide/runs.md)."""
    path = Path(path)
    refuse_link(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} is a file, not a directory")
    directory = _open_claimed(path)
    try:
        taken = directory.take_lock()
        directory.load_marker()
        directory.check_lock_file(taken)
        _admit(directory, command, force, reusable, writes, clear, refusal)
        directory.start(command)
    except BaseException:
        directory.close(save=False)
        raise
    _held[os.path.abspath(path)] = directory
    return path


def _open_claimed(path: Path) -> RunDirectory:
    """Directory `path` made (with its parents) and opened, through a held directory above it if there is one."""
    key = os.path.abspath(path)
    if key in _held:
        raise UsageError(f"{path} is already held by this command")
    found = _held_root(Path(key).parent)
    try:
        if found is not None:
            parent = found[0].descend(found[1], create=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path.name, dir_fd=parent.fd)
            fd = os.open(path.name, _DIRECTORY, dir_fd=parent.fd)
        else:
            path.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, _DIRECTORY)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _link_error(path) from None
        raise UsageError(f"cannot write to {path}: {err.strerror or err}") from None
    return RunDirectory(fd, path)


def _admit(directory: RunDirectory, command, force, reusable, writes, clear, refusal) -> None:
    """claim's rules for what `directory` already holds (claim's docstring); resets the records of an empty one."""
    path = directory.path
    for name in (*writes, MARKER, LOCK):
        for candidate in (name, name + ".tmp"):
            st = directory._stat(candidate)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise _link_error(path / candidate)
    leftovers: list[str] = []
    rest: list[str] = []
    for name in sorted(os.listdir(directory.fd)):
        if name in RESERVED:
            continue
        st = directory._stat(name)
        if st is None:
            continue
        leftover = name.endswith(".tmp") and stat.S_ISREG(st.st_mode)
        leftover = leftover and (st.st_size == 0 or directory.owned_state(name, st) is not None)
        (leftovers if leftover else rest).append(name)
    if not rest:
        for name in leftovers:
            try:
                os.unlink(name, dir_fd=directory.fd)
            except OSError as err:
                raise WriteError(f"cannot remove {path / name}: {err.strerror or err}") from None
        directory.files, directory.legacy = {}, False
        directory.known.clear()
        return
    older = (
        f" ({path}'s marker is from an older pdmm-bridge and records no file contents, so nothing there counts "
        "as written by pdmm-bridge)"
        if directory.legacy
        else ""
    )
    default = f"{path} already exists and is not empty; choose another --out or pass --force to write into it"
    if clear:
        if not force:
            raise UsageError((refusal or default) + older)
        _empty(directory)
        directory.files = {}
        directory.known.clear()
        return
    if not (force or reusable and directory.command == command and not directory.legacy):
        raise UsageError((refusal or default) + older)
    clashes = [name for name in writes if directory._stat(name) is not None and directory.owned_state(name) is None]
    if clashes:
        raise UsageError(
            f"{path} holds {', '.join(clashes)}, which pdmm-bridge did not write or which changed since it did; "
            f"pdmm-bridge replaces only its own files: move them away or choose another --out{older}"
        )


def _empty(directory: RunDirectory) -> None:
    """Remove every owned file in `directory` (and the subdirectories that held only such files); refused
    (UsageError naming them, nothing removed) when anything else is there."""
    ours: list[tuple[RunDirectory, str, bool]] = []
    foreign: list[str] = []
    _survey(directory, ours, foreign)
    if foreign:
        shown = ", ".join(foreign[:8]) + (f" and {len(foreign) - 8} more" if len(foreign) > 8 else "")
        raise UsageError(
            f"--force removes only what pdmm-bridge wrote, and {directory.path} also holds {shown}; "
            "move those away or choose another --out"
        )
    for parent, name, is_dir in ours:
        try:
            if is_dir:
                os.rmdir(name, dir_fd=parent.fd)
                child = directory.subdirs.pop(parent._rel(name) + "/", None)
                if child is not None:
                    os.close(child.fd)
            else:
                os.unlink(name, dir_fd=parent.fd)
        except OSError as err:
            raise WriteError(f"cannot remove {parent.path / name}: {err.strerror or err}") from None


def _survey(directory: RunDirectory, ours: list, foreign: list) -> None:
    """Sort what `directory` holds into `ours` (owned files, empty temporary files, and after them the
    directories that hold only such things) and `foreign` (relative paths; a directory with nothing of
    the project's, or another output directory, as one entry "name/")."""
    for name in sorted(os.listdir(directory.fd)):
        if directory is directory.root and name in RESERVED:
            continue
        st, rel = directory._stat(name), directory._rel(name)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            child = directory.subdir(name, create=False)
            if child._stat(MARKER) is not None:
                foreign.append(rel + "/")
                continue
            inner: list[tuple[RunDirectory, str, bool]] = []
            outer: list[str] = []
            _survey(child, inner, outer)
            if inner:
                ours += inner
                foreign += outer
                if not outer:
                    ours.append((directory, name, True))
            else:
                foreign.append(rel + "/")
        elif stat.S_ISREG(st.st_mode) and (
            directory.owned_state(name, st) is not None or name.endswith(".tmp") and st.st_size == 0
        ):
            ours.append((directory, name, False))
        else:
            foreign.append(rel)


def held(path) -> RunDirectory | None:
    """The RunDirectory of claimed directory `path`, None when this process does not hold it."""
    return _held.get(os.path.abspath(path))


def release(path) -> None:
    """Let go of claimed directory `path` (RunDirectory.close); nothing when it is not held."""
    directory = _held.pop(os.path.abspath(path), None)
    if directory is not None:
        directory.close()


def release_all() -> None:
    """Let go of every directory this process holds, the deepest first (at the end of a command)."""
    for key in sorted(_held, key=len, reverse=True):
        release(key)


def unclaim(path, made: bool) -> None:
    """Undo `claim` for a command that failed before writing anything into `path`: remove the marker when it is
    all the directory holds, and the directory too when the command `made` it; the lock is let go either way.
    A refused run leaves nothing behind."""
    directory = held(path)
    if directory is None:
        return
    try:
        if any(name not in RESERVED for name in os.listdir(directory.fd)):
            return
        with contextlib.suppress(OSError):  # a marker left behind is harmless
            os.unlink(MARKER, dir_fd=directory.fd)
        directory.dirty = False
        identity = os.fstat(directory.fd)
    finally:
        release(path)
    if made:
        with contextlib.suppress(OSError):
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) == (identity.st_dev, identity.st_ino):
                os.rmdir(path)
