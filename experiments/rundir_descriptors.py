"""The descriptor layer of run-directory I/O: a directory opened once, and every write into it made relative to
that descriptor (docs/guide/runs.md, "Output directories: the marker, `--force` and the lock", "One descriptor").

Files are opened with os.open(name, dir_fd=..., O_NOFOLLOW), written to NAME.tmp (created exclusively), fsynced
and renamed with os.replace(src_dir_fd=, dst_dir_fd=), so a kill leaves the old file or the new one, and renaming
the directory mid-run, with a link put in its place, cannot redirect a write. What a file may be replaced with is
not decided here: each RunDirectory asks its records (the Records protocol, kept by experiments/rundir_ownership.py)
whether a file is the project's, and tells them what it writes before it renames it.
"""

import contextlib
import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import Protocol

from .errors import UsageError, WriteError

NAME_MAX = 255  # bytes in one file or directory name on Linux and macOS file systems
PATH_MAX = 4096  # bytes in a path the Linux kernel accepts (macOS: 1024, where the OS error says so)
CHUNK = 2**20
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


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


def link_error(path) -> UsageError:
    """The one-line refusal of a symbolic link where the project writes or reads."""
    return UsageError(f"{path} is a symbolic link; pdmm-bridge writes into real directories and files only")


def refuse_link(path: Path) -> None:
    """UsageError when `path` is a symbolic link (nothing is written through one) or too long (check_length)."""
    check_length(path)
    if Path(path).is_symlink():
        raise link_error(path)


def content(data) -> dict:
    """The recorded contents of a whole file holding `data`: {"size", "sha256"}."""
    return {"size": memoryview(data).nbytes, "sha256": hashlib.sha256(data).hexdigest()}


def digest(fd: int, size: int) -> str:
    """sha256 of the first `size` bytes of open file `fd` (all it has, when shorter)."""
    hashed, at = hashlib.sha256(), 0
    while at < size:
        chunk = os.pread(fd, min(CHUNK, size - at), at)
        if not chunk:
            break
        hashed.update(chunk)
        at += len(chunk)
    return hashed.hexdigest()


def check_single_link(fd: int, path) -> None:
    """UsageError when open file `fd` (at `path`) has another hard link: a name elsewhere would see a change
    made in place."""
    links = os.fstat(fd).st_nlink
    if links > 1:
        raise UsageError(
            f"{path} has {links} hard links; pdmm-bridge writes in place only into a file of its "
            "own (copy the run directory without hard links)"
        )


class Records(Protocol):
    """What a RunDirectory asks of the records of the contents the project wrote (rundir_ownership.Ledger)."""

    strict: bool  # a claimed directory: a file is replaced or removed only when owned
    appends: dict[str, "AppendFile"]  # the files open to append, by relative path

    def owned(self, directory: "RunDirectory", name: str, st: os.stat_result) -> dict | None: ...

    def stage(self, updates: dict) -> None: ...

    def settle(self, updates: dict) -> None: ...

    def remember(self, directory: "RunDirectory", name: str, state: dict) -> None: ...

    def untrack(self, file: "AppendFile", st: os.stat_result | None) -> None: ...

    def flush(self) -> None: ...


class Lock(Protocol):
    """What a root RunDirectory does with the lock it holds (rundir_lock.Lock) as it closes."""

    def release(self, directory: "RunDirectory") -> None: ...


class RunDirectory:
    """A directory opened once as a file descriptor; every write into it and its subdirectories goes through it.

    The root (a claimed or marked directory, or a plain directory for one write) holds the records of what the
    project wrote (`records`) and the lock; its subdirectories (`subdir`) share them, under their relative
    path. In a claimed directory (records.strict) a file is replaced or removed only when it is owned: its
    contents are recorded (docs/guide/runs.md). Errors: a link or a non-regular file where one is written, or
    a file not owned in a claimed directory, is a UsageError; an OSError while writing is a WriteError naming
    the file.
    """

    def __init__(self, fd: int, path, records: Records, root: "RunDirectory | None" = None, prefix: str = ""):
        self.fd, self.closed = fd, False
        self.path, self.prefix, self.records = Path(path), prefix, records
        self.root = self if root is None else root
        if root is None:
            self.subdirs: dict[str, RunDirectory] = {}
            self.lock: Lock | None = None

    # reading the directory

    def rel(self, name: str) -> str:
        """`name`'s path relative to the root, as the records name it."""
        return self.prefix + name

    def stat(self, name: str) -> os.stat_result | None:
        """lstat of `name` here, None when absent; another OSError is a WriteError naming it."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise WriteError(f"cannot read {self.path / name}: {err.strerror or err}") from None

    def owned_state(self, name: str, st: os.stat_result | None = None) -> dict | None:
        """The recorded contents that file `name` holds now, None when it holds none of them (or is no file)."""
        st = self.stat(name) if st is None else st
        return None if st is None else self.records.owned(self, name, st)

    def _existing(self, name: str) -> tuple[os.stat_result | None, dict | None]:
        """(stat of `name`, None when absent; its recorded contents, None when none); a link or a non-regular file
        is a UsageError, and so, in a claimed directory, is a file the project cannot show it wrote."""
        st = self.stat(name)
        if st is None:
            return None, None
        if stat.S_ISLNK(st.st_mode):
            raise link_error(self.path / name)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{self.path / name} is not a regular file; pdmm-bridge writes only files there")
        state = self.owned_state(name, st)
        if state is None and self.records.strict:
            raise UsageError(
                f"{self.path / name} was not written by pdmm-bridge, or has changed since; it is left as it is "
                "(move it away or choose another --out)"
            )
        return st, state

    def read(self, name: str, limit: int = -1) -> bytes:
        """The bytes of regular file `name` (never through a link), at most `limit` of them (-1: all)."""
        fd = os.open(name, READ, dir_fd=self.fd)
        with open(fd, "rb") as file:
            return file.read(limit)

    # writing

    def _opener(self, name, flags):
        return os.open(name, flags | os.O_NOFOLLOW, 0o666, dir_fd=self.fd)

    def _clear_leftover(self, name: str) -> None:
        """Remove `name`, a temporary file a killed write left, if the project may: owned or empty, or anything
        but a link in a directory without a claim."""
        st = self.stat(name)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            raise link_error(self.path / name)
        if self.records.strict and not (st.st_size == 0 or self.owned_state(name, st)):
            raise UsageError(f"{self.path / name} was not written by pdmm-bridge; remove it or choose another --out")
        os.unlink(name, dir_fd=self.fd)

    def write(self, name: str, data, keep: str | None = None) -> None:
        """Write `data` (str or bytes) to `name` via NAME.tmp, fsynced and renamed over it: never half a file.

        With `keep`, the file `name` held before is renamed to `keep` first (so one good copy always exists).
        The contents are recorded in the marker before the renames (docs/guide/runs.md)."""
        data = data.encode() if isinstance(data, str) else data
        where, tmp, records = self.path / name, name + ".tmp", self.records
        old_st, old = self._existing(name)
        if keep is not None and old_st is not None:
            self._existing(keep)
        new, made = content(data), False
        try:
            self._clear_leftover(tmp)
            with open(tmp, "xb", opener=self._opener) as file:
                made = True
                st = os.fstat(file.fileno())
                staged = {self.rel(tmp): [{"dev": st.st_dev, "ino": st.st_ino}], self.rel(name): [new]}
                if keep is not None and old is not None:
                    staged[self.rel(keep)] = [old]
                records.stage(staged)
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
        settled = {self.rel(tmp): None, self.rel(name): [new]}
        if keep is not None and old_st is not None:
            settled[self.rel(keep)] = None if old is None else [old]
        records.settle(settled)
        records.remember(self, name, new)
        if keep is not None and old is not None:
            records.remember(self, keep, old)

    def append(self, name: str) -> "AppendFile":
        """`name` opened to append (created if absent; owned if it exists), never through a link or into a file
        with another hard link (a name elsewhere would see the change)."""
        self._existing(name)
        try:
            fd = os.open(name, _APPEND, 0o666, dir_fd=self.fd)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / name}: {err.strerror or err}") from None
        try:
            check_single_link(fd, self.path / name)
            file = AppendFile(self, name, fd)
        except BaseException:
            os.close(fd)
            raise
        self.records.appends[self.rel(name)] = file
        self.records.stage({})
        return file

    def truncate(self, name: str, size: int) -> None:
        """Cut file `name` (owned, one hard link) to `size` bytes, recording the prefix that remains."""
        self._existing(name)
        try:
            fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / name}: {err.strerror or err}") from None
        try:
            check_single_link(fd, self.path / name)
            st = os.fstat(fd)
            kept = {"size": size, "sha256": digest(fd, size), "append": True, "dev": st.st_dev, "ino": st.st_ino}
            self.records.stage({self.rel(name): [kept]})
            os.ftruncate(fd, size)
            self.records.settle({self.rel(name): [kept]})
            self.records.remember(self, name, kept)
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
                self.records.stage({self.rel(target): [state]})
            os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.fsync(self.fd)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / target}: {err.strerror or err}") from None
        self.records.settle({self.rel(source): None, self.rel(target): None if state is None else [state]})
        if state is not None:
            self.records.remember(self, target, state)

    def remove(self, name: str) -> None:
        """Remove file `name` if it exists (owned, in a claimed directory); a link there is refused."""
        st, _ = self._existing(name)
        if st is None:
            return
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError as err:
            raise WriteError(f"cannot remove {self.path / name}: {err.strerror or err}") from None
        self.records.settle({self.rel(name): None})

    def subdir(self, name: str, create: bool = True) -> "RunDirectory":
        """Subdirectory `name`, opened once through this one (made first when `create`); a link is refused."""
        rel = self.rel(name) + "/"
        found = self.root.subdirs.get(rel)
        if found is not None:
            return found
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=self.fd)
            fd = os.open(name, DIRECTORY, dir_fd=self.fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise link_error(self.path / name) from None
            if err.errno == errno.ENOENT:
                raise
            raise UsageError(f"cannot create {self.path / name}: {err.strerror or err}") from None
        child = RunDirectory(fd, self.path / name, self.records, root=self.root, prefix=rel)
        self.root.subdirs[rel] = child
        return child

    def forget_subdir(self, name: str) -> None:
        """Close subdirectory `name`'s descriptor, if it was opened (it was removed)."""
        child = self.root.subdirs.pop(self.rel(name) + "/", None)
        if child is not None:
            os.close(child.fd)

    def descend(self, parts, create: bool) -> "RunDirectory":
        """The subdirectory `parts` (names, outermost first) below this one, through subdir."""
        directory = self
        for part in parts:
            directory = directory.subdir(part, create)
        return directory

    def proc_path(self) -> str | None:
        """A path that leads to this directory, by its descriptor, in this process and in the ones it starts
        (/proc/PID/fd/FD, Linux): a library writing by path under it writes here even when the directory is
        renamed and a link put at its old name. None where /proc does not show descriptors (macOS)."""
        path = f"/proc/{os.getpid()}/fd/{self.fd}"
        try:
            same = os.stat(path)
        except OSError:
            return None
        mine = os.fstat(self.fd)
        return path if (same.st_dev, same.st_ino) == (mine.st_dev, mine.st_ino) else None

    def close(self, save: bool = True) -> None:
        """Close the open append files, write the marker if it changed (save), let go of the lock, and close every
        descriptor. A root only; idempotent."""
        if self.root is not self or self.closed:
            return
        try:
            for file in list(self.records.appends.values()):
                file.close()
            if save:
                self.records.flush()
        finally:
            if self.lock is not None:
                self.lock.release(self)
                self.lock = None
            for child in self.subdirs.values():
                os.close(child.fd)
            self.subdirs.clear()
            os.close(self.fd)
            self.closed = True


class AppendFile:
    """A file opened to append text (metrics.jsonl): what is written is hashed as it goes, so the marker records
    the prefix written so far (docs/guide/runs.md). Unbuffered: each write is one os.write."""

    def __init__(self, directory: RunDirectory, name: str, fd: int):
        self.directory, self.fd, self.name, self.closed = directory, fd, str(directory.path / name), False
        self.rel = directory.rel(name)
        st = os.fstat(fd)
        self._identity = {"dev": st.st_dev, "ino": st.st_ino}
        self._digest, self._size = hashlib.sha256(), 0
        while chunk := os.pread(fd, CHUNK, self._size):
            self._digest.update(chunk)
            self._size += len(chunk)
        self.opened = self.state()

    def state(self) -> dict:
        """The recorded contents of the prefix written so far: size, sha256, and the file's identity."""
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
        try:
            st: os.stat_result | None = os.fstat(self.fd)
        except OSError:
            st = None
        self.directory.records.untrack(self, st)
        os.close(self.fd)
        self.closed = True
