"""Reading what the trainer writes: run directories, sweep directories, and variants (runs grouped by config).

    runs = expand(["runs/sweep"])               # a sweep directory -> its run directories
    groups = group_runs(runs)                    # {"residual=belief": [seed 0, seed 1], ...}
    curve = aligned(groups["residual=belief"], "val_loss")

A run directory holds config.toml ([task], [model], [train]), metrics.jsonl (one JSON object per
logged step), and, once finished, summary.json; meta.json records versions and the command line.
A sweep directory holds sweep.json and one run directory per entry of its "runs" list. A solve
directory (`pdmm-bridge solve`) holds config.json and history.csv, one curve per method label.

Every file is read through experiments.rundir (a link leading outside its directory is refused) and
checked on read (config.toml, metrics rows, summary.json, meta.json, sweep.json, a solve directory's
config.json and history.csv): a file that does not have the shape the project writes is one
UsageError naming it and what is wrong (docs/guide/runs.md).
"""

import csv
import io
import json
import os
import sys
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attention import RESIDUAL_KNOBS, uses_knob

from . import rundir
from .config import TABLES, attention_keys, checked, table_keys
from .errors import UsageError

IGNORED_KEYS = ("train.seed", "train.device", "train.compile")  # never part of a variant's label
ONLY_WHEN = {  # the residuals' knobs (gamma, beta) come from attention's residual table instead
    "model.gates": ("model.kind", "convex"),
    "model.group_lasso": ("model.kind", "convex"),
}
TRANSFORMER_KEYS = ("model.n_layer", *(f"model.{key}" for key in attention_keys() if key != "d_model"))
# unused by model.kind = "convex", which reads d_model as its embeddings' width


class TornLine(UserWarning):
    """The last line of a metrics.jsonl is cut short (a run killed mid-write); readers skip it."""


@dataclass
class Run:
    """One run directory: config as {table: {key: value}}, metric rows, summary and meta (None when absent).

    entry is the run's item in its sweep's sweep.json ("status", "error", ...), None outside a sweep.
    """

    path: Path
    config: dict
    metrics: list
    summary: dict | None
    meta: dict | None
    entry: dict | None = None

    @property
    def name(self):
        return self.path.name

    @property
    def finished(self):
        return self.summary is not None and self.summary.get("status") == "finished"

    @property
    def failed(self):
        return not self.finished and self.entry is not None and self.entry.get("status") == "failed"

    @property
    def seed(self):
        return self.config.get("train", {}).get("seed")

    def metric_names(self):
        """Every metric some row logs ("train_loss", "lr", "val_loss", ...), in first-logged order."""
        return list(dict.fromkeys(key for row in self.metrics for key in row if key not in ("step", "time")))

    def series(self, metric):
        """(steps, seconds, values) of the rows that carry `metric`; a step logged twice (resume) keeps the last row."""
        rows = {row["step"]: row for row in self.metrics if row.get(metric) is not None}
        steps = np.array(sorted(rows), dtype=int)
        seconds = np.array([rows[s].get("time", np.nan) for s in steps], dtype=float)
        return steps, seconds, np.array([rows[s][metric] for s in steps], dtype=float)


def is_run_dir(path):
    return (Path(path) / "metrics.jsonl").is_file()


def load_run(path, root=None):
    """The Run in directory `path` (inside `root`, a sweep directory, when given); UsageError when it has no
    metrics.jsonl, a file is unreadable or malformed, or the directory is a link leading outside `root`."""
    path = Path(path)
    if root is not None:
        rundir.inside(path, root)
    if not is_run_dir(path):
        raise UsageError(f"{path} is not a run directory (no metrics.jsonl)")
    config = read_toml(path / "config.toml", f"the config of run {path}")
    check_run_config(config, path / "config.toml")
    return Run(
        path,
        config,
        read_metrics(path / "metrics.jsonl"),
        read_summary(path / "summary.json"),
        read_meta(path / "meta.json"),
    )


def read_toml(file, what=None) -> dict:
    """The TOML file `file` (read through rundir) as a dict; UsageError naming it (or `what`) when it is not TOML."""
    try:
        return tomllib.loads(rundir.read_text(file))
    except (tomllib.TOMLDecodeError, RecursionError) as err:
        reason = err if isinstance(err, tomllib.TOMLDecodeError) else "nested too deeply"
        raise UsageError(f"cannot read {what or file}: {reason}") from None


def check_run_config(config, file) -> None:
    """UsageError naming a run's config.toml unless its tables are tables and the keys this version knows have
    their types (keys it does not know, from another version, are left alone): what the readers of runs use."""
    for table in TABLES:
        values = config.get(table, {})
        if not isinstance(values, dict):
            raise UsageError(f"{file}: [{table}] must be a table, got {values!r}")
        for name, kind in table_keys(table).items():
            if name in values:
                try:
                    checked(f"{table}.{name}", values[name], kind)
                except UsageError as err:
                    raise UsageError(f"{file}: {err}") from None


def read_metrics(file):
    """The rows of metrics.jsonl (parse_metrics; a torn last line is skipped with a TornLine warning)."""
    return parse_metrics(rundir.read_text(file), file)


def is_number(value) -> bool:
    """An int or float, not a bool, that a float can hold (a 400-digit integer is not a number here)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (isinstance(value, float) or abs(value) <= sys.float_info.max)
    )


MAX_STEP = 2**63 - 1  # steps are int64 in the arrays readers make of them


def row_problem(row) -> str | None:
    """What is wrong with one metrics row: an object with an integer 'step' from 0 to MAX_STEP and numbers (or
    null) for values; None when nothing is."""
    if not (
        isinstance(row, dict)
        and isinstance(row.get("step"), int)
        and not isinstance(row["step"], bool)
        and 0 <= row["step"] <= MAX_STEP
    ):
        return "expected an object with an integer 'step' from 0 to 2^63 - 1"
    bad = next(
        (key for key, value in row.items() if key != "step" and value is not None and not is_number(value)), None
    )
    return None if bad is None else f"{bad} is {repr(row[bad])[:40]}, not a number"


def parse_metrics(text: str, file, torn_last: bool = True) -> list:
    """The rows of metrics.jsonl text (`file` names it in errors): a last line cut short by a killed run is
    dropped with a TornLine warning when `torn_last`, any other bad line is a UsageError naming its number."""
    lines = text.splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problem = row_problem(row)
            if problem:
                raise ValueError(problem)
        except RecursionError:
            raise UsageError(f"{file}, line {number}: nested too deeply") from None
        except ValueError as err:
            if torn_last and number == len(lines) and not text.endswith("\n"):
                warnings.warn(
                    f"{file}, line {number} is cut short (a run killed while writing it); skipped",
                    TornLine,
                    stacklevel=3,
                )
                break
            raise UsageError(f"{file}, line {number}: {err}") from None
        rows.append(row)
    return rows


def read_json(file, root=None):
    """The parsed JSON file (read through rundir.read_text), None when it does not exist."""
    file = Path(file)
    if not (file.is_file() or file.is_symlink()):
        return None
    try:
        return json.loads(rundir.read_text(file, root))
    except ValueError as err:
        raise UsageError(f"cannot read {file}: {err}") from None
    except RecursionError:
        raise UsageError(f"cannot read {file}: nested too deeply") from None


def read_summary(file):
    """summary.json (read_json, check_summary), None when absent."""
    summary = read_json(file)
    check_summary(summary, file)
    return summary


def read_meta(file):
    """meta.json (read_json), None when absent; UsageError naming it unless it is an object whose run_id is a
    string (or absent) and whose extended is a list (or absent)."""
    meta = read_json(file)
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise UsageError(f"{file}: expected an object")
    if meta.get("run_id") is not None and not isinstance(meta["run_id"], str):
        raise UsageError(f"{file}: run_id is {meta['run_id']!r}, not a string")
    if not isinstance(meta.get("extended", []), list):
        raise UsageError(f"{file}: extended must be a list")
    return meta


SUMMARY_NUMBERS = ("steps", "params", "seconds_per_step", "tokens_per_second", "wall_seconds", "best_step")


def check_summary(summary, file) -> None:
    """UsageError naming `file` unless `summary` (None: absent) has the shape train() writes."""
    if summary is None:
        return
    if not isinstance(summary, dict) or not isinstance(summary.get("status"), str):
        raise UsageError(f"{file}: expected an object with a string 'status'")
    for key in SUMMARY_NUMBERS:
        if summary.get(key) is not None and not is_number(summary[key]):
            raise UsageError(f"{file}: {key} is {summary[key]!r}, not a number")
    for key in ("final", "best"):
        values = summary.get(key, {})
        if not isinstance(values, dict) or any(v is not None and not is_number(v) for v in values.values()):
            raise UsageError(f"{file}: {key} must map metric names to numbers")


STATUSES = ("pending", "finished", "failed")


def is_directory_name(name: str) -> bool:
    """Whether a file system can hold a directory named `name` (encodable, no NUL, at most NAME_MAX bytes)."""
    try:
        return "\0" not in name and len(os.fsencode(name)) <= rundir.NAME_MAX
    except UnicodeError:
        return False


def check_sweep(sweep, file) -> None:
    """UsageError naming `file` and what is wrong unless `sweep` has the shape the sweep command writes."""

    def wrong(what):
        raise UsageError(f"{file}: {what}; it is not a sweep record pdmm-bridge wrote")

    if not isinstance(sweep, dict):
        wrong("expected an object")
    if not isinstance(sweep.get("runs"), list):
        wrong("'runs' must be a list")
    for key, kind in (("grid", dict), ("variants", list), ("seeds", list), ("set", list), ("report", dict)):
        if sweep.get(key) is not None and not isinstance(sweep[key], kind):
            wrong(f"'{key}' must be a{'n object' if kind is dict else ' list'}")
    if not all(isinstance(values, list) for values in sweep.get("grid", {}).values()):
        wrong("'grid' must map keys to lists of values")
    names = set()
    for number, entry in enumerate(sweep["runs"], 1):
        if not isinstance(entry, dict):
            wrong(f"run {number} is not an object")
        name = entry.get("name")
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", "..") or "\\" in name:
            wrong(f"run {number} names a run {name!r} outside the sweep directory (a run name is one directory name)")
        if not is_directory_name(name):
            wrong(
                f"run {number} has a name no directory can have (over {rundir.NAME_MAX} bytes, a NUL or a lone "
                "surrogate)"
            )
        if name in names:
            wrong(f"run {name!r} is listed twice")
        names.add(name)
        if entry.get("status", "pending") not in STATUSES:
            wrong(f"run {name!r} has status {entry.get('status')!r}, not one of {', '.join(STATUSES)}")
        if not isinstance(entry.get("overrides", {}), dict):
            wrong(f"run {name!r} has overrides that are not an object")
        if entry.get("error") is not None and not isinstance(entry["error"], str):
            wrong(f"run {name!r} has an error that is not a string")
        seed = entry.get("seed")
        if seed is not None and not (isinstance(seed, int) and not isinstance(seed, bool)):
            wrong(f"run {name!r} has seed {seed!r}, not an integer")


def read_sweep(path):
    """sweep.json of a sweep directory as a dict (check_sweep), or None for a plain directory of run directories."""
    sweep = read_json(Path(path) / "sweep.json")
    if sweep is not None:
        check_sweep(sweep, Path(path) / "sweep.json")
    return sweep


def sweep_runs(path):
    """The run directories of a sweep: in sweep.json's order when there is one, else the subdirectories by name;
    a run directory that is a link leading outside the sweep is refused."""
    path = Path(path)
    sweep = read_sweep(path)
    if sweep is None:
        return [load_run(p, path) for p in sorted(path.iterdir()) if is_run_dir(p)]
    runs = []
    for entry in sweep["runs"]:
        if is_run_dir(path / entry["name"]):
            runs.append(load_run(path / entry["name"], path))
            runs[-1].entry = entry
    return runs


def is_sweep_dir(path):
    path = Path(path)
    return (
        path.is_dir()
        and not is_run_dir(path)
        and ((path / "sweep.json").is_file() or any(is_run_dir(p) for p in path.iterdir() if p.is_dir()))
    )


def expand(paths):
    """The runs named by `paths`: a run directory is itself, a sweep directory is its run directories."""
    runs, seen = [], set()
    for arg in paths:
        path = Path(arg)
        rundir.check_length(path)
        if not path.is_dir():
            raise UsageError(f"{path}: no such directory")
        if is_run_dir(path):
            found = [load_run(path)]
        elif is_sweep_dir(path):
            found = sweep_runs(path)
        else:
            raise UsageError(
                f"{path} is not a run directory (no metrics.jsonl) nor a sweep directory "
                "(no sweep.json, no run directories inside)"
            )
        for run in found:
            if run.path.resolve() not in seen:
                seen.add(run.path.resolve())
                runs.append(run)
    return runs


def flat_config(config):
    """{"model.residual": "belief", ...} from {table: {key: value}}."""
    return {
        f"{table}.{key}": value
        for table, values in config.items()
        if isinstance(values, dict)
        for key, value in values.items()
    }


def differing_keys(runs):
    """The dotted config keys whose values are not the same in all runs, seed, device and compile excepted."""
    flats = [flat_config(run.config) for run in runs]
    keys = dict.fromkeys(key for flat in flats for key in flat)
    return [
        key
        for key in keys
        if key not in IGNORED_KEYS and any(flat.get(key, None) != flats[0].get(key, None) for flat in flats)
    ]


def label(values):
    """ "kernel=diff, symmetric=True" from {"model.kernel": "diff", "model.symmetric": True}.

    Keys are shortened to their last component unless two of them would then read the same.
    """
    short = [key.rsplit(".", 1)[-1] for key in values]
    names = short if len(set(short)) == len(short) else list(values)
    return ", ".join(f"{name}={value}" for name, value in zip(names, values.values(), strict=False))


def relevant(key, flat):
    """Whether config `key` changes what a run with config `flat` computes: a residual's knob only where
    attention.RESIDUAL_TABLE lists it for the run's residual (gamma only for attentionx, ...), gates only on
    convex runs, no transformer key on a convex run (docs/guide/training.md)."""
    if key in TRANSFORMER_KEYS and flat.get("model.kind") == "convex":
        return False
    table, _, name = key.partition(".")
    if table == "model" and name in RESIDUAL_KNOBS:
        return uses_knob(flat.get("model.residual"), name)
    other, value = ONLY_WHEN.get(key, (None, None))
    return other is None or flat.get(other) == value


def group_runs(runs, keys=None):
    """{label: [runs]} with one entry per variant (runs that differ only in seed), in first-seen order.

    The label names the keys that differ between runs, or the given `keys` (which must then tell the
    variants apart), leaving out those the run does not use (gamma on a belief run)."""
    keys = differing_keys(runs) if keys is None else keys
    groups = {}
    for run in runs:
        flat = flat_config(run.config)
        name = label({key: flat.get(key) for key in keys if relevant(key, flat)}) or flat.get("task.name", run.name)
        groups.setdefault(name, []).append(run)
    return {name: sorted(members, key=lambda r: (r.seed is None, r.seed or 0)) for name, members in groups.items()}


@dataclass
class Curve:
    """A variant's metric over the steps every seed logged: mean line and min..max band over seeds."""

    steps: np.ndarray
    seconds: np.ndarray  # wall-clock seconds, mean over seeds
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int


def aligned(runs, metric):
    """The Curve of `metric` over the steps common to the runs that log it; None when there are none."""
    series = [s for s in (run.series(metric) for run in runs) if len(s[0])]
    if not series:
        return None
    common = series[0][0]
    for steps, _, _ in series[1:]:
        common = np.intersect1d(common, steps)
    if not len(common):
        return None
    picked = [(seconds[np.isin(steps, common)], values[np.isin(steps, common)]) for steps, seconds, values in series]
    seconds, values = (np.stack(part) for part in zip(*picked, strict=False))  # (seeds, steps)
    return Curve(common, seconds.mean(0), values.mean(0), values.min(0), values.max(0), len(series))


@dataclass
class SolveRun:
    """One `pdmm-bridge solve` output directory: its config.json and {method label: {column: per-iteration array}}."""

    path: Path
    config: dict
    curves: dict


def is_solve_dir(path):
    return (Path(path) / "history.csv").is_file() and (Path(path) / "config.json").is_file()


def load_solve(path):
    """The SolveRun in `path`; UsageError when it is not a solve directory or a file is unreadable or malformed."""
    path = Path(path)
    if not is_solve_dir(path):
        raise UsageError(f"{path} is not a solve directory (no config.json and history.csv)")
    curves = {}
    try:
        with io.StringIO(rundir.read_text(path / "history.csv"), newline="") as file:
            for row in csv.DictReader(file):
                curve = curves.setdefault(row["method"], {})
                for key, value in row.items():
                    if key not in ("method", "iteration") and value != "":
                        curve.setdefault(key, []).append(float(value))
    except (KeyError, ValueError, TypeError, csv.Error) as err:  # TypeError: a row longer or shorter than the header
        raise UsageError(f"cannot read {path / 'history.csv'}: {err}") from None
    config = read_json(path / "config.json")
    tables = ("args", "graph", "methods")
    if not (
        isinstance(config, dict)
        and all(isinstance(config.get(key, {}), dict) for key in tables)
        and all(isinstance(entry, dict) for entry in config.get("methods", {}).values())
    ):
        raise UsageError(f"{path / 'config.json'}: expected an object whose args, graph and methods are objects")
    return SolveRun(
        path,
        config,
        {label: {key: np.array(values) for key, values in curve.items()} for label, curve in curves.items()},
    )
