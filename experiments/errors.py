"""The command line's error classes and the version, with nothing heavier than the standard library, so that
`pdmm-bridge --help`, `--version` and `configs` start without importing torch (experiments/cli.py)."""

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


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
    """The version of the pdmm-bridge code that runs, as every run records it.

    In a source checkout (pyproject.toml beside the packages, naming pdmm-bridge) it is pyproject's `version`:
    an editable install's metadata keeps the version it was installed with, so a bump would not reach the runs
    until a reinstall. Elsewhere (a wheel) it is the installed metadata's version, and "unknown" without either.

    Returns
    -------
    str
        The version, e.g. "0.2.0", or "unknown".
    """
    source = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(source.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        project = {}
    if project.get("name") == "pdmm-bridge" and isinstance(project.get("version"), str):
        return project["version"]
    try:
        return version("pdmm-bridge")
    except PackageNotFoundError:
        return "unknown"
