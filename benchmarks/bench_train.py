"""Training throughput of one `pdmm-bridge train` run: ms per step, tokens per second, wall time, final loss.

Runs `python -m experiments train CONFIG --out DIR` (by default nanoGPT's Shakespeare CPU setting,
experiments/configs/shakespeare_char_cpu.toml, into a temporary directory) and reads the finished
run's summary.json: seconds_per_step (forward, backward and update per step, batch building
included, the first step of each process left out), tokens_per_second, wall_seconds (evaluations
included) and the final validation loss. The command runs from the repository root with absolute
paths, so it trains this checkout's code (`python -m` puts the working directory first on sys.path).

--device DEVICE trains on that device (`--set train.device=DEVICE`); --quick trains QUICK_STEPS steps
with two short evaluations (a smoke run: its figures say nothing of the config's).

--run DIR reads a run that has already finished instead of training. Its row takes the commit, date
and torch version from the run's meta.json (experiments/train.py writes them when the run starts);
meta.json records neither the machine nor the thread count, so those are left "not recorded", and
the row's source says where it was read from.

    python benchmarks/bench_train.py [--config experiments/configs/shakespeare_char_cpu.toml] [--run DIR]
                                     [--device cpu] [--quick] [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_train.csv (table "throughput"; benchmarks/results.py).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from results import REPOSITORY, Recorder, add_arguments

CONFIG = REPOSITORY / "experiments" / "configs" / "shakespeare_char_cpu.toml"
QUICK_STEPS = 4


def settings(device, quick):
    """The training command's --set options for `device` and, with quick, a run of QUICK_STEPS steps."""
    values = {"train.device": device}
    if quick:
        values |= {
            "train.max_iters": QUICK_STEPS,
            "train.warmup_iters": 1,
            "train.eval_interval": QUICK_STEPS // 2,
            "train.eval_iters": 2,
            "train.checkpoint_interval": QUICK_STEPS,
        }
    return [word for key, value in values.items() for word in ("--set", f"{key}={value}")]


def train(config, out, options):
    """Run the training command of this checkout into `out` with `options`; its summary.json as a dictionary."""
    subprocess.run(
        [sys.executable, "-m", "experiments", "train", str(config.resolve()), "--out", str(out.resolve()), *options],
        cwd=REPOSITORY,
        check=True,
    )
    return json.loads((out / "summary.json").read_text())


def finished_run(recorder, run):
    """The summary.json of the finished run directory `run`; the recorder's provenance set from its meta.json."""
    summary = json.loads((run / "summary.json").read_text())
    meta = json.loads((run / "meta.json").read_text())
    started = meta.get("started", "")  # ISO 8601 in UTC, e.g. 2026-11-22T10:04:11+00:00
    recorder.provenance.update(
        date_utc=started[:16].replace("T", " ") if started else "not recorded",
        commit=str(meta.get("git_commit") or "")[:7],  # meta.json holds the full hash; the CSVs the short one
        machine="not recorded (read from a finished run)",
        torch=meta.get("torch", ""),
        threads="not recorded",
        load_at_start="",
        source=f"read from {run / 'meta.json'} and summary.json",
    )
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="the run's config (TOML)")
    parser.add_argument("--run", type=Path, help="a finished run directory to read instead of training")
    parser.add_argument("--device", default="cpu", help="the device to train on (default cpu)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run of {QUICK_STEPS} steps")
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder("bench_train", args.results_dir, args.shared)  # before any work: load at start
    if args.run is not None:
        summary = finished_run(recorder, args.run)
    else:
        with tempfile.TemporaryDirectory() as directory:
            summary = train(args.config, Path(directory) / "run", settings(args.device, args.quick))
    ms = 1e3 * summary["seconds_per_step"]
    loss = summary.get("final", {}).get("val_loss")
    print(f"params {summary['params']:,}, {ms:.1f} ms per step, {summary['tokens_per_second']:,.0f} tokens/s")
    print(f"wall {summary['wall_seconds']:.0f} s, validation loss {loss} at step {summary['steps']}")
    recorder.add(
        "throughput",
        device=args.device if args.run is None else "not recorded",
        config=str(args.config) if args.run is None else str(args.run),
        params=summary["params"],
        steps=summary["steps"],
        ms_per_step=ms,
        tokens_per_second=summary["tokens_per_second"],
        wall_s=summary["wall_seconds"],
        val_loss=loss,
    )


if __name__ == "__main__":
    main()
