"""pdmm-bridge train: train one attention model on one task from a TOML config.

    pdmm-bridge train experiments/configs/shakespeare_char_cpu.toml --set model.residual=belief --out runs/belief
    pdmm-bridge train experiments/configs/shakespeare_char_cpu.toml --out runs/belief --resume
    pdmm-bridge train experiments/configs/shakespeare_char_cpu.toml --out runs/belief --extend \\
        --set train.max_iters=4000

--out (runs/<config name> when not given) receives config.toml, meta.json, metrics.jsonl, ckpt.pt,
best.pt (with train.patience > 0), summary.json, curves.png (and sample.txt for char_lm); see
experiments/train.py. --extend resumes
a run, finished or not, with a larger train.max_iters (the cosine schedule is stretched to it from
the step reached; meta.json records the change). Ctrl-C stops
after the current step, writes a checkpoint, prints the command that resumes the run and exits
with status 130. A training loss, validation metric or weight that becomes NaN or infinite ends the
run with status "diverged" in summary.json and exit status 1.

Under torchrun the processes train one model together with DistributedDataParallel (docs/guide/distributed.md,
"Training with DistributedDataParallel"); rank 0 writes the run directory and prints:

    torchrun --standalone --nproc-per-node 2 -m experiments train modular97 --out runs/mod97
"""

import shlex
import sys
from pathlib import Path

from . import log_sinks
from .config import load_config, overrides_with_data
from .options import DIST_TIMEOUT, positive


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "train", help="train one attention model on one task", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "config",
        help="a built-in config name (`pdmm-bridge configs` lists them) or a TOML file "
        "with [task], [model] and [train] tables",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="TABLE.KEY=VALUE",
        help="override one config value (repeatable), e.g. --set model.residual=belief",
    )
    parser.add_argument("--data", help="the text file for char_lm (same as --set task.data=FILE)")
    parser.add_argument("--out", help="run directory; runs/<config name> when not given")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    parser.add_argument(
        "--extend",
        action="store_true",
        help="resume with a larger train.max_iters (and train.warmup_iters, lr, min_lr), finished or not",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing run directory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    log_sinks.add_argument(parser)
    parser.add_argument(
        "--dist-backend",
        choices=("gloo", "nccl"),
        help="under torchrun: the torch.distributed backend (default: gloo on CPU, nccl on CUDA)",
    )
    parser.add_argument(
        "--dist-timeout",
        type=positive(float),
        default=DIST_TIMEOUT,
        metavar="SECONDS",
        help="under torchrun: how long a process waits for the others in a collective before the run fails",
    )
    return parser


def run(args):
    from .train import TrainingDiverged, train  # torch: imported only to run (train --help answers at once)
    from .world import World, process_group

    config = load_config(args.config, overrides_with_data(args.overrides, args.data))
    out = Path(args.out or Path("runs") / Path(args.config).stem)
    log = log_sinks.target(args.log, out)
    with process_group(config.train.device, args.dist_backend, args.dist_timeout):
        world = World.current()
        try:
            summary = train(
                config,
                out,
                resume=args.resume or args.extend,
                force=args.force,
                progress=not args.no_progress,
                extend=args.extend,
                log=log,
            )
        except TrainingDiverged as err:
            if world.rank == 0:
                print(
                    f'pdmm-bridge train: diverged: {err}; the run ends with status "diverged" in '
                    f"{out / 'summary.json'} (lower train.lr or raise train.warmup_iters)",
                    file=sys.stderr,
                )
            return 1
        except KeyboardInterrupt as err:  # Interrupted: at the end of a step, after a checkpoint
            if world.rank == 0:
                print(f"pdmm-bridge train: {interrupted_line(err, args, out, world)}", file=sys.stderr)
            return 130
    if summary is None:  # a process other than rank 0: rank 0 reports
        return 0
    final = ", ".join(f"{k} {v:.4f}" for k, v in summary["final"].items())
    print(
        f"{out}: {summary['steps']} steps, {final}, {1e3 * summary['seconds_per_step']:.1f} ms/step, "
        f"{summary['params']:,} parameters"
    )
    return 0


def interrupted_line(err, args, out, world):
    """What Ctrl-C left and the command that carries on: --resume from a checkpoint, else --force."""
    from .checkpoints import has_checkpoint
    from .train import Interrupted
    from .train_files import finished

    how = " (under torchrun, with any number of processes)" if world.size > 1 else ""
    if isinstance(err, Interrupted):
        return (
            f"interrupted (Ctrl-C) at step {err.step}, checkpoint saved; resume with: "
            f"{command(args, out, '--resume')}{how}"
        )
    if finished(out):  # Ctrl-C during the last step's evaluation or checkpoint
        return f"interrupted (Ctrl-C) after the last step; the run finished, results in {out}"
    if has_checkpoint(out):  # a second Ctrl-C, or one outside the steps
        return f"interrupted (Ctrl-C); resume from the last checkpoint with: {command(args, out, '--resume')}{how}"
    return f"interrupted (Ctrl-C) before the first checkpoint; start again with: {command(args, out, '--force')}{how}"


def command(args, out, flag):
    """The pdmm-bridge train command line of this run into `out`, with `flag` (--resume or --force)."""
    words = ["pdmm-bridge", "train", args.config, *(f"--set={s}" for s in args.overrides)]
    words += [*(["--data", args.data] if args.data else []), "--out", str(out), flag]
    words += ["--dist-backend", args.dist_backend] if args.dist_backend else []
    words += [f"--dist-timeout={args.dist_timeout:g}"] if args.dist_timeout != DIST_TIMEOUT else []
    return shlex.join(words + (["--no-progress"] if args.no_progress else []))
