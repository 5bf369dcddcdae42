"""pdmm-bridge learn-pdmm: learned PDMM (per-layer rho_k, theta_k) against the best constant rho.

    pdmm-bridge learn-pdmm --layers 10,20 --out runs/learned-pdmm --results docs/RESULTS.md

For each K: the best constant rho (theta 1) on the training instances, then an UnrolledPDMM
started there and trained full batch (bridge.learned.fit), both evaluated on held-out instances:
the training family with new seeds, larger graphs, and other topologies. Writes results.json,
results.md (the table: geometric-mean relative error after K rounds and the learned / constant
ratio), errors.png (error against round) and, with --results, the same table as a section of
that Markdown file.
"""
import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from bridge import UnrolledPDMM
from bridge.learned import Family, best_constant_rho, errors, fit, geometric_mean

from .common import UsageError, package_version
from .results_doc import replace_section

HELD_OUT = {  # name -> the family held-out instances come from
    "same family": Family(),
    "larger graphs (n 96-128)": Family(n_min=96, n_max=128),
    "small world (n 32-64)": Family(topology="small_world"),
    "grid (n 36-64)": Family(topology="grid", n_min=36, n_max=64),
}


def layer_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive layer counts, got {text!r}")
    return values


def add_parser(subparsers):
    parser = subparsers.add_parser("learn-pdmm", help="learned PDMM against the best constant rho",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=layer_list, default=[10, 20], help="K values (default 10,20)")
    parser.add_argument("--train-graphs", type=int, default=16, help="training graphs (x 16 instances each)")
    parser.add_argument("--test-graphs", type=int, default=16, help="held-out graphs per set (x 16 instances)")
    parser.add_argument("--steps", type=int, default=150, help="full-batch Adam steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/learned-pdmm", help="output directory")
    parser.add_argument("--results", help="also write the table as a section of this Markdown file")
    return parser


def instances(family, count, seed):
    rng = np.random.default_rng(seed)
    return [family.sample(rng) for _ in range(count)]


def run(args):
    if min(args.train_graphs, args.test_graphs, args.steps) < 1:
        raise UsageError("--train-graphs, --test-graphs and --steps must be >= 1")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot write to {out}: {err.strerror or err}") from None
    train_set = instances(Family(), args.train_graphs, args.seed)
    held_out = {name: instances(family, args.test_graphs, args.seed + 1000 + i)
                for i, (name, family) in enumerate(HELD_OUT.items())}
    results, training, curves = [], {}, {}
    for K in args.layers:
        start = time.perf_counter()
        rho = best_constant_rho(K, train_set)
        constant = UnrolledPDMM(K, rho=rho)
        learned = UnrolledPDMM(K, rho=rho, learnable=True)
        losses = fit(learned, train_set, args.steps)
        training[K] = {"seconds": time.perf_counter() - start, "best_constant_rho": rho,
                       "rho_k": learned.rho().tolist(), "theta_k": learned.theta().tolist(),
                       "loss_first": losses[0], "loss_best": min(losses)}
        for name, data in {"training instances": train_set, **held_out}.items():
            e_const, e_learned = errors(constant, data), errors(learned, data)
            results.append({"K": K, "set": name, "best_constant_rho": rho,
                            "constant_error": geometric_mean(e_const[-1]), "learned_error": geometric_mean(e_learned[-1]),
                            "ratio": geometric_mean(e_learned[-1]) / geometric_mean(e_const[-1])})
            if name == "same family":
                curves[K] = ([geometric_mean(e) for e in e_const], [geometric_mean(e) for e in e_learned])
        print(f"K = {K}: best constant rho {rho:.3g}, trained in {training[K]['seconds']:.0f} s; "
              + "; ".join(f"{r['set']}: ratio {r['ratio']:.3f}" for r in results if r["K"] == K))
    command = "pdmm-bridge learn-pdmm " + " ".join(
        f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in vars(args).items() if k in ("layers", "train_graphs", "test_graphs", "steps", "seed"))
    (out / "results.json").write_text(json.dumps({"version": package_version(), "command": command,
                                                  "results": results, "training": training}, indent=2) + "\n")
    plot_errors(curves, out / "errors.png")
    (out / "results.md").write_text(markdown(results, command, "errors.png"))
    if args.results:  # the figure goes to figures/ beside the results file
        figure = Path(args.results).parent / "figures" / "learned_pdmm_errors.png"
        figure.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "errors.png", figure)
        replace_section(args.results, "learned-pdmm", markdown(results, command, "figures/learned_pdmm_errors.png"))
    print(out / "results.md")
    return 0


def markdown(results, command, figure):
    lines = ["## Learned PDMM against the best constant rho", "",
             f"`{command}`", "",
             "Distributed averaging, a_i ~ N(1, 1); training instances on random geometric graphs, n 32-64. "
             "Geometric-mean relative error ||x^K - x*|| / ||x*|| after K rounds; ratio < 1: learned PDMM is "
             "better. Both the constant rho and the learned rho_k, theta_k are fitted to the training "
             "instances only, so on the other topologies neither is tuned.", "",
             "| K | instances | best constant rho | constant-rho error | learned error | learned / constant |",
             "|---:|---|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['K']} | {r['set']} | {r['best_constant_rho']:.3g} | {r['constant_error']:.3g} | "
                     f"{r['learned_error']:.3g} | {r['ratio']:.3f} |")
    lines += ["", f"![error against round, same-family held-out instances]({figure})"]
    return "\n".join(lines) + "\n"


def plot_errors(curves, path):
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for K, (constant, learned) in curves.items():
        line, = ax.plot(range(1, K + 1), constant, "--", label=f"best constant rho, K = {K}")
        ax.plot(range(1, K + 1), learned, "-", color=line.get_color(), label=f"learned rho_k, theta_k, K = {K}")
    ax.set(yscale="log", xlabel="communication round", ylabel="relative error (geometric mean)",
           title="learned vs constant-rho PDMM, held-out instances")
    ax.grid(True, alpha=0.4)
    ax.legend()
    fig.savefig(path, dpi=120)
