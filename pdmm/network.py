"""Simulated networks: lost messages, sleeping nodes, changing edges, quantised messages, private starts.

`Network` describes the effects; `Channel` applies them to one run at the `exchange` seam of
pdmm.methods (MATH.md 2). At iteration k = 1, 2, ..., independently per instance b:

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
Randomness comes from one torch.Generator on the state's device, seeded by `seed`.
"""
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from .compiled import select

ROUNDINGS = {False: "nearest", True: "subtractive", "nearest": "nearest", "subtractive": "subtractive",
             "stochastic": "stochastic"}
HEADER_BITS = 64  # an adaptive range travels with the message as one float64
ONE = "one"  # wake="one": one node, uniform, awake per iteration


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
        raise ValueError(f"{name} per {per} must be a non-empty 1-D sequence of probabilities, got "
                         f"{'shape ' + str(array.shape) if array.dtype.kind in 'iuf' else repr(values)}")
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
    """What the network does to PDMM's messages (module docstring); every effect is off by default.

    drop: probability that a directed transmission is lost: one for all, or one per directed edge,
    either a sequence in compiled edge order (entry e for src[e] -> dst[e] of problem.compiled) or
    a dict {(i, j): p} of node labels for the transmission i -> j (unnamed ones: 0). burst: None,
    or (p_gb, p_bg), the Gilbert-Elliott chain of every directed link (module docstring): a link
    in the bad state loses everything, one in the good state loses with probability drop;
    stationary P(bad) = p_gb / (p_gb + p_bg), loss rate P(bad) + (1 - P(bad)) drop, mean bad spell
    1 / p_bg iterations; both in (0, 1], as a chain with a 0 never leaves one state. wake:
    probability that a node is awake in an iteration: one for all, one per node (a sequence in
    node order, or a dict {node: q}, unnamed nodes 1), or "one": exactly one node, chosen
    uniformly, per iteration and instance. bits: None (exact numbers) or b >= 1 bits per
    number. dither: False (nearest rounding), True or "subtractive", or "stochastic". limit: the
    quantiser's range R, or None to adapt it. edge_up: probability that an edge is up in an
    iteration, or a schedule: a sequence of edge collections, iteration k using entry k mod its
    length. privacy: the standard deviation of the initial z (subspace perturbation; 0 records
    the privacy measures without it), or None. seed: of every random draw.

    Per-edge and per-node sequences are stored as tuples of floats, dicts as copies; their length
    and labels are checked against the graph when a run starts (a ValueError names the culprit).
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
                raise ValueError(f"wake must be a probability in [0, 1], per-node probabilities or {ONE!r}, "
                                 f"got {self.wake!r}")
        elif isinstance(self.wake, Iterable):
            object.__setattr__(self, "wake", _probabilities("wake", self.wake, "node"))
        else:
            _probability("wake", self.wake)
        if self.burst is not None:
            burst = tuple(self.burst) if isinstance(self.burst, Iterable) and not isinstance(self.burst, str) else ()
            if len(burst) != 2:
                raise ValueError(f"burst must be None or a pair (p_gb, p_bg) of probabilities in (0, 1], got "
                                 f"{self.burst!r}")
            burst = tuple(_probability(f"burst {name}", p) for name, p in zip(("p_gb", "p_bg"), burst))
            if burst[0] == 0:
                raise ValueError("burst p_gb must be > 0: with p_gb = 0 no link ever enters the bad state "
                                 "(leave burst=None for no bursts)")
            if burst[1] == 0:
                raise ValueError("burst p_bg must be > 0: with p_bg = 0 a link in the bad state never recovers")
            object.__setattr__(self, "burst", burst)
        if self.bits is not None and not (isinstance(self.bits, numbers.Integral) and not isinstance(self.bits, bool)
                                          and 1 <= self.bits <= 52):
            raise ValueError(f"bits must be None or an integer from 1 to 52, got {self.bits!r}")
        if not (isinstance(self.dither, (bool, str)) and self.dither in ROUNDINGS):
            raise ValueError(f"dither must be False, True, 'subtractive' or 'stochastic', got {self.dither!r}")
        if self.bits is None and (self.rounding != "nearest" or self.limit is not None):
            raise ValueError("dither and limit shape the quantiser; they need bits")
        if self.limit is not None and not (isinstance(self.limit, numbers.Real) and math.isfinite(self.limit)
                                           and self.limit > 0):
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
        if self.privacy is not None and not (isinstance(self.privacy, numbers.Real) and math.isfinite(self.privacy)
                                             and self.privacy >= 0):
            raise ValueError(f"privacy must be None or a finite standard deviation >= 0, got {self.privacy!r}")
        if not (isinstance(self.seed, numbers.Integral) and not isinstance(self.seed, bool)):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    @property
    def rounding(self):
        """"nearest", "subtractive" or "stochastic"."""
        return ROUNDINGS[self.dither]

    @property
    def scheduled(self):
        return isinstance(self.edge_up, tuple)


class Channel:
    """One run's network: draw() the iteration's events, then the methods call keep_asleep and exchange.

    Counts per instance: `messages` delivered and `bits` sent (a lost message is sent, a sleeping
    node or a down edge sends nothing), cumulative, (B,). `bad` (E, B): the links in the bad
    state of the burst chain this iteration, by receiving edge (None without burst).
    """

    def __init__(self, network, graph, batch, width, dtype):
        self.network, self.graph, self.dtype = network, graph, dtype
        device = graph.src.device
        self.generator = torch.Generator(device=device).manual_seed(network.seed)
        self.schedule = _schedule(network.edge_up, graph) if network.scheduled else None
        random_edges = not network.scheduled and network.edge_up < 1
        self.pair = _pairs(graph) if random_edges else None  # the undirected edge of each directed edge
        # _bernoulli's thresholds: None (no draw), an int (one probability) or an int32 tensor per node /
        # receiving edge; wake="one" stays the string
        self.wake = network.wake if network.wake == ONE else _threshold(
            network.wake, 1, lambda: _node_probabilities(network.wake, graph), device)
        self.drop = _threshold(network.drop, 0, lambda: _edge_probabilities(network.drop, graph), device)
        if network.burst is not None:
            p_gb, p_bg = network.burst
            self.enter, self.stay, self.start = _bound(p_gb), _bound(1 - p_bg), _bound(p_gb / (p_gb + p_bg))
        number = torch.finfo(dtype).bits if network.bits is None else network.bits
        header = HEADER_BITS if network.bits is not None and network.limit is None else 0
        self.message_bits = width * number + header
        self.messages = torch.zeros(batch, dtype=torch.float64, device=device)
        self.bits = torch.zeros(batch, dtype=torch.float64, device=device)
        self.batch, self.iteration = batch, 0
        self.awake = self.sending = self.delivered = self.sent = self.bad = None

    def _uniform(self, *shape):
        return torch.rand(shape, generator=self.generator, dtype=self.dtype, device=self.graph.src.device)

    def _bits(self, *shape):
        """31 random bits per entry, int32 in [0, 2^31 - 1]."""
        return torch.empty(shape, dtype=torch.int32, device=self.graph.src.device).random_(generator=self.generator)

    def _bernoulli(self, bound, *shape):
        """True with probability p (to 2^-31) where bound = _bound(p), an int or a tensor that broadcasts to
        shape: from 31 random bits per entry, 3x cheaper than a float draw."""
        return self._bits(*shape) <= bound

    def draw(self):
        """This iteration's awake nodes (n, B), sending edges and delivered edges (E, B), indexed by the
        receiving edge j->i (its sender is i = dst); None where everything happens."""
        g, B = self.graph, self.batch
        if isinstance(self.wake, str):  # "one": exactly one node per instance
            chosen = torch.randint(g.n, (B,), generator=self.generator, device=g.src.device)
            self.awake = torch.arange(g.n, device=g.src.device).unsqueeze(1) == chosen
        else:
            self.awake = None if self.wake is None else self._bernoulli(self.wake, g.n, B)
        sending = None if self.awake is None else select(self.awake, g.dst)
        if self.schedule is not None:
            up = self.schedule[self.iteration % len(self.schedule)].unsqueeze(1).expand(-1, B)
            sending = up if sending is None else sending & up
        elif self.pair is not None:
            up = select(self._bernoulli(_bound(self.network.edge_up), len(g.forward), B), self.pair)
            sending = up if sending is None else sending & up
        delivered = sending
        if self.network.burst is not None:
            self.bad = self._chain()
            delivered = ~self.bad if delivered is None else delivered & ~self.bad
        if self.drop is not None:
            kept = ~self._bernoulli(self.drop, g.num_edges, B)
            delivered = kept if delivered is None else delivered & kept
        self.sending, self.delivered = sending, delivered
        E = g.num_edges
        self.messages += E if delivered is None else torch.count_nonzero(delivered, 0)
        self.bits += self.message_bits * (E if sending is None else torch.count_nonzero(sending, 0))
        self.iteration += 1

    def _chain(self):
        """The links' Gilbert-Elliott states this iteration (E, B): stationary at the first draw, then one step."""
        shape = self.graph.num_edges, self.batch
        if self.bad is None:
            return self._bernoulli(self.start, *shape)
        bits = self._bits(*shape)
        return torch.where(self.bad, bits <= self.stay, bits <= self.enter)

    def keep_asleep(self, new, old):
        """new where the node is awake, old where it sleeps: node tensors (n, B, ...)."""
        return new if self.awake is None else torch.where(_expand(self.awake, new), new, old)

    def keep_asleep_edges(self, new, old):
        """new on the edges of awake nodes, old on those of sleeping ones: edge tensors (E, B, ...), by src."""
        if self.awake is None:
            return new
        return torch.where(_expand(select(self.awake, self.graph.src), new), new, old)

    def exchange(self, y, held, reflect=None):
        """What edge i->j receives: Q(y) of its reverse edge where delivered, else what it `held`;
        reflect(y, received), when given, turns the received messages into the new state first."""
        if self.network.privacy is not None:
            self.sent = y  # for the privacy measures
        received = self.graph.exchange(y if self.network.bits is None else self.quantise(y))
        if reflect is not None:
            received = reflect(y, received)
        return received if self.delivered is None else torch.where(_expand(self.delivered, y), received, held)

    def quantise(self, y):
        """b-bit uniform quantisation of the messages y (E, B, m), as the receiver reconstructs them."""
        net, levels = self.network, 2.0 ** self.network.bits - 1
        if net.limit is None:  # the sender's largest magnitude this iteration
            node = self.graph.aggregate_max(y.abs().amax(-1, keepdim=True))
            R = self.graph.gather(node).clamp(min=torch.finfo(y.dtype).tiny)
        else:
            R = torch.as_tensor(net.limit, dtype=y.dtype, device=y.device)
        step = 2 * R / levels
        if net.rounding == "subtractive":
            u = (self._uniform(*y.shape) - 0.5) * step
            return torch.round((y + u + R) / step).clamp(0, levels) * step - R - u
        if net.rounding == "stochastic":
            return torch.floor((y + R) / step + self._uniform(*y.shape)).clamp(0, levels) * step - R
        return torch.round((y + R) / step).clamp(0, levels) * step - R

    def perturb(self, z):
        """z^0 + N(0, privacy^2) per entry (subspace perturbation); z unchanged without privacy."""
        if not self.network.privacy:
            return z
        return z + self.network.privacy * torch.randn(z.shape, generator=self.generator, dtype=z.dtype,
                                                      device=z.device)


def _bound(p):
    """The threshold of _bernoulli: 31 random bits are <= round(p 2^31) - 1 with probability p (to 2^-31);
    the bound fits in int32 also at p = 1."""
    return round(p * 2 ** 31) - 1


def _threshold(p, ideal, probabilities, device):
    """_bernoulli's threshold for one probability p (an int) or per node / edge (an int32 tensor (k, 1), from
    probabilities() on the CPU, in float64 also where the device has none); None where every p is `ideal`."""
    if isinstance(p, numbers.Real):
        return None if p == ideal else _bound(p)
    p = probabilities()
    if (p == ideal).all():
        return None
    bounds = np.round(p * 2.0 ** 31) - 1  # as _bound: round half to even
    return torch.from_numpy(bounds.astype(np.int32)).unsqueeze(1).to(device)


def _node_probabilities(wake, graph):
    """(n,) float64: each node's wake probability, from a sequence in node order or a {node: q} dict (others 1)."""
    if isinstance(wake, dict):
        q = np.ones(graph.n)
        index = {v: k for k, v in enumerate(graph.nodes)}
        for node, p in wake.items():
            if node not in index:
                raise ValueError(f"wake names {node!r}, which is not a node of the graph")
            q[index[node]] = p
        return q
    if len(wake) != graph.n:
        raise ValueError(f"wake has {len(wake)} per-node probabilities, but the graph has {graph.n} nodes")
    return np.asarray(wake, dtype=np.float64)


def _edge_probabilities(drop, graph):
    """(E,) float64: the loss probability of what each edge receives, indexed by the receiving edge e (its
    sender is dst[e], so the transmission is rev[e]); from a sequence in compiled order (entry e for
    src[e] -> dst[e]) or a {(i, j): p} dict of node labels (others 0)."""
    E = graph.num_edges
    if isinstance(drop, dict):
        sent = np.zeros(E)
        if drop:
            sent[_edge_positions(graph, list(drop), "drop")] = list(drop.values())
    elif len(drop) != E:
        raise ValueError(f"drop has {len(drop)} per-edge probabilities, but the graph has {E} directed edges "
                         "(one per direction, in compiled order: entry e for compiled.src[e] -> compiled.dst[e])")
    else:
        sent = np.asarray(drop, dtype=np.float64)
    return sent[graph.rev.cpu().numpy()]


def _edge_positions(graph, pairs, name):
    """(len(pairs),) the compiled position of each directed edge (i, j) of node labels; a pair that is not an
    edge of the graph is an error."""
    index = {v: k for k, v in enumerate(graph.nodes)}
    for i, j in pairs:
        if i not in index or j not in index:
            raise ValueError(f"{name} names ({i!r}, {j!r}), but {i if i not in index else j!r} is not a node "
                             "of the graph")
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


def _expand(mask, like):
    return mask.reshape(*mask.shape, *[1] * (like.dim() - mask.dim()))


def _pairs(graph):
    """(E,) the undirected edge (position in graph.forward) of every directed edge."""
    pair = torch.empty(graph.num_edges, dtype=torch.int64, device=graph.src.device)
    ids = torch.arange(len(graph.forward), device=graph.src.device)
    pair[graph.forward] = ids
    pair[graph.rev[graph.forward]] = ids
    return pair


def _schedule(schedule, graph):
    """(S, E) bool: entry s marks both directions of its edges; an edge not in the graph is an error."""
    index = {v: k for k, v in enumerate(graph.nodes)}
    position = {(s, d): e for e, (s, d) in enumerate(zip(graph.src.tolist(), graph.dst.tolist()))}
    masks = torch.zeros(len(schedule), graph.num_edges, dtype=torch.bool)
    for s, edges in enumerate(schedule):
        for edge in edges:
            if len(edge) != 2 or edge[0] not in index or edge[1] not in index \
                    or (index[edge[0]], index[edge[1]]) not in position:
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
    scale = _rms(private).clamp(min=torch.finfo(x.dtype).tiny)
    carried = edges.carried(sent, rho)
    return _rms(x - private) / scale, _rms(carried - edges.graph.gather(private)) / scale


def _rms(v):
    return torch.sqrt((v * v).sum(-1).mean(0))
