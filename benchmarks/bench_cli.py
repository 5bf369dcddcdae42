"""Start-up time of the `pdmm-bridge` command line, this checkout against another one, side by side.

Each ARGS (by default --version, --help and configs) runs as a whole process,
`python -m experiments ARGS`, with PYTHONPATH set to this checkout (new) and to --old (old), in
turn: new, old, new, old, ... after --warmup untimed pairs, --runs timed pairs. The clock is read
just before each process starts and just after it exits, so interpreter start-up, imports and the
command's own work are all inside. The table gives each side's median wall time and the median of
the per-pair ratios new / old (pairing keeps the ratio meaningful when the machine's speed drifts).

    python benchmarks/bench_cli.py --old ../pdmm-bridge-b650972 [--runs 7] [--warmup 1]
                                   [--args=--version --args=--help --args=configs]
                                   [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_cli.csv (table "startup"; benchmarks/results.py).
"""

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results import REPOSITORY, Recorder, add_arguments, git_commit

DEFAULT_ARGS = ("--version", "--help", "configs")


def wall_seconds(tree, words):
    """Seconds from start to exit of `python -m experiments WORDS` run in `tree` with PYTHONPATH=tree.

    The working directory is the tree itself: `python -m` puts the working directory first on sys.path, so run
    from another checkout it would time that checkout's code whatever PYTHONPATH says."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "experiments", *words],
        env=env,
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def old_commit(tree):
    """The short commit hash of the checkout at `tree` ("" where it is not a git checkout)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the other checkout (its root directory)")
    parser.add_argument("--runs", type=int, default=7, help="timed pairs per ARGS")
    parser.add_argument("--warmup", type=int, default=1, help="untimed pairs first")
    parser.add_argument(
        "--args",
        action="append",
        help="the command's arguments as one shell-quoted string; repeat for more (default: "
        + ", ".join(DEFAULT_ARGS)
        + ")",
    )
    add_arguments(parser)
    args = parser.parse_args()
    recorder = Recorder("bench_cli", args.results_dir, args.shared)  # before any work: load at start
    # The timed processes are separate interpreters (--version imports no torch at all): record the
    # OMP_NUM_THREADS they inherit, not this process's torch threads.
    recorder.provenance["threads"] = os.environ.get("OMP_NUM_THREADS") or "n/a (separate processes)"
    if not (args.old / "experiments").is_dir():
        raise SystemExit(f"--old {args.old} holds no experiments/ package")
    cases = args.args or list(DEFAULT_ARGS)
    print(f"new: {REPOSITORY} ({git_commit()}), old: {args.old} ({old_commit(args.old)}), {args.runs} pairs\n")
    print("| ARGS | new, median wall | old, median wall | new / old |\n|---|---:|---:|---:|")
    for case in cases:
        words = shlex.split(case)
        new, old = [], []
        for run in range(args.warmup + args.runs):
            pair = wall_seconds(REPOSITORY, words), wall_seconds(args.old, words)
            if run >= args.warmup:
                new.append(pair[0])
                old.append(pair[1])
        ratio = statistics.median(a / b for a, b in zip(new, old, strict=True))
        new_s, old_s = statistics.median(new), statistics.median(old)
        print(f"| `{case}` | {new_s:.3f} s | {old_s:.2f} s | {ratio:.3f} |", flush=True)
        recorder.add(
            "startup",
            args=case,
            runs=args.runs,
            old_commit=old_commit(args.old),
            new_median_s=new_s,
            old_median_s=old_s,
            new_per_old=ratio,
        )


if __name__ == "__main__":
    main()
