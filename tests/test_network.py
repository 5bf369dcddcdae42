"""Simulated networks (pdmm.Network): the ideal network unchanged, each effect against plain loops,
cvxpy and its own definition, the communication counts, privacy, and bad input."""

import csv
import json

import networkx as nx
import numpy as np
import pytest
import torch
from pdmm_loop_reference import loop_pdmm_z
from scipy.stats import binomtest, kstest

import pdmm
from bridge import UnrolledPDMM
from bridge.statistics import paired_interval
from experiments.cli import main
from experiments.errors import package_version
from experiments.network_sweep import network_sweep
from pdmm import draws as keyed
from pdmm.methods import ADMM, PDMM
from pdmm.network import Channel, Network
from pdmm.synthetic import make_data, make_problem

METHODS = [("pdmm", {}), ("pdmm", {"theta": 0.5}), ("qa-pdmm", {}), ("admm", {})]


@pytest.fixture(scope="module")
def graph():
    return pdmm.topology("random_geometric", n=30, seed=1)


@pytest.fixture(scope="module")
def problems(graph):
    """averaging and least squares, two instances each, with their cvxpy solutions."""
    out = {}
    for kind in ("averaging", "least_squares"):
        problem = make_problem(kind, graph, make_data(kind, 30, dim=3, batch=2, seed=0))
        out[kind] = problem, pdmm.reference(problem)
    return out


def general_problem(graph, seed=0):
    """Strongly convex quadratics with random edge matrices A_ij, A_ji and b_ij != 0."""
    rng = np.random.default_rng(seed)
    n, d = graph.number_of_nodes(), 2
    M = rng.normal(size=(n, d, d))
    edges = {(i, j): (rng.normal(size=(d, d)), rng.normal(size=(d, d)), rng.normal(size=d)) for i, j in graph.edges}
    return pdmm.quadratic(graph, M @ M.transpose(0, 2, 1) + 0.5 * np.eye(d), rng.normal(size=(n, d)), edges), edges


@pytest.mark.parametrize("method, params", METHODS)
def test_an_ideal_network_leaves_iterates_bit_for_bit(problems, method, params):
    for problem, _ in problems.values():
        plain = pdmm.solve(problem, method=method, max_iter=40, tol=0, **params)
        ideal = pdmm.solve(problem, method=method, max_iter=40, tol=0, network=Network(seed=7), **params)
        assert np.array_equal(plain.x, ideal.x)
        for key, values in plain.history.items():
            if key != "time":  # the loop's clock, not a number of the run
                assert np.array_equal(values, ideal.history[key]), key


def test_an_ideal_network_leaves_general_constraints_bit_for_bit(graph):
    problem, _ = general_problem(graph)
    for theta in (1.0, 0.5):
        plain = pdmm.solve(problem, max_iter=40, tol=0, theta=theta)
        ideal = pdmm.solve(problem, max_iter=40, tol=0, theta=theta, network=Network())
        assert np.array_equal(plain.x, ideal.x)


@pytest.mark.parametrize("theta", [1.0, 0.5])
def test_an_edge_schedule_matches_a_plain_loop(theta):
    G = pdmm.topology("small_world", n=8, seed=0, k=2, p=0.5)
    problem, edges = general_problem(G)
    listed = list(G.edges)
    schedule = [listed[::2], listed[1::3], [], listed]
    P, q = problem.local.P[:, 0].numpy(), problem.local.q[:, 0].numpy()
    expected = loop_pdmm_z(G, P, q, edges, 0.7, theta, 9, schedule)
    for k in (1, 4, 9):
        result = pdmm.solve(problem, rho=0.7, theta=theta, max_iter=k, tol=0, network=Network(edge_up=schedule))
        np.testing.assert_allclose(result.x, expected[k - 1], rtol=1e-10, atol=1e-10)


def channel_step(problem, network, method=PDMM):
    """One drawn step of `method` over `network`: (state before, state after, channel)."""
    graph, local, edges = problem.compile("cpu", torch.float64)
    channel = Channel(network, graph, problem.batch, problem.dim, torch.float64)
    algorithm = method(graph, local, edges, 1.0, channel=channel)
    before = algorithm.step(algorithm.init(torch.zeros(problem.n, problem.batch, problem.dim, dtype=torch.float64)))
    channel.draw()
    return before, algorithm.step(before), channel


def test_lost_messages_leave_z_and_sleeping_nodes_leave_x_unchanged(problems):
    problem = problems["averaging"][0]
    before, after, channel = channel_step(problem, Network(drop=1.0))
    assert torch.equal(after["z"], before["z"]) and not torch.equal(after["x"], before["x"])
    assert channel.messages.tolist() == [0, 0] and channel.bits.min() > 0  # sent, then lost
    before, after, channel = channel_step(problem, Network(wake=0.0))
    assert torch.equal(after["z"], before["z"]) and torch.equal(after["x"], before["x"])
    assert channel.bits.tolist() == [0, 0]  # a sleeping node sends nothing
    before, after, channel = channel_step(problem, Network(wake=0.5, seed=3))
    same = (after["x"] == before["x"]).all(-1)  # (n, B): exactly the sleeping nodes kept x
    assert torch.equal(same, ~channel.awake) and 0 < same.float().mean() < 1


def test_event_rates_follow_their_probabilities_and_edges_go_down_both_ways(problems):
    problem = problems["averaging"][0]
    E = problem.compiled.num_edges
    for network, rate in (
        (Network(drop=0.3), 0.7),
        (Network(wake=0.6), 0.6),
        (Network(edge_up=0.4), 0.4),
        (Network(drop=0.5, wake=0.5, edge_up=0.5), 0.125),
    ):
        history = pdmm.solve(problem, max_iter=200, tol=0, network=network).history
        assert history["messages"][-1] / (200 * E) == pytest.approx(np.full(2, rate), abs=0.02)
    _, _, channel = channel_step(problem, Network(edge_up=0.5, seed=1))
    rev = problem.compiled.rev
    assert torch.equal(channel.delivered, channel.delivered[rev]) and 0 < channel.delivered.float().mean() < 1


def test_runs_are_seeded_and_instances_draw_independently(graph):
    a = np.random.default_rng(0).normal(size=(30, 3))
    problem = pdmm.averaging(graph, np.stack([a, a]))
    network = Network(drop=0.3, wake=0.8, bits=6, dither=True, seed=4)
    first, again = (pdmm.solve(problem, max_iter=30, tol=0, network=network) for _ in range(2))
    assert np.array_equal(first.x, again.x)
    other = pdmm.solve(problem, max_iter=30, tol=0, network=Network(drop=0.3, wake=0.8, bits=6, dither=True, seed=5))
    assert not np.array_equal(first.x, other.x)
    assert not np.array_equal(first.x[0], first.x[1])  # the same data, different draws per instance


EFFECTS = {
    "drop": Network(drop=0.3, seed=1),
    "wake": Network(wake=0.5, seed=2),
    "edge_up": Network(edge_up=0.5, seed=3),
    "all": Network(drop=0.2, wake=0.7, edge_up=0.7, seed=4),
}


@pytest.mark.parametrize("kind", ["averaging", "least_squares"])
@pytest.mark.parametrize("effect", list(EFFECTS))
def test_averaged_pdmm_reaches_the_cvxpy_optimum_over_a_lossy_network(problems, kind, effect):
    """Guaranteed: theta < 1 makes PDMM's z-update averaged, and random coordinate updates of an
    averaged operator converge (randomised Krasnosel'skii-Mann)."""
    problem, x_star = problems[kind]
    result = pdmm.solve(problem, theta=0.5, max_iter=5000, tol=1e-12, reference=x_star, network=EFFECTS[effect])
    assert result.converged and result.history["error"][-1].max() < 1e-8


@pytest.mark.parametrize("method", ["pdmm", "qa-pdmm", "admm"])
@pytest.mark.parametrize("effect", list(EFFECTS))
def test_plain_pdmm_qa_pdmm_and_admm_also_converge_here(problems, method, effect):
    """Observed, not guaranteed: theta = 1 PDMM, QA-PDMM and ADMM with stale values converge on these
    strongly convex problems."""
    problem, x_star = problems["least_squares"]
    result = pdmm.solve(problem, method=method, max_iter=5000, tol=1e-12, reference=x_star, network=EFFECTS[effect])
    assert result.converged and result.history["error"][-1].max() < 1e-8


@pytest.mark.parametrize("theta", [1.0, 0.5])
def test_with_subtractive_dither_the_error_floor_falls_as_bits_rise(problems, theta):
    problem, x_star = problems["averaging"]
    floors = []
    for bits in (6, 10, 14, 18):
        result = pdmm.solve(
            problem,
            theta=theta,
            max_iter=300,
            tol=0,
            reference=x_star,
            network=Network(bits=bits, dither=True),
            record_every=1,
        )
        floors.append(np.median(result.history["error"][-100:]))
    ratios = np.array(floors[:-1]) / np.array(floors[1:])
    assert (ratios > 4).all() and floors[-1] < 1e-4, floors  # 4 more bits: a 16x finer step


def quantised(network, y, graph):
    channel = Channel(network, graph, y.shape[1], y.shape[2], torch.float64)
    return channel.quantise(y)


def test_the_quantiser_levels_dither_and_stochastic_rounding(problems):
    graph = problems["averaging"][0].compiled
    y = torch.randn(graph.num_edges, 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    step = 2 * 3.0 / 15
    nearest = quantised(Network(bits=4, limit=3.0), y, graph)
    assert torch.allclose((nearest + 3) / step, torch.round((nearest + 3) / step), atol=1e-12)  # on the grid
    inside = y.abs() <= 3
    assert (nearest - y)[inside].abs().max() <= step / 2 + 1e-12
    assert quantised(Network(bits=1, limit=2.0), y, graph).abs().eq(2).all()  # one bit: +-R
    error = (quantised(Network(bits=4, limit=3.0, dither=True), y, graph) - y)[inside]
    assert error.abs().max() <= step / 2 + 1e-12
    constant = torch.full_like(y, 0.13)  # nearest rounding errs by the same 0.07 on every entry
    assert torch.allclose(
        quantised(Network(bits=4, limit=3.0), constant, graph) - constant, torch.tensor(0.2 - 0.13, dtype=torch.float64)
    )
    error = quantised(Network(bits=4, limit=3.0, dither=True), constant, graph) - constant
    assert abs(error.mean()) < 0.03 * step  # unbiased where nearest rounding is not
    assert error.var() == pytest.approx(step**2 / 12, rel=0.1)  # uniform over one step
    draws = torch.stack(
        [quantised(Network(bits=4, limit=3.0, dither="stochastic", seed=s), y[:50], graph) for s in range(400)]
    )
    assert (draws.mean(0) - y[:50])[y[:50].abs() < 3].abs().max() < 0.25 * step  # unbiased
    adaptive = quantised(Network(bits=8), y, graph)
    scale = graph.gather(graph.aggregate_max(y.abs().amax(-1, keepdim=True)))
    assert ((adaptive - y).abs() <= scale / 255 + 1e-12).all()


def keyed_fraction(seed, stream, number, t):
    """The reference of a dither, rounding or privacy number: the top 53 bits of SplitMix64 output t + 1 from the
    key of (seed, stream, number), over 2^53 (pdmm.network.STREAMS: dither 5, round 6, privacy 7 and 8)."""
    key = keyed.stream_key(seed, stream, number)
    return (keyed.mix((key + (t + 1) * keyed.GAMMA) & keyed.MASK) >> 11) / 2**53


@pytest.mark.parametrize("rounding, stream", [(True, 5), ("stochastic", 6)])
def test_dither_and_stochastic_rounding_draw_each_entry_by_its_edge_instance_and_place(rounding, stream):
    """A plain loop over the entries (e, b, k) of the c-th quantisation: trial (e B + b) w + k of its stream."""
    graph = pdmm.averaging(pdmm.topology("ring", n=5), np.zeros(5)).compiled
    E, B, w, R, levels = graph.num_edges, 2, 3, 3.0, 15
    step = 2 * R / levels
    channel = Channel(Network(bits=4, limit=R, dither=rounding, seed=9), graph, B, w, torch.float64)
    for c in (1, 2):
        y = torch.randn(E, B, w, dtype=torch.float64, generator=torch.Generator().manual_seed(c))
        expected = np.empty((E, B, w))
        for e, b, k in np.ndindex(E, B, w):
            u, v = keyed_fraction(9, stream, c, (e * B + b) * w + k), float(y[e, b, k])
            if rounding is True:
                d = (u - 0.5) * step
                expected[e, b, k] = min(max(np.round((v + d + R) / step), 0), levels) * step - R - d
            else:
                expected[e, b, k] = min(max(np.floor((v + R) / step + u), 0), levels) * step - R
        np.testing.assert_array_equal(channel.quantise(y).numpy(), expected)


def test_privacy_noise_is_drawn_per_entry_and_is_normal_with_the_given_scale(problems):
    graph = pdmm.averaging(pdmm.topology("ring", n=4), np.zeros(4)).compiled
    E, B, w = graph.num_edges, 2, 3
    z = torch.randn(E, B, w, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = np.empty((E, B, w))
    for e, b, k in np.ndindex(E, B, w):
        t = (e * B + b) * w + k
        radius = np.sqrt(-2 * np.log1p(-keyed_fraction(3, 7, 0, t)))
        expected[e, b, k] = float(z[e, b, k]) + 2.5 * radius * np.cos(2 * np.pi * keyed_fraction(3, 8, 0, t))
    perturbed = Channel(Network(privacy=2.5, seed=3), graph, B, w, torch.float64).perturb(z)
    np.testing.assert_allclose(perturbed.numpy(), expected, rtol=1e-13, atol=1e-13)
    big = problems["averaging"][0].compiled
    noise = Channel(Network(privacy=2.5, seed=1), big, 40, 5, torch.float64).perturb(
        torch.zeros(big.num_edges, 40, 5, dtype=torch.float64)
    )
    assert abs(float(noise.mean())) < 0.05 and float(noise.std()) == pytest.approx(2.5, rel=0.02)
    assert kstest(noise.flatten().numpy() / 2.5, "norm").pvalue > 1e-4


def test_history_counts_messages_and_bits(problems):
    problem = problems["averaging"][0]
    E = problem.compiled.num_edges
    k = np.arange(1, 11)[:, None]
    for network, per_number, header in ((None, 64, 0), (Network(bits=8, limit=5.0), 8, 0), (Network(bits=8), 8, 64)):
        history = pdmm.solve(problem, max_iter=10, tol=0, network=network, record_every=1).history
        assert np.array_equal(history["messages"], np.broadcast_to(k * E, (10, 2)))
        assert np.array_equal(history["bits"], np.broadcast_to(k * E * (3 * per_number + header), (10, 2)))
    history = pdmm.solve(problem, method="admm", max_iter=10, tol=0, dtype=torch.float32, record_every=1).history
    assert np.array_equal(history["bits"], np.broadcast_to(k * E * 3 * 32, (10, 2)))


def test_subspace_perturbation_hides_a_i_early_and_reaches_the_same_optimum(problems):
    problem, x_star = problems["averaging"]
    a = problem.local.q.numpy().transpose(1, 0, 2)
    open_run = pdmm.solve(
        problem, max_iter=3000, tol=1e-12, reference=x_star, network=Network(privacy=0), record_every=1
    )
    private = pdmm.solve(
        problem, max_iter=3000, tol=1e-12, reference=x_star, network=Network(privacy=1e3), record_every=1
    )
    assert private.converged and private.history["error"][-1].max() < 1e-8
    gap = np.sqrt(((open_run.x - a) ** 2).sum(-1).mean(-1)) / np.sqrt((a**2).sum(-1).mean(-1))
    assert np.allclose(open_run.history["privacy_x"][-1], gap)  # relative to a_i = argmin f_i
    assert (private.history["privacy_x"][:5] > 50 * open_run.history["privacy_x"][:5]).all()
    assert (private.history["privacy_messages"] > 100).all()  # the perturbation never leaves the messages
    assert np.allclose(private.history["privacy_x"][-1], open_run.history["privacy_x"][-1], rtol=1e-6)
    with pytest.raises(ValueError, match="not implemented for admm"):
        pdmm.solve(problem, method="admm", network=Network(privacy=1.0))


def test_unrolled_pdmm_runs_the_same_network_draws_as_solve(problems):
    problem = problems["least_squares"][0]
    network = Network(drop=0.2, wake=0.8, edge_up=0.9, bits=10, dither=True, privacy=1.0, seed=2)
    iterates = UnrolledPDMM(layers=12, rho=1.0, network=network)(problem).detach().numpy()
    for k in (3, 12):
        result = pdmm.solve(problem, max_iter=k, tol=0, network=network)
        np.testing.assert_allclose(result.x, iterates[k - 1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "options, culprit",
    [
        ({"drop": -0.1}, "drop must be a probability"),
        ({"drop": 1.5}, "drop must be a probability"),
        ({"wake": 2}, "wake must be a probability"),
        ({"wake": True}, "wake must be a probability"),
        ({"edge_up": -1.0}, "edge_up must be a probability"),
        ({"bits": 0}, "bits must be"),
        ({"bits": 2.5}, "bits must be"),
        ({"dither": "yes", "bits": 4}, "dither must be"),
        ({"dither": True}, "need bits"),
        ({"limit": 1.0}, "need bits"),
        ({"bits": 4, "limit": -1.0}, "limit must be"),
        ({"privacy": -1.0}, "privacy must be"),
        ({"edge_up": []}, "schedule"),
        ({"drop": [0.1, 1.5]}, r"drop\[1\] must be a probability in \[0, 1\], got 1.5"),
        ({"drop": [[0.1, 0.2]]}, "drop per directed edge must be a non-empty 1-D sequence"),
        ({"drop": []}, "drop per directed edge must be a non-empty 1-D sequence"),
        ({"drop": ["a"]}, "drop per directed edge must be"),
        ({"drop": "0.1"}, "drop must be a probability"),
        ({"drop": {(0, 1): -0.1}}, r"drop\[\(0, 1\)\] must be a probability"),
        ({"drop": {0: 0.1}}, r"drop keys must be directed edges \(i, j\)"),
        ({"wake": "two"}, "wake must be a probability in \\[0, 1\\], per-node probabilities or 'one', got 'two'"),
        ({"wake": [0.5, float("nan")]}, r"wake\[1\] must be a probability"),
        ({"wake": {"a": 2}}, r"wake\['a'\] must be a probability"),
        ({"burst": (0.0, 0.5)}, "burst p_gb must be > 0"),
        ({"burst": (0.5, 0)}, "burst p_bg must be > 0: "),
        ({"burst": (0.5, 1.5)}, "burst p_bg must be a probability"),
        ({"burst": 0.5}, "burst must be None or a pair"),
        ({"burst": (0.1, 0.2, 0.3)}, "burst must be None or a pair"),
    ],
)
def test_bad_network_settings_are_named(options, culprit):
    with pytest.raises(ValueError, match=culprit):
        Network(**options)


def test_a_schedule_edge_outside_the_graph_and_a_wrong_network_are_refused(problems):
    problem = problems["averaging"][0]
    with pytest.raises(ValueError, match=r"names \(0, 0\), which is not an edge"):
        pdmm.solve(problem, network=Network(edge_up=[[(0, 0)]]))
    with pytest.raises(TypeError, match="pdmm.Network"):
        pdmm.solve(problem, network={"drop": 0.1})
    with pytest.raises(TypeError, match="network=pdmm.Network"):
        pdmm.solve(problem, channel=None)


def test_solve_command_runs_every_method_over_the_same_network_and_plots_bits(tmp_path):
    lossy, ideal = tmp_path / "lossy", tmp_path / "ideal"
    assert (
        main(
            [
                "solve",
                "--no-progress",
                "--nodes",
                "20",
                "--iters",
                "50",
                "--compare",
                "pdmm,pdmm:theta=0.5,admm",
                "--drop",
                "0.2",
                "--wake",
                "0.9",
                "--edge-up",
                "0.9",
                "--bits",
                "10",
                "--dither",
                "--out",
                str(lossy),
            ]
        )
        == 0
    )
    with open(lossy / "history.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["method", "iteration", "residual", "objective", "error", "messages", "bits"]
    first = {row["method"]: float(row["bits"]) for row in rows if row["iteration"] == "1"}
    assert first["pdmm"] == first["pdmm:theta=0.5"] == first["admm"]  # the same draws: the same senders
    assert main(["solve", "--no-progress", "--nodes", "20", "--iters", "50", "--out", str(ideal)]) == 0
    assert (
        main(["plot", str(lossy), str(ideal), "--x", "bits", "--metric", "error", "--out", str(tmp_path / "bits.png")])
        == 0
    )
    assert (tmp_path / "bits.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "flags, culprit",
    [
        (["--drop", "-0.5"], "--drop: drop must be a probability"),
        (["--wake", "1.5"], "--wake"),
        (["--bits", "0"], "--bits"),
        (["--dither"], "need bits"),
        (["--privacy", "1", "--compare", "pdmm,admm"], "not implemented for admm"),
    ],
)
def test_solve_command_names_a_bad_network_flag(tmp_path, capsys, flags, culprit):
    with pytest.raises(SystemExit) as exit:
        main(["solve", "--no-progress", "--nodes", "10", *flags, "--out", str(tmp_path / "run")])
    assert exit.value.code == 2 and culprit in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_solve_stops_at_a_target_error_and_needs_a_reference(problems):
    problem, x_star = problems["averaging"]
    result = pdmm.solve(problem, reference=x_star, target=1e-4, tol=0)
    assert result.converged and result.history["error"][-1].max() <= 1e-4 < result.history["error"][-2].max()
    with pytest.raises(ValueError, match="needs a reference"):
        pdmm.solve(problem, target=1e-4)


def test_paired_interval_is_the_t_interval_of_the_differences():
    mean, low, high = paired_interval([10, 12, 17], [9, 9, 9])  # differences 1, 3, 8: sd sqrt(13)
    assert mean == pytest.approx(4) and high - mean == pytest.approx(4.302653 * np.sqrt(13 / 3), rel=1e-6)
    assert paired_interval([1, None, 3], [1, 2, 3]) is None


def test_network_sweep_counts_iterations_to_the_target_per_seed():
    rows = network_sweep(axes={"drop": (0.3,), "bits": (4,)}, seeds=(0, 1), n=15, dim=1, max_iter=400)
    by = {(row["axis"], row["method"]): row["iterations"] for row in rows}
    assert [row["axis"] for row in rows] == [None] * 3 + ["drop"] * 3 + ["bits"] * 3
    assert by[("bits", "pdmm")] == [None, None]  # 4 bits: an error floor far above 1e-6
    a = np.random.default_rng(1).normal(size=(15, 1))
    problem = pdmm.averaging(pdmm.topology("random_geometric", n=15, seed=1), a)
    errors = pdmm.solve(
        problem,
        reference=np.tile(a.mean(0), (15, 1)),
        tol=0,
        max_iter=400,
        network=Network(drop=0.3, seed=1),
        record_every=1,
    ).history["error"]
    assert by[("drop", "pdmm")][1] == int(np.argmax(errors <= 1e-6)) + 1  # the first iteration at the target


def test_network_sweep_command_writes_its_section_and_figure(tmp_path):
    results = tmp_path / "RESULTS.md"
    out = tmp_path / "sweep"
    assert (
        main(
            [
                "network-sweep",
                "--nodes",
                "12",
                "--seeds",
                "2",
                "--iters",
                "300",
                "--out",
                str(out),
                "--results",
                str(results),
            ]
        )
        == 0
    )
    assert (out / "network_sweep.png").is_file() and "](network_sweep.png)" in (out / "network_sweep.md").read_text()
    record = json.loads((out / "network_sweep.json").read_text())  # the per-seed counts behind the tables
    assert record["version"] == package_version() and record["seeds"] == 2 and record["nodes"] == 12
    ideal = next(r for r in record["rows"] if r["axis"] is None and r["method"] == "pdmm")
    assert len(ideal["iterations"]) == 2 and all(isinstance(k, int) and 0 < k <= 300 for k in ideal["iterations"])
    low, high = min(ideal["iterations"]), max(ideal["iterations"])
    assert f"| — | {sum(ideal['iterations']) / 2:.0f} [{low}, {high}] |" in (out / "network_sweep.md").read_text()
    text = results.read_text()
    assert "<!-- begin network-sweep" in text and "pdmm-bridge network-sweep" in text and "| 0.5 |" in text
    assert (tmp_path / "figures" / "network_sweep.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit) as exit:  # a smaller run does not replace a larger one without --force
        main(
            [
                "network-sweep",
                "--nodes",
                "12",
                "--seeds",
                "2",
                "--iters",
                "100",
                "--out",
                str(out),
                "--results",
                str(results),
            ]
        )
    assert exit.value.code == 2


def draws(network, graph, batch, iterations, *names):
    """The channel's `names` (e.g. "delivered") after each of `iterations` draws, stacked: (iterations, ...)."""
    channel = Channel(network, graph, batch, 1, torch.float64)
    out = {name: [] for name in names}
    for _ in range(iterations):
        channel.draw()
        for name in names:
            out[name].append(getattr(channel, name).clone())
    return [torch.stack(out[name]).numpy() for name in names]


def within(empirical, expected, standard_error, sigmas=5):
    return np.abs(np.asarray(empirical) - expected) <= sigmas * np.asarray(standard_error) + 1e-12


def first_edge(problem):
    """The labels (i, j) of compiled edge 0."""
    compiled = problem.compiled
    return compiled.nodes[int(compiled.src[0])], compiled.nodes[int(compiled.dst[0])]


def labelled_problem():
    """Averaging on a small-world graph with string node labels, one instance."""
    G = nx.relabel_nodes(pdmm.topology("small_world", n=8, seed=0, k=2, p=0.5), lambda v: f"n{v}")
    return pdmm.averaging(G, np.random.default_rng(0).normal(size=(8, 2))), G


def test_per_edge_loss_rates_follow_their_probabilities_in_compiled_order(problems):
    graph = problems["averaging"][0].compiled
    E, K, B = graph.num_edges, 500, 8
    p = np.random.default_rng(0).uniform(0, 0.9, E)
    p[:5], p[5:10] = 0, 1
    (delivered,) = draws(Network(drop=p, seed=2), graph, B, K, "delivered")  # by receiving edge
    rate = (~delivered).mean((0, 2))[graph.rev.numpy()]  # by transmission: entry e sends src[e] -> dst[e]
    assert within(rate, p, np.sqrt(p * (1 - p) / (K * B))).all()
    assert (rate[:5] == 0).all() and (rate[5:10] == 1).all()


def test_a_per_edge_dict_loses_the_named_transmission_i_to_j_only():
    problem, G = labelled_problem()
    i, j = "n0", next(iter(G.neighbors("n0")))
    before, after, channel = channel_step(problem, Network(drop={(i, j): 1.0}))
    kept = (after["z"] == before["z"]).all(-1)[:, 0]  # (E,): z_{j|i}, held by j (the edge j->i), is not updated
    nodes, src, dst = problem.compiled.nodes, problem.compiled.src.tolist(), problem.compiled.dst.tolist()
    assert [(nodes[s], nodes[d]) for e, (s, d) in enumerate(zip(src, dst, strict=False)) if kept[e]] == [(j, i)]
    assert channel.messages.tolist() == [len(src) - 1]


@pytest.mark.parametrize("drop, p_gb, p_bg", [(0.0, 0.1, 0.3), (0.2, 0.05, 0.5), (0.0, 0.4, 0.6)])  # last: dense
def test_bursts_follow_the_gilbert_elliott_chain(problems, drop, p_gb, p_bg):
    graph = problems["averaging"][0].compiled
    K, B = 2000, 4
    bad, delivered = draws(Network(drop=drop, burst=(p_gb, p_bg), seed=1), graph, B, K, "bad", "delivered")
    lost, N = ~delivered, bad.size
    pi, lam = p_gb / (p_gb + p_bg), 1 - p_gb - p_bg  # stationary P(bad); the chain's second eigenvalue
    inflation = (1 + abs(lam)) / (1 - abs(lam))  # variance of a time average of the correlated chain
    rate = pi + (1 - pi) * drop
    assert within(bad.mean(), pi, np.sqrt(pi * (1 - pi) * inflation / N))
    assert within(lost.mean(), rate, np.sqrt(rate * (1 - rate) * inflation / N))
    assert within(bad[0].mean(), pi, np.sqrt(pi * (1 - pi) / bad[0].size))  # stationary from the first draw
    assert not (bad & ~lost).any()  # a bad link loses everything
    leave, enter = (bad[:-1] & ~bad[1:]).sum(), (~bad[:-1] & bad[1:]).sum()  # transitions of the kept state
    spells = bad[:-1].sum(), (~bad[:-1]).sum()
    assert within(leave / spells[0], p_bg, np.sqrt(p_bg * (1 - p_bg) / spells[0]))
    assert within(enter / spells[1], p_gb, np.sqrt(p_gb * (1 - p_gb) / spells[1]))
    if drop == 0:  # the bursts of lost messages are the bad spells: mean length 1 / p_bg
        assert np.array_equal(lost, bad)
        burst = lost[:-1].sum() / (lost[:-1] & ~lost[1:]).sum()  # iterations lost per burst that ended
        assert burst == pytest.approx(1 / p_bg, rel=5 * np.sqrt((1 - p_bg) / spells[0]))
    assert not np.array_equal(bad[..., 0], bad[..., 1])  # each instance its own chains


def test_wake_one_wakes_exactly_one_uniform_node_per_iteration_and_instance(problems):
    graph = problems["averaging"][0].compiled
    K, B, n = 2000, 6, graph.n
    (awake,) = draws(Network(wake="one", seed=3), graph, B, K, "awake")  # (K, n, B)
    assert (awake.sum(1) == 1).all()
    assert within(awake.mean((0, 2)), 1 / n, np.sqrt((1 / n) * (1 - 1 / n) / (K * B))).all()
    assert not np.array_equal(awake[..., 0], awake[..., 1])
    before, after, channel = channel_step(problems["averaging"][0], Network(wake="one", seed=3))
    assert ((after["x"] != before["x"]).any(-1).sum(0) == 1).all()  # only the awake node moved
    sender = channel.awake[graph.dst]  # (E, B): edge e hears from dst[e]
    assert torch.equal(channel.sending, sender) and torch.equal(channel.delivered, sender)


def test_per_node_wake_rates_follow_their_probabilities(problems):
    graph = problems["averaging"][0].compiled
    K, B, n = 1000, 4, graph.n
    q = np.linspace(0.05, 1, n)
    q[0] = 0
    (awake,) = draws(Network(wake=q, seed=4), graph, B, K, "awake")
    rate = awake.mean((0, 2))
    assert within(rate, q, np.sqrt(q * (1 - q) / (K * B))).all() and rate[0] == 0 and rate[-1] == 1
    problem, G = labelled_problem()
    (awake,) = draws(Network(wake={"n3": 0.0}), problem.compiled, 2, 20, "awake")
    asleep = [problem.compiled.nodes[k] for k in np.flatnonzero(~awake.all((0, 2)))]
    assert asleep == ["n3"] and not awake[:, problem.compiled.nodes.index("n3")].any()


def test_uniform_per_edge_and_per_node_probabilities_draw_what_one_probability_draws(problems):
    problem = problems["averaging"][0]
    E, n = problem.compiled.num_edges, problem.n
    one = pdmm.solve(problem, max_iter=30, tol=0, network=Network(drop=0.3, wake=0.8, seed=5))
    each = pdmm.solve(problem, max_iter=30, tol=0, network=Network(drop=[0.3] * E, wake=np.full(n, 0.8), seed=5))
    assert np.array_equal(one.x, each.x) and np.array_equal(one.history["messages"], each.history["messages"])
    plain = pdmm.solve(problem, max_iter=30, tol=0)
    for off in (
        Network(drop=np.zeros(E), wake=[1.0] * n),
        Network(drop={}, wake={}),
        Network(drop={first_edge(problem): 0.0}, wake={problem.compiled.nodes[0]: 1.0}),
    ):
        ideal = pdmm.solve(problem, max_iter=30, tol=0, network=off)
        assert np.array_equal(plain.x, ideal.x)  # every new option off: bit for bit


NEW_EFFECTS = {
    "burst": lambda E, n: Network(drop=0.1, burst=(0.1, 0.3), seed=1),
    "per-edge drop": lambda E, n: Network(drop=np.random.default_rng(0).uniform(0, 0.6, E), seed=2),
    "one node at a time": lambda E, n: Network(wake="one", seed=3),
    "per-node wake": lambda E, n: Network(wake=np.linspace(0.2, 1, n), seed=4),
}


@pytest.mark.parametrize("effect", list(NEW_EFFECTS))
def test_averaged_pdmm_reaches_the_optimum_under_bursts_per_edge_loss_and_asynchronous_nodes(problems, effect):
    """Guaranteed as above: each is a random coordinate update of the averaged operator (theta = 1/2)."""
    problem, x_star = problems["averaging"]
    mean = np.broadcast_to(problem.local.q.numpy().mean(0)[:, None], x_star.shape)  # the closed form
    assert np.allclose(x_star, mean, atol=1e-6)
    network = NEW_EFFECTS[effect](problem.compiled.num_edges, problem.n)
    result = pdmm.solve(problem, theta=0.5, max_iter=30000, tol=1e-12, reference=mean, network=network)
    assert result.converged and result.history["error"][-1].max() < 1e-8


def test_unrolled_pdmm_runs_the_new_network_draws_as_solve(problems):
    problem = problems["least_squares"][0]
    E, n = problem.compiled.num_edges, problem.n
    for network in (
        Network(drop=np.linspace(0, 0.5, E), burst=(0.2, 0.4), wake="one", seed=3),
        Network(drop={first_edge(problem): 1.0}, wake=np.linspace(0.3, 1, n), seed=4),
    ):
        iterates = UnrolledPDMM(layers=8, rho=1.0, network=network)(problem).detach().numpy()
        result = pdmm.solve(problem, max_iter=8, tol=0, network=network)
        np.testing.assert_allclose(result.x, iterates[-1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "options, culprit",
    [
        ({"drop": [0.1] * 5}, "drop has 5 per-edge probabilities, but the graph has 394 directed edges"),
        ({"wake": [0.5] * 3}, "wake has 3 per-node probabilities, but the graph has 30 nodes"),
        ({"drop": {(0, 99): 0.5}}, r"drop names \(0, 99\), but 99 is not a node of the graph"),
        ({"drop": {(0, 0): 0.5}}, r"drop names \(0, 0\), which is not an edge of the graph"),
        ({"wake": {99: 0.5}}, "wake names 99, which is not a node of the graph"),
    ],
)
def test_per_edge_and_per_node_settings_that_do_not_fit_the_graph_are_named(problems, options, culprit):
    problem = problems["averaging"][0]
    assert problem.compiled.num_edges == 394
    with pytest.raises(ValueError, match=culprit):
        pdmm.solve(problem, max_iter=2, network=Network(**options))


def test_solve_command_takes_bursts_and_one_node_at_a_time(tmp_path):
    out = tmp_path / "bursty"
    assert (
        main(
            [
                "solve",
                "--no-progress",
                "--nodes",
                "20",
                "--iters",
                "30",
                "--method",
                "pdmm:theta=0.5",
                "--wake",
                "one",
                "--burst",
                "0.1,0.3",
                "--drop",
                "0.1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    args = json.loads((out / "config.json").read_text())["args"]
    assert args["wake"] == "one" and args["burst"] == [0.1, 0.3]
    with open(out / "history.csv", newline="") as file:
        first = next(csv.DictReader(file))
    G = pdmm.topology("random_geometric", n=20, seed=0)
    assert float(first["bits"]) <= 3 * 64 * max(d for _, d in G.degree)  # one node sent


@pytest.mark.parametrize(
    "flags, culprit",
    [
        (["--wake", "two"], "--wake: must be a probability or 'one'"),
        (["--burst", "0,0.5"], "--burst: burst p_gb must be > 0"),
        (["--burst", "0.1"], "--burst: expected P_GB,P_BG"),
    ],
)
def test_solve_command_names_a_bad_burst_or_wake(tmp_path, capsys, flags, culprit):
    with pytest.raises(SystemExit) as exit:
        main(["solve", "--no-progress", "--nodes", "10", *flags, "--out", str(tmp_path / "run")])
    assert exit.value.code == 2 and culprit in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def mask_or_none(mask, shape):
    """A channel mask, or all True where it is None (the event happened everywhere)."""
    return torch.ones(shape, dtype=torch.bool) if mask is None else mask


EVENTS = {  # the Bernoulli(p) trials of each event, as (K, trials) in the channel's row order (i B + b)
    "drop": (lambda p: Network(drop=p, seed=11), lambda c, E, n: ~mask_or_none(c.delivered, (E, 2))),
    "sleep": (lambda p: Network(wake=1 - p, seed=12), lambda c, E, n: ~mask_or_none(c.awake, (n, 2))),
    "down": (
        lambda p: Network(edge_up=1 - p, seed=13),
        lambda c, E, n: ~mask_or_none(c.sending, (E, 2))[c.graph.forward],
    ),  # one trial per undirected edge
}


@pytest.mark.parametrize("p", [0.05, 0.6])
@pytest.mark.parametrize("path", ["numba kernel", "torch expression"])
@pytest.mark.parametrize("event", list(EVENTS))
def test_events_are_independent_bernoulli_trials(problems, monkeypatch, event, p, path):
    """Binomial tests of the rate, and of the rate p^2 of pairs of trials: one trial in two successive
    iterations, two neighbouring trials (rows) in one iteration; and the edges sent to are those of
    awake senders and up edges. On the CPU both paths of pdmm.draws (the numba kernel, the torch
    expression that other devices run)."""
    if path == "torch expression":
        monkeypatch.setattr(pdmm.draws, "NUMBA", False)
    graph = problems["averaging"][0].compiled
    network, events = EVENTS[event]
    channel, K = Channel(network(p), graph, 2, 1, torch.float64), 1000
    E, n, x = graph.num_edges, graph.n, []
    for _ in range(K):
        channel.draw()
        x.append(events(channel, E, n).reshape(-1))
        sending = mask_or_none(channel.sending, (E, 2))  # sent to edge e: dst[e] awake and the edge up, both ways
        up = sending[graph.rev] if event == "down" else True
        assert torch.equal(sending, mask_or_none(channel.awake, (n, 2))[graph.dst] & up)
    x = torch.stack(x).numpy()  # (K, trials), an even number of each
    assert binomtest(int(x.sum()), x.size, p).pvalue > 1e-4
    for first, second in ((x[0::2], x[1::2]), (x[:, 0::2], x[:, 1::2]), (x[:, 1:-1:2], x[:, 2::2])):
        both = first & second
        assert binomtest(int(both.sum()), both.size, p * p).pvalue > 1e-4


def test_rare_per_edge_and_per_node_events_follow_their_probabilities(problems):
    """Per-edge loss and per-node wake rates at probabilities up to 0.2 and 0.15, and exactly 0 where set."""
    graph = problems["averaging"][0].compiled
    E, n, K, B = graph.num_edges, graph.n, 1000, 4
    drop = np.random.default_rng(1).uniform(0, 0.2, E)
    drop[:5], drop[5:10] = 0, 0.2
    (delivered,) = draws(Network(drop=drop, seed=5), graph, B, K, "delivered")
    lost = (~delivered).sum((0, 2))[graph.rev.numpy()]  # by transmission: entry e sends src[e] -> dst[e]
    assert (
        min(binomtest(int(k), K * B, q).pvalue for k, q in zip(lost, drop, strict=False)) > 1e-3 / E
        and (lost[:5] == 0).all()
    )
    wake = np.random.default_rng(2).uniform(0.85, 1, n)
    wake[0] = 1
    (awake,) = draws(Network(wake=wake, seed=6), graph, B, K, "awake")
    asleep = (~awake).sum((0, 2))
    assert (
        min(binomtest(int(k), K * B, 1 - q).pvalue for k, q in zip(asleep, wake, strict=False)) > 1e-3 / n
        and asleep[0] == 0
    )


class LoopChannel:
    """The reference for the methods under a channel: its masks applied row by row in Python loops."""

    def __init__(self, channel):
        self.graph, self.awake, self.delivered = channel.graph, channel.awake, channel.delivered

    def keep_asleep(self, new, old):
        return self._keep(new, old, self.awake, range(len(new)))

    def keep_asleep_edges(self, new, old):
        return self._keep(new, old, self.awake, self.graph.src.tolist())

    def exchange(self, y, held, reflect=None):
        received = torch.stack([y[int(r)] for r in self.graph.rev])
        if reflect is not None:
            received = reflect(y, received)
        return self._keep(received, held, self.delivered, range(len(received)))

    @staticmethod
    def _keep(new, old, mask, row_of):
        """new, with old's value at each row r and instance b whose mask[row_of[r], b] is False."""
        out = new.clone()
        if mask is not None:
            for r, m in enumerate(row_of):
                for b in range(new.shape[1]):
                    if not mask[m, b]:
                        out[r, b] = old[r, b]
        return out


def mask_networks(E, n):
    """Rare and common events, per edge and per node probabilities, bursts and one awake node."""
    return [
        Network(drop=0.1, seed=1),
        Network(wake=0.8, seed=2),
        Network(edge_up=0.85, seed=3),
        Network(drop=0.05, wake=0.9, edge_up=0.9, burst=(0.05, 0.3), seed=4),
        Network(drop=0.5, wake=0.4, seed=5),
        Network(drop=np.linspace(0, 0.2, E), wake=np.linspace(0.8, 1, n), seed=6),
        Network(wake="one", drop=0.1, edge_up=0.8, burst=(0.2, 0.5), seed=7),
    ]


@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("method, params", [(PDMM, {}), (PDMM, {"theta": 0.5}), (ADMM, {})])
def test_every_method_applies_the_channel_masks_as_a_per_row_loop_does_bit_for_bit(graph, method, params, d):
    problem = pdmm.averaging(graph, np.random.default_rng(d).normal(size=(2, 30, d)))
    compiled, local, edges = problem.compile("cpu", torch.float64)
    x0 = torch.randn(30, 2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for network in mask_networks(compiled.num_edges, compiled.n):
        channel = Channel(network, compiled, 2, d, torch.float64)
        algorithm = method(compiled, local, edges, 1.0, channel=channel, **params)
        state = algorithm.init(x0)
        for _ in range(3):
            channel.draw()
            expected = method(compiled, local, edges, 1.0, channel=LoopChannel(channel), **params).step(state)
            before = {key: value.clone() for key, value in state.items()}
            after = algorithm.step(state)
            assert all(torch.equal(state[key], before[key]) for key in state)  # the step left its input alone
            for key, value in expected.items():
                assert torch.equal(after[key], value), (network, key)
            state = after


@pytest.mark.parametrize("method, params", [(PDMM, {}), (PDMM, {"theta": 0.5}), (ADMM, {})])
def test_one_instance_of_one_number_draws_its_masks_inside_the_exchange_as_the_masks_say(graph, method, params):
    """B = 1, d = 1 on the CPU: the exchange draws the senders' and links' events in its own loop
    (pdmm.masked.exchanged_drawn); the step equals the per-row loop over the masks built afterwards from the
    same draws, and the counts equal the masks' sums."""
    problem = pdmm.averaging(graph, np.random.default_rng(5).normal(size=(30, 1)))
    compiled, local, edges = problem.compile("cpu", torch.float64)
    x0 = torch.randn(30, 1, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for network in mask_networks(compiled.num_edges, compiled.n):
        channel = Channel(network, compiled, 1, 1, torch.float64)
        algorithm = method(compiled, local, edges, 1.0, channel=channel, **params)
        state = algorithm.init(x0)
        for _ in range(3):
            channel.draw()
            messages, bits = channel.messages.clone(), channel.bits.clone()
            after = algorithm.step(state)
            expected = method(compiled, local, edges, 1.0, channel=LoopChannel(channel), **params).step(state)
            for key, value in expected.items():
                assert torch.equal(after[key], value), (network, key)
            E = compiled.num_edges
            sending, delivered = (mask_or_none(m, (E, 1)) for m in (channel.sending, channel.delivered))
            assert channel.messages - messages == delivered.sum() and channel.bits - bits == sending.sum() * 64
            state = after
