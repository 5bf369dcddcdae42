"""The comparison's rows by label: the bounds, the classical methods (TUNED: each one's pdmm method, fixed
parameters and tuned parameter with its search), the references, the fitted models and the rows chosen among
them, which rows each choice picks from, and numbers_sent, what a row sends per edge and round
(docs/guide/bridge.md, "Transformers against the classical methods, round by round"). The labels are the rows'
identity on disk (seeds.csv, compare.json)."""

from typing import Any

from ..pdmm_transformer import D_MODEL
from ..selection import Search
from .setting import INTERVAL_SEARCH, MIXING, RHO_SEARCH, SAFE_SEARCH

ORACLE, BAYES = "ball oracle", "bayes oracle (knows prior and s)"
POLY_ORACLE = "best polynomial of W per graph (bound)"
FILTER = "polynomial filter (fitted per round, safeguarded)"
FILTER_UNGUARDED = "polynomial filter (fitted per round, unguarded)"
OWN_INTERVAL = "chebyshev (own spectral interval)"
FASTEST = "chebyshev on fastest-mixing weights (whole graph offline)"
BEST = "best classical (chosen on tuning data)"
BEST_SAFE = "best non-diverging classical (chosen on tuning data)"
REFERENCES = (BEST, BEST_SAFE)
LEARNED = "learned pdmm"
HAND_SET = "pdmm-transformer (hand-set)"
FROM_PDMM, FROM_RANDOM = "pdmm-transformer (trained from pdmm)", "pdmm-transformer (trained from random)"
ONE_NUMBER = "pdmm-transformer (1 number, trained from pdmm)"
ONE_NUMBER_TIED = "pdmm-transformer (1 number, tied, topology mixture, depth curriculum)"
BEST_TRANSFORMER = "best transformer (chosen on validation data)"
BEST_ONE_NUMBER = "best one-number model (chosen on validation data)"
ONE_NUMBER_MODELS = (LEARNED, HAND_SET, ONE_NUMBER, ONE_NUMBER_TIED)  # what BEST_ONE_NUMBER chooses from
BOUNDS = (ORACLE, BAYES, POLY_ORACLE)

# name: (pdmm method, fixed parameters, the tuned parameter and its search)
TUNED: dict[str, tuple[str, dict[str, Any], str | None, Search | None]] = {
    "pdmm": ("pdmm", {"theta": 1.0}, "rho", RHO_SEARCH),
    "averaged pdmm": ("pdmm", {"theta": 0.5}, "rho", RHO_SEARCH),
    "admm": ("admm", {}, "rho", RHO_SEARCH),
    "gossip": ("gossip", {"mixing": MIXING}, None, None),
    "chebyshev": ("chebyshev", {"mixing": MIXING}, "interval", INTERVAL_SEARCH),
    "safe chebyshev": ("chebyshev", {"mixing": MIXING}, "interval", SAFE_SEARCH),
}


def per_round(name: str) -> str:
    """The row label of classical method `name` tuned per round."""
    return name if TUNED[name][2] is None else f"{name} (tuned per round)"


def for_horizon(name: str, rounds: int) -> str:
    """The row label of classical method `name` tuned for the last round only."""
    return f"{name} (tuned for round {rounds})"


def is_transformer(method: str) -> bool:
    """Whether row `method` is a trained GraphTransformer (untied or tied)."""
    return method.startswith(("transformer", "tied transformer"))


def is_model(method: str) -> bool:
    """Model rows, trained and hand-set transformers (PDMM-transformers among them) and the rows chosen among
    them, whose numbers sent per edge and round (w, 1 for the one-number ones) the verdicts at equal numbers sent
    match."""
    return is_transformer(method) or method.startswith("pdmm-transformer") or method in SELECTED_MODELS


SELECTED_MODELS = (BEST_TRANSFORMER, BEST_ONE_NUMBER)
CANDIDATES = [per_round(name) for name in TUNED] + [FILTER, FILTER_UNGUARDED]  # what "best classical" chooses from
DIVERGING = (per_round("chebyshev"), FILTER_UNGUARDED)  # |p| > 1 where a graph's spectrum may lie
NON_DIVERGING = [label for label in CANDIDATES if label not in DIVERGING]  # what "best non-diverging" chooses from


def numbers_sent(label: str, models: dict[str, Any] | None = None) -> int | None:
    """Numbers a node sends per edge and round for row `label`: None for the bounds (every value in the
    ball; the spectrum), a trained transformer's keys and values (models[label].numbers_sent), the best
    transformer's those of the widest trained transformers it chooses from, the PDMM-transformer's
    2 D_MODEL = 14 when trained with keys, else 1 (every classical method and the one-number models send one
    number per edge at d = 1)."""
    models = models or {}
    if label in BOUNDS:
        return None
    if label in (FROM_PDMM, FROM_RANDOM):
        return 2 * D_MODEL
    if label == BEST_TRANSFORMER:
        return max((model.numbers_sent for model in models.values()), default=None)
    return models[label].numbers_sent if label in models else 1
