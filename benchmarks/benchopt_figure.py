"""The figure of docs/guide/benchopt.md from a `benchopt run` of benchmarks/benchopt: the relative error
||x - x*||_F / ||x*||_F of every solver against time and against iterations, one panel each, log scale.

    cp -r benchmarks/benchopt /tmp/benchopt
    benchopt run /tmp/benchopt -d "synthetic[task=regression]" \
        -o "decentralised[loss=least_squares,graph=random_geometric]" -n 40 -r 1 --no-plot
    python benchmarks/benchopt_figure.py /tmp/benchopt/outputs/benchopt_run_*.parquet --out docs/figures/benchopt.png
"""

import argparse
import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parquet", type=Path, help="the results file benchopt wrote")
    parser.add_argument("--out", type=Path, default=Path("docs/figures/benchopt.png"))
    args = parser.parse_args()
    curves = pd.read_parquet(args.parquet)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    by_time, by_iteration = fig.subplots(1, 2)
    for k, (name, run) in enumerate(sorted(curves.groupby("solver_name"), key=lambda item: item[0])):
        run = run.sort_values("stop_val")
        label = re.sub(r"(bits=0|drop=0\.0),?", "", name).replace(",]", "]")  # the ideal network: not named
        style = {"label": label, "color": f"C{k % 10}", "ls": "-" if k < 10 else "--"}
        by_time.plot(run["time"], run["objective_error"], **style)
        by_iteration.plot(run["stop_val"], run["objective_error"], **style)
    for ax, label in ((by_time, "seconds (benchopt's clock)"), (by_iteration, "iterations")):
        ax.set(xlabel=label, ylabel="relative error to x*", yscale="log")
        ax.grid(True, alpha=0.3)
    by_iteration.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    first = curves.iloc[0]
    fig.suptitle(f"benchopt: {first['dataset_name']}, {first['objective_name']}", fontsize=9)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
