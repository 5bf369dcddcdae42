"""Ownership by content: the marker, what a file must hold to be the project's, and claiming an output directory
(docs/guide/runs.md, "Output directories: the marker, `--force` and the lock").

MARKER is a JSON record of the command that made an output directory and, per path the project wrote there, the
contents it wrote: size and sha256 (for metrics.jsonl, written by appending, the prefix written so far). A file is
the project's ("owned") while its contents are one of those recorded; a claimed directory never has a file
replaced or removed that is not. The marker records a write's contents before the rename (the old and the new
ones both, until the next marker write), so a kill at any moment leaves every file the project wrote owned.
`claim` opens, locks (experiments/rundir_lock.py) and marks a directory; `--force` removes only files that still
hold what was recorded.
"""

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import cast

from .errors import UsageError, WriteError
from .rundir_descriptors import (
    DIRECTORY,
    NAME_MAX,
    NEW,
    PATH_MAX,
    READ,
    AppendFile,
    RunDirectory,
    digest,
    link_error,
    refuse_link,
)
from .rundir_lock import LOCK, held, held_root, hold, release, take

MARKER = ".pdmm-bridge-output"  # the command that made an output directory and the contents it wrote there
RESERVED = (MARKER, MARKER + ".tmp", LOCK)  # the project's bookkeeping, never results
FORMAT = 2  # the marker's format: JSON with contents (1: a command name, then bare paths; owns nothing)
MARKER_BYTES = 16 * 2**20  # a larger marker is refused before it is read
STATES = 8  # contents recorded per path at most (the newest kept)

# Recorded contents ("states"): {"size", "sha256"} a whole file; {"size", "sha256", "append", "dev", "ino"} the
# prefix of a file written by appending (a prefix of 0 bytes proves nothing, so that one needs the inode
# too); {"dev", "ino"} the temporary file of a write in progress.
_FORMS = ({"size", "sha256"}, {"size", "sha256", "append", "dev", "ino"}, {"dev", "ino"})


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
    sha = state.get("sha256", "0" * 64)
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
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


def _matches(state: dict, st: os.stat_result, prefix_digest) -> bool:
    """Whether a file (stat `st`; prefix_digest(n): sha256 of its first n bytes) holds recorded contents `state`."""
    same_file = (st.st_dev, st.st_ino) == (state.get("dev"), state.get("ino"))
    if "sha256" not in state:
        return same_file
    if state.get("append"):
        if st.st_size < state["size"]:
            return False
        return same_file if state["size"] == 0 else prefix_digest(state["size"]) == state["sha256"]
    return st.st_size == state["size"] and prefix_digest(st.st_size) == state["sha256"]


class Ledger:
    """The records of one root directory (descriptor `fd` at `path`): its marker's command and contents, and what
    this session checked or wrote. `files` None: a directory without a marker (nothing recorded, nothing
    owned). Implements rundir_descriptors.Records."""

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, path
        self.command: str | None = None
        self.files: dict[str, list] | None = None
        self.legacy = False  # a format-1 marker: nothing owned
        self.strict = False
        self.known: dict[str, tuple] = {}  # path -> (stamp, state): contents checked or written this session
        self.appends: dict[str, AppendFile] = {}
        self.dirty = False

    def owned(self, directory: RunDirectory, name: str, st: os.stat_result) -> dict | None:
        """The recorded contents that file `name` of `directory` (stat `st`) holds, None when none."""
        rel = directory.rel(name)
        if not stat.S_ISREG(st.st_mode) or self.files is None:
            return None
        if rel in self.appends:
            return self.appends[rel].state()
        known = self.known.get(rel)
        if known is not None and known[0] == _stamp(st):
            return known[1]
        states = self.files.get(rel, [])
        if not states:
            return None
        try:
            fd = os.open(name, READ, dir_fd=directory.fd)
        except OSError:
            return None
        try:
            digests: dict[int, str] = {}
            for state in states:
                if _matches(state, st, lambda size: digests.setdefault(size, digest(fd, size))):
                    self.known[rel] = (_stamp(st), state)
                    return state
        finally:
            os.close(fd)
        return None

    def remember(self, directory: RunDirectory, name: str, state: dict) -> None:
        """Note that `name` holds `state` as it is now, so it is not hashed again this session."""
        st = directory.stat(name)
        if st is not None and self.files is not None:
            self.known[directory.rel(name)] = (_stamp(st), state)

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

    def untrack(self, file: AppendFile, st: os.stat_result | None) -> None:
        """Record the prefix an append file closing (stat `st`, None when unknown) holds."""
        self.appends.pop(file.rel, None)
        if st is not None:
            self.known[file.rel] = (_stamp(st), file.state())
        self.settle({file.rel: _union([file.opened], [file.state()])})

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
            fd = os.open(tmp, NEW, 0o666, dir_fd=self.fd)
            with open(fd, "wb") as marker:
                marker.write(data.encode())
                marker.flush()
                os.fsync(fd)
            os.replace(tmp, MARKER, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as err:
            raise WriteError(f"cannot write {self.path / MARKER}: {err.strerror or err}") from None
        self.dirty = False

    def flush(self) -> None:
        """Write the marker if the records changed since it was written; a failure is left unsaid, since the
        marker written last records every write already."""
        if self.dirty:
            with contextlib.suppress(WriteError):
                self.save()

    def load(self, directory: RunDirectory) -> None:
        """Read root `directory`'s marker, defensively: a regular file of at most MARKER_BYTES, in the schema
        _marker_problem checks; none: nothing recorded (the directory holds nothing of the project's)."""
        where = self.path / MARKER
        st = directory.stat(MARKER)
        if st is None:
            self.command, self.files, self.legacy = None, {}, False
            return
        if stat.S_ISLNK(st.st_mode):
            raise link_error(where)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{where} is not a regular file; pdmm-bridge writes only files there")
        if st.st_size > MARKER_BYTES:
            raise UsageError(f"{where} is {st.st_size} bytes, more than a marker holds ({MARKER_BYTES}); remove it")
        try:
            data = directory.read(MARKER, MARKER_BYTES + 1)
        except OSError as err:
            raise UsageError(f"cannot read {where}: {err.strerror or err}") from None
        self.command, self.files, self.legacy = _parse_marker(data, where)

    def reset(self) -> None:
        """Start the records afresh (the directory holds nothing of the project's any more)."""
        self.files, self.legacy = {}, False
        self.known.clear()


def open_root(fd: int, path) -> RunDirectory:
    """A root RunDirectory of open directory `fd` at `path`, with records of its own (none loaded yet)."""
    return RunDirectory(fd, path, Ledger(fd, Path(path)))


def lock_and_load(directory: RunDirectory) -> None:
    """Lock root `directory` (rundir_lock.take), read its marker and check the lock file is the project's; on
    any failure the directory is closed, nothing written."""
    try:
        directory.lock = take(directory)
        _records(directory).load(directory)
        if directory.lock is not None:
            directory.lock.check(directory)
    except BaseException:
        directory.close(save=False)
        raise


def _records(directory: RunDirectory) -> Ledger:
    """The Ledger of a root made by open_root (every root is)."""
    return cast(Ledger, directory.records)


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
    lock_and_load(directory)
    try:
        _admit(directory, command, force, reusable, writes, clear, refusal)
        _start(directory, command)
    except BaseException:
        directory.close(save=False)
        raise
    hold(path, directory)
    return path


def _open_claimed(path: Path) -> RunDirectory:
    """Directory `path` made (with its parents) and opened, through a held directory above it if there is one."""
    key = os.path.abspath(path)
    if held(key) is not None:
        raise UsageError(f"{path} is already held by this command")
    found = held_root(Path(key).parent)
    try:
        if found is not None:
            parent = found[0].descend(found[1], create=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path.name, dir_fd=parent.fd)
            fd = os.open(path.name, DIRECTORY, dir_fd=parent.fd)
        else:
            path.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, DIRECTORY)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise link_error(path) from None
        raise UsageError(f"cannot write to {path}: {err.strerror or err}") from None
    return open_root(fd, path)


def _start(directory: RunDirectory, command: str) -> None:
    """Record `command` as the directory's, in a claimed (strict) directory, and name it in the lock file."""
    records = _records(directory)
    records.command, records.strict = command, True
    if directory.lock is None:
        records.save()
    else:
        directory.lock.name_holder(directory, command)


def _admit(directory: RunDirectory, command, force, reusable, writes, clear, refusal) -> None:
    """claim's rules for what `directory` already holds (claim's docstring); resets the records of an empty one."""
    path, records = directory.path, _records(directory)
    for name in (*writes, MARKER, LOCK):
        for candidate in (name, name + ".tmp"):
            st = directory.stat(candidate)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise link_error(path / candidate)
    leftovers: list[str] = []
    rest: list[str] = []
    for name in sorted(os.listdir(directory.fd)):
        if name in RESERVED:
            continue
        st = directory.stat(name)
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
        records.reset()
        return
    older = (
        f" ({path}'s marker is from an older pdmm-bridge and records no file contents, so nothing there counts "
        "as written by pdmm-bridge)"
        if records.legacy
        else ""
    )
    default = f"{path} already exists and is not empty; choose another --out or pass --force to write into it"
    if clear:
        if not force:
            raise UsageError((refusal or default) + older)
        _empty(directory)
        records.reset()
        return
    if not (force or reusable and records.command == command and not records.legacy):
        raise UsageError((refusal or default) + older)
    clashes = [name for name in writes if directory.stat(name) is not None and directory.owned_state(name) is None]
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
                parent.forget_subdir(name)
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
        st, rel = directory.stat(name), directory.rel(name)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            child = directory.subdir(name, create=False)
            if child.stat(MARKER) is not None:
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
        _records(directory).dirty = False
        identity = os.fstat(directory.fd)
    finally:
        release(path)
    if made:
        with contextlib.suppress(OSError):
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) == (identity.st_dev, identity.st_ino):
                os.rmdir(path)


# what a library wrote by path into a folder of a claimed directory


def unowned(directory: RunDirectory) -> set[tuple[int, int]]:
    """The identities (device, inode) of everything under `directory` the project does not own: its
    subdirectories, links, and files whose contents are not recorded. Taken before a library writes there,
    so that `adopt` never records what was there already."""
    found: set[tuple[int, int]] = set()
    for name in sorted(os.listdir(directory.fd)):
        st = directory.stat(name)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            found |= unowned(directory.subdir(name, create=False))
        if not stat.S_ISREG(st.st_mode) or directory.owned_state(name, st) is None:
            found.add((st.st_dev, st.st_ino))
    return found


def first_link(directory: RunDirectory) -> Path | None:
    """The first link found under `directory` (depth first, names sorted), None where there is none: a library
    handed the folder would write through it (docs/guide/runs.md, "Output directories")."""
    for name in sorted(os.listdir(directory.fd)):
        st = directory.stat(name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            return directory.path / name
        if st is not None and stat.S_ISDIR(st.st_mode):
            found = first_link(directory.subdir(name, create=False))
            if found is not None:
                return found
    return None


def adopt(directory: RunDirectory, before: set[tuple[int, int]]) -> None:
    """Record, in the marker now, the contents of every file under `directory` a library wrote (any file not in
    `before`, unowned(directory) when it began), so `--force` can remove them; remove the links and the empty
    subdirectories it made (a link or a directory is never owned). What was there before is left as it is and
    stays unowned: a planted file is still refused (docs/guide/runs.md, "Output directories")."""
    _adopt_tree(directory, before)
    _records(directory).save()


def _adopt_tree(directory: RunDirectory, before: set[tuple[int, int]]) -> None:
    """adopt, without writing the marker."""
    for name in sorted(os.listdir(directory.fd)):
        st = directory.stat(name)
        if st is None:
            continue
        new = (st.st_dev, st.st_ino) not in before
        try:
            if stat.S_ISDIR(st.st_mode):
                child = directory.subdir(name, create=False)
                _adopt_tree(child, before)
                if new and not os.listdir(child.fd):
                    directory.forget_subdir(name)
                    os.rmdir(name, dir_fd=directory.fd)
            elif new and stat.S_ISLNK(st.st_mode):
                os.unlink(name, dir_fd=directory.fd)
            elif new and stat.S_ISREG(st.st_mode):
                state = _content_of(directory, name)
                directory.records.settle({directory.rel(name): [state]})
                directory.records.remember(directory, name, state)
        except OSError as err:
            raise WriteError(f"cannot record {directory.path / name}: {err.strerror or err}") from None


def _content_of(directory: RunDirectory, name: str) -> dict:
    """The recorded contents ({"size", "sha256"}) of what file `name` of `directory` holds now."""
    fd = os.open(name, READ, dir_fd=directory.fd)
    try:
        size = os.fstat(fd).st_size
        return {"size": size, "sha256": digest(fd, size)}
    finally:
        os.close(fd)
