"""What `pdmm-bridge compare` writes from a bridge.CompareTable: CSVs, compare.md, the figures and the summary.

Everything here reads the table, the run's meta data (compare.json) and the learning curves only,
so `compare --from DIR` regenerates every output from the committed per-seed CSV without training.
"""

import csv
import io
import json
import math
from collections import Counter
from pathlib import Path

from bridge.comparison import (
    BEST,
    BEST_ONE_NUMBER,
    BEST_SAFE,
    BEST_TRANSFORMER,
    CANDIDATES,
    FITTED,
    FLOOR,
    MIN_SEEDS,
    REFERENCES,
    SEED_COLUMNS,
    CompareTable,
)
from bridge.comparison.pairing import (
    against_oracles,
    at_equal_numbers,
    at_equal_rounds,
    headline_methods,
    tied_transformers,
)
from bridge.comparison.seeds import CURVE_COLUMNS, check_fitted
from bridge.findings import findings

from . import rundir
from .plots import plot_compare, plot_learning_curves
from .results_doc import replace_section
from .rundir import write_csv

OUTPUTS = (  # what write_outputs writes into OUT (a file of these names there must be compare's own)
    "seeds.csv",
    "curves.csv",
    "compare.csv",
    "compare.json",
    "compare.png",
    "compare_all.png",
    "learning.png",
    "compare.md",
)
MAX_ROUNDS = 10_000  # compare --rounds: every row keeps a number per round and seed, and tuning runs them all
MAX_HORIZON = 1_000_000  # rounds past --rounds at which the classical rows run (w r for a row sending w numbers)


def read_csv(path):
    """The rows of a CSV file with a header, as dicts (read through rundir); a malformed one is a ValueError."""
    try:
        return list(csv.DictReader(io.StringIO(rundir.read_text(path), newline="")))
    except csv.Error as err:
        raise ValueError(f"{path}: {err}") from None


def load(directory):
    """(table, meta, curves) from a compare directory's seeds.csv, compare.json and curves.csv, each checked
    (check_meta, check_seed_rows, check_curves): a hand-edited file is a ValueError naming it."""
    try:
        meta = json.loads(rundir.read_text(directory / "compare.json"))
    except RecursionError:
        raise ValueError(f"{directory / 'compare.json'} is nested too deeply") from None
    check_meta(meta, directory / "compare.json")
    rows = read_csv(directory / "seeds.csv")
    if not rows or list(rows[0]) != list(SEED_COLUMNS):
        raise ValueError(f"{directory / 'seeds.csv'} is not a compare seeds.csv (columns {', '.join(SEED_COLUMNS)})")
    check_seed_rows(rows, max(meta["rounds"], *meta["setting"].get("checkpoints", [])), directory / "seeds.csv")
    try:
        table = CompareTable.from_seed_rows(rows, meta["rounds"], meta["depth"], meta.get("fitted"))
    except ValueError as err:  # a label that names no row
        raise ValueError(f"{directory / 'seeds.csv'}: {err}") from None
    curves = read_csv(directory / "curves.csv") if (directory / "curves.csv").is_file() else []
    check_curves(curves, directory / "curves.csv")
    return table, meta, curves


def _integer(value, low=0, high=None) -> bool:
    """Whether `value` is an int (not a bool) from `low` to `high`."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value and (high is None or value <= high)


def check_meta(meta, path) -> None:
    """ValueError naming compare.json unless it has what the report reads: command (text), rounds >= depth >= 1,
    setting (an object with family, test_graphs, batch, integer checkpoints) and fitted ({seed: check_fitted})."""
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected an object")
    if not (_integer(meta.get("depth"), 1) and _integer(meta.get("rounds"), meta["depth"], MAX_ROUNDS)):
        raise ValueError(f"{path}: rounds and depth must be integers with 1 <= depth <= rounds <= {MAX_ROUNDS}")
    setting = meta.get("setting")
    if not (
        isinstance(meta.get("command"), str)
        and isinstance(setting, dict)
        and all(key in setting for key in ("family", "test_graphs", "batch"))
        and isinstance(setting.get("checkpoints", []), list)
        and all(_integer(r, 1, MAX_HORIZON) for r in setting.get("checkpoints", []))
    ):
        raise ValueError(f"{path}: expected command (text) and setting (family, test_graphs, batch, checkpoints)")
    fitted = meta.get("fitted", {})
    if not isinstance(fitted, dict):
        raise ValueError(f"{path}: fitted must be an object of seeds")
    for seed, values in fitted.items():
        check_fitted(values, f"{path}, fitted seed {seed}")


def check_seed_rows(rows, horizon, path) -> None:
    """ValueError naming seeds.csv unless every row has a seed >= 0, a round from 1 to `horizon` (the
    compare's rounds and checkpoints: a table is seeds x horizon numbers), a number and an empty or integer
    numbers_sent."""
    for number, row in enumerate(rows, 2):
        try:
            good = int(row["seed"]) >= 0 and 1 <= int(row["round"]) <= horizon
            float(row["log10_error"])
            good = good and (row["numbers_sent"] == "" or int(row["numbers_sent"]) >= 0)
        except (TypeError, ValueError):
            good = False
        if not good:
            raise ValueError(
                f"{path}, line {number}: expected a seed >= 0, a round from 1 to {horizon}, a number and "
                "numbers_sent empty or an integer >= 0"
            )


def check_curves(curves, path) -> None:
    """ValueError naming curves.csv unless its rows have CURVE_COLUMNS with an integer step and a number val_loss."""
    for number, row in enumerate(curves, 2):
        try:
            int(row["step"])
            float(row["val_loss"])
            good = all(row.get(column) is not None for column in CURVE_COLUMNS)
        except (KeyError, TypeError, ValueError):
            good = False
        if not good:
            raise ValueError(
                f"{path}, line {number}: expected {', '.join(CURVE_COLUMNS)} with an integer step and a number val_loss"
            )


def write_outputs(out, table, meta, curves):
    """seeds.csv, curves.csv, compare.csv, compare.json, compare.png, compare_all.png, learning.png and compare.md
    in `out`; returns the Markdown."""
    write_csv(out / "seeds.csv", table.seed_rows(), SEED_COLUMNS)
    write_csv(out / "curves.csv", curves, CURVE_COLUMNS)
    rows = table.summary_rows()
    write_csv(out / "compare.csv", rows, rows[0])
    rundir.write_file(out / "compare.json", json.dumps(meta, indent=1))
    plot_compare(table, headline_methods(table), out / "compare.png")
    plot_compare(table, {name: table.methods for name in table.sets}, out / "compare_all.png")
    if curves:
        plot_learning_curves(curves, out / "learning.png")
    text = markdown(table, meta, curves)
    rundir.write_file(out / "compare.md", text)
    return text


def write_sections(out, table, text, results=None, readme=None, force=False):
    """compare.md's text `text` as section "compare" of the Markdown file `results` (its figures copied to
    figures/ beside it) and the findings as section "findings" of `readme` (results_doc.replace_section: a
    section made from more seeds is refused unless `force`); either None: not written."""
    if results:
        figures = rundir.make_dir(Path(results).parent / "figures")
        for name in ("compare.png", "compare_all.png", "learning.png"):
            if (out / name).is_file():
                rundir.copy_file(out / name, figures / name)
        replace_section(
            results,
            "compare",
            text.replace("](compare", "](figures/compare").replace("](learning", "](figures/learning"),
            scale={"seeds": len(table.seeds), "rounds": table.rounds},
            force=force,
        )
    if readme:
        replace_section(readme, "findings", "\n".join(findings(table)), scale={"seeds": len(table.seeds)}, force=force)


def fmt(cell):
    """'value [low, high]'; '0' for errors at the float64 floor."""
    value, low, high = cell
    if value < 10 * FLOOR:
        return "0"
    return f"{value:.3g}" if math.isnan(low) else f"{value:.3g} [{low:.2g}, {high:.2g}]"


def summary(table):
    """The findings (bridge.findings): the best classical rows per set and the headline claims, Holm-adjusted as
    one family. Lines of Markdown, also printed by compare."""
    return ["### Findings", "", *findings(table)]


def verdict_table(table, pairs, title, note):
    """A Markdown table of paired verdicts (first, round, second, its round) per set: one family, its p-values
    Holm-adjusted together (CompareTable.verdicts)."""
    lines = [
        f"### {title}",
        "",
        note,
        "",
        "| first | round | second | round | set | ratio [95 % CI] | p | Holm p | verdict |",
        "|---|---:|---|---:|---|---:|---:|---:|---|",
    ]
    comparisons = [(first, r, second, r_second, name) for first, r, second, r_second in pairs for name in table.sets]
    for v in table.verdicts(comparisons):
        lines.append(
            f"| {v.first} | {v.round} | {v.second} | {v.round_second} | {v.set} | "
            f"{fmt((v.ratio, v.low, v.high))} | {v.p:.2g} | {v.p_holm:.2g} | {v.word} |"
        )
    return lines + [""]


def markdown(table, meta, curves):
    K, R, n = table.depth, table.rounds, len(table.seeds)
    setting = meta["setting"]
    lines = [
        "## Transformers vs classical averaging on graph_consensus",
        "",
        f"`{meta['command']}`",
        "",
        f"Distributed averaging, values a_i = mu + s z_i. Transformers are trained on {setting['family']} at depth "
        f"K = {K} until their validation loss plateaus ({meta.get('plateau rule', 'see the training table')}); "
        "every method runs from x_i^0 = a_i, so round r has used r exchanges with the neighbours. Held-out "
        f"sets per seed: {setting['test_graphs']} graphs x {setting['batch']} value vectors (training family; "
        f"3x larger graphs of the same mean degree; rings and square grids whose diameter exceeds {R}). Cells: "
        f"geometric mean over {n} seeds (each seed: its own training runs, tuning and instances) of the per-seed "
        "geometric-mean error ||x^r - x*|| / ||a - x*|| with a 95 % t interval across seeds ('0': below float64 "
        "resolution). Every choice is made on instances drawn from the training family apart from the held-out "
        f"sets (bridge.selection): classical rows are tuned per round on {setting.get('tune_graphs', '?')} tuning "
        f"graphs x {setting['batch']} value vectors, each parameter by a grid refined until two levels in a row "
        f"lower no round's error by more than 1 % ('(tuned for round {R})' rows use one setting for every "
        "round); the best classical row takes, per round, the candidate with the smallest error on "
        f"{setting.get('val_graphs', '?')} validation graphs, and the best non-diverging row the same among the "
        "rows that cannot diverge on any graph (all but Chebyshev with a tuned interval and the unguarded "
        "filter). The best transformer and the best one-number model are chosen per round on the same "
        "validation graphs, among the widest trained transformers and among learned PDMM and the one-number "
        "PDMM-transformers. Reported beside, never chosen: Chebyshev with each graph's own spectral interval, "
        "and Chebyshev on each graph's fastest-mixing weights (Xiao and Boyd), which need the whole graph "
        "offline. Bounds: the ball and Bayes oracles "
        "(what r rounds can know), and the best polynomial of each graph's Metropolis matrix, which knows the "
        "graph's spectrum (a bound on linear schemes with those weights, not an algorithm). The one-number "
        "PDMM-transformers (bridge.frontier) send what every classical row sends, one number per edge and round: "
        "untied from PDMM, trained on the training family; tied from PDMM, trained on a mixture of other "
        "topologies (Erdos-Renyi, Barabasi-Albert, random regular, denser geometric graphs) through a depth "
        "curriculum 8, 16, 32 with a loss at every round. QA-PDMM with "
        "eta = L is PDMM exactly on averaging and is not repeated. 'sent' is numbers sent per edge and round. "
        f"Each verdict table is one family of tests, Holm-adjusted; 'better' / 'worse' only at an adjusted p "
        f"below 0.05 over at least {MIN_SEEDS} seeds.",
        "",
    ]
    lines += summary(table)
    shown_rounds = sorted({1, K, R})
    for name in table.sets:
        lines += [
            f"### {name}",
            "",
            "| method | "
            + " | ".join(f"round {r}" for r in shown_rounds)
            + f" | / best classical, round {K} | / best non-diverging, round {K} | sent |",
            "|---|" + "---:|" * (len(shown_rounds) + 3),
        ]
        for method in table.methods:
            cells = [fmt(table.cell(method, name, r)) if table.has(method, r) else "" for r in shown_rounds]
            ratios = [
                fmt(table.paired(method, ref.label, name, K)[:3]) if table.has(method, K) else "" for ref in REFERENCES
            ]
            sent = table.sent.get(method)
            lines.append(
                f"| {method} | " + " | ".join(cells + ratios) + " | " + ("-" if sent is None else f"{sent}") + " |"
            )
        lines.append("")
    lines += verdict_table(
        table,
        at_equal_rounds(table),
        "Paired comparisons at equal rounds",
        f"Ratio of geometric-mean errors (first / second) over {n} seeds, 95 % t interval, p of a "
        "paired t-test (scipy.stats.ttest_rel) and Holm's adjustment over every row of this table (one family); "
        f"'better' / 'worse' only at an adjusted p below 0.05 over at least {MIN_SEEDS} seeds.",
    )
    lines += verdict_table(
        table,
        at_equal_numbers(table),
        "Paired comparisons at equal numbers sent",
        "Each model row that sends w > 1 numbers per edge and round, after r rounds, against the two "
        "best classical rows after w r rounds (one number per round): the same numbers sent per "
        "edge, so the classical rows get w times the rounds (reach and message size are mixed). For "
        "one-number rows this is the table at equal rounds. One family, Holm-adjusted.",
    )
    lines += tied_trends(table) + bound_lines(table) + training_lines(meta) + fitted_lines(meta, table)
    lines += [
        "",
        "![error against round and against numbers sent](compare.png)",
        "",
        f"*compare.png: top, error against round (log scale), one panel per held-out set; bottom, the same "
        f"against the cumulative numbers sent per edge. Lines: mean of {n} seeds; bands: 95 % interval across "
        "seeds, clipped to the axes. Dotted: bounds; dashed: classical; solid: transformers. Every row is in "
        "compare_all.png, compare.csv and, per seed, seeds.csv.*",
        "",
    ]
    if curves:
        lines += [
            "![validation loss against training step](learning.png)",
            "",
            "*learning.png: validation loss of every trained row against training step, one line per seed.*",
            "",
        ]
    return "\n".join(lines) + "\n"


def tied_trends(table):
    """How each tied model moves from round K to R on every set: one family, Holm-adjusted (CompareTable.trends)."""
    tied = tied_transformers(table)
    if not tied:
        return []
    K, R = table.depth, table.rounds
    lines = [
        f"### Tied transformers past their training depth ({K} -> {R} rounds)",
        "",
        f"| model | set | error at {K} | error at {R} | ratio {R} / {K} [95 % CI] | p | Holm p | trend |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for t in table.trends(tied):
        lines.append(
            f"| {t.method} | {t.set} | {table.cell(t.method, t.set, K)[0]:.3g} | "
            f"{table.cell(t.method, t.set, R)[0]:.3g} | {fmt((t.ratio, t.low, t.high))} | {t.p:.2g} | "
            f"{t.p_holm:.2g} | {t.word} |"
        )
    return lines + [""]


def bound_lines(table):
    """Which rows beat the ball and Bayes oracles at round 1 (only a model that learned the offset prior can): one
    family over every row, set and oracle, Holm-adjusted."""
    oracles, comparisons = against_oracles(table)
    verdicts = table.verdicts(comparisons)
    lines = []
    for oracle in oracles:
        better = [f"{v.first} ({v.set})" for v in verdicts if v.second == oracle and v.word == "better"]
        lines.append(
            f"Round 1 against the {oracle} (Holm over {len(verdicts)} tests): "
            + ("no method is better" if not better else "better: " + ", ".join(better))
            + "."
        )
    return lines + [""]


def training_lines(meta):
    """The training budget of every trained row: steps, wall time and why training stopped, over seeds."""
    fitted = meta.get("fitted", {})
    runs = _per_row(fitted, "training")
    if not runs:
        return []
    lines = [
        "### Training budget per row",
        "",
        meta.get("plateau rule", ""),
        "",
        "| row | steps (per seed) | best step | wall seconds (per seed) | stopped by |",
        "|---|---|---|---|---|",
    ]
    for label, infos in runs.items():
        lines.append(
            f"| {label} | {', '.join(str(i['steps']) for i in infos)} | "
            f"{', '.join(str(i['best_step']) for i in infos)} | "
            + ", ".join(f"{i['wall_seconds']:.0f}" for i in infos)
            + f" | {_stop_counts(infos, 'stopped_by')} |"
        )
    for row in FITTED:
        fits = [values.get(row.fit_key) for values in fitted.values() if values.get(row.fit_key)]
        if fits:
            stages = [f if isinstance(f, list) else [f] for f in fits]  # the tied one: one fit per curriculum stage
            lines.append(
                f"| {row.label} (full-batch Adam{', per depth stage' if row.tied else ''}) | "
                f"{_joined(stages, 'steps')} | {_joined(stages, 'best step')} | - | "
                + _stop_counts([f for s in stages for f in s], "stopped by")
                + " |"
            )
    return lines + [""] + tuning_lines(fitted)


def tuning_lines(fitted):
    """What tuning each classical row took, per seed: tuning instances, parameter values scored (each on every
    tuning instance), refinement levels, why it stopped and wall seconds (bridge.selection.refine)."""
    rows = _per_row(fitted, "tuning effort")
    if not rows:
        return []
    lines = [
        "### Tuning effort per classical row",
        "",
        "Beside the transformers' budget above: each classical row's parameter is chosen per round on the "
        "tuning instances (graphs x value vectors), by a start grid refined until two levels in a row lower no "
        "round's error by more than 1 %. The filters are fitted exactly per degree (values scored: the degrees); "
        "the full-batch fits give their Adam steps as values scored and their stages as levels.",
        "",
        "| row | tuning instances | values scored (per seed) | levels | stopped by | wall seconds (per seed) |",
        "|---|---:|---|---|---|---|",
    ]
    for label, infos in rows.items():
        lines.append(
            f"| {label} | {infos[0].get('instances')} | {', '.join(str(i.get('evaluations')) for i in infos)} | "
            f"{', '.join(str(i.get('levels')) for i in infos)} | {_stop_counts(infos, 'stopped by')} | "
            + ", ".join(f"{i.get('seconds', 0):.1f}" for i in infos)
            + " |"
        )
    return lines + [""]


def _per_row(fitted, section):
    """{row: [its info on each seed that has one]} from every seed's fitted[section] ({row: info}), rows in the
    order they first appear."""
    out = {}
    for values in fitted.values():
        for label, info in values.get(section, {}).items():
            out.setdefault(label, []).append(info)
    return out


def _stop_counts(infos, key):
    """Why each of `infos` stopped (info[key]) counted, sorted: "plateau 3, step cap 2"."""
    return ", ".join(f"{k} {v}" for k, v in sorted(Counter(str(i.get(key)) for i in infos).items()))


def _joined(stages, key):
    """`key` of each seed's fits, stages joined by "+" and seeds by ", " (the tied one: one fit per stage)."""
    return ", ".join("+".join(str(f[key]) for f in s) for s in stages)


def fitted_lines(meta, table):
    """What was tuned per seed: the parameters of the horizon-tuned rows and the best classical row's choices."""
    fitted = meta.get("fitted", {})
    if not fitted:
        return []
    R, K = str(table.rounds), str(table.depth)
    seeds = list(fitted)
    lines = ["### Tuned per seed", ""]
    for row in (r for r in CANDIDATES if r.fitted_key):
        values = [fitted[s].get(row.fitted_key, {}) for s in seeds]
        if all(K in v and R in v for v in values):
            lines.append(
                f"- {row.method}: {row.tuned} at rounds {K} / {R} (seeds in order): "
                + "; ".join(f"{_short(v[K])} / {_short(v[R])}" for v in values)
            )
    for row in (BEST, BEST_SAFE, BEST_TRANSFORMER, BEST_ONE_NUMBER):
        choices = [fitted[s].get(row.choice_key, {}) for s in seeds]
        if all({"1", K, R} <= set(c) for c in choices):
            lines.append(
                f"- {row.label}, the row it took at rounds 1 / {K} / {R} (seeds in order): "
                + "; ".join(" / ".join(c[r] for r in ("1", K, R)) for c in choices)
            )
    return lines + [""]


def _short(value):
    return f"({value[0]:.2g}, {value[1]:.4g})" if isinstance(value, list) else f"{value:.3g}"
