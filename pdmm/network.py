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
Randomness comes from one torch.Generator on the state's device, seeded by `seed`. Rare events (a
probability of at most SPARSE) are drawn by their positions (`_Trials`: geometric gaps, exact to
2^-31 per trial like a draw per trial), and the methods overwrite only the rows they touch
(`Channel`), so an effect costs in proportion to its events rather than to the E B edges.
"""
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch


ROUNDINGS = {False: "nearest", True: "subtractive", "nearest": "nearest", "subtractive": "subtractive",
             "stochastic": "stochastic"}
HEADER_BITS = 64  # an adaptive range travels with the message as one float64
ONE = "one"  # wake="one": one node, uniform, awake per iteration
SPARSE = 0.25  # trials whose success probabilities are all at most this draw the positions of the successes
WHERE = 0.15  # a fix-up of more than this fraction of the rows goes through torch.where over its mask
SPARE = 6  # standard deviations of the successes drawn beyond those expected (more are drawn when short)


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

    def relabelled(self, order, edge_of):
        """The same network for a renumbered graph (pdmm.Problem.relabelled): per-node and per-edge sequences
        reordered to the new nodes (order) and directed edges (edge_of). Dicts and schedules name node labels,
        which the renumbered graph keeps; a sequence of the wrong length is left for the run to report."""
        changes = {}
        if isinstance(self.wake, tuple) and len(self.wake) == len(order):
            changes["wake"] = tuple(np.asarray(self.wake)[order].tolist())
        if isinstance(self.drop, tuple) and len(self.drop) == len(edge_of):
            changes["drop"] = tuple(np.asarray(self.drop)[edge_of].tolist())
        return replace(self, **changes) if changes else self


class Channel:
    """One run's network: draw() the iteration's events, then the methods call keep_asleep and exchange.

    The events are kept as rows of the flattened node (n B) and edge (E B) tensors, row i B + b for
    node or edge i of instance b, edges by the receiving edge (its sender is dst): the rows where
    the usual case fails, the sleeping nodes, the edges that are sent nothing (sender asleep or edge
    down: `silent`) and those that receive nothing (silent or lost). With wake="one", where being
    awake is the exception, they list the other side instead (`listed`): the awake node and the
    edges sent to and delivered to. An edge row may repeat (down and dropped both). keep_asleep and
    exchange copy the old values into the new ones (or the new into the old) at those rows only,
    O(rows) rather than O(E B); the masks `awake` (n, B), `sending`, `delivered` and `bad` (E, B)
    are built when read. The row sets' sizes are read back from the device each iteration (a sync).

    Counts per instance: `messages` delivered and `bits` sent (a lost message is sent, a sleeping
    node or a down edge sends nothing), cumulative, (B,).
    """

    def __init__(self, network, graph, batch, width, dtype):
        self.network, self.graph, self.batch, self.dtype = network, graph, batch, dtype
        device, E = graph.src.device, graph.num_edges
        self.generator = torch.Generator(device=device).manual_seed(network.seed)
        self.listed = network.wake == ONE
        wake = network.wake if self.listed or isinstance(network.wake, numbers.Real) else \
            _node_probabilities(network.wake, graph)
        self.sleep = None if self.listed else _Trials.of(1 - np.asarray(wake, dtype=np.float64), graph.n, batch, device)
        drop = network.drop if isinstance(network.drop, numbers.Real) else _edge_probabilities(network.drop, graph)
        self.drop = _Trials.of(drop, E, batch, device)
        self.schedule = None if not network.scheduled else [
            _rows(torch.nonzero(~up).squeeze(1), batch) for up in _schedule(network.edge_up, graph)]
        self.down = None if network.scheduled else _Trials.of(1 - network.edge_up, len(graph.forward), batch, device)
        self.pair_edges = graph.forward, graph.rev[graph.forward]  # the two directed edges of each undirected one
        if network.burst is not None:
            p_gb, p_bg = network.burst
            self.first_bad, self.enter = (_Trials.of(p, E, batch, device) for p in (p_gb / (p_gb + p_bg), p_gb))
            self.stay, self.bad_now = _bound(1 - p_bg), torch.zeros(E * batch, dtype=torch.bool, device=device)
        self.first_edge = torch.cumsum(graph.degree, 0) - graph.degree  # node i's edges are first_edge[i] + 0, 1, ...
        self.seen = torch.zeros(E * batch, dtype=torch.bool, device=device)  # scratch of _marked, all False between
        number = torch.finfo(dtype).bits if network.bits is None else network.bits
        header = HEADER_BITS if network.bits is not None and network.limit is None else 0
        self.message_bits = width * number + header
        self.messages = torch.zeros(batch, dtype=torch.float64, device=device)
        self.bits = torch.zeros(batch, dtype=torch.float64, device=device)
        self.iteration = 0
        self.node_rows = self.sending_rows = self.delivered_rows = self.own_rows = self.bad_rows = self.sent = None

    def _uniform(self, *shape):
        return torch.rand(shape, generator=self.generator, dtype=self.dtype, device=self.graph.src.device)

    def draw(self):
        """This iteration's events (module docstring), as rows (class docstring); None where everything happens."""
        g, B, E = self.graph, self.batch, self.graph.num_edges
        down = self._down()
        bad = None if self.network.burst is None else self._chain()
        dropped = None if self.drop is None else self.drop.draw(self.generator)
        if self.listed:  # wake="one": exactly one node per instance
            device = g.src.device
            awake = self._join(torch.randint(g.n, (B,), generator=self.generator, device=device),
                               torch.arange(B, device=device))
            sending = self._minus(self._edges(awake, g.rev), [down])
            delivered = self._minus(sending, [bad, dropped])
            self.node_rows, self.sending_rows, self.delivered_rows = awake, sending, delivered
            self.messages += self._count(delivered)
            self.bits += self.message_bits * self._count(sending)
        else:
            asleep = None if self.sleep is None else self.sleep.draw(self.generator)
            unheard = None if asleep is None else self._edges(asleep, g.rev)  # the edges sleeping nodes send to
            silent = [rows for rows in (unheard, down) if rows is not None]
            lost = silent + [rows for rows in (bad, dropped) if rows is not None]
            self.node_rows, self.sending_rows, self.delivered_rows = asleep, _cat(silent), _cat(lost)
            self.messages += E - self._distinct(lost)
            self.bits += self.message_bits * (E - self._distinct(silent))
        self.own_rows = None  # the rows of node_rows' own edges, found when keep_asleep_edges first asks
        self.iteration += 1

    def _down(self):
        """The rows of the edges down this iteration, both directions of each; None if every edge is up."""
        if self.schedule is not None:
            return self.schedule[self.iteration % len(self.schedule)]
        if self.down is None:
            return None
        k, b = self._split(self.down.draw(self.generator))  # undirected edge k of instance b
        return torch.cat([self._join(ends.index_select(0, k), b) for ends in self.pair_edges])

    def _chain(self):
        """The rows of the links in the bad state this iteration (also marked in bad_now): stationary at the
        first draw, then one step of the chain."""
        if self.bad_rows is None:
            rows = self.first_bad.draw(self.generator)
            self.bad_now.index_fill_(0, rows, True)
        else:
            stay = _bits(self.generator, len(self.bad_rows)) <= self.stay
            enter = self.enter.draw(self.generator)
            enter = enter[~self.bad_now.index_select(0, enter)]  # the enter draws of bad links go unused
            self.bad_now.index_put_((self.bad_rows,), stay)
            self.bad_now.index_fill_(0, enter, True)
            rows = torch.cat([self.bad_rows[stay], enter])
        self.bad_rows = rows
        return rows

    def _edges(self, nodes, to=None):
        """The rows (e B + b) of the edges e of node rows (i B + b), src[e] = i, node by node; to = graph.rev: of
        the edges that i sends to instead (dst[e] = i)."""
        node, b = self._split(nodes)
        degree, first = self.graph.degree.index_select(0, node), self.first_edge.index_select(0, node)
        ends = torch.cumsum(degree, 0)
        if not len(nodes) or not int(ends[-1]):  # (read back from the device)
            return nodes.new_empty(0)
        # first, first + 1, ... node by node: a running sum of ones, with a jump from one node's last edge to the
        # next node's first
        jump = first.clone()
        jump[1:] -= first[:-1] + degree[:-1] - 1
        edge = torch.ones(int(ends[-1]), dtype=torch.int64, device=nodes.device).index_copy_(0, ends - degree, jump)
        edge = edge.cumsum_(0) if to is None else to.index_select(0, edge.cumsum_(0))
        return self._join(edge, b if self.batch == 1 else torch.repeat_interleave(b, degree))

    def _split(self, rows):
        """(i, b) of rows i B + b (b = 0, a number, with one instance)."""
        if self.batch == 1:
            return rows, 0
        i = torch.div(rows, self.batch, rounding_mode="floor")
        return i, rows - i * self.batch

    def _join(self, i, b):
        """The rows i B + b."""
        return i if self.batch == 1 else i * self.batch + b

    def _minus(self, rows, parts):
        """rows less those in any of parts (row sets, or None)."""
        parts = [part for part in parts if part is not None]
        if parts:
            rows = rows[~self._marked(parts).index_select(0, rows)]
            self.seen.zero_()
        return rows

    def _distinct(self, parts):
        """(B,) how many distinct rows the row sets `parts` hold per instance: each part's rows not in those before."""
        if len(parts) < 2:
            return self._count(parts[0]) if parts else 0
        count = self._count(parts[0])
        for before, part in zip(parts, parts[1:]):
            count = count + self._count(part, ~self._marked([before]).index_select(0, part))
        self.seen.zero_()
        return count

    def _marked(self, parts):
        """The scratch mask `seen` (E B,), True at the rows of parts (the caller clears it)."""
        for part in parts:
            self.seen.index_fill_(0, part, True)
        return self.seen

    def _count(self, rows, keep=None):
        """(B,) how many of the rows (i B + b), or of those where keep, each instance has."""
        B = self.batch
        if B == 1:
            return len(rows) if keep is None else keep.sum()
        return torch.bincount(rows % B, None if keep is None else keep.double(), minlength=B)

    def _mask(self, rows, count):
        """(count, B) bool, True where the event happens, from its rows (None: everywhere)."""
        if rows is None:
            return None
        mask = torch.full((count * self.batch,), not self.listed, dtype=torch.bool, device=rows.device)
        return mask.index_fill_(0, rows, self.listed).view(count, self.batch)

    @property
    def awake(self):
        """(n, B) bool: the nodes awake this iteration; None when all are."""
        return self._mask(self.node_rows, self.graph.n)

    @property
    def sending(self):
        """(E, B) bool, by receiving edge: the edges sent a message (sender awake, edge up); None when all are."""
        return self._mask(self.sending_rows, self.graph.num_edges)

    @property
    def delivered(self):
        """(E, B) bool, by receiving edge: the edges that receive a message; None when all do."""
        return self._mask(self.delivered_rows, self.graph.num_edges)

    @property
    def bad(self):
        """(E, B) bool, by receiving edge: the links in the bad state of the burst chain; None without burst."""
        return None if self.bad_rows is None else self.bad_now.view(-1, self.batch).clone()

    def keep_asleep(self, new, old):
        """new where the node is awake, old where it sleeps: node tensors (n, B, ...)."""
        return self._patch(new, old, self.node_rows)

    def keep_asleep_edges(self, new, old):
        """new on the edges of awake nodes, old on those of sleeping ones: edge tensors (E, B, ...), by src."""
        if self.node_rows is not None and self.own_rows is None:
            self.own_rows = self._edges(self.node_rows)
        return self._patch(new, old, self.own_rows)

    def exchange(self, y, held, reflect=None):
        """What edge i->j receives: Q(y) of its reverse edge where delivered, else what it `held`;
        reflect(y, received), when given, turns the received messages into the new state first."""
        if self.network.privacy is not None:
            self.sent = y  # for the privacy measures
        received = self.graph.exchange(y if self.network.bits is None else self.quantise(y))
        if reflect is not None:
            received = reflect(y, received)
        return self._patch(received, held, self.delivered_rows, fresh=True)

    def _patch(self, new, old, rows, fresh=False):
        """new with old's values at the rows of the flattened (N B, ...) tensors, or, listed, old with new's:
        torch.where(mask, new, old) for the event's mask, in O(rows) (or by torch.where where the rows are more
        than a fraction WHERE, as scattered writes cost more per row). fresh: new may be overwritten."""
        if rows is None:
            return new
        if len(rows) > WHERE * len(new) * self.batch:
            mask = self._mask(rows, len(new))
            return torch.where(mask.view(*mask.shape, *[1] * (new.dim() - 2)), new, old)
        into, source = (old, new) if self.listed else (new, old)
        if math.prod(into.shape[2:]) == 1:  # one number per row: scatter, 3x faster than index_copy in 1-D
            flat = into.reshape(-1)
            values = source.reshape(-1).index_select(0, rows)
            return (flat.scatter_ if fresh and not self.listed else flat.scatter)(0, rows, values).view(into.shape)
        flat = into.reshape(-1, *into.shape[2:])
        values = source.reshape(flat.shape).index_select(0, rows)
        return (flat.index_copy_ if fresh and not self.listed else flat.index_copy)(0, rows, values).view(into.shape)

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
    """The threshold of a 31-bit draw: 31 random bits are <= round(p 2^31) - 1 with probability p (to 2^-31);
    the bound fits in int32 also at p = 1."""
    return round(p * 2 ** 31) - 1


def _bits(generator, count):
    """count random 31-bit integers, int32 in [0, 2^31 - 1], on the generator's device."""
    return torch.empty(count, dtype=torch.int32, device=generator.device).random_(generator=generator)


def _cat(parts):
    """The row sets `parts` as one (rows may repeat), or None for none."""
    return None if not parts else parts[0] if len(parts) == 1 else torch.cat(parts)


def _rows(index, batch):
    """The rows i B + b, b = 0..B-1, of each i in index (k,): (k B,)."""
    return (index.unsqueeze(1) * batch + torch.arange(batch, device=index.device)).reshape(-1)


class _Trials:
    """count B independent Bernoulli trials per draw, trial k B + b a success with probability p_k (one p for
    all k, or one per k); draw() returns the sorted positions of the successes.

    Rare successes (every p_k <= SPARSE) are drawn by position, at a cost proportional to their number:
    the gaps between the successes of trials of one probability p are independent geometric variables,
    floor(log(U) / log(1 - p)) + 1 for U uniform on [0, 1) (53 bits); with one p_k per trial, those
    drawn at p = max p_k are kept with probability p_k / p (thinning). Otherwise each trial draws 31
    random bits, a success when they are <= _bound(p_k). Every trial is exact to 2^-31.
    """

    def __init__(self, p, count, batch, device):
        self.count, self.p = count * batch, float(np.max(p))
        self.sparse = self.p <= SPARSE
        if np.ndim(p) == 0:
            self.bounds = None if self.sparse else _bound(self.p)  # the 31-bit test's bound: of p, or of p_k / p
        else:
            bounds = np.round(np.repeat(p / self.p if self.sparse else p, batch) * 2.0 ** 31) - 1  # as _bound
            self.bounds = torch.from_numpy(bounds.astype(np.int32)).to(device)

    @classmethod
    def of(cls, p, count, batch, device):
        """Trials with probability p (a number, or count of them; all equal: one number); None if every p is 0."""
        p = np.asarray(p, dtype=np.float64)
        if p.ndim and (p == p[0]).all():
            p = p[0]
        return None if not p.any() else cls(p, count, batch, device)

    def draw(self, generator):
        if not self.sparse:
            return torch.nonzero(_bits(generator, self.count) <= self.bounds).squeeze(1)
        positions = self._geometric(generator)
        if self.bounds is None:
            return positions
        return positions[_bits(generator, len(positions)) <= self.bounds.index_select(0, positions)]

    def _geometric(self, generator):
        """The sorted positions < count of the successes of trials of probability p each (0 < p < 1): SPARE
        standard deviations more gaps than the successes expected, and more while they fall short."""
        log_q, parts, last = math.log1p(-self.p), [], -1
        while last < self.count:
            expected = (self.count - 1 - last) * self.p
            u = torch.rand(math.ceil(expected + SPARE * math.sqrt(expected)) + 10, dtype=torch.float64,
                           generator=generator, device=generator.device)
            gaps = u.log_().div_(log_q).clamp_(max=self.count).long().add_(1)  # U = 0 (p 2^-53): past the end
            parts.append(gaps.cumsum_(0).add_(last))
            last = int(parts[-1][-1])  # read back from the device
        positions = torch.cat(parts) if len(parts) > 1 else parts[0]
        return positions[:int(torch.searchsorted(positions, self.count))]


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
