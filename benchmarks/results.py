"""Where the benchmark scripts put their rows: one CSV per script under benchmarks/results/.

Every row carries the provenance of its run (the columns of PROVENANCE: a run id shared by the
run's rows, the date in UTC, the git commit, the machine, torch's version, torch's threads, the
exact command line, the load average at the start and whether other jobs shared the machine, where
the caller says so) and the name of the table it belongs to; the script's own quantities follow.
`benchmarks/report.py` reads the latest run of each command and writes BENCHMARKS.md from them.

A write rewrites the whole file through experiments.rundir.write_file (a fsynced temporary file
and a rename, never through a link), so a reader never sees half a file and a run killed mid-way
leaves the rows written so far.

    recorder = Recorder("bench_pdmm", args.results_dir, shared=args.shared)
    recorder.add("iteration", graph="random_regular", edges=10000, step_ms=0.094)
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from experiments import rundir

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
RESULTS = HERE / "results"

PROVENANCE = (
    "run_id",
    "date_utc",
    "commit",
    "machine",
    "torch",
    "threads",
    "command",
    "load_at_start",
    "shared",
    "source",
    "table",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --results-dir and --shared, the options every benchmark script takes, to `parser`.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The script's parser.
    """
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS,
        help="directory of the CSV this script appends its rows to (default benchmarks/results)",
    )
    parser.add_argument(
        "--shared",
        default="unknown",
        help="whether other jobs shared the machine during the run: no, yes, or a note (default unknown)",
    )


def git_commit() -> str:
    """The short hash of the repository's HEAD, with "+changes" when tracked files differ from it; "" without git.

    Returns
    -------
    str
        For example "fd7629f" or "fd7629f+changes".
    """
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPOSITORY, capture_output=True).returncode
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+changes" if changed else "")


def command_line(argv: Iterable[str] | None = None) -> str:
    """The command that started this process, as a shell would take it back, with OMP_NUM_THREADS in front if set.

    Parameters
    ----------
    argv : iterable of str, optional
        The arguments (default sys.argv).

    Returns
    -------
    str
        For example "OMP_NUM_THREADS=1 python benchmarks/bench_pdmm.py --quick".
    """
    words = ["python", *(sys.argv if argv is None else argv)]
    threads = os.environ.get("OMP_NUM_THREADS")
    return (f"OMP_NUM_THREADS={threads} " if threads else "") + shlex.join(words)


def read_rows(path: Path | str) -> list[dict[str, str]]:
    """The rows of a results CSV as dictionaries of strings ([] when the file does not exist).

    Parameters
    ----------
    path : Path or str
        The CSV file.

    Returns
    -------
    list of dict
        One dictionary per row, keyed by the header's column names.
    """
    path = Path(path)
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_rows(path: Path | str, rows: list[Mapping[str, object]]) -> None:
    """Write `rows` to the CSV `path` atomically, through experiments.rundir.write_file (never through a link).

    The header is PROVENANCE followed by the other columns in the order they first appear.

    Parameters
    ----------
    path : Path or str
        The CSV file; its directory is created if missing.
    rows : list of mappings
        The rows; a column a row lacks is left empty.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(PROVENANCE)
    for row in rows:
        columns += [key for key in row if key not in columns]
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: "" if value is None else value for key, value in row.items()} for row in rows)
    rundir.write_file(path, text.getvalue())


def cell(value: object) -> object:
    """A value as the CSV stores it: floats at full precision (repr of a Python float), everything else as it is.

    numpy's floating scalars count as floats: under numpy 2 their own repr is "np.float64(0.5)", so the
    value goes through float() first.

    Parameters
    ----------
    value : object
        A number, a string or None.

    Returns
    -------
    object
        repr(float(value)) for a float (numpy's included), else `value`.
    """
    import numpy as np

    return repr(float(value)) if isinstance(value, float | np.floating) else value


class Recorder:
    """The rows of one run of one benchmark script, appended to benchmarks/results/<script>.csv as they come.

    Parameters
    ----------
    script : str
        The script's name without ".py"; the CSV is <directory>/<script>.csv.
    directory : Path or str, optional
        Where the CSV lives (default benchmarks/results).
    shared : str
        Whether other jobs shared the machine ("no", "yes", a note, or "unknown").
    machine : str, optional
        The machine's description (default benchmarks/machine.py's describe()).
    """

    def __init__(
        self, script: str, directory: Path | str | None = None, shared: str = "unknown", machine: str | None = None
    ) -> None:
        import torch
        from machine import describe

        now = datetime.datetime.now(datetime.UTC)
        self.path = Path(RESULTS if directory is None else directory) / f"{script}.csv"
        self.provenance = {
            "run_id": f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}",
            "date_utc": f"{now:%Y-%m-%d %H:%M}",
            "commit": git_commit(),
            "machine": describe() if machine is None else machine,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "command": command_line(),
            "load_at_start": f"{os.getloadavg()[0]:.2f}",
            "shared": shared,
            "source": "measured",
        }

    def add(self, table: str, **values: object) -> None:
        """Append one row of `table` with `values` to the CSV, rewriting it atomically.

        Parameters
        ----------
        table : str
            Which of the script's tables the row belongs to.
        **values : object
            The row's quantities, by column name.
        """
        row = {**self.provenance, "table": table, **{key: cell(value) for key, value in values.items()}}
        write_rows(self.path, [*read_rows(self.path), row])
