"""Decentralised gradient methods on a mixing matrix: DGD, EXTRA / PG-EXTRA, NIDS and gradient tracking
(docs/decentralised.md).

They solve consensus problems, minimise sum_i f_i(x), with W a mixing matrix of the graph
(pdmm.mixing: a kind, default "metropolis", or the user's own, checked). A step updates every
node at once on x (n, B, d); neighbours enter only through products with W, one sparse product
per round (pdmm.mixing.MixingProduct), in which each node sends one vector of d numbers to each
neighbour (two, stacked, for gradient tracking). The step size alpha is a number (or one per instance), or "auto", a
rule in L = max_i L_i (per instance, from LocalFunction.smoothness of the smooth part) and
lambda_min(W): half of the method's step bound (docs/decentralised.md section 6). W's spectrum is
computed once per run (pdmm.spectral_interval) and refused unless -1 < lambda_min(W) and
lambda_2(W) < 1 (section 1).

No penalty parameter (their Capabilities, pdmm.protocol); pdmm.plan refuses rho, network privacy and wake="one" for
them (pdmm.methods.check_mixing_options), and accepts x0. On a rank's part of the graph (backend="distributed",
pdmm.halo.PartGraph) W is the whole graph's, multiplied by the rank's rows, its spectrum computed by rank 0 (or,
where the rank holds only its part, the one given with it: pdmm.parts.PartProblem.spectra) and max_i L_i taken over
every rank (docs/guide/distributed.md, "What runs on the engine", "Each rank holds its part"). Over a simulated network
(`channel`, a pdmm.network.Channel) every product with W becomes one with the round's W^k
(section 9): a node's lost message is replaced by the receiver's own value, quantised messages are
what the neighbours use, and a sleeping node sends nothing and keeps its whole state.
Capabilities.vectors_sent: vectors of d numbers per directed edge and round; silent_rounds: the first
rounds, which send nothing (NIDS's first step is local); pdmm.solve counts messages and bits by them.
"""

import math
import numbers
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from .constraints import Consensus
from .edge_index import CompiledGraph
from .halo import PartGraph, largest
from .local import LocalFunction
from .mixing import as_mixing, mixing_product, run_interval
from .network import ONE, Channel, Network
from .protocol import STEP, Capabilities

if TYPE_CHECKING:
    import scipy.sparse

SPECTRUM_MARGIN = 1e-9  # lambda_min(W) must exceed -1 + this, lambda_2(W) stay below 1 - this
STEPS = ("constant", "diminishing")


class Decentralised:
    """What the four methods share (docs/decentralised.md section 1): the checks of the problem and of
    W, W as a sparse product (W^k over a channel, section 9), the smooth part s of f (all of f, or s of
    f = s + r for the proximal methods, with prox_r), and alpha (1, B, 1) on the run's device: "auto"
    (the subclass's default_alpha of L (B,)) or a number > 0."""

    name: str  # the method's name in pdmm.METHODS, set by every subclass
    capabilities = Capabilities(  # a network: all of pdmm.Network but privacy and wake="one" (check_network)
        family="dgd/extra/nids/gradient-tracking",
        parameters=("mixing", STEP),
        network=True,
        biased_under_loss=True,
    )
    proximal = False  # whether non-smooth f_i = s_i + r_i run with prox_r (PG-EXTRA, NIDS)

    def __init__(
        self,
        graph: CompiledGraph,
        local: LocalFunction,
        edges: Consensus,
        rho: None,
        mixing: "str | np.ndarray | scipy.sparse.sparray" = "metropolis",
        alpha: "float | str | torch.Tensor" = "auto",
        *,
        channel: Channel | None = None,
    ):
        if rho is not None:
            raise ValueError(f"{self.name} has no penalty parameter rho (docs/decentralised.md section 7)")
        if channel is not None:
            check_network(self.name, channel.network)
            if channel.vectors != self.capabilities.vectors_sent:
                raise ValueError(
                    f"{self.name} sends {self.capabilities.vectors_sent} stacked vector(s) per message; its channel "
                    f"has vectors={channel.vectors}"
                )
        self.channel = channel
        if not isinstance(edges, Consensus):
            raise ValueError(
                f"{self.name} solves consensus problems only (constraints='consensus'); this problem "
                "has edge-matrix constraints"
            )
        self.smooth_part, self.prox_r = _split(local, self.name, self.proximal)
        self.W = as_mixing(mixing, graph)  # scipy CSR, float64, in the run's node order
        self.lowest = _lowest_eigenvalue(self.W, graph, self.name, mixing)
        self.product = NetworkMixing(self.W, graph, channel)
        self.alpha = _step_size(alpha, self.default_alpha, self.smooth_part, local.shape[1], graph)

    def default_alpha(self, L):
        """alpha="auto" from L = max_i L_i per instance, (B,) -> (B,)."""
        raise NotImplementedError

    def prox(self, v):
        """prox_{alpha r}(v) node by node, v itself for smooth f."""
        return v if self.prox_r is None else self.prox_r(v, self.alpha)

    def asleep(self, new, state):
        """The new state, with every node tensor's old rows where the channel's node sleeps (section 9); the
        round counter of a diminishing step is the network's, not a node's."""
        if self.channel is None:
            return new
        return {
            key: value if key == "round" else self.channel.keep_asleep(value, state[key]) for key, value in new.items()
        }


class NetworkMixing:
    """m -> base + alpha W^k m over node tensors (n, B, w) (docs/decentralised.md section 9). On the ideal
    network (channel None) W^k = W, one sparse product (pdmm.mixing.MixingProduct). Over a channel, what
    node j mixes is what it received,

        (W^k m)_j = W_jj m_j + sum_{i in N(j)} W_ji r_{j|i},   r_{j|i} = Q(m_i) where i -> j delivered, else m_j,

    computed as W m + sum_{i in N(j)} W_ji (r_{j|i} - m_i): a message delivered unquantised adds an exact 0,
    so a network whose effects are all off is the ideal one bit for bit. The channel (its round drawn before
    the step, Channel.draw) quantises, applies the round's delivered mask with the receiver's own m_j as what
    it holds, and counts messages and bits (Channel.exchange)."""

    def __init__(self, W: "scipy.sparse.csr_array", graph: CompiledGraph, channel: Channel | None):
        self.product, self.graph, self.channel = mixing_product(W, graph), graph, channel
        self.weights = None if channel is None else _edge_weights(W, graph)

    def __call__(self, m: torch.Tensor, base: torch.Tensor | None = None, alpha: float = 1.0) -> torch.Tensor:
        mixed = self.product(m, base, alpha)
        if self.channel is None:
            return mixed
        own = self.graph.gather(m)  # by receiving edge e: m_j of its receiver j = src[e], and what j sends on e
        received = self.channel.exchange(own, own)  # r_{j|i}, i = dst[e]
        change = self.graph.aggregate(self.weights * (received - self.graph.gather_neighbour(m)))
        return torch.add(mixed, change, alpha=alpha)


class DGD(Decentralised):
    """Decentralised gradient descent (Nedic, Ozdaglar 2009; docs/decentralised.md section 2):

        x^{k+1} = W x^k - alpha_k grad f(x^k),

    alpha_k = alpha (step="constant") or alpha / sqrt(k + 1) (step="diminishing"), k = 0, 1, ...
    With a constant step the iterates converge to a point within O(alpha) of the solution, not to it,
    so the stopping test may never pass; a diminishing step converges, slowly. Smooth f_i only.
    alpha="auto": (1 + lambda_min(W)) / (2 L), half of the bound (1 + lambda_min(W)) / L under which
    the step is gradient descent on a function that it decreases (section 2). Over a channel: W^k x^k
    (x^k is what a node sends), and k in alpha_k counts the network's rounds (section 9).
    """

    name = "dgd"
    capabilities = replace(Decentralised.capabilities, parameters=("mixing", STEP, "step"))

    def __init__(
        self,
        graph: CompiledGraph,
        local: LocalFunction,
        edges: Consensus,
        rho: None,
        mixing: "str | np.ndarray | scipy.sparse.sparray" = "metropolis",
        alpha: "float | str | torch.Tensor" = "auto",
        step: str = "constant",
        *,
        channel: Channel | None = None,
    ):
        if step not in STEPS:
            raise ValueError(f"step must be 'constant' or 'diminishing', got {step!r}")
        super().__init__(graph, local, edges, rho, mixing, alpha, channel=channel)
        self.diminishing = step == "diminishing"

    def default_alpha(self, L):
        return (1 + self.lowest) / (2 * L)

    def init(self, x0):
        """x^0, and with a diminishing step the round k as a tensor (no host read, one compiled step)."""
        if not self.diminishing:
            return {"x": x0}
        return {"x": x0, "round": torch.zeros((), dtype=x0.dtype, device=x0.device)}

    def step(self, state):
        x = state["x"]
        if not self.diminishing:
            return self.asleep({"x": self.product(x, -self.alpha * self.smooth_part.gradient(x))}, state)
        k = state["round"]
        alpha = self.alpha * torch.rsqrt(k + 1)
        return self.asleep({"x": self.product(x, -alpha * self.smooth_part.gradient(x)), "round": k + 1}, state)


class EXTRA(Decentralised):
    """EXTRA (Shi, Ling, Wu, Yin 2015), and PG-EXTRA (Shi, Ling, Wu, Yin 2015, the proximal form) where
    f_i = s_i + r_i is not smooth but has a prox of r_i (lasso); docs/decentralised.md section 3.
    With W~ = (I + W) / 2, EXTRA is

        x^1 = W x^0 - alpha grad f(x^0),   x^{k+2} = (I + W) x^{k+1} - W~ x^k - alpha (grad f(x^{k+1}) - grad f(x^k)),

    and PG-EXTRA takes gradients of s and x^{k+1} = prox_{alpha r}(x^{k+1/2}) of the same recursion
    on the half points. Both are run in the summed form, with c^0 = 0:

        x^{k+1/2} = W x^k - alpha grad s(x^k) + c^k,   x^{k+1} = prox_{alpha r}(x^{k+1/2}),
        c^{k+1}   = c^k + (W - W~) x^k = c^k - (x^k - W x^k) / 2,

    one product with W per round. alpha="auto": (1 + lambda_min(W)) / (2 L) = lambda_min(W~) / L,
    half of the papers' bound 2 lambda_min(W~) / L. Over a channel, the round's W^k x^k enters both
    x^{k+1/2} and c^{k+1} (section 9).
    """

    name = "extra"
    proximal = True

    def default_alpha(self, L):
        return (1 + self.lowest) / (2 * L)

    def init(self, x0):
        return {"x": x0, "correction": torch.zeros_like(x0)}

    def step(self, state):
        x, correction = state["x"], state["correction"]
        mixed = self.product(x)
        half = mixed - self.alpha * self.smooth_part.gradient(x) + correction
        return self.asleep({"x": self.prox(half), "correction": correction + (mixed - x) / 2}, state)


class NIDS(Decentralised):
    """NIDS (Li, Shi, Yan 2019), proximal, with W~ = I - c alpha (I - W) at c = 1 / (2 alpha), that is
    W~ = (I + W) / 2 (docs/decentralised.md section 4):

        z^1     = x^0 - alpha grad s(x^0),   x^1 = prox_{alpha r}(z^1)            (local: nothing sent)
        z^{k+1} = z^k - x^k + W~ (2 x^k - x^{k-1} - alpha grad s(x^k) + alpha grad s(x^{k-1}))
        x^{k+1} = prox_{alpha r}(z^{k+1})

    computed with w^k = x^k - alpha grad s(x^k), the vector sent being x^k + w^k - w^{k-1}. Smooth f is
    s = f, r = 0 (x = z). alpha="auto": 1 / L, half of NIDS's bound 2 / L, which does not depend on W.
    Over a channel, W~ becomes W~^k = (I + W^k) / 2 on the vector sent; the first, local, step is every
    node's, awake or not (section 9).
    """

    name = "nids"
    proximal = True
    capabilities = replace(Decentralised.capabilities, silent_rounds=1)

    def default_alpha(self, L):
        return 1 / L

    def init(self, x0):
        return {"x": x0}

    def step(self, state):
        x = state["x"]
        w = x - self.alpha * self.smooth_part.gradient(x)
        if "w" not in state:  # the first step, local: z^1 = w^0
            return {"x": self.prox(w), "z": w, "w": w}
        sent = x + w - state["w"]
        z = state["z"] - x + self.product(sent, sent) / 2  # W~ v = (v + W v) / 2
        return self.asleep({"x": self.prox(z), "z": z, "w": w}, state)


class GradientTracking(Decentralised):
    """DIGing / gradient tracking (Nedic, Olshevsky, Shi 2017; Qu, Li 2018; docs/decentralised.md section 5):

        y^0     = grad f(x^0)
        x^{k+1} = W x^k - alpha y^k
        y^{k+1} = W y^k + grad f(x^{k+1}) - grad f(x^k)

    x^k and y^k travel together: one product with W on (n, B, 2d), two vectors per directed edge and
    round (one message of both over a channel: lost together, each quantised with its own range, W^k
    for both; section 9). Smooth f_i only. alpha="auto": (1 + lambda_min(W))^2 / (4 L), half of the
    exact stability limit when every f_i has the same Hessian (section 5).
    """

    name = "gradient-tracking"
    capabilities = replace(Decentralised.capabilities, vectors_sent=2)

    def default_alpha(self, L):
        return (1 + self.lowest) ** 2 / (4 * L)

    def init(self, x0):
        gradient = self.smooth_part.gradient(x0)
        return {"x": x0, "y": gradient, "gradient": gradient}

    def step(self, state):
        y, d = state["y"], state["x"].shape[-1]
        mixed = self.product(torch.cat([state["x"], y], -1))
        x = mixed[..., :d] - self.alpha * y
        gradient = self.smooth_part.gradient(x)
        return self.asleep({"x": x, "y": mixed[..., d:] + gradient - state["gradient"], "gradient": gradient}, state)


def check_network(name: str, network: Network) -> None:
    """ValueError for the effects of a simulated network that have no meaning for these methods (docs/
    decentralised.md section 9): privacy, the subspace perturbation of PDMM's dual variables z, which they do not
    have; and wake="one", under which the awake node's neighbours all sleep, so that no message is ever mixed."""
    if network.privacy is not None:
        raise ValueError(
            f"network privacy perturbs the dual variables z of pdmm and qa-pdmm; {name} has none "
            "(leave privacy out; its other network effects apply)"
        )
    if network.wake == ONE:
        raise ValueError(
            f"wake='one' is not defined for {name}: a sleeping node neither sends nor updates, so the "
            "one awake node would never mix a neighbour's value; give wake a probability"
        )


def network_biases(network: Network) -> bool:
    """Whether `network` moves the methods' limit off the solution (docs/decentralised.md section 9): a message
    lost one way (drop > 0 for some edge, or bursts of loss) or quantised. Their iterates then settle at a
    consensual point that the residual test alone cannot tell from the solution; pdmm.solve's optimality
    certificate can (measured on the true iterates), so such a run is converged only where its iterate is certified
    within tol, and otherwise ends at max_iter with a message naming the network (docs/guide/solve.md, "The
    stopping test")."""
    drop = network.drop
    probabilities = drop.values() if isinstance(drop, dict) else drop if isinstance(drop, tuple) else (drop,)
    return network.bits is not None or network.burst is not None or any(p > 0 for p in probabilities)


def _edge_weights(W, graph):
    """(E, 1, 1): W_{src[e], dst[e]} of every directed edge (0 where W stores no entry), in the graph's dtype
    and on its device; for a rank's part (pdmm.halo.PartGraph) W is the whole graph's and src[e] the global id
    of the edge's local source, or, where the rank holds only its rows (pdmm.mixing.part_rows), W's row src[e] at the
    column of halo(x) that dst[e] is (ghost_of_edge)."""
    W = W.sorted_indices()
    width = W.shape[1]
    keys = np.repeat(np.arange(W.shape[0], dtype=np.int64), np.diff(W.indptr)) * width + W.indices
    rows, columns = graph.src.cpu().numpy().astype(np.int64), graph.dst.cpu().numpy()
    if isinstance(graph, PartGraph) and graph.whole is None:
        columns = graph.ghost_of_edge.cpu().numpy()
    elif isinstance(graph, PartGraph):
        rows = np.asarray(graph.nodes, dtype=np.int64)[rows]
    wanted = rows * width + columns
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    weights = np.where(keys[at] == wanted, W.data[at], 0.0)
    return torch.from_numpy(weights).to(graph.sign.device, graph.sign.dtype).view(-1, 1, 1)


def _split(local, name, proximal):
    """(s, prox_r or None): f itself when smooth; for a method with a proximal form, LocalFunction.composite;
    else a one-line ValueError."""
    if local.smooth or proximal:
        return local.composite()
    hint = (
        " (its proximal form runs with method='extra' (PG-EXTRA) or 'nids')"
        if type(local).composite is not LocalFunction.composite
        else ""
    )
    raise ValueError(f"{name} needs smooth local functions; {type(local).__name__} is not smooth{hint}")


def _lowest_eigenvalue(W, graph, name, mixing):
    """lambda_min(W), W built from `mixing`, after refusing a W whose nonzeros do not connect the nodes
    (spectral_interval, on rank 0 for a rank's part, or the spectrum given with a part that holds only its rows:
    pdmm.mixing.run_interval), or with lambda_min <= -1 or another eigenvalue >= 1 (up to
    SPECTRUM_MARGIN): none of the methods converges then."""
    low, high = run_interval(W, graph, mixing)
    if low <= -1 + SPECTRUM_MARGIN:
        raise ValueError(
            f"{name} needs the mixing matrix's smallest eigenvalue above -1, got {low:.6g} "
            "(lazy_metropolis, or more weight on W's diagonal, moves it up)"
        )
    if high >= 1 - SPECTRUM_MARGIN:
        raise ValueError(
            f"{name} needs every eigenvalue of the mixing matrix but that of the all-ones vector "
            f"below 1, got {high:.6g}"
        )
    return low


def _step_size(alpha, rule, smooth, batch, graph):
    """alpha as a (1, B, 1) tensor on the run's device and dtype (those of graph.sign): rule(L) for "auto", with
    L = max_i L_i per instance over every node (every rank's, pdmm.halo.largest, on a part; at least the dtype's
    tiny, so that f = 0 gives a finite step), else the number
    given (> 0, finite) or one such number per instance, a tensor of B values (a grid of step sizes run as one
    batch, docs/decentralised.md section 8)."""
    like = graph.sign
    if isinstance(alpha, str) and alpha == "auto":
        L = largest(smooth.smoothness().amax(0), graph)
        value = rule(L.clamp(min=torch.finfo(L.dtype).tiny))
    elif isinstance(alpha, numbers.Real) and not isinstance(alpha, bool) and math.isfinite(alpha) and alpha > 0:
        value = torch.full((batch,), float(alpha), dtype=like.dtype, device=like.device)
    elif torch.is_tensor(alpha) and alpha.numel() == batch and bool((torch.isfinite(alpha) & (alpha > 0)).all()):
        value = alpha.to(like.device, like.dtype)
    else:
        raise ValueError(f"alpha must be 'auto' or a finite number > 0, got {alpha!r:.200}")
    return value.view(1, -1, 1)
