"""pdmm.solve(backend="distributed") (pdmm/distributed.py, pdmm/halo.py) against the single-process engine.

Each spawn starts P gloo processes on localhost once and runs every case in them; rank 0 writes
what it measured to a JSON file that the tests below read. PDMM's cases compare x (and the history)
after a fixed number of iterations (tol=0) to 1e-12 in float64; every method on every local function
it takes (_method_runs) to 1e-10, with tol=0 and a real tol, over simulated networks (the same draws as one
process, its message and bit counts exactly), and (slow) on a partition that cuts nearly every edge and to a
tight tol.
"""

import json
import os
import sys
import time
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from distributed_workers import free_port as _free_port
from distributed_workers import init_group as _init
from distributed_workers import report
from distributed_workers import spawn as _spawn

import pdmm
import pdmm.distributed as distributed
import pdmm.halo as halo
from pdmm.loop import RunOptions

TOL = 1e-12
METHOD_TOL = 1e-10


def _cases(world):
    """(name, problem, solve keywords) compared between the engines."""
    rng = np.random.default_rng(0)
    geometric, regular = pdmm.Graph.random_geometric(24, seed=1), pdmm.Graph.random_regular(20, degree=3, seed=2)
    H, y = rng.normal(size=(2, 20, 4, 3)), rng.normal(size=(2, 20, 4))
    averaging = pdmm.averaging(geometric, rng.normal(size=(3, 24, 2)))
    cases = [(f"averaging_theta1_k{k}", averaging, dict(max_iter=k, x0="random")) for k in (1, 2, 7, 25)]
    cases += [
        (
            "averaging_theta_half_regular",
            pdmm.averaging(regular, rng.normal(size=(2, 20, 2))),
            dict(max_iter=30, theta=0.5),
        ),
        (
            "least_squares_geometric",
            pdmm.least_squares(pdmm.Graph.random_geometric(20, seed=3), H, y, ridge=0.1),
            dict(max_iter=30, rho=0.5),
        ),
        ("lasso_regular_half", pdmm.lasso(regular, H, y, lam=0.5), dict(max_iter=30, theta=0.5)),
        ("lasso_geometric", pdmm.lasso(pdmm.Graph.random_geometric(20, seed=4), H, y, lam=0.2), dict(max_iter=20)),
        ("averaging_converges", averaging, dict(max_iter=3000, tol=1e-10)),
        # data of size 1e-9: the stopping test's floor is the problem's scale on every rank, not 1
        (
            "small_data_converges",
            pdmm.averaging(geometric, 1e-9 * rng.normal(size=(2, 24, 2))),
            dict(max_iter=3000, tol=1e-10),
        ),
        (
            "averaging_target",
            averaging,
            dict(
                max_iter=3000,
                reference=averaging.local.q.mean(0, keepdim=True).transpose(0, 1).expand(3, 24, 2).numpy(),
                target=1e-6,
                record_every=3,
                history=("residual", "error", "objective"),
            ),
        ),
        # every node on rank (i mod P): on a graph numbered by position almost every edge crosses the cut
        ("round_robin", averaging, dict(max_iter=25, x0="random", partition=np.arange(24) % world)),
    ]
    return cases


def _compare(reference, result):
    """Largest differences in x, in the objective there (relative to max(1, its size)) and in every history entry,
    and whether the bookkeeping agrees."""
    return dict(
        x=float(np.abs(reference.x - result.x).max()),
        fun=float(np.max(np.abs(reference.fun - result.fun) / np.maximum(1.0, np.abs(reference.fun)))),
        history=max(
            float(np.abs(reference.history[k] - result.history[k]).max())
            for k in reference.history
            if k not in ("iteration", "time")  # time: each run's own clock
        ),
        same=bool(
            reference.iterations == result.iterations
            and reference.converged == result.converged
            and reference.status == result.status
            and np.array_equal(reference.history["iteration"], result.history["iteration"])
            and result.nodes == reference.nodes
        ),
        iterations=result.iterations,
        counts=all(  # messages and bits: sums of whole numbers, the same in any order
            np.array_equal(reference.history[k], result.history[k]) for k in ("messages", "bits") if k in result.history
        ),
        message=reference.message == result.message,
    )


def _compare_worker(rank, world, port, out, timeout):
    _init(rank, world, port, timeout)
    found = {}
    for name, problem, keywords in _cases(world):
        local = {k: v for k, v in keywords.items() if k != "partition"}
        reference = pdmm.solve(problem, tol=local.pop("tol", 0), **local)
        found[name] = _compare(
            reference,
            pdmm.solve(
                problem,
                tol=keywords.get("tol", 0),
                backend="distributed",
                **{k: v for k, v in keywords.items() if k != "tol"},
            ),
        )
    # A message delivered to the wrong edge must show: deliver the swapped buffer reversed. With the round-robin
    # partition nearly every message crosses a rank boundary, so this misdelivers almost all of them; from a random
    # x0 every message z_{i|j} carries a different value and node i's x-update sums its own edges' states, so
    # any misdelivery changes x within two iterations (a wrong-rank bug in the packing shows the same way). The
    # node halo the same way, with gossip's products.
    _, problem, keywords = _cases(world)[-1]
    for name, kind, method in (("misdelivered", halo.EdgeSwap, "pdmm"), ("misdelivered_halo", halo.NodeHalo, "gossip")):
        original = kind.transfer
        kind.transfer = lambda self, v, original=original: original(self, v).flip(0)
        settings = {**keywords, "method": method, **({"x0": None} if method == "gossip" else {})}
        try:
            wrong = pdmm.solve(problem, tol=0, backend="distributed", **settings)
        finally:
            kind.transfer = original
        alone = {k: v for k, v in settings.items() if k != "partition"}
        found[name] = _compare(pdmm.solve(problem, tol=0, **alone), wrong)
    found.update(_method_cases(world))
    found.update(_reference_cases(rank))
    report(rank, found, out)


def _problems():
    """The local functions every method is run on: averaging (quadratic), lasso (non-smooth: pdmm, admm, extra as
    PG-EXTRA, nids) and logistic regression (smooth, no closed-form prox)."""
    rng = np.random.default_rng(7)
    graph = pdmm.Graph.random_geometric(20, seed=6)
    H, y = rng.normal(size=(2, 20, 4, 3)), rng.normal(size=(2, 20, 4))
    return {
        "averaging": pdmm.averaging(graph, rng.normal(size=(2, 20, 2))),
        "lasso": pdmm.lasso(graph, H, y, lam=0.3),
        "logistic": pdmm.logistic(graph, H, np.sign(y) + (y == 0), reg=0.1),
    }


def _method_runs(heavy=False):
    """(name, problem, keywords): every method on every local function it takes, tol=0 with every row recorded
    and a real tol (the stopping test and its certificate summed over the ranks), then the methods' options
    (per-node eta, a user's W, the other kinds, a given interval). heavy: the same runs on a round-robin partition
    (nearly every edge cut) and a tighter tol, which converges after hundreds of iterations."""
    problems = _problems()
    runs = []
    for method, cls in pdmm.METHODS.items():
        for kind, problem in problems.items():
            smooth_only = method in ("qa-pdmm", "dgd", "gradient-tracking")
            if (cls.capabilities.averaging_only and kind != "averaging") or (smooth_only and kind == "lasso"):
                continue
            name, fixed, stopped = f"{method}_{kind}", dict(method=method, record_every=1), dict(method=method)
            if heavy:
                runs.append((f"{name}_round_robin", problem, {**fixed, "partition": "round_robin"}))
                runs.append((f"{name}_tol_1e-6", problem, dict(stopped, max_iter=300, tol=1e-6)))
            else:
                runs.append((f"{name}_k15", problem, fixed))
                runs.append((f"{name}_tol", problem, dict(stopped, max_iter=40, tol=1e-2)))
    if heavy:
        return runs
    averaging, logistic = problems["averaging"], problems["logistic"]
    n = averaging.n
    W = pdmm.mixing_matrix(averaging.graph, "lazy_metropolis").toarray()
    return runs + [
        ("pdmm_theta_half_logistic", logistic, dict(theta=0.5, x0="random")),
        ("qa_pdmm_eta_per_node", logistic, dict(method="qa-pdmm", eta=np.linspace(1.0, 2.0, n))),
        ("dgd_diminishing", logistic, dict(method="dgd", step="diminishing", alpha=0.5)),
        ("extra_user_matrix", averaging, dict(method="extra", mixing=W, alpha=0.3, x0="random")),
        ("nids_max_degree", problems["lasso"], dict(method="nids", mixing="max_degree")),
        ("chebyshev_interval", averaging, dict(method="chebyshev", interval=(-0.6, 0.9))),
        ("gossip_lazy", averaging, dict(method="gossip", mixing="lazy_metropolis")),
        ("gradient_tracking_objective", logistic, dict(method="gradient-tracking", history=("residual", "objective"))),
        *_network_runs(problems),
    ]


NETWORKS = {
    "lossy": pdmm.Network(drop=0.2, wake=0.8, seed=3),
    "dither": pdmm.Network(bits=8, dither=True, seed=4),
}


def _network_runs(problems):
    """Every method that takes a network (not gossip, chebyshev) over a lossy, sleepy network and a dithered
    8-bit one, tol=0 with every row recorded; pdmm and dgd with a real tol too; pdmm over bursts, edges going
    down and one node waking per round (docs/guide/network.md, "Partitioned runs")."""
    runs = []
    for method, cls in pdmm.METHODS.items():
        if cls.capabilities.network:
            for label, network in NETWORKS.items():
                runs.append(
                    (f"{method}_{label}", problems["logistic"], dict(method=method, record_every=1, network=network))
                )
                if method in ("pdmm", "dgd"):
                    stopped = dict(method=method, max_iter=40, tol=1e-2, network=network)
                    runs.append((f"{method}_{label}_tol", problems["logistic"], stopped))
    bursty = pdmm.Network(burst=(0.2, 0.5), edge_up=0.7, wake="one", seed=5)
    return runs + [("pdmm_bursty_averaging", problems["averaging"], dict(record_every=1, network=bursty))]


def _method_cases(world, heavy=False):
    """Every run of _method_runs(heavy) on this world (blocks, or METIS, unless the run names a partition); in the
    distributed runs the spectra of W are computed by rank 0 alone (spectral_interval refuses on the other ranks)."""
    mixing = sys.modules["pdmm.mixing"]
    original = mixing.spectral_interval

    def refuse(W):
        raise AssertionError(f"rank {torch.distributed.get_rank()} computed the spectrum")

    found = {}
    for name, problem, keywords in _method_runs(heavy):
        keywords = {"max_iter": 15, "tol": 0, **keywords}
        partition = keywords.pop("partition", None)
        alone = pdmm.solve(problem, reorder=False, **keywords)  # the draws keyed by the graph's own numbering
        if partition == "round_robin":
            keywords["partition"] = np.arange(problem.n) % world
        mixing.spectral_interval = refuse if torch.distributed.get_rank() else original
        try:
            found[f"method_{name}"] = _compare(alone, pdmm.solve(problem, backend="distributed", **keywords))
        finally:
            mixing.spectral_interval = original
    return found


def _heavy_worker(rank, world, port, out, timeout):
    _init(rank, world, port, timeout)
    found = _method_cases(world, heavy=True)
    report(rank, found, out)


def _reference_cases(rank):
    """reference="cvxpy" is solved once, by rank 0, and broadcast: on every other rank pdmm.reference raises if
    called. Where rank 0 cannot solve it, every rank raises (the others with rank 0's message)."""
    solver = sys.modules["pdmm.reference"]
    original = solver.reference
    rng = np.random.default_rng(5)
    problem = pdmm.lasso(
        pdmm.Graph.random_geometric(16, seed=5), rng.normal(size=(16, 3, 2)), rng.normal(size=(16, 3)), lam=0.3
    )
    keywords = dict(tol=0, max_iter=15, reference="cvxpy", history=("residual", "error"))
    alone = pdmm.solve(problem, **keywords)

    def refuse(*args, **kwargs):
        raise AssertionError(f"rank {rank} solved the centralised reference")

    def fail(*args, **kwargs):
        raise RuntimeError("no\nsolution here")

    found = {}
    solver.reference = refuse if rank else original
    try:
        found["reference_once"] = _compare(alone, pdmm.solve(problem, backend="distributed", **keywords))
        solver.reference = fail if rank == 0 else refuse
        try:
            pdmm.solve(problem, backend="distributed", **keywords)
            raised = None
        except RuntimeError as err:
            raised = str(err)
    finally:
        solver.reference = original
    if rank:  # only rank 0 writes what it found: the others check theirs here (a failure fails the spawn)
        assert raised == "rank 0 could not solve the centralised reference: RuntimeError: no solution here", raised
    found["reference_failure"] = raised
    return found


@pytest.fixture(scope="module", params=[2, 4])
def compared(request, tmp_path_factory):
    return _spawn(_compare_worker, request.param, tmp_path_factory.mktemp("distributed"))


@pytest.mark.parametrize(
    "name",
    [
        "averaging_theta1_k1",
        "averaging_theta1_k2",
        "averaging_theta1_k7",
        "averaging_theta1_k25",
        "averaging_theta_half_regular",
        "least_squares_geometric",
        "lasso_regular_half",
        "lasso_geometric",
        "averaging_converges",
        "small_data_converges",
        "averaging_target",
        "round_robin",
    ],
)
def test_distributed_matches_single_process(compared, name):
    found = compared[name]
    assert found["x"] <= TOL and found["fun"] <= TOL and found["history"] <= TOL and found["same"], found


def _same_as_one_process(found):
    assert found["x"] <= METHOD_TOL and found["fun"] <= METHOD_TOL and found["history"] <= METHOD_TOL, found
    assert found["same"] and found["counts"] and found["message"], found


@pytest.mark.parametrize("name", [name for name, _, _ in _method_runs()])
def test_every_method_matches_single_process(compared, name):
    """x, the objective, every history row, the iterations and the status equal one process's to 1e-10 (the
    distributed sums are taken in another order), for tol=0 and a real tol; the mixing matrices' spectra on rank
    0 alone."""
    _same_as_one_process(compared[f"method_{name}"])


@pytest.fixture(scope="module", params=[2, 4])
def compared_heavy(request, tmp_path_factory):
    return _spawn(_heavy_worker, request.param, tmp_path_factory.mktemp("distributed_heavy"), timeout=120.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, _, _ in _method_runs(heavy=True)])
def test_every_method_matches_single_process_cut_everywhere_and_converged(compared_heavy, name):
    """As test_every_method_matches_single_process, on a round-robin partition and to tol=1e-6."""
    _same_as_one_process(compared_heavy[f"method_{name}"])


@pytest.mark.parametrize("name", ["averaging_converges", "small_data_converges"])
def test_distributed_stops_where_single_process_stops(compared, name):
    found = compared[name]
    assert 0 < found["iterations"] < 3000 and found["same"], found


def test_reference_is_solved_once_and_shared(compared):
    found = compared["reference_once"]
    assert found["x"] <= TOL and found["history"] <= TOL and found["same"], found


def test_reference_failure_on_rank_0_stops_every_rank(compared):
    assert compared["reference_failure"] == "no\nsolution here", compared["reference_failure"]


@pytest.mark.parametrize("name", ["misdelivered", "misdelivered_halo"])
def test_misdelivered_messages_are_caught(compared, name):
    assert compared[name]["x"] > 1e-3, compared[name]


def _bad_worker(rank, world, port, out, timeout):
    _init(rank, world, port, timeout)
    rng = np.random.default_rng(0)
    G = pdmm.Graph.random_geometric(12, seed=0)
    a = rng.normal(size=(12, 2))
    logistic = pdmm.logistic(G, rng.normal(size=(12, 3, 2)), rng.choice([-1.0, 1.0], size=(12, 3)))
    edge = {(int(i), int(j)): (np.eye(2), -np.eye(2), np.zeros(2)) for i, j in G.edges}
    attempts = {
        "different_data": lambda: pdmm.solve(pdmm.averaging(G, a + rank), backend="distributed", max_iter=3),
        "different_arguments": lambda: pdmm.solve(pdmm.averaging(G, a), backend="distributed", rho=1.0 + rank),
        "compile": lambda: pdmm.solve(logistic, backend="distributed", compile=True),
        "edge_matrices": lambda: pdmm.solve(  # a method that takes none refuses them here as on one process
            pdmm.averaging(G, a, constraints=edge), backend="distributed", method="dgd"
        ),
        "partition": lambda: pdmm.solve(pdmm.averaging(G, a), backend="distributed", partition=np.zeros(12, int)),
        "too_many_ranks": lambda: (
            pdmm.solve(pdmm.averaging(pdmm.Graph.from_edges([0], [1]), [1.0, 2.0]), backend="distributed")
            if world > 2
            else None
        ),
    }
    found = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            found[name] = None
        except ValueError as err:
            found[name] = str(err)
    # a group of ranks 2 and 1, in that order, so that its rank 0 is global rank 2: its reference takes longer than
    # the group's 3 s timeout, and the group's other rank still waits for it; both send rank 0 of the world the
    # largest difference of their error history from one process's (the barrier lines the ranks up, so that setting
    # up the group's connections fits in its timeout)
    torch.distributed.barrier()
    short = torch.distributed.new_group([2, 1], timeout=timedelta(seconds=3), sort_ranks=False)
    difference = torch.zeros(1, dtype=torch.float64)
    if rank in (1, 2):
        solver = sys.modules["pdmm.reference"]
        original = solver.reference

        def slow(*args, **kwargs):
            time.sleep(6)
            return original(*args, **kwargs)

        problem = pdmm.averaging(G, a)
        history = ("residual", "error")
        alone = pdmm.solve(problem, rho=1.0, max_iter=5, tol=0, reference="cvxpy", history=history, check_every=1)
        options = RunOptions(
            method="pdmm",
            rho=1.0,
            stopping=pdmm.Stopping(max_iter=5, tol=0.0, check_every=1),
            recording=pdmm.Recording(reference="cvxpy", history=history, record_every=1),
            engine=pdmm.Engine(backend="distributed"),
        )
        solver.reference = slow if rank == 2 else original
        try:
            shared = distributed.run(problem, options, group=short)
            same_rows = np.array_equal(shared.history["iteration"], alone.history["iteration"])
            difference[0] = np.abs(shared.history["error"] - alone.history["error"]).max() if same_rows else np.inf
        except RuntimeError:  # a timed-out wait: recorded as an infinite difference
            difference[0] = np.inf
        finally:
            solver.reference = original
    differences = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    torch.distributed.all_gather(differences, difference)
    found["slow_reference"] = [float(d) for d in differences[1:]]
    # a rank that never joins: rank 0's collective times out after the group's timeout, with an error
    torch.distributed.barrier()
    group = torch.distributed.new_group([0, 1], timeout=timedelta(seconds=2))
    if rank == 0:
        try:
            options = RunOptions(
                method="pdmm",
                rho=1.0,
                stopping=pdmm.Stopping(max_iter=5, tol=0.0, check_every=10),
                recording=pdmm.Recording(history=("residual",), record_every=1),
                engine=pdmm.Engine(backend="distributed"),
            )
            distributed.run(pdmm.averaging(G, a), options, group=group)
            found["timeout"] = None
        except RuntimeError as err:
            found["timeout"] = f"{type(err).__name__}: {err}"
        with open(out, "w") as f:
            json.dump(found, f)
    else:  # alive, but never joining rank 0's collective, until rank 0 has its answer
        deadline = time.monotonic() + 120
        while not os.path.exists(out) and time.monotonic() < deadline:
            time.sleep(0.2)
    os._exit(0)  # a group with a timed-out operation may abort in its destructor; skip the teardown


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    return _spawn(_bad_worker, 3, tmp_path_factory.mktemp("distributed_bad"))


@pytest.mark.parametrize(
    "name, words",
    [
        ("different_data", "different problems"),
        ("different_arguments", "different problems"),
        ("compile", "compile=True"),
        ("edge_matrices", "edge-matrix constraints"),
        ("partition", "every rank"),
        ("too_many_ranks", "3 ranks"),
    ],
)
def test_distributed_refuses_bad_input(refused, name, words):
    assert refused[name] is not None and words in refused[name], refused[name]


def test_collectives_time_out(refused):
    """In one line that says what failed and why (gloo's reason without its source path and advice)."""
    found = refused["timeout"]
    assert found is not None and found.startswith(
        "CollectiveError: a collective with the other processes failed (Timed out waiting 2000ms"
    ), found
    assert "\n" not in found and ".cc:" not in found and "typically caused" not in found, found


def test_reference_outwaits_the_group_timeout(refused):
    """On both ranks of a subgroup whose rank 0 (global rank 2) takes twice the group's timeout to solve x*."""
    found = refused["slow_reference"]
    assert len(found) == 2 and max(found) <= TOL, found


def test_distributed_needs_a_process_group():
    G = pdmm.Graph.random_geometric(8, seed=0)
    with pytest.raises(RuntimeError, match="process group"):
        pdmm.solve(pdmm.averaging(G, np.arange(8.0)), backend="distributed")


def test_unknown_backend_and_local_partition_are_refused():
    problem = pdmm.averaging(pdmm.Graph.random_geometric(8, seed=0), np.arange(8.0))
    with pytest.raises(ValueError, match="backend must be"):
        pdmm.solve(problem, backend="mpi")
    with pytest.raises(ValueError, match="partition= needs backend='distributed'"):
        pdmm.solve(problem, partition=np.zeros(8, int))


def test_partition_fallback_blocks_are_contiguous():
    assert distributed.blocks(7, 3).tolist() == [0, 0, 0, 1, 1, 2, 2]
    graph = pdmm.CompiledGraph.from_graph(pdmm.Graph.random_geometric(30, seed=0))
    owner = distributed.partition(graph, 4)
    assert sorted(set(owner.tolist())) == [0, 1, 2, 3]


ONE_RANK_EXTRAS = {
    "pdmm_nodes": dict(form="nodes"),
    "qa_pdmm_nodes": dict(method="qa-pdmm", form="nodes", theta=0.5),
    "pdmm_private": dict(network=pdmm.Network(privacy=0.5, drop=0.2, seed=3)),
}


def _one_rank_worker(rank, device, port, out):
    """A group of one process made by init_process_group's default backend ("cpu:gloo,cuda:nccl" where CUDA is
    available, else gloo), its halos exchanging through all_to_all_single although no other rank holds anything
    (always=True): every method on `device` equals the local engine's run there."""
    os.environ["LOCAL_RANK"] = "0"
    torch.set_num_threads(1)
    distributed.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, timeout=60)
    exchanges = []
    original = distributed.GroupCollectives._all_to_all

    def counted(self, *args):
        exchanges.append(args[0].device.type)
        original(self, *args)

    distributed.GroupCollectives._all_to_all = counted
    always = distributed.GroupCollectives
    distributed.GroupCollectives = lambda group, world: always(group, world, always=True)
    found = {"backend": str(torch.distributed.get_backend())}
    try:
        for method in pdmm.METHODS:
            problem = _problems()["logistic" if method not in ("gossip", "chebyshev") else "averaging"]
            keywords = dict(method=method, max_iter=10, tol=0, device=device, record_every=1)
            found[method] = _compare(
                pdmm.solve(problem, **keywords), pdmm.solve(problem, backend="distributed", **keywords)
            )
        for name, more in ONE_RANK_EXTRAS.items():  # the node form's halo product; privacy's one summed row
            keywords = dict(max_iter=10, tol=0, device=device, record_every=1, **more)
            problem = _problems()["averaging"]
            found[name] = _compare(
                pdmm.solve(problem, **keywords), pdmm.solve(problem, backend="distributed", **keywords)
            )
    finally:
        distributed.GroupCollectives = always
        always._all_to_all = original
    found["exchanges"] = sorted(set(exchanges))
    with open(out, "w") as f:
        json.dump(found, f)
    torch.distributed.destroy_process_group()


def test_one_rank_group_runs_every_method_on_its_device(device, tmp_path):
    """On the CPU with gloo; on CUDA (tests/conftest.py's device fixture) with NCCL for the iterations' exchanges,
    cuda:LOCAL_RANK the rank's device; the node form and network privacy too."""
    out = tmp_path / f"one_rank_{device}.json"
    mp.spawn(_one_rank_worker, args=(device, _free_port(), str(out)), nprocs=1, join=True)
    found = json.loads(out.read_text())
    assert ("nccl" in found["backend"]) == torch.cuda.is_available() and "gloo" in found["backend"], found
    assert found["exchanges"] == [device], found  # the halos' all_to_all ran, on the run's device
    for method in [*pdmm.METHODS, *ONE_RANK_EXTRAS]:
        _same_as_one_process(found[method])


def test_cuda_device_is_the_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert distributed.rank_device("cuda") == torch.device("cuda", 3)
    assert distributed.rank_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="LOCAL_RANK=3"):
        distributed.rank_device("cuda:1")


TORCHRUN_SCRIPT = """
import sys
import numpy as np, torch, pdmm, pdmm.distributed
torch.set_num_threads(1)
pdmm.distributed.init_process_group()
G = pdmm.Graph.random_geometric(16, seed=0)
a = np.random.default_rng(0).normal(size=(2, 16, 3))
result = pdmm.solve(pdmm.averaging(G, a), backend="distributed", max_iter=2000)
assert result.converged and np.abs(result.x - a.mean(1, keepdims=True)).max() < 1e-8, result
assert np.abs(pdmm.solve(pdmm.averaging(G, a), max_iter=2000).x - result.x).max() <= 1e-12
sys.stdout.write(f"rank {torch.distributed.get_rank()} ok {result.iterations}\\n")  # one write: lines stay whole
"""


def test_torchrun_runs_the_documented_usage(tmp_path):
    """The module docstring's recipe under torchrun (env:// rendezvous, default group timeout)."""
    import subprocess
    import sys

    script = tmp_path / "average.py"
    script.write_text(TORCHRUN_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0 and done.stdout.count(" ok ") == 2, done.stdout + done.stderr
