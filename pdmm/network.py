"""Simulated networks: lost messages, sleeping nodes, changing edges, quantised messages, private starts.

`Network` describes the effects; `Channel` applies them to one run at the `exchange` seam of
pdmm.methods (docs/theory/pdmm.md section 12). At iteration k = 1, 2, ..., independently per instance b:

    awake_i          ~ Bernoulli(wake_i)                     a sleeping node keeps x_i and sends nothing;
                       or, wake="one", exactly one node awake, uniform over the n
    up_ij            ~ Bernoulli(edge_up), both directions   or a given schedule of edge subsets
    bad_{i->j}^k     Gilbert-Elliott chain of the link i->j   (only with burst=(p_gb, p_bg); else never bad)
                       P(bad^1) = pi_bad = p_gb / (p_gb + p_bg)              (stationary from the start)
                       P(bad^{k+1} | good^k) = p_gb,  P(good^{k+1} | bad^k) = p_bg
    kept_{i->j}      = not bad_{i->j}^k and Bernoulli(1 - drop_{i->j})   each directed transmission on its own
    delivered_{i->j} = awake_i and up_ij and kept_{i->j}
    z_{j|i}^{k+1}    = (1 - theta) z_{j|i}^k + theta Q(y_{i|j})   where delivered, else z_{j|i}^k
                       (on an inequality edge max(Q(y_{i|j}), -y_{j|i}) in place of Q(y_{i|j}), pdmm.constraints)

wake_i and drop_{i->j} are one probability for all, or one per node / per directed edge. A
link's loss rate is pi_bad + (1 - pi_bad) drop_{i->j}; its bad spells last 1 / p_bg iterations
on average and its good ones 1 / p_gb (geometric), which with drop = 0 are the mean lengths of
the bursts of lost messages and of the runs delivered. The chain moves every iteration, whether
or not i sends.

Q is the identity, or b-bit uniform quantisation on [-R, R] (2^b levels, step 2R / (2^b - 1)),
R given (`limit`) or, adaptive, the largest magnitude among the sender's messages of that
iteration (sent with them as one 64-bit number), with nearest rounding, subtractive dither
(Q(y + u) - u, u uniform on one step and known to both ends through the shared seed) or
stochastic rounding (up with probability equal to the distance from the level below, in steps).
Privacy (subspace perturbation, Li, Heusdens and Christensen) adds N(0, privacy^2) to every z^0.
The events draw counter-based numbers (pdmm.draws): trial i B + b of an event (node or edge i of
instance b; edges by the receiving edge, an undirected edge by its place in compiled.forward) at
iteration k is a function of (seed, the event's stream, k, i B + b), so every run is reproducible
and the same on every device; each probability is exact to 2^-32. The dither, the stochastic
rounding and the privacy perturbation draw per entry too: entry k of edge e's row of instance b is
trial (e B + b) w + k (w numbers per row) of its stream, keyed by the seed and the quantisation's
number in the run (privacy: the seed alone). A schedule draws nothing. Every i and e is a global id
(GlobalIds), so a rank's part of the graph draws what one process draws for it
(docs/guide/network.md, "Partitioned runs").
"""

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from . import draws, masked

if TYPE_CHECKING:
    from .edge_index import CompiledGraph

ROUNDINGS = {
    False: "nearest",
    True: "subtractive",
    "nearest": "nearest",
    "subtractive": "subtractive",
    "stochastic": "stochastic",
}
HEADER_BITS = 64  # an adaptive range travels with the message as one float64
ONE = "one"  # wake="one": one node, uniform, awake per iteration
STREAMS = {  # each kind of event draws its own numbers
    "wake": 0,
    "up": 1,
    "drop": 2,
    "burst": 3,
    "one": 4,
    "dither": 5,
    "round": 6,
    "privacy": 7,
    "privacy angle": 8,
}


def _probability(name, value):
    if not (isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= value <= 1):
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def _probabilities(name, values, per):
    """A sequence of probabilities (list, numpy array, tensor) as a tuple of floats; the first bad entry named."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    if array.ndim != 1 or not len(array) or array.dtype.kind not in "iuf":
        raise ValueError(
            f"{name} per {per} must be a non-empty 1-D sequence of probabilities, got "
            f"{'shape ' + str(array.shape) if array.dtype.kind in 'iuf' else repr(values)}"
        )
    bad = np.flatnonzero(~((array >= 0) & (array <= 1)))  # NaN is bad too
    if len(bad):
        raise ValueError(f"{name}[{bad[0]}] must be a probability in [0, 1], got {array[bad[0]].item()!r}")
    return tuple(array.astype(np.float64).tolist())


def _named(name, mapping, edges):
    """A {node: p} or {(i, j): p} dict of probabilities, copied; the graph checks the labels (Channel)."""
    for key in mapping:
        if edges and not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"{name} keys must be directed edges (i, j) of node labels, got {key!r}")
    return {key: _probability(f"{name}[{key!r}]", p) for key, p in mapping.items()}


@dataclass(frozen=True)
class Network:
    """What the network does to PDMM's messages (module docstring, docs/theory/pdmm.md section 12); every effect
    is off by default.

    Per-edge and per-node sequences are stored as tuples of floats, dicts as copies; their length
    and labels are checked against the graph when a run starts (a ValueError names the culprit).

    Parameters
    ----------
    drop : float, sequence or dict
        Probability that a directed transmission is lost: one for all, or one per directed edge, either a
        sequence in compiled edge order (entry e for src[e] -> dst[e] of problem.compiled) or a dict
        {(i, j): p} of node labels for the transmission i -> j (unnamed ones: 0).
    wake : float, str, sequence or dict
        Probability that a node is awake in an iteration: one for all, one per node (a sequence in node
        order, or a dict {node: q}, unnamed nodes 1), or "one": exactly one node, chosen uniformly, per
        iteration and instance.
    bits : int or None
        None (exact numbers) or b in 1..52 bits per number.
    dither : bool or str
        False (nearest rounding), True or "subtractive", or "stochastic".
    edge_up : float or sequence
        Probability that an edge is up in an iteration, or a schedule: a sequence of edge collections,
        iteration k using entry k mod its length.
    privacy : float or None
        The standard deviation of the initial z (subspace perturbation; 0 records the privacy measures without
        it), or None.
    seed : int
        The seed of every random draw.
    limit : float or None
        The quantiser's range R, or None to adapt it.
    burst : tuple or None
        None, or (p_gb, p_bg), the Gilbert-Elliott chain of every directed link (module docstring): a link
        in the bad state loses everything, one in the good state loses with probability drop; stationary
        P(bad) = p_gb / (p_gb + p_bg), loss rate P(bad) + (1 - P(bad)) drop, mean bad spell 1 / p_bg
        iterations; both in (0, 1], as a chain with a 0 never leaves one state.

    Raises
    ------
    ValueError
        For any setting out of its range (each message names the setting and the value).

    Examples
    --------
    >>> import numpy as np
    >>> import pdmm
    >>> G = pdmm.topology("ring", n=8)  # 16 directed edges
    >>> lossy = pdmm.Network(drop=0.1, seed=0)  # every transmission lost with probability 0.1
    >>> result = pdmm.solve(pdmm.averaging(G, np.arange(8.0)), network=lossy)
    >>> result.status, bool(np.allclose(result.x, 3.5))
    ('converged', True)
    >>> bool(result.history["messages"][-1] < 16 * result.iterations)  # what was lost was not delivered
    True
    >>> pdmm.Network(drop=1.5)
    Traceback (most recent call last):
    ...
    ValueError: drop must be a probability in [0, 1], got 1.5
    """

    drop: float | tuple | dict = 0.0
    wake: float | str | tuple | dict = 1.0
    bits: int | None = None
    dither: bool | str = False
    edge_up: float | tuple = 1.0
    privacy: float | None = None
    seed: int = 0
    limit: float | None = None
    burst: tuple | None = None

    def __post_init__(self):
        if isinstance(self.drop, Mapping):
            object.__setattr__(self, "drop", _named("drop", self.drop, edges=True))
        elif isinstance(self.drop, Iterable) and not isinstance(self.drop, str):
            object.__setattr__(self, "drop", _probabilities("drop", self.drop, "directed edge"))
        else:
            _probability("drop", self.drop)
        if isinstance(self.wake, Mapping):
            object.__setattr__(self, "wake", _named("wake", self.wake, edges=False))
        elif isinstance(self.wake, str):
            if self.wake != ONE:
                raise ValueError(
                    f"wake must be a probability in [0, 1], per-node probabilities or {ONE!r}, got {self.wake!r}"
                )
        elif isinstance(self.wake, Iterable):
            object.__setattr__(self, "wake", _probabilities("wake", self.wake, "node"))
        else:
            _probability("wake", self.wake)
        if self.burst is not None:
            burst = tuple(self.burst) if isinstance(self.burst, Iterable) and not isinstance(self.burst, str) else ()
            if len(burst) != 2:
                raise ValueError(
                    f"burst must be None or a pair (p_gb, p_bg) of probabilities in (0, 1], got {self.burst!r}"
                )
            burst = tuple(_probability(f"burst {name}", p) for name, p in zip(("p_gb", "p_bg"), burst, strict=False))
            if burst[0] == 0:
                raise ValueError(
                    "burst p_gb must be > 0: with p_gb = 0 no link ever enters the bad state "
                    "(leave burst=None for no bursts)"
                )
            if burst[1] == 0:
                raise ValueError("burst p_bg must be > 0: with p_bg = 0 a link in the bad state never recovers")
            object.__setattr__(self, "burst", burst)
        if self.bits is not None and not (
            isinstance(self.bits, numbers.Integral) and not isinstance(self.bits, bool) and 1 <= self.bits <= 52
        ):
            raise ValueError(f"bits must be None or an integer from 1 to 52, got {self.bits!r}")
        if not (isinstance(self.dither, (bool, str)) and self.dither in ROUNDINGS):
            raise ValueError(f"dither must be False, True, 'subtractive' or 'stochastic', got {self.dither!r}")
        if self.bits is None and (self.rounding != "nearest" or self.limit is not None):
            raise ValueError("dither and limit shape the quantiser; they need bits")
        if self.limit is not None and not (
            isinstance(self.limit, numbers.Real) and math.isfinite(self.limit) and self.limit > 0
        ):
            raise ValueError(f"limit must be None or a finite number > 0, got {self.limit!r}")
        if isinstance(self.edge_up, numbers.Real):
            _probability("edge_up", self.edge_up)
        elif isinstance(self.edge_up, Iterable) and not isinstance(self.edge_up, str):
            schedule = tuple(tuple(map(tuple, edges)) for edges in self.edge_up)
            if not schedule:
                raise ValueError("an edge_up schedule needs at least one entry")
            object.__setattr__(self, "edge_up", schedule)
        else:
            raise ValueError(f"edge_up must be a probability or a schedule of edge collections, got {self.edge_up!r}")
        if self.privacy is not None and not (
            isinstance(self.privacy, numbers.Real) and math.isfinite(self.privacy) and self.privacy >= 0
        ):
            raise ValueError(f"privacy must be None or a finite standard deviation >= 0, got {self.privacy!r}")
        if not (isinstance(self.seed, numbers.Integral) and not isinstance(self.seed, bool)):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    @property
    def rounding(self) -> str:
        """The quantiser's rounding: "nearest", "subtractive" or "stochastic"."""
        return ROUNDINGS[self.dither]

    @property
    def scheduled(self) -> bool:
        """Whether edge_up is a schedule of edge collections rather than a probability."""
        return isinstance(self.edge_up, tuple)

    def stuck(self, graph: "CompiledGraph | None" = None) -> str | None:
        """Why no run over this network can make progress, or None.

        Stuck: wake = 0 for every node (none ever updates), edge_up = 0 (no edge is ever up) or drop = 1 (every
        message is lost). A single node of wake 0 is allowed (a deterministic network may keep one node asleep
        on purpose). With the run's graph, per-node and per-edge settings count too: wake 0 for every node of a
        list or dict, and edges that never carry a message either way (drop = 1 both ways, or never up in an
        edge_up schedule) that split the graph into parts which never hear from each other. pdmm.solve refuses
        such a network: its state would never change and the residual test could pass at x^0, or each part
        would settle on its own answer (docs/guide/solve.md, "The stopping test").

        Parameters
        ----------
        graph : CompiledGraph or None
            The run's graph, or None to check the graph-free settings only.

        Returns
        -------
        str or None
            The reason, in words, or None where a run can make progress.

        Raises
        ------
        ValueError
            Where a per-node or per-edge setting does not fit the graph.
        """
        wake = (
            self.wake.values()
            if isinstance(self.wake, Mapping)
            else self.wake
            if isinstance(self.wake, tuple)
            else ()
            if self.wake == ONE
            else (self.wake,)
        )
        if not isinstance(self.wake, Mapping) and wake and all(q == 0 for q in wake):
            return "wake=0 for every node: none ever wakes, so none updates"
        if isinstance(self.edge_up, numbers.Real) and self.edge_up == 0:
            return "edge_up=0: no edge is ever up, so no message is ever sent"
        if isinstance(self.drop, numbers.Real) and self.drop == 1:
            return "drop=1: every message is lost"
        return None if graph is None else self._split(graph)

    def _split(self, graph):
        """stuck() for the per-node and per-edge settings on `graph`: None, or why no run can make progress."""
        if isinstance(self.wake, (Mapping, tuple)) and not (_node_probabilities(self.wake, graph) > 0).any():
            return "wake=0 for every node: none ever wakes, so none updates"
        E = graph.num_edges
        if E == 0 or (isinstance(self.drop, numbers.Real) and not self.scheduled):
            return None
        live = np.ones(E, dtype=bool)  # by receiving edge: ever receives a message
        why = []
        if not isinstance(self.drop, numbers.Real):
            live &= _edge_probabilities(self.drop, graph) < 1
            why.append("drop=1 both ways")
        if self.scheduled:
            live &= _schedule(self.edge_up, graph).any(0).cpu().numpy()
            why.append("never up in the edge_up schedule")
        rev = graph.rev.cpu().numpy()
        live |= live[rev]  # an edge carries messages if either direction does
        if live.all():
            return None
        import scipy.sparse as sp
        from scipy.sparse.csgraph import connected_components

        src, dst = graph.src.cpu().numpy()[live], graph.dst.cpu().numpy()[live]
        parts = connected_components(
            sp.coo_array((np.ones(len(src)), (src, dst)), shape=(graph.n, graph.n)), directed=False, return_labels=False
        )
        if parts == 1:
            return None
        dead = int((~live).sum()) // 2
        return (
            f"{dead} edge(s) never carry a message ({' or '.join(why)}), which splits the graph into {parts} "
            "parts that never hear from each other, so no run can reach the solution"
        )

    def relabelled(self, order: np.ndarray, edge_of: np.ndarray) -> "Network":
        """The same network for a renumbered graph (pdmm.Problem.relabelled): per-node and per-edge sequences
        reordered to the new nodes and directed edges. Dicts and schedules name node labels, which the
        renumbered graph keeps; a sequence of the wrong length is left for the run to report.

        Parameters
        ----------
        order : numpy.ndarray
            (n,) int: new node k is node order[k].
        edge_of : numpy.ndarray
            (E,) int: new directed edge e is edge edge_of[e].

        Returns
        -------
        Network
            The network for the renumbered graph (this one where nothing changes).
        """
        changes: dict[str, Any] = {}
        if isinstance(self.wake, tuple) and len(self.wake) == len(order):
            changes["wake"] = tuple(np.asarray(self.wake)[order].tolist())
        if isinstance(self.drop, tuple) and len(self.drop) == len(edge_of):
            changes["drop"] = tuple(np.asarray(self.drop)[edge_of].tolist())
        return replace(self, **changes) if changes else self


@dataclass(frozen=True)
class GlobalIds:
    """Where a part of a graph (a rank's own nodes and the directed edges out of them, pdmm.halo.PartGraph)
    sits in the whole compiled graph. A Channel given them draws every event of the part's nodes and edges by
    their global ids, so the parts' channels together draw exactly the events one process's Channel draws for
    the whole graph, bit for bit (docs/guide/network.md, "Partitioned runs"). Build them with `GlobalIds.of`
    where the whole graph is at hand.

    Parameters
    ----------
    nodes : torch.Tensor
        (n_r,) int64: local node k is global node nodes[k].
    edges : torch.Tensor
        (E_r,) int64: local directed edge e is the whole compiled graph's edge edges[e].
    reverse : torch.Tensor
        (E_r,) int64: the global id of edge e's reverse (per-edge drop sequences are indexed by sender).
    undirected : torch.Tensor
        (E_r,) int64: edge e's undirected edge, its (or its reverse's) place in the whole compiled.forward.
    n : int
        The whole graph's nodes (wake="one" draws one of them).
    num_edges : int
        The whole graph's directed edges.
    whole : CompiledGraph or None
        The whole graph, needed only for the settings that name node labels (wake or drop dicts, edge_up
        schedules); None where a rank holds only its part (those settings are then a ValueError).
    """

    nodes: torch.Tensor
    edges: torch.Tensor
    reverse: torch.Tensor
    undirected: torch.Tensor
    n: int
    num_edges: int
    whole: "CompiledGraph | None" = None

    @classmethod
    def of(cls, whole: "CompiledGraph", nodes: Any, edges: Any) -> "GlobalIds":
        """The global ids of a part of `whole`: its nodes (n_r,) and its directed edges (E_r,), global ids in
        the part's local order (any int arrays or tensors); reverse and undirected ids read off `whole`."""
        nodes, edges = (torch.as_tensor(a, dtype=torch.int64).cpu() for a in (nodes, edges))
        rev = whole.rev.cpu()
        return cls(nodes, edges, rev[edges], undirected_ids(whole).cpu()[edges], whole.n, whole.num_edges, whole)


class Channel:
    """One run's network: draw() the iteration's events, then the methods call keep_asleep and exchange.

    Every event is a counter-based draw (pdmm.draws: trial i B + b of an event is a function of its
    address, so drawing costs one vectorised pass and reads nothing back from the device). draw()
    makes the node mask `awake` (n, B) and the loss mask (where there is no simpler form), and keeps
    the keys of the rest; the edge masks, by receiving edge (its sender is dst), `sending` (sender
    awake and edge up) and `delivered` (sent, neither lost nor in a bad spell), (E, B), are built
    from those draws when read, or, for one instance of one number per row on the CPU, drawn inside
    the exchange itself (pdmm.masked.exchanged_drawn); `bad` (E, B) is the burst chain's state.
    None stands for an event that holds everywhere. keep_asleep and exchange select by the masks
    (pdmm.masked: numba kernels on the CPU, torch.where elsewhere and under autograd).

    Counts per instance: `messages` delivered and `bits` sent (a lost message is sent, a sleeping
    node or a down edge sends nothing), cumulative, (B,), taken by the exchange once per draw, over the
    channel's own receiving edges. A transmission of `vectors` stacked vectors of `width` numbers each
    (gradient tracking's x and y, docs/decentralised.md section 9) counts as that many messages, each
    quantised with its own range.

    A part of a graph (`ids`, GlobalIds; graph then the part's graph, dst holding global node ids and
    exchange the partitioned v[rev]) draws each of its events by global ids: trial i B + b of the same
    stream and key as one process, i the node's, the edge's or the undirected edge's global id, and the
    dither, rounding and privacy numbers of edge e's entries by its global id too. Every rank's awake rows,
    edge masks, quantised messages and perturbed z are then the rows of one process's for its nodes and edges,
    and the sums over the ranks of `messages` and `bits` (each rank counts its own receiving edges) are one
    process's counts: the engine all-reduces them (sum).
    """

    def __init__(self, network, graph, batch, width, dtype, vectors=1, ids: GlobalIds | None = None):
        self.network, self.graph, self.batch, self.dtype, self.ids = network, graph, batch, dtype, ids
        device, E = graph.src.device, graph.num_edges
        index = torch.int32 if (E if ids is None else ids.num_edges) < 2**31 else torch.int64  # half the traffic
        self.n = graph.n if ids is None else ids.n  # the whole graph's nodes
        # the items the draws are of: the whole graph's counts, or a part's global ids
        self.node_items: int | torch.Tensor = graph.n if ids is None else ids.nodes.to(device, index)
        self.edge_items: int | torch.Tensor = E if ids is None else ids.edges.to(device, index)
        self.listed = network.wake == ONE
        self.wake = self.sender_wake = None  # bounds of the own nodes' trials, and of each edge's sender's
        if not self.listed and isinstance(network.wake, numbers.Real):
            self.wake = self.sender_wake = _bounds(network.wake, batch, device)
        elif not self.listed:
            q = _node_probabilities(network.wake, graph, ids)  # by global node id
            self.wake = _bounds(q if ids is None else q[ids.nodes.cpu().numpy()], batch, device)
            self.sender_wake = self.wake if ids is None else _bounds(q[graph.dst.cpu().numpy()], batch, device)
        drop = network.drop if isinstance(network.drop, numbers.Real) else _edge_probabilities(network.drop, graph, ids)
        self.kept = _bounds(1 - np.asarray(drop, dtype=np.float64), batch, device)
        self.schedule = _schedule(network.edge_up, graph, ids) if network.scheduled else None
        self.up = None if network.scheduled else _bounds(network.edge_up, batch, device)
        self.dst = graph.dst.to(index)
        self.rev = graph.rev.to(index) if ids is None else None  # a part exchanges through graph.exchange
        self.undirected = None
        if self.up is not None:  # each directed edge's undirected one: its place among the forward edges
            self.undirected = (undirected_ids(graph) if ids is None else ids.undirected).to(device, index)
        if network.burst is not None:
            p_gb, p_bg = network.burst
            self.chain = tuple(draws.bound(p) for p in (p_gb / (p_gb + p_bg), 1 - p_bg, p_gb))  # first, stay, enter
        number = torch.finfo(dtype).bits if network.bits is None else network.bits
        header = HEADER_BITS if network.bits is not None and network.limit is None else 0
        self.vectors = vectors
        self.message_bits = vectors * (width * number + header)
        self.messages = torch.zeros(batch, dtype=torch.float64, device=device)
        self.bits = torch.zeros(batch, dtype=torch.float64, device=device)
        self.iteration = self.quantisations = 0
        self.awake = self.bad = self.sent = self._kept = self._masks = self._chosen = self._wake_key = None
        self._edge_draws, self._uncounted, self._dropped = (None, None), False, None

    def _key(self, stream, iteration=None):
        return draws.stream_key(self.network.seed, STREAMS[stream], self.iteration if iteration is None else iteration)

    def _below(self, key, items, bounds):
        """(count, B) bool: the trials of `items` below their bounds (one int, or one per trial): items a count
        (the whole graph's items 0..count-1, pdmm.draws.below) or a tensor of global ids (draws.below_at,
        draws.below_each_at): the same draws for the same item."""
        B, device = self.batch, self.graph.src.device
        if isinstance(items, int):
            return draws.below(key, items * B, bounds, device).view(items, B)
        if torch.is_tensor(bounds):
            return draws.below_each_at(key, items, bounds, B, device).view(-1, B)
        return draws.below_at(key, items, bounds, B, device).view(-1, B)

    def _entries(self, draw, keys, like):
        """draws.fractions_at or draws.normals_at (`draw`) shaped and typed like the edge tensor `like` (E, B, ...):
        entry (e, b, k) is trial (i B + b) w + k, i the edge's global id and w the numbers per row, so a part
        numbers its entries as one process does."""
        E, B, w, device = like.shape[0], like.shape[1], math.prod(like.shape[2:]), like.device
        items = torch.arange(E, device=device) if isinstance(self.edge_items, int) else self.edge_items
        return draw(*keys, items, B, w, like.dtype, device).view(like.shape)

    def draw(self):
        """This iteration's events (module docstring): the node mask `awake`, the per-edge draws of the senders'
        wake and the links' state (`_edge_draws`), kept (not lost, not in a bad spell) as a mask."""
        g, B = self.graph, self.batch
        device, awake, sender, link = g.src.device, None, None, None
        if self.listed:  # wake="one": exactly one node per instance, chosen among all n
            key = self._key("one")
            self._chosen = torch.tensor([draws.index(key, b, self.n) for b in range(B)], device=device)
            nodes = torch.arange(g.n, device=device) if self.ids is None else self.node_items
            awake = nodes.unsqueeze(1) == self._chosen
        elif self.sender_wake is not None:
            key = self._wake_key = self._key("wake")
            awake = None if self.wake is None else self._below(key, self.node_items, self.wake)
            if not torch.is_tensor(self.sender_wake):  # one probability: each edge draws its sender's trial itself
                sender = key, self.dst, self.sender_wake
        elif self.wake is not None:  # a part whose senders all wake
            awake = self._below(self._key("wake"), self.node_items, self.wake)
        if self.up is not None:  # both directions of an edge draw its trial, by its place in compiled.forward
            link = self._key("up"), self.undirected, self.up
        kept, dropped = None, None
        if self.network.burst is not None:  # one draw per link: below the bound of the state it is in
            first, stay, enter = self.chain
            bounds = first if self.bad is None else torch.where(self.bad.view(-1), stay, enter)
            self.bad = self._below(self._key("burst"), self.edge_items, bounds)
            kept = ~self.bad
        if self.kept is not None and kept is None and not torch.is_tensor(self.kept):
            dropped = self._key("drop"), self.kept  # one probability: drawn where it is applied (_edge_masks)
        elif self.kept is not None:
            kept = _both(self._below(self._key("drop"), self.edge_items, self.kept), kept)
        self.awake, self._edge_draws, self._kept, self._dropped = awake, (sender, link), kept, dropped
        self._masks = None
        self._uncounted = True  # the exchange counts what this iteration sends and delivers
        self.iteration += 1

    @property
    def sending(self):
        """(E, B) bool, by receiving edge: sent a message (sender awake, edge up); None when all are."""
        return self._edge_masks()[0]

    @property
    def delivered(self):
        """(E, B) bool, by receiving edge: receives a message (sent, neither lost nor in a bad spell); None
        when all do."""
        return self._edge_masks()[1]

    def _edge_masks(self):
        """(sending, delivered), built from this iteration's draws when first asked for (all None before the
        first draw: the ideal network)."""
        if self._masks is None and self.iteration == 0:
            return None, None
        if self._masks is None:
            B, E = self.batch, self.graph.num_edges
            sender, link = self._edge_draws
            if sender is not None:
                sender = draws.below_at(*sender, B, self.graph.src.device).view(E, B)
            elif self.listed:
                sender = self.dst.unsqueeze(1) == self._chosen
            elif self.ids is None and self.awake is not None:  # every sender is a row of awake
                sender = masked.gathered(self.awake, self.dst)
            elif self.sender_wake is not None:  # a part: the senders' own trials, by their global ids
                sender = self._below(self._wake_key, self.dst, self.sender_wake)
            if self.schedule is not None:
                link = self.schedule[(self.iteration - 1) % len(self.schedule)].unsqueeze(1).expand(E, B)
            elif link is not None:
                link = draws.below_at(*link, B, self.graph.src.device).view(E, B)
            sending = _both(sender, link)
            kept = self._kept
            if self._dropped is not None:
                key, bound = self._dropped
                kept = self._below(key, self.edge_items, bound)
            self._masks = sending, _both(sending, kept)
        return self._masks

    def _count(self, sent, delivered):
        """Add the drawn iteration's messages delivered and bits sent, once (counts per instance, None: all)."""
        if self._uncounted:
            E = self.graph.num_edges
            self.messages += self.vectors * (E if delivered is None else delivered)
            self.bits += self.message_bits * (E if sent is None else sent)
            self._uncounted = False

    def keep_asleep(self, new, old):
        """new where the node is awake, old where it sleeps: node tensors (n, B, ...)."""
        return new if self.awake is None else masked.choose(self.awake, new, old)

    def keep_asleep_edges(self, new, old):
        """new on the edges of awake nodes, old on those of sleeping ones: edge tensors (E, B, ...), by src."""
        return new if self.awake is None else masked.choose(self.awake.index_select(0, self.graph.src), new, old)

    def exchange(self, y, held, reflect=None):
        """What edge i->j receives: Q(y) of its reverse edge where delivered, else what it `held`;
        reflect(y, received), when given, turns the received messages into the new state first."""
        if self.network.privacy is not None:
            self.sent = y  # for the privacy measures
        message = y if self.network.bits is None else self.quantise(y)
        drawn = (  # no mask to read, and the reverses at hand (a part's come through graph.exchange)
            self.rev is not None and self.schedule is None and (self.awake is None or self._edge_draws[0] is not None)
        )
        events = self._edge_draws != (None, None) or self._kept is not None or self._dropped is not None
        if reflect is None and self._masks is None and events and masked.drawn_in_kernel(message, held, drawn):
            out, sending, delivered = masked.exchanged_drawn(
                message, self.rev, held, *self._edge_draws, self._kept, self._dropped
            )
            self._count(sending, delivered)
            return out
        sending, delivered = self._edge_masks()
        sent = None if sending is None else masked.count(sending)
        self._count(sent, sent if delivered is sending else None if delivered is None else masked.count(delivered))
        if reflect is None and delivered is not None and self.rev is not None:
            return masked.exchanged(delivered, message, self.rev, held)
        received = self.graph.exchange(message)
        if reflect is not None:
            received = reflect(y, received)
        return received if delivered is None else masked.choose(delivered, received, held)

    def quantise(self, y):
        """b-bit uniform quantisation of the messages y (E, B, m), as the receiver reconstructs them; an adaptive
        range per sender and stacked vector."""
        net, levels = self.network, 2.0**self.network.bits - 1
        y = y.unflatten(-1, (self.vectors, -1))  # (E, B, vectors, width)
        if net.limit is None:  # the sender's largest magnitude this iteration
            node = self.graph.aggregate_max(y.abs().amax(-1, keepdim=True))
            R = self.graph.gather(node).clamp(min=torch.finfo(y.dtype).tiny)
        else:
            R = torch.as_tensor(net.limit, dtype=y.dtype, device=y.device)
        step = 2 * R / levels
        self.quantisations += 1
        if net.rounding == "subtractive":
            u = (self._fractions("dither", y) - 0.5) * step
            q = torch.round((y + u + R) / step).clamp(0, levels) * step - R - u
        elif net.rounding == "stochastic":
            q = torch.floor((y + R) / step + self._fractions("round", y)).clamp(0, levels) * step - R
        else:
            q = torch.round((y + R) / step).clamp(0, levels) * step - R
        return q.flatten(-2)

    def _fractions(self, stream, y):
        """Uniform numbers in [0, 1), shaped and typed like the edge tensor y (E, B, ...): the draws of `stream`
        keyed by this quantisation's number (1, 2, ... in the run), entry by entry (_entry_trials)."""
        return self._entries(draws.fractions_at, (self._key(stream, self.quantisations),), y)

    def perturb(self, z):
        """z^0 + N(0, privacy^2) per entry (subspace perturbation), the normals drawn per entry of z (E, B, ...)
        by its edge's global id (draws.normals, keyed by the seed alone); z unchanged without privacy."""
        if not self.network.privacy:
            return z
        keys = self._key("privacy", 0), self._key("privacy angle", 0)
        return z + self.network.privacy * self._entries(draws.normals_at, keys, z)


def _bounds(p, batch, device):
    """The draws' bounds of trials with success probability p (a number, or one per item: a (count,) int64
    tensor over the count B trials i B + b); None when every p is 1 (the event always happens)."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim and (p == p[0]).all():
        p = p[0]
    if (p == 1).all():
        return None
    if not p.ndim:
        return draws.bound(p)
    bounds = torch.from_numpy(np.round(p * 2.0**32).astype(np.int64)).to(device)  # as draws.bound
    return bounds.repeat_interleave(batch) if batch > 1 else bounds


def _both(a, b):
    """a & b of two masks, either None for all True."""
    return b if a is None else a if b is None else a & b


def undirected_ids(graph: "CompiledGraph") -> torch.Tensor:
    """(E,) int64: each directed edge's undirected edge, its (or its reverse's) place in graph.forward."""
    places = torch.arange(len(graph.forward), device=graph.src.device)
    undirected = torch.empty(graph.num_edges, dtype=torch.int64, device=graph.src.device)
    undirected[graph.forward] = places
    undirected[graph.rev[graph.forward]] = places
    return undirected


def _labelled(graph, ids, setting):
    """The graph whose node labels `setting` names: the channel's own, or a part's whole graph (GlobalIds.whole)."""
    if ids is None:
        return graph
    if ids.whole is None:
        raise ValueError(
            f"{setting} names node labels, which a part of a graph places only with the whole graph (GlobalIds.whole)"
        )
    return ids.whole


def _node_probabilities(wake, graph, ids=None):
    """(n,) float64: each node's wake probability by (global) node id, from a sequence in node order or a
    {node: q} dict (others 1); graph the whole graph, or a part's with its GlobalIds."""
    if isinstance(wake, dict):
        whole = _labelled(graph, ids, "a wake dict")
        q = np.ones(whole.n)
        index = {v: k for k, v in enumerate(whole.nodes)}
        for node, p in wake.items():
            if node not in index:
                raise ValueError(f"wake names {node!r}, which is not a node of the graph")
            q[index[node]] = p
        return q
    n = graph.n if ids is None else ids.n
    if len(wake) != n:
        raise ValueError(f"wake has {len(wake)} per-node probabilities, but the graph has {n} nodes")
    return np.asarray(wake, dtype=np.float64)


def _edge_probabilities(drop, graph, ids=None):
    """(E,) float64: the loss probability of what each edge of `graph` receives, indexed by the receiving edge e
    (its sender is dst[e], so the transmission is its reverse); from a sequence in the whole graph's compiled
    order (entry e for src[e] -> dst[e]) or a {(i, j): p} dict of node labels (others 0); graph the whole
    graph, or a part's with its GlobalIds."""
    E = graph.num_edges if ids is None else ids.num_edges
    if isinstance(drop, dict):
        sent = np.zeros(E)
        if drop:
            sent[_edge_positions(_labelled(graph, ids, "a drop dict"), list(drop), "drop")] = list(drop.values())
    elif len(drop) != E:
        raise ValueError(
            f"drop has {len(drop)} per-edge probabilities, but the graph has {E} directed edges "
            "(one per direction, in compiled order: entry e for compiled.src[e] -> compiled.dst[e])"
        )
    else:
        sent = np.asarray(drop, dtype=np.float64)
    return sent[(graph.rev if ids is None else ids.reverse).cpu().numpy()]


def _edge_positions(graph, pairs, name):
    """(len(pairs),) the compiled position of each directed edge (i, j) of node labels; a pair that is not an
    edge of the graph is an error."""
    index = {v: k for k, v in enumerate(graph.nodes)}
    for i, j in pairs:
        if i not in index or j not in index:
            raise ValueError(
                f"{name} names ({i!r}, {j!r}), but {i if i not in index else j!r} is not a node of the graph"
            )
    n, src, dst = graph.n, graph.src.cpu().numpy(), graph.dst.cpu().numpy()
    keys = src * n + dst
    order = np.argsort(keys, kind="stable")
    wanted = np.array([index[i] * n + index[j] for i, j in pairs], dtype=np.int64)
    found = order[np.searchsorted(keys, wanted, sorter=order).clip(max=len(keys) - 1)]
    missing = np.flatnonzero(keys[found] != wanted)
    if len(missing):
        i, j = pairs[missing[0]]
        raise ValueError(f"{name} names ({i!r}, {j!r}), which is not an edge of the graph")
    return found


def _schedule(schedule, graph, ids=None):
    """(S, E) bool: entry s marks both directions of its edges of `graph` (the whole graph, or a part's with its
    GlobalIds: the whole graph's masks at the part's edges); an edge not in the graph is an error."""
    if ids is not None:
        whole = _schedule(schedule, _labelled(graph, ids, "an edge_up schedule")).cpu()
        return whole[:, ids.edges.cpu()].to(graph.src.device)
    index = {v: k for k, v in enumerate(graph.nodes)}
    position = {(s, d): e for e, (s, d) in enumerate(zip(graph.src.tolist(), graph.dst.tolist(), strict=False))}
    masks = torch.zeros(len(schedule), graph.num_edges, dtype=torch.bool)
    for s, edges in enumerate(schedule):
        for edge in edges:
            if (
                len(edge) != 2
                or edge[0] not in index
                or edge[1] not in index
                or (index[edge[0]], index[edge[1]]) not in position
            ):
                raise ValueError(f"edge_up schedule entry {s} names {edge!r}, which is not an edge of the graph")
            e = position[(index[edge[0]], index[edge[1]])]
            masks[s, e] = masks[s, int(graph.rev[e])] = True
    return masks.to(graph.src.device)


def private_point(local, like):
    """argmin f_i per node, shaped like x (n, B, d): the private value the privacy measures compare with
    (a_i for averaging)."""
    zero = torch.zeros_like(like)
    try:
        return local.prox(zero.new_zeros(len(zero), 1))(zero)
    except ValueError as err:
        raise ValueError(f"the privacy measures compare x_i with argmin f_i, which is not unique here: {err}") from None


def privacy_gaps(x, sent, private, edges, rho):
    """(x gap, message gap), each (B,): RMS_i ||x_i - p_i|| and RMS_{i->j} ||x~_{i|j} - p_i|| over RMS_i ||p_i||,
    p = private_point, x~_{i|j} the x_i that message y_{i|j} carries if z_{i|j} were 0 (what an
    eavesdropper who assumes no perturbation reads off it)."""
    return gaps_of_sums(*privacy_sums(x, sent, private, edges, rho), len(x), len(sent))


def privacy_sums(
    x: torch.Tensor, sent: torch.Tensor, private: torch.Tensor, edges: Any, rho: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sums of squares behind privacy_gaps over the nodes and edges given (x, private: (n, B, d); sent, the
    messages y: (E, B, m); a rank's part: sum them over the ranks, docs/guide/distributed.md, "What runs on the
    engine"): (sum_i ||x_i - p_i||^2, sum_{i->j} ||x~_{i|j} - p_i||^2, sum_i ||p_i||^2), each (B,)."""
    carried = edges.carried(sent, rho)
    return _squares(x - private), _squares(carried - edges.graph.gather(private)), _squares(private)


def gaps_of_sums(
    x_sum: torch.Tensor, message_sum: torch.Tensor, private_sum: torch.Tensor, nodes: int, edges: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """privacy_gaps from privacy_sums over `nodes` nodes and `edges` directed edges, (x gap, message gap), each (B,)
    (docs/guide/network.md, "Privacy")."""
    scale = torch.sqrt(private_sum / nodes).clamp(min=torch.finfo(private_sum.dtype).tiny)
    return torch.sqrt(x_sum / nodes) / scale, torch.sqrt(message_sum / edges) / scale


def _squares(v):
    return (v * v).sum(-1).sum(0)
