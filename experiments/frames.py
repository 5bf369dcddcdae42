"""Runs as pandas DataFrames: every logged row of some run directories or sweeps, or one row per run with its
summary (docs/guide/runs.md, "Runs as a DataFrame").

    from experiments.frames import metrics_frame, summary_frame
    rows = metrics_frame("runs/repro/linear_char")       # one row per metrics.jsonl row of every run
    final = summary_frame("runs/repro/linear_char")      # one row per run: its config keys and summary

pandas is an optional dependency (pip install "pdmm-bridge[frames]"), imported when a function is called. The
directories are read as the report command reads them (experiments.runs.expand): a malformed file is a
UsageError naming it, and nothing is written.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import UsageError
from .runs import Run, differing_keys, expand, flat_config


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise UsageError('reading runs into a DataFrame needs pandas: pip install "pdmm-bridge[frames]"') from None
    return pandas


def _runs_and_keys(paths: str | Path | Iterable[str | Path], config: str) -> tuple[list[Run], list[str]]:
    """The runs in `paths` (experiments.runs.expand) and the config keys shown as columns."""
    if config not in ("differing", "all"):
        raise ValueError(f"config must be 'differing' or 'all', got {config!r}")
    runs = expand([paths] if isinstance(paths, (str, Path)) else list(paths))
    if config == "all":
        return runs, sorted({key for run in runs for key in flat_config(run.config)})
    return runs, differing_keys(runs)


def metrics_frame(paths: str | Path | Iterable[str | Path], config: str = "differing") -> Any:
    """Every row of metrics.jsonl of the runs in `paths` (run directories or sweep directories), in file order.

    A step logged twice (a run resumed after a kill re-logs the steps after its checkpoint) keeps only its last
    row, as the report and plot commands read it.

    Parameters
    ----------
    paths : str, Path or iterable of them
        Run directories and sweep directories.
    config : str
        "differing": a column per config key ("model.kernel", ...) whose value differs between the runs (seed,
        device and compile aside: the seed has its own column); "all": a column per config key.

    Returns
    -------
    pandas.DataFrame
        Columns "run" (the directory's name), "path", "seed" (train.seed), the config keys, "step", "time" and
        every logged metric
        (NaN where a row does not carry it: the training rows have no validation metrics).

    Raises
    ------
    UsageError
        Where pandas is missing, or a directory is not a run or a sweep or holds a malformed file.
    ValueError
        For a config other than "differing" or "all".
    """
    pandas = _pandas()
    runs, keys = _runs_and_keys(paths, config)
    records = []
    for run in runs:
        flat = flat_config(run.config)
        settings = {key: flat.get(key) for key in keys}
        last = {row["step"]: index for index, row in enumerate(run.metrics)}
        for index, row in enumerate(run.metrics):
            if last[row["step"]] == index:
                records.append({"run": run.name, "path": str(run.path), "seed": run.seed, **settings, **row})
    return pandas.DataFrame.from_records(records)


def summary_frame(paths: str | Path | Iterable[str | Path], config: str = "differing") -> Any:
    """One row per run in `paths`: its config keys and its summary.json ("final.val_loss", "best.val_loss",
    "seconds_per_step", "steps", "stopped_by", ...; missing for a run that has not finished).

    Parameters
    ----------
    paths : str, Path or iterable of them
        Run directories and sweep directories.
    config : str
        "differing" or "all", as metrics_frame.

    Returns
    -------
    pandas.DataFrame
        Columns "run", "path", "seed", "finished", the config keys, then the summary's entries, nested ones
        flattened with a dot.

    Raises
    ------
    UsageError
        As metrics_frame.
    ValueError
        As metrics_frame.
    """
    pandas = _pandas()
    runs, keys = _runs_and_keys(paths, config)
    records = []
    for run in runs:
        flat = flat_config(run.config)
        summary = {
            f"{key}.{inner}" if isinstance(value, dict) else key: item
            for key, value in (run.summary or {}).items()
            for inner, item in (value.items() if isinstance(value, dict) else [(None, value)])
        }
        records.append(
            {"run": run.name, "path": str(run.path), "seed": run.seed, "finished": run.finished}
            | {k: flat.get(k) for k in keys}
            | summary
        )
    return pandas.DataFrame.from_records(records)
