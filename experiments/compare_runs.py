"""What `pdmm-bridge compare` hands bridge.comparison.compare, which computes every row (docs/guide/bridge.md): the
checked arguments and the Setting, the train hook (each transformer row trained or resumed under OUT/runs/), the
cache of per-seed results (OUT/seeds/seed=S.json: a killed compare resumes there), one bar over every seed's
trainings and evaluation stages (docs/guide/runs.md, "Progress"), and compare.json's meta data.
"""

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from bridge.comparison import (
    CompareTable,
    RowsDiffer,
    SeedResult,
    Setting,
    Trained,
    equal_sent_rounds,
    evaluation_stages,
    protocol,
)

from . import rundir
from .checkpoints import best_weights, load_weights
from .compare_options import RowSpec, command_line
from .compare_report import MAX_ROUNDS, load
from .config import RunConfig, TrainConfig, load_config, to_tables
from .errors import UsageError, package_version
from .grid import check_names, parse_seeds, run_name
from .progress import job_bar
from .runs import read_json, read_metrics, read_summary
from .tasks import build_task
from .tasks.graph_consensus import graph_family
from .train import train
from .train_files import finished


def run_config(args: argparse.Namespace, overrides: list[str], seed: int) -> RunConfig:
    """The config of one transformer row for `seed`, its names checked (grid.check_names): a typo fails here,
    before anything is trained or written, as a UsageError naming the row's overrides."""
    try:
        config = load_config(args.config, [*args.overrides, *overrides, f"train.seed={seed}"])
        check_names(config)
        return config
    except UsageError as err:
        raise UsageError(f"{err} (in a compare row with {', '.join(overrides)})") from None


def row_widths(args: argparse.Namespace, rows: list[RowSpec]) -> dict[str, int]:
    """{row label: numbers it sends per edge and round}, read from an untrained model of its config."""
    widths = {}
    for label, _, overrides in rows:
        torch.manual_seed(0)
        widths[label] = build_task(run_config(args, overrides, 0)).build_model().numbers_sent
    return widths


def checked_base(args: argparse.Namespace) -> tuple[list[int], RunConfig, Any]:
    """(seeds, the config with --set applied, its graph_consensus task), every argument checked (a UsageError)
    before anything is trained or written."""
    if not args.config:
        raise UsageError("compare needs a graph_consensus config (or --from DIR to regenerate from a CSV)")
    seeds = parse_seeds(args.seeds)
    if min(args.test_graphs, args.tune_graphs, args.val_graphs) < 1 or min(args.learned_steps, args.finetune_steps) < 0:
        raise UsageError(
            "--test-graphs, --tune-graphs and --val-graphs must be >= 1, --learned-steps and --finetune-steps >= 0"
        )
    base = load_config(args.config, args.overrides)
    if base.task.name != "graph_consensus":
        raise UsageError(f"compare runs on task graph_consensus; {args.config} has task {base.task.name!r}")
    if not base.model.n_layer <= args.rounds <= MAX_ROUNDS:
        raise UsageError(
            f"--rounds ({args.rounds}) must be at least model.n_layer ({base.model.n_layer}) and at "
            f"most {MAX_ROUNDS} (every row keeps a number per round)"
        )
    return seeds, base, build_task(base)  # build_task validates the task options


def setting_of(args: argparse.Namespace, base: RunConfig, task: Any, widths: dict[str, int]) -> Setting:
    """The comparison's Setting: the task's graph family, depth model.n_layer, the counts of the arguments and the
    rounds at which the rows sending `widths` have sent as many numbers as the classical rows."""
    depth = base.model.n_layer
    return Setting(
        graph_family(task.options),
        depth,
        args.rounds,
        args.test_graphs,
        args.tune_graphs,
        base.train.batch_size,
        task.options.mu_scale,
        args.learned_steps,
        args.finetune_steps,
        checkpoints=equal_sent_rounds(widths.values(), depth, args.rounds),
        val_graphs=args.val_graphs,
    )


def seed_key(args: argparse.Namespace, setting: Setting, rows: list[RowSpec]) -> Any:
    """What a seed's saved result must have been computed under to be reused, as it reads back from OUT/seeds/:
    the setting, the protocol, the version and every row's config."""
    rows_of = {label: to_tables(run_config(args, overrides, 0)) for label, _, overrides in rows}
    key = {"setting": repr(setting), "protocol": protocol(), "version": package_version(), "rows": rows_of}
    return json.loads(json.dumps(key))


@dataclass(frozen=True)
class SeedFiles:
    """The cache of bridge.comparison.compare: OUT/seeds/seed=S.json, a seed's result reused when it was computed
    under `key`; a malformed file is a UsageError naming it."""

    directory: Path
    key: Any
    horizon: int

    def load(self, seed: int) -> SeedResult | None:
        path = self.directory / f"seed={seed}.json"
        saved = read_json(path)
        try:
            return None if saved is None else SeedResult.from_json(saved, self.key, self.horizon)
        except ValueError as err:
            raise UsageError(f"{path}: {err}; delete the file to recompute the seed") from None

    def save(self, seed: int, result: SeedResult) -> None:
        rundir.make_dir(self.directory)
        rundir.write_file(self.directory / f"seed={seed}.json", json.dumps(result.to_json(self.key)))

    def refusal(self, err: RowsDiffer) -> UsageError:
        """The error of two seed files with different rows (compare's RowsDiffer), naming them."""
        odd, first = err.seeds
        return UsageError(
            f"{self.directory}: seed={odd}.json and seed={first}.json hold different rows; delete the hand-edited "
            "one to recompute it"
        )


def trainer(
    args: argparse.Namespace, out: Path, rows: list[RowSpec], bar: tqdm, log: Any
) -> Callable[[str, int], Trained]:
    """The train hook of bridge.comparison.compare: train(label, seed) trains (or resumes) the row's run into
    OUT/runs/<run name> (`bar` advanced by a run trained now) and gives its model at the best weights, its budget
    and its evaluations. A run directory of another config, or not of graph_consensus, is a UsageError."""
    specs = {label: (assignment, overrides) for label, assignment, overrides in rows}

    def train_row(label: str, seed: int) -> Trained:
        assignment, overrides = specs[label]
        config = run_config(args, overrides, seed)
        run_dir = rundir.make_dir(out / "runs") / run_name(assignment, seed)
        if (run_dir / "config.toml").is_file() and load_config(rundir.inside(run_dir / "config.toml", out)) != config:
            raise UsageError(f"{run_dir} was trained with a different config; choose another --out")
        bar.set_description(f"seed {seed}: training {label}")
        if not finished(run_dir):
            resume = (run_dir / "ckpt.pt").is_file()
            train(config, run_dir, resume=resume, force=True, progress=not args.no_progress, log=log)
            bar.update(1)
        torch.manual_seed(0)
        model = build_task(config).build_model()
        load_weights(model, best_weights(run_dir))
        done = read_summary(run_dir / "summary.json")
        evaluations = [row for row in read_metrics(run_dir / "metrics.jsonl") if "val_loss" in row]
        if any(row.get("val_error") is None for row in evaluations):
            raise UsageError(
                f"{run_dir / 'metrics.jsonl'}: an evaluation row has no val_error; it is not a "
                "graph_consensus run (delete the run directory to train it again)"
            )
        budget = {key: done.get(key) for key in ("steps", "best_step", "wall_seconds", "stopped_by")}
        return Trained(model, budget, [{k: row[k] for k in ("step", "val_loss", "val_error")} for row in evaluations])

    return train_row


def compare_bar(args: argparse.Namespace, out: Path, seeds: list[int], rows: list[RowSpec], files: SeedFiles) -> tqdm:
    """The bar over the whole comparison (progress.job_bar), a step per row trained and per evaluation stage of
    every seed; a seed in `files` and a finished run count from the start (silent under --no-progress)."""
    per_seed = len(rows) + len(evaluation_stages(label for label, _, _ in rows))
    done = sum(
        per_seed
        if files.load(seed) is not None
        else sum(finished(out / "runs" / run_name(assignment, seed)) for _, assignment, _ in rows)
        for seed in seeds
    )
    return job_bar(len(seeds) * per_seed, done, "stage", not args.no_progress, f"seed {seeds[0]}")


def meta(args: argparse.Namespace, train: TrainConfig, setting: Setting, table: CompareTable) -> dict[str, Any]:
    """compare.json's meta data, as it reads back: version, command, seeds, rounds, depth, setting, the plateau
    rules and everything fitted per seed."""
    return json.loads(
        json.dumps(
            {
                "version": package_version(),
                "command": command_line(args, table.seeds),
                "seeds": table.seeds,
                "rounds": args.rounds,
                "depth": setting.depth,
                "setting": setting.summary(),
                "plateau rule": f"{training_rule(train)}. {setting.fit_rule()}",
                "fitted": {str(seed): fitted for seed, fitted in table.fitted.items()},
            }
        )
    )


def training_rule(train: TrainConfig) -> str:
    """The stopping rule of the trained transformer rows (the config's [train] table), in words."""
    if not train.patience:
        return f"transformers: {train.max_iters} steps (no plateau rule: train.patience = 0)"
    return (
        f"transformers: evaluated every {train.eval_interval} steps on the task's validation graphs; "
        f"stopped once {train.patience} evaluations in a row have not lowered the best "
        f"{train.plateau_metric or 'val_loss'} by more than {train.min_delta:g} of it, or at the cap of "
        f"{train.max_iters} steps; the weights of the best evaluation are compared"
    )


def load_source(source: str | Path) -> tuple[CompareTable, dict[str, Any], list[dict[str, Any]]]:
    """(table, meta, curves) that compare --from DIR regenerates its outputs from (compare_report.load); a DIR
    without seeds.csv and compare.json, or whose files do not read back, is a UsageError."""
    source = Path(source)
    if not (source / "seeds.csv").is_file() or not (source / "compare.json").is_file():
        raise UsageError(f"--from {source}: expected a directory with seeds.csv and compare.json")
    try:
        return load(source)
    except (ValueError, KeyError, json.JSONDecodeError) as err:
        raise UsageError(f"--from {source}: {err}") from None
