"""The command line's error classes and the version, with nothing heavier than the standard library, so that
`pdmm-bridge --help`, `--version` and `configs` start without importing torch (experiments/cli.py)."""

from importlib.metadata import PackageNotFoundError, version


class UsageError(Exception):
    """Bad input from the command line; the CLI prints it as one `error:` line and exits with code 2."""


class RunFailure(Exception):
    """A failure while running on good input (a full disk, a dead process); the CLI prints it as one
    `error:` line and exits with code 1."""


class WriteError(RunFailure):
    """A file could not be written (disk full, read-only directory, file size limit); what it replaced is intact."""


def first_line(err: BaseException) -> str:
    """The first non-empty line of err's message, or its type's name where it has none (a bare MemoryError)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def package_version() -> str:
    """The installed pdmm-bridge version, or "unknown" when running from an uninstalled checkout."""
    try:
        return version("pdmm-bridge")
    except PackageNotFoundError:
        return "unknown"
