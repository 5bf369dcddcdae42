"""pdmm-bridge train: train one attention model on one task from a TOML config.

    pdmm-bridge train experiments/configs/shakespeare_char_cpu.toml --set model.residual=belief --out runs/belief
    pdmm-bridge train experiments/configs/shakespeare_char_cpu.toml --out runs/belief --resume

--out (default runs/<config name>) receives config.toml, meta.json, metrics.jsonl, ckpt.pt,
summary.json, curves.png (and sample.txt for char_lm); see experiments/train.py.
"""
import sys
from pathlib import Path

from .config import load_config, toml_value
from .train import TrainingDiverged, train


def add_parser(subparsers):
    parser = subparsers.add_parser("train", help="train one attention model on one task",
                                   description=__doc__.split("\n")[0])
    parser.add_argument("config", help="a TOML file with [task], [model] and [train] tables")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="TABLE.KEY=VALUE",
                        help="override one config value (repeatable), e.g. --set model.residual=belief")
    parser.add_argument("--data", help="the text file for char_lm (same as --set task.data=FILE)")
    parser.add_argument("--out", help="run directory (default runs/<config name>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    parser.add_argument("--force", action="store_true", help="overwrite an existing run directory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def with_data(args):
    """args.overrides, plus task.data from --data."""
    return [*args.overrides, *([f"task.data={toml_value(args.data)}"] if args.data else [])]


def run(args):
    config = load_config(args.config, with_data(args))
    out = Path(args.out or Path("runs") / Path(args.config).stem)
    try:
        summary = train(config, out, resume=args.resume, force=args.force, progress=not args.no_progress)
    except TrainingDiverged as err:
        print(f"pdmm-bridge train: diverged: {err} (metrics so far in {out})", file=sys.stderr)
        return 1
    final = ", ".join(f"{k} {v:.4f}" for k, v in summary["final"].items())
    print(f"{out}: {summary['steps']} steps, {final}, {1e3 * summary['seconds_per_step']:.1f} ms/step, "
          f"{summary['params']:,} parameters")
    return 0
