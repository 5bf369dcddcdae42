"""What one rank holds of a consensus problem: `PartProblem`, its own nodes, the directed edges out of them and their
data, so that no rank of a distributed run holds the whole graph (docs/guide/distributed.md, "Each rank holds its
part").

`pdmm.solve(part, backend="distributed")` runs on the parts; `PartProblem.of(problem, owner, rank)` cuts one out of a
whole pdmm.Problem (the ids pdmm.halo.part_ids cuts); `PartProblem.from_edges(nodes, src, dst, local, n)` derives
the global ids of a rank's edges on the process group itself, each rank holding O((n + E) / P) of the ids: a block
directory (node i's record at rank i // ceil(n / P)) and all_to_all exchanges (PartExchange). The methods that need
the mixing matrix's spectrum (dgd, extra, nids, gradient-tracking, chebyshev without interval=) read it from
PartProblem.spectra, the whole graph's, given with the parts (pdmm.mixing.mixing_spectra, or the shards' manifest).
"""

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .collectives import check_group, collective
from .halo import AllToAll, part_ids
from .local import LocalFunction
from .mixing import checked_spectra
from .network import undirected_ids

_ID_FIELDS = ("nodes", "src", "dst", "edge_id", "rev_id", "peer", "undirected_id")


@dataclass(frozen=True, eq=False)
class PartProblem:
    """What one rank holds of a consensus problem: its own nodes, the directed edges out of them, their data
    (docs/guide/distributed.md, "Each rank holds its part"). The global ids are those of the whole
    pdmm.Problem(G, ...).compiled: nodes 0..n-1, directed edges 0..num_edges-1 sorted by (src, dst).

    Attributes
    ----------
    n, num_edges : int
        The whole graph's node count and DIRECTED edge count (twice the undirected one).
    nodes : numpy.ndarray
        (n_r,) int64 global node ids, strictly ascending.
    src : numpy.ndarray
        (E_r,) int64 LOCAL index (0..n_r-1) of each edge's tail, non-decreasing.
    dst : numpy.ndarray
        (E_r,) int64 GLOBAL id of each edge's head; the edges sorted by (src, dst), the global order.
    edge_id, rev_id : numpy.ndarray
        (E_r,) int64 the edge's and its reverse's ids in the whole graph; edge_id strictly ascending.
    peer : numpy.ndarray
        (E_r,) int64 the rank owning dst.
    undirected_id : numpy.ndarray
        (E_r,) int64 the edge's (or its reverse's) place in the whole graph's forward edges (src < dst).
    local : pdmm.LocalFunction
        The own nodes' local functions, shape (n_r, B, d).
    batched : bool
        Whether the problem has a batch axis (pdmm.Problem.batched).
    rank, world : int
        This part's rank and the number of parts.
    spectra : Mapping[str, tuple[float, float]]
        {mixing kind: (lambda_min, lambda_2)} of the whole graph's mixing matrix of that kind, exactly what a run on
        the whole graph computes (pdmm.mixing.mixing_spectra; pdmm-bridge partition writes them into the shards):
        what dgd, extra, nids, gradient-tracking and chebyshev without interval= read on a part. Empty by default;
        the same on every rank (pdmm.distributed.checked_part). Stored as a dict of float pairs.

    Raises
    ------
    ValueError
        On construction, in one line, for a field of the wrong type, dtype, shape or range, nodes not strictly
        ascending, edges not sorted by (src, dst), a self-loop, or spectra that are not finite pairs of known kinds
        (pdmm.mixing.checked_spectra).
    """

    n: int
    num_edges: int
    nodes: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    edge_id: np.ndarray
    rev_id: np.ndarray
    peer: np.ndarray
    undirected_id: np.ndarray
    local: LocalFunction
    batched: bool
    rank: int
    world: int
    spectra: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_sizes(self)
        _check_ids(self)
        try:
            object.__setattr__(self, "spectra", checked_spectra(self.spectra))
        except ValueError as err:
            raise ValueError(f"PartProblem.{err}") from None

    @property
    def batch(self) -> int:
        """B, the number of instances."""
        return int(self.local.shape[1])

    @property
    def dim(self) -> int:
        """d, the dimension of each node's variable."""
        return int(self.local.shape[2])

    @property
    def is_consensus(self) -> bool:
        """Always True: a part holds consensus constraints only."""
        return True

    @classmethod
    def of(
        cls,
        problem: Any,
        owner: Any,
        rank: int,
        world: int | None = None,
        *,
        constraints_apart: bool = False,
        spectra: Mapping[str, tuple[float, float]] | None = None,
    ) -> "PartProblem":
        """Rank `rank`'s part of a whole consensus pdmm.Problem: the ids pdmm.halo.part_ids cuts and its
        nodes' local functions (pdmm.LocalFunction.nodes).

        Parameters
        ----------
        problem : pdmm.Problem
            The whole problem, consensus constraints.
        owner : array_like
            (n,) ints: the rank owning each node.
        rank : int
            The part's rank.
        world : int or None
            The number of ranks; None for owner.max() + 1.
        constraints_apart : bool
            Whether the caller runs the whole problem's constraints itself (pdmm.distributed on a whole problem
            slices its edge matrices by the part's edge ids); the part then holds its ids and local functions.
        spectra : Mapping or None
            The part's spectra (PartProblem.spectra; pdmm.mixing.mixing_spectra(problem.compiled)); None: none.

        Returns
        -------
        PartProblem
            The rank's part, its ids those of problem.compiled.

        Raises
        ------
        ValueError
            For edge-matrix constraints (unless constraints_apart), an owner of another shape or kind, or a rank
            that owns no node.
        """
        if not (problem.is_consensus or constraints_apart):
            raise ValueError("a PartProblem holds consensus constraints only, not edge matrices")
        graph = problem.compiled
        owner = np.asarray(owner)
        if owner.shape != (graph.n,) or owner.dtype.kind not in "iu":
            raise ValueError(f"owner must be {graph.n} integer ranks, one per node, got {owner.shape} {owner.dtype}")
        owner = owner.astype(np.int64)
        world = int(owner.max()) + 1 if world is None else world
        ids = part_ids(graph, owner, rank)
        return cls(
            n=graph.n,
            num_edges=graph.num_edges,
            **ids,
            undirected_id=undirected_ids(graph).cpu().numpy()[ids["edge_id"]],
            local=problem.local.nodes(torch.from_numpy(ids["nodes"])),
            batched=bool(problem.batched),
            rank=rank,
            world=world,
            spectra={} if spectra is None else spectra,
        )

    @classmethod
    def from_edges(
        cls,
        nodes: Any,
        src: Any,
        dst: Any,
        local: LocalFunction,
        n: int,
        group: Any = None,
        *,
        batched: bool | None = None,
        exchange: "PartExchange | None" = None,
        spectra: Mapping[str, tuple[float, float]] | None = None,
    ) -> "PartProblem":
        """A rank's part from its own nodes and edges alone, the global ids derived with the other ranks: every rank
        of the process group (or of `exchange`, an emulated one) calls it at once. The ids are those of the whole
        graph built from the same edges (pdmm.CompiledGraph): edge ids in (src, dst) order, a node's first edge the
        exclusive prefix sum of the degrees over the global ids, computed at a block directory (node i's record at
        rank i // ceil(n / P)) through all_to_all exchanges; memory per rank O((n + E) / P + the rank's part)
        (docs/guide/distributed.md, "Each rank holds its part").

        Parameters
        ----------
        nodes : array_like
            (n_r,) the rank's global node ids, strictly ascending.
        src, dst : array_like
            (E_r,) the directed edges out of the rank's nodes, any order: src a local index into nodes, dst a global
            id. Each undirected edge is given both ways, each way by the rank owning its tail.
        local : pdmm.LocalFunction
            The nodes' local functions, (n_r, B, d).
        n : int
            The whole graph's node count.
        group : torch.distributed process group or None
            The ranks' group (None: the default group), where exchange is None.
        batched : bool or None
            Whether the problem has a batch axis; None: B > 1.
        exchange : PartExchange or None
            The exchange to use instead of the group's (one that emulates a world in one process).
        spectra : Mapping or None
            The whole graph's mixing spectra (PartProblem.spectra), the same on every rank; None: none.

        Returns
        -------
        PartProblem
            The rank's part; PartProblem.of's arrays for the whole graph, exactly.

        Raises
        ------
        ValueError
            On every rank, one line, where any rank's input is bad: ids out of range, duplicate edges or
            self-loops, nodes not ascending, parts that overlap or leave nodes out, an edge without its reverse.
        """
        exchange = PartExchange.of_group(group) if exchange is None else exchange
        rank, world = exchange.rank, exchange.world
        nodes, src, dst = (np.asarray(a) for a in (nodes, src, dst))
        problem = _input_problem(nodes, src, dst, local, n)
        exchange.agree(None if problem is None else f"rank {rank}: {problem}", "the parts' nodes and edges")
        nodes, src, dst = (a.astype(np.int64) for a in (nodes, src, dst))
        order = np.lexsort((dst, src))
        src, dst = src[order], dst[order]
        ahead = nodes[src] < dst
        degree = np.bincount(src, minlength=len(nodes))
        forward = np.bincount(src[ahead], minlength=len(nodes))
        offsets, owners, overlap = _directory(exchange, nodes, n, np.stack([degree, forward], 1))
        exchange.agree(overlap, "the parts' nodes")
        start = np.concatenate([[0], np.cumsum(degree)[:-1]])
        edge_id = offsets[src, 0] + np.arange(len(src)) - start[src]
        before = np.cumsum(ahead) - ahead  # forward edges of this rank before each edge
        forward_start = np.concatenate([[0], np.cumsum(forward)[:-1]])
        place = np.where(ahead, offsets[src, 1] + before - forward_start[src], -1)
        peer = _owners_of(exchange, dst, n, owners)
        rev_id, rev_place, missing = _reverses(exchange, nodes, src, dst, peer, edge_id, place, n)
        exchange.agree(missing, "the parts' edges")
        return cls(
            n=int(n),
            num_edges=int(exchange.total(len(src))),
            nodes=nodes,
            src=src,
            dst=dst,
            edge_id=edge_id,
            rev_id=rev_id,
            peer=peer,
            undirected_id=np.where(ahead, place, rev_place),
            local=local,
            batched=local.shape[1] > 1 if batched is None else bool(batched),
            rank=rank,
            world=world,
            spectra={} if spectra is None else spectra,
        )


@dataclass(frozen=True)
class PartExchange:
    """The one collective from_edges needs, on a rank: all_to_all (pdmm.halo.AllToAll: torch.distributed's
    all_to_all_single on a process group, of_group; or one that routes the buffers itself, which emulates a world in
    one process), with the rank and the world size. Every exchange here moves int64 rows on the CPU."""

    rank: int
    world: int
    all_to_all: AllToAll

    @classmethod
    def of_group(cls, group: Any = None) -> "PartExchange":
        """The exchange on an initialised torch.distributed process group (pdmm.distributed.check_group), its
        failures pdmm.collectives.CollectiveError."""
        import torch.distributed as dist

        rank, world = check_group(group)

        def all_to_all(output, input, output_sizes, input_sizes):
            collective(dist.all_to_all_single, output, input, output_sizes, input_sizes, group=group)

        return cls(rank, world, all_to_all)

    def variable(self, sends: list[np.ndarray]) -> tuple[np.ndarray, list[int]]:
        """sends[r] ((k_r, w) int64 rows) to rank r; returns the rows every rank sent here, in rank order, and how
        many came from each rank."""
        width = sends[0].shape[1]
        counts = torch.tensor([len(s) for s in sends], dtype=torch.int64)
        got = torch.empty(self.world, dtype=torch.int64)
        self.all_to_all(got, counts, [1] * self.world, [1] * self.world)
        received = got.tolist()
        output = torch.empty((sum(received), width), dtype=torch.int64)
        rows = torch.from_numpy(np.ascontiguousarray(np.concatenate(sends).reshape(-1, width), dtype=np.int64))
        self.all_to_all(output, rows, received, counts.tolist())
        return output.numpy(), received

    def gathered(self, values: np.ndarray) -> np.ndarray:
        """Every rank's `values` ((w,) int64), (world, w) in rank order."""
        row = np.asarray(values, dtype=np.int64).reshape(1, -1)
        rows, _ = self.variable([row] * self.world)
        return rows

    def total(self, value: int) -> int:
        """The sum of every rank's value."""
        return int(self.gathered(np.array([value])).sum())

    def agree(self, problem: str | None, what: str) -> None:
        """ValueError on every rank where any rank found a problem with `what`: "{what}: {problem}" where it was
        found, "{what}: rank r found a problem" on the others."""
        bad = np.flatnonzero(self.gathered(np.array([problem is not None]))[:, 0])
        if problem is not None:
            raise ValueError(f"{what}: {problem}")
        if len(bad):
            raise ValueError(f"{what}: rank {int(bad[0])} found a problem; see its error")


def _input_problem(nodes: np.ndarray, src: np.ndarray, dst: np.ndarray, local: Any, n: Any) -> str | None:
    """What is wrong with from_edges' input on this rank, in words, or None."""
    if not (_is_int(n) and n > 0):
        return f"n must be an int > 0, got {n!r}"
    for name, a in (("nodes", nodes), ("src", src), ("dst", dst)):
        if a.ndim != 1 or a.dtype.kind not in "iu":
            return f"{name} must be a 1-D integer array, got shape {a.shape}, dtype {a.dtype}"
    if len(src) != len(dst):
        return f"src and dst differ in length ({len(src)} and {len(dst)})"
    if not len(nodes) or not np.all(np.diff(nodes) > 0) or nodes[0] < 0 or nodes[-1] >= n:
        return f"nodes must be nonempty, strictly ascending global ids in [0, {n})"
    if len(src) and (src.min() < 0 or src.max() >= len(nodes) or dst.min() < 0 or dst.max() >= n):
        return f"src must index the {len(nodes)} nodes and dst be global ids in [0, {n})"
    if np.any(nodes[src] == dst):
        return "an edge is a self-loop"
    pairs = np.unique(np.stack([src, dst], 1), axis=0)
    if len(pairs) != len(src):
        return f"{len(src) - len(pairs)} duplicate edges"
    if not isinstance(local, LocalFunction) or local.shape[0] != len(nodes):
        return f"local must be a pdmm.LocalFunction of the {len(nodes)} nodes"
    return None


def _directory(exchange: PartExchange, nodes: np.ndarray, n: int, counts: np.ndarray):
    """(offsets, owners, problem) through the block directory, node i's record at rank i // ceil(n / P): offsets,
    per own node the exclusive prefix sums over global ids of each column of counts ((n_r, k) int64, every rank's),
    (n_r, k); owners, the rank holding each node of this rank's block ((block,) int64, -1 for none); problem: in
    words where the ranks' nodes overlap or miss some, else None."""
    world, rank = exchange.world, exchange.rank
    block = -(-n // world)
    home = nodes // block
    cut = np.searchsorted(home, np.arange(world + 1))
    records = np.concatenate([nodes[:, None], counts], 1)
    received, sizes = exchange.variable([records[cut[r] : cut[r + 1]] for r in range(world)])
    low, high = rank * block, min(n, (rank + 1) * block)
    seen = np.bincount(received[:, 0] - low, minlength=max(high - low, 0))
    problem = None
    if len(seen) and (seen.max(initial=0) > 1 or (seen[: max(high - low, 0)] == 0).any()):
        twice = np.flatnonzero(seen > 1)
        problem = (
            f"node {low + int(twice[0])} is held by more than one rank"
            if len(twice)
            else f"node {low + int(np.flatnonzero(seen == 0)[0])} is held by no rank"
        )
    owners = np.full(max(high - low, 0), -1, dtype=np.int64)
    owners[received[:, 0] - low] = np.repeat(np.arange(world), sizes)
    per_node = np.zeros((max(high - low, 0), counts.shape[1]), dtype=np.int64)
    per_node[received[:, 0] - low] = received[:, 1:]
    totals = exchange.gathered(per_node.sum(0))
    base = totals[:rank].sum(0)
    prefix = base + np.cumsum(per_node, 0) - per_node
    answers = prefix[received[:, 0] - low]
    back, _ = exchange.variable(np.split(answers, np.cumsum(sizes)[:-1]))
    return back, owners, problem


def _owners_of(exchange: PartExchange, ids: np.ndarray, n: int, owners: np.ndarray) -> np.ndarray:
    """The rank owning each global node id in ids, asked of the block directory (owners: this rank's block's, from
    _directory): (len(ids),) int64."""
    world, rank = exchange.world, exchange.rank
    block = -(-n // world)
    asked = np.unique(ids)
    home = asked // block
    cut = np.searchsorted(home, np.arange(world + 1))
    questions, sizes = exchange.variable([asked[cut[r] : cut[r + 1], None] for r in range(world)])
    low = rank * block
    answers = owners[questions[:, 0] - low]
    back, _ = exchange.variable(np.split(answers[:, None], np.cumsum(sizes)[:-1]))
    return back[np.searchsorted(asked, ids), 0]


def _reverses(exchange, nodes, src, dst, peer, edge_id, place, n):
    """(rev_id, rev_place, problem): each edge's reverse's global id and forward place (-1 where the reverse is not
    forward), asked of the rank owning dst; problem: in words where an edge has no reverse, else None."""
    world = exchange.world
    order = np.argsort(peer, kind="stable")
    cut = np.searchsorted(peer[order], np.arange(world + 1))
    asks = np.stack([dst[order], nodes[src[order]]], 1)  # the reverse: dst -> src
    questions, sizes = exchange.variable([asks[cut[r] : cut[r + 1]] for r in range(world)])
    tail = np.searchsorted(nodes, questions[:, 0])
    keys = src * n + dst  # ascending: edges sorted by (src, dst)
    wanted = np.minimum(tail, len(nodes) - 1) * n + questions[:, 1]
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    found = keys[at] == wanted if len(keys) else np.zeros(len(wanted), dtype=bool)
    problem = None
    if not found.all():
        k = int(np.flatnonzero(~found)[0])
        head, tail_id = int(questions[k, 0]), int(questions[k, 1])
        problem = f"edge {tail_id} -> {head} has no reverse {head} -> {tail_id} (give each undirected edge both ways)"
    answers = np.stack([edge_id, place], 1)[at] if len(keys) else np.zeros((len(questions), 2), dtype=np.int64)
    back, _ = exchange.variable(np.split(answers, np.cumsum(sizes)[:-1]))
    rev_id, rev_place = np.empty(len(src), dtype=np.int64), np.empty(len(src), dtype=np.int64)
    rev_id[order], rev_place[order] = back[:, 0], back[:, 1]
    return rev_id, rev_place, problem


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_sizes(part: PartProblem) -> None:
    """ValueError, one line, for PartProblem's scalars, its arrays' types and shapes, its local function."""
    if not (_is_int(part.n) and part.n > 0):
        raise ValueError(f"PartProblem.n must be an int > 0, got {part.n!r}")
    if not (_is_int(part.num_edges) and part.num_edges >= 0 and part.num_edges % 2 == 0):
        raise ValueError(f"PartProblem.num_edges must be an even int >= 0 (directed edges), got {part.num_edges!r}")
    if not (_is_int(part.world) and part.world > 0 and _is_int(part.rank) and 0 <= part.rank < part.world):
        raise ValueError(
            f"PartProblem needs world > 0 and 0 <= rank < world, got rank={part.rank!r}, world={part.world!r}"
        )
    for name in _ID_FIELDS:
        a = getattr(part, name)
        if not isinstance(a, np.ndarray) or a.dtype != np.int64 or a.ndim != 1:
            got = f"{a.dtype} array of shape {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
            raise ValueError(f"PartProblem.{name} must be a 1-D int64 numpy array, got {got}")
    lengths = {name: len(getattr(part, name)) for name in _ID_FIELDS[1:]}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"PartProblem's edge arrays differ in length: {lengths}")
    if not len(part.nodes):
        raise ValueError("PartProblem.nodes is empty: every rank needs at least one node")
    if not isinstance(part.local, LocalFunction) or part.local.shape[0] != len(part.nodes):
        raise ValueError(f"PartProblem.local must be a pdmm.LocalFunction of the {len(part.nodes)} nodes (n_r, B, d)")
    if not isinstance(part.batched, (bool, np.bool_)):
        raise ValueError(f"PartProblem.batched must be a bool, got {part.batched!r}")


def _check_ids(part: PartProblem) -> None:
    """ValueError, one line, for ids out of range, nodes not strictly ascending, edges out of (src, dst) order."""
    n_r, n, edges = len(part.nodes), part.n, part.num_edges
    bounds = dict(nodes=n, src=n_r, dst=n, edge_id=edges, rev_id=edges, peer=part.world, undirected_id=edges // 2)
    for name, bound in bounds.items():
        a = getattr(part, name)
        if len(a) and (a.min() < 0 or a.max() >= bound):
            raise ValueError(f"PartProblem.{name} must lie in [0, {bound}), got values in [{a.min()}, {a.max()}]")
    if np.any(np.diff(part.nodes) <= 0):
        raise ValueError("PartProblem.nodes must be strictly ascending")
    step_src, step_dst = np.diff(part.src), np.diff(part.dst)
    if np.any((step_src < 0) | ((step_src == 0) & (step_dst <= 0))):
        raise ValueError("PartProblem's edges must be sorted by (src, dst) without duplicates")
    if np.any(np.diff(part.edge_id) <= 0):
        raise ValueError("PartProblem.edge_id must be strictly ascending (the global order)")
    if np.any(part.nodes[part.src] == part.dst):
        raise ValueError("PartProblem has a self-loop")


__all__ = ["PartProblem", "PartExchange"]


def check_tiling(part: PartProblem, every: np.ndarray, group: Any) -> None:
    """every: each rank's (fingerprint, n_r, E_r). ValueError on every rank where they differ, the counts do not sum
    to n and num_edges, a part names another rank or world, a node is held twice or not at all, or the edge ids do
    not follow the degrees (the exclusive prefix sum over global ids)."""
    differ = [r for r in range(len(every)) if every[r, 0] != every[0, 0]]
    if differ:
        raise ValueError(
            f"the ranks' parts or arguments differ: ranks {differ} differ from rank 0 in the arguments, the whole "
            "graph's sizes (n, num_edges, batch, dim, local kind) or the spectra"
        )
    exchange = PartExchange.of_group(group)
    if (part.rank, part.world) != (exchange.rank, exchange.world):
        raise ValueError(
            f"this part is rank {part.rank} of {part.world}, but it runs as rank {exchange.rank} of {exchange.world}"
        )
    nodes, edges = int(every[:, 1].sum()), int(every[:, 2].sum())
    if (nodes, edges) != (part.n, part.num_edges):
        raise ValueError(
            f"the parts hold {nodes} nodes and {edges} directed edges in all, but n={part.n}, "
            f"num_edges={part.num_edges}: every node and edge must be in exactly one part"
        )
    degree = np.bincount(part.src, minlength=len(part.nodes))
    offsets, _, problem = _directory(exchange, part.nodes, part.n, degree[:, None])
    exchange.agree(problem, "the parts' nodes")
    first = np.concatenate([[0], np.cumsum(degree)[:-1]])
    held = degree > 0
    wrong = None
    if not np.array_equal(part.edge_id[first[held]], offsets[held, 0]):
        wrong = f"rank {part.rank}'s edge ids do not follow the whole graph's (src, dst) order and degrees"
    exchange.agree(wrong, "the parts' edge ids")
