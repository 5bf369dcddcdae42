"""pdmm-bridge compare: transformers against the classical averaging methods round by round on graph_consensus.

    pdmm-bridge compare graph_consensus --out runs/compare
    pdmm-bridge compare --from docs/compare --out runs/again     # tables and figures from the per-seed CSV

Calls bridge.comparison.compare, which for every seed trains, through this command's hook, each --residuals
variant (untied, depth K = model.n_layer), each --tied variant (one block, trained at depth K) and, for each
--widths w, the --width-residual variant limited to w numbers per edge and round (model.send_width = w, one
head) on the config's graph_consensus task into OUT/runs/<...> until the config's plateau rule stops it
(train.patience; finished runs are reused, their best weights loaded), then evaluates every row on that seed's instances
(bridge.comparison lists the rows: oracles and the polynomial bound, PDMM, averaged PDMM, ADMM, gossip,
Chebyshev and the fitted polynomial filters tuned per round, Chebyshev on fastest-mixing weights, the best
classical rows, learned PDMM, the PDMM-transformers, the trained transformers and the best transformer and
one-number model), all from x_i^0 = a_i on the same held-out instances; every choice is made on --tune-graphs
tuning and --val-graphs validation graphs of the training family (bridge.selection), never on a held-out set.
The classical rows also run to every round at which a transformer row has sent as many numbers per edge as
they have, for the verdicts at equal numbers sent. Each seed's numbers are kept in OUT/seeds/ (a killed
compare resumes there). Writes seeds.csv (every method, set, seed and round: the mean log10 error and the
numbers sent), curves.csv (learning curves), compare.csv (geometric means over seeds with 95 % t intervals
and the ratio to the best classical row), compare.json (settings, everything tuned, fitted and chosen,
training budgets and tuning effort, version), compare.md (the findings, tables and Holm-adjusted paired
verdicts at equal rounds and equal numbers sent), compare.png (at most seven lines per panel),
compare_all.png (every row) and learning.png. --readme writes the findings into the README's block.
"""

import argparse
import sys

from . import log_sinks, rundir
from .compare_options import COUNTS, row_specs


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "compare",
        help="transformers vs classical averaging round by round on graph_consensus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", nargs="?", help="a graph_consensus config: a TOML file or a built-in name")
    parser.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="regenerate the tables and figures from DIR's seeds.csv, compare.json and curves.csv "
        "(a compare output directory, or docs/compare) without training",
    )
    parser.add_argument(
        "--residuals", default="standard,belief", help="residual variants of untied transformers (comma-separated)"
    )
    parser.add_argument(
        "--tied",
        default="standard",
        help="residual variants of tied transformers, run for every round (comma-separated; 'none' for none)",
    )
    parser.add_argument(
        "--widths",
        default="2,4,8",
        help="numbers per edge and round of the width-limited transformers (model.send_width, one "
        "head; comma-separated, 'none' for none)",
    )
    parser.add_argument(
        "--width-residual",
        default="standard",
        help="the residual variant of the width-limited rows (belief needs values >= 2 numbers wide, "
        "w >= 4: the part of a 1-number MH orthogonal to a 1-number V is 0)",
    )
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds: training seed and instance draw of each")
    parser.add_argument("--rounds", type=int, default=32, help="rounds compared (>= model.n_layer)")
    for dest, (default, text) in COUNTS.items():
        parser.add_argument(f"--{dest.replace('_', '-')}", type=int, default=default, help=text)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="TABLE.KEY=VALUE",
        help="override a config key (repeatable)",
    )
    parser.add_argument("--out", default="runs/compare", help="output directory (a compare directory is resumed)")
    parser.add_argument(
        "--results",
        help="also write compare.md as section 'compare' of this Markdown file (figures to figures/ beside it)",
    )
    parser.add_argument(
        "--readme",
        help="also write the findings (the summary's claims) as section 'findings' of this Markdown file, "
        "between its '<!-- begin findings' and '<!-- end findings -->' lines (the project's README.md)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty --out that compare did not make; replace a --results section made from more seeds",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    log_sinks.add_argument(parser, "each transformer training run's rows")
    return parser


def run(args):
    if args.source:
        return regenerate(args)
    # torch and matplotlib: imported only to run (--help answers at once)
    from bridge.comparison import RowsDiffer, compare

    from .compare_report import OUTPUTS
    from .compare_runs import SeedFiles, checked_base, compare_bar, meta, row_widths, seed_key, setting_of, trainer
    from .progress import stages

    seeds, base, task = checked_base(args)
    rows = row_specs(args)
    widths = row_widths(args, rows)
    setting = setting_of(args, base, task, widths)
    log_sinks.check_available(args.log)  # before the directory is claimed
    out = rundir.claim(args.out, "compare", args.force, reusable=True, writes=OUTPUTS)
    log = log_sinks.target(args.log, out)
    files = SeedFiles(out / "seeds", seed_key(args, setting, rows), setting.horizon)
    for name in ("runs", "seeds"):  # a link at either is refused before anything trains
        rundir.refuse_link(out / name)
    try:
        with compare_bar(args, out, seeds, rows, files) as bar:  # every saved seed file is checked here, first
            table = compare(setting, seeds, widths, trainer(args, out, rows, bar, log), files, stages(bar))
    except KeyboardInterrupt:
        print(
            f"pdmm-bridge compare: interrupted; finished seeds are kept in {out / 'seeds'} and trained runs in "
            f"{out / 'runs'}: run the same command again to resume",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    except RowsDiffer as err:  # a hand-edited seed file
        raise files.refusal(err) from None
    curves = [row for seed in seeds for row in files.load(seed).curves]
    return publish(args, out, table, meta(args, base.train, setting, table), curves)


def regenerate(args):
    """compare --from DIR: the outputs from DIR's per-seed CSV and meta data, nothing trained or run."""
    from .compare_report import OUTPUTS
    from .compare_runs import load_source

    table, meta, curves = load_source(args.source)
    out = rundir.claim(args.out, "compare", args.force, reusable=True, writes=OUTPUTS)
    return publish(args, out, table, meta, curves)


def publish(args, out, table, meta, curves):
    """Write every output, the summary to stdout and, with --results and --readme, the sections of those files."""
    from .compare_report import summary, write_outputs, write_sections

    text = write_outputs(out, table, meta, curves)
    write_sections(out, table, text, args.results, args.readme, args.force)
    print("\n".join(summary(table)))
    print(out / "compare.md")
    return 0
