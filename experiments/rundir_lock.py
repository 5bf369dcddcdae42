"""One writer per output directory: the exclusive lock, and the directories this process holds
(docs/guide/runs.md, "Output directories: the marker, `--force` and the lock", "One writer").

A claimed directory's LOCK file is flock-ed (fcntl.flock, not waiting) for the command's life and names its
holder (pid, command, host, start time), so a second command there is refused in one line naming it. The kernel
lets go of the lock when the process ends, a kill included; the command removes the lock file as it ends, and
one a kill left behind is the project's (its contents are recorded in the marker) and taken over by the next
command. The directories this process holds, locked, are registered here by absolute path (`hold`) until
`release` or `release_all`.
"""

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

from .errors import UsageError, WriteError
from .rundir_descriptors import RunDirectory, check_single_link, content, link_error

LOCK = ".pdmm-bridge-lock"  # flock-ed by the one command writing into the directory; names it (pid, command, start)
_held: dict[str, RunDirectory] = {}  # absolute path -> the claimed directories this process holds
_unlocked_warned: list[str] = []


class Lock:
    """The flock on a directory's LOCK file, held through descriptor `fd` (`st`: the file's stat when taken);
    `ours`: the lock file was made by this command, or taken over by name_holder."""

    def __init__(self, fd: int, st: os.stat_result, ours: bool):
        self.fd, self.st, self.ours = fd, st, ours

    def check(self, directory: RunDirectory) -> None:
        """UsageError unless the lock file just taken is the project's: one hard link, and empty or owned."""
        check_single_link(self.fd, directory.path / LOCK)
        if self.st.st_size and directory.owned_state(LOCK, self.st) is None:
            raise UsageError(
                f"{directory.path / LOCK} holds something pdmm-bridge did not write; remove it if no pdmm-bridge "
                "command is writing there"
            )

    def name_holder(self, directory: RunDirectory, command: str) -> None:
        """Write `command`'s name, pid, host and start time into the lock file, recorded in the marker first."""
        self.ours = True
        info = json.dumps(
            {
                "pid": os.getpid(),
                "command": command,
                "host": socket.gethostname(),
                "started": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        ).encode()
        directory.records.stage({LOCK: [content(info)]})
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, info, 0)
        except OSError as err:
            raise WriteError(f"cannot write {directory.path / LOCK}: {err.strerror or err}") from None
        directory.records.settle({LOCK: [content(info)]})

    def release(self, directory: RunDirectory) -> None:
        """Let go of the lock, removing the lock file first when it is this command's and still the one there."""
        with contextlib.suppress(OSError, WriteError):
            st, now = os.fstat(self.fd), directory.stat(LOCK)
            if self.ours and now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                os.unlink(LOCK, dir_fd=directory.fd)
        os.close(self.fd)


def take(directory: RunDirectory) -> Lock | None:
    """flock LOCK in `directory` (made if absent), not waiting: UsageError naming the holder when another command
    holds it. A lock file the holder removed as it let go is not the one there now: then the one there is taken.
    Without locks on this file system (some network mounts): one warning line, and None (no lock)."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        try:
            try:
                fd = os.open(LOCK, flags | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=directory.fd)
                ours = True
            except FileExistsError:
                fd = os.open(LOCK, flags, dir_fd=directory.fd)
                ours = False
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise link_error(directory.path / LOCK) from None
            raise UsageError(f"cannot lock {directory.path}: {err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UsageError(
                f"{directory.path} is in use by {holder}; wait for it to end or choose another --out"
            ) from None
        except OSError as err:
            os.close(fd)
            if str(directory.path) not in _unlocked_warned:
                _unlocked_warned.append(str(directory.path))
                print(
                    f"pdmm-bridge: warning: cannot lock {directory.path} ({err.strerror or err}); nothing stops "
                    "a second command writing there",
                    file=sys.stderr,
                )
            return None
        st, now = os.fstat(fd), directory.stat(LOCK)
        if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            return Lock(fd, st, ours)
        os.close(fd)


def _holder(fd: int) -> str:
    """Who holds a lock file, from what it holds ("pdmm-bridge train (pid 12, host h, started ...)")."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode())
        return f"pdmm-bridge {info['command']} (pid {int(info['pid'])} on {info['host']}, started {info['started']})"
    except (OSError, ValueError, TypeError, KeyError):
        return "another pdmm-bridge command"


# the directories this process holds


def hold(path, directory: RunDirectory) -> None:
    """Register claimed `directory` as held at `path` until release(path)."""
    _held[os.path.abspath(path)] = directory


def held(path) -> RunDirectory | None:
    """The RunDirectory of claimed directory `path`, None when this process does not hold it."""
    return _held.get(os.path.abspath(path))


def held_root(directory: Path) -> tuple[RunDirectory, list[str]] | None:
    """(the deepest held directory at or above absolute `directory`, the names from it down to `directory`)."""
    best = None
    for key, found in _held.items():
        if str(directory) == key or str(directory).startswith(key.rstrip(os.sep) + os.sep):
            if best is None or len(key) > len(best[0]):
                best = (key, found)
    if best is None:
        return None
    return best[1], list(directory.relative_to(best[0]).parts)


def held_as(st: os.stat_result) -> RunDirectory | None:
    """The held directory that is the directory of stat `st` (the same one, by another spelling), if any."""
    for found in _held.values():
        mine = os.fstat(found.fd)
        if (mine.st_dev, mine.st_ino) == (st.st_dev, st.st_ino):
            return found
    return None


def release(path) -> None:
    """Let go of claimed directory `path` (RunDirectory.close); nothing when it is not held."""
    directory = _held.pop(os.path.abspath(path), None)
    if directory is not None:
        directory.close()


def release_all() -> None:
    """Let go of every directory this process holds, the deepest first (at the end of a command)."""
    for key in sorted(_held, key=len, reverse=True):
        release(key)
