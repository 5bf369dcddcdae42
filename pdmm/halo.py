"""A rank's part of a partitioned graph and its two halo exchanges (docs/guide/distributed.md, "What runs on the
engine").

A rank holds its own nodes (local indices 0..n_r-1, global ids in `nodes`, ascending) and the directed edges out of
them, in the global edge order. What a step needs from the other ranks comes through one all_to_all_single per call:

    EdgeSwap   v -> v[rev] for an edge tensor (E_r, ...): the cut edges' values, packed per neighbouring rank in the
               order of the global ids of the edges that receive them, the others read in place (PDMM's and ADMM's
               exchange).
    NodeHalo   x -> cat(x, ghosts) for a node tensor (n_r, ...): the rows of the other ranks' nodes that this rank's
               edges reach (its ghosts), one row per (node, neighbouring rank), not one per cut edge; ghosts are
               numbered by owning rank, then global id (a mixing product with W, a neighbour's x at an edge).

Both are built once per part from per-edge global ids only (edge id, reverse's id, the rank owning the far end), so
a rank needs no global array. The exchange itself is a callable AllToAll (torch.distributed's all_to_all_single on
the run's group in pdmm.distributed; None where the part is the whole graph, world 1), so that one process can
emulate a world by routing the buffers itself (tests/test_halo.py). Collectives holds the other two collectives a
method may need at set-up: an element-wise max over the ranks (a step size's max_i L_i) and a value computed on one
rank and shared (a mixing matrix's spectrum).
"""

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from .edge_index import CompiledGraph, EdgeList, select

AllToAll = Callable[[torch.Tensor, torch.Tensor, list[int], list[int]], None]
"""all_to_all(output, input, output_split_sizes, input_split_sizes): input's rows split by input_split_sizes go to
the ranks in order, output receives from each rank its split of output_split_sizes rows (in place)."""


class Collectives(Protocol):
    """The collectives of a part's ranks (pdmm.distributed builds them on the run's process group)."""

    all_to_all: AllToAll | None  # None at world 1: nothing to exchange

    def maximum(self, t: torch.Tensor) -> torch.Tensor:
        """The element-wise max of t over the ranks (every rank passes the same shape)."""
        ...

    def once(self, compute: Callable[[], tuple[float, ...]], count: int) -> tuple[float, ...]:
        """compute() run on rank 0 alone, its `count` floats the same on every rank (its error raised on every
        rank)."""
        ...


class _Transfer:
    """Rows of a tensor sent to and received from the other ranks in one all_to_all: send (k,) int64, the rows to
    send in order, send_counts / receive_counts per rank."""

    def __init__(self, send: torch.Tensor, send_counts: list[int], receive_counts: list[int], all_to_all):
        self.send, self.send_counts, self.receive_counts = send, send_counts, receive_counts
        self.all_to_all: AllToAll | None = all_to_all
        self.received = sum(receive_counts)

    def transfer(self, v: torch.Tensor) -> torch.Tensor:
        """The rows the other ranks send for v's, (received, ...) in the order of the ranks."""
        received = v.new_empty((self.received, *v.shape[1:]))
        if self.all_to_all is not None:
            self.all_to_all(received, v.index_select(0, self.send).contiguous(), self.receive_counts, self.send_counts)
        return received


class EdgeSwap(_Transfer):
    """v -> v[rev] over the whole graph for a rank's edge tensor v (E_r, ...): local reverses read in place, the cut
    edges' values from the neighbouring ranks through one all_to_all (source: the row of cat(v, received) each edge
    takes)."""

    def __init__(self, send, counts, source, all_to_all):
        super().__init__(send, counts, counts, all_to_all)
        self.source = source

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        return torch.cat([v, self.transfer(v)]).index_select(0, self.source)

    @classmethod
    def build(cls, edge_id, rev_id, peer, rank, world, all_to_all, device="cpu") -> "EdgeSwap":
        """The swap of a rank's edges, from their global ids (ascending), their reverses' global ids and the rank
        owning each reverse, (E_r,) int arrays: each rank sends its cut edges to r in the order of the global ids of
        the reverses, and receives from r in the order of its own edges' global ids, which name the same edges."""
        edge_id, rev_id, peer = (np.asarray(a, dtype=np.int64) for a in (edge_id, rev_id, peer))
        source = np.empty(len(edge_id), dtype=np.int64)
        inside = peer == rank
        source[inside] = np.searchsorted(edge_id, rev_id[inside])
        send, counts, at = [], [], len(edge_id)
        for r in range(world):
            mine = np.flatnonzero(peer == r) if r != rank else np.empty(0, dtype=np.int64)
            send.append(mine[np.argsort(rev_id[mine], kind="stable")])
            source[mine] = at + np.arange(len(mine))
            counts.append(len(mine))
            at += len(mine)
        as_tensor = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
        return cls(as_tensor(np.concatenate(send)), counts, as_tensor(source), all_to_all)


class NodeHalo(_Transfer):
    """x -> cat(x, ghosts), (n_r + h_r, ...), for a rank's node tensor x (n_r, ...): the ghosts are the other ranks'
    nodes that this rank's edges reach, by owning rank, then global id (`ghosts`, global ids), one all_to_all."""

    def __init__(self, send, send_counts, receive_counts, ghosts, all_to_all):
        super().__init__(send, send_counts, receive_counts, all_to_all)
        self.ghosts = ghosts

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.transfer(x)])

    @classmethod
    def build(cls, src, dst, peer, rank, world, all_to_all, device="cpu") -> "NodeHalo":
        """The halo of a rank's part from its edges (E_r,) int arrays: src (local node index, ascending by the
        nodes' global ids), dst (global id) and the rank owning dst. The graph is undirected, so the nodes rank r
        needs from rank q (dst of r's edges owned by q) are those q sends it (src of q's edges owned by r), both
        sorted by global id."""
        src, dst, peer = (np.asarray(a, dtype=np.int64) for a in (src, dst, peer))
        send, send_counts, ghosts, receive_counts = [], [], [], []
        for r in range(world):
            edges = np.flatnonzero(peer == r) if r != rank else np.empty(0, dtype=np.int64)
            send.append(np.unique(src[edges]))
            ghosts.append(np.unique(dst[edges]))
            send_counts.append(len(send[-1]))
            receive_counts.append(len(ghosts[-1]))
        return cls(
            torch.from_numpy(np.concatenate(send)).to(device),
            send_counts,
            receive_counts,
            np.concatenate(ghosts),
            all_to_all,
        )


@dataclass(frozen=True)
class PartGraph(CompiledGraph):
    """A rank's part of a CompiledGraph: its own nodes (local indices 0..n_r-1, global ids in `nodes`) and the
    directed edges out of them, in the global order. dst holds GLOBAL node ids, sign the global one; rev is unused
    (-1). exchange(v) is the partitioned v[rev] (swap), gather_neighbour(x) reads x at the far end through the node
    halo (ghost_of_edge: the row of halo(x) each edge reads); whole is the whole graph where the rank holds it
    (mixing matrices are built on it), collectives those of the part's ranks and spectra, where it does not, the
    whole graph's mixing spectra by kind (pdmm.parts.PartProblem.spectra, read by pdmm.mixing.run_interval)."""

    swap: EdgeSwap | None = None
    halo: NodeHalo | None = None
    ghost_of_edge: torch.Tensor | None = None
    whole: CompiledGraph | None = None
    collectives: Any = None
    spectra: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def exchange(self, v: torch.Tensor) -> torch.Tensor:
        assert self.swap is not None
        return self.swap(v)

    def gather_neighbour(self, x: torch.Tensor) -> torch.Tensor:
        """x[dst] over the whole graph: (n_r, ...) -> (E_r, ...), one halo exchange."""
        assert self.halo is not None and self.ghost_of_edge is not None
        return select(self.halo(x), self.ghost_of_edge)

    def mixing_rows(self, W: Any) -> Any:
        """The rows of the whole graph's mixing matrix W (scipy CSR, n x n, checked by pdmm.mixing.as_mixing) at this
        rank's nodes, columns renumbered to the rows of halo(x), own nodes first, then the ghosts: (n_r, n_r + h_r)
        (pdmm.mixing.MixingProduct sorts each row's entries by their new columns)."""
        import scipy.sparse as sp

        assert self.halo is not None
        own = np.asarray(self.nodes, dtype=np.int64)
        rows = W[own].tocsr()
        columns = np.concatenate([own, self.halo.ghosts])
        order = np.argsort(columns, kind="stable")
        local = order[np.searchsorted(columns[order], rows.indices)]
        return sp.csr_array((rows.data, local, rows.indptr), shape=(len(own), len(columns)))

    @classmethod
    def of_edges(
        cls,
        nodes,
        src,
        dst,
        edge_id,
        rev_id,
        peer,
        rank: int,
        world: int,
        collectives: Collectives,
        device: Any = "cpu",
        dtype: torch.dtype = torch.float64,
        whole: CompiledGraph | None = None,
        spectra: Mapping[str, tuple[float, float]] | None = None,
    ) -> "PartGraph":
        """A rank's part from its nodes' global ids (n_r,) ascending and its edges (E_r,) in the global order: src
        (local index), dst, global edge id, the reverse's global id and the rank owning dst, int arrays; built on
        the CPU, then on `device` in `dtype`; spectra: the whole graph's mixing spectra by kind, where the rank
        holds only its part (None: none)."""
        nodes, src, dst, peer = (np.asarray(a, dtype=np.int64) for a in (nodes, src, dst, peer))
        exchange = collectives.all_to_all
        halo = NodeHalo.build(src, dst, peer, rank, world, exchange, device)
        inside = peer == rank
        ghost_of_edge = np.empty(len(dst), dtype=np.int64)
        ghost_of_edge[inside] = np.searchsorted(nodes, dst[inside])
        order = np.argsort(halo.ghosts, kind="stable")
        ghost_of_edge[~inside] = len(nodes) + order[np.searchsorted(halo.ghosts[order], dst[~inside])]
        ahead = nodes[src] < dst
        fields = EdgeList.arrays(len(nodes), src, dst, device, dtype)
        return cls(
            **fields,
            nodes=nodes.tolist(),
            rev=torch.full((len(dst),), -1, dtype=torch.int64, device=device),
            sign=torch.where(torch.from_numpy(ahead), 1.0, -1.0).to(device, dtype),
            forward=torch.from_numpy(np.flatnonzero(ahead)).to(device),
            swap=EdgeSwap.build(edge_id, rev_id, peer, rank, world, exchange, device),
            halo=halo,
            ghost_of_edge=torch.from_numpy(ghost_of_edge).to(device),
            whole=whole,
            collectives=collectives,
            spectra={} if spectra is None else dict(spectra),
        )


def local_part(graph: CompiledGraph, owner: np.ndarray, rank: int, world: int, collectives: Collectives, **kw: Any):
    """(rank's PartGraph, its own node ids (n_r,)) of a whole CompiledGraph whose node i is owned by rank owner[i];
    keywords: PartGraph.of_edges' device and dtype."""
    ids = part_ids(graph, owner, rank)
    part = PartGraph.of_edges(**ids, rank=rank, world=world, collectives=collectives, whole=graph, **kw)
    return part, ids["nodes"]


def part_ids(graph: CompiledGraph, owner: np.ndarray, rank: int) -> dict[str, Any]:
    """The ids of rank `rank`'s part of a whole CompiledGraph whose node i rank owner[i] holds, int64 arrays in
    PartGraph.of_edges' order: nodes (n_r,) its nodes' global ids, ascending; then per directed edge out of them
    (E_r,), in the global order, src (the local index of its tail), dst, edge_id, rev_id (global ids) and peer (the
    rank owning dst)."""
    src, dst, rev = (t.cpu().numpy() for t in (graph.src, graph.dst, graph.rev))
    owner = np.asarray(owner, dtype=np.int64)
    own = np.flatnonzero(owner == rank)
    local_id = np.full(graph.n, -1, dtype=np.int64)
    local_id[own] = np.arange(len(own))
    edges = np.flatnonzero(owner[src] == rank)  # global edge ids, still sorted by (src, dst)
    return {
        "nodes": own.astype(np.int64),
        "src": local_id[src[edges]],
        "dst": dst[edges].astype(np.int64),
        "edge_id": edges.astype(np.int64),
        "rev_id": rev[edges].astype(np.int64),
        "peer": owner[dst[edges]],
    }


def largest(t: torch.Tensor, graph: CompiledGraph) -> torch.Tensor:
    """t's element-wise max over the ranks holding graph's parts; t itself for a whole graph."""
    return graph.collectives.maximum(t) if isinstance(graph, PartGraph) else t


def computed_once(compute: Callable[[], tuple[float, ...]], count: int, graph: CompiledGraph) -> tuple[float, ...]:
    """compute()'s `count` floats, on rank 0 of graph's ranks alone and the same on every rank for a part;
    compute() for a whole graph."""
    return graph.collectives.once(compute, count) if isinstance(graph, PartGraph) else compute()


def adjacency(graph: CompiledGraph) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor] | None]:
    """The adjacency matrix's rows at the graph's nodes, a sparse CSR of ones in the graph's device and dtype, and
    what a node tensor x becomes before the product (None: x itself), for the node form's sum of x over each node's
    neighbours (pdmm.methods.NodeForm; docs/guide/distributed.md, "What runs on the engine"): the whole graph's
    A (n, n); a part's rows (n_r, n_r + h_r), its columns its own nodes and then its ghosts, each row's entries
    ordered by column, with the NodeHalo, x -> cat(x, ghosts)."""
    if isinstance(graph, PartGraph):
        assert graph.halo is not None and graph.ghost_of_edge is not None
        columns, width, widen = graph.ghost_of_edge, graph.n + len(graph.halo.ghosts), graph.halo
        columns = columns[torch.argsort(graph.src * width + columns)]  # each row's columns ascending
    else:
        columns, width, widen = graph.dst, graph.n, None
    crow = torch.cat([graph.degree.new_zeros(1), torch.cumsum(graph.degree, 0)])
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        matrix = torch.sparse_csr_tensor(
            crow, columns, torch.ones_like(graph.sign), (graph.n, width), check_invariants=False
        )
    return matrix, widen


def whole_graph(graph: CompiledGraph) -> CompiledGraph:
    """The whole graph of a part (ValueError where the rank does not hold it), or the graph itself."""
    if not isinstance(graph, PartGraph):
        return graph
    if graph.whole is None:
        raise ValueError("this rank holds only its part of the graph; give the mixing matrix's rows and spectrum")
    return graph.whole
