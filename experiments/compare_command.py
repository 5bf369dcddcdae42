"""pdmm-bridge compare: transformers against PDMM round by round on graph_consensus.

    pdmm-bridge compare experiments/configs/graph_consensus.toml --residuals standard,attentionx,belief,accumulated

Trains each residual variant (and seed) on the config's graph_consensus task into
OUT/runs/<residual=...,seed=...> (finished runs are reused), then on the same held-out
instances (the training family with new seeds, larger graphs, other topologies) measures the
error ||x^r - x*||_F / ||a - x*||_F (against the initial disagreement) after every communication
round r = 1..n_layer of:
each trained GraphTransformer (layer r's readout), PDMM with theta 1 and 1/2, QA-PDMM and
ADMM (each round at the rho of a log grid that is best for that round on training-family
instances: the method's envelope) and learned PDMM (bridge.learned, n_layer layers). Every method starts from what the
transformer sees, x_i^0 = a_i, so round r of each has used r exchanges with the neighbours. Writes compare.csv (method, set,
round, geometric mean and 10th / 90th percentile over instances and seeds), compare.png (one
panel per held-out set, log scale) and compare.md.
"""
import argparse
import csv
import shutil
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

import attention
import pdmm
from bridge import UnrolledPDMM
from bridge.learned import best_constant_rho, fit

from .common import UsageError
from .config import load_config
from .results_doc import replace_section
from .sweep_command import run_name
from .tasks import build_task
from .tasks.graph_consensus import disagreement_error, node_features, sample_graph, sample_values
from .train import CHECKPOINT, train

RHO_GRID = np.logspace(-3, 3, 25)
CLASSICAL = {"pdmm (theta 1)": ("pdmm", {"theta": 1.0}), "pdmm (theta 1/2)": ("pdmm", {"theta": 0.5}),
             "qa-pdmm": ("qa-pdmm", {}), "admm": ("admm", {})}


def add_parser(subparsers):
    parser = subparsers.add_parser("compare", help="transformers vs PDMM round by round on graph_consensus",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="a graph_consensus TOML config")
    parser.add_argument("--residuals", default="standard,attentionx,belief,accumulated",
                        help="residual variants to train (comma-separated)")
    parser.add_argument("--seeds", default="0", help="comma-separated training seeds")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="TABLE.KEY=VALUE")
    parser.add_argument("--test-graphs", type=int, default=8, help="held-out graphs per set")
    parser.add_argument("--out", default="runs/compare", help="output directory")
    parser.add_argument("--results", help="also write compare.md as a section of this Markdown file (figure to figures/)")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def held_out_sets(options, batch, count, seed):
    """{set name: [(networkx graph, a (B, n))]}: the training family, larger graphs, two other topologies."""
    sets = {"training family": (options.topology, (options.n_min, options.n_max)),
            "larger graphs": (options.topology, (2 * options.n_max, 3 * options.n_max)),
            "small world": ("small_world", (options.n_min, options.n_max)),
            "grid": ("grid", (max(options.n_min, 9), max(options.n_max, 9)))}  # square grids, sample_graph
    rng = np.random.default_rng(20_000 + seed)
    out = {}
    for name, (topology, n_range) in sets.items():
        graphs = [sample_graph(options, rng, topology, n_range) for _ in range(count)]
        out[name] = [(G, sample_values(options, batch, G.number_of_nodes(), rng)) for G in graphs]
    return out


def transformer_errors(run_dir, config, instances):
    """(rounds, instances) errors of the run's GraphTransformer, readout after every layer."""
    torch.manual_seed(0)
    model = build_task(config).build_model()
    model.load_state_dict(torch.load(Path(run_dir) / CHECKPOINT, map_location="cpu", weights_only=False)["model"])
    model.eval()
    out = []
    with torch.no_grad():
        for G, a in instances:
            a = torch.as_tensor(a, dtype=torch.float32)
            readouts = model(node_features(G, a), attention.TokenGraph.from_networkx(G))[..., 0]
            out.append(disagreement_error(readouts, a))
    return torch.cat(out, dim=1).double()


def averaging_problem(G, a):
    problem = pdmm.averaging(G, a[..., None])  # (B, n, 1)
    problem.batched = True
    return problem


def classical_errors(method, params, rho, rounds, instances):
    """(rounds, instances) errors ||x^r - x*|| / ||a - x*|| of pdmm.solve on each averaging problem.

    pdmm.solve's history["error"] is ||x^r - x*|| / ||x*||, rescaled here per instance."""
    out = []
    for G, a in instances:
        x_star = np.broadcast_to(a.mean(1, keepdims=True), a.shape)[..., None]
        result = pdmm.solve(averaging_problem(G, a), method=method, rho=rho, max_iter=rounds, tol=0,
                            reference=x_star, x0=a[..., None], **params)
        history = torch.as_tensor(np.asarray(result.history["error"])).reshape(rounds, -1)
        scale = np.linalg.norm(x_star[..., 0], axis=1) / np.linalg.norm(a - x_star[..., 0], axis=1)
        out.append(history * torch.as_tensor(scale))
    return torch.cat(out, dim=1)


def best_rhos(method, params, rounds, instances):
    """(rounds,) the rho of RHO_GRID with the smallest geometric-mean error after each round on `instances`."""
    scores = np.stack([np.log(classical_errors(method, params, rho, rounds, instances).numpy()).mean(1)
                       for rho in RHO_GRID])  # (grid, rounds)
    return RHO_GRID[np.nanargmin(scores, axis=0)]


def envelope_errors(method, params, rhos, instances):
    """(rounds, instances): round r's errors at rho_r, each round with the rho best for it."""
    runs = {rho: classical_errors(method, params, rho, len(rhos), instances) for rho in set(rhos.tolist())}
    return torch.stack([runs[rho][r] for r, rho in enumerate(rhos.tolist())])


def summary_rows(errors):
    """[{method, set, round, geomean, p10, p90}] from {(method, set): (rounds, instances) errors}."""
    rows = []
    for (method, name), e in errors.items():
        logs = torch.log(e.clamp_min(1e-300))
        for r in range(len(e)):
            rows.append({"method": method, "set": name, "round": r + 1, "error_geomean": float(logs[r].mean().exp()),
                         "error_p10": float(np.quantile(e[r].numpy(), 0.1)),
                         "error_p90": float(np.quantile(e[r].numpy(), 0.9))})
    return rows


def run(args):
    residuals = [r.strip() for r in args.residuals.split(",") if r.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not residuals or not seeds or args.test_graphs < 1:
        raise UsageError("compare needs at least one residual, one seed and --test-graphs >= 1")
    base = load_config(args.config, args.overrides)
    if base.task.name != "graph_consensus":
        raise UsageError(f"compare runs on task graph_consensus; {args.config} has task {base.task.name!r}")
    out = Path(args.out)
    rounds = base.model.n_layer
    task = build_task(base)  # validates the task options
    sets = held_out_sets(task.options, base.train.batch_size, args.test_graphs, base.train.seed)
    errors = {}
    for residual in residuals:
        per_set = {name: [] for name in sets}
        for seed in seeds:
            config = load_config(args.config, [*args.overrides, f"model.residual={residual}", f"train.seed={seed}"])
            run_dir = out / "runs" / run_name({"model.residual": residual}, seed)
            if (run_dir / "config.toml").is_file() and load_config(run_dir / "config.toml") != config:
                raise UsageError(f"{run_dir} was trained with a different config; choose another --out")
            if not (run_dir / "summary.json").is_file():
                train(config, run_dir, resume=(run_dir / CHECKPOINT).is_file(), force=True,
                      progress=not args.no_progress)
            for name, instances in sets.items():
                per_set[name].append(transformer_errors(run_dir, config, instances))
        for name in sets:
            errors[(f"transformer ({residual})", name)] = torch.cat(per_set[name], dim=1)
    tuning = held_out_sets(task.options, base.train.batch_size, 4, base.train.seed + 1)["training family"]
    chosen = {}
    for label, (method, params) in CLASSICAL.items():
        chosen[label] = best_rhos(method, params, rounds, tuning)
        for name, instances in sets.items():
            errors[(label, name)] = envelope_errors(method, params, chosen[label], instances)
    tuning_problems = [(averaging_problem(G, a), torch.as_tensor(a.mean(1, keepdims=True)[..., None]).expand(
        *a.shape, 1), a[..., None]) for G, a in tuning]  # (problem, x*, x0 = a)
    learned = UnrolledPDMM(rounds, rho=best_constant_rho(rounds, tuning_problems), learnable=True)
    fit(learned, tuning_problems, 100)
    for name, instances in sets.items():
        with torch.no_grad():
            errors[("learned pdmm", name)] = torch.cat(
                [disagreement_error(learned(averaging_problem(G, a), x0=a[..., None])[..., 0], torch.as_tensor(a))
                 for G, a in instances],
                dim=1)
    rows = summary_rows(errors)
    command = " ".join(["pdmm-bridge compare", str(args.config), "--residuals", ",".join(residuals), "--seeds",
                        ",".join(map(str, seeds)), *(f"--set {o}" for o in args.overrides)])
    text = write_outputs(out, rows, chosen, rounds, sets, command)
    if args.results:
        figure = Path(args.results).parent / "figures" / "compare.png"
        figure.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "compare.png", figure)
        replace_section(args.results, "compare", text.replace("](compare.png)", "](figures/compare.png)"))
    print(out / "compare.md")
    return 0


def write_outputs(out, rows, chosen, rounds, sets, command):
    """compare.csv, compare.png and compare.md in out; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig = Figure(figsize=(4.2 * len(sets), 4.2), layout="constrained")
    axes = fig.subplots(1, len(sets), sharey=True)
    for ax, name in zip(np.atleast_1d(axes), sets):
        for method in methods:
            mine = [r for r in rows if r["method"] == method and r["set"] == name]
            x = [r["round"] for r in mine]
            line, = ax.plot(x, [r["error_geomean"] for r in mine], label=method,
                            ls="-" if method.startswith("transformer") else "--")
            ax.fill_between(x, [r["error_p10"] for r in mine], [r["error_p90"] for r in mine],
                            color=line.get_color(), alpha=0.12, linewidth=0)
        ax.set(yscale="log", xlabel="communication round", title=name)
        ax.grid(True, alpha=0.4)
    np.atleast_1d(axes)[0].set(ylabel="error ||x - x*|| / ||a - x*||")
    np.atleast_1d(axes)[-1].legend(fontsize=8, title="geometric mean, band 10-90 %")
    fig.savefig(out / "compare.png", dpi=120)
    header = "| method | " + " | ".join(f"{name}, round {r}" for name in sets for r in (1, rounds)) + " |"
    lines = ["## Transformers vs PDMM on graph_consensus", "", f"`{command}`", "",
             "Geometric mean over instances and seeds of ||x - x*|| / ||a - x*|| after the round (1: no better "
             "than each node keeping its own a_i). Every method starts from x_i^0 = a_i, so round r has used r "
             "exchanges with the neighbours. Each classical method is shown at the rho of a log grid that is "
             "best for each round on training-family instances (its envelope; rho by round: "
             + "; ".join(f"{k} " + ", ".join(f"{v:.2g}" for v in rhos) for k, rhos in chosen.items())
             + "). On averaging, QA-PDMM with eta = L is PDMM exactly (its quadratic model is f itself). The "
             "budget is matched in rounds, not in what is sent: a transformer layer sends d_model-wide keys and "
             "values per edge and sees its neighbours' degrees, PDMM sends one number per edge.", "",
             header, "|---|" + "---:|" * (2 * len(sets))]
    for method in methods:
        cells = [next(r["error_geomean"] for r in rows if r["method"] == method and r["set"] == name
                      and r["round"] == rr) for name in sets for rr in (1, rounds)]
        lines.append(f"| {method} | " + " | ".join(f"{c:.3g}" for c in cells) + " |")
    lines += ["", "![error against round](compare.png)"]
    text = "\n".join(lines) + "\n"
    (out / "compare.md").write_text(text)
    return text
