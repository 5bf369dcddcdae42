"""Partitioned PDMM on torch.distributed: `pdmm.solve(problem, backend="distributed")` (docs/theory/pdmm.md
section 4).

Run the same script on P processes, each calling `pdmm.distributed.init_process_group()` and then
`pdmm.solve(..., backend="distributed")` with the same problem::

    # torchrun --standalone --nproc-per-node 4 script.py
    import numpy as np, pdmm, pdmm.distributed
    pdmm.distributed.init_process_group()            # gloo, env:// from torchrun, 120 s timeout
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
               fuse and the messages run unchanged (pdmm.methods.PDMM) on the rank's local graph.
    exchange   z_{j|i} <- y_{i|j} lives at the owner of j. Once per iteration the messages of the edges
               that cross the cut are packed per neighbouring rank, in the global order of the edge
               that receives them, and swapped with one torch.distributed.all_to_all_single (split
               sizes per rank; gloo supports it on the CPU); the other edges are served locally.
    tests      the residual, the change of x, the objective and the error are sums over nodes or edges,
               all-reduced; every rank then takes the same stopping / divergence decision.
    reference  reference="cvxpy" is solved once, by rank 0, and broadcast (shared_reference), the other ranks
               waiting for it up to REFERENCE_TIMEOUT whatever the group's timeout.
    result     x is all-gathered and reassembled in the original node order: every rank returns the
               same pdmm.Result as the single-process engine (to rounding: sums are taken in another order).

Supported: method="pdmm" (theta=1 or averaged theta in (0, 1)), consensus constraints, quadratic
local functions (pdmm.averaging, pdmm.least_squares, pdmm.lasso, pdmm.quadratic), batched problems,
float64/float32 on the CPU; anything else raises ValueError naming it. Every rank checks that all
ranks hold the same problem and arguments (a SHA-256 fingerprint, all-gathered) before the first
iteration. Collectives time out after the timeout given when the process group was initialised:
`init_process_group` here sets DEFAULT_TIMEOUT (120 s), torch's own default is 30 minutes; a collective
that fails (another rank ended, or did not answer in time) raises CollectiveError, a RuntimeError whose
message is one line.

Ctrl-C (SIGINT) stops every rank at the same iteration, as one process does: from the moment solve
starts a rank's SIGINT only sets a flag, all-reduced with the stopping test's sums at the next test (so
one that comes before the iterations stops them at the first test), and every rank then returns the
Result so far with result.interrupted = True (status "interrupted"); one after the last test is dropped.
"""

import hashlib
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from .certificate import optimality_certificate
from .constraints import Consensus
from .edge_index import CompiledGraph, EdgeList
from .local import Quadratic
from .loop import Bookkeeping, Progress, RunOptions, initial_x, iterate, make_result, reference_point
from .methods import METHODS, PDMM

if TYPE_CHECKING:
    from .loop import Result
    from .problem import Problem

DEFAULT_TIMEOUT = 120.0  # seconds a collective may wait for the other ranks (init_process_group)
REFERENCE_TIMEOUT = 3600.0  # seconds the other ranks wait for rank 0's centralised reference (shared_reference)


class CollectiveError(RuntimeError):
    """A collective of the distributed solve failed: another rank ended (its connections closed) or did not answer
    within the process group's timeout (a stopped or hung process). The message says which, in one line."""


def _collective(op, *args, **kwargs):
    """torch.distributed's op(*args, **kwargs), its failure a CollectiveError with gloo's reason in one line (the
    reason without gloo's source path and advice): "Connection reset by peer", "Timed out waiting 120000ms ..."."""
    try:
        return op(*args, **kwargs)
    except RuntimeError as err:
        text = " ".join(str(err).split())
        reason = text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text
        reason = reason.split(". This is typically caused", 1)[0].rstrip(".")
        raise CollectiveError(
            f"a collective with the other processes failed ({reason}): one of them ended, or did "
            "not answer within the process group's timeout"
        ) from err


def init_process_group(backend="gloo", timeout=DEFAULT_TIMEOUT, **kwargs):
    """torch.distributed.init_process_group with a collective timeout of `timeout` seconds (env:// under torchrun)."""
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout), **kwargs)


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


@dataclass(frozen=True)
class PartGraph(CompiledGraph):
    """A rank's part of a CompiledGraph: its own nodes (local indices 0..n-1, global labels in `nodes`) and the
    directed edges out of them. dst holds GLOBAL node indices and sign the global one; rev is unused (-1);
    exchange(v) is the partitioned v[rev], served by `swap`."""

    swap: "Swap | None" = None

    def exchange(self, v):
        return self.swap(v)


class Swap:
    """v -> v[rev] over the whole graph for a rank's edge tensor v (E_r, ...): local reverses are read in place,
    the cut edges' values come from the neighbouring ranks through one all_to_all_single."""

    def __init__(self, send, counts, source, group=None):
        self.send, self.counts, self.source, self.group = send, counts, source, group
        self.total = sum(counts)

    def __call__(self, v):
        received = v.new_empty((self.total, *v.shape[1:]))
        if dist.get_world_size(self.group) > 1:
            _collective(
                dist.all_to_all_single,
                received,
                v.index_select(0, self.send).contiguous(),
                self.counts,
                self.counts,
                group=self.group,
            )
        return torch.cat([v, received]).index_select(0, self.source)


def local_part(graph, owner, rank, dtype, group=None):
    """(PartGraph of rank's nodes and out-edges, own node indices) from the global CompiledGraph and the owners."""
    src, dst, rev = (t.cpu().numpy() for t in (graph.src, graph.dst, graph.rev))
    own = np.flatnonzero(owner == rank)
    local_id = np.full(graph.n, -1, dtype=np.int64)
    local_id[own] = np.arange(len(own))
    edges = np.flatnonzero(owner[src] == rank)  # global edge ids, still sorted by (src, dst)
    edge_id = np.full(len(src), -1, dtype=np.int64)
    edge_id[edges] = np.arange(len(edges))
    peer = owner[dst[edges]]  # the rank holding each edge's reverse
    source = np.empty(len(edges), dtype=np.int64)
    inside = peer == rank
    source[inside] = edge_id[rev[edges[inside]]]
    send, counts, at = [], [], len(edges)
    for r in range(int(owner.max()) + 1):
        mine = np.flatnonzero(peer == r) if r != rank else np.empty(0, dtype=np.int64)
        # send in the order of the receiving edges' global ids; receive in the order of my own edges' global ids:
        # rank r receives on the reverses of what this rank sends, so both lists name the same edges in one order
        send.append(mine[np.argsort(rev[edges[mine]], kind="stable")])
        source[mine] = at + np.arange(len(mine))
        counts.append(len(mine))
        at += len(mine)
    swap = Swap(torch.from_numpy(np.concatenate(send)), counts, torch.from_numpy(source), group)
    lsrc, gdst = local_id[src[edges]], dst[edges]
    fields = EdgeList.arrays(len(own), lsrc, gdst, "cpu", dtype)
    ahead = src[edges] < gdst
    part = PartGraph(
        **fields,
        nodes=own.tolist(),
        rev=torch.full((len(edges),), -1, dtype=torch.int64),
        sign=torch.where(torch.from_numpy(ahead), 1.0, -1.0).to(dtype),
        forward=torch.from_numpy(np.flatnonzero(ahead)),
        swap=swap,
    )
    return part, own


def shared_reference(problem: "Problem", options: RunOptions, group: Any = None) -> torch.Tensor | None:
    """x*, (n, B, d), the same on every rank and solved once: for reference="cvxpy" rank 0 alone solves the
    problem centrally (pdmm.reference) and broadcasts x*, while the other ranks wait for it up to
    REFERENCE_TIMEOUT seconds, whatever the process group's own timeout (shorter or longer); None or an array as
    pdmm.loop.reference_point has it, on every rank. Where rank 0 cannot solve it, rank 0 raises its error and
    every other rank a RuntimeError with rank 0's message (its type and text, on one line)."""
    reference = options.recording.reference
    if not (isinstance(reference, str) and reference == "cvxpy") or dist.get_world_size(group) == 1:
        return reference_point(problem, options)  # None, an array, or a ValueError for another string on every rank
    x_star, failure, error = None, b"", None
    root = dist.get_rank(group) == 0
    if root:
        try:
            x_star = reference_point(problem, options)
        except Exception as err:  # every rank is told, then rank 0 raises it
            error, failure = err, " ".join(f"{type(err).__name__}: {err}".split()).encode()
    size = _patient_broadcast(torch.tensor([len(failure)], dtype=torch.int64), group)
    if int(size):
        message = torch.tensor(list(failure), dtype=torch.uint8) if root else torch.empty(int(size), dtype=torch.uint8)
        _patient_broadcast(message, group)
    else:
        if not root:
            x_star = torch.empty(problem.n, problem.batch, problem.dim, dtype=options.engine.dtype)
        assert x_star is not None
        _patient_broadcast(x_star, group)
    if error is not None:
        raise error
    if int(size):
        raise RuntimeError(f"rank 0 could not solve the centralised reference: {bytes(message.tolist()).decode()}")
    return x_star


def _patient_broadcast(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """tensor broadcast in place from the group's rank 0, waiting up to REFERENCE_TIMEOUT seconds whatever the
    group's own timeout (a per-call timeout in the options of the process group's own broadcast, which gloo
    honours; torch.distributed.broadcast takes none); a failure is a CollectiveError."""
    options = dist.BroadcastOptions()
    options.rootRank, options.rootTensor = 0, 0
    options.timeout = timedelta(seconds=REFERENCE_TIMEOUT)
    process_group = dist.group.WORLD if group is None else group
    assert process_group is not None  # check_group found an initialised process group
    _collective(lambda: process_group.broadcast([tensor], options).wait())
    return tensor


def fingerprint(problem, arguments):
    """A SHA-256 of the graph, the local data, the edge constraints and the arguments, as a signed 64-bit int."""
    h = hashlib.sha256()

    def add(value):
        if torch.is_tensor(value):
            value = value.detach().cpu().numpy()
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

    graph = problem.compiled
    add([problem.n, problem.batch, problem.dim, graph.src, graph.dst, type(problem.local).__name__])
    add(vars(problem.local))
    add(problem.edge_matrices)
    add(problem.inequality)
    add(arguments)
    return int.from_bytes(h.digest()[:8], "little", signed=True)


def check_group(group=None):
    """The (rank, world size) of an initialised process group, or a RuntimeError saying how to get one."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "backend='distributed' needs an initialised torch.distributed process group: run the "
            "script under torchrun and call pdmm.distributed.init_process_group() (or "
            "torch.distributed.init_process_group('gloo')) before pdmm.solve"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def check_supported(problem, method, device, network, compile, method_params):
    """ValueError naming what the distributed backend does not implement."""
    unsupported = []
    if not METHODS[method].capabilities.distributed:
        unsupported.append(f"method={method!r} (only 'pdmm', with theta=1 or averaged theta < 1)")
    extra = sorted(set(method_params) - {"theta"})
    if extra:
        unsupported.append(f"method parameters {extra}")
    if not problem.is_consensus:
        unsupported.append("edge-matrix constraints (only constraints='consensus')")
    if not isinstance(problem.local, Quadratic):
        unsupported.append(
            f"{type(problem.local).__name__} local functions (only Quadratic and Lasso: averaging, "
            "least_squares, lasso, quadratic)"
        )
    if network is not None:
        unsupported.append("network= (only the ideal network)")
    if compile:
        unsupported.append("compile=True")
    if torch.device(device).type != "cpu":
        unsupported.append(f"device={device!r} (only 'cpu', with gloo)")
    if unsupported:
        raise ValueError("backend='distributed' does not implement " + "; ".join(unsupported))


def run(problem: "Problem", options: RunOptions, group: Any = None) -> "Result":
    """pdmm.solve's loop (pdmm.loop.iterate) on this rank's part of the graph, with the options pdmm.solve checked
    (options.engine.partition: the rank of each node or None; options.recording.progress: a tqdm bar on this rank;
    options.scale: the problem's scale, the stopping test's floor as one process has it). The same Result on every
    rank."""
    rank, world = check_group(group)
    stopping, recording, engine = options.stopping, options.recording, options.engine
    assert stopping.tol is not None and isinstance(recording.history, tuple)  # resolved by pdmm.plan
    method, rho, device, dtype, method_params = (
        options.method,
        options.rho,
        engine.device,
        engine.dtype,
        options.method_params,
    )
    # a Ctrl-C from here to the end is only flagged, and agreed on at the next stopping test: no rank leaves the
    # others in a collective, and one that comes after the last test is dropped (the run has ended)
    with _DeferredInterrupts() as asked:
        arguments = dict(
            method=method,
            rho=rho,
            max_iter=stopping.max_iter,
            tol=stopping.tol,
            reference=recording.reference,
            dtype=str(dtype),
            seed=options.seed,
            x0=options.x0,
            target=stopping.target,
            names=list(recording.history),
            record_every=recording.record_every,
            check_every=stopping.check_every,
            method_params=dict(method_params),
            partition=engine.partition,
            world=world,
        )
        mine = torch.tensor([fingerprint(problem, arguments)], dtype=torch.int64)
        every = [torch.zeros_like(mine) for _ in range(world)]
        _collective(dist.all_gather, every, mine, group=group)
        differ = [r for r, f in enumerate(every) if int(f) != int(every[0])]
        if differ:
            raise ValueError(
                f"the ranks were given different problems or arguments: ranks {differ} differ from rank 0 "
                "(every rank must call pdmm.solve with the same data)"
            )
        check_supported(problem, method, device, options.network, engine.compile, method_params)
        if world > problem.n:
            raise ValueError(
                f"{world} ranks but the graph has only {problem.n} nodes; run at most {problem.n} processes"
            )
        owner = _owners(problem, engine.partition, world, group)

        graph, own = local_part(problem.compiled, owner, rank, dtype, group)
        local = problem.local.to("cpu", dtype).nodes(torch.from_numpy(own))
        edges = Consensus(graph)
        assert rho is not None  # pdmm.solve resolves rho for PDMM, the only method this engine runs
        algorithm = PDMM(graph, local, edges, float(rho), **method_params)
        x_star = shared_reference(problem, options, group)
        state = algorithm.init(initial_x(problem, options)[torch.from_numpy(own)])
        per_iteration = problem.compiled.num_edges, problem.compiled.num_edges * problem.dim * torch.finfo(dtype).bits
        certificate = (  # consensus at the average of every rank's nodes: sums over the ranks (pdmm.certificate)
            optimality_certificate(
                local,
                edges,
                options.curvature,
                options.scale,
                count=problem.n,
                summed=lambda t: _all_sum(t.sum(0).contiguous(), group),
            )
            if stopping.tol > 0
            else None
        )
        book = _PartBookkeeping(
            options,
            local=_Summed(local, problem.n, group),
            edges=edges,
            per_round=per_iteration,
            x_star=x_star,
            certificate=certificate,
        )
        book.part(own, problem.compiled.num_edges // 2, group)

        so_far = Progress((state, 0, 0))
        start = book.start_clock()

        def finish(status, message=""):
            state, done, rows = so_far.now
            return make_result(
                _gathered(state, owner, group),
                done,
                book,
                rows,
                status,
                start,
                problem,
                options,
                x_star,
                message=message,
            )

        book.asked = asked
        with (
            torch.no_grad(),
            tqdm(total=stopping.max_iter, desc=method, disable=not recording.progress, leave=False) as bar,
        ):
            status = iterate(algorithm.step, so_far, book, options, finish, bar=bar if recording.progress else None)
        return finish(status)


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


def _owners(problem, given, world, group):
    """The rank of every node: `given` checked, or partition() on rank 0, broadcast."""
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
    owner = torch.from_numpy(
        partition(problem.compiled, world) if dist.get_rank(group) == 0 else np.zeros(n, dtype=np.int64)
    )
    root = 0 if group is None else dist.get_global_rank(group, 0)  # broadcast's src is a global rank
    _collective(dist.broadcast, owner, root, group=group)
    return owner.numpy()


def _gathered(state, owner, group):
    """The state with x of every node, all-gathered in the original node order."""
    x = state["x"]
    world = dist.get_world_size(group)
    sizes = np.bincount(owner, minlength=world)
    padded = x.new_zeros((int(sizes.max()), *x.shape[1:]))
    padded[: len(x)] = x
    parts = [torch.empty_like(padded) for _ in range(world)]
    _collective(dist.all_gather, parts, padded, group=group)
    full = x.new_empty((len(owner), *x.shape[1:]))
    for r, part in enumerate(parts):
        full[torch.from_numpy(np.flatnonzero(owner == r))] = part[: sizes[r]]
    return {**state, "x": full}


def _all_sum(t, group):
    _collective(dist.all_reduce, t, group=group)
    return t


class _Summed:
    """The whole problem's local function as the bookkeeping sees it: global shape, value summed over the ranks."""

    def __init__(self, local, n, group):
        self.local, self.group = local, group
        self.shape = (n, *local.shape[1:])

    def value(self, x):
        return _all_sum(self.local.value(x).contiguous(), self.group)


class _PartBookkeeping(Bookkeeping):
    """solve's bookkeeping with every norm summed over the ranks (residuals over each rank's forward edges), and
    the ranks' Ctrl-C flags (asked(), set by solve) summed with them: `interrupted` is whether any rank was asked to
    stop."""

    asked: Callable[[], bool]  # set by run(): whether this rank was asked to stop

    def part(self, own, undirected, group):
        self.own, self.undirected, self.group = torch.from_numpy(own), undirected, group
        self.star_own = None if self.x_star is None else self.x_star[self.own]
        graph = self.edges.graph
        self.ends = graph.src[graph.forward], graph.forward

    def objective(self, x):
        """As Bookkeeping.objective, from the whole x (every rank's nodes, gathered, in the graph's node order): this
        rank's nodes' sum, summed over the ranks."""
        return super().objective(x.index_select(0, self.own))

    def residual(self, x, seen):
        if "residual" not in seen:
            graph = self.edges.graph
            neighbour = graph.exchange(graph.gather(x))  # x_j at edge i->j
            r = x.index_select(0, self.ends[0]) - neighbour.index_select(0, self.ends[1])
            seen["residual"] = torch.sqrt(_all_sum((r * r).sum((0, 2)), self.group) / self.undirected)
        return seen["residual"]

    def error(self, x, seen):
        if "error" not in seen:
            d = x - self.star_own
            seen["error"] = torch.sqrt(_all_sum((d * d).sum((0, 2)), self.group)) / self.x_star_norm
        return seen["error"]

    def sizes(self, x, x_old):
        """As Bookkeeping.sizes over all ranks' nodes: the sums of squares and the non-finite count, one
        all-reduce, which also sums the ranks' Ctrl-C flags into `interrupted`."""
        change = x - x_old
        sums = _all_sum(
            torch.cat(
                [
                    (x * x).sum((0, 2)),
                    (change * change).sum((0, 2)),
                    (~torch.isfinite(x)).sum().reshape(1).to(x.dtype),
                    x.new_tensor([float(self.asked())]),
                ]
            ),
            self.group,
        )
        B, n = x.shape[1], self.local.shape[0]
        self.interrupted = bool(sums[-1] > 0)
        return torch.sqrt(sums[:B] / n), torch.sqrt(sums[B : 2 * B] / n), sums[-2] == 0

    def state_sizes(self, t, t_old):
        """As Bookkeeping.state_sizes over all ranks' rows of t (each rank's edges or nodes), one all-reduce."""
        change = t - t_old
        sums = _all_sum(
            torch.cat([(t * t).sum((0, 2)), (change * change).sum((0, 2)), t.new_tensor([len(t)])]), self.group
        )
        B, rows = t.shape[1], sums[-1].clamp(min=1)
        return torch.sqrt(sums[:B] / rows), torch.sqrt(sums[B : 2 * B] / rows)


__all__ = ["DEFAULT_TIMEOUT", "CollectiveError", "init_process_group", "partition", "blocks", "run"]
