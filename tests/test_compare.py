"""graph_consensus, the ball oracle, bridge.compare's baselines and statistics, and pdmm-bridge compare."""

import argparse
import csv
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from compare_fixtures import SMALL
from scipy import stats

import attention
import pdmm
from bridge.comparison import (
    BEST,
    BEST_SAFE,
    FILTER,
    FILTER_UNGUARDED,
    FLOOR,
    ORACLE,
    RHO_SEARCH,
    SAFE_SEARCH,
    TUNED,
    CompareTable,
    Row,
    RowsDiffer,
    SeedResult,
    Setting,
    Trained,
    check_seed_json,
    classical_errors,
    compare,
    compiled,
    evaluate_seed,
    evaluation_stages,
    mean_log,
    oracle_errors,
    per_round,
)
from bridge.consensus import GraphFamily, disagreement_error, node_features, sample_values
from bridge.oracle import ball_oracle, bayes_ball_oracle
from bridge.polynomial import apply_filter, fit_filter, nontrivial_spectrum
from bridge.statistics import t_interval
from experiments import compare_command
from experiments.cli import main
from experiments.compare_options import command_line
from experiments.config import load_config
from experiments.grid import parse_seeds
from experiments.plots import plot_compare
from experiments.tasks import build_task
from experiments.train import train

CONFIG = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "graph_consensus.toml"
TINY = [
    "train.max_iters=6",
    "train.eval_interval=3",
    "train.checkpoint_interval=3",
    "model.n_layer=2",
    "model.d_model=16",
    "model.n_head=2",
    "train.batch_size=4",
    "task.val_graphs=2",
    "task.n_min=8",
    "task.n_max=12",
    "task.radius=0",
]


OUTPUT_OPTIONS = ("source", "out", "results", "readme", "force", "no_progress", "log")  # where outputs go, not numbers


def parsed(argv):
    """`pdmm-bridge ARGV` parsed by the compare parser: {option: value} of every option that decides the numbers."""
    parser = compare_command.add_parser(argparse.ArgumentParser().add_subparsers())
    args = vars(parser.parse_args(argv[1:]))
    return {key: value for key, value in args.items() if key not in OUTPUT_OPTIONS}


def parsed_record(command):
    """A recorded command (compare.json's "command") parsed back the same way."""
    words = shlex.split(command)
    assert words[:2] == ["pdmm-bridge", "compare"]
    return parsed(words[1:])


def test_the_recorded_command_parses_back_to_every_option_given_and_every_default():
    argv = [
        "compare",
        "my configs/consensus.toml",
        "--residuals",
        "belief",
        "--tied",
        "none",
        "--widths",
        "4,8",
        "--width-residual",
        "belief",
        "--seeds",
        "3,1",
        "--rounds",
        "12",
        "--test-graphs",
        "4",
        "--learned-steps",
        "100",
        "--finetune-steps",
        "50",
        "--set",
        "train.lr=0.01",
        "--set=task.n_min=8",
        "--out",
        "elsewhere",
        "--no-progress",
    ]
    args = argparse.Namespace(**parsed(argv))
    recorded = command_line(args, parse_seeds(args.seeds))
    assert parsed_record(recorded) == parsed(argv)
    defaults = argparse.Namespace(**parsed(["compare", "graph_consensus"]))
    recorded = command_line(defaults, parse_seeds(defaults.seeds))
    assert parsed_record(recorded) == parsed(["compare", "graph_consensus"])
    for default in ("--test-graphs 8", "--tune-graphs 8", "--val-graphs 8", "--learned-steps 2000", "--rounds 32"):
        assert default in recorded  # written out, so a later change of a default leaves the record's meaning


def test_the_committed_comparisons_command_gives_its_recorded_setting():
    meta = json.loads((CONFIG.parents[2] / "docs" / "compare" / "compare.json").read_text())
    options = parsed_record(meta["command"])
    assert parse_seeds(options["seeds"]) == meta["seeds"] and options["rounds"] == meta["rounds"]
    assert {key: options[key] for key in ("test_graphs", "tune_graphs", "val_graphs")} == {
        key: meta["setting"][key] for key in ("test_graphs", "tune_graphs", "val_graphs")
    }
    assert (
        f"learned_steps={options['learned_steps']}, finetune_steps={options['finetune_steps']}"
        in (meta["setting"]["repr"])
    )


def test_graph_consensus_batches_and_the_disagreement_error():
    task = build_task(load_config(CONFIG, TINY))
    graph, features, a = task.train_batch(torch.Generator().manual_seed(0))
    assert features.shape == (4, graph.n, 2) and a.shape == (4, graph.n)
    torch.testing.assert_close(features[..., 0], a)
    G = nx.path_graph(3)
    assert torch.allclose(node_features(G, torch.zeros(1, 3))[0, :, 1], torch.log1p(torch.tensor([1.0, 2.0, 1.0])))
    for same in (pdmm.Graph.from_networkx(G), pdmm.Graph.from_networkx(G).adjacency()):
        torch.testing.assert_close(node_features(same, torch.ones(2, 3)), node_features(G, torch.ones(2, 3)))
    x_star = a.mean(1, keepdim=True)
    torch.testing.assert_close(disagreement_error(a, a), torch.ones(4))  # keeping a_i: error 1
    torch.testing.assert_close(disagreement_error(x_star.expand_as(a), a), torch.zeros(4))
    halfway = (a + x_star) / 2
    torch.testing.assert_close(disagreement_error(halfway, a), torch.full((4,), 0.5))


def test_graph_consensus_training_reports_error_per_run(tmp_path):
    summary = train(load_config(CONFIG, TINY), tmp_path / "run", progress=False)
    assert set(summary["final"]) == {"val_loss", "val_error"} and 0 < summary["final"]["val_error"] < 10
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    errors = [row["val_error"] for row in evals if "val_error" in row]
    assert summary["best"]["val_error"] == min(errors)  # an error is minimised, like a loss


def test_the_default_family_is_deeper_than_the_rounds_and_held_out_sets_deeper_still():
    config = load_config(CONFIG)
    family = build_task(config).family
    rng = np.random.default_rng(0)
    assert min(nx.diameter(family.sample(rng)) for _ in range(10)) > config.model.n_layer
    setting = Setting(family, depth=8, rounds=32)
    for name in ("ring", "grid"):
        assert nx.diameter(setting.held_out()[name].sample(rng)) > 32
    with pytest.raises(ValueError, match="radius"):
        GraphFamily("ring", 8, 12, radius=0.3)


def brute_force_ball_average(G, a, r):
    nodes = list(G.nodes)
    out = np.empty_like(a)
    for i, v in enumerate(nodes):
        ball = [nodes.index(u) for u in nx.single_source_shortest_path_length(G, v, cutoff=r)]
        out[..., i, :] = a[..., ball, :].mean(axis=-2)
    return out


@pytest.mark.parametrize(
    "G", [nx.path_graph(7), nx.random_labeled_tree(12, seed=1), nx.relabel_nodes(nx.grid_2d_graph(3, 4), str)]
)
def test_ball_oracle_equals_a_brute_force_average_over_each_ball(G):
    a = np.random.default_rng(0).normal(size=(2, len(G), 3))
    oracle = ball_oracle(G, a, 5)
    assert oracle.shape == (5, 2, len(G), 3)
    for r in range(1, 6):
        np.testing.assert_allclose(oracle[r - 1], brute_force_ball_average(G, a, r), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        ball_oracle(G, a[..., :-1, :], 2)
    arrays = pdmm.Graph.from_networkx(G)  # the same graph as arrays, and as a scipy adjacency matrix
    for same in (arrays, arrays.adjacency()):
        np.testing.assert_array_equal(ball_oracle(same, a, 5), oracle)
        np.testing.assert_array_equal(
            bayes_ball_oracle(same, a[..., 0], 3, 1.0, 0.5), bayes_ball_oracle(G, a[..., 0], 3, 1.0, 0.5)
        )


def test_bayes_oracle_is_gaussian_conditioning_and_beats_the_ball_average_in_mean_square():
    """Reference: E[mean(a) | a_ball] = Cov(m, a_B) Cov(a_B)^-1 a_B for a ~ N(0, tau^2 11^T + s^2 I)."""
    G = nx.random_labeled_tree(9, seed=3)
    rng = np.random.default_rng(4)
    tau2, s = 2.0, np.array([0.7, 1.6])
    a = rng.normal(scale=np.sqrt(tau2), size=(2, 1)) + s[:, None] * rng.normal(size=(2, 9))
    bayes = bayes_ball_oracle(G, a, 3, tau2, s**2)
    nodes = list(G.nodes)
    for b in range(2):
        cov = tau2 + s[b] ** 2 * np.eye(9)
        for r in range(1, 4):
            for i, v in enumerate(nodes):
                ball = sorted(nodes.index(u) for u in nx.single_source_shortest_path_length(G, v, cutoff=r))
                expected = cov.mean(axis=0)[ball] @ np.linalg.solve(cov[np.ix_(ball, ball)], a[b, ball])
                assert bayes[r - 1, b, i] == pytest.approx(expected, abs=1e-12)
    values, spread = sample_values(2000, 9, rng, mu_scale=1.0, spreads=True)
    mse = lambda x: ((x - values.mean(1, keepdims=True)) ** 2).mean()  # noqa: E731
    assert mse(bayes_ball_oracle(G, values, 1, 1.0, spread**2)[0]) < 0.97 * mse(
        ball_oracle(G, values[..., None], 1)[0, ..., 0]
    )


def test_pdmm_with_rho_one_from_a_is_the_ball_average_at_round_one_and_beats_it_nowhere_on_average():
    """The ball average is the best estimate in expectation (not on every instance): over 400 draws no rho
    of PDMM's first round has a smaller mean log error."""
    G = pdmm.topology("random_geometric", n=30, seed=2)
    a = np.random.default_rng(1).normal(size=(400, 30))
    instances = compiled([(G, a)])
    oracle = oracle_errors([(G, a)], 3)
    torch.testing.assert_close(
        classical_errors("pdmm", {"theta": 1.0, "rho": 1.0}, 1, instances)[0], oracle[0], rtol=1e-12, atol=0
    )
    for rho in (0.3, 0.7, 1.5, 3.0):
        assert (
            classical_errors("pdmm", {"theta": 1.0, "rho": rho}, 1, instances)[0].log().mean() > oracle[0].log().mean()
        )


def test_classical_errors_are_pdmm_solve_errors_per_round():
    G = pdmm.topology("ring", n=6, seed=0)
    a = np.random.default_rng(0).normal(size=(3, 6)) + 1
    for method, params in [("pdmm", {"theta": 1.0}), ("pdmm", {"theta": 0.5}), ("qa-pdmm", {}), ("admm", {})]:
        e = classical_errors(method, {**params, "rho": 0.5}, 4, compiled([(G, a)]))
        assert e.shape == (4, 3)
        x = np.asarray(
            pdmm.solve(
                pdmm.averaging(G, a[..., None]), method=method, rho=0.5, max_iter=2, tol=0, x0=a[..., None], **params
            ).x
        )[..., 0]
        x_star = a.mean(1, keepdims=True)
        direct = np.linalg.norm(x - x_star, axis=1) / np.linalg.norm(a - x_star, axis=1)
        np.testing.assert_allclose(e[1].numpy(), direct, rtol=1e-10)


@pytest.mark.parametrize(
    "method,params", [("pdmm", {"theta": 1.0}), ("pdmm", {"theta": 0.5}), ("qa-pdmm", {}), ("admm", {})]
)
def test_round_r_of_every_classical_method_has_heard_only_r_hops(method, params):
    """From x0 = a, as compare runs them, a change at node 0 of a path reaches node k at round k, not before."""
    G = nx.path_graph(8)
    a = np.random.default_rng(0).normal(size=(8, 1))
    moved = a.copy()
    moved[0] += 1.0
    for rounds in (1, 2, 3):
        x = [
            np.asarray(
                pdmm.solve(
                    pdmm.averaging(G, values), method=method, rho=0.7, max_iter=rounds, tol=0, x0=values, **params
                ).x
            )
            for values in (a, moved)
        ]
        changed = np.abs(x[0] - x[1])[:, 0] > 1e-12
        assert changed.tolist() == [k <= rounds for k in range(8)], (rounds, changed)


def test_a_tied_graph_transformer_runs_past_its_depth_and_an_untied_one_refuses():
    config = attention.AttentionConfig(d_model=8, n_head=2)
    G = nx.cycle_graph(6)
    graph, x = attention.TokenGraph.from_networkx(G), torch.randn(2, 6, 2)
    tied = attention.GraphTransformer(config, 3, in_features=2, tied=True)
    long = tied(x, graph, rounds=7)
    assert long.shape == (7, 2, 6, 1)
    torch.testing.assert_close(long[:3], tied(x, graph))  # the first 3 rounds are the trained depth's
    untied = attention.GraphTransformer(config, 3, in_features=2)
    with pytest.raises(ValueError, match="rounds"):
        untied(x, graph, rounds=4)


def test_intervals_and_paired_tests_match_scipy():
    rng = np.random.default_rng(3)
    a, b = rng.normal(-1, 0.2, size=(5, 4)), rng.normal(-1.1, 0.2, size=(5, 4))
    mean, low, high = t_interval(a[:, 2])
    expected = stats.t.interval(0.95, 4, loc=a[:, 2].mean(), scale=stats.sem(a[:, 2]))
    np.testing.assert_allclose([low, high], expected, rtol=1e-12)
    oracle = b - 0.5 + rng.normal(0, 0.05, size=b.shape)
    table = CompareTable(
        [0, 1, 2, 3, 4],
        4,
        2,
        {("m", "s"): a, ("o", "s"): b, ("ball oracle", "s"): oracle},
        {"m": Row("m", "classical"), "o": Row("o", "classical"), "ball oracle": ORACLE},
        {},
    )
    ratio, low, high, p = table.paired("m", "o", "s", 3)
    np.testing.assert_allclose(
        np.log10([ratio, low, high]),
        [(a - b)[:, 2].mean(), *stats.t.interval(0.95, 4, loc=(a - b)[:, 2].mean(), scale=stats.sem((a - b)[:, 2]))],
        rtol=1e-10,
    )
    assert p == pytest.approx(stats.ttest_rel(a[:, 2], b[:, 2]).pvalue, rel=1e-12)
    assert table.verdicts([("m", 1, "m", 1, "s")])[0].word == "not separable"  # identical rows: ratio 1, no p
    low = np.array([[-2.0, -2.1], [-2.25, -2.0], [-2.1, -2.2], [-2.0, -2.3], [-2.2, -2.1]])
    far = CompareTable(
        [0, 1, 2, 3, 4], 2, 1, {("m", "s"): low, ("o", "s"): low + 1 + np.linspace(0, 0.2, 5)[:, None]}, {}, {}
    )
    better, worse = far.verdicts([("m", 1, "o", 1, "s"), ("o", 2, "m", 2, "s")])
    assert (better.word, worse.word) == ("better", "worse") and better.ratio < 1 < worse.ratio
    assert [t.word for t in far.trends(["m", "o"])] == ["stalls", "stalls"]
    few = CompareTable([0, 1, 2], 2, 1, {k: v[:3] for k, v in far.log_errors.items()}, {}, {})
    assert few.verdicts([("m", 1, "o", 1, "s")])[0].word == "not separable"  # fewer than 5 seeds never decide
    rows = table.summary_rows()
    assert {(r["method"], r["round"]) for r in rows} == {
        (m, k) for m in ("m", "o", "ball oracle") for k in (1, 2, 3, 4)
    }


def test_compare_writes_every_method_with_intervals_and_no_pdmm_variant_beats_the_ball_oracle_at_round_one(tmp_path):
    out = tmp_path / "cmp"
    args = [
        "compare",
        str(CONFIG),
        "--residuals",
        "standard",
        "--tied",
        "accumulated",
        "--widths",
        "4",
        "--seeds",
        "0,1",
        "--rounds",
        "4",
        "--test-graphs",
        "1",
        "--tune-graphs",
        "1",
        "--val-graphs",
        "1",
        "--learned-steps",
        "2",
        "--finetune-steps",
        "2",
        *[f"--set={s}" for s in TINY],
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main([*args, "--results", str(tmp_path / "R.md")]) == 0
    assert parsed_record(json.loads((out / "compare.json").read_text())["command"]) == parsed(args)
    with open(out / "compare.csv") as f:
        rows = list(csv.DictReader(f))
    sets = {"training family", "larger graphs", "ring", "grid"}
    classical = {
        "pdmm (tuned per round)",
        "averaged pdmm (tuned per round)",
        "admm (tuned per round)",
        "gossip",
        "chebyshev (tuned per round)",
        "safe chebyshev (tuned per round)",
        "polynomial filter (fitted per round, safeguarded)",
        "polynomial filter (fitted per round, unguarded)",
        "best classical (chosen on tuning data)",
        "best non-diverging classical (chosen on tuning data)",
    }
    full = classical | {
        "chebyshev on fastest-mixing weights (whole graph offline)",
        "best transformer (chosen on validation data)",  # the tied transformer is a candidate past round K
        "best one-number model (chosen on validation data)",
        "ball oracle",
        "bayes oracle (knows prior and s)",
        "pdmm (tuned for round 4)",
        "averaged pdmm (tuned for round 4)",
        "admm (tuned for round 4)",
        "chebyshev (tuned for round 4)",
        "safe chebyshev (tuned for round 4)",
        "chebyshev (own spectral interval)",
        "best polynomial of W per graph (bound)",
        "learned pdmm",
        "pdmm-transformer (hand-set)",
        "tied transformer (accumulated)",
        "pdmm-transformer (1 number, tied, topology mixture, depth curriculum)",
    }
    depth = {
        "transformer (standard)",
        "transformer (standard, w=4)",
        "pdmm-transformer (trained from pdmm)",
        "pdmm-transformer (trained from random)",
        "pdmm-transformer (1 number, trained from pdmm)",
    }
    expected = {(m, s, k) for s in sets for m in full for k in (1, 2, 3, 4)}
    expected |= {(m, s, k) for s in sets for m in depth for k in (1, 2)}
    assert {(r["method"], r["set"], int(r["round"])) for r in rows if int(r["round"]) <= 4} == expected
    # classical rows also run to the rounds at which a transformer row has sent as many numbers: w r for w in
    # 2 d_model = 32, 4 (the width-limited row) and 14 (the PDMM-transformer), r in 1, K = 2
    later = {int(r["round"]) for r in rows if int(r["round"]) > 4 and r["method"] in classical}
    assert later == {8, 14, 28, 32, 64}
    assert {int(r["round"]) for r in rows if r["method"] == "polynomial filter (fitted per round, safeguarded)"} == {
        1,
        2,
        3,
        4,
        8,
        14,
        28,
        32,
        64,
    }
    assert all(float(r["error_low"]) <= float(r["error"]) <= float(r["error_high"]) for r in rows)
    first = [r for r in rows if r["round"] == "1"]
    ball = {r["set"]: float(r["error"]) for r in first if r["method"] == "ball oracle"}
    pdmm_family = {
        "pdmm (tuned per round)",
        "pdmm (tuned for round 4)",
        "averaged pdmm (tuned per round)",
        "admm (tuned per round)",
        "learned pdmm",
        "pdmm-transformer (hand-set)",
    }
    assert all(float(r["error"]) >= ball[r["set"]] * (1 - 1e-9) for r in first if r["method"] in pdmm_family)
    hand_set = {(r["set"], r["round"]): float(r["error"]) for r in rows if r["method"] == "pdmm-transformer (hand-set)"}
    for r in rows:
        if r["method"] == "pdmm (tuned for round 4)":
            assert float(r["error"]) == pytest.approx(hand_set[(r["set"], r["round"])], rel=1e-9)
    text = (out / "compare.md").read_text()
    assert (out / "compare.png").is_file() and (out / "compare_all.png").is_file() and (out / "learning.png").is_file()
    assert "<!-- begin compare" in (tmp_path / "R.md").read_text()
    assert (
        "Round 1 against the ball oracle (Holm over " in text and "### Paired comparisons at equal numbers sent" in text
    )
    assert "### Findings" in text and "| p | Holm p | verdict |" in text
    assert "| transformer (standard, w=4) | 2 | best classical (chosen on tuning data) | 8 |" in text
    assert "| transformer (standard, w=4) | 2 | best non-diverging classical (chosen on tuning data) | 8 |" in text
    sent = {r["method"]: r["sent_per_edge"] for r in rows if r["round"] == "1"}
    assert sent["pdmm-transformer (hand-set)"] == sent["pdmm-transformer (1 number, trained from pdmm)"] == "1"
    assert sent["pdmm-transformer (trained from pdmm)"] == "14"
    assert sent["best transformer (chosen on validation data)"] == sent["transformer (standard)"] == "32"
    assert sent["best one-number model (chosen on validation data)"] == "1"
    before = (out / "seeds" / "seed=0.json").stat().st_mtime_ns
    assert main(args) == 0  # the same command again reuses every seed
    assert (out / "seeds" / "seed=0.json").stat().st_mtime_ns == before
    assert main(["compare", "--from", str(out), "--out", str(tmp_path / "again"), "--no-progress"]) == 0
    assert (tmp_path / "again" / "compare.md").read_text() == text  # the CSV alone regenerates every table
    assert (tmp_path / "again" / "compare.csv").read_text() == (out / "compare.csv").read_text()
    with pytest.raises(SystemExit):  # the trained runs are reused only under the same config
        main([*args[:-3], "--set=model.beta=0.5", "--out", str(out), "--no-progress"])


def test_the_best_classical_row_is_chosen_on_training_family_data_per_round_and_seed_rows_round_trip():
    """Recomputed here from the seed's own draw: each row's per-round setting is at least as good on the tuning
    instances as the best of its start grid (the refinement only improves on it), and the best classical row at
    round r is the candidate whose round-r setting has the smallest validation error."""
    setting = dataclasses.replace(SMALL, learned_steps=1, finetune_steps=1)
    table = compare(setting, seeds=[0, 1])
    score = lambda e: float(torch.log10(e.clamp_min(FLOOR)).mean())  # noqa: E731
    start = [RHO_SEARCH.value(p) for p in RHO_SEARCH.start]
    for seed in (0, 1):
        fitted = table.fitted[seed]
        _, tuning, validation = setting.draw(seed)
        spectra = [nontrivial_spectrum(pdmm.mixing_matrix(G, "metropolis")) for G, *_ in tuning]
        for r in (1, 2, 3, 6):
            rho = fitted["pdmm: rho per round"][r]
            on_tuning = [
                score(classical_errors("pdmm", {"theta": 1.0, "rho": x}, r, compiled(tuning))[r - 1]) for x in start
            ]
            chosen_score = score(classical_errors("pdmm", {"theta": 1.0, "rho": rho}, r, compiled(tuning))[r - 1])
            assert chosen_score <= min(on_tuning) + 1e-12
            held = {}
            for name, (method, fixed, key, _) in TUNED.items():
                value = None if key is None else fitted[f"{name}: {key} per round"][r]
                params = {**fixed, **({} if key is None else {key: tuple(value) if key == "interval" else value})}
                held[per_round(name).label] = score(classical_errors(method, params, r, compiled(validation))[r - 1])
            for label, guard in ((FILTER.label, True), (FILTER_UNGUARDED.label, False)):
                c = fit_filter(spectra, r, safeguard=guard)
                held[label] = score(
                    torch.cat(
                        [
                            disagreement_error(
                                torch.as_tensor(apply_filter(pdmm.mixing_matrix(G, "metropolis"), a, c)),
                                torch.as_tensor(a),
                            )
                            for G, a, _ in validation
                        ]
                    )
                )
            chosen = fitted["best classical (chosen on tuning data) per round"][r]
            assert chosen == min(held, key=held.get)
            safe = fitted["best non-diverging classical (chosen on tuning data) per round"][r]
            diverging = ("chebyshev (tuned per round)", "polynomial filter (fitted per round, unguarded)")
            assert safe == min((c for c in held if c not in diverging), key=held.get)
            for name in table.sets:
                i = table.seeds.index(seed)
                assert table.log_errors[(BEST.label, name)][i, r - 1] == table.log_errors[(chosen, name)][i, r - 1]
                assert table.log_errors[(BEST_SAFE.label, name)][i, r - 1] == table.log_errors[(safe, name)][i, r - 1]
    again = CompareTable.from_seed_rows([{k: str(v) for k, v in row.items()} for row in table.seed_rows()], 3, 2)
    assert set(again.log_errors) == set(table.log_errors)
    for key, values in table.log_errors.items():
        np.testing.assert_array_equal(again.log_errors[key], values)
    assert again.sent == {m: table.sent[m] for m in table.methods}
    assert again.rows == table.rows  # every row read back from its label (row_of)


class JsonCache:
    """A cache of bridge.comparison.compare in memory: each seed's result kept as its JSON text, as a file would."""

    def __init__(self):
        self.texts = {}

    def load(self, seed):
        return SeedResult.from_json(json.loads(self.texts[seed]), "key", SMALL.horizon) if seed in self.texts else None

    def save(self, seed, result):
        self.texts[seed] = json.dumps(result.to_json("key"))


def test_compare_trains_the_transformer_rows_through_the_hook_and_resumes_from_its_cache():
    """bridge.compare trains each transformer row once per seed through the caller's hook, evaluates it as
    evaluate_seed does, keeps the seed in the cache (budget and curves included) and, given the cache again,
    trains and computes nothing; a transformer row without a hook, or cached seeds with different rows, is a
    ValueError before anything runs."""
    label = "transformer (standard)"
    torch.manual_seed(0)
    model = attention.GraphTransformer(attention.AttentionConfig(d_model=8, n_head=2), 2, in_features=2, out_features=1)
    budget = {"steps": 3, "best_step": 2, "wall_seconds": 0.5, "stopped_by": "cap"}
    calls, told = [], []

    def train(row, seed):
        calls.append((row, seed))
        return Trained(model, budget, [{"step": 3, "val_loss": 0.5, "val_error": 0.25}])

    widths = {label: model.numbers_sent}
    with pytest.raises(ValueError, match="train"):
        compare(SMALL, [0], widths)
    cache = JsonCache()
    table = compare(SMALL, [0], widths, train, cache, lambda seed, stage: told.append((seed, stage)))
    assert calls == [(label, 0)] and told == [(0, stage) for stage in [*evaluation_stages([label]), None]]
    assert table.sent[label] == table.sent["best transformer (chosen on validation data)"] == 2 * 8
    assert table.fitted[0]["training"] == {label: budget}
    assert cache.load(0).curves == [{"method": label, "seed": 0, "step": 3, "val_loss": 0.5, "val_error": 0.25}]
    alone = evaluate_seed(SMALL, 0, {label: model})
    assert set(table.log_errors) == set(alone.log_errors)
    for key, values in alone.log_errors.items():
        np.testing.assert_array_equal(table.log_errors[key][0], values)
    again = compare(SMALL, [0], widths, lambda row, seed: pytest.fail("trained again"), cache)
    for key, values in table.log_errors.items():
        np.testing.assert_array_equal(again.log_errors[key], values)
    edited = json.loads(cache.texts[0])
    edited["log_errors"].pop(f"{label}\tring")
    cache.texts[1] = json.dumps(edited)
    with pytest.raises(RowsDiffer) as raised:
        compare(SMALL, [0, 1], widths, train, cache)
    assert raised.value.seeds == (1, 0) and calls == [(label, 0)]


def test_compare_refuses_labels_naming_no_transformer_row_and_no_seeds_before_running():
    """A transformer label that names no transformer row (rows.row_of), or no seed at all, is a ValueError naming it
    before anything trains or runs; so is a cached seed whose rows name no row of the comparison."""

    def train(row, seed):
        pytest.fail("trained")

    for label in ("my model", "best classical (chosen on tuning data)"):
        with pytest.raises(ValueError, match=re.escape(label)):
            compare(SMALL, [0], {label: 4}, train)
    with pytest.raises(ValueError, match="at least one seed"):
        compare(SMALL, [])
    saved = {"key": "k", "fitted": {}, "curves": [], "log_errors": {"my model\tring": [0.0]}}
    with pytest.raises(ValueError, match="my model"):
        check_seed_json(saved)
    saved["log_errors"] = {"ball oracle\tring": [0.0]}
    check_seed_json(saved)  # a row of the comparison: accepted


def test_a_diverged_run_is_an_infinite_error_not_a_crash(tmp_path):
    logs = mean_log(torch.tensor([[0.5, float("inf")], [float("nan"), 0.1]]))
    assert logs[0] == np.inf and logs[1] == np.inf
    table = CompareTable(
        [0, 1, 2],
        1,
        1,
        {("m", "s"): np.array([[np.inf], [-1.0], [-1.2]]), ("o", "s"): np.array([[-1.0], [-1.1], [-1.0]])},
        {"m": Row("m", "classical"), "o": Row("o", "classical")},
        {},
    )
    assert table.cell("m", "s", 1)[0] == np.inf and np.isnan(table.cell("m", "s", 1)[1])
    assert table.paired("m", "o", "s", 1)[0] == np.inf
    assert table.verdicts([("m", 1, "o", 1, "s")])[0].word == "not separable"
    plot_compare(table, {"s": ["m", "o"]}, tmp_path / "diverged.png")  # the axes come from the finite values
    assert (tmp_path / "diverged.png").stat().st_size > 0


def test_compare_refuses_other_tasks_and_foreign_directories(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["compare", str(CONFIG.parent / "modular97.toml"), "--out", str(tmp_path / "c")])
    assert "graph_consensus" in capsys.readouterr().err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SystemExit):
        main(["compare", str(CONFIG), *[f"--set={s}" for s in TINY], "--out", str(tmp_path / "mine")])
    assert "--force" in capsys.readouterr().err


def test_ctrl_c_keeps_finished_seeds_and_the_same_command_resumes(tmp_path):
    out = tmp_path / "cmp"
    command = [
        sys.executable,
        "-m",
        "experiments",
        "compare",
        str(CONFIG),
        "--residuals",
        "standard",
        "--tied",
        "none",
        "--seeds",
        "0,1",
        "--rounds",
        "3",
        "--test-graphs",
        "1",
        "--tune-graphs",
        "1",
        "--learned-steps",
        "2",
        "--finetune-steps",
        "2",
        *[f"--set={s}" for s in TINY],
        "--out",
        str(out),
        "--no-progress",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = out / "seeds" / "seed=0.json"
    deadline = time.monotonic() + 120
    while not first.is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in stderr and "run the same command again" in stderr
    kept = first.stat().st_mtime_ns
    assert not (out / "seeds" / "seed=1.json").exists()
    assert subprocess.run(command, env=env, capture_output=True).returncode == 0
    assert first.stat().st_mtime_ns == kept and (out / "compare.csv").is_file()


def test_safe_chebyshev_never_grows_the_error_where_a_tuned_interval_diverges():
    """Every safe interval (-1, high) polynomial has |p| <= 1 on [-1, 1], where a Metropolis matrix's spectrum lies:
    on a bipartite grid (lowest eigenvalue near -1) no round's error exceeds 1, while a tuned interval with low end
    -0.3 grows it past 1 (the failure the best non-diverging row guards against)."""
    G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(6, 6))
    instances = compiled([(G, sample_values(2, 36, np.random.default_rng(0)))])
    worst = max(
        float(classical_errors("chebyshev", {"mixing": "metropolis", "interval": interval}, 40, instances).max())
        for interval in [SAFE_SEARCH.value(p) for p in SAFE_SEARCH.start] + [(-1.0, 1 - 1e-6), (-1.0, 0.2)]
    )
    assert worst <= 1 + 1e-12
    unsafe = classical_errors("chebyshev", {"mixing": "metropolis", "interval": (-0.3, 0.9)}, 40, instances)
    assert float(unsafe.max()) > 1


def test_a_setting_without_checkpoints_has_its_rounds_as_horizon():
    """bridge.compare's default Setting (checkpoints=()) once failed in max(rounds, *()) before any row ran."""
    family = GraphFamily("random_geometric", 16, 24)
    assert Setting(family, depth=4, rounds=8).horizon == 8
    assert Setting(family, depth=4, rounds=8, checkpoints=(12, 3)).horizon == 12


def bar_lines(err, prefix):
    """The states a progress bar drew on stderr (tqdm rewrites its line with \\r) whose text starts with `prefix`."""
    return [line.strip() for line in err.replace("\r", "\n").splitlines() if line.strip().startswith(prefix)]


def test_one_bar_covers_every_seeds_training_and_stages_from_what_finished_and_no_progress_silences_it(
    tmp_path, capsys
):
    compare = ["compare", str(CONFIG), "--residuals", "standard", "--tied", "none", "--widths", "none"]
    compare += ["--rounds", "3", "--test-graphs", "1", "--tune-graphs", "1", "--val-graphs", "1"]
    compare += ["--learned-steps", "2", "--finetune-steps", "2", *[f"--set={s}" for s in TINY]]
    compare += ["--out", str(tmp_path / "cmp")]
    # a seed: its transformer trained, then oracles, 6 classical methods tuned, fastest-mixing weights, polynomial
    # filters, learned pdmm, the pdmm-transformers and the transformer evaluated: 13 stages
    assert main([*compare, "--seeds", "0"]) == 0
    drawn = bar_lines(capsys.readouterr().err, "seed ")
    assert "0/13 [" in drawn[0] and "13/13 [" in drawn[-1]
    texts = {line.split(":")[1].strip() for line in drawn if line.count(":") > 1}
    assert {"training transformer (standard)", "tuning pdmm", "learned pdmm", "transformer (standard)"} <= texts
    assert main([*compare, "--seeds", "0,1"]) == 0  # seed 0 is kept: it counts from the start
    drawn = bar_lines(capsys.readouterr().err, "seed ")
    assert "13/26 [" in drawn[0] and "26/26 [" in drawn[-1] and not any(" 0/26 [" in line for line in drawn)
    assert any(line.startswith("seed 1: tuning pdmm") for line in drawn)
    assert main([*compare, "--seeds", "0,1", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
