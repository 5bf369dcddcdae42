"""Transformers against the classical methods on distributed averaging, round by round and over seeds.

Seed s draws its own instances: held-out sets (bridge.consensus: the training family, larger graphs
of the same mean degree, rings and square grids, whose diameters exceed the round budget), tuning
instances and validation instances of the training family. Every method runs on the same
instances (paired) from x_i^0 = a_i, what the transformer sees, so round r has used r exchanges
with the neighbours. The statistic of one seed, method, set and round is the mean over instances
of log10 e, e = ||x^r - x*|| / ||a - x*||; across seeds a cell is the mean of those with a 95 % t
interval (shown as 10^: a geometric mean), and two methods are compared by their paired per-seed
differences. Rounds run 1..R and, for the classical rows, on to every round at which some
transformer row has sent as many numbers per edge as they have (Setting.checkpoints): a classical
method sends 1 number per edge and round, so its round c is the transformer's budget after
c / w rounds of w numbers.

Every choice (a parameter, a row) is made by bridge.selection on the tuning and validation instances and
recorded in SeedResult.fitted; the held-out sets are only run. Rows (evaluate_seed; labels in rows.py):
- bounds, not algorithms: "ball oracle" (the r-hop ball average, bridge.oracle), "bayes oracle"
  (the posterior mean given the ball under the instances' own prior and spread), and the "best
  polynomial of W per graph" (bridge.polynomial: the best expected error any scheme that applies
  a fixed polynomial of the graph's Metropolis matrix can reach, knowing the graph's spectrum);
- classical methods tuned per round: "pdmm", "averaged pdmm" (theta 1/2) and "admm" (rho), "gossip"
  (Metropolis weights, nothing to tune), "chebyshev" (Chebyshev-accelerated gossip, its spectral
  interval) and "safe chebyshev" (the interval's low end kept at -1: every eigenvalue of a Metropolis
  matrix lies in (-1, 1], where its polynomial has |p| <= 1, so it cannot diverge on any graph), each
  parameter chosen per round by bridge.selection.refine on the tuning instances (a start grid refined
  until it stops paying, TUNE_TOLERANCE); and the "polynomial filter" fitted exactly per degree on
  the tuning graphs' spectra, with the safeguard |p| <= 1 on [-1, 1] and without it (bridge.polynomial).
  "Tuned per round": the value at round r is one run with the parameter best at round r, what a user
  who knows their round budget runs; the same methods tuned for the last round R only are kept as
  "(tuned for round R)" rows;
- references that need the whole graph offline, reported beside the best classical row and never
  chosen as it: "chebyshev (own spectral interval)" (pdmm.solve's default) and Chebyshev on
  each graph's fastest-mixing weights (bridge.fastest_mixing) over their own interval;
- "best classical (chosen on tuning data)": per round, the per-round-tuned row whose choice for that
  round has the smallest error on the validation instances (training-family graphs apart from the
  tuning ones; never the held-out sets), and "best non-diverging classical" the same choice among the
  rows that cannot diverge on any graph (all but "chebyshev (tuned per round)", whose tuned interval
  misses the spectrum of rings and grids, and the unguarded filter): the references of every verdict;
- "learned pdmm" (bridge.UnrolledPDMM, per-round rho_k, theta_k) and the PDMM-transformer
  (bridge.pdmm_transformer: hand-set, trained from PDMM and from random weights), fitted to the
  tuning instances until the validation instances' loss plateaus (bridge.fitting);
- the one-number PDMM-transformers (bridge.frontier): untied from PDMM trained on the training family,
  and tied trained on a mixture of other topologies through a depth curriculum;
- "best one-number model (chosen on validation data)": per round, the one among learned PDMM and the
  hand-set and one-number PDMM-transformers with the smallest validation error, and "best transformer
  (chosen on validation data)" the same among the widest trained GraphTransformers;
- every trained GraphTransformer passed in: untied ones up to their depth, tied ones every round.

One module per job (docs/api/bridge.md lists them; docs/guide/bridge.md, "Transformers against the classical
methods, round by round"): setting (what runs, the instances, the search grids, protocol), rows (the rows as
data: Row, the catalogue, row_of), pairing (which rows are compared with which), runs (the errors of each kind of
run, SeedRun), seeds (SeedResult and its JSON form, what a cache keeps), tuning (the classical rows and the best
classical choices), fits (the fitted rows), evaluation (evaluate_seed; compare, with the caller's train hook and
cache) and table (CompareTable, verdicts and trends). The
names below are importable from bridge.comparison itself.
"""

from .evaluation import (
    RowsDiffer,
    SeedCache,
    Trained,
    compare,
    equal_sent_rounds,
    evaluate_seed,
    evaluation_stages,
)
from .rows import (
    BAYES,
    BEST,
    BEST_ONE_NUMBER,
    BEST_SAFE,
    BEST_TRANSFORMER,
    BOUNDS,
    CANDIDATES,
    CATALOGUE,
    FASTEST,
    FILTER,
    FILTER_UNGUARDED,
    FITTED,
    FROM_PDMM,
    FROM_RANDOM,
    HAND_SET,
    LEARNED,
    ONE_NUMBER,
    ONE_NUMBER_MODELS,
    ONE_NUMBER_TIED,
    ORACLE,
    OWN_INTERVAL,
    POLY_ORACLE,
    REFERENCES,
    SELECTED_MODELS,
    TUNED,
    Row,
    for_horizon,
    numbers_sent,
    per_round,
    row_of,
    transformer,
)
from .runs import classical_errors, grid_errors, mean_log, model_errors, oracle_errors
from .seeds import CURVE_COLUMNS, SeedResult, check_fitted, check_seed_json
from .setting import (
    FILTER_ROUNDS,
    FLOOR,
    INTERVAL_SEARCH,
    MIXING,
    RHO_SEARCH,
    SAFE_SEARCH,
    TUNE_TOLERANCE,
    Setting,
    compiled,
    describe,
    protocol,
)
from .table import MIN_SEEDS, SEED_COLUMNS, CompareTable, Comparison, Trend, Verdict
from .tuning import tune_classical

__all__ = [
    "BAYES",
    "BEST",
    "BEST_ONE_NUMBER",
    "BEST_SAFE",
    "BEST_TRANSFORMER",
    "BOUNDS",
    "CANDIDATES",
    "CATALOGUE",
    "CURVE_COLUMNS",
    "CompareTable",
    "Comparison",
    "FASTEST",
    "FILTER",
    "FILTER_ROUNDS",
    "FILTER_UNGUARDED",
    "FITTED",
    "FLOOR",
    "FROM_PDMM",
    "FROM_RANDOM",
    "HAND_SET",
    "INTERVAL_SEARCH",
    "LEARNED",
    "MIN_SEEDS",
    "MIXING",
    "ONE_NUMBER",
    "ONE_NUMBER_MODELS",
    "ONE_NUMBER_TIED",
    "ORACLE",
    "OWN_INTERVAL",
    "POLY_ORACLE",
    "REFERENCES",
    "Row",
    "RowsDiffer",
    "RHO_SEARCH",
    "SAFE_SEARCH",
    "SEED_COLUMNS",
    "SELECTED_MODELS",
    "SeedCache",
    "SeedResult",
    "Setting",
    "TUNED",
    "TUNE_TOLERANCE",
    "Trained",
    "Trend",
    "Verdict",
    "check_fitted",
    "check_seed_json",
    "classical_errors",
    "compare",
    "compiled",
    "describe",
    "equal_sent_rounds",
    "evaluate_seed",
    "evaluation_stages",
    "for_horizon",
    "grid_errors",
    "mean_log",
    "model_errors",
    "numbers_sent",
    "oracle_errors",
    "per_round",
    "protocol",
    "row_of",
    "transformer",
    "tune_classical",
]
