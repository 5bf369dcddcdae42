"""Write BENCHMARKS.md (and its figures) from the CSVs in benchmarks/results/.

    python benchmarks/report.py                 # BENCHMARKS.md and docs/figures/benchmarks/*.png
    python benchmarks/report.py --check         # exit 1 if BENCHMARKS.md differs from what the CSVs give

Each section reads one script's CSV (benchmarks/results.py writes them) and shows, for every
distinct command line in it (--results-dir and --shared aside), that command's latest run (the last
in the file): the commands, what is measured (at most ten lines, SECTIONS below), the runs'
provenance, summary tables of at most eight columns (every column of every row stays in the CSV;
where several runs are shown, a "run" column or one table per run names each row's run) and, where
one helps, a figure. Paths on the page are relative to it (--out). The
page holds no date of its own, so the same CSVs give the same bytes; earlier runs stay in the CSVs
and earlier pages in git.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import string
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from results import REPOSITORY, RESULTS, read_rows

PAGE = REPOSITORY / "BENCHMARKS.md"
FIGURES = REPOSITORY / "docs" / "figures" / "benchmarks"
COMMAND = "python benchmarks/report.py"
MAX_COLUMNS = 8
MAX_PROSE_LINES = 10

Row = dict[str, str]


@dataclass
class Column:
    """One column of a summary table: its header, the CSV key it shows and the format of a number."""

    header: str
    key: str
    form: str = "{}"
    right: bool = True


@dataclass
class Table:
    """A summary table over the rows of one of a script's tables (`name`), optionally filtered."""

    name: str
    columns: list[Column]
    keep: Callable[[Row], bool] = lambda row: True
    caption: str = ""


@dataclass
class Section:
    """One section of the page: a heading, the script whose CSV it reads, what is measured, tables, a figure."""

    title: str
    script: str
    prose: str
    tables: list[Table]
    figure: Callable[[list[Row], Path], None] | None = None
    figure_caption: str = ""


def cell(row: Row, column: Column) -> str:
    """The text of one table cell: the CSV value formatted as the column says, "—" when empty."""
    value = row.get(column.key, "")
    if value == "":
        return "—"
    if column.form == "{}":
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    if math.isnan(number):
        return "nan"
    return column.form.format(number)


def markdown_table(rows: list[Row], columns: Sequence[Column]) -> list[str]:
    """The lines of a Markdown table of `rows`."""
    lines = ["| " + " | ".join(c.header for c in columns) + " |"]
    lines.append("|" + "".join("---:|" if c.right else "---|" for c in columns))
    lines += ["| " + " | ".join(cell(row, c) for c in columns) + " |" for row in rows]
    return lines


WHERE_OPTIONS = ("--results-dir", "--shared")  # where rows go and a note on the machine: not what is measured


def command_key(command: str) -> str:
    """`command` without --results-dir and --shared and their values: reruns differing only there are one command.

    >>> command_key("python benchmarks/bench_x.py --edges 10 --shared no --results-dir=/tmp/r")
    'python benchmarks/bench_x.py --edges 10'
    """
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: compare the text as it is
        return command
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in WHERE_OPTIONS:
            skip = True
        elif not word.startswith(tuple(option + "=" for option in WHERE_OPTIONS)):
            kept.append(word)
    return shlex.join(kept)


def latest_runs(rows: list[Row]) -> list[list[Row]]:
    """For each distinct command (command_key), the rows of its last run in the file; by date, then file order."""
    runs: dict[str, list[Row]] = {}
    order: list[str] = []
    for row in rows:
        if row["run_id"] not in runs:
            runs[row["run_id"]] = []
            order.append(row["run_id"])
        runs[row["run_id"]].append(row)
    last = {command_key(runs[run_id][0]["command"]): run_id for run_id in order}
    chosen = [run_id for run_id in order if last[command_key(runs[run_id][0]["command"])] == run_id]
    return [runs[run_id] for run_id in sorted(chosen, key=lambda r: (runs[r][0]["date_utc"], order.index(r)))]


def run_label(index: int) -> str:
    """The label of a section's index-th run shown (A, B, ...), in its table's "run" column and its bullet."""
    return string.ascii_uppercase[index] if index < 26 else str(index + 1)


def provenance(run: list[Row], label: str = "") -> str:
    """One bullet describing a run: its label (if any), date, threads, machine, torch, load, jobs, commit, source."""
    first = run[0]
    threads = first["threads"]
    parts = [first["date_utc"] + " UTC"]
    if threads.isdigit():
        parts.append(f"{threads} thread{'' if threads == '1' else 's'}")
    elif threads:
        parts.append(f"threads: {threads}")
    parts += [first["machine"], f"torch {first['torch']}"]
    if first["load_at_start"]:
        parts.append(f"load average {first['load_at_start']} at start")
    parts.append(f"other jobs: {first['shared'] or 'not recorded'}")
    parts.append(f"commit {first['commit']}" if first["commit"] else "commit not recorded")
    if first["source"].startswith("transcribed"):
        parts.append("*transcribed*" + first["source"].removeprefix("transcribed"))
    elif first["source"] != "measured":
        parts.append(first["source"])
    return "- " + (f"**{label}**: " if label else "") + "; ".join(parts) + f": `{first['command']}`"


def link(path: Path, page: Path) -> str:
    """`path` relative to the directory of `page`, with "/" separators, as the page links it."""
    return Path(os.path.relpath(Path(path).resolve(), Path(page).resolve().parent)).as_posix()


def render_section(
    section: Section, results: Path, page: Path = PAGE, figures: Path = FIGURES
) -> tuple[list[str], list[Row]]:
    """The lines of one section and the rows it shows; paths in it are relative to `page`.

    Where the section shows more than one run, every table row names its run in a first column "run" (the
    label of the run's provenance bullet); a table already at MAX_COLUMNS is split into one table per run.
    """
    runs = latest_runs(read_rows(results / f"{section.script}.csv"))
    rows = [row for run in runs for row in run]
    labels = {run[0]["run_id"]: run_label(i) for i, run in enumerate(runs)} if len(runs) > 1 else {}
    lines = [f"## {section.title}", "", "```bash"]
    lines += [run[0]["command"] for run in runs]
    lines += ["```", "", section.prose.strip(), ""]
    csv_path = link(results / f"{section.script}.csv", page)
    lines += [f"Runs shown (the latest of each command; every row is in `{csv_path}`):", ""]
    lines += [provenance(run, labels.get(run[0]["run_id"], "")) for run in runs]
    for table in section.tables:
        shown = [row for row in rows if row["table"] == table.name and table.keep(row)]
        if not shown:
            continue
        caption = [table.caption, ""] if table.caption else []
        if not labels or len({row["run_id"] for row in shown}) == 1 and len(table.columns) == MAX_COLUMNS:
            label = labels.get(shown[0]["run_id"], "")
            lines += ["", *caption, *([f"Run {label}:", ""] if label else []), *markdown_table(shown, table.columns)]
        elif len(table.columns) < MAX_COLUMNS:
            run_column = Column("run", "run", "{}", False)
            labelled = [{**row, "run": labels[row["run_id"]]} for row in shown]
            lines += ["", *caption, *markdown_table(labelled, [run_column, *table.columns])]
        else:
            lines += ["", *caption]
            for run in runs:
                part = [row for row in shown if row["run_id"] == run[0]["run_id"]]
                if part:
                    lines += [f"Run {labels[run[0]['run_id']]}:", "", *markdown_table(part, table.columns), ""]
            lines.pop()
    if section.figure is not None and rows:
        figure = link(figures / f"{section.script}.png", page)
        lines += ["", f"![{section.figure_caption}]({figure})"]
    return lines + [""], rows


def render(results: Path = RESULTS, page: Path = PAGE, figures: Path = FIGURES) -> str:
    """The whole page from the CSVs in `results`, its links relative to `page` (figures in `figures`)."""
    lines = [
        "# Benchmarks",
        "",
        f"This page is generated by `{COMMAND}` from the CSVs in `{link(results, page)}/`, one per script,",
        "which every benchmark script appends its rows to (with the run's date, commit, machine, threads",
        "and command line). Each section shows the latest run of each command; earlier runs stay in the",
        "CSVs, and earlier versions of this page are in git's history. Do not edit it by hand: run the",
        "script, then regenerate the page. Ratios are measured side by side in one run. The project",
        "machine has 2 cores and 24 GiB. Runs marked *transcribed* were copied, values as recorded, from the",
        "hand-written page of commit fd7629f.",
        "",
        "CUDA: no CUDA figure has been recorded yet (no GPU has been lent to the project so far). On a",
        "machine with one GPU, `bash benchmarks/gpu.sh` records the CUDA rows of bench_pdmm (10^7 and 10^8",
        "directed edges), bench_decentralised, bench_attention (a GPT-sized layer), bench_seeds, bench_train",
        "and bench_first_iteration, each step under a time limit (8 minutes in all on one H200), and",
        "regenerates this page; `bash benchmarks/gpu.sh --device cpu --quick` is its smoke run.",
        "",
    ]
    for section in SECTIONS:
        lines += render_section(section, results, page, figures)[0]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_figures(results: Path = RESULTS, figures: Path = FIGURES) -> list[Path]:
    """Draw each section's figure from the rows it shows; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    figures.mkdir(parents=True, exist_ok=True)
    written = []
    for section in SECTIONS:
        if section.figure is None:
            continue
        _, rows = render_section(section, results)
        if not rows:  # nothing to draw, and the page links no figure
            continue
        path = figures / f"{section.script}.png"
        section.figure(rows, path)
        written.append(path)
    return written


def _save(figure, path: Path) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for ax in figure.axes:  # plain numbers at 1, 2 and 5 on the logarithmic value axes
        if ax.get_yscale() == "log":
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
    figure.tight_layout()
    figure.savefig(path, dpi=100, metadata={"Software": None})  # no version string: same rows, same bytes


def _floats(rows: list[Row], key: str) -> list[float]:
    return [float(row[key]) for row in rows]


def pdmm_figure(rows: list[Row], path: Path) -> None:
    """ns per directed edge of the given step and of solve's step against E, fewest threads, one panel per d."""
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["table"] == "iteration" and r["mode"] == "eager"]
    threads = min((r["threads"] for r in rows), key=int, default="1")  # one thread where there are such rows
    rows = [r for r in rows if r["threads"] == threads]
    dims = sorted({int(r["d"]) for r in rows}) or [1]
    figure, axes = plt.subplots(1, len(dims), figsize=(5 * len(dims), 3.6), squeeze=False)
    for ax, d in zip(axes[0], dims, strict=True):
        for graph, marker in (("random_regular", "o"), ("random_geometric", "s")):
            chosen = sorted(
                (r for r in rows if r["graph"] == graph and int(r["d"]) == d), key=lambda r: int(r["directed_edges"])
            )
            edges = _floats(chosen, "directed_edges")
            ax.plot(edges, _floats(chosen, "given_ns_per_edge"), marker=marker, linestyle=":", label=f"{graph}, given")
            ax.plot(edges, _floats(chosen, "step_ns_per_edge"), marker=marker, label=f"{graph}, solve's step")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="directed edges",
            ylabel="ns per directed edge",
            title=f"d = {d}, {threads} thread{'' if threads == '1' else 's'}",
        )
        ax.legend(fontsize=7)
    _save(figure, path)
    plt.close(figure)


def attention_figure(rows: list[Row], path: Path) -> None:
    """Layer time and peak memory against tokens on sparse token graphs, per path and degree."""
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["table"] == "sparse"]
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    keys = sorted({(r["degree"], r["path"], r["run_id"]) for r in rows}, key=lambda k: (int(k[0]), k[1], k[2]))
    for degree, route, run_id in keys:
        chosen = sorted(
            (r for r in rows if (r["degree"], r["path"], r["run_id"]) == (degree, route, run_id)),
            key=lambda r: int(r["tokens"]),
        )
        threads = chosen[0]["threads"]
        label = f"{route}, {int(degree) + 1} neighbours, {threads} thread{'' if threads == '1' else 's'}"
        tokens = _floats(chosen, "tokens")
        axes[0].plot(tokens, _floats(chosen, "ms"), marker="o", label=label)
        axes[1].plot(tokens, _floats(chosen, "layer_peak_mb"), marker="o", label=label)
    axes[0].set(xscale="log", yscale="log", xlabel="tokens", ylabel="ms (forward + backward)")
    axes[1].set(xscale="log", yscale="log", xlabel="tokens", ylabel="layer peak MB")
    axes[0].legend(fontsize=7)
    _save(figure, path)
    plt.close(figure)


def graph_build_figure(rows: list[Row], path: Path) -> None:
    """Build + compile seconds and peak RSS against directed edges, per input."""
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["table"] == "build"]
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for kind in dict.fromkeys(r["input"] for r in rows):
        chosen = sorted((r for r in rows if r["input"] == kind), key=lambda r: int(r["directed_edges"]))
        edges = _floats(chosen, "directed_edges")
        axes[0].plot(edges, _floats(chosen, "total_s"), marker="o", label=kind)
        axes[1].plot(edges, _floats(chosen, "peak_gb"), marker="o", label=kind)
    axes[0].set(xscale="log", yscale="log", xlabel="directed edges", ylabel="build + compile s")
    axes[1].set(xscale="log", yscale="log", xlabel="directed edges", ylabel="peak RSS GB")
    axes[0].legend(fontsize=7)
    _save(figure, path)
    plt.close(figure)


SECTIONS = [
    Section(
        "Command-line start-up",
        "bench_cli",
        """
What `pdmm-bridge` costs before it does anything: whole processes `python -m experiments ARGS`, from
start to exit, for this command line (new: only the chosen command's module is imported, and
`--version`, `--help` and `configs` import no torch) against the one before the change (old: every
command imported torch, scipy.stats and the bridge up front; b650972), in paired A/B runs, 7 each
after one warm-up; the median wall time of each and the median of the pairs' ratios.
`python benchmarks/bench_cli.py --old DIR` measures it so; the transcribed run (its command is
farm-bench's) used the machine's farm-bench tool the same way, the measured one is bench_cli.py's.
""",
        [
            Table(
                "startup",
                [
                    Column("ARGS", "args", "{}", False),
                    Column("new, median wall s", "new_median_s", "{:.3f}"),
                    Column("old, median wall s", "old_median_s", "{:.2f}"),
                    Column("new / old", "new_per_old", "{:.3f}"),
                    Column("old commit", "old_commit", "{}", False),
                ],
            )
        ],
    ),
    Section(
        "One PDMM iteration: the solve loop against its bare step, a naive loop and memory",
        "bench_pdmm",
        """
Plain PDMM (theta = 1) on distributed averaging, consensus constraints, float64, one instance, on the CPU (unless
the CSV's device column says cuda), on random 4-regular and random geometric graphs (average degree 2 ln n),
sampled as arrays and numbered at random. *naive* is the four-line torch loop of the script's docstring
(docs/theory/pdmm.md section 8) on the graph as numbered, checked to give the step's iterates; *given* one bare
`PDMM.step` on the graph as numbered; *step* the step as `pdmm.solve` runs it (from 2^16 directed edges on
renumbered by reverse Cuthill-McKee and in the node form, docs/guide/solve.md, "Node form"; below, the edge step
as given); *solve* one iteration of `pdmm.solve(problem, max_iter=K, tol=0)` with its defaults (renumbered once
for all calls), K = 200-2,000. Medians per iteration; ns/edge per directed edge. Eager rows only (`--compile`'s
stay in the CSV). The allocator table runs first: glibc's default allocator, then `pdmm.keep_freed_memory()`, beside
a step into buffers allocated once. Single rows vary by 10-20 % between runs: read ratios within a row.
""",
        [
            Table(
                "iteration",
                [
                    Column("graph", "graph", "{}", False),
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("d", "d", "{:.0f}"),
                    Column("threads", "threads", "{}"),
                    Column("given ns/edge", "given_ns_per_edge", "{:.2f}"),
                    Column("step ns/edge", "step_ns_per_edge", "{:.2f}"),
                    Column("step/naive", "step_per_naive", "{:.2f}"),
                    Column("solve/step", "solve_per_step", "{:.2f}"),
                ],
                keep=lambda row: row["mode"] == "eager",
            ),
            Table(
                "allocator",
                [
                    Column("threads", "threads", "{}"),
                    Column("graph", "graph", "{}", False),
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("d", "d", "{:.0f}"),
                    Column("allocator", "allocator", "{}", False),
                    Column("step ms", "step_ms", "{:.3f}"),
                    Column("step into preallocated buffers ms", "buffered_ms", "{:.3f}"),
                ],
                caption="The allocator (ms per iteration):",
            ),
        ],
        pdmm_figure,
        "ns per directed edge against graph size, fewest threads recorded",
    ),
    Section(
        "Every method's iteration against PDMM's",
        "bench_decentralised",
        """
Averaging on a random 4-regular graph, renumbered as `pdmm.solve` renumbers it, float64, B = 1: each
method's bare `step` with its default parameters, median ms per iteration, and its ratio to PDMM's
node-form step (what solve runs on such graphs). PDMM appears in both forms. The methods on a mixing
matrix cost one sparse product with W per iteration (two for gradient tracking) and a few node-sized
operations; ADMM keeps per-edge state. The set-up (W and its spectrum) is not timed.
""",
        [
            Table(
                "methods",
                [
                    Column("method", "method", "{}", False),
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("d", "d", "{:.0f}"),
                    Column("threads", "threads", "{}"),
                    Column("ms per iteration", "ms", "{:.2f}"),
                    Column("/ pdmm (nodes)", "ratio_to_pdmm_nodes", "{:.2f}"),
                ],
            )
        ],
    ),
    Section(
        "Tuning on a grid: one run per value against the grid on the batch axis",
        "bench_tuning",
        """
`pdmm.tune` and the scoring of `pdmm-bridge compare`'s classical rows run a method at every value of a grid
(docs/decentralised.md section 8). *one run per value*: one run after another (what both did before);
*batched*: the instances tiled once per value, the values on the batch axis of one run, in batches of
`pdmm.batch_runs.BATCH_BYTES` of edge state, equal to the runs per value to 1e-12. pdmm.tune: least squares
on a random geometric graph, B = 4, d = 4, default grids, target 1e-6; "same choice" compares the values chosen.
Batch size: pdmm tuned on a larger graph, batches of one value, of BATCH_BYTES and of the whole grid, each
against one run per value. compare: seed 0's tuning instances of docs/compare's setting (64-128 nodes, B = 16
per graph) over 112 rounds; the largest relative difference of the errors (0: the same bits). Medians.
""",
        [
            Table(
                "pdmm.tune",
                [
                    Column("method", "method", "{}", False),
                    Column("nodes", "nodes", "{:.0f}"),
                    Column("values", "values", "{:.0f}"),
                    Column("max_iter", "max_iter", "{:.0f}"),
                    Column("one run per value s", "per_value_s", "{:.3f}"),
                    Column("batched s", "batched_s", "{:.3f}"),
                    Column("speed-up", "speedup", "{:.1f}x"),
                    Column("same choice", "same_choice", "{}", False),
                ],
            ),
            Table(
                "batch size",
                [
                    Column("batches of", "batches_of", "{}", False),
                    Column("nodes", "nodes", "{:.0f}"),
                    Column("MiB per value", "mib_per_value", "{:.2f}"),
                    Column("values per batch", "values_per_batch", "{:.0f}"),
                    Column("batched s", "batched_s", "{:.2f}"),
                    Column("one run per value s", "per_value_s", "{:.2f}"),
                    Column("/ one run per value", "ratio_to_per_value", "{:.2f}"),
                    Column("same choice", "same_choice", "{}", False),
                ],
            ),
            Table(
                "compare",
                [
                    Column("row", "row", "{}", False),
                    Column("tuning graphs", "graphs", "{:.0f}"),
                    Column("rounds", "rounds", "{:.0f}"),
                    Column("values", "values", "{:.0f}"),
                    Column("one run per value s", "per_value_s", "{:.3f}"),
                    Column("batched s", "batched_s", "{:.3f}"),
                    Column("speed-up", "speedup", "{:.1f}x"),
                    Column("largest relative difference", "largest_relative_difference", "{:.1e}"),
                ],
            ),
        ],
    ),
    Section(
        "The centralised reference: closed forms, Newton's method and one vectorised cvxpy problem",
        "bench_reference",
        """
`pdmm.reference` on least squares and logistic regression (random geometric graphs, d = 4, 8 rows per node),
float64, CPU, from the problem to x*. *per node*: one cvxpy term per node, as pdmm.reference built it before
(timed up to 5,000 nodes); *vectorised*: `pdmm.reference(problem, solver="CLARABEL")`, one cvxpy expression over
the stacked data; *default*: `pdmm.reference(problem)`, the closed form (sum_i P_i) x = sum_i q_i for least
squares and Newton's method from x = 0 for logistic regression (docs/guide/solve.md, "The reference").
*difference*: the largest absolute difference of the default's x* from the per-node one (the vectorised one
without a per-node run); *gradient*: the largest entry of sum_i grad f_i at each x* (0 at the optimum), default
/ per node. Table *batched*: B lasso instances (only cvxpy solves them), one cvxpy problem compiled per instance
(*separate*) against one with cvxpy Parameters that each instance assigns; *default* takes Parameters up to
`PARAMETER_NUMBERS` (8,000) numbers of data per instance; *difference*: Parameters against separate.
""",
        [
            Table(
                "reference",
                [
                    Column("problem", "problem", "{}", False),
                    Column("nodes", "nodes", "{:,.0f}"),
                    Column("per node s", "per_node_s", "{:.2f}"),
                    Column("vectorised s", "vectorised_s", "{:.2f}"),
                    Column("default s", "default_s", "{:.3g}"),
                    Column("difference", "max_difference", "{:.1e}"),
                    Column("gradient, default", "default_gradient", "{:.0e}"),
                    Column("gradient, per node", "per_node_gradient", "{:.0e}"),
                ],
            ),
            Table(
                "batched",
                [
                    Column("nodes", "nodes", "{:,.0f}"),
                    Column("instances", "instances", "{:.0f}"),
                    Column("numbers", "numbers", "{:,.0f}"),
                    Column("separate s", "separate_s", "{:.2f}"),
                    Column("parameters s", "parameters_s", "{:.2f}"),
                    Column("default s", "default_s", "{:.2f}"),
                    Column("speed-up", "speedup", "{:.2f}x"),
                    Column("difference", "max_difference", "{:.1e}"),
                ],
            ),
        ],
    ),
    Section(
        "Reading graph files",
        "bench_graph_files",
        """
One generated edge list (a path through every node, then random pairs; canonical int labels; about 20 MB at the
defaults) read in a fresh process per row: *integer* is `read_edge_list` as `pdmm.load_graph` runs it
(`integer_edge_list`: numpy.loadtxt and a numbering table), *general* the chunked reader every file took before
(`general_edge_list`, still used for labels that are not canonical ints), *graph* all of
`pdmm.load_graph(path, arrays=True)` (the integer reader, then pdmm.Graph's dedup and sort); the *graphml* rows
read a GraphML file of the first 200,000 lines' graph with networkx (what `load_graph(arrays=True)` ran before)
and with `graphml_edges` (one expat pass, what it runs now). *peak MB* is the process's peak resident memory
while reading over what was resident before (after `import pdmm`); *x arrays* that over what is returned (src,
dst and the labels; for *graph* and *graphml*, the Graph's edge array). Medians.
""",
        [
            Table(
                "edge list",
                [
                    Column("reader", "reader", "{}", False),
                    Column("file MB", "file_mb", "{:.1f}"),
                    Column("lines", "lines", "{:,.0f}"),
                    Column("seconds", "seconds", "{:.2f}"),
                    Column("peak MB", "peak_mb", "{:.0f}"),
                    Column("arrays MB", "arrays_mb", "{:.0f}"),
                    Column("x arrays", "peak_per_arrays", "{:.2f}"),
                ],
            ),
        ],
    ),
    Section(
        "Renumbering nodes inside pdmm.solve: what it costs and saves",
        "bench_reorder",
        """
One `pdmm.solve(problem, max_iter=K, tol=0)` call (averaging, d = 1, float64) on a randomly numbered
graph, with the default renumbering (reverse Cuthill-McKee) and with `reorder=False`, each in a fresh
process: the whole call (renumbering and compiling included), the iterations alone (`Result.seconds`)
and the process's peak resident memory (graph sampling included, the same in both). Both run solve's
node form. *break-even* is the number of iterations after which renumbering has paid for itself;
renumbering also holds a renumbered copy of the graph during the run (the peak memory column).
""",
        [
            Table(
                "numbering",
                [
                    Column("graph", "graph", "{}", False),
                    Column("numbering", "numbering", "{}", False),
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("solve call s", "call_s", "{:.2f}"),
                    Column("iterations s", "iterations_s", "{:.2f}"),
                    Column("ms / iteration", "ms_per_iteration", "{:.1f}"),
                    Column("peak resident MB", "peak_mb", "{:,.0f}"),
                    Column("break-even iterations", "break_even_iterations", "{:.0f}"),
                ],
            )
        ],
    ),
    Section(
        "Partitioned PDMM on 1, 2 and 4 processes",
        "bench_distributed",
        """
`pdmm.solve(problem, backend="distributed")` (averaging, plain PDMM, float64, B = 1, gloo on the CPU, the edge
form) on a random geometric graph of mean degree 20, P processes on one machine, one thread each. *METIS
cut* is the fraction of directed edges whose ends lie on different ranks under the engine's METIS
partition, *random cut* the same for a random assignment of nodes to ranks; *ms / iteration* the
difference between runs of 60 and 10 iterations over 50 (least of 3 tries), so set-up cancels;
*exchange ms* the same for the all_to_all_single swap alone. The CSV adds the numbers sent per
iteration (cut edges x B x d). On a 2-core machine 4 processes oversubscribe the cores (ms / iteration
at P = 4 is not a speed-up measure there).
""",
        [
            Table(
                "processes",
                [
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("d", "d", "{:.0f}"),
                    Column("P", "processes", "{:.0f}"),
                    Column("METIS cut", "metis_cut", "{:.4f}"),
                    Column("random cut", "random_cut", "{:.4f}"),
                    Column("ms / iteration", "iteration_ms", "{:.2f}"),
                    Column("exchange ms", "exchange_ms", "{:.2f}"),
                    Column("ns per edge x P", "ns_per_edge_times_p", "{:.1f}"),
                ],
            ),
            Table(
                "memory",
                [
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("P", "processes", "{:.0f}"),
                    Column("cut edges", "cut_edges", "{:,.0f}"),
                    Column("peak MiB above baseline, max over ranks", "peak_mib", "{:,.0f}"),
                    Column("ratio to P = 1", "ratio_to_one", "{:.3f}"),
                    Column("ms / iteration", "iteration_ms", "{:.1f}"),
                ],
                caption="Each rank holding only its part (`--shards`: `pdmm.shards.load`, then "
                '`pdmm.solve(part, backend="distributed", gather=False, form="edges")`, 60 iterations, B = d = 1): '
                "the peak resident memory (VmHWM) above the rank's own after its imports and the process group, the "
                "largest over the ranks, its ratio to P = 1's (issue 43's target at 10^7 edges, P = 4: at most "
                "0.35), and ms per iteration from `Result.seconds` (set-up excluded; at P = 4 two cores "
                "run four processes):",
            ),
        ],
    ),
    Section(
        "Simulated network effects per iteration",
        "bench_network",
        """
One iteration of plain PDMM (theta = 1, averaging, consensus, B = 1, float64) over each `pdmm.Network`
effect: `channel.draw()` (the iteration's random events) plus the step through the channel, against
the bare step without one, on a 4-regular graph (C_n(1, 2) with randomly relabelled nodes: as
scattered as a random regular graph), renumbered by reverse Cuthill-McKee as `pdmm.solve` runs it.
Per-edge and per-node rows draw their probabilities once. Each repetition times every row in turn;
medians, and the ratio to the plain step. A ratio moves by up to 0.25 between runs on this machine.
""",
        [
            Table(
                "effects",
                [
                    Column("effect", "effect", "{}", False),
                    Column("d", "d", "{:.0f}"),
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("threads", "threads", "{}"),
                    Column("ms per iteration", "ms", "{:.2f}"),
                    Column("ratio to plain", "ratio_to_plain", "{:.2f}"),
                ],
            )
        ],
    ),
    Section(
        "Attention variants against standard softmax attention",
        "bench_attention",
        """
One `attention.MultiHeadAttention` layer, forward + backward (input gradient included), float32, CPU,
tuned allocator. Variants: batch 8, 256 tokens, d_model 256, 8 heads, on the causal (LM) and full
(ViT) token graphs; each repeat runs every row once in a rotated order; *ratio* is the median of the
per-repeat ratios to standard softmax; *peak MB* the most tensor memory held at once during one call
beyond what was live before it (torch.profiler's allocation events), not resident memory. Sparse
graphs: standard softmax on a random regular graph with self loops, batch 1, along three paths: the
dense (T, T) mask, the edge list with plain autograd (*unblocked*, `graph.sparse(block=0)`) and the
edge list in blocks (*blocked*, `attention.sparse`, the default); *kB/edge* is the layer's peak per
edge. Targets (issues): attentionx <= 1.05x, belief <= 1.08x, belief_star <= 1.10x, differential <= 1.35x.
""",
        [
            Table(
                "variants",
                [
                    Column("token graph", "token_graph", "{}", False),
                    Column("residual", "residual", "{}", False),
                    Column("kernel", "kernel", "{}", False),
                    Column("symmetric", "symmetric", "{}", False),
                    Column("ms (forward + backward)", "ms", "{:.2f}"),
                    Column("ratio to standard softmax", "ratio_to_standard", "{:.3f}"),
                    Column("peak MB", "peak_mb", "{:.1f}"),
                    Column("target", "target", "{:.2f}"),
                ],
            ),
            Table(
                "sparse",
                [
                    Column("neighbours per token", "degree", "{}"),
                    Column("tokens", "tokens", "{:.0f}"),
                    Column("edges", "edges", "{:,.0f}"),
                    Column("path", "path", "{}", False),
                    Column("ms (forward + backward)", "ms", "{:.2f}"),
                    Column("ratio to unblocked", "ratio_to_unblocked", "{:.3f}"),
                    Column("layer peak MB", "layer_peak_mb", "{:.1f}"),
                    Column("layer kB/edge", "layer_kb_per_edge", "{:.2f}"),
                ],
                caption="Sparse token graphs (*neighbours per token* besides itself):",
            ),
        ],
        attention_figure,
        "layer time and peak memory against tokens on sparse token graphs",
    ),
    Section(
        "Training throughput: nanoGPT's Shakespeare CPU setting",
        "bench_train",
        """
One `pdmm-bridge train` run of experiments/configs/shakespeare_char_cpu.toml: 4 layers, 4 heads,
d_model 128, block 64, batch 12, 2000 iterations, standard softmax attention, float32 CPU, tuned
allocator; figures from the run's `summary.json` (`python benchmarks/bench_train.py` runs it and
records them). *ms per step* is forward, backward and AdamW, batch building included; the wall time
includes 8 evaluations. The validation loss is a 20-batch estimate (eval_iters = 20), so it moves by
about +-0.02 between evaluations; nanoGPT reaches 1.886 with the same setting on this machine.
""",
        [
            Table(
                "throughput",
                [
                    Column("parameters", "params", "{:,.0f}"),
                    Column("threads", "threads", "{}"),
                    Column("steps", "steps", "{:.0f}"),
                    Column("ms per step", "ms_per_step", "{:.1f}"),
                    Column("tokens per second", "tokens_per_second", "{:,.0f}"),
                    Column("wall s", "wall_s", "{:.0f}"),
                    Column("validation loss", "val_loss", "{:.3f}"),
                ],
            )
        ],
    ),
    Section(
        "Graphs from arrays",
        "bench_graph_build",
        """
Build and compile a graph as `pdmm.Graph` and `CompiledGraph.from_graph`, each row in a fresh
subprocess; peak RSS is that process's `ru_maxrss` (about 0.23 GB of it is `import pdmm`). Random
geometric graphs in the unit square, mean degree 20. *random_geometric* times the generator (points,
cKDTree pairs, sort, connectivity check) and then the compile; *from_edges* hands the same edges over
as unsorted arrays holding both directions of every edge (untimed to make; their compile includes
the connectivity check); *networkx* compiles the graph given as a networkx.Graph, next to the
per-edge loop `CompiledGraph.from_networkx` ran before (*old loop*). With `--iterations` the script
also times plain PDMM steps on the compiled graph (d = 1, float64) and the peak RSS while iterating.
""",
        [
            Table(
                "build",
                [
                    Column("input", "input", "{}", False),
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("n", "n", "{:,.0f}"),
                    Column("build s", "build_s", "{:.2f}"),
                    Column("compile s", "compile_s", "{:.2f}"),
                    Column("total s", "total_s", "{:.2f}"),
                    Column("old loop s", "old_loop_s", "{:.2f}"),
                    Column("peak RSS GB", "peak_gb", "{:.2f}"),
                ],
            ),
            Table(
                "build",
                [
                    Column("input", "input", "{}", False),
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("ms per iteration (d = 1)", "iteration_ms", "{:,.0f}"),
                    Column("peak RSS while iterating GB", "iterated_peak_gb", "{:.2f}"),
                ],
                keep=lambda row: row.get("iteration_ms", "") != "",
                caption="Iterating on the compiled graph:",
            ),
        ],
        graph_build_figure,
        "build + compile time and peak memory against graph size",
    ),
    Section(
        "Time to the first iteration",
        "bench_first_iteration",
        """
From edge arrays to the first iteration of `pdmm.solve`: a torus (4-regular, numbered row by row) handed
over as its right and down neighbour arrays, then `pdmm.Graph.from_edges`, `pdmm.averaging` (which
compiles the graph), `pdmm.plan(problem, max_iter=1, tol=0)` (checks, node order, the method built) and
`Plan.run()` (the first iteration), each phase the least of the passes (one process; *total* the least
pass, *first pass* the first pass's total with its first imports). The torus's own numbering is local
already, so solve keeps it without running reverse Cuthill-McKee (docs/guide/solve.md, "Node order").
`--profile FILE` writes a cProfile of one more pass.
""",
        [
            Table(
                "phases",
                [
                    Column("device", "device", "{}", False),
                    Column("directed edges", "directed_edges", "{:,.0f}"),
                    Column("from_edges s", "from_edges_s", "{:.2f}"),
                    Column("averaging s", "averaging_s", "{:.2f}"),
                    Column("plan s", "plan_s", "{:.2f}"),
                    Column("first iteration s", "first_s", "{:.2f}"),
                    Column("total s", "total_s", "{:.2f}"),
                    Column("first pass s", "first_pass_s", "{:.2f}"),
                ],
            )
        ],
    ),
    Section(
        "Seeds as one batched model",
        "bench_seeds",
        """
S seeds of one config, the same training steps three ways: *lone*, one model after another (the training
loop's step); *batched*, one model with every weight stacked over the seeds and its loss vmapped over them
(torch.func), per-seed clipping and AdamW; *folded*, one model on the S batches as one S-fold batch, the
bound no stacking can beat. Ratios are lone time over batched and over folded (above 1: faster); the largest
per-seed loss difference of batched from lone is shown. Models: the reproductions' character GPT
(attentionx_char.toml) and compare's graph transformer (graph_consensus.toml; every seed on seed 0's
batches, as one operation needs one graph; its sparse attention has no vmap support, so no batched row).
Dense GFLOP/s of a lone step against a 1024^3 matmul's says how compute-bound it is. On 2 cores the best
use of lone runs is two one-thread processes side by side (half run A's lone time): no row beats that,
so `sweep` and `compare` keep training seeds one run at a time.
""",
        [
            Table(
                "seeds",
                [
                    Column("model", "model", "{}", False),
                    Column("S", "seeds", "{}"),
                    Column("lone ms per seed-step", "lone_ms_per_seed_step", "{:.1f}"),
                    Column("batched / lone speed", "throughput_ratio", "{:.2f}"),
                    Column("folded / lone speed (bound)", "bound_ratio", "{:.2f}"),
                    Column("max loss difference", "max_loss_diff", "{:.1e}"),
                    Column("model GFLOP/s", "model_gflops", "{:.0f}"),
                    Column("matmul GFLOP/s", "matmul_gflops", "{:.0f}"),
                ],
            )
        ],
    ),
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS, help="where the CSVs are")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write (default BENCHMARKS.md)")
    parser.add_argument("--figures", type=Path, default=FIGURES, help="where the figures go")
    parser.add_argument("--no-figures", action="store_true", help="write the page only")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs")
    args = parser.parse_args(argv)
    page = render(args.results_dir, args.out, args.figures)
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == page
        print(f"{args.out}: {'up to date' if same else 'differs from the CSVs; run ' + COMMAND}")
        return 0 if same else 1
    args.out.write_text(page, encoding="utf-8")
    written = [] if args.no_figures else write_figures(args.results_dir, args.figures)
    print(f"wrote {args.out}" + "".join(f", {path}" for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
