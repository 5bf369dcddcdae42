"""pdmm-bridge compare: transformers against the classical averaging methods round by round on graph_consensus.

    pdmm-bridge compare graph_consensus --out runs/compare
    pdmm-bridge compare --from docs/compare --out runs/again     # tables and figures from the per-seed CSV

For every seed: trains each --residuals variant (untied, depth K = model.n_layer), each --tied variant
(one block, trained at depth K) and, for each --widths w, the --width-residual variant limited to w
numbers per edge and round (model.send_width = w, one head, --width-residual standard) on the config's graph_consensus task
into OUT/runs/<...> until the config's plateau rule stops it (train.patience; finished runs are
reused, their best weights loaded), then runs bridge.compare on that seed's instances (bridge.comparison
lists the rows: oracles and the polynomial bound, PDMM, averaged PDMM, ADMM, gossip, Chebyshev and the
fitted polynomial filter tuned per round, the best classical row chosen on tuning data, learned PDMM,
the PDMM-transformer and the trained transformers), all from x_i^0 = a_i on the same held-out
instances. The classical rows also run to every round at which a transformer row has sent as many
numbers per edge as they have, for the verdicts at equal numbers sent. Each seed's numbers are kept
in OUT/seeds/ (a killed compare resumes there). Writes seeds.csv (every method, set, seed and round:
the mean log10 error and the numbers sent), curves.csv (learning curves), compare.csv (geometric
means over seeds with 95 % t intervals and the ratio to the best classical row), compare.json
(settings, everything tuned and fitted, training budgets, version), compare.md (a summary of who
wins, tables, paired verdicts at equal rounds and equal numbers sent), compare.png (at most seven
lines per panel), compare_all.png (every row) and learning.png.
"""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

from bridge.comparison import FROM_PDMM, CompareTable, SeedResult, Setting, evaluate_seed, numbers_sent, protocol
from bridge.fitting import MIN_DELTA, PATIENCE

from . import rundir
from .common import UsageError, package_version
from .compare_report import CURVE_COLUMNS, MAX_ROUNDS, check_fitted, load, summary, write_outputs
from .config import load_config, to_tables
from .grid import check_names, parse_seeds, run_name
from .results_doc import replace_section
from .runs import is_number, read_json, read_metrics, read_summary
from .tasks import build_task
from .tasks.graph_consensus import graph_family
from .train import best_weights, load_weights, train


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "compare",
        help="transformers vs classical averaging round by round on graph_consensus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", nargs="?", help="a graph_consensus config: a TOML file or a built-in name")
    parser.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="regenerate the tables and figures from DIR's seeds.csv, compare.json and curves.csv "
        "(a compare output directory, or docs/compare) without training",
    )
    parser.add_argument(
        "--residuals", default="standard,belief", help="residual variants of untied transformers (comma-separated)"
    )
    parser.add_argument(
        "--tied",
        default="standard",
        help="residual variants of tied transformers, run for every round (comma-separated; 'none' for none)",
    )
    parser.add_argument(
        "--widths",
        default="2,4,8",
        help="numbers per edge and round of the width-limited transformers (model.send_width, one "
        "head; comma-separated, 'none' for none)",
    )
    parser.add_argument(
        "--width-residual",
        default="standard",
        help="the residual variant of the width-limited rows (belief needs values >= 2 numbers wide, "
        "w >= 4: the part of a 1-number MH orthogonal to a 1-number V is 0)",
    )
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds: training seed and instance draw of each")
    parser.add_argument("--rounds", type=int, default=32, help="rounds compared (>= model.n_layer)")
    parser.add_argument("--test-graphs", type=int, default=8, help="held-out graphs per set and seed")
    parser.add_argument(
        "--tune-graphs", type=int, default=4, help="training-family graphs for tuning and fitting, per seed"
    )
    parser.add_argument(
        "--learned-steps",
        type=int,
        default=2000,
        help="cap on the Adam steps of learned PDMM (it stops earlier when its validation loss plateaus)",
    )
    parser.add_argument(
        "--finetune-steps",
        type=int,
        default=2000,
        help="the same cap for the PDMM-transformers (each depth stage of the tied one)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="TABLE.KEY=VALUE",
        help="override a config key (repeatable)",
    )
    parser.add_argument("--out", default="runs/compare", help="output directory (a compare directory is resumed)")
    parser.add_argument(
        "--results",
        help="also write compare.md as section 'compare' of this Markdown file (figures to figures/ beside it)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty --out that compare did not make; replace a --results section made from more seeds",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars or progress lines")
    return parser


def variants(text, flag):
    names = [r.strip() for r in text.split(",") if r.strip() and r.strip() != "none"]
    if len(set(names)) != len(names):
        raise UsageError(f"{flag} lists a variant twice: {text!r}")
    return names


def widths(text):
    try:
        values = [int(w) for w in variants(text, "--widths")]
    except ValueError:
        raise UsageError(f"--widths expects integers >= 2 separated by commas, got {text!r}") from None
    if any(w < 2 for w in values):
        raise UsageError(f"--widths expects integers >= 2 (a key and a value), got {text!r}")
    return values


def row_variants(args):
    """[(row label, run-name assignment, config overrides)] of every transformer row."""
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


def run_config(args, overrides, seed):
    """The config of one transformer row, its names checked (grid.check_names): a typo in --residuals
    fails here, before anything is trained or written."""
    try:
        config = load_config(args.config, [*args.overrides, *overrides, f"train.seed={seed}"])
        check_names(config)
        return config
    except UsageError as err:
        raise UsageError(f"{err} (in a compare row with {', '.join(overrides)})") from None


def trained_models(args, out, seed, rows):
    """({row label: the seed's trained GraphTransformer at its best weights}, {label: training budget},
    learning-curve rows), training (or resuming) the runs it needs."""
    models, budgets, curves = {}, {}, []
    for label, assignment, overrides in rows:
        config = run_config(args, overrides, seed)
        run_dir = rundir.make_dir(out / "runs") / run_name(assignment, seed)
        if (run_dir / "config.toml").is_file() and load_config(rundir.inside(run_dir / "config.toml", out)) != config:
            raise UsageError(f"{run_dir} was trained with a different config; choose another --out")
        if not (run_dir / "summary.json").is_file():
            train(config, run_dir, resume=(run_dir / "ckpt.pt").is_file(), force=True, progress=not args.no_progress)
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


def seed_result(args, out, setting, seed, rows, key):
    """(the seed's SeedResult, its learning-curve rows), read from OUT/seeds/seed=S.json when it was computed
    under the same `key`."""
    path = out / "seeds" / f"seed={seed}.json"
    saved = saved_seed(path, key, setting.horizon)
    if saved is not None:
        return saved
    models, budgets, curves = trained_models(args, out, seed, rows)
    show = (lambda text: None) if args.no_progress else (lambda text: print(f"seed {seed}: {text}", flush=True))
    result = evaluate_seed(setting, seed, models, show, training=budgets)
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


def saved_seed(path, key, horizon=None):
    """(SeedResult, learning-curve rows) from seed file `path` when it was computed under `key`, else None;
    a malformed file is a UsageError (check_seed_file), and so is one of `key` whose rows do not hold one
    number per round of the `horizon`."""
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


def check_seed_file(saved, path):
    """UsageError naming OUT/seeds/seed=S.json and what is wrong unless it has the shape seed_result writes:
    key, fitted (compare_report.check_fitted), curves (a list of learning-curve rows: CURVE_COLUMNS, method a
    string, seed and step integers, numbers) and log_errors (non-empty, {"method\tset": [number or null]})."""

    def wrong(what):
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


def untrained_models(args, rows):
    """{row label: an untrained model of its config}: what each transformer row sends per edge and round."""
    models = {}
    for label, _, overrides in rows:
        torch.manual_seed(0)
        models[label] = build_task(run_config(args, overrides, 0)).build_model()
    return models


def checkpoints(models, depth, rounds):
    """The rounds past 1..R at which the classical rows run: w r for every row sending w numbers per edge and
    round (the trained rows and the PDMM-transformer), at its rounds 1 and K."""
    sent = {numbers_sent(FROM_PDMM)} | {model.numbers_sent for model in models.values()}
    return tuple(sorted({w * r for w in sent for r in (1, depth)} - set(range(1, rounds + 1))))


def run(args):
    if args.source:
        return regenerate(args)
    if not args.config:
        raise UsageError("compare needs a graph_consensus config (or --from DIR to regenerate from a CSV)")
    seeds = parse_seeds(args.seeds)
    if min(args.test_graphs, args.tune_graphs) < 1 or min(args.learned_steps, args.finetune_steps) < 0:
        raise UsageError("--test-graphs and --tune-graphs must be >= 1, --learned-steps and --finetune-steps >= 0")
    base = load_config(args.config, args.overrides)
    if base.task.name != "graph_consensus":
        raise UsageError(f"compare runs on task graph_consensus; {args.config} has task {base.task.name!r}")
    if not base.model.n_layer <= args.rounds <= MAX_ROUNDS:
        raise UsageError(
            f"--rounds ({args.rounds}) must be at least model.n_layer ({base.model.n_layer}) and at "
            f"most {MAX_ROUNDS} (every row keeps a number per round)"
        )
    task = build_task(base)  # validates the task options
    rows = row_variants(args)
    models = untrained_models(args, rows)
    depth = base.model.n_layer
    setting = Setting(
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
    )
    out = rundir.claim(args.out, "compare", args.force, reusable=True)
    command = " ".join(
        [
            "pdmm-bridge compare",
            str(args.config),
            "--residuals",
            args.residuals,
            "--tied",
            args.tied,
            "--widths",
            args.widths,
            "--seeds",
            ",".join(map(str, seeds)),
            "--rounds",
            str(args.rounds),
            *(f"--set {o}" for o in args.overrides),
        ]
    )
    key = json.loads(
        json.dumps(
            {  # as it reads back from OUT/seeds/*.json
                "setting": repr(setting),
                "protocol": protocol(),
                "version": package_version(),
                "rows": {label: to_tables(run_config(args, overrides, 0)) for label, _, overrides in rows},
            }
        )
    )
    for seed in seeds:  # every saved seed file is checked before anything trains
        saved_seed(out / "seeds" / f"seed={seed}.json", key)
    try:
        done = {seed: seed_result(args, out, setting, seed, rows, key) for seed in seeds}
    except KeyboardInterrupt:
        print(
            f"pdmm-bridge compare: interrupted; finished seeds are kept in {out / 'seeds'} and trained runs in "
            f"{out / 'runs'}: run the same command again to resume",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    results = {seed: result for seed, (result, _) in done.items()}
    rows_of = {seed: set(result.log_errors) for seed, result in results.items()}
    odd = next((seed for seed in seeds if rows_of[seed] != rows_of[seeds[0]]), None)
    if odd is not None:
        raise UsageError(
            f"{out / 'seeds'}: seed={odd}.json and seed={seeds[0]}.json hold different rows; delete the "
            "hand-edited one to recompute it"
        )
    sent = {label: numbers_sent(label, models.get(label)) for label, _ in results[seeds[0]].log_errors}
    table = CompareTable.from_seeds(setting, results, sent)
    train_cfg = base.train
    meta = {
        "version": package_version(),
        "command": command,
        "seeds": seeds,
        "rounds": args.rounds,
        "depth": depth,
        "setting": {
            "family": describe(setting.family),
            "test_graphs": setting.test_graphs,
            "tune_graphs": setting.tune_graphs,
            "val_graphs": setting.val_graphs,
            "batch": setting.batch,
            "checkpoints": list(setting.checkpoints),
            "repr": repr(setting),
        },
        "plateau rule": plateau_rule(train_cfg, setting),
        "fitted": {str(seed): result.fitted for seed, result in results.items()},
    }
    curves = [row for _, (_, rows_) in done.items() for row in rows_]
    return publish(args, out, table, json.loads(json.dumps(meta)), curves)


def regenerate(args):
    """compare --from DIR: the outputs from DIR's per-seed CSV and meta data, nothing trained or run."""
    source = Path(args.source)
    if not (source / "seeds.csv").is_file() or not (source / "compare.json").is_file():
        raise UsageError(f"--from {source}: expected a directory with seeds.csv and compare.json")
    try:
        table, meta, curves = load(source)
    except (ValueError, KeyError, json.JSONDecodeError) as err:
        raise UsageError(f"--from {source}: {err}") from None
    out = rundir.claim(args.out, "compare", args.force, reusable=True)
    return publish(args, out, table, meta, curves)


def publish(args, out, table, meta, curves):
    """Write every output, the summary to stdout and, with --results, the section of that file."""
    text = write_outputs(out, table, meta, curves)
    if args.results:
        figures = rundir.make_dir(Path(args.results).parent / "figures")
        for name in ("compare.png", "compare_all.png", "learning.png"):
            if (out / name).is_file():
                rundir.copy_file(out / name, figures / name)
        replace_section(
            args.results,
            "compare",
            text.replace("](compare", "](figures/compare").replace("](learning", "](figures/learning"),
            scale={"seeds": len(table.seeds), "rounds": table.rounds},
            force=args.force,
        )
    print("\n".join(summary(table)))
    print(out / "compare.md")
    return 0


def describe(family):
    return f"{family.topology} graphs with n {family.n_min}-{family.n_max}" + (
        f", radius {family.radius:g}" if family.radius else ""
    )


def plateau_rule(train, setting):
    """The stopping rules of the trained rows, in words."""
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
