"""Every method of pdmm.METHODS on torch.distributed: `pdmm.solve(problem, backend="distributed")`
(docs/guide/distributed.md, "What runs on the engine"; docs/theory/pdmm.md section 4).

Run the same script on P processes, each calling `pdmm.distributed.init_process_group()` and then
`pdmm.solve(..., backend="distributed")` with the same problem::

    # torchrun --standalone --nproc-per-node 4 script.py
    import numpy as np, pdmm, pdmm.distributed
    pdmm.distributed.init_process_group()            # gloo (cpu:gloo,cuda:nccl with CUDA), env://, 120 s timeout
    G = pdmm.Graph.random_geometric(1000, seed=0)
    a = np.random.default_rng(0).normal(size=(1000, 3))    # the same data on every rank
    result = pdmm.solve(pdmm.averaging(G, a), backend="distributed")   # the same Result on every rank

The nodes are split into P parts::

    partition  pymetis.part_graph(P) on the CSR adjacency when pymetis is installed (computed on
               rank 0 and broadcast); otherwise, or when METIS leaves a part empty, contiguous blocks
               of node indices (np.array_split), which suit graphs numbered by position such as
               pdmm.Graph.random_geometric; or an explicit `partition=` (one rank per node).
    ownership  rank r holds x_i of its nodes and the directed edges OUT of them, i->j with i its own:
               the edge state z_{i|j} it aggregates, and the message y_{i|j} it computes. Since edges
               are sorted by (src, dst) a rank's edges are its nodes' contiguous blocks, so aggregate,
               fuse and the messages run unchanged (pdmm.methods) on the rank's pdmm.halo.PartGraph; the
               method is built as on one process (pdmm.building.build_method).
    exchange   z_{j|i} <- y_{i|j} lives at the owner of j: once per iteration the messages of the edges
               that cross the cut are swapped with one torch.distributed.all_to_all_single (pdmm.halo.
               EdgeSwap: pdmm, qa-pdmm, admm); a product with a mixing matrix W takes its neighbours' rows
               of x through one all_to_all_single too (pdmm.halo.NodeHalo: gossip, chebyshev, dgd, extra,
               nids, gradient tracking), each rank multiplying by its rows of W. W's spectrum is computed
               by rank 0 and broadcast.
    tests      the residual, the change of x, the objective and the error are sums over nodes or edges,
               all-reduced; every rank then takes the same stopping / divergence decision.
    reference  reference="cvxpy" is solved once, by rank 0, and broadcast (shared_reference), the other ranks
               waiting for it up to REFERENCE_TIMEOUT whatever the group's timeout.
    network    network= (pdmm.Network): each rank's pdmm.network.Channel is built with its nodes' and edges'
               global ids (GlobalIds), so it draws exactly one process's draws for its part (in the graph's own
               node order: compare with a one-process run that is not renumbered, reorder=False); its
               messages and bits count its own receiving edges, and with privacy (z^0 perturbed by the same
               draws) the privacy measures are taken from sums of squares over its nodes and edges: all of them
               summed in one all-reduce per recorded row (pdmm.part_bookkeeping.PartBookkeeping.network_row).
    node form  form="nodes" (or None from LARGE_GRAPH_EDGES directed edges, as on one process; pdmm and qa-pdmm,
               consensus, no network): the edge state summed out (pdmm.methods.NodeForm), the adjacency product
               over the rank's rows, its neighbours' rows of x through the NodeHalo (pdmm.halo.adjacency).
    result     x is all-gathered and reassembled in the original node order: every rank returns the
               same pdmm.Result as the single-process engine (to rounding: sums are taken in another order);
               with gather=False each rank returns its own nodes' rows, result.nodes their global ids.
    parts      each rank may pass only its part, a pdmm.parts.PartProblem, in place of the whole problem:
               no rank then holds the whole graph (docs/guide/distributed.md, "Each rank holds its part").

Supported: every method, consensus constraints, edge-matrix constraints (equalities and inequalities, on pdmm and
qa-pdmm as on one process, where every rank holds the whole problem: each rank keeps A, b and the inequality mask at
its own edges' global ids, the far end's x_j and A_ji come through its halo, and the residual, the feasibility and
the certificate are summed over the ranks), any local function the method takes, batched
problems, float64/float32, a simulated network (privacy included), the edge and node forms, on the CPU (gloo) or
on CUDA (cuda:LOCAL_RANK, NCCL for the iterations' collectives, gloo for the set-up's); compile=True raises
ValueError naming it. Every rank checks that all
ranks hold the same problem and arguments (a SHA-256 fingerprint, all-gathered) before the first
iteration. Collectives time out after the timeout given when the process group was initialised:
`init_process_group` here sets DEFAULT_TIMEOUT (120 s), torch's own default is 30 minutes; a collective
that fails (another rank ended, or did not answer in time) raises pdmm.collectives.CollectiveError, a RuntimeError whose
message is one line.

Ctrl-C (SIGINT) stops every rank at the same iteration, as one process does: from the moment solve
starts a rank's SIGINT only sets a flag, all-reduced with the stopping test's sums at the next test (so
one that comes before the iterations stops them at the first test), and every rank then returns the
Result so far with result.interrupted = True (status "interrupted"); one after the last test is dropped.
"""

import hashlib
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from .building import build_method, check_rho_extremes, problem_scale, short_of_tol
from .collectives import all_gathered, all_sum, check_group, collective
from .constraints import Consensus, EdgeMatrices
from .halo import PartGraph, local_part
from .loop import (
    Progress,
    RunOptions,
    initial_x,
    iterate,
    make_result,
    norm,
    reference_point,
    to_numpy,
)
from .methods import METHODS, NodeForm
from .network import Channel, GlobalIds, private_point
from .part_bookkeeping import PartBookkeeping, Summed
from .parts import PartProblem, check_tiling
from .problem import node_data

if TYPE_CHECKING:
    from .loop import Result
    from .problem import Problem

DEFAULT_TIMEOUT = 120.0  # seconds a collective may wait for the other ranks (init_process_group)
REFERENCE_TIMEOUT = 3600.0  # seconds the other ranks wait for rank 0's centralised reference (shared_reference)


def init_process_group(backend: str | None = None, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> None:
    """torch.distributed.init_process_group with a collective timeout of `timeout` seconds (env:// under torchrun;
    docs/guide/distributed.md). backend None: "cpu:gloo,cuda:nccl" where CUDA is available, one group whose
    collectives torch dispatches by the tensors' device (the set-up's on the CPU with gloo, the iterations' on the
    GPU with NCCL), after making cuda:LOCAL_RANK this process's device; else "gloo". Other keywords go to torch's."""
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    if backend is None:
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available() and "nccl" in backend:
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout), **kwargs)


def local_rank() -> int:
    """This process's rank on its machine: LOCAL_RANK (set by torchrun), 0 where it is not set."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def rank_device(device: Any) -> torch.device:
    """The device of this rank's part for the engine's `device`: "cuda" (no index) is cuda:LOCAL_RANK, one GPU per
    process on its machine; a CUDA device with another index is a ValueError; any other device as given."""
    device = torch.device(device)
    if device.type != "cuda":
        return device
    if device.index is not None and device.index != local_rank():
        raise ValueError(
            f"device={str(device)!r} but this process has LOCAL_RANK={local_rank()}: the distributed engine runs "
            "each process on its own GPU, cuda:LOCAL_RANK (give device='cuda')"
        )
    return torch.device("cuda", local_rank())


def partition(graph, parts):
    """The rank of each node of a CompiledGraph split into `parts` nonempty parts: METIS (pymetis) when installed,
    else contiguous blocks of node indices. (n,) int64."""
    n = graph.n
    if parts == 1:
        return np.zeros(n, dtype=np.int64)
    try:
        import pymetis
    except ImportError:
        pymetis = None
    if pymetis is not None:
        xadj = np.concatenate([[0], np.cumsum(graph.degree.cpu().numpy())])
        adjacency = getattr(pymetis, "CSRAdjacency", None)  # newer pymetis; older ones take xadj=, adjncy=
        csr = dict(xadj=xadj, adjncy=graph.dst.cpu().numpy())
        _, membership = pymetis.part_graph(parts, **({"adjacency": adjacency(*csr.values())} if adjacency else csr))
        owner = np.asarray(membership, dtype=np.int64)
        if len(np.unique(owner)) == parts:
            return owner
    return blocks(n, parts)


def blocks(n, parts):
    """Contiguous blocks of node indices, sizes differing by at most one: (n,) int64."""
    return np.repeat(np.arange(parts, dtype=np.int64), [len(b) for b in np.array_split(np.arange(n), parts)])


def shared_reference(problem: "Problem", options: RunOptions, group: Any = None) -> torch.Tensor | None:
    """x*, (n, B, d), the same on every rank and solved once: for reference="cvxpy" rank 0 alone solves the
    problem centrally (pdmm.reference) and broadcasts x*, while the other ranks wait for it up to
    REFERENCE_TIMEOUT seconds, whatever the process group's own timeout (shorter or longer); None or an array as
    pdmm.loop.reference_point has it, on every rank. Where rank 0 cannot solve it, rank 0 raises its error and
    every other rank a RuntimeError with rank 0's message (its type and text, on one line)."""
    reference = options.recording.reference
    if not (isinstance(reference, str) and reference == "cvxpy") or dist.get_world_size(group) == 1:
        return reference_point(problem, options)  # None, an array, or a ValueError for another string on every rank
    shape = (problem.n, problem.batch, problem.dim)
    return _from_root(
        lambda: reference_point(problem, options).cpu(),
        torch.empty(shape, dtype=options.engine.dtype),
        "solve the centralised reference",
        group,
    ).to(options.engine.device)


def _from_root(compute: Callable[[], torch.Tensor], empty: torch.Tensor, what: str, group: Any = None) -> torch.Tensor:
    """compute() (a CPU tensor of empty's shape and dtype) run by the group's rank 0 alone and broadcast, the other
    ranks waiting for it up to REFERENCE_TIMEOUT seconds (_patient_broadcast). Where compute raises, rank 0 raises
    its error and every other rank a RuntimeError "rank 0 could not {what}: {type}: {message}" on one line."""
    value, failure, error = empty, b"", None
    root = dist.get_rank(group) == 0
    if root:
        try:
            value = compute()
        except Exception as err:  # every rank is told, then rank 0 raises it
            error, failure = err, " ".join(f"{type(err).__name__}: {err}".split()).encode()
    size = _patient_broadcast(torch.tensor([len(failure)], dtype=torch.int64), group)
    if int(size):
        message = torch.tensor(list(failure), dtype=torch.uint8) if root else torch.empty(int(size), dtype=torch.uint8)
        _patient_broadcast(message, group)
    else:
        _patient_broadcast(value, group)
    if error is not None:
        raise error
    if int(size):
        raise RuntimeError(f"rank 0 could not {what}: {bytes(message.tolist()).decode()}")
    return value


class GroupCollectives:
    """The collectives of a part's ranks on a process group (pdmm.halo.Collectives): the halos' all_to_all (None
    at world 1 unless `always`), an element-wise max, and floats computed by rank 0 and broadcast."""

    def __init__(self, group: Any, world: int, always: bool = False) -> None:
        self.group = group
        self.all_to_all = self._all_to_all if world > 1 or always else None

    def _all_to_all(self, output, input, output_sizes, input_sizes):
        collective(dist.all_to_all_single, output, input, output_sizes, input_sizes, group=self.group)

    def maximum(self, t: torch.Tensor) -> torch.Tensor:
        """On the CPU (gloo, a set-up collective), whatever t's device."""
        values = t.detach().cpu().contiguous()
        collective(lambda: dist.all_reduce(values, dist.ReduceOp.MAX, group=self.group))
        return values.to(t.device)

    def once(self, compute: Callable[[], tuple[float, ...]], count: int) -> tuple[float, ...]:
        empty = torch.empty(count, dtype=torch.float64)
        computed = lambda: torch.tensor(compute(), dtype=torch.float64)  # noqa: E731
        return tuple(_from_root(computed, empty, "compute the mixing matrix's spectrum", self.group).tolist())


def _patient_broadcast(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """tensor broadcast in place from the group's rank 0, waiting up to REFERENCE_TIMEOUT seconds whatever the
    group's own timeout (a per-call timeout in the options of the process group's own broadcast, which gloo
    honours; torch.distributed.broadcast takes none); a failure is a CollectiveError."""
    options = dist.BroadcastOptions()
    options.rootRank, options.rootTensor = 0, 0
    options.timeout = timedelta(seconds=REFERENCE_TIMEOUT)
    process_group = dist.group.WORLD if group is None else group
    assert process_group is not None  # check_group found an initialised process group
    collective(lambda: process_group.broadcast([tensor], options).wait())
    return tensor


def fingerprint(problem, arguments):
    """A SHA-256 of the graph, the local data, the edge constraints and the arguments, as a signed 64-bit int; of a
    rank's part (pdmm.parts.PartProblem), of the whole graph's sizes, the local functions' kind and the arguments."""
    h = hashlib.sha256()

    def add(value):
        if torch.is_tensor(value):
            value = value.detach().cpu().numpy()
        if hasattr(value, "tocsr"):  # a scipy sparse matrix (a user's mixing matrix): its arrays, not its repr
            csr = value.tocsr()
            value = (csr.shape, csr.indptr, csr.indices, csr.data)
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, (tuple, list)):
            h.update(b"(")
            for v in value:
                add(v)
            h.update(b")")
        elif isinstance(value, dict):
            for k in sorted(value, key=str):
                add(str(k))
                add(value[k])
        else:
            h.update(repr(value).encode())
        h.update(b";")

    if isinstance(problem, PartProblem):  # what every rank's part shares: the whole graph's sizes, the local kind
        add([problem.n, problem.num_edges, problem.batch, problem.dim, type(problem.local).__name__, problem.batched])
        add(arguments)
        return int.from_bytes(h.digest()[:8], "little", signed=True)
    graph = problem.compiled
    add([problem.n, problem.batch, problem.dim, graph.src, graph.dst, type(problem.local).__name__])
    add(vars(problem.local))
    add(problem.edge_matrices)
    add(problem.inequality)
    add(arguments)
    return int.from_bytes(h.digest()[:8], "little", signed=True)


def check_supported(method: str, device: Any, compile: bool) -> None:
    """ValueError naming what the distributed backend does not implement (docs/guide/distributed.md, "What runs on
    the engine"): a method whose Capabilities say so, compile=True and devices other than the CPU and CUDA."""
    unsupported = []
    if not METHODS[method].capabilities.distributed:
        runs = sorted(name for name, kind in METHODS.items() if kind.capabilities.distributed)
        unsupported.append(f"method={method!r} (it runs {', '.join(runs)})")
    if compile:
        unsupported.append("compile=True")
    if torch.device(device).type not in ("cpu", "cuda"):
        unsupported.append(f"device={device!r} (only 'cpu', with gloo, and 'cuda', with NCCL)")
    if unsupported:
        raise ValueError("backend='distributed' does not implement " + "; ".join(unsupported))


def run(problem: "Problem | PartProblem", options: RunOptions, group: Any = None) -> "Result":
    """pdmm.solve's loop (pdmm.loop.iterate) on this rank's part of the graph, with the options pdmm.solve checked
    (options.engine.partition: the rank of each node or None; options.engine.gather: whether every rank returns the
    whole x; options.recording.progress: a tqdm bar on this rank; options.scale: the problem's scale, the stopping
    test's floor as one process has it). A whole pdmm.Problem, the same on every rank, is cut into the ranks' parts
    (pdmm.parts.PartProblem.of); a PartProblem is this rank's part already, checked against the other ranks'
    (pdmm.distributed.checked_part; docs/guide/distributed.md, "Each rank holds its part"). The method is built as the
    local engine builds it (pdmm.building.build_method) on the rank's pdmm.halo.PartGraph. With gather, the same
    Result on every rank; without, each rank's Result holds its own nodes' rows, result.nodes their global ids."""

    rank, world = check_group(group)
    stopping, recording, engine = options.stopping, options.recording, options.engine
    assert stopping.tol is not None and isinstance(recording.history, tuple)  # resolved by pdmm.plan
    # a Ctrl-C from here to the end is only flagged, and agreed on at the next stopping test: no rank leaves the
    # others in a collective, and one that comes after the last test is dropped (the run has ended)
    with _DeferredInterrupts() as asked:
        arguments = dict(
            method=options.method,
            rho=options.rho,
            max_iter=stopping.max_iter,
            tol=stopping.tol,
            reference=recording.reference,
            dtype=str(engine.dtype),
            seed=options.seed,
            x0=options.x0,
            target=stopping.target,
            names=list(recording.history),
            record_every=recording.record_every,
            check_every=stopping.check_every,
            method_params=dict(options.method_params),
            partition=engine.partition,
            network=repr(options.network),
            node_form=options.node_form,
            world=world,
        )
        if isinstance(problem, PartProblem):
            options, start = checked_part(problem, options, arguments, group)
            return _run(problem, options, group, asked, start)
        every = all_gathered([fingerprint(problem, arguments)], group)[:, 0]
        differ = [r for r, f in enumerate(every) if int(f) != int(every[0])]
        if differ:
            raise ValueError(
                f"the ranks were given different problems or arguments: ranks {differ} differ from rank 0 "
                "(every rank must call pdmm.solve with the same data)"
            )
        check_supported(options.method, engine.device, engine.compile)
        device = rank_device(engine.device)
        options = replace(options, engine=replace(engine, device=device))  # "cuda" is this rank's GPU from here
        if world > problem.n:
            raise ValueError(
                f"{world} ranks but the graph has only {problem.n} nodes; run at most {problem.n} processes"
            )
        owner = owners(problem, engine.partition, world, group)
        collectives = GroupCollectives(group, world)
        graph, _ = local_part(problem.compiled, owner, rank, world, collectives, device=device, dtype=engine.dtype)
        part = PartProblem.of(problem, owner, rank, world, constraints_apart=True)  # edge matrices: _edge_operator
        rows = torch.from_numpy(part.nodes).to(device)
        x_star = shared_reference(problem, options, group)
        start = PartStart(
            x0=initial_x(problem, options)[rows],
            x_star=None if x_star is None else x_star[rows],
            star_norm=None if x_star is None else norm(x_star).clamp(min=torch.finfo(engine.dtype).tiny),
            params=part_params(options.method_params, part.nodes, problem.n),
        )
        return _run(part, options, group, asked, start, whole=problem, graph=graph)


def _run(
    part: PartProblem,
    options: RunOptions,
    group: Any,
    asked: Callable[[], bool],
    start: "PartStart",
    whole: "Problem | None" = None,
    graph: PartGraph | None = None,
) -> "Result":
    """The iterations on this rank's part, from start (x0, x*, the method's parameters on the part); whole: the
    whole problem where every rank holds it (a mixing matrix's kind and the network's node labels are read off
    it), None for a PartProblem run; graph: the part's PartGraph where already built (pdmm.halo.local_part)."""
    stopping, recording, engine = options.stopping, options.recording, options.engine
    method, dtype, device = options.method, engine.dtype, engine.device
    compiled = None if whole is None else whole.compiled
    if graph is None:
        graph = PartGraph.of_edges(
            *(part.nodes, part.src, part.dst, part.edge_id, part.rev_id, part.peer, part.rank, part.world),
            GroupCollectives(group, part.world),
            device=device,
            dtype=dtype,
            spectra=part.spectra,
        )
    local = part.local.to(device, dtype)
    edges = _edge_operator(whole, part, graph, dtype)
    capabilities = METHODS[method].capabilities
    width = edges.state_shape(part.batch, part.dim)[2]
    channel = part_channel(options.network, part, graph, width, capabilities.vectors_sent, compiled)
    algorithm, certificate = build_method(  # consensus at every rank's nodes' average: sums over the ranks
        part if whole is None else whole,
        graph,
        local,
        edges,
        options,
        start.params,
        channel,
        count=part.n,
        summed=lambda t: all_sum(t.sum(0).contiguous(), group),
        certified=start.certified,
    )
    algorithm = NodeForm(algorithm) if options.node_form else algorithm  # the node form on the part's halo
    state = algorithm.init(start.x0)
    sent = part.num_edges * capabilities.vectors_sent  # messages per round, every rank's
    book = PartBookkeeping(
        options,
        local=Summed(local, part.n, group),
        edges=edges,
        per_round=(sent, sent * width * torch.finfo(dtype).bits),
        channel=channel,
        x_star=start.x_star,
        private=_private(options.network, local, state["x"]),
        silent=capabilities.silent_rounds,
        certificate=certificate,
    )
    book.x_star_norm = start.star_norm  # over every rank's nodes
    book.part(torch.arange(len(part.nodes), device=device), part.num_edges // 2, group)

    so_far = Progress((state, 0, 0))
    clock = book.start_clock()

    def finish(status, message=""):
        state, done, rows = so_far.now
        result = make_result(
            state, done, book, rows, status, clock, part, options, None, message=message, nodes=part.nodes.tolist()
        )
        return returned(result, state["x"], start.x_star, part, compiled, engine.gather, group)

    book.asked = asked
    with (
        torch.no_grad(),
        tqdm(total=stopping.max_iter, desc=method, disable=not recording.progress, leave=False) as bar,
    ):
        status = iterate(
            algorithm.step,
            so_far,
            book,
            options,
            finish,
            before=None if channel is None else channel.draw,
            bar=bar if recording.progress else None,
        )
    return finish(status, short_of_tol(status, so_far.now[1], options))


def _edge_operator(whole: "Problem | None", part: PartProblem, graph: PartGraph, dtype: torch.dtype) -> Any:
    """The run's edge operator on the rank's part: Consensus, or the whole problem's edge matrices at the rank's own
    edges, the rows of A, b and the inequality mask at its global edge ids (part.edge_id), in its edges' order
    (pdmm.constraints.EdgeMatrices; docs/guide/distributed.md, "What runs on the engine")."""
    if whole is None or whole.is_consensus:
        return Consensus(graph)
    assert whole.edge_matrices is not None
    rows = torch.from_numpy(part.edge_id)
    device = graph.sign.device
    A, b = (t.index_select(0, rows).to(device, dtype) for t in whole.edge_matrices)
    inequality = None if whole.inequality is None else whole.inequality.index_select(0, rows).to(device)
    return EdgeMatrices(graph, A, b, inequality)


def _private(network, local, x):
    """The privacy measures' reference point argmin f_i at the rank's nodes (pdmm.network.private_point), or None
    without network privacy."""
    return None if network is None or network.privacy is None else private_point(local, x)


class _DeferredInterrupts:
    """A context in which SIGINT (Ctrl-C) sets a flag instead of raising KeyboardInterrupt, so that no rank leaves
    a collective half-done: `with _DeferredInterrupts() as asked:` asked() is whether one came. Outside the main
    thread, or where SIGINT has a handler other than Python's default, nothing is changed (asked() stays False)."""

    def __enter__(self):
        self.came, self.previous = False, None
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self.previous = signal.signal(signal.SIGINT, self._flag)
        return lambda: self.came

    def _flag(self, signum, frame):
        self.came = True

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


@dataclass(frozen=True)
class PartStart:
    """Where a rank's run starts, on the run's device: x0 and x* (None without a reference), the rank's rows
    (n_r, B, d); star_norm, ||x*|| per instance over every rank's nodes; params, the method's parameters on the
    part; certified, the sum of L_i over every rank's nodes, (1, B), where the rank holds only its part's
    curvature (pdmm.building.build_method), else None."""

    x0: torch.Tensor
    x_star: torch.Tensor | None
    star_norm: torch.Tensor | None
    params: dict[str, Any]
    certified: torch.Tensor | None = None


class _Over:
    """Element-wise reductions over a process group's ranks, on the CPU (set-up collectives): maximum and total."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def _reduced(self, t: torch.Tensor, op: Any) -> torch.Tensor:
        import torch.distributed as dist

        values = t.detach().cpu().contiguous().clone()
        collective(dist.all_reduce, values, op, group=self.group)
        return values.to(t.device)

    def maximum(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        return self._reduced(t, dist.ReduceOp.MAX)

    def total(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        return self._reduced(t, dist.ReduceOp.SUM)


def _per_rank(value: Any) -> Any:
    """An argument as the ranks must agree on it: an array (a rank's own rows) by its kind, anything else as is."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return ("rows", tuple(value.shape[:-2]), value.shape[-1]) if value.ndim >= 2 else ("rows",)
    return value


def checked_part(part: PartProblem, options: Any, arguments: dict[str, Any], group: Any) -> tuple[Any, PartStart]:
    """A rank's part checked against the other ranks' before any iteration, and where its run starts
    (docs/guide/distributed.md, "Each rank holds its part"): the same arguments and whole-graph sizes (n,
    num_edges, batch, dim, local kind) on every rank, the parts' ranks, the parts tiling the nodes (their node
    counts and edge counts summing to n and num_edges, every node held by exactly one rank, the edge ids following
    the degrees) and what pdmm.plan checks on a whole problem (rho against the dtype, the problem's scale) over every
    rank's nodes. Returns the options with the scale and the rank's device, and the PartStart. ValueError, one line,
    the same on every rank, for a mismatch; for reference="cvxpy", partition=, or an x0 / reference array that is
    not the rank's own rows."""
    shared = {**arguments, "x0": _per_rank(arguments["x0"]), "reference": _per_rank(arguments["reference"])}
    shared["part spectra"] = part.spectra
    shared["method_params"] = {k: _per_rank(v) for k, v in arguments["method_params"].items()}
    check_tiling(part, all_gathered([fingerprint(part, shared), len(part.nodes), len(part.src)], group), group)
    engine, recording = options.engine, options.recording
    if engine.partition is not None:
        raise ValueError("partition= does not apply to a PartProblem: each rank's part is its nodes")
    if isinstance(recording.reference, str) and recording.reference == "cvxpy":
        raise ValueError("reference='cvxpy' needs the whole problem; give a PartProblem's run x* as its own rows")
    check_supported(options.method, engine.device, engine.compile)
    device = rank_device(engine.device)
    options = replace(options, engine=replace(engine, device=device))
    over = _Over(group)
    certified = _checked_curvature(part, options, over)
    options = replace(options, scale=problem_scale(part, engine.dtype, options.curvature, over=over))
    x0, x_star = _start_rows(part, options)
    star_norm = None
    if x_star is not None:
        squares = over.total((x_star.double() ** 2).sum((0, 2)))
        star_norm = squares.sqrt().to(device, engine.dtype).clamp(min=torch.finfo(engine.dtype).tiny)
    return options, PartStart(x0, x_star, star_norm, dict(options.method_params), certified)


def _checked_curvature(part: PartProblem, options: Any, over: _Over) -> torch.Tensor | None:
    """rho checked against the dtype over every rank's nodes (pdmm.building.check_rho_extremes); the sum of L_i over
    them, (1, B) float64, or None without a curvature."""
    curvature = options.curvature
    if curvature is None:
        return None
    degree = torch.bincount(torch.from_numpy(part.src), minlength=len(part.nodes)).double()
    extremes = over.maximum(
        torch.stack([curvature.max().double(), -curvature.min().double(), degree.max(), -degree.min()])
    ).tolist()
    if options.rho is not None:
        largest, smallest, high, low = extremes[0], -extremes[1], int(extremes[2]), -int(extremes[3])
        check_rho_extremes(options.rho, options.engine.dtype, largest, smallest, low, high)
    return over.total(curvature.double().sum(0)).unsqueeze(0)


def _start_rows(part: PartProblem, options: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x0 and x* on the rank's nodes, (n_r, B, d) on the run's device: x0 None (zeros), "random" (the whole graph's
    draw from the seed, its own rows: one process's x0) or the rank's rows; the reference None or the rank's rows."""

    engine, n_r = options.engine, len(part.nodes)
    x0 = options.x0
    if isinstance(x0, str) and x0 == "random":
        whole = replace(options, engine=replace(engine, device="cpu"))
        rows = initial_x(_Sizes(part.n, part.batch, part.dim), whole)[torch.from_numpy(part.nodes)]
        start = rows.to(engine.device, engine.dtype)
    else:
        start = initial_x(_Sizes(n_r, part.batch, part.dim), options)
    reference = options.recording.reference
    if reference is None:
        return start, None
    rows = node_data("reference", reference, n_r, (part.dim,))
    if rows.shape[1] not in (1, part.batch):
        raise ValueError(f"reference: expected {part.batch} instances, got {rows.shape[1]}")
    return start, rows.expand(n_r, part.batch, part.dim).to(engine.device, engine.dtype)


@dataclass(frozen=True)
class _Sizes:
    """The sizes pdmm.loop.initial_x reads (n, batch, dim), of a part's rows or of the whole graph."""

    n: int
    batch: int
    dim: int


def returned(
    result: Any, x: torch.Tensor, x_star: torch.Tensor | None, part: PartProblem, whole: Any, gather: bool, group: Any
) -> Any:
    """The Result a rank returns: with gather, x (and the reference) all-gathered in the whole graph's node order,
    result.nodes its labels (whole: the whole compiled graph, where the rank holds it) or the global ids 0..n-1;
    without, the rank's own rows as they are, result.nodes their global ids."""

    if not gather:
        return replace(result, reference=None if x_star is None else to_numpy(x_star, part.batched))
    nodes = list(range(part.n)) if whole is None else list(whole.nodes)
    reference = None if x_star is None else to_numpy(_gathered_rows(x_star, part, group), part.batched)
    return replace(result, x=to_numpy(_gathered_rows(x, part, group), part.batched), reference=reference, nodes=nodes)


def _gathered_rows(x: torch.Tensor, part: PartProblem, group: Any) -> torch.Tensor:
    """Every rank's rows of a node tensor, (n, ...) in global node order: one all_gather of the rows (padded to the
    largest part) and one of their global ids."""
    import torch.distributed as dist

    sizes = all_gathered([len(part.nodes)], group)[:, 0]
    padded = x.new_zeros((int(sizes.max()), *x.shape[1:]))
    padded[: len(x)] = x
    ids = torch.full((int(sizes.max()),), -1, dtype=torch.int64, device=x.device)
    ids[: len(x)] = torch.from_numpy(part.nodes).to(x.device)
    rows = [torch.empty_like(padded) for _ in sizes]
    names = [torch.empty_like(ids) for _ in sizes]
    collective(dist.all_gather, rows, padded, group=group)
    collective(dist.all_gather, names, ids, group=group)
    full = x.new_empty((part.n, *x.shape[1:]))
    for size, row, name in zip(sizes, rows, names, strict=True):
        full[name[:size]] = row[:size]
    return full


def part_channel(network: Any, part: PartProblem, graph: Any, width: int, vectors: int, whole: Any = None) -> Any:
    """The rank's Channel over the simulated network (None for the ideal one): its nodes' and edges' global ids
    (pdmm.network.GlobalIds), so that it draws exactly the whole graph's draws for its part in the graph's own node
    order (docs/guide/network.md, "Partitioned runs"); whole: the whole compiled graph where the rank holds it (the
    settings that name node labels need it)."""

    if network is None:
        return None
    nodes, edges, reverse, undirected = (
        torch.from_numpy(a) for a in (part.nodes, part.edge_id, part.rev_id, part.undirected_id)
    )
    ids = GlobalIds(nodes, edges, reverse, undirected, part.n, part.num_edges, whole)
    return Channel(network, graph, part.batch, width, graph.sign.dtype, vectors=vectors, ids=ids)


def owners(problem: Any, given: Any, world: int, group: Any) -> np.ndarray:
    """The rank of every node of a whole problem, (n,) int64: `given` (partition=) checked, or
    pdmm.distributed.partition() on rank 0, broadcast."""
    import torch.distributed as dist

    n = problem.n
    if given is not None:
        owner = np.asarray(given)
        if owner.shape != (n,) or not np.issubdtype(owner.dtype, np.integer):
            raise ValueError(
                f"partition must be {n} integer ranks, one per node, got shape {owner.shape}, dtype {owner.dtype}"
            )
        missing = sorted(set(range(world)) - set(owner.tolist()))
        if owner.min() < 0 or owner.max() >= world or missing:
            raise ValueError(
                f"partition must give every rank 0..{world - 1} at least one node and use no other "
                f"value; got values {sorted(set(owner.tolist()))[:10]}"
            )
        return owner.astype(np.int64)
    chosen = torch.from_numpy(
        partition(problem.compiled, world) if dist.get_rank(group) == 0 else np.zeros(n, dtype=np.int64)
    )
    root = 0 if group is None else dist.get_global_rank(group, 0)  # broadcast's src is a global rank
    collective(dist.broadcast, chosen, root, group=group)
    return chosen.numpy()


def part_params(params: Mapping[str, Any], own: np.ndarray, n: int) -> dict[str, Any]:
    """The method parameters for a rank's nodes: a per-node eta (first axis n) sliced to the rank's rows; the
    others (a mixing kind or the whole graph's matrix, alpha, theta, interval) as given."""
    eta = params.get("eta")
    if eta is None or isinstance(eta, str) or np.ndim(eta) == 0 or len(eta) != n:
        return dict(params)
    eta = eta.detach().cpu() if torch.is_tensor(eta) else torch.as_tensor(np.asarray(eta, dtype=np.float64))
    return {**params, "eta": eta.index_select(0, torch.from_numpy(own))}


__all__ = [
    "DEFAULT_TIMEOUT",
    "GroupCollectives",
    "init_process_group",
    "local_rank",
    "rank_device",
    "partition",
    "blocks",
    "run",
]
