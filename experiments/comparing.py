"""The comparison `pdmm-bridge compare` runs, from its command-line choices: the transformer rows and their configs,
the setting, the key its per-seed results are kept under, and the table and meta data of the finished seeds
(bridge.comparison computes the rows; docs/guide/bridge.md).
"""

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from bridge.comparison import FROM_PDMM, CompareTable, SeedResult, Setting, numbers_sent, protocol
from bridge.fitting import MIN_DELTA, PATIENCE

from .compare_options import command_line
from .compare_report import MAX_ROUNDS, load
from .config import RunConfig, load_config, to_tables
from .errors import UsageError, package_version
from .grid import check_names, parse_seeds
from .tasks import build_task
from .tasks.graph_consensus import graph_family

Row = tuple[str, dict[str, Any], list[str]]  # (row label, run-name assignment, config overrides)


def variants(text: str, flag: str) -> list[str]:
    """The variant names of a comma-separated flag ("standard,belief"; "none" for none).

    Parameters
    ----------
    text : str
        The flag's value.
    flag : str
        The flag, for the error.

    Returns
    -------
    list of str

    Raises
    ------
    UsageError
        When a name repeats.
    """
    names = [r.strip() for r in text.split(",") if r.strip() and r.strip() != "none"]
    if len(set(names)) != len(names):
        raise UsageError(f"{flag} lists a variant twice: {text!r}")
    return names


def widths(text: str) -> list[int]:
    """The widths of --widths: integers >= 2 (a key and a value), comma-separated, "none" for none.

    Parameters
    ----------
    text : str
        The flag's value.

    Returns
    -------
    list of int

    Raises
    ------
    UsageError
        For a value that is not an integer >= 2, or a repeated one.
    """
    try:
        values = [int(w) for w in variants(text, "--widths")]
    except ValueError:
        raise UsageError(f"--widths expects integers >= 2 separated by commas, got {text!r}") from None
    if any(w < 2 for w in values):
        raise UsageError(f"--widths expects integers >= 2 (a key and a value), got {text!r}")
    return values


def row_variants(args: argparse.Namespace) -> list[tuple[str, dict[str, Any], list[str]]]:
    """The transformer rows: untied (--residuals), tied (--tied) and width-limited (--widths).

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments (residuals, tied, widths, width_residual).

    Returns
    -------
    list of (row label, run-name assignment, config overrides)

    Raises
    ------
    UsageError
        For a repeated variant or a bad width.
    """
    out = []
    for residual in variants(args.residuals, "--residuals"):
        out.append(
            (
                f"transformer ({residual})",
                {"model.residual": residual, "task.tied": False},
                [f"model.residual={residual}", "task.tied=false"],
            )
        )
    for residual in variants(args.tied, "--tied"):
        out.append(
            (
                f"tied transformer ({residual})",
                {"model.residual": residual, "task.tied": True},
                [f"model.residual={residual}", "task.tied=true"],
            )
        )
    for w in widths(args.widths):
        residual = args.width_residual
        out.append(
            (
                f"transformer ({residual}, w={w})",
                {"model.residual": residual, "task.tied": False, "width": w},
                [f"model.residual={residual}", "task.tied=false", f"model.send_width={w}", "model.n_head=1"],
            )
        )
    return out


def run_config(args: argparse.Namespace, overrides: list[str], seed: int) -> RunConfig:
    """The config of one transformer row, its names checked (grid.check_names): a typo in --residuals
    fails here, before anything is trained or written.

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments (config, overrides).
    overrides : list of str
        The row's config overrides.
    seed : int
        The training seed.

    Returns
    -------
    RunConfig

    Raises
    ------
    UsageError
        When the config does not load, naming the row's overrides.
    """
    try:
        config = load_config(args.config, [*args.overrides, *overrides, f"train.seed={seed}"])
        check_names(config)
        return config
    except UsageError as err:
        raise UsageError(f"{err} (in a compare row with {', '.join(overrides)})") from None


def untrained_models(args: argparse.Namespace, rows: list[tuple[str, dict[str, Any], list[str]]]) -> dict[str, Any]:
    """An untrained model of each row's config: what each transformer row sends per edge and round.

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments.
    rows : list of (label, assignment, overrides)
        The transformer rows (row_variants).

    Returns
    -------
    dict
        {row label: GraphTransformer}, each built after torch.manual_seed(0).
    """
    models = {}
    for label, _, overrides in rows:
        torch.manual_seed(0)
        models[label] = build_task(run_config(args, overrides, 0)).build_model()
    return models


def checkpoints(models: dict[str, Any], depth: int, rounds: int) -> tuple[int, ...]:
    """The rounds past 1..R at which the classical rows run: w r for every row sending w numbers per edge and
    round (the trained rows and the PDMM-transformer), at its rounds 1 and K (docs/guide/bridge.md).

    Parameters
    ----------
    models : dict
        {row label: model}, each with numbers_sent.
    depth : int
        K, the transformers' depth.
    rounds : int
        R, the rounds compared.

    Returns
    -------
    tuple of int
        Sorted.
    """
    sent = {numbers_sent(FROM_PDMM)} | {model.numbers_sent for model in models.values()}
    return tuple(sorted({w * r for w in sent for r in (1, depth)} - set(range(1, rounds + 1))))


def checked_base(args: argparse.Namespace) -> tuple[list[int], RunConfig, Any]:
    """The seeds, the base config and its task, every argument checked before anything is trained or written.

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments.

    Returns
    -------
    seeds : list of int
    base : RunConfig
        The config with --set applied.
    task : Task
        Its graph_consensus task (its options validated).

    Raises
    ------
    UsageError
        For a missing config, a task other than graph_consensus, or counts and rounds out of range.
    """
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


def setting_of(args: argparse.Namespace, base: RunConfig, task: Any, models: dict[str, Any]) -> Setting:
    """The comparison's setting: graph family, depth, rounds, instance counts, training caps and checkpoints.

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments.
    base : RunConfig
        The base config.
    task : Task
        Its task.
    models : dict
        {row label: untrained model} (untrained_models).

    Returns
    -------
    Setting
    """
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
        checkpoints=checkpoints(models, depth, args.rounds),
        val_graphs=args.val_graphs,
    )


def seed_key(args: argparse.Namespace, setting: Setting, rows: list[Row]) -> Any:
    """What a seed's saved result must have been computed under to be reused: the setting, the protocol, the
    version and every row's config, as it reads back from OUT/seeds/*.json.

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments.
    setting : Setting
        The comparison's setting.
    rows : list of (label, assignment, overrides)
        The transformer rows.

    Returns
    -------
    dict
    """
    return json.loads(
        json.dumps(
            {  # as it reads back from OUT/seeds/*.json
                "setting": repr(setting),
                "protocol": protocol(),
                "version": package_version(),
                "rows": {label: to_tables(run_config(args, overrides, 0)) for label, _, overrides in rows},
            }
        )
    )


def tabulate(
    args: argparse.Namespace,
    out: Any,
    base: RunConfig,
    setting: Setting,
    seeds: list[int],
    done: dict[int, tuple[SeedResult, list[dict[str, Any]]]],
    models: dict[str, Any],
) -> tuple[CompareTable, dict[str, Any], list[dict[str, Any]]]:
    """The table over the seeds (CompareTable.from_seeds), compare.json's meta data and the learning curves.

    Parameters
    ----------
    args : argparse.Namespace
        The compare command's arguments.
    out : Path
        The output directory (named in the error).
    base : RunConfig
        The base config.
    setting : Setting
        The comparison's setting.
    seeds : list of int
        The seeds, in order.
    done : dict
        {seed: (SeedResult, its learning-curve rows)} (compare_seeds.seed_result).
    models : dict
        {row label: model}, for what each row sends.

    Returns
    -------
    table : CompareTable
    meta : dict
        As it reads back from compare.json.
    curves : list of dict
        Every seed's learning-curve rows.

    Raises
    ------
    UsageError
        When two seeds hold different rows (a hand-edited seed file).
    """
    results = {seed: result for seed, (result, _) in done.items()}
    rows_of = {seed: set(result.log_errors) for seed, result in results.items()}
    odd = next((seed for seed in seeds if rows_of[seed] != rows_of[seeds[0]]), None)
    if odd is not None:
        raise UsageError(
            f"{out / 'seeds'}: seed={odd}.json and seed={seeds[0]}.json hold different rows; delete the "
            "hand-edited one to recompute it"
        )
    sent = {label: numbers_sent(label, models) for label, _ in results[seeds[0]].log_errors}
    table = CompareTable.from_seeds(setting, results, sent)
    meta = {
        "version": package_version(),
        "command": command_line(args, seeds),
        "seeds": seeds,
        "rounds": args.rounds,
        "depth": setting.depth,
        "setting": {
            "family": describe(setting.family),
            "test_graphs": setting.test_graphs,
            "tune_graphs": setting.tune_graphs,
            "val_graphs": setting.val_graphs,
            "batch": setting.batch,
            "checkpoints": list(setting.checkpoints),
            "repr": repr(setting),
        },
        "plateau rule": plateau_rule(base.train, setting),
        "fitted": {str(seed): result.fitted for seed, result in results.items()},
    }
    return table, json.loads(json.dumps(meta)), [row for _, (_, rows) in done.items() for row in rows]


def describe(family: Any) -> str:
    """The graph family in words: "random_geometric graphs with n 16-32, radius 0.35".

    Parameters
    ----------
    family : GraphFamily
        The task's graph family.

    Returns
    -------
    str
    """
    return f"{family.topology} graphs with n {family.n_min}-{family.n_max}" + (
        f", radius {family.radius:g}" if family.radius else ""
    )


def plateau_rule(train: Any, setting: Setting) -> str:
    """The stopping rules of the trained rows, in words.

    Parameters
    ----------
    train : TrainConfig
        The config's [train] table.
    setting : Setting
        The comparison's setting.

    Returns
    -------
    str
    """
    transformers = (
        f"transformers: evaluated every {train.eval_interval} steps on the task's validation graphs; "
        f"stopped once {train.patience} evaluations in a row have not lowered the best "
        f"{train.plateau_metric or 'val_loss'} by more than {train.min_delta:g} of it, or at the cap of "
        f"{train.max_iters} steps; the weights of the best evaluation are compared"
        if train.patience
        else f"transformers: {train.max_iters} steps (no plateau rule: train.patience = 0)"
    )
    return (
        transformers + f". Learned PDMM and the PDMM-transformer: full-batch Adam on the tuning instances, "
        f"stopped once {PATIENCE} steps in a row have not lowered the best validation loss ({setting.val_graphs} "
        f"further training-family graphs) by more than {MIN_DELTA:g} of it, or at the cap of "
        f"{setting.learned_steps} / {setting.finetune_steps} steps; the parameters of the best validation loss "
        "are compared."
    )


def load_source(source: str | Path) -> tuple[CompareTable, dict[str, Any], list[dict[str, Any]]]:
    """What compare --from DIR regenerates its outputs from: DIR's per-seed CSV, meta data and learning curves
    (compare_report.load), nothing trained or run.

    Parameters
    ----------
    source : str or Path
        A compare output directory, or docs/compare.

    Returns
    -------
    table : CompareTable
    meta : dict
    curves : list of dict

    Raises
    ------
    UsageError
        When DIR lacks seeds.csv or compare.json, or they do not read back.
    """
    source = Path(source)
    if not (source / "seeds.csv").is_file() or not (source / "compare.json").is_file():
        raise UsageError(f"--from {source}: expected a directory with seeds.csv and compare.json")
    try:
        return load(source)
    except (ValueError, KeyError, json.JSONDecodeError) as err:
        raise UsageError(f"--from {source}: {err}") from None
