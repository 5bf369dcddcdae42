"""Each rank holds its part (pdmm/parts.py, docs/guide/distributed.md "Each rank holds its part"): pdmm.solve on a
pdmm.parts.PartProblem per rank against the whole problem on the same ranks (1e-12) and one process (1e-10); the
ids PartProblem.from_edges derives against PartProblem.of's (in one process, ranks emulated by threads, and on a
gloo group); gather=False; hostile parts, one line each."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from distributed_workers import init_group, report, spawn_each
from thread_world import ThreadWorld

import pdmm
from pdmm.parts import PartProblem

WHOLE_TOL = 1e-12
ONE_PROCESS_TOL = 1e-10
IDS = ("nodes", "src", "dst", "edge_id", "rev_id", "peer", "undirected_id")


def _problems():
    rng = np.random.default_rng(11)
    graph = pdmm.Graph.random_geometric(22, seed=5)
    H, y = rng.normal(size=(2, 22, 4, 3)), rng.normal(size=(2, 22, 4))
    return {
        "averaging": pdmm.averaging(graph, rng.normal(size=(2, 22, 2))),
        "lasso": pdmm.lasso(graph, H, y, lam=0.3),
        "small": pdmm.averaging(graph, 1e-9 * rng.normal(size=(2, 22, 2))),  # the test's floor: the problem's scale
    }


def _owner(n, world, seed=3):
    """A random owner array giving every rank at least one node (not blocks: parts are scattered)."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, world, size=n)
    owner[rng.choice(n, size=world, replace=False)] = np.arange(world)
    return owner


def _runs():
    """(name, problem kind, solve keywords) run both ways on the ranks."""
    runs = []
    for method in ("pdmm", "qa-pdmm", "admm"):
        for net_name, network in (("ideal", None), ("drop", pdmm.Network(drop=0.2, seed=3))):
            kinds = ("averaging",) if method == "qa-pdmm" else ("averaging", "lasso")
            for kind in kinds:
                keywords = dict(method=method, max_iter=25, tol=0, network=network, record_every=1)
                runs.append((f"{method}_{kind}_{net_name}", kind, keywords))
    runs.append(("pdmm_node_form", "averaging", dict(form="nodes", max_iter=25, tol=0, record_every=1)))
    privacy = pdmm.Network(privacy=0.5, drop=0.2, seed=3)  # the privacy measures: sums over every rank's part
    runs.append(("qa_pdmm_privacy", "averaging", dict(method="qa-pdmm", network=privacy, max_iter=25, tol=0)))
    runs.append(("pdmm_averaging_tol", "averaging", dict(max_iter=500, tol=1e-8, x0="random")))
    runs.append(("pdmm_lasso_tol", "lasso", dict(max_iter=400, tol=1e-5)))  # the certificate's prox step: sum L_i
    runs.append(("pdmm_small_data_tol", "small", dict(max_iter=3000, tol=1e-10)))  # the scale over every rank
    rng = np.random.default_rng(5)  # x0 and x* as arrays: each rank passes its own rows (_own)
    given = dict(x0=rng.normal(size=(22, 2)), reference=rng.normal(size=(2, 22, 2)), history=("error", "objective"))
    runs.append(("qa_pdmm_x0_reference", "averaging", dict(method="qa-pdmm", max_iter=25, tol=0, **given)))
    W = pdmm.mixing_matrix(_problems()["averaging"].graph, "metropolis")
    for kind in ("metropolis", "lazy_metropolis", "max_degree"):
        runs.append((f"gossip_{kind}", "averaging", dict(method="gossip", mixing=kind, max_iter=25, tol=0)))
    interval = pdmm.spectral_interval(W)  # the spectrum a rank holding only its part cannot compute
    runs.append(("chebyshev_interval", "averaging", dict(method="chebyshev", interval=interval, max_iter=25, tol=0)))
    return runs


def _own(keywords, nodes):
    """The keywords as a rank passes them with its part: x0 and an array reference sliced to its own rows."""
    own = dict(keywords)
    for name in ("x0", "reference"):
        if isinstance(own.get(name), np.ndarray):
            own[name] = own[name][..., nodes, :]
    return own


def _summary(result):
    return dict(
        x=np.asarray(result.x).tolist(),
        fun=np.atleast_1d(result.fun).tolist(),
        iterations=result.iterations,
        status=result.status,
        nodes=[int(i) for i in result.nodes],
        reference=None if result.reference is None else np.asarray(result.reference).tolist(),
        history={k: np.asarray(v).tolist() for k, v in result.history.items() if k != "time"},
    )


def _hostile(problem, owner, rank, world):
    """Each hostile case's message on this rank: a part with the wrong n, and parts overlapping at one node (rank
    1 holds a node of rank 0 in place of one of its own of the same degree, so the counts still add up)."""
    found = {}
    part = PartProblem.of(problem, owner, rank, world)
    wrong = part
    if rank == 1:  # another graph size: the same arrays, n one more
        wrong = replace(part, n=part.n + 1)
    try:
        pdmm.solve(wrong, backend="distributed", max_iter=2, tol=0)
        found["wrong_n"] = "no error"
    except ValueError as err:
        found["wrong_n"] = str(err)
    degree = problem.compiled.degree.numpy()
    u, v = next(
        (u, v)
        for u in np.flatnonzero(owner == 0)
        for v in np.flatnonzero(owner == 1)
        if degree[u] == degree[v] and (owner == 0).sum() > 1
    )
    moved = owner.copy()
    moved[u], moved[v] = 1, 0  # rank 1 takes u (held by rank 0 too) and leaves v to no one
    overlapping = PartProblem.of(problem, moved if rank == 1 else owner, rank, world)
    try:
        pdmm.solve(overlapping, backend="distributed", max_iter=2, tol=0)
        found["overlap"] = "no error"
    except ValueError as err:
        found["overlap"] = str(err)
    return found


def _parts_worker(rank, world, port, out, timeout):
    init_group(rank, world, port, timeout)
    problems = _problems()
    found = {}
    for name, kind, keywords in _runs():
        problem = problems[kind]
        owner = _owner(problem.n, world)
        whole = pdmm.solve(problem, backend="distributed", partition=owner, **keywords)
        part = PartProblem.of(problem, owner, rank, world)
        derived = PartProblem.from_edges(part.nodes, part.src[::-1], part.dst[::-1], part.local, part.n)
        own = _own(keywords, part.nodes)
        found[name] = dict(
            whole=_summary(whole),
            part=_summary(pdmm.solve(part, backend="distributed", **own)),
            derived=_summary(pdmm.solve(derived, backend="distributed", **own)),
            own=_summary(pdmm.solve(part, backend="distributed", gather=False, **own)),
            ids_equal=all(np.array_equal(getattr(part, k), getattr(derived, k)) for k in IDS),
        )
    found["hostile"] = _hostile(problems["averaging"], _owner(problems["averaging"].n, world), rank, world)
    part = PartProblem.of(problems["averaging"], _owner(problems["averaging"].n, world), rank, world)
    whole_only = dict(  # what needs the whole problem: W's spectrum (where no spectra are given), cvxpy's x*, labels
        chebyshev=dict(method="chebyshev"),
        dgd=dict(method="dgd"),
        cvxpy=dict(reference="cvxpy"),
        labels=dict(network=pdmm.Network(wake={0: 0.5})),
    )
    for case, keywords in whole_only.items():
        try:
            pdmm.solve(part, backend="distributed", max_iter=2, tol=0, **keywords)
            found["hostile"][case] = "no error"
        except ValueError as err:
            found["hostile"][case] = str(err)
    report(rank, found, out, each=True)


@pytest.fixture(scope="module", params=[2, 4])
def ranks(request, tmp_path_factory):
    """Every rank's findings, [rank] -> dict, for P = 2 and 4 processes."""
    world = request.param
    tmp = tmp_path_factory.mktemp(f"parts{world}")
    return spawn_each(_parts_worker, world, tmp, timeout=120.0)


def _close(a, b):
    return float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))))


@pytest.mark.parametrize("name", [name for name, _, _ in _runs()])
def test_parts_equal_the_whole_problem_and_one_process(ranks, name):
    """Per-rank parts (cut by PartProblem.of, and derived by from_edges on the group) run to the whole problem's
    result on the same ranks (1e-12: the same sums) and to one process's, not renumbered (1e-10)."""
    kind, keywords = next((k, kw) for n, k, kw in _runs() if n == name)
    alone = pdmm.solve(_problems()[kind], reorder=False, **keywords)
    for found in ranks:
        case = found[name]
        assert case["ids_equal"]
        whole = case["whole"]
        for built in ("part", "derived"):
            got = case[built]
            assert _close(got["x"], whole["x"]) <= WHOLE_TOL
            assert _close(got["x"], alone.x) <= ONE_PROCESS_TOL
            assert _close(got["fun"], np.atleast_1d(alone.fun)) <= ONE_PROCESS_TOL * max(1.0, abs(alone.fun).max())
            assert (got["iterations"], got["status"]) == (alone.iterations, alone.status)
            assert got["nodes"] == list(range(alone.x.shape[-2]))
            assert (got["reference"] is None) == (alone.reference is None)
            if alone.reference is not None:
                assert np.array_equal(np.asarray(got["reference"]), alone.reference)
            for k, values in got["history"].items():
                scale = max(1.0, float(np.abs(np.asarray(alone.history[k])).max()))
                assert _close(values, alone.history[k]) <= ONE_PROCESS_TOL * scale, k


@pytest.mark.parametrize("name", [name for name, _, _ in _runs()])
def test_gather_false_returns_the_ranks_own_rows(ranks, name):
    """gather=False: each rank's x is its own nodes' rows of the gathered x, result.nodes their global ids, and
    together the ranks hold every node once."""
    held = []
    for found in ranks:
        own, gathered = found[name]["own"], np.asarray(found[name]["part"]["x"])
        nodes = own["nodes"]
        assert np.array_equal(np.asarray(own["x"]), gathered[..., nodes, :])
        if own["reference"] is not None:
            reference = np.asarray(found[name]["part"]["reference"])
            assert np.array_equal(np.asarray(own["reference"]), reference[..., nodes, :])
        assert own["iterations"] == found[name]["part"]["iterations"]
        held += nodes
    assert sorted(held) == list(range(np.asarray(ranks[0][name]["part"]["x"]).shape[-2]))


def test_hostile_parts_give_one_line_on_every_rank(ranks):
    """A rank whose part has another n, and parts that overlap at one node (their counts still adding up): a
    one-line ValueError on every rank, naming the problem."""
    for found in ranks:
        wrong, overlap = found["hostile"]["wrong_n"], found["hostile"]["overlap"]
        assert "differ" in wrong and "\n" not in wrong
        assert overlap.startswith("the parts' nodes: ") and "\n" not in overlap
    assert any("is held by more than one rank" in found["hostile"]["overlap"] for found in ranks)
    for found in ranks:
        hostile = found["hostile"]
        for method in ("chebyshev", "dgd"):
            assert hostile[method].startswith("the 'metropolis' mixing matrix's spectrum needs the whole graph")
        assert hostile["cvxpy"].startswith("reference='cvxpy' needs the whole problem")
        assert "names node labels" in hostile["labels"]
        assert all("\n" not in message for message in hostile.values())


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("seed", range(4))
def test_from_edges_derives_the_whole_graphs_ids(world, seed):
    """from_edges, each rank given its nodes and out-edges in a shuffled order, derives exactly PartProblem.of's
    ids (the whole compiled graph's) on random graphs and random owners; ranks emulated by threads."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(world + 3, 40))
    graph = (
        pdmm.Graph.random_regular(n - n % 2, degree=3, seed=seed)
        if seed % 2
        else pdmm.Graph.erdos_renyi(n, 0.2, seed=seed)
    )
    problem = pdmm.averaging(graph, rng.normal(size=(graph.n, 2)))
    owner = _owner(problem.n, world, seed)
    parts = [PartProblem.of(problem, owner, r, world) for r in range(world)]
    threads = ThreadWorld(world)

    def derive(rank):
        part = parts[rank]
        shuffle = rng.permutation(len(part.src)) if rank == 0 else np.arange(len(part.src))[::-1]
        return PartProblem.from_edges(
            part.nodes, part.src[shuffle], part.dst[shuffle], part.local, problem.n, exchange=threads.exchange(rank)
        )

    for part, derived in zip(parts, threads.run(derive), strict=True):
        assert not isinstance(derived, Exception), derived
        for name in IDS:
            assert np.array_equal(getattr(part, name), getattr(derived, name)), name
        assert (derived.n, derived.num_edges, derived.rank, derived.world) == (part.n, part.num_edges, part.rank, world)


def test_from_edges_hostile_input_gives_one_line_on_every_rank():
    """An edge without its reverse, and parts that overlap: ValueError on every rank, one line."""
    problem = _problems()["averaging"]
    owner = _owner(problem.n, 2)
    parts = [PartProblem.of(problem, owner, r, 2) for r in range(2)]

    def derive(world, edit):
        def call(rank):
            nodes, src, dst = edit(rank, parts[rank])
            local = parts[rank].local.nodes(torch.zeros(len(nodes), dtype=torch.int64))  # one row per node
            return PartProblem.from_edges(nodes, src, dst, local, problem.n, exchange=world.exchange(rank))

        return call

    def one_way(rank, part):  # rank 0 leaves out one edge, whose reverse rank 0 or 1 still gives
        return (part.nodes, part.src[1:], part.dst[1:]) if rank == 0 else (part.nodes, part.src, part.dst)

    world = ThreadWorld(2)
    errors = world.run(derive(world, one_way))
    assert all(isinstance(e, ValueError) and "\n" not in str(e) for e in errors)
    assert any("has no reverse" in str(e) for e in errors)
    extra = parts[0].nodes[0]

    def overlap(rank, part):  # rank 1 also claims rank 0's first node (without edges)
        if rank == 0:
            return part.nodes, part.src, part.dst
        nodes = np.union1d(part.nodes, [extra])
        at = int(np.searchsorted(nodes, extra))
        return nodes, part.src + (part.src >= at), part.dst

    world = ThreadWorld(2)
    errors = world.run(derive(world, overlap))
    assert all(isinstance(e, ValueError) and "\n" not in str(e) for e in errors)
    assert any(f"node {extra} is held by more than one rank" in str(e) for e in errors)


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(nodes=np.array([3, 1])), "strictly ascending"),
        (dict(src=np.array([0, 0], dtype=np.int32)), "int64"),
        (dict(dst=np.array([99, 2])), "dst must lie in"),
        (dict(dst=np.array([2, 0])), "sorted by (src, dst)"),
        (dict(n=0), "n must be an int > 0"),
        (dict(num_edges=3), "even"),
        (dict(rank=2), "rank"),
    ],
)
def test_part_problem_refuses_bad_fields_in_one_line(change, words):
    """PartProblem's own checks: dtypes, ranges, order, sizes; one-line ValueError naming the field."""
    problem = _problems()["averaging"]
    part = PartProblem.of(problem, _owner(problem.n, 2), 0, 2)
    small = dict(
        n=part.n,
        num_edges=part.num_edges,
        nodes=np.array([1, 3]),
        src=np.array([0, 0]),
        dst=np.array([0, 2]),
        edge_id=np.array([4, 5]),
        rev_id=np.array([0, 9]),
        peer=np.array([1, 1]),
        undirected_id=np.array([0, 3]),
        local=part.local.nodes(torch.tensor([0, 1])),
        batched=part.batched,
        rank=0,
        world=2,
    )
    PartProblem(**small)  # the unchanged fields are a valid part
    with pytest.raises(ValueError) as err:
        PartProblem(**{**small, **change})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_part_needs_the_distributed_backend_and_its_own_reference():
    """A PartProblem on the local backend, or with reference='cvxpy' (the whole problem's), is a one-line error."""
    problem = _problems()["averaging"]
    part = PartProblem.of(problem, np.zeros(problem.n, dtype=np.int64), 0, 1)
    with pytest.raises(ValueError, match="backend='distributed'"):
        pdmm.solve(part)
    with pytest.raises(ValueError, match="gather=False applies to backend='distributed'"):
        pdmm.solve(problem, gather=False)
