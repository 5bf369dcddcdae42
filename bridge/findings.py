"""The comparison's findings: one declared family of headline tests, Holm-adjusted together, and the sentences
written from them (docs/guide/bridge.md, "Findings").

Per held-out set, the family holds:

- the best transformer (chosen on validation data among the widest trained transformers) after K and
  R rounds against the best classical and the best non-diverging classical row after as many rounds;
- the best one-number model (chosen on validation data among learned PDMM and the one-number
  PDMM-transformers) the same: one number per edge and round, so equal rounds are equal numbers sent;
- the best transformer after K rounds against the best classical row after w K rounds, w its numbers per
  edge and round: equal numbers sent, where the classical row gets w times the rounds;
- Chebyshev on fastest-mixing weights after K and R rounds against the best classical row: a reference
  that needs each graph offline, reported beside it.

Every row in a claim was chosen on tuning or validation instances, never on the held-out sets, so each
test was declared before the held-out numbers were seen. The words follow CompareTable.verdicts: "better"
or "worse" only at a Holm-adjusted p below 0.05 over at least five seeds.
"""

from collections import Counter
from typing import Any

from .comparison import (
    BEST,
    BEST_ONE_NUMBER,
    BEST_TRANSFORMER,
    FASTEST,
    MIN_SEEDS,
    REFERENCES,
    CompareTable,
    Comparison,
    Verdict,
)

SELECTED = (BEST_TRANSFORMER, BEST_ONE_NUMBER)


def headline_comparisons(table: CompareTable) -> list[Comparison]:
    """The headline family (module docstring), for the rows and rounds `table` has.

    Parameters
    ----------
    table : CompareTable
        The comparison.

    Returns
    -------
    list of (first, its round, second, its round, set)
    """
    K, R = table.depth, table.rounds
    out: list[Comparison] = []
    for name in table.sets:
        for method in SELECTED:
            if method not in table.methods:
                continue
            for r in sorted({K, R}):
                out += [(method, r, ref, r, name) for ref in REFERENCES if table.has(method, r) and table.has(ref, r)]
            sent = table.sent.get(method)
            if sent and sent > 1 and table.has(method, K) and table.has(BEST, sent * K):
                out.append((method, K, BEST, sent * K, name))
        if FASTEST in table.methods:
            out += [(FASTEST, r, BEST, r, name) for r in sorted({K, R}) if table.has(FASTEST, r)]
    return out


def findings(table: CompareTable) -> list[str]:
    """The findings block: the best classical rows per set and every headline claim, as Markdown lines.

    Parameters
    ----------
    table : CompareTable
        The comparison; its `fitted` (per seed) names the rows each chosen row took.

    Returns
    -------
    list of str
        Lines of Markdown, the same in compare.md, compare's output and the README: per set, the two best
        classical rows, then one line per claimed row and round with its ratio to each reference, the
        interval, p and Holm's adjusted p.
    """
    K, R, n = table.depth, table.rounds, len(table.seeds)
    verdicts = table.verdicts(headline_comparisons(table))
    lines = [
        f"Ratios of geometric-mean errors over {n} seeds, 95 % t intervals, p of the paired t-test and Holm's "
        f"adjustment over all {len(verdicts)} claims below (one family); 'better' / 'worse' only at an adjusted p "
        f"below 0.05 over at least {MIN_SEEDS} seeds{'' if n >= MIN_SEEDS else f' (these have {n})'}. Every "
        "row was chosen on tuning or validation instances, none on a held-out set; in brackets, what a node "
        "sends per edge and round and the row chosen on each seed. At equal numbers sent a row sending w numbers "
        "per round is compared with the classical row after w times its rounds, which mixes reach with message "
        f"size. {FASTEST} needs each whole graph offline: a reference, never a candidate.",
        "",
    ]
    for name in table.sets:
        refs = "; ".join(
            f"{ref}: "
            + ", ".join(
                f"{_cell(table, ref, name, r)} after {r} rounds ({_choices(table, ref, r)})"
                for r in sorted({K, R})
                if table.has(ref, r)
            )
            for ref in REFERENCES
            if ref in table.methods
        )
        lines.append(f"- **{name}**. {refs}.")
        claims: dict[tuple[str, int, int], list[Verdict]] = {}
        for v in verdicts:
            if v.set == name:
                claims.setdefault((v.first, v.round, v.round_second), []).append(v)
        lines += [f"  - {_sentence(table, group)}" for group in claims.values()]
    return lines + [""]


def _sentence(table: CompareTable, group: list[Verdict]) -> str:
    """One row after one round against its references: the row with its message size and choices, the budget,
    and per reference the ratio with its interval, p, adjusted p and the word."""
    v = group[0]
    if v.round_second != v.round:
        budget = f"after {v.round} rounds, at equal numbers sent ({v.round_second} per edge)"
    else:
        budget = f"after {v.round} rounds"
    against = "; ".join(
        f"vs {'best classical' if w.second == BEST else 'best non-diverging'} after {w.round_second}: "
        f"{w.ratio:.3g}x [{w.low:.2g}, {w.high:.2g}] (p {w.p:.2g}, Holm p {w.p_holm:.2g}), **{w.word}**"
        for w in group
    )
    return f"{_named(table, v.first, v.round)} {budget}: {against}."


def _named(table: CompareTable, method: str, r: int) -> str:
    """A row's label with what a node sends per edge and round and, for a chosen row, what it chose at round r."""
    sent = table.sent.get(method)
    parts = [] if sent is None else [f"{sent} number{'s' if sent != 1 else ''}"]
    if method in SELECTED:
        parts.append(_choices(table, method, r))
    return f"{method} [{'; '.join(parts)}]" if parts else method


def _choices(table: CompareTable, method: str, r: int) -> str:
    """Which row a chosen row took at round r, over the seeds: "chebyshev (tuned per round) on 5 seeds"."""
    picked = Counter(
        _choice(table.fitted.get(seed, table.fitted.get(str(seed), {})), method, r) for seed in table.seeds
    )
    return ", ".join(f"{row} on {count} seed{'s' if count != 1 else ''}" for row, count in picked.most_common())


def _choice(fitted: dict[str, Any], method: str, r: int) -> str:
    choices = fitted.get(f"{method} per round", {})
    return str(choices.get(r, choices.get(str(r), "not recorded")))


def _cell(table: CompareTable, method: str, name: str, r: int) -> str:
    value, low, high = table.cell(method, name, r)
    return f"{value:.3g} [{low:.2g}, {high:.2g}]"
