"""The per-seed results of `pdmm-bridge compare`: the seed's transformers trained (or resumed) under OUT/runs/, its
rows evaluated (bridge.comparison.evaluate_seed) and kept in OUT/seeds/seed=S.json, so that a killed compare
resumes there (docs/guide/bridge.md), under one bar over every seed's trainings and evaluation stages
(docs/guide/runs.md, "Progress").
"""

import argparse
import json
import math
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
from tqdm import tqdm

from bridge.comparison import TUNED, SeedResult, Setting, evaluate_seed

from . import rundir
from .checkpoints import best_weights, load_weights
from .compare_report import CURVE_COLUMNS, check_fitted
from .comparing import Row, run_config
from .config import load_config
from .errors import UsageError
from .grid import run_name
from .progress import job_bar, stages
from .runs import is_number, read_json, read_metrics, read_summary
from .tasks import build_task
from .train import train
from .train_files import finished


def evaluation_stages(rows: list[Row]) -> list[str]:
    """The stages bridge.comparison.evaluate_seed reports to its progress callback, in order, for a seed with
    these transformer rows: the oracles, the tuning of each classical method, the fastest-mixing weights, the
    polynomial filters, learned PDMM, the PDMM-transformers and each transformer row.

    Parameters
    ----------
    rows : list of (label, assignment, overrides)
        The transformer rows.

    Returns
    -------
    list of str
    """
    fixed = ["oracles", *(f"tuning {name}" for name in TUNED), "fastest-mixing weights", "polynomial filters"]
    return [*fixed, "learned pdmm", "pdmm-transformer", *(label for label, _, _ in rows)]


def compare_bar(args: argparse.Namespace, out: Path, seeds: list[int], rows: list[Row], key: Any) -> tqdm:
    """The bar over the whole comparison (progress.job_bar): for every seed, a step per transformer row trained
    and per evaluation stage (evaluation_stages). A seed saved under `key` and a finished training run count as
    done from the start, so a resumed compare's time left counts only what is left.

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments (no_progress).
    out : Path
        The output directory.
    seeds : list of int
        The seeds, in order.
    rows : list of (label, assignment, overrides)
        The transformer rows.
    key : dict
        What a saved seed must have been computed under (comparing.seed_key).

    Returns
    -------
    tqdm
        Silent under --no-progress.
    """
    per_seed = len(rows) + len(evaluation_stages(rows))
    done = sum(
        per_seed
        if saved_seed(out / "seeds" / f"seed={seed}.json", key) is not None
        else sum(finished(out / "runs" / run_name(assignment, seed)) for _, assignment, _ in rows)
        for seed in seeds
    )
    return job_bar(len(seeds) * per_seed, done, "stage", not args.no_progress, f"seed {seeds[0]}")


def trained_models(
    args: argparse.Namespace, out: Path, seed: int, rows: list[Row], bar: tqdm
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The seed's trained transformers, training (or resuming) the runs it needs into OUT/runs/, the `bar`
    advanced by each run trained now (a finished one counted from the start, compare_bar).

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments (config, overrides, no_progress).
    out : Path
        The output directory.
    seed : int
        The training seed.
    rows : list of (label, assignment, overrides)
        The transformer rows.
    bar : tqdm
        The comparison's bar (compare_bar).

    Returns
    -------
    models : dict
        {row label: the seed's trained GraphTransformer at its best weights}.
    budgets : dict
        {row label: steps, best_step, wall_seconds, stopped_by}.
    curves : list of dict
        Learning-curve rows (method, seed, step, val_loss, val_error).

    Raises
    ------
    UsageError
        When a run directory was trained with another config, or is not a graph_consensus run.
    """
    models, budgets, curves = {}, {}, []
    for label, assignment, overrides in rows:
        config = run_config(args, overrides, seed)
        run_dir = rundir.make_dir(out / "runs") / run_name(assignment, seed)
        if (run_dir / "config.toml").is_file() and load_config(rundir.inside(run_dir / "config.toml", out)) != config:
            raise UsageError(f"{run_dir} was trained with a different config; choose another --out")
        bar.set_description(f"seed {seed}: training {label}")
        if not finished(run_dir):
            train(
                config,
                run_dir,
                resume=(run_dir / "ckpt.pt").is_file(),
                force=True,
                progress=not args.no_progress,
                log=getattr(args, "log_target", None),
            )
            bar.update(1)
        torch.manual_seed(0)
        model = build_task(config).build_model()
        load_weights(model, best_weights(run_dir))
        models[label] = model
        done = read_summary(run_dir / "summary.json")
        budgets[label] = {key: done.get(key) for key in ("steps", "best_step", "wall_seconds", "stopped_by")}
        evaluations = [row for row in read_metrics(run_dir / "metrics.jsonl") if "val_loss" in row]
        if any(row.get("val_error") is None for row in evaluations):
            raise UsageError(
                f"{run_dir / 'metrics.jsonl'}: an evaluation row has no val_error; it is not a "
                "graph_consensus run (delete the run directory to train it again)"
            )
        curves += [
            {
                "method": label,
                "seed": seed,
                "step": row["step"],
                "val_loss": row["val_loss"],
                "val_error": row["val_error"],
            }
            for row in evaluations
        ]
    return models, budgets, curves


def seed_result(
    args: argparse.Namespace, out: Path, setting: Setting, seed: int, rows: list[Row], key: Any, bar: tqdm
) -> tuple[SeedResult, list[dict[str, Any]]]:
    """One seed of the comparison (bridge.comparison.evaluate_seed), read from OUT/seeds/seed=S.json when it was
    computed under the same `key` (counted in `bar` from the start), else computed and saved there, `bar`
    advanced by each run trained and each evaluation stage.

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments.
    out : Path
        The output directory.
    setting : Setting
        The comparison's setting.
    seed : int
        The seed.
    rows : list of (label, assignment, overrides)
        The transformer rows.
    key : dict
        What the result is computed under (comparing.seed_key).
    bar : tqdm
        The comparison's bar (compare_bar).

    Returns
    -------
    result : SeedResult
    curves : list of dict
        Its learning-curve rows.
    """
    path = out / "seeds" / f"seed={seed}.json"
    saved = saved_seed(path, key, setting.horizon)
    if saved is not None:
        return saved
    models, budgets, curves = trained_models(args, out, seed, rows, bar)
    begin, end = stages(bar, f"seed {seed}")
    result = evaluate_seed(setting, seed, models, begin, training=budgets)
    end()
    rundir.make_dir(path.parent)
    rundir.write_file(
        path,
        json.dumps(
            {
                "key": key,
                "fitted": result.fitted,
                "curves": curves,
                "log_errors": {
                    "\t".join(k): [None if math.isnan(x) else x for x in v] for k, v in result.log_errors.items()
                },
            }
        ),
    )
    result.fitted = json.loads(json.dumps(result.fitted))  # as read back: the same keys (strings) either way
    return result, curves


def saved_seed(path: Path, key: Any, horizon: int | None = None) -> tuple[SeedResult, Any] | None:
    """A seed's saved result, from seed file `path`, when it was computed under `key`.

    Parameters
    ----------
    path : Path
        OUT/seeds/seed=S.json.
    key : dict
        What the result must have been computed under.
    horizon : int or None
        The rounds each row must hold, None to leave unchecked.

    Returns
    -------
    (SeedResult, learning-curve rows) or None
        None when the file is absent or computed under another key.

    Raises
    ------
    UsageError
        For a malformed file (check_seed_file), or one of `key` whose rows do not hold one number per round of
        the `horizon`.
    """
    saved = read_json(path)
    if saved is None:
        return None
    check_seed_file(saved, path)
    if saved["key"] != key:
        return None
    if horizon is not None and any(len(values) != horizon for values in saved["log_errors"].values()):
        raise UsageError(
            f"{path}: log_errors rows must hold {horizon} numbers, one per round; delete the file to recompute the seed"
        )
    return SeedResult(
        {tuple(k.split("\t")): np.array(v, dtype=float) for k, v in saved["log_errors"].items()}, saved["fitted"]
    ), saved["curves"]


def check_seed_file(saved: Any, path: Path) -> None:
    """Check that a seed file has the shape seed_result writes: key, fitted (compare_report.check_fitted), curves
    (a list of learning-curve rows: CURVE_COLUMNS, method a string, seed and step integers, numbers) and
    log_errors (non-empty, {"method\tset": [number or null]}).

    Parameters
    ----------
    saved : object
        The file's JSON.
    path : Path
        The file, named in the error.

    Raises
    ------
    UsageError
        Naming the file and what is wrong.
    """

    def wrong(what: str) -> NoReturn:
        raise UsageError(f"{path}: {what}; delete the file to recompute the seed")

    if not isinstance(saved, dict) or not all(key in saved for key in ("key", "fitted", "curves", "log_errors")):
        wrong("expected an object with key, fitted, curves and log_errors")
    if not isinstance(saved["fitted"], dict) or not isinstance(saved["log_errors"], dict) or not saved["log_errors"]:
        wrong("fitted and log_errors must be objects, log_errors not empty")
    try:
        check_fitted(saved["fitted"], "fitted")
    except ValueError as err:
        wrong(str(err))
    if not (
        isinstance(saved["curves"], list)
        and all(
            isinstance(row, dict)
            and set(CURVE_COLUMNS) <= set(row)
            and isinstance(row["method"], str)
            and all(isinstance(row[k], int) and not isinstance(row[k], bool) for k in ("seed", "step"))
            and all(row[k] is None or is_number(row[k]) for k in ("val_loss", "val_error"))
            for row in saved["curves"]
        )
    ):
        wrong(f"curves must be a list of objects with {', '.join(CURVE_COLUMNS)}")
    for name, values in saved["log_errors"].items():
        if len(name.split("\t")) != 2:
            wrong(f"log_errors key {name!r} is not 'method<TAB>set'")
        if not (isinstance(values, list) and all(v is None or is_number(v) for v in values)):
            wrong(f"log_errors {name!r} must be a list of numbers (or null)")
