"""bridge: where "transformers vs the classical methods" is answered (docs/theory/attention.md sections 4, 6;
docs/averaging.md section 7).

    setting = bridge.Setting(bridge.GraphFamily("random_geometric", 64, 128, radius=0.18))
    table = bridge.compare(setting, seeds=range(5))        # bounds, classical rows tuned per round, PDMM-transformer
    bridge.compare(setting, range(5), {"transformer (standard)": 64}, train=train)  # + rows train(label, seed) trains
    table.cell("pdmm (tuned per round)", "ring", 32)       # geometric mean over seeds, 95 % interval
    table.verdicts([("learned pdmm", 32, "best classical (chosen on tuning data)", 32, "ring")])  # Holm over the list
    bridge.findings(table)                                 # the headline claims in words (bridge.findings)
    coefficients = bridge.fit_filter(spectra, degree=8)    # a safeguarded polynomial filter of W (bridge.polynomial)
    W = bridge.fastest_mixing_weights(G)                   # Xiao-Boyd weights: min ||W - 11^T/n||_2 (offline)
    bridge.ball_oracle(G, a, rounds)                       # (rounds, n, d): what r rounds can reach

    model = bridge.UnrolledPDMM(layers=10, rho=1.0, learnable=True)
    iterates = model(pdmm.averaging(G, a))                 # (K, n, d): x^1 .. x^K

    net = bridge.pdmm_transformer(rho=1.0, n_layer=10)     # a GraphTransformer whose block k is PDMM iteration k
    net(bridge.pdmm_features(G, a, 1.0), attention.TokenGraph.from_networkx(G, self_loops=False))  # (K, B, n, 1)
"""

from .comparison import CompareTable, Row, Setting, compare, row_of
from .comparison.pairing import headline_comparisons
from .consensus import GraphFamily, disagreement_error, node_features, sample_instances
from .fastest_mixing import fastest_mixing_weights
from .findings import findings
from .learned import learned_vs_constant
from .oracle import ball_oracle, bayes_ball_oracle
from .pdmm_transformer import fit_graph_model, graph_errors, pdmm_features, pdmm_transformer, weight_shift
from .polynomial import apply_filter, fit_filter, oracle_filter
from .probe import probe_model
from .selection import choose, refine
from .statistics import (
    holm,
    one_sample_test,
    paired_interval,
    paired_p,
    paired_test,
    powers,
    ratio_interval,
    side,
    significant,
    t_interval,
)
from .unrolled import UnrolledPDMM

__all__ = [
    "CompareTable",
    "GraphFamily",
    "Row",
    "Setting",
    "UnrolledPDMM",
    "apply_filter",
    "ball_oracle",
    "bayes_ball_oracle",
    "choose",
    "compare",
    "fastest_mixing_weights",
    "findings",
    "fit_filter",
    "headline_comparisons",
    "oracle_filter",
    "disagreement_error",
    "fit_graph_model",
    "graph_errors",
    "learned_vs_constant",
    "node_features",
    "pdmm_features",
    "pdmm_transformer",
    "probe_model",
    "refine",
    "row_of",
    "sample_instances",
    "weight_shift",
    # bridge.statistics: t intervals, t-tests, Holm and the verdict rule of every comparison
    "holm",
    "one_sample_test",
    "paired_interval",
    "paired_p",
    "paired_test",
    "powers",
    "ratio_interval",
    "side",
    "significant",
    "t_interval",
]
