"""Which rows the comparison sets against which, read from the table's Rows (docs/guide/bridge.md, "Verdicts and
findings"): the headline methods of the figures, the family at equal rounds, the family at equal numbers sent,
the tied rows whose trend past the training depth is tested, the rows against the oracles at round 1, and the
headline family of bridge.findings. Each family is one list of comparisons, Holm-adjusted together by
CompareTable.verdicts; every row in a headline was chosen on tuning or validation data, never on a held-out set.
"""

from .rows import (
    BAYES,
    BEST,
    BEST_ONE_NUMBER,
    BEST_SAFE,
    BEST_TRANSFORMER,
    FASTEST,
    FROM_PDMM,
    FROM_RANDOM,
    LEARNED,
    ONE_NUMBER,
    ONE_NUMBER_TIED,
    ORACLE,
    POLY_ORACLE,
    REFERENCES,
    SELECTED_MODELS,
    per_round,
)
from .table import CompareTable, Comparison

Pair = tuple[str, int, str, int]  # (first row, its round, second row, its round), on every held-out set
HEADLINE = (POLY_ORACLE, BEST, BEST_SAFE, FASTEST, BEST_TRANSFORMER, BEST_ONE_NUMBER, per_round("pdmm"))
FITTED_MODELS = (FROM_PDMM, FROM_RANDOM, ONE_NUMBER, ONE_NUMBER_TIED, LEARNED)  # after the transformers, at rounds
ORACLES = (ORACLE, BAYES)  # the bounds that know only the r-hop ball


def headline_methods(table: CompareTable) -> dict[str, list[str]]:
    """{set: at most seven rows}: the polynomial bound, the two best classical rows, Chebyshev on fastest-mixing
    weights, the best transformer, the best one-number model and per-round tuned PDMM, the same on every set:
    rows chosen on tuning or validation data, never on the held-out sets."""
    return {name: [row.label for row in HEADLINE if row.label in table.methods] for name in table.sets}


def equal_numbers(table: CompareTable) -> list[tuple[str, int, int]]:
    """[(row, its round r, the round of the best classical row that has sent as many numbers)] for every model
    row (Row.is_model) sending w > 1 numbers per round, at its rounds 1 and K where round w r was evaluated
    (compare runs the classical rows to w and w K for every such row; for w = 1 equal numbers sent is equal
    rounds)."""
    out = []
    for method in table.methods:
        sent = table.rows[method].sent
        if not table.rows[method].is_model or not sent or sent == 1:
            continue
        for r in sorted({1, table.depth}):
            if table.has(method, r) and table.has(BEST.label, sent * r):
                out.append((method, r, sent * r))
    return out


def at_equal_numbers(table: CompareTable) -> list[Pair]:
    """The family at equal numbers sent: each row of equal_numbers against both best classical rows."""
    return [(m, r, ref.label, c) for m, r, c in equal_numbers(table) for ref in REFERENCES]


def at_equal_rounds(table: CompareTable) -> list[Pair]:
    """The family at equal rounds: the chosen model rows, the trained transformers and the fitted rows after 1 and
    K rounds against both best classical rows and per-round tuned PDMM, and every tied row after R rounds
    against both best classical rows."""
    K, R = table.depth, table.rounds
    models = [row.label for row in SELECTED_MODELS if row.label in table.methods]
    models += [m for m in table.methods if table.rows[m].kind == "transformer"]
    models += [row.label for row in FITTED_MODELS if row.label in table.methods]
    others = [*(ref.label for ref in REFERENCES), per_round("pdmm").label]
    pairs = [(m, r, other, r) for m in models for r in sorted({1, K}) for other in others if table.has(m, r)]
    return pairs + [
        (m, R, ref.label, R) for m in table.methods if table.rows[m].tied and table.has(m, R) for ref in REFERENCES
    ]


def tied_transformers(table: CompareTable) -> list[str]:
    """The tied trained transformers, whose trend from round K to R is tested (CompareTable.trends)."""
    return [m for m in table.methods if table.rows[m].kind == "transformer" and table.rows[m].tied]


def against_oracles(table: CompareTable) -> tuple[list[str], list[Comparison]]:
    """(the oracles in the table, the family): every row that is not a bound against the ball and Bayes oracles
    at round 1 on every set (only a model that learned the offset prior can beat them)."""
    others = [m for m in table.methods if table.rows[m].kind != "bound"]
    oracles = [o.label for o in ORACLES if o.label in table.methods]
    return oracles, [(m, 1, o, 1, name) for o in oracles for m in others for name in table.sets]


def headline_comparisons(table: CompareTable) -> list[Comparison]:
    """The headline family of bridge.findings, for the rows and rounds `table` has, per held-out set: the best
    transformer and the best one-number model after K and R rounds against both best classical rows, the best
    transformer after K rounds against the best classical row after w K rounds (w its numbers per edge and
    round: equal numbers sent), and Chebyshev on fastest-mixing weights after K and R rounds against both.

    Parameters
    ----------
    table : CompareTable
        The comparison.

    Returns
    -------
    list of (first, its round, second, its round, set)
    """
    K, R = table.depth, table.rounds
    references = [ref.label for ref in REFERENCES]
    out: list[Comparison] = []
    for name in table.sets:
        for method in (row.label for row in SELECTED_MODELS):
            if method not in table.methods:
                continue
            for r in sorted({K, R}):
                out += [(method, r, ref, r, name) for ref in references if table.has(method, r) and table.has(ref, r)]
            sent = table.rows[method].sent
            if sent and sent > 1 and table.has(method, K) and table.has(BEST.label, sent * K):
                out.append((method, K, BEST.label, sent * K, name))
        if FASTEST.label in table.methods:
            fastest = FASTEST.label
            out += [(fastest, r, ref, r, name) for r in sorted({K, R}) for ref in references if table.has(fastest, r)]
    return out
