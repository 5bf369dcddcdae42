"""pdmm-bridge compare: transformers against PDMM round by round on graph_consensus, over seeds.

    pdmm-bridge compare graph_consensus --out runs/compare

For every seed: trains each --residuals variant (untied, depth K = model.n_layer) and each --tied
variant (one block, trained at depth K) on the config's graph_consensus task into
OUT/runs/<residual=...,tied=...,seed=...> (finished runs are reused), then runs bridge.compare on
that seed's instances: the r-hop ball-average oracle, PDMM, averaged PDMM, QA-PDMM and ADMM at one
rho tuned for the last round, PDMM's oracle rho schedule, learned PDMM, the PDMM-transformer
(hand-set, and trained from it and from random) and the trained transformers (tied ones for all
--rounds rounds), all from x_i^0 = a_i on the same held-out instances. Each seed's numbers are
kept in OUT/seeds/ (a killed compare resumes there). Writes compare.csv (every method, set and round:
geometric mean over seeds with a 95 % t interval, the ratio to the oracle, numbers sent per edge),
compare.md, compare.json (settings, fitted rhos and schedules, version), compare.png (at most six
lines per panel) and compare_all.png (every method).
"""
import argparse
import csv
import json
import math
import shutil
import sys
from pathlib import Path

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure

from bridge.comparison import (BAYES, CLASSICAL, FLOOR, FROM_PDMM, FROM_RANDOM, LEARNED, ORACLE, SCHEDULE, CompareTable, SeedResult, Setting,
                               evaluate_seed, numbers_sent)

from .common import UsageError, claim_output_dir, package_version
from .config import load_config
from .results_doc import replace_section
from .sweep_command import run_name, seeds as parse_seeds
from .tasks import build_task
from .tasks.graph_consensus import graph_family
from .train import CHECKPOINT, load_weights, train


def add_parser(subparsers):
    parser = subparsers.add_parser("compare", help="transformers vs PDMM round by round on graph_consensus",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="a graph_consensus config: a TOML file or a built-in name")
    parser.add_argument("--residuals", default="standard,belief",
                        help="residual variants of untied transformers (comma-separated)")
    parser.add_argument("--tied", default="standard",
                        help="residual variants of tied transformers, run for every round (comma-separated; "
                             "'none' for none)")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds: training seed and instance draw of each")
    parser.add_argument("--rounds", type=int, default=32, help="rounds compared (>= model.n_layer)")
    parser.add_argument("--test-graphs", type=int, default=8, help="held-out graphs per set and seed")
    parser.add_argument("--tune-graphs", type=int, default=4, help="training-family graphs for tuning rho and "
                                                                    "fitting learned PDMM, per seed")
    parser.add_argument("--learned-steps", type=int, default=100, help="Adam steps of learned PDMM")
    parser.add_argument("--finetune-steps", type=int, default=200, help="Adam steps of the PDMM-transformer")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="TABLE.KEY=VALUE",
                        help="override a config key (repeatable)")
    parser.add_argument("--out", default="runs/compare", help="output directory (a compare directory is resumed)")
    parser.add_argument("--results", help="also write compare.md as section 'compare' of this Markdown file "
                                          "(figures to figures/ beside it)")
    parser.add_argument("--force", action="store_true",
                        help="write into a non-empty --out that compare did not make; replace a --results "
                             "section made from more seeds")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars or progress lines")
    return parser


def variants(text, flag):
    names = [r.strip() for r in text.split(",") if r.strip() and r.strip() != "none"]
    if len(set(names)) != len(names):
        raise UsageError(f"{flag} lists a variant twice: {text!r}")
    return names


def trained_models(args, out, seed, residuals, tied):
    """{row label: the seed's trained GraphTransformer}, training (or resuming) the runs it needs."""
    models = {}
    for residual, is_tied in [(r, False) for r in residuals] + [(r, True) for r in tied]:
        config = load_config(args.config, [*args.overrides, f"model.residual={residual}", f"task.tied={str(is_tied).lower()}",
                                           f"train.seed={seed}"])
        run_dir = out / "runs" / run_name({"model.residual": residual, "task.tied": is_tied}, seed)
        if (run_dir / "config.toml").is_file() and load_config(run_dir / "config.toml") != config:
            raise UsageError(f"{run_dir} was trained with a different config; choose another --out")
        if not (run_dir / "summary.json").is_file():
            train(config, run_dir, resume=(run_dir / CHECKPOINT).is_file(), force=True, progress=not args.no_progress)
        torch.manual_seed(0)
        model = build_task(config).build_model()
        load_weights(model, run_dir / CHECKPOINT)
        models[f"{'tied ' if is_tied else ''}transformer ({residual})"] = model
    return models


def seed_result(args, out, setting, seed, residuals, tied, key):
    """(the seed's SeedResult, {row label: numbers sent}), the result from OUT/seeds/seed=S.json when it was
    computed under the same `key`."""
    path = out / "seeds" / f"seed={seed}.json"
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved["key"] == key:
            return SeedResult({tuple(k.split("\t")): np.array(v, dtype=float) for k, v in saved["log_errors"].items()},
                              saved["fitted"])
    models = trained_models(args, out, seed, residuals, tied)
    show = (lambda text: None) if args.no_progress else (lambda text: print(f"seed {seed}: {text}", flush=True))
    result = evaluate_seed(setting, seed, models, show)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "fitted": result.fitted,
                               "log_errors": {"\t".join(k): [None if math.isnan(x) else x for x in v]
                                              for k, v in result.log_errors.items()}}))
    tmp.replace(path)
    return result


def run(args):
    residuals, tied = variants(args.residuals, "--residuals"), variants(args.tied, "--tied")
    seeds = parse_seeds(args.seeds)
    if min(args.test_graphs, args.tune_graphs) < 1 or min(args.learned_steps, args.finetune_steps) < 0:
        raise UsageError("--test-graphs and --tune-graphs must be >= 1, --learned-steps and --finetune-steps >= 0")
    base = load_config(args.config, args.overrides)
    if base.task.name != "graph_consensus":
        raise UsageError(f"compare runs on task graph_consensus; {args.config} has task {base.task.name!r}")
    if args.rounds < base.model.n_layer:
        raise UsageError(f"--rounds ({args.rounds}) must be at least model.n_layer ({base.model.n_layer})")
    task = build_task(base)  # validates the task options
    setting = Setting(graph_family(task.options), base.model.n_layer, args.rounds, args.test_graphs, args.tune_graphs,
                      base.train.batch_size, task.options.mu_scale, args.learned_steps, args.finetune_steps)
    out = claim_output_dir(args.out, "compare", args.force, reusable=True)
    command = " ".join(["pdmm-bridge compare", str(args.config), "--residuals", ",".join(residuals) or "none",
                        "--tied", ",".join(tied) or "none", "--seeds", ",".join(map(str, seeds)),
                        "--rounds", str(args.rounds), *(f"--set {o}" for o in args.overrides)])
    key = {"setting": repr(setting), "residuals": residuals, "tied": tied, "overrides": args.overrides}
    try:
        results = {seed: seed_result(args, out, setting, seed, residuals, tied, key) for seed in seeds}
    except KeyboardInterrupt:
        print(f"pdmm-bridge compare: interrupted; finished seeds are kept in {out / 'seeds'} and trained runs in "
              f"{out / 'runs'}: run the same command again to resume", file=sys.stderr)
        raise SystemExit(130) from None
    sent = {label: numbers_sent(label, base.model.d_model if "transformer (" in label and not label.startswith("pdmm")
                                else None) for label, _ in results[seeds[0]].log_errors}
    table = CompareTable.from_seeds(setting, results, sent)
    text = write_outputs(out, table, setting, command)
    if args.results:
        figures = Path(args.results).parent / "figures"
        figures.mkdir(parents=True, exist_ok=True)
        for name in ("compare.png", "compare_all.png"):
            shutil.copyfile(out / name, figures / name)
        replace_section(args.results, "compare", text.replace("](compare", "](figures/compare"),
                        scale={"seeds": len(seeds), "rounds": args.rounds}, force=args.force)
    print(out / "compare.md")
    return 0


def write_outputs(out, table, setting, command):
    """compare.csv, compare.json, compare.png, compare_all.png and compare.md in out; returns the Markdown."""
    rows = table.rows()
    with open(out / "compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "compare.json").write_text(json.dumps({"version": package_version(), "command": command,
                                                  "setting": repr(setting), "seeds": table.seeds,
                                                  "fitted": {str(s): f for s, f in table.fitted.items()}}, indent=1))
    plot(table, headline_methods(table), out / "compare.png")
    plot(table, {name: table.methods for name in table.sets}, out / "compare_all.png")
    text = markdown(table, setting, command)
    (out / "compare.md").write_text(text)
    return text


def final(table, method, name):
    """The method's mean log10 error at the last round it is shown for, on set `name`."""
    return float(np.mean(table.log_errors[(method, name)][:, table.shown(method) - 1]))


def headline_methods(table):
    """{set: at most six methods}: the Bayes oracle (the lower bound), the best classical method (last round),
    learned PDMM, the PDMM-transformer trained from PDMM, the best trained transformer (at its last round)
    and the standard one."""
    out = {}
    transformers = [m for m in table.methods if m.startswith(("transformer", "tied transformer"))]
    for name in table.sets:
        chosen = [BAYES, min(CLASSICAL, key=lambda m: final(table, m, name)), LEARNED, FROM_PDMM]
        if transformers:
            chosen.append(min(transformers, key=lambda m: final(table, m, name)))
        chosen += [m for m in ("transformer (standard)",) if m in table.methods]
        out[name] = list(dict.fromkeys(chosen))
    return out


def plot(table, methods, path):
    """Top row: error against round, one panel per set; bottom row: against numbers sent per edge.
    Mean over seeds (geometric) with the 95 % seed interval as a band; log error axis, cut below at a
    third of the smallest non-oracle value (the oracles reach 0 once a ball covers the graph)."""
    sets = table.sets
    fig = Figure(figsize=(4.6 * len(sets), 8.2), layout="constrained")
    axes = fig.subplots(2, len(sets), sharey="col", squeeze=False)
    shown = list(dict.fromkeys(m for name in sets for m in methods[name]))
    colours = {m: f"C{i % 10}" if len(shown) <= 10 else matplotlib.colormaps["tab20"](i % 20) for i, m in enumerate(shown)}
    for column, name in enumerate(sets):
        floor = math.inf
        for method in methods[name]:
            cells = np.array([table.cell(method, name, r) for r in range(1, table.shown(method) + 1)])
            rounds = np.arange(1, len(cells) + 1)
            if method not in (ORACLE, BAYES):
                floor = min(floor, np.nanmin(cells[:, 1] if len(table.seeds) > 1 else cells[:, 0]))
            style = dict(color=colours[method], ls="-" if "transformer" in method else "--", label=method)
            sent = table.sent.get(method)
            for row, x in ((0, rounds), (1, None if sent is None else rounds * sent)):
                if x is None:
                    continue
                ax = axes[row, column]
                ax.plot(x, cells[:, 0], **style)
                if len(table.seeds) > 1:
                    ax.fill_between(x, cells[:, 1], cells[:, 2], color=colours[method], alpha=0.15, linewidth=0)
        axes[0, column].set(title=name, xlabel="communication round", yscale="log", ylim=(floor / 3, None))
        axes[1, column].set(xlabel="numbers sent per edge (cumulative)", xscale="log", yscale="log")
        axes[0, column].legend(fontsize=6.5, loc="lower left")
        for ax in axes[:, column]:
            ax.grid(True, alpha=0.4)
    for ax in axes[:, 0]:
        ax.set(ylabel="error ||x - x*|| / ||a - x*||")
    fig.suptitle(f"mean of {len(table.seeds)} seeds, band: 95 % interval across seeds", fontsize=9)
    fig.savefig(path, dpi=110)


def fmt(cell):
    """'value [low, high]'; '0' for errors at the float64 floor."""
    value, low, high = cell
    if value < 10 * FLOOR:
        return "0"
    return f"{value:.3g}" if math.isnan(low) else f"{value:.3g} [{low:.2g}, {high:.2g}]"


def markdown(table, setting, command):
    K, R, n = table.depth, table.rounds, len(table.seeds)
    family = setting.family
    lines = ["## Transformers vs PDMM on graph_consensus", "", f"`{command}`", "",
             f"Distributed averaging, values a_i = mu + s z_i. Transformers are trained on {family.topology} graphs "
             f"with n {family.n_min}-{family.n_max}" + (f", radius {family.radius:g}" if family.radius else "")
             + f" at depth K = {K}; every method runs from x_i^0 = a_i, so round r has used r exchanges with the "
             f"neighbours. Held-out sets per seed: {setting.test_graphs} graphs x {setting.batch} value vectors each "
             "(training family; 3x larger graphs of the same mean degree; rings and square grids whose diameter "
             f"exceeds {R}). Cells: geometric mean over {n} seeds (each seed: its own training run, tuning and "
             "instances) of the per-seed geometric-mean error ||x^r - x*|| / ||a - x*|| with a 95 % t interval "
             "across seeds ('0': below float64 resolution, once every ball is the whole graph); '/ ball oracle' is the "
             "paired ratio to the r-hop ball average. Classical methods use one "
             f"rho tuned for round {R} on training-family instances; 'oracle rho schedule' takes each round's best "
             "rho there (no single run reaches it). The ball oracle is the best estimate when the offset of the values "
             "is unknown; the Bayes oracle also knows the offset prior N(0, mu_scale^2) and each instance's spread, "
             "so it is the lower bound in expectation, and a model that learned the training offsets can fall "
             "between the two. QA-PDMM with eta = L is PDMM exactly on averaging. Untied "
             f"transformers exist up to round {K}; tied ones run all {R} rounds. 'sent' is numbers sent per edge "
             "and round (the oracle needs every value in the ball).", ""]
    for name in table.sets:
        rounds = sorted({1, K, R})
        lines += [f"### {name}", "",
                  "| method | " + " | ".join(f"round {r}" for r in rounds) + f" | / ball oracle, round {K} | sent |",
                  "|---|" + "---:|" * (len(rounds) + 2)]
        for method in table.methods:
            shown = table.shown(method)
            cells = [fmt(table.cell(method, name, r)) if r <= shown else "" for r in rounds]
            sent = table.sent.get(method)
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {fmt(table.paired(method, ORACLE, name, K)[:3])} | "
                         + ("ball" if sent is None else f"{sent}") + " |")
        lines.append("")
    lines += verdicts(table)
    lines += fitted_summary(table)
    lines += ["", "![error against round and against numbers sent](compare.png)", "",
              f"*compare.png: top, error against round (log scale), one panel per held-out set; bottom, the same "
              f"against the cumulative numbers sent per edge. Lines: mean of {n} seeds; bands: 95 % interval "
              "across seeds. At most six methods per panel: the Bayes oracle, the best classical method, learned PDMM, "
              "the PDMM-transformer trained from PDMM, the best and the standard transformer; every method is in "
              "compare_all.png and compare.csv.*", ""]
    return "\n".join(lines) + "\n"


def fitted_summary(table):
    """What was fitted per seed: each classical method's rho, the PDMM-transformer's weight shift and loss."""
    fitted = [table.fitted[s] for s in table.seeds]
    rhos = {m: [f["rho tuned for the last round"][m] for f in fitted] for m in fitted[0]["rho tuned for the last round"]}
    lines = ["", "### Fitted per seed", "",
             f"rho tuned for round {table.rounds} (seeds in order): "
             + "; ".join(f"{m} " + ", ".join(f"{r:.3g}" for r in values) for m, values in rhos.items()) + "."]
    for label in (FROM_PDMM, FROM_RANDOM):
        shifts = [f[f"{label}: weight shift from pdmm"] for f in fitted]
        losses = [f[f"{label}: loss first, best"] for f in fitted]
        lines.append(f"{label}: relative weight distance from the PDMM weights " + ", ".join(f"{v:.3g}" for v in shifts)
                     + "; training loss (mean e^2 over rounds) first -> best "
                     + ", ".join(f"{a:.3g} -> {b:.3g}" for a, b in losses) + ".")
    return lines


def verdicts(table):
    """Paired comparisons, each called only where the 95 % interval of the ratio excludes 1."""
    K, R = table.depth, table.rounds
    transformers = [m for m in table.methods if m.startswith("transformer")]
    pairs = [(m, other, K) for m in transformers for other in ("pdmm", SCHEDULE, LEARNED)]
    pairs += [(FROM_PDMM, "pdmm", K), (FROM_PDMM, FROM_RANDOM, K)]
    pairs += [(m, "pdmm", R) for m in table.methods if m.startswith("tied")]
    lines = ["### Paired comparisons", "",
             f"Ratio of geometric-mean errors (first / second) over {len(table.seeds)} seeds, 95 % t interval, p of a "
             "paired t-test (scipy.stats.ttest_rel); 'better' / 'worse' only where the interval excludes 1.", "",
             "| first | second | set | round | ratio [95 % CI] | p | verdict |", "|---|---|---|---:|---:|---:|---|"]
    for first, second, r in pairs:
        for name in table.sets:
            ratio, low, high, p = table.paired(first, second, name, r)
            lines.append(f"| {first} | {second} | {name} | {r} | {fmt((ratio, low, high))} | {p:.2g} | "
                         f"{table.verdict(first, second, name, r)} |")
    tied = [m for m in table.methods if m.startswith("tied")]
    if tied:
        lines += ["", f"### Tied transformers past their training depth ({K} -> {R} rounds)", "",
                  f"| model | set | error at {K} | error at {R} | ratio {R} / {K} [95 % CI] | trend |",
                  "|---|---|---:|---:|---:|---|"]
        for method in tied:
            for name in table.sets:
                ratio, low, high, word = table.trend(method, name)
                lines.append(f"| {method} | {name} | {table.cell(method, name, K)[0]:.3g} | "
                             f"{table.cell(method, name, R)[0]:.3g} | {fmt((ratio, low, high))} | {word} |")
    for oracle in (ORACLE, BAYES):
        others = [m for m in table.methods if m not in (ORACLE, BAYES)]
        better = [f"{m} ({name})" for m in others for name in table.sets
                  if table.verdict(m, oracle, name, 1) == "better"]
        below = [f"{m} ({name})" for m in others for name in table.sets if f"{m} ({name})" not in better
                 and table.cell(m, name, 1)[0] < table.cell(oracle, name, 1)[0] * (1 - 1e-9)]
        lines += ["", f"Round 1 against the {oracle}: " + ("no method is better" if not better else
                                                          "better: " + ", ".join(better))
                  + ("; below it by less than the seed noise: " + ", ".join(below) if below else "") + "."]
    return lines
