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
at the end if any failed); a failure stays on record until its run is retried. OUT is refused when it
is not empty and holds no sweep, unless --force.

Before the first run every grid value and variant is checked on its own: the config it gives
loads (known keys, types, ranges), the task and its options exist, and model.residual and
model.kernel are known names; then every run's config is resolved, its task options checked and its
memory estimated (experiments/tasks check_config), so `--grid model.n_layer=2,1000000` and `--grid
task.op=+,x` fail before the first run. Values
that fail only together (3 heads on 16 dimensions) fail their runs. Ctrl-C stops the current run
after its step with a checkpoint, prints the command that resumes the sweep (the same one) and
exits with status 130.
"""

import sys
from pathlib import Path

from . import log_sinks, rundir
from .config import load_plan


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
    log_sinks.add_argument(parser)
    return parser


def run(args):
    from . import sweeping  # torch and matplotlib: imported only to run (sweep --help answers at once)
    from .claims import checked_spec
    from .runs import read_sweep
    from .train import Interrupted
    from .world import World

    World.current()  # a sweep runs as one process: refused under torchrun before anything is written
    spec = sweeping.sweep_spec(args)
    sweeping.check_values(args, spec)
    runs = sweeping.plan(args, spec)
    out = Path(args.out or Path("runs") / f"{Path(args.config).stem}-sweep")
    args.log_target = log_sinks.target(args.log, out)
    report = checked_spec(load_plan(args.config)["report"], args.config)  # a bad [report] fails now, not after the runs
    record = sweeping.new_record(args, spec, runs, report)
    rundir.refuse_link(out)
    sweeping.keep_previous(record, read_sweep(out), runs, args, out)
    rundir.claim(out, "sweep", args.force, reusable=True, writes=("sweep.json",))  # locked until the command ends
    for entry in runs:  # a member that is a link would put a whole run outside OUT
        rundir.refuse_link(out / entry["name"])
    sweeping.write_sweep(record, out)
    try:
        failed = sweeping.run_all(args, runs, record, out)
    except KeyboardInterrupt as err:  # Interrupted too
        sweeping.write_sweep(record, out)
        where = f" in {err.out.name} at step {err.step}, checkpoint saved" if isinstance(err, Interrupted) else ""
        print(
            f"pdmm-bridge sweep: interrupted (Ctrl-C){where}; resume with the same command: "
            f"{sweeping.resume_command(args)}",
            file=sys.stderr,
        )
        return 130
    print(f"{out}: {len(runs) - failed} of {len(runs)} runs finished" + (f", {failed} failed" if failed else ""))
    return 1 if failed else 0
