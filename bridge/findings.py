"""The comparison's findings: one declared family of headline tests (bridge.comparison.pairing.headline_comparisons),
Holm-adjusted together, and the sentences written from them (docs/guide/bridge.md, "Verdicts and findings").

Per held-out set, the family holds:

- the best transformer (chosen on validation data among the widest trained transformers) after K and
  R rounds against the best classical and the best non-diverging classical row after as many rounds;
- the best one-number model (chosen on validation data among learned PDMM and the one-number
  PDMM-transformers) the same: one number per edge and round, so equal rounds are equal numbers sent;
- the best transformer after K rounds against the best classical row after w K rounds, w its numbers per
  edge and round: equal numbers sent, where the classical row gets w times the rounds;
- Chebyshev on fastest-mixing weights after K and R rounds against both best classical rows: a reference
  that needs each graph offline, reported beside them.

Every row in a claim was chosen on tuning or validation instances, never on the held-out sets, so each
test was declared before the held-out numbers were seen. The words follow CompareTable.verdicts: "better"
or "worse" only at a Holm-adjusted p below 0.05 over at least five seeds.
"""

from collections import Counter
from typing import Any

from .comparison import BEST, FASTEST, MIN_SEEDS, REFERENCES, CompareTable, Row, Verdict
from .comparison.pairing import headline_comparisons


def findings(table: CompareTable) -> list[str]:
    """The findings block: the best classical rows per set and every headline claim, as Markdown lines.

    Parameters
    ----------
    table : CompareTable
        The comparison; its `fitted` (per seed) names the rows each chosen row took.

    Returns
    -------
    list of str
        Lines of Markdown, the same in compare.md, compare's output and the README: a preamble, a table of the
        two best classical rows per set (with the row each seed took), and a table of the claims, one line per
        row and round, with its ratio to each reference, the interval, p, Holm's adjusted p and the word.
    """
    K, R, n = table.depth, table.rounds, len(table.seeds)
    verdicts = table.verdicts(headline_comparisons(table))
    rounds = sorted({K, R})
    references = [ref.label for ref in REFERENCES]
    lines = [
        f"Ratios of geometric-mean errors over {n} seeds (< 1: the row has the smaller error), 95 % t intervals, p "
        f"of the paired t-test and Holm's adjustment over all {len(verdicts)} claims (one family); 'better' / "
        f"'worse' only at an adjusted p below 0.05 over at least {MIN_SEEDS} seeds"
        f"{'' if n >= MIN_SEEDS else f' (these have {n}, so none is decided)'}. Every row was chosen on tuning or "
        "validation instances, none on a held-out set; in brackets, the numbers a node sends per edge and round "
        "and the row chosen on each seed. At equal numbers sent a row sending w numbers per round meets the "
        "classical row after w times its rounds, which mixes reach with message size. "
        f"{FASTEST.label} needs each whole graph offline: a reference, never a candidate.",
        "",
        "| set | "
        + " | ".join(f"{_short(ref)} after {r}" for ref in references for r in rounds if ref in table.methods)
        + " |",
        "|---|" + "---|" * sum(ref in table.methods for ref in references) * len(rounds),
    ]
    for name in table.sets:
        cells = [
            f"{_cell(table, ref, name, r)} ({_choices(table, ref, r)})" if table.has(ref, r) else ""
            for ref in references
            for r in rounds
            if ref in table.methods
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| set | row | after | vs best classical | vs best non-diverging |", "|---|---|---|---|---|"]
    claims: dict[tuple[str, str, int, int], dict[str, Verdict]] = {}
    for v in verdicts:
        claims.setdefault((v.set, v.first, v.round, v.round_second), {})[v.second] = v
    for (name, method, r, r_other), against in claims.items():
        after = f"{r} rounds" if r == r_other else f"{r} rounds, equal numbers sent ({r_other} per edge)"
        cells = [_against(against[ref]) if ref in against else "" for ref in references]
        lines.append(f"| {name} | {_named(table, method, r)} | {after} | " + " | ".join(cells) + " |")
    return lines + [""]


def _against(v: Verdict) -> str:
    """One claim's cell: the ratio with its interval, p, adjusted p and the word (the reference's round when it
    differs from the row's)."""
    at = f"after {v.round_second}: " if v.round_second != v.round else ""
    return f"{at}{v.ratio:.3g}x [{v.low:.2g}, {v.high:.2g}], p {v.p:.2g}, Holm p {v.p_holm:.2g}: **{v.word}**"


def _short(reference: str) -> str:
    return "best classical" if reference == BEST.label else "best non-diverging"


def _named(table: CompareTable, method: str, r: int) -> str:
    """A row's label with what a node sends per edge and round and, for a chosen row, what it chose at round r."""
    row = table.rows[method]
    parts = [] if row.sent is None else [f"{row.sent} number{'s' if row.sent != 1 else ''}"]
    if row.kind == "chosen" and row.is_model:
        parts.append(_choices(table, method, r))
    return f"{method} [{'; '.join(parts)}]" if parts else method


def _choices(table: CompareTable, method: str, r: int) -> str:
    """Which row a chosen row took at round r, over the seeds: "chebyshev (tuned per round) on 5 seeds"."""
    picked = Counter(
        _choice(table.fitted.get(seed, table.fitted.get(str(seed), {})), table.rows[method], r) for seed in table.seeds
    )
    return ", ".join(f"{row} on {count} seed{'s' if count != 1 else ''}" for row, count in picked.most_common())


def _choice(fitted: dict[str, Any], row: Row, r: int) -> str:
    choices = fitted.get(row.choice_key, {})
    return str(choices.get(r, choices.get(str(r), "not recorded")))


def _cell(table: CompareTable, method: str, name: str, r: int) -> str:
    value, low, high = table.cell(method, name, r)
    return f"{value:.3g} [{low:.2g}, {high:.2g}]"
