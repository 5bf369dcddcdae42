"""pdmm-bridge sweep: one config over a grid of overrides and several seeds, run one after another.

    pdmm-bridge sweep experiments/configs/shakespeare_char_cpu.toml \\
        --grid model.residual=standard,attentionx,belief,belief_star --seeds 0,1,2 --out runs/residuals

    pdmm-bridge sweep experiments/configs/repro/attentionx_digits.toml --out runs/repro/attentionx_digits

Without --grid and --seeds the config's own [sweep] table says what to run:

    [sweep]
    seeds = [0, 1, 2]
    grid = { "model.residual" = ["standard", "attentionx"] }          # product of the axes
    [[sweep.variants]]                                               # optional: override sets,
    "train.block_size" = 64                                          # each crossed with the grid
    "train.batch_size" = 16
    [[sweep.variants]]
    "train.block_size" = 256
    "train.batch_size" = 4

--grid replaces the table's grid and variants, --seeds its seeds. Precedence, last wins: the
config file, a variant's values, --set, the grid point, the seed. The config's [report] table is
copied into sweep.json for `pdmm-bridge report`.
Each run goes to OUT/<key=value,...,seed=S>/ (a run directory as `train` writes it); OUT/sweep.json
lists the runs and their status (written atomically after each run). Finished runs are skipped,
runs with a checkpoint resume, and a failing run is recorded and the sweep goes on (exit status 1
at the end if any failed); a failure stays on record until its run is retried. OUT is refused when it is not empty and holds no sweep, unless --force.

Before the first run every grid value and variant is checked on its own: the config it gives
loads (known keys, types, ranges), the task and its options exist, and model.residual and
model.kernel are known names; then every run's config is resolved and its memory estimated
(experiments/memory.py), so `--grid model.n_layer=2,1000000` fails before the first run. Values
that fail only together (3 heads on 16 dimensions) fail their runs. Ctrl-C stops the current run
after its step with a checkpoint, prints the command that resumes the sweep (the same one) and
exits with status 130.
"""

import dataclasses
import itertools
import json
import shlex
import sys
import traceback
from pathlib import Path

from . import rundir
from .claims import checked_spec
from .common import RunFailure, UsageError
from .config import TABLES, apply_override, load_config, load_plan, overrides_with_data, toml_value
from .grid import check_names, parse_seeds, run_name
from .memory import check_memory
from .runs import read_sweep
from .train import Interrupted, has_checkpoint, train
from .world import World


def grid_axis(text):
    """ "model.residual=standard,belief" -> ("model.residual", ["standard", "belief"]), values as TOML reads them."""
    key, sep, values = text.partition("=")
    key, values = key.strip(), [v.strip() for v in values.split(",") if v.strip()]
    if not (sep and "." in key and values):
        raise UsageError(f"--grid expects table.key=value1,value2,..., got {text!r}")
    if key == "train.seed":
        raise UsageError("sweep seeds with --seeds, not --grid train.seed=...")
    return key, [parsed_value(key, value) for value in values]


def parsed_value(key, text):
    """The value `--set key=text` would give."""
    tables = {}
    apply_override(tables, f"{key}={text}")
    table, _, name = key.partition(".")
    return tables[table][name]


def add_parser(subparsers):
    parser = subparsers.add_parser("sweep", help="train a grid of variants x seeds", description=__doc__.split("\n")[0])
    parser.add_argument(
        "config",
        help="a built-in config name (`pdmm-bridge configs` lists them) or a TOML file "
        "with [task], [model] and [train] tables",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="TABLE.KEY=V1,V2,...",
        help="values to sweep (repeatable: the grid is their product)",
    )
    parser.add_argument("--seeds", help="comma-separated seeds; the config's [sweep] seeds when not given, else 0")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="TABLE.KEY=VALUE",
        help="override one config value for every run (repeatable)",
    )
    parser.add_argument("--data", help="the text file for char_lm (same as --set task.data=FILE)")
    parser.add_argument("--out", help="sweep directory; runs/<config name>-sweep when not given")
    parser.add_argument("--force", action="store_true", help="write into a non-empty --out that holds no sweep")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def sweep_spec(args):
    """(grid {key: values}, variants [{key: value}], seeds): the command line's, else the config's [sweep]."""
    table = load_plan(args.config)["sweep"]
    unknown = set(table) - {"grid", "variants", "seeds"}
    if unknown:
        raise UsageError(
            f"{args.config}: unknown key(s) {', '.join(sorted(unknown))} in [sweep]; "
            "it accepts grid, variants and seeds"
        )
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


def check_values(args, spec):
    """UsageError naming the first grid value or variant that gives an invalid config on its own."""
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


def known_key(key):
    """UsageError unless `key` is table.key of [model] or [train], or of [task] (whose options its task checks)."""
    table, _, name = key.partition(".")
    if table not in TABLES:
        raise UsageError(f"unknown table {table!r}; expected {', '.join(TABLES)}")
    fields = [f.name for f in dataclasses.fields(TABLES[table]) if f.name != "options"]
    if table != "task" and name not in fields:
        raise UsageError(f"unknown key {key}; [{table}] accepts {', '.join(fields)}")


def plan(args, spec):
    """[(name, overrides, seed)] for every variant, grid point and seed of spec = sweep_spec(args), after
    checking each resolves and fits in memory (memory.check_memory): an absurd grid point fails the sweep
    before its first run, not after the runs before it."""
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
                check_memory(load_config(args.config, overrides))  # a bad or absurd value fails here, before any run
            except UsageError as err:
                raise UsageError(f"run {name}: {err}") from None
            runs.append({"name": name, "overrides": assignment, "seed": seed, "set": overrides})
    return runs


def write_sweep(record, out):
    """sweep.json, written atomically: a sweep killed at any moment leaves the previous record whole."""
    rundir.write_file(out / "sweep.json", json.dumps(record, indent=2) + "\n")


def run(args):
    World.current()  # a sweep runs as one process: refused under torchrun before anything is written
    grid, variants, run_seeds = spec = sweep_spec(args)
    check_values(args, spec)
    runs = plan(args, spec)
    out = Path(args.out or Path("runs") / f"{Path(args.config).stem}-sweep")
    report = checked_spec(load_plan(args.config)["report"], args.config)  # a bad [report] fails now, not after the runs
    record = {
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
    rundir.refuse_link(out)
    previous = read_sweep(out)
    if previous is not None:
        same = [r["name"] for r in previous["runs"]] == [r["name"] for r in runs] and previous.get(
            "set"
        ) == overrides_with_data(args.overrides, args.data)
        if not same:
            raise UsageError(f"{out} holds a different sweep; choose another --out")
        record["runs"] = previous["runs"]  # keep earlier failures on record until their run is retried
    # a sweep.json written before directories were marked is this command's own work too
    rundir.claim(out, "sweep", force=args.force or (out / "sweep.json").is_file(), reusable=True)
    for entry in runs:  # a member that is a link would put a whole run outside OUT
        rundir.refuse_link(out / entry["name"])
    write_sweep(record, out)
    try:
        failed = run_all(args, runs, record, out)
    except KeyboardInterrupt as err:  # Interrupted too
        write_sweep(record, out)
        where = f" in {err.out.name} at step {err.step}, checkpoint saved" if isinstance(err, Interrupted) else ""
        print(
            f"pdmm-bridge sweep: interrupted (Ctrl-C){where}; resume with the same command: {resume_command(args)}",
            file=sys.stderr,
        )
        return 130
    print(f"{out}: {len(runs) - failed} of {len(runs)} runs finished" + (f", {failed} failed" if failed else ""))
    return 1 if failed else 0


def run_all(args, runs, record, out):
    """Train every planned run in turn, recording each in sweep.json (skipped ones too); returns how many failed."""
    failed = 0
    for plan_entry, entry in zip(runs, record["runs"], strict=False):
        run_dir = out / plan_entry["name"]
        config = load_config(args.config, plan_entry["set"])
        if (run_dir / "config.toml").is_file() and load_config(rundir.inside(run_dir / "config.toml", out)) != config:
            raise UsageError(
                f"{run_dir} was run with a different config than {args.config} now gives; choose another --out"
            )
        if (run_dir / "summary.json").is_file():
            entry["status"], entry["error"] = "finished", None
            print(f"{run_dir}: finished earlier, skipped")
        else:
            failed += not train_entry(args, config, run_dir, entry)
        write_sweep(record, out)
    return failed


def train_entry(args, config, run_dir, entry):
    """Train (or resume) one run of the sweep, noting its status in `entry`; returns whether it finished."""
    try:
        resume = has_checkpoint(run_dir)
        summary = train(config, run_dir, resume=resume, force=not resume, progress=not args.no_progress)
    except Exception as err:  # one failing run must not stop the sweep
        entry["status"], entry["error"] = "failed", f"{type(err).__name__}: {err}"
        print(f"{run_dir}: failed: {entry['error']}", file=sys.stderr)
        if not isinstance(err, (UsageError, RunFailure)):
            traceback.print_exc(file=sys.stderr)
        return False
    entry["status"], entry["error"] = "finished", None
    print(f"{run_dir}: " + ", ".join(f"{k} {v:.4f}" for k, v in summary["final"].items()))
    return True


def resume_command(args):
    """This sweep's command line: run again, it skips finished runs and resumes the interrupted one."""
    words = ["pdmm-bridge", "sweep", args.config, *(f"--grid={g}" for g in args.grid)]
    words += [*(["--seeds", args.seeds] if args.seeds else []), *(f"--set={s}" for s in args.overrides)]
    words += [*(["--data", args.data] if args.data else []), *(["--out", args.out] if args.out else [])]
    return shlex.join(words + (["--no-progress"] if args.no_progress else []))
