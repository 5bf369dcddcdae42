"""Transformers against PDMM on distributed averaging, round by round and over seeds.

Seed s draws its own instances: held-out sets (bridge.consensus: the training family, larger graphs
of the same mean degree, rings and square grids, whose diameters exceed the round budget) and
tuning instances of the training family. Every method runs on the same instances (paired) from
x_i^0 = a_i, what the transformer sees, so round r has used r exchanges with the neighbours. The
statistic of one seed, method, set and round is the mean over instances of log10 e, e = ||x^r - x*||
/ ||a - x*||; across seeds a cell is the mean of those with a 95 % t interval (shown as 10^: a
geometric mean), and two methods are compared by their paired per-seed differences.

Rows (evaluate_seed):
- "ball oracle": the r-hop ball average (bridge.oracle), the best estimate from what a node can
  know after r rounds when the common offset of the values is unknown;
- "bayes oracle (knows prior and s)": the posterior mean given the ball under the instances' own
  prior (offset ~ N(0, mu_scale^2), spread s known): the lower bound in expectation for any method,
  below the ball average because a model can learn the offset prior of its training data;
- "pdmm", "averaged pdmm" (theta 1/2), "qa-pdmm" (eta = L: on averaging PDMM exactly) and "admm",
  each at one rho of RHO_GRID tuned for the last round on the tuning instances (what a user runs);
- "pdmm, oracle rho schedule": round r at the rho best for round r, an envelope no single run reaches;
- "learned pdmm": bridge.UnrolledPDMM with per-round rho_k, theta_k fitted to the tuning instances;
- "pdmm-transformer (hand-set)": bridge.pdmm_transformer at PDMM's rho, equal to the "pdmm" row;
  "pdmm-transformer (trained from pdmm)" / "(trained from random)": that architecture, depth K,
  fitted to the tuning instances from the PDMM weights / from random weights;
- every trained GraphTransformer passed in: untied ones up to their depth, tied ones every round.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import stats

import attention
import pdmm
from pdmm.methods import METHODS

from .consensus import GraphFamily, disagreement_error, node_features, sample_instances
from .learned import fit
from .oracle import ball_oracle, bayes_ball_oracle
from .pdmm_transformer import D_MODEL, fit_graph_model, pdmm_features, pdmm_transformer, weight_shift
from .unrolled import UnrolledPDMM

RHO_GRID = np.logspace(-2, 2, 33)
FLOOR = 1e-15  # errors below float64 resolution count as this
CLASSICAL = {"pdmm": ("pdmm", {"theta": 1.0}), "averaged pdmm": ("pdmm", {"theta": 0.5}),
             "qa-pdmm": ("qa-pdmm", {}), "admm": ("admm", {})}
ORACLE, SCHEDULE, LEARNED = "ball oracle", "pdmm, oracle rho schedule", "learned pdmm"
BAYES = "bayes oracle (knows prior and s)"
HAND_SET = "pdmm-transformer (hand-set)"
FROM_PDMM, FROM_RANDOM = "pdmm-transformer (trained from pdmm)", "pdmm-transformer (trained from random)"


@dataclass(frozen=True)
class Setting:
    """What one comparison runs: the training family, the transformers' depth K, the horizon R >= K
    rounds, instance counts (graphs x value vectors per graph) and the fitting budgets."""
    family: GraphFamily
    depth: int = 8
    rounds: int = 32
    test_graphs: int = 8
    tune_graphs: int = 4
    batch: int = 16
    mu_scale: float = 1.0
    learned_steps: int = 100
    finetune_steps: int = 200
    finetune_lr: tuple = (1e-4, 1e-2)  # Adam's lr from the PDMM weights, from random weights

    def __post_init__(self):
        if not 1 <= self.depth <= self.rounds:
            raise ValueError(f"need 1 <= depth <= rounds, got depth {self.depth}, rounds {self.rounds}")
        if min(self.test_graphs, self.tune_graphs, self.batch) < 1:
            raise ValueError("test_graphs, tune_graphs and batch must be >= 1")

    def held_out(self):
        """{set name: GraphFamily}: the training family, 3x larger graphs (radius / sqrt 3 keeps the mean
        degree of random geometric graphs), rings and k x k grids with diameter > rounds."""
        f, r = self.family, self.rounds
        radius = None if f.radius is None else f.radius / math.sqrt(3)
        k = r // 2 + 2  # a k x k grid has diameter 2 (k - 1) > r
        return {"training family": f, "larger graphs": GraphFamily(f.topology, 3 * f.n_min, 3 * f.n_max, radius),
                "ring": GraphFamily("ring", 2 * r + 2, 4 * r), "grid": GraphFamily("grid", k * k, (k + 6) ** 2)}

    def draw(self, seed):
        """({set name: [(graph, a)]}, tuning [(graph, a)]) of seed `seed`; the same for every method."""
        rng = np.random.default_rng([seed, 1])
        sets = {name: sample_instances(family, self.test_graphs, self.batch, rng, self.mu_scale)
                for name, family in self.held_out().items()}
        tuning = sample_instances(self.family, self.tune_graphs, self.batch, np.random.default_rng([seed, 2]),
                                  self.mu_scale)
        return sets, tuning


def averaging_problem(G, a):
    """pdmm.averaging on G for values a (B, n), keeping the batch axis."""
    problem = pdmm.averaging(G, a[..., None])
    problem.batched = True
    return problem


def oracle_errors(instances, rounds):
    """(rounds, instances) errors of the r-hop ball average."""
    return torch.cat([disagreement_error(torch.as_tensor(ball_oracle(G, a[..., None], rounds)[..., 0]),
                                         torch.as_tensor(a)) for G, a, *_ in instances], dim=1)


def bayes_oracle_errors(instances, rounds, offset_var):
    """(rounds, instances) errors of the posterior mean given each ball, prior and spread known (instances
    (graph, a, spreads))."""
    return torch.cat([disagreement_error(torch.as_tensor(bayes_ball_oracle(G, a, rounds, offset_var, s ** 2)),
                                         torch.as_tensor(a)) for G, a, s in instances], dim=1)


def compiled(instances):
    """[(pdmm's compiled graph, local functions, edge operator, a (B, n) tensor)] of averaging instances,
    compiled once (float64, CPU) for every run of the classical methods on them."""
    return [(*averaging_problem(G, a).compile("cpu", torch.float64), torch.as_tensor(a, dtype=torch.float64))
            for G, a, *_ in instances]


@torch.no_grad()
def classical_errors(method, params, rho, rounds, instances):
    """(rounds, instances) errors of pdmm's `method` step (pdmm.methods, as in pdmm.solve) run from
    x0 = a; `instances` from compiled()."""
    out = []
    for graph, local, edges, a in instances:
        algorithm = METHODS[method](graph, local, edges, float(rho), **params)
        state = algorithm.init(a.T[..., None])  # pdmm's state layout: x (n, B, 1)
        iterates = []
        for _ in range(rounds):
            state = algorithm.step(state)
            iterates.append(state["x"][..., 0].T)
        out.append(disagreement_error(torch.stack(iterates), a))
    return torch.cat(out, dim=1)


def tune_rho(method, params, rounds, instances):
    """(rho best after the last round, (rounds,) rho best after each round) of RHO_GRID on `instances`."""
    scores = np.stack([torch.log10(classical_errors(method, params, rho, rounds, instances)).mean(1).numpy()
                       for rho in RHO_GRID])  # (grid, rounds)
    best = np.nanargmin(scores, axis=0)
    return float(RHO_GRID[best[-1]]), RHO_GRID[best]


def schedule_errors(method, params, rhos, instances):
    """(rounds, instances): round r's errors at rhos[r] (one run per distinct rho)."""
    runs = {rho: classical_errors(method, params, rho, len(rhos), instances) for rho in set(rhos.tolist())}
    return torch.stack([runs[rho][r] for r, rho in enumerate(rhos.tolist())])


@torch.no_grad()
def model_errors(model, instances, rounds=None, features=node_features, self_loops=True):
    """(rounds, instances) errors of a GraphTransformer's readout after every round (rounds past its
    depth only for tied models), in the model's dtype."""
    p = next(model.parameters())
    out = []
    for G, a, *_ in instances:
        a = torch.as_tensor(a, dtype=p.dtype, device=p.device)
        graph = attention.TokenGraph.from_networkx(G, self_loops=self_loops)
        out.append(disagreement_error(model(features(G, a), graph, rounds=rounds)[..., 0], a).cpu())
    return torch.cat(out, dim=1).double()


def depth_of(model, rounds):
    """How many rounds a trained GraphTransformer is shown for: its depth, or every round when tied."""
    return rounds if model.tied else model.n_layer


@dataclass
class SeedResult:
    """One seed's mean log10 errors {(method, set): (rounds,) array, nan past a method's depth} and
    what was fitted on the way (tuned rhos, learned schedules, weight shifts)."""
    log_errors: dict = field(default_factory=dict)
    fitted: dict = field(default_factory=dict)


def evaluate_seed(setting, seed, transformers, progress=lambda text: None):
    """SeedResult of every row (module docstring) on seed `seed`'s instances; `transformers` maps a row
    label to that seed's trained GraphTransformer."""
    sets, tuning = setting.draw(seed)
    R, K = setting.rounds, setting.depth
    compiled_sets, compiled_tuning = {name: compiled(inst) for name, inst in sets.items()}, compiled(tuning)
    result = SeedResult()

    def record(label, errors_of, precompiled=False):
        for name, instances in sets.items():
            e = errors_of(compiled_sets[name] if precompiled else instances)
            row = np.full(R, np.nan)
            row[:len(e)] = torch.log10(e.clamp_min(FLOOR)).mean(1).numpy()
            result.log_errors[(label, name)] = row

    progress("ball oracle")
    record(ORACLE, lambda inst: oracle_errors(inst, R))
    record(BAYES, lambda inst: bayes_oracle_errors(inst, R, setting.mu_scale ** 2))
    rhos = {}
    for label, (method, params) in CLASSICAL.items():
        progress(f"tuning {label}")
        rhos[label], schedule = tune_rho(method, params, R, compiled_tuning)
        record(label, lambda inst, m=method, p=params, rho=rhos[label]: classical_errors(m, p, rho, R, inst), True)
        if label == "pdmm":
            record(SCHEDULE, lambda inst: schedule_errors(method, params, schedule, inst), True)
            result.fitted["oracle rho schedule"] = schedule.tolist()
    result.fitted["rho tuned for the last round"] = rhos

    progress("learned pdmm")
    problems = [(averaging_problem(G, a), torch.as_tensor(a.mean(1, keepdims=True)[..., None]).expand(*a.shape, 1),
                 a[..., None]) for G, a, _ in tuning]
    learned = UnrolledPDMM(R, rho=rhos["pdmm"], learnable=True)
    fit(learned, problems, setting.learned_steps)
    record(LEARNED, lambda inst: torch.cat([disagreement_error(learned(averaging_problem(G, a), x0=a[..., None])[..., 0]
                                                               .detach(), torch.as_tensor(a)) for G, a, *_ in inst], 1))
    result.fitted["learned rho_k"] = learned.rho().tolist()
    result.fitted["learned theta_k"] = learned.theta().tolist()

    progress("pdmm-transformer")
    rho = rhos["pdmm"]
    features = lambda G, a: pdmm_features(G, a, rho)  # noqa: E731
    hand_set = pdmm_transformer(rho, R, start="a")
    record(HAND_SET, lambda inst: model_errors(hand_set, inst, features=features, self_loops=False))
    reference = pdmm_transformer(rho, K, start="a")
    for label, init, lr in ((FROM_PDMM, "pdmm", setting.finetune_lr[0]), (FROM_RANDOM, "random", setting.finetune_lr[1])):
        model = pdmm_transformer(rho, K, start="a", init=init, seed=seed)
        losses = fit_graph_model(model, [(G, a) for G, a, _ in tuning], setting.finetune_steps, lr, features)
        record(label, lambda inst, m=model: model_errors(m, inst, features=features, self_loops=False))
        result.fitted[f"{label}: loss first, best"] = [losses[0], min(losses)]
        result.fitted[f"{label}: weight shift from pdmm"] = weight_shift(model, reference)

    for label, model in transformers.items():
        progress(label)
        model.eval()
        record(label, lambda inst, m=model: model_errors(m, inst, rounds=depth_of(m, R)))
    return result


def numbers_sent(label, d_model=None):
    """Numbers a node sends per edge and round for row `label`: None for the oracles (every value in the
    ball), the key and value widths 2 d_model of a transformer layer (the PDMM-transformer's D_MODEL = 7),
    else 1 (PDMM-like methods send one number per edge at d = 1)."""
    if label in (ORACLE, BAYES):
        return None
    if label in (HAND_SET, FROM_PDMM, FROM_RANDOM):
        return 2 * D_MODEL
    return 1 if d_model is None else 2 * d_model


def compare(setting, seeds, transformers=lambda seed: {}, progress=lambda text: None):
    """CompareTable of every row over `seeds`; transformers(seed) gives that seed's {label: trained
    GraphTransformer} (labels as in the table, e.g. "transformer (belief)")."""
    results, sent = {}, {}
    for seed in seeds:
        models = transformers(seed)
        results[seed] = evaluate_seed(setting, seed, models, progress)
        sent.update({label: numbers_sent(label, models[label].blocks[0].attn.config.d_model if label in models else None)
                     for label, _ in results[seed].log_errors})
    return CompareTable.from_seeds(setting, results, sent)


def t_interval(values, confidence=0.95):
    """(mean, low, high) of `values` (seeds,) with a Student t interval; (mean, nan, nan) for one value."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf((1 + confidence) / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return mean, mean - half, mean + half


@dataclass
class CompareTable:
    """Per-seed mean log10 errors of every (method, set), stacked: log_errors[(method, set)] is (seeds, rounds)."""
    seeds: list
    rounds: int
    depth: int
    log_errors: dict
    sent: dict          # method -> numbers sent per edge and round (None: unbounded, the oracle)
    fitted: dict        # seed -> what was fitted

    @classmethod
    def from_seeds(cls, setting, results, sent):
        """Stack {seed: SeedResult} into a table."""
        seeds = list(results)
        keys = list(results[seeds[0]].log_errors)
        return cls(seeds, setting.rounds, setting.depth,
                   {k: np.stack([results[s].log_errors[k] for s in seeds]) for k in keys}, sent,
                   {s: results[s].fitted for s in seeds})

    @property
    def methods(self):
        return list(dict.fromkeys(m for m, _ in self.log_errors))

    @property
    def sets(self):
        return list(dict.fromkeys(s for _, s in self.log_errors))

    def shown(self, method):
        """Rounds (1-based) at which `method` has a value."""
        row = self.log_errors[(method, self.sets[0])][0]
        return int(np.sum(~np.isnan(row)))

    def cell(self, method, name, r):
        """(geometric-mean error, 95 % low, high) over seeds after round r (1-based)."""
        mean, low, high = t_interval(self.log_errors[(method, name)][:, r - 1])
        return float(10 ** mean), float(10 ** low), float(10 ** high)

    def paired(self, method, other, name, r):
        """Paired comparison after round r: (ratio of geometric means, 95 % low, high, p of scipy's
        ttest_rel) over seeds; ratio < 1: `method` has the smaller error."""
        a, b = self.log_errors[(method, name)][:, r - 1], self.log_errors[(other, name)][:, r - 1]
        mean, low, high = t_interval(a - b)
        p = float(stats.ttest_rel(a, b).pvalue) if len(a) > 1 and np.any(a != b) else math.nan
        return float(10 ** mean), float(10 ** low), float(10 ** high), p

    def rows(self):
        """CSV rows: method, set, round, the cell and its interval, the paired ratio to the ball oracle."""
        out = []
        for (method, name), values in self.log_errors.items():
            for r in range(1, self.shown(method) + 1):
                error, low, high = self.cell(method, name, r)
                ratio, r_low, r_high, _ = self.paired(method, ORACLE, name, r)
                out.append({"method": method, "set": name, "round": r, "seeds": len(self.seeds),
                            "error": error, "error_low": low, "error_high": high,
                            "vs_oracle": ratio, "vs_oracle_low": r_low, "vs_oracle_high": r_high,
                            "sent_per_edge": None if self.sent.get(method) is None else self.sent[method] * r})
        return out

    def verdict(self, method, other, name, r):
        """'better' / 'worse' where the paired 95 % interval of the log ratio excludes 0, else 'not separable'."""
        _, low, high, _ = self.paired(method, other, name, r)
        if len(self.seeds) < 2 or math.isnan(low):
            return "not separable (one seed)"
        return "better" if high < 1 else "worse" if low > 1 else "not separable"

    def trend(self, method, name):
        """How a tied model's error moves from its training depth K to the last round R: the paired ratio
        e_R / e_K over seeds and 'keeps falling' / 'grows' / 'stalls' (interval containing 1)."""
        values = self.log_errors[(method, name)]
        mean, low, high = t_interval(values[:, self.rounds - 1] - values[:, self.depth - 1])
        if len(self.seeds) < 2:
            word = "one seed: no verdict"
        else:
            word = "keeps falling" if high < 0 else "grows" if low > 0 else "stalls"
        return float(10 ** mean), float(10 ** low), float(10 ** high), word
