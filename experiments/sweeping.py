"""What `pdmm-bridge sweep` runs and how: the grid and seeds from the command line or the config's [sweep] table,
every value checked and every run planned before the first one, the record kept in sweep.json, and the runs
trained in turn (docs/guide/training.md).
"""

import argparse
import itertools
import json
import shlex
import sys
import traceback
from pathlib import Path
from typing import Any

from tqdm import tqdm

from . import rundir
from .checkpoints import has_checkpoint
from .config import (
    TABLES,
    RunConfig,
    apply_override,
    load_config,
    load_plan,
    overrides_with_data,
    table_keys,
    toml_value,
)
from .errors import RunFailure, UsageError, package_version
from .grid import check_names, parse_seeds, run_name
from .progress import job_bar
from .tasks import check_config
from .train import train
from .train_files import finished

Spec = tuple[dict[str, list[Any]], list[dict[str, Any]], list[int]]  # (grid, variants, seeds)


def grid_axis(text: str) -> tuple[str, list[Any]]:
    """One --grid axis: "model.residual=standard,belief" -> ("model.residual", ["standard", "belief"]), the values
    as TOML reads them.

    Parameters
    ----------
    text : str
        The flag's value, table.key=value1,value2,...

    Returns
    -------
    (key, values)

    Raises
    ------
    UsageError
        For text of another shape, or train.seed (the seeds are --seeds).
    """
    key, sep, written = text.partition("=")
    key, values = key.strip(), [v.strip() for v in written.split(",") if v.strip()]
    if not (sep and "." in key and values):
        raise UsageError(f"--grid expects table.key=value1,value2,..., got {text!r}")
    if key == "train.seed":
        raise UsageError("sweep seeds with --seeds, not --grid train.seed=...")
    return key, [parsed_value(key, value) for value in values]


def parsed_value(key: str, text: str) -> Any:
    """The value `--set key=text` would give.

    Parameters
    ----------
    key : str
        table.key.
    text : str
        The value as written.

    Returns
    -------
    object
        The value as TOML reads it.
    """
    tables: dict[str, dict[str, Any]] = {}
    apply_override(tables, f"{key}={text}")
    table, _, name = key.partition(".")
    return tables[table][name]


def sweep_spec(args: argparse.Namespace) -> Spec:
    """What the sweep runs: the command line's grid and seeds, else the config's [sweep] table's.

    Parameters
    ----------
    args : argparse.Namespace
        The sweep command's arguments (config, grid, seeds).

    Returns
    -------
    grid : dict
        {key: values}; the runs are the product of the axes.
    variants : list of dict
        [{key: value}], each crossed with the grid ([{}] for none).
    seeds : list of int

    Raises
    ------
    UsageError
        For a [sweep] table of the wrong shape, or bad --grid or --seeds.
    """
    table = load_plan(args.config)["sweep"]
    unknown = set(table) - {"grid", "variants", "seeds"}
    if unknown:
        raise UsageError(
            f"{args.config}: unknown key(s) {', '.join(sorted(unknown))} in [sweep]; "
            "it accepts grid, variants and seeds"
        )
    variants: list[dict[str, Any]]
    if args.grid:
        grid, variants = dict(grid_axis(text) for text in args.grid), [{}]
    else:
        grid, variants = table.get("grid", {}), table.get("variants", [{}]) or [{}]
        if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
            raise UsageError(f"{args.config}: [sweep] grid must map table.key to a non-empty list of values")
        if not all(isinstance(v, dict) for v in variants):
            raise UsageError(f"{args.config}: [sweep] variants must be a list of tables of table.key = value")
        for key in [*grid, *(key for variant in variants for key in variant)]:
            if "." not in key or key == "train.seed":
                raise UsageError(f"{args.config}: [sweep] keys are table.key names other than train.seed, got {key!r}")
        clashes = {key for variant in variants for key in variant} & set(grid)
        if clashes:
            raise UsageError(f"{args.config}: [sweep] sets {', '.join(sorted(clashes))} in both grid and variants")
    if args.seeds is not None:
        run_seeds = parse_seeds(args.seeds)
    else:
        run_seeds = table.get("seeds", [0])
        if not isinstance(run_seeds, list):
            raise UsageError(f"{args.config}: [sweep] seeds must be a list of integers")
        run_seeds = parse_seeds(",".join(map(str, run_seeds)))
    return grid, variants, run_seeds


def check_values(args: argparse.Namespace, spec: Spec) -> None:
    """Check every grid value and variant on its own: the config it gives loads and names known residuals,
    kernels and tasks.

    Parameters
    ----------
    args : argparse.Namespace
        The sweep command's arguments (config, overrides, data, grid).
    spec : (grid, variants, seeds)
        What sweep_spec returned.

    Raises
    ------
    UsageError
        Naming the first grid value or variant that gives an invalid config.
    """
    grid, variants, _ = spec
    where = "--grid" if args.grid else f"{args.config} [sweep] grid"
    checks = [(f"{where} {key}={toml_value(value)}", {key: value}) for key, values in grid.items() for value in values]
    checks += [
        (f"{args.config} [[sweep.variants]] entry {i}", variant) for i, variant in enumerate(variants, 1) if variant
    ]
    for origin, values in checks:
        try:
            for key in values:
                known_key(key)
            config = load_config(
                args.config,
                [*overrides_with_data(args.overrides, args.data), *(f"{k}={toml_value(v)}" for k, v in values.items())],
            )
            check_names(config)
        except UsageError as err:
            raise UsageError(f"{origin}: {err}") from None


def known_key(key: str) -> None:
    """Check that `key` is table.key of [model] or [train], or of [task] (whose options its task checks).

    Parameters
    ----------
    key : str
        table.key.

    Raises
    ------
    UsageError
        For an unknown table or key, naming the accepted ones.
    """
    table, _, name = key.partition(".")
    if table not in TABLES:
        raise UsageError(f"unknown table {table!r}; expected {', '.join(TABLES)}")
    fields = list(table_keys(table))
    if table != "task" and name not in fields:
        raise UsageError(f"unknown key {key}; [{table}] accepts {', '.join(fields)}")


def plan(args: argparse.Namespace, spec: Spec) -> list[dict[str, Any]]:
    """Every run of the sweep, each checked to resolve, to have task options its task accepts and to fit in memory
    (tasks.check_config): a bad or absurd grid point fails the sweep before its first run, not after the runs
    before it.

    Parameters
    ----------
    args : argparse.Namespace
        The sweep command's arguments (config, overrides, data).
    spec : (grid, variants, seeds)
        What sweep_spec returned.

    Returns
    -------
    list of dict
        name, overrides (the variant's and the grid point's), seed and set (every override, in precedence order)
        of each run, for every variant, grid point and seed.

    Raises
    ------
    UsageError
        Naming the first run whose config fails.
    """
    grid, variants, run_seeds = spec
    runs = []
    for variant, values in itertools.product(variants, itertools.product(*grid.values())):
        point = dict(zip(grid, values, strict=False))
        assignment = {**variant, **point}
        for seed in run_seeds:
            name = run_name(assignment, seed)
            overrides = [
                *(f"{k}={toml_value(v)}" for k, v in variant.items()),
                *overrides_with_data(args.overrides, args.data),
                *(f"{k}={toml_value(v)}" for k, v in point.items()),
                f"train.seed={seed}",
            ]
            try:
                check_config(load_config(args.config, overrides))  # a bad or absurd value fails here, before any run
            except UsageError as err:
                raise UsageError(f"run {name}: {err}") from None
            runs.append({"name": name, "overrides": assignment, "seed": seed, "set": overrides})
    return runs


def new_record(args: argparse.Namespace, spec: Spec, runs: list[dict[str, Any]], report: Any) -> dict[str, Any]:
    """The record sweep.json starts from: the package version, config, overrides, grid, variants, seeds, the
    [report] table and every run pending.

    Parameters
    ----------
    args : argparse.Namespace
        The sweep command's arguments (config, overrides, data).
    spec : (grid, variants, seeds)
        What sweep_spec returned.
    runs : list of dict
        The plan.
    report : dict
        The config's checked [report] table.

    Returns
    -------
    dict
    """
    grid, variants, run_seeds = spec
    return {
        "version": package_version(),
        "config": str(args.config),
        "set": overrides_with_data(args.overrides, args.data),
        "grid": grid,
        "variants": variants,
        "seeds": run_seeds,
        "report": report,
        "runs": [
            {"name": r["name"], "overrides": r["overrides"], "seed": r["seed"], "status": "pending", "error": None}
            for r in runs
        ],
    }


def keep_previous(
    record: dict[str, Any],
    previous: dict[str, Any] | None,
    runs: list[dict[str, Any]],
    args: argparse.Namespace,
    out: Path,
) -> None:
    """Carry a resumed sweep's run entries into `record`, so that earlier failures stay on record until their run
    is retried.

    Parameters
    ----------
    record : dict
        The new record, updated in place.
    previous : dict or None
        The sweep.json already in OUT, None when there is none.
    runs : list of dict
        The plan.
    args : argparse.Namespace
        The sweep command's arguments (overrides, data).
    out : Path
        The sweep directory, named in the error.

    Raises
    ------
    UsageError
        When OUT holds a different sweep (other runs or other --set).
    """
    if previous is not None:
        same = [r["name"] for r in previous["runs"]] == [r["name"] for r in runs] and previous.get(
            "set"
        ) == overrides_with_data(args.overrides, args.data)
        if not same:
            raise UsageError(f"{out} holds a different sweep; choose another --out")
        record["runs"] = previous["runs"]  # keep earlier failures on record until their run is retried


def write_sweep(record: dict[str, Any], out: Path) -> None:
    """Write sweep.json through rundir, atomically: a sweep killed at any moment leaves the previous record whole.

    Parameters
    ----------
    record : dict
        The sweep's record (new_record).
    out : Path
        The sweep directory.
    """
    rundir.write_file(out / "sweep.json", json.dumps(record, indent=2) + "\n")


def run_all(args: argparse.Namespace, runs: list[dict[str, Any]], record: dict[str, Any], out: Path) -> int:
    """Train every planned run in turn, recording each in sweep.json (skipped ones too), under a bar over the
    whole sweep ("run k of N", the runs done and the time left, progress.job_bar) unless args.no_progress.

    Parameters
    ----------
    args : argparse.Namespace
        The sweep command's arguments (config, no_progress).
    runs : list of dict
        The plan.
    record : dict
        The sweep's record, updated in place.
    out : Path
        The sweep directory.

    Returns
    -------
    int
        How many runs failed.

    Raises
    ------
    UsageError
        When a run directory was run with another config.
    """
    failed = 0
    done = sum(finished(out / plan_entry["name"]) for plan_entry in runs)
    with job_bar(len(runs), done, "run", not args.no_progress, f"run 1 of {len(runs)}") as bar:
        for k, (plan_entry, entry) in enumerate(zip(runs, record["runs"], strict=False), 1):
            bar.set_description(f"run {k} of {len(runs)}")
            run_dir = out / plan_entry["name"]
            config = load_config(args.config, plan_entry["set"])
            if (run_dir / "config.toml").is_file() and load_config(
                rundir.inside(run_dir / "config.toml", out)
            ) != config:
                raise UsageError(
                    f"{run_dir} was run with a different config than {args.config} now gives; choose another --out"
                )
            if finished(run_dir):  # counted in `done`
                entry["status"], entry["error"] = "finished", None
                tqdm.write(f"{run_dir}: finished earlier, skipped", file=sys.stdout)
            else:
                failed += not train_entry(args, config, run_dir, entry)
                bar.update(1)
            write_sweep(record, out)
    return failed


def train_entry(args: argparse.Namespace, config: RunConfig, run_dir: Path, entry: dict[str, Any]) -> bool:
    """Train (or resume) one run of the sweep, noting its status in `entry`; a failing run does not stop the sweep.

    Parameters
    ----------
    args : argparse.Namespace
        The sweep command's arguments (no_progress, and log_target: the log_sinks.LogTarget, or None).
    config : RunConfig
        The run's config.
    run_dir : Path
        Its run directory.
    entry : dict
        Its entry of the record, updated in place.

    Returns
    -------
    bool
        Whether it finished.
    """
    try:
        resume = has_checkpoint(run_dir)
        summary = train(
            config,
            run_dir,
            resume=resume,
            force=not resume,
            progress=not args.no_progress,
            log=getattr(args, "log_target", None),
        )
    except Exception as err:  # one failing run must not stop the sweep
        entry["status"], entry["error"] = "failed", f"{type(err).__name__}: {err}"
        tqdm.write(f"{run_dir}: failed: {entry['error']}", file=sys.stderr)  # above the bars
        if not isinstance(err, (UsageError, RunFailure)):
            traceback.print_exc(file=sys.stderr)
        return False
    entry["status"], entry["error"] = "finished", None
    tqdm.write(f"{run_dir}: " + ", ".join(f"{k} {v:.4f}" for k, v in summary["final"].items()), file=sys.stdout)
    return True


def resume_command(args: argparse.Namespace) -> str:
    """This sweep's command line: run again, it skips finished runs and resumes the interrupted one.

    Parameters
    ----------
    args : argparse.Namespace
        The sweep command's arguments.

    Returns
    -------
    str
        Shell-quoted.
    """
    words = ["pdmm-bridge", "sweep", args.config, *(f"--grid={g}" for g in args.grid)]
    words += [*(["--seeds", args.seeds] if args.seeds else []), *(f"--set={s}" for s in args.overrides)]
    words += [*(["--data", args.data] if args.data else []), *(["--out", args.out] if args.out else [])]
    return shlex.join(words + (["--no-progress"] if args.no_progress else []))
