"""The comparison's rows as data (docs/guide/bridge.md, "Rows as data"): each row a frozen Row (its label, its
kind, the numbers a node sends per edge and round, whether it is tied or may diverge, which rows a chosen row
picks from, and for a classical row its method and tuned parameter, TUNED: each one's pdmm method, fixed
parameters and tuned parameter with its search), the catalogue of the fixed rows, and row_of, the one place a
label is read back into its Row (compare --from). The labels and the fitted keys built from them (Row.fitted_key,
Row.choice_key, Row.fit_key) are the rows' identity on disk (seeds.csv, compare.json) and never change."""

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..pdmm_transformer import D_MODEL
from ..selection import Search
from .setting import INTERVAL_SEARCH, MIXING, RHO_SEARCH, SAFE_SEARCH

Kind = Literal["bound", "classical", "reference", "chosen", "model", "transformer"]


@dataclass(frozen=True)
class Row:
    """One row of the comparison.

    Attributes
    ----------
    label : str
        The row's identity in seeds.csv, compare.csv, compare.json and every table.
    kind : str
        "bound" (not an algorithm: sends every value in reach), "classical" (a classical method, tuned per round
        or for the last round; learned PDMM, unrolled PDMM with fitted per-round parameters, is drawn as one),
        "reference" (needs the whole graph offline; never chosen), "chosen" (per round, one of `chosen_from`,
        picked on validation data), "model" (a PDMM-transformer) or "transformer" (a trained GraphTransformer).
    sent : int or None
        Numbers a node sends per edge and round; None for the bounds (and for the best transformer of a run
        without transformers).
    tied : bool
        One block applied every round (tied transformers and the tied one-number PDMM-transformer).
    diverging : bool
        May diverge on some graph (its polynomial exceeds 1 in magnitude where a spectrum may lie): never a
        candidate of the best non-diverging row.
    chosen_from : tuple of str
        A chosen row's candidates (empty for the best transformer: the widest trained transformers of the run).
    method : str or None
        A classical row's name in TUNED ("pdmm", "chebyshev", ...).
    tuned : str or None
        The parameter tuned ("rho", "interval"), None when there is nothing to tune.
    """

    label: str
    kind: Kind
    sent: int | None = 1
    tied: bool = False
    diverging: bool = False
    chosen_from: tuple[str, ...] = ()
    method: str | None = None
    tuned: str | None = None

    @property
    def fitted_key(self) -> str | None:
        """compare.json's key of the parameter tuned per round ("pdmm: rho per round"); None if nothing is tuned."""
        return None if self.tuned is None else f"{self.method}: {self.tuned} per round"

    @property
    def choice_key(self) -> str:
        """compare.json's key of a chosen row's choices, {round: the row it took}."""
        return f"{self.label} per round"

    @property
    def fit_key(self) -> str:
        """compare.json's key of a fitted row's full-batch fit summary (a list of them for a curriculum)."""
        return f"{self.label}: fit"

    @property
    def coefficients_key(self) -> str:
        """compare.json's key of a polynomial filter's coefficients (Chebyshev basis) at rounds 1, K and R."""
        return f"{self.label}: coefficients (chebyshev basis)"

    @property
    def shift_key(self) -> str:
        """compare.json's key of a trained PDMM-transformer's weight shift from PDMM."""
        return f"{self.label}: weight shift from pdmm"

    @property
    def is_model(self) -> bool:
        """Model rows, trained and hand-set transformers (PDMM-transformers among them) and the rows chosen among
        them, whose numbers sent per edge and round (w, 1 for the one-number ones) the verdicts at equal numbers
        sent match and the figures draw solid."""
        return self.kind in ("model", "transformer") or self.label in _CHOSEN_MODELS


# name: (pdmm method, fixed parameters, the tuned parameter and its search)
TUNED: dict[str, tuple[str, dict[str, Any], str | None, Search | None]] = {
    "pdmm": ("pdmm", {"theta": 1.0}, "rho", RHO_SEARCH),
    "averaged pdmm": ("pdmm", {"theta": 0.5}, "rho", RHO_SEARCH),
    "admm": ("admm", {}, "rho", RHO_SEARCH),
    "gossip": ("gossip", {"mixing": MIXING}, None, None),
    "chebyshev": ("chebyshev", {"mixing": MIXING}, "interval", INTERVAL_SEARCH),
    "safe chebyshev": ("chebyshev", {"mixing": MIXING}, "interval", SAFE_SEARCH),
}


def per_round(name: str) -> Row:
    """The row of classical method `name` (TUNED) tuned per round; only the tuned Chebyshev interval may diverge
    (it misses the spectrum of rings and grids)."""
    tuned = TUNED[name][2]
    label = name if tuned is None else f"{name} (tuned per round)"
    return Row(label, "classical", diverging=name == "chebyshev", method=name, tuned=tuned)


def for_horizon(name: str, rounds: int) -> Row:
    """The row of classical method `name` tuned for the last round `rounds` only."""
    return Row(f"{name} (tuned for round {rounds})", "classical", method=name, tuned=TUNED[name][2])


def transformer(residual: str, sent: int | None, tied: bool = False, width: int | None = None) -> Row:
    """A trained GraphTransformer's row: "transformer (belief)", "tied transformer (standard)" or, sending
    `width` numbers per head, "transformer (standard, w=4)"."""
    label = f"{'tied ' if tied else ''}transformer ({residual}{'' if width is None else f', w={width}'})"
    return Row(label, "transformer", sent, tied=tied)


ORACLE = Row("ball oracle", "bound", None)
BAYES = Row("bayes oracle (knows prior and s)", "bound", None)
POLY_ORACLE = Row("best polynomial of W per graph (bound)", "bound", None)
FILTER = Row("polynomial filter (fitted per round, safeguarded)", "classical")
FILTER_UNGUARDED = Row("polynomial filter (fitted per round, unguarded)", "classical", diverging=True)
OWN_INTERVAL = Row("chebyshev (own spectral interval)", "reference")
FASTEST = Row("chebyshev on fastest-mixing weights (whole graph offline)", "reference")
CANDIDATES = (*(per_round(name) for name in TUNED), FILTER, FILTER_UNGUARDED)  # what "best classical" picks from
BEST = Row("best classical (chosen on tuning data)", "chosen", chosen_from=tuple(r.label for r in CANDIDATES))
BEST_SAFE = Row(  # the same among the rows that cannot diverge on any graph
    "best non-diverging classical (chosen on tuning data)",
    "chosen",
    chosen_from=tuple(r.label for r in CANDIDATES if not r.diverging),
)
REFERENCES = (BEST, BEST_SAFE)
LEARNED = Row("learned pdmm", "classical")
HAND_SET = Row("pdmm-transformer (hand-set)", "model")
FROM_PDMM = Row("pdmm-transformer (trained from pdmm)", "model", 2 * D_MODEL)
FROM_RANDOM = Row("pdmm-transformer (trained from random)", "model", 2 * D_MODEL)
ONE_NUMBER = Row("pdmm-transformer (1 number, trained from pdmm)", "model")
ONE_NUMBER_TIED = Row("pdmm-transformer (1 number, tied, topology mixture, depth curriculum)", "model", tied=True)
FITTED = (LEARNED, FROM_PDMM, FROM_RANDOM, ONE_NUMBER, ONE_NUMBER_TIED)  # fitted full-batch: their Row.fit_key
ONE_NUMBER_MODELS = (LEARNED, HAND_SET, ONE_NUMBER, ONE_NUMBER_TIED)  # what BEST_ONE_NUMBER picks from
BEST_TRANSFORMER = Row("best transformer (chosen on validation data)", "chosen", None)  # sent: the widest's
BEST_ONE_NUMBER = Row(
    "best one-number model (chosen on validation data)", "chosen", chosen_from=tuple(r.label for r in ONE_NUMBER_MODELS)
)
SELECTED_MODELS = (BEST_TRANSFORMER, BEST_ONE_NUMBER)
BOUNDS = (ORACLE, BAYES, POLY_ORACLE)
_CHOSEN_MODELS = frozenset(r.label for r in SELECTED_MODELS)
CATALOGUE = {  # the rows whose label is fixed, by label
    row.label: row
    for row in (
        ORACLE,
        BAYES,
        POLY_ORACLE,
        *CANDIDATES,
        OWN_INTERVAL,
        FASTEST,
        BEST,
        BEST_SAFE,
        LEARNED,
        HAND_SET,
        FROM_PDMM,
        FROM_RANDOM,
        ONE_NUMBER,
        ONE_NUMBER_TIED,
        BEST_TRANSFORMER,
        BEST_ONE_NUMBER,
    )
}
_TRANSFORMER = re.compile(r"(tied )?transformer \((\w+)(?:, w=([1-9]\d*))?\)")
_HORIZON = re.compile(r"(.+) \(tuned for round ([1-9]\d*)\)")


def row_of(label: str, sent: int | None) -> Row:
    """The Row of `label` sending `sent` numbers per edge and round, as read back from seeds.csv: a catalogued row,
    a classical row tuned for the last round ("pdmm (tuned for round 32)") or a trained transformer ("transformer
    (belief)", "tied transformer (standard)", "transformer (standard, w=4)"). The only place a label is parsed.

    Parameters
    ----------
    label : str
        The row's label, as in seeds.csv.
    sent : int or None
        Its numbers sent per edge and round (None for the bounds).

    Returns
    -------
    Row
        The catalogued or built row, with `sent`.

    Raises
    ------
    ValueError
        Naming `label` when it is none of these.
    """
    if label in CATALOGUE:
        return replace(CATALOGUE[label], sent=sent)
    horizon = _horizon_row(label)
    if horizon is not None:
        return replace(horizon, sent=sent)
    found = _TRANSFORMER.fullmatch(label)
    if found:
        return transformer(found[2], sent, tied=bool(found[1]), width=None if found[3] is None else int(found[3]))
    raise ValueError(
        f"unknown row {label!r}: not a comparison row (bridge.comparison.rows), a classical row tuned for one round "
        "or a transformer such as 'transformer (standard, w=4)'"
    )


def _horizon_row(label: str) -> Row | None:
    """The row of a classical method tuned for one round ("pdmm (tuned for round 32)"); None for any other label."""
    horizon = _HORIZON.fullmatch(label)
    if horizon and horizon[1] in TUNED and TUNED[horizon[1]][2] is not None:
        return for_horizon(horizon[1], int(horizon[2]))
    return None


def numbers_sent(label: str) -> int | None:
    """Numbers a node sends per edge and round for the fixed row `label`: its catalogue Row.sent (None for the
    bounds, 2 D_MODEL = 14 for the PDMM-transformers trained with keys, 1 for every classical method and the
    one-number models), and 1 for a classical row tuned for one round. What a transformer row sends is its model's
    (evaluation.compare); compare --from reads rows back with row_of (docs/guide/bridge.md, "Rows as data").

    Raises
    ------
    ValueError
        Naming `label` when it is neither a catalogued row nor a classical row tuned for one round (a transformer's
        label included: what it sends is its model's, not the label's).
    """
    if label in CATALOGUE:
        return CATALOGUE[label].sent
    horizon = _horizon_row(label)
    if horizon is None:
        raise ValueError(
            f"unknown row {label!r}: numbers_sent knows the catalogued rows (bridge.comparison.rows.CATALOGUE) and the "
            "classical rows tuned for one round; a transformer row sends what its model sends"
        )
    return horizon.sent
