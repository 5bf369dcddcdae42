"""Update rules: PDMM (docs/theory/pdmm.md section 4), QA-PDMM (docs/theory/qa_pdmm.md section 5),
edge-based consensus ADMM, gossip and Chebyshev-accelerated gossip for averaging problems
(docs/averaging.md), and METHODS, which also holds DGD, EXTRA, NIDS and gradient tracking
(pdmm.decentralised, docs/decentralised.md).

Each method is one step over the whole graph at once, written as the three named phases (the vocabulary of
docs/theory/pdmm.md section 14)
    aggregate u_i  <- what node i collects from its edges          (edge -> node)
    fuse      x_i  <- a local update from u_i                      (node)
    exchange  z_e  <- the messages sent back along each edge       (node -> edge -> reverse edge)
The edge operator (pdmm.constraints) supplies the constraint-specific terms, so the same
rules run with consensus or general edge matrices; all edge traffic passes through
`exchange`, the single place where message drops, quantisation or a process boundary belong.
A `pdmm.network.Channel` (keyword `channel`; the caller draws each iteration's events before
the step) simulates them there: sleeping nodes keep x, an edge that receives nothing keeps its
state. Without one the step is the ideal network's, unchanged. The methods on a mixing matrix
have no edge state: DGD, EXTRA, NIDS and gradient tracking take the channel in their products
with W (pdmm.decentralised.NetworkMixing), gossip and chebyshev refuse it (check_mixing_options).
State tensors: x (n, B, d), edge state (E, B, m). Each class declares what it takes and does in `capabilities`
(pdmm.protocol.Capabilities: rho, its parameters, x0, a network, the messages it sends per round, the problems it
solves, ...), which pdmm.plan checks and the engines count by (docs/guide/solve.md, "Plan and run"). A tuned
parameter (rho; dgd's, extra's, nids' and gradient-tracking's alpha; chebyshev's interval) may hold one value per
instance, a tensor (1, B, 1) that broadcasts against the state: a grid of values on B = (values x instances) runs
as one batch, each instance as its own run with a number would (docs/decentralised.md section 8).
"""

from dataclasses import replace

import torch

from .constraints import Consensus
from .decentralised import DGD, EXTRA, NIDS, GradientTracking, check_network
from .halo import adjacency
from .local import Quadratic
from .local.base import add, is_scalar, spd_solver
from .mixing import add_product, as_mixing, mixing_product, run_interval
from .network import private_point
from .protocol import Capabilities, Method

MIN_WIDTH = 1e-6  # chebyshev: the least width of a default interval (a graph whose W has one eigenvalue besides 1)


def _check_theta(theta):
    """theta as a float, or kept as a tensor (e.g. a learned one, bridge.UnrolledPDMM) after the range check."""
    if not bool(0 < theta <= 1):
        raise ValueError(f"theta must be in (0, 1] (1 = PDMM, 1/2 = averaged PDMM), got {float(theta)}")
    return theta if torch.is_tensor(theta) else float(theta)


class PDMM:
    """z-form PDMM with averaging theta on z (docs/theory/pdmm.md sections 4, 6):

    x_i^{k+1}     = argmin_x f_i(x) + u_i^T x + 1/2 x^T C_i x,  u_i = sum_j A_ij^T (z_{i|j} - c b_ij / 2)
    z_{j|i}^{k+1} = (1 - theta) z_{j|i}^k + theta (z_{i|j}^k + 2c (A_ij x_i^{k+1} - b_ij / 2))
    """

    capabilities = Capabilities(
        family="pdmm",
        rho=True,
        parameters=("theta",),
        network=True,
        privacy=True,
        wake_one=True,
        multipliers=True,
        edge_matrices=True,
        inequalities=True,
        node_form=True,
    )

    def __init__(self, graph, local, edges, rho, theta=1.0, *, channel=None):
        self.graph, self.local, self.edges, self.rho, self.channel = graph, local, edges, rho, channel
        self.theta = _check_theta(theta)
        self.fuse = local.prox(edges.curvature(rho))

    def init(self, x0):
        """z^0 matching lambda^0 = 0 at x^0: z_{i|j}^0 = rho (A_ji x_j^0 - b_ij / 2), plus the channel's
        privacy perturbation.

        With x^0 = 0 this is -rho b_ij / 2, zero only when b = 0 (as for consensus).
        """
        zero = torch.zeros(self.edges.state_shape(x0.shape[1], x0.shape[2]), dtype=x0.dtype, device=x0.device)
        z = self.graph.exchange(self.edges.messages(zero, x0, self.rho)) / 2
        return {"x": x0, "z": z if self.channel is None else self.channel.perturb(z)}

    def step(self, state):
        z = state["z"]
        new = self.local_step(state, self.edges.aggregate(z, self.rho))
        return {**new, "z": self.update_edges(z, self.edges.messages(z, new["x"], self.rho))}

    def multipliers(self, state):
        """The messages y_{i|j} = z_{i|j} + 2c (A_ij x_i - b_ij / 2) of state's z and x per directed edge (E, B, m),
        whose projection P(y) onto {lambda_{i|j} = lambda_{j|i}, >= 0 on an inequality} (both ends averaged, clipped
        at 0 on inequality rows) is the multiplier of edge {i, j}'s constraint: the exchange reflects about it,
        z <- 2 P(y) - y (docs/pdmm_inequality.md), so that it settles with x, for theta = 1 too, where z need not.
        For edge matrices (the consensus state is signed, pdmm.constraints.Consensus); the stopping test's
        certificate takes its KKT residual with it (pdmm.certificate)."""
        return self.edges.messages(state["z"], state["x"], self.rho)

    def local_step(self, state, u):
        """The node updates from u (the aggregated edge terms): {"x": x^{k+1}}."""
        return {"x": self.awake(self.fuse(u), state["x"])}

    def awake(self, new, old):
        """The new node values, or the old ones where the channel's node sleeps."""
        return new if self.channel is None else self.channel.keep_asleep(new, old)

    def update_edges(self, z, y):
        """z_{j|i} <- (1 - theta) z_{j|i} + theta y_{i|j}: exchange the messages, reflect (the edge operator:
        unchanged on equalities, max(y_{j|i}, -y_{i|j}) on inequalities), then average."""
        if self.channel is None:
            received = self.edges.reflect(y, self.graph.exchange(y))
        else:
            received = self.channel.exchange(y, z, None if self.edges.inequality is None else self.edges.reflect)
        if not torch.is_tensor(self.theta) and self.theta == 1:
            return received
        return torch.lerp(z, received, self.theta)


class QAPDMM(PDMM):
    """QA-PDMM (docs/theory/qa_pdmm.md section 5, non-recursive form): f_i replaced by its quadratic model, so
    only gradients are needed. With B_i = eta_i I + C_i and g_i^k = -u_i^k:

        x_i^{k+1/2} = B_i^{-1} [eta_i x_i^{k-1/2} + g_i^k - grad f_i(x_i^{k-1/2})]
        x_i^{k+1}   = B_i^{-1} [eta_i x_i^{k+1/2} + g_i^k - grad f_i(x_i^{k+1/2})]

    then the multiplier (z) update of PDMM. eta: "L" (default, eta_i = L_i, the descent-lemma
    majoriser: fast), "safe" (eta_i = L_i^2 / (2 m_i), the paper's sufficient condition: slow),
    a number, or one value per node.
    """

    capabilities = replace(PDMM.capabilities, family="qa-pdmm", parameters=("theta", "eta"))

    def __init__(self, graph, local, edges, rho, theta=1.0, eta="L", *, channel=None):
        if not local.smooth:
            raise ValueError(
                f"qa-pdmm needs smooth local functions; {type(local).__name__} is not smooth (use method='pdmm')"
            )
        self.graph, self.local, self.edges, self.rho, self.channel = graph, local, edges, rho, channel
        self.theta = _check_theta(theta)
        self.eta = self._eta(eta)
        self.inverse = spd_solver(add(self.eta, edges.curvature(rho), local.shape[2]))

    def _eta(self, eta):
        shape = self.local.shape[:2]
        like = dict(dtype=self.graph.sign.dtype, device=self.graph.sign.device)
        if isinstance(eta, str):
            if eta == "L":
                return self.local.smoothness()
            if eta == "safe":
                m = self.local.strong_convexity()
                if bool((m <= 0).any()):
                    raise ValueError("eta='safe' = L^2 / (2m) needs strongly convex f_i (m > 0)")
                return self.local.smoothness() ** 2 / (2 * m)
            raise ValueError(f"eta must be 'L', 'safe' or positive numbers, got {eta!r}")
        try:
            eta = torch.as_tensor(eta, **like)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"eta must be 'L', 'safe' or positive numbers, got {eta!r}") from None
        if eta.dim() == 1:
            eta = eta.unsqueeze(1)
        if not (bool(torch.isfinite(eta).all()) and bool((eta > 0).all())):
            raise ValueError(f"eta must be 'L', 'safe' or positive numbers, got {eta.tolist()}")
        try:
            return eta.expand(shape)
        except RuntimeError:
            raise ValueError(
                f"eta must be a number or one value per node ({shape[0]}), got shape {tuple(eta.shape)}"
            ) from None

    def init(self, x0):
        return {**super().init(x0), "x_half": x0}

    def local_step(self, state, u):
        eta, g = self.eta.unsqueeze(-1), -u
        half = self.inverse(eta * state["x_half"] + g - self.local.gradient(state["x_half"]))
        x = self.inverse(eta * half + g - self.local.gradient(half))
        return {"x": self.awake(x, state["x"]), "x_half": self.awake(half, state["x_half"])}


class NodeForm:
    """PDMM or QA-PDMM (`algorithm`) on consensus constraints over an ideal network, with the edge
    state summed out: the same iterates, carried as two sums per node instead of one number per edge.

    With the signed consensus state w (pdmm.constraints.Consensus), u_i = sum_{e at i} w_e (what
    node i aggregates) and v_i = sum_{e at i} w_{rev e} (what its neighbours hold for it), one step of
    z-form PDMM (docs/theory/pdmm.md section 10), w_e <- (1 - theta) w_e + theta (-2 rho x_{dst e} - w_{rev e}), sums to

        x^{k+1} = the method's node update from u^k
        u^{k+1} = (1 - theta) u^k + theta (-2 rho sum_{j in N_i} x_j^{k+1} - v^k)
        v^{k+1} = (1 - theta) v^k + theta (-2 rho d_i x_i^{k+1} - u^k)

    so a step is one sparse product with the adjacency matrix and node-sized work, where the edge
    form reads and writes the E-row edge state three times; on a rank's part of the graph (pdmm.halo.PartGraph,
    backend="distributed") the product takes its neighbours' rows of x through the node halo, one exchange per step
    (pdmm.halo.adjacency; docs/guide/distributed.md, "What runs on the engine"). The state carries -v ("minus_v"), so
    that each of the two updates is one fused operation (addmm, addcmul) at theta = 1. Equal in
    exact arithmetic; in floating point the sums are formed in another order (tests/test_node_form.py).
    """

    def __init__(self, algorithm):
        self.algorithm = algorithm
        graph = algorithm.graph
        self.theta, self.rho = algorithm.theta, algorithm.rho
        self.twice_rho_degree = 2 * self.rho * graph.degree.to(graph.sign.dtype).view(-1, 1, 1)
        self.adjacency, self.widen = adjacency(graph)  # a rank's part: its rows, x with its ghosts' rows (NodeHalo)

    def init(self, x0):
        state = self.algorithm.init(x0)
        graph, w = self.algorithm.graph, state.pop("z")
        return {**state, "u": graph.aggregate(w), "minus_v": -graph.aggregate(graph.exchange(w))}

    def step(self, state):
        u, minus_v = state["u"], state["minus_v"]
        new = self.algorithm.local_step(state, u)
        x = new["x"]
        u_next = add_product(minus_v, self.adjacency, x if self.widen is None else self.widen(x), -2 * self.rho)
        minus_v_next = torch.addcmul(u, self.twice_rho_degree, x)
        if self.theta != 1:
            u_next, minus_v_next = torch.lerp(u, u_next, self.theta), torch.lerp(minus_v, minus_v_next, self.theta)
        return {**new, "u": u_next, "minus_v": minus_v_next}


class ADMM:
    """Edge-based consensus ADMM (Boyd et al. 2011, section 7.2), scaled duals w_{i,e} and edge values u_e:

        x_i^{k+1} = argmin_x f_i(x) + rho/2 sum_{e at i} ||x - u_e^k + w_{i,e}^k||^2
        s_{i,e}   = x_i^{k+1} + w_{i,e}^k, sent to the other end j, which keeps it as r_{j,e}
        u_e^{k+1} = (s_{i,e} + r_{i,e}) / 2,   w_{i,e}^{k+1} = s_{i,e} - u_e^{k+1}

    Each end computes u_e from its own s and the last s received (r), so with a channel a lost
    message leaves r stale and a sleeping node keeps x_i, w_{i,e} and u_{i,e}.
    """

    capabilities = Capabilities(family="admm", rho=True, network=True, wake_one=True)

    def __init__(self, graph, local, edges, rho, *, channel=None):
        if edges.inequality is not None:
            raise ValueError(
                "admm does not take inequality constraints (A_ij x_i + A_ji x_j <= b_ij); "
                "use method='pdmm' or 'qa-pdmm'"
            )
        if not isinstance(edges, Consensus):
            raise ValueError("admm is the edge-based consensus baseline; it supports constraints='consensus' only")
        self.graph, self.rho, self.channel = graph, rho, channel
        self.fuse = local.prox(edges.curvature(rho))

    def init(self, x0):
        """w^0 = 0 and u_e^0 = (x_i^0 + x_j^0) / 2 (zero when x^0 = 0)."""
        s = self.graph.gather(x0)
        r = self.graph.exchange(s)
        return {"x": x0, "w": torch.zeros_like(s), "u": (s + r) / 2, "r": r}

    def step(self, state):
        x = self.fuse(self.rho * self.graph.aggregate(state["w"] - state["u"]))
        s = self.graph.gather(x) + state["w"]
        r = self.graph.exchange(s) if self.channel is None else self.channel.exchange(s, state["r"])
        u = (s + r) / 2
        if self.channel is None:
            return {"x": x, "w": s - u, "u": u, "r": r}
        keep = self.channel.keep_asleep_edges
        return {
            "x": self.channel.keep_asleep(x, state["x"]),
            "w": keep(s - u, state["w"]),
            "u": keep(u, state["u"]),
            "r": r,
        }


def check_mixing_options(method: str, rho=None, network=None, x0=None, compile: bool = False) -> None:
    """ValueError for an option that a method on a mixing matrix does not take. None of them has a penalty
    parameter. dgd, extra, nids and gradient-tracking run on a simulated network,
    each round with its own W^k, but refuse its privacy and wake="one" (docs/decentralised.md section 9);
    gossip and chebyshev refuse the network, as they compute mean(a) through a fixed polynomial in W that a
    random W^k per round neither keeps (gossip's mean) nor has a recursion for (Chebyshev's). gossip and
    chebyshev also start from x^0 = a, so refuse x0 (docs/averaging.md section 6), where the others take it
    (docs/decentralised.md section 7); and chebyshev is not compiled, as every round has its own Python float
    omega (a recompilation each)."""
    capabilities = METHODS[method].capabilities
    family = capabilities.family
    if rho is not None:
        raise ValueError(f"{method} has no penalty parameter: leave rho out (it applies to pdmm, qa-pdmm and admm)")
    if network is not None and not capabilities.network:
        raise ValueError(
            f"network effects are not implemented for {family}: they compute mean(a) as a fixed "
            "polynomial in W, and a random W^k per round (lost messages, sleeping nodes) keeps "
            "neither gossip's mean nor Chebyshev's recursion; dgd, extra, nids and gradient-tracking "
            "take a network"
        )
    if network is not None:
        check_network(method, network)
    if x0 is not None and not capabilities.x0:
        raise ValueError(f"{method} starts from the node values, x^0 = a; x0= does not apply")
    if compile and not capabilities.compile:
        raise ValueError(
            "compile=True is not implemented for chebyshev (each round's omega would recompile the "
            "step); run it eagerly: one sparse product per round"
        )


class Gossip:
    """Gossip averaging (docs/averaging.md section 2): x^0 = a = argmin f_i, then

        x^{k+1} = W x^k,

    W a mixing matrix (pdmm.mixing: a kind, default "metropolis", or the user's own), one sparse
    product per round, batched over (B, d). Converges to the mean with rate max(|lambda_min|,
    |lambda_2|) of W. Averaging problems only: consensus and f_i(x) = 1/2 ||x - a_i||^2.
    """

    name = "gossip"
    capabilities = Capabilities(family="gossip/chebyshev", parameters=("mixing",), x0=False, averaging_only=True)

    def __init__(self, graph, local, edges, rho, mixing="metropolis", *, channel=None):
        check_mixing_options(self.name, rho=rho, network=channel)
        self.a = _node_values(local, edges)
        self.W = as_mixing(mixing, graph)  # scipy CSR, float64, in the run's node order
        self.product = mixing_product(self.W, graph)

    def init(self, x0):
        """x^0 = a, whatever x0 holds (it only has the shape of x: pdmm.solve refuses x0= here)."""
        return {"x": self.a}

    def step(self, state):
        return {"x": self.product(state["x"])}


class Chebyshev(Gossip):
    """Chebyshev-accelerated gossip (docs/averaging.md section 3). With the eigenvalues of W other
    than 1 assumed in [low, high], t(l) = (2 l - low - high) / (high - low) and t1 = t(1) > 1,

        x^r = T_r(t(W)) a / T_r(t1),

    the polynomial p of degree r with p(1) = 1 that is smallest in max norm on [low, high]. One product
    with W per round, by the three-term recurrence in ratio form (section 3), s = low + high:

        x^1     = (2 W - s I) x^0 / (2 - s)                                   (= t(W) x^0 / t1)
        x^{r+1} = omega_{r+1} (2 W - s I) x^r / (2 - s) + (1 - omega_{r+1}) x^{r-1}
        omega_2 = 2 t1^2 / (2 t1^2 - 1),   omega_{r+1} = 1 / (1 - omega_r / (4 t1^2))

    the omegas Python floats (no device reads). interval: None (default) for spectral_interval(W),
    widened to at least MIN_WIDTH, or a pair (low, high) with -1 <= low < high < 1, each a number or one value per
    instance, a tensor (1, B, 1) (the omegas then float64 tensors (1, B, 1) by the same recursion). An interval that
    misses eigenvalues of W can make the iteration diverge (section 5).
    """

    name = "chebyshev"
    capabilities = replace(Gossip.capabilities, parameters=("mixing", "interval"), compile=False)

    def __init__(self, graph, local, edges, rho, mixing="metropolis", interval=None, *, channel=None):
        super().__init__(graph, local, edges, rho, mixing, channel=channel)
        self.low, self.high = _interval(interval, self.W, graph, mixing)
        self.t1 = (2 - self.low - self.high) / (self.high - self.low)
        self.omegas = [1.0, 2 * self.t1 * self.t1 / (2 * self.t1 * self.t1 - 1)]  # omega_1 (no x^{-1}), omega_2

    def init(self, x0):
        return {"x": self.a, "previous": self.a, "round": 0}

    def omega(self, r):
        """omega_r (r >= 1), by the recursion, kept for the later calls."""
        while len(self.omegas) < r:
            self.omegas.append(1 / (1 - self.omegas[-1] / (4 * self.t1 * self.t1)))
        return self.omegas[r - 1]

    def step(self, state):
        x, r = state["x"], state["round"]
        omega, s = self.omega(r + 1), self.low + self.high
        scale, keep, mix = -omega * s / (2 - s), 1 - omega, 2 * omega / (2 - s)
        if torch.is_tensor(s):  # one interval per instance: coefficients computed in float64 and then taken to x's
            like = dict(dtype=x.dtype, device=x.device)  # dtype, as a Python float is
            scale, keep, mix = (torch.as_tensor(c).to(**like) for c in (scale, keep, mix))
            base = torch.addcmul(x.mul(scale), state["previous"], keep)  # rounds as add_(alpha=) does
        else:
            base = x.mul(scale).add_(state["previous"], alpha=keep)
        return {"x": self.product(x, base, mix), "previous": x, "round": r + 1}


def _node_values(local, edges):
    """a = argmin f_i, (n, B, d), of an averaging problem; ValueError for any other problem."""
    if type(local) is not Quadratic:
        what = f"{type(local).__name__} local functions"
    elif not _is_identity(local.P):
        what = "quadratic local functions with P_i != I"
    elif not isinstance(edges, Consensus):
        what = "edge-matrix constraints"
    else:
        return private_point(local, local.q)
    raise ValueError(
        "gossip/chebyshev solve averaging problems only (consensus constraints and "
        f"f_i(x) = 1/2 ||x - a_i||^2, pdmm.averaging); this problem has {what}"
    )


def _is_identity(P):
    """Whether every P_i, stored as scalars (n, B) or matrices (n, B, d, d), is the identity."""
    one = 1 if is_scalar(P) else torch.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return bool((P == one).all())


def _interval(interval, W, graph, mixing):
    """(low, high) of Chebyshev's interval, checked: -1 <= low < high < 1 (docs/averaging.md section 5); each end a
    number, or a float64 tensor (1, B, 1) where it was given per instance."""
    if interval is None:
        low, high = run_interval(W, graph, mixing)
        if low >= -1 - 1e-12:  # else refused below; -1 up to rounding (a bipartite W) counts as -1
            pad = max(MIN_WIDTH - (high - max(low, -1.0)), 0) / 2
            low, high = max(low - pad, -1.0), high + pad
        given = "W's spectral interval"
    else:
        try:
            low, high = (_end(v) for v in interval)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"interval must be None or a pair (low, high) of numbers, got {interval!r}") from None
        given = "interval"
    if torch.is_tensor(low) or torch.is_tensor(high):
        ends = torch.as_tensor(low), torch.as_tensor(high)
        if not bool(((-1 <= ends[0]) & (ends[0] < ends[1]) & (ends[1] < 1)).all()):
            raise ValueError(f"chebyshev needs -1 <= low < high < 1 for every instance, got {given} {interval!r:.200}")
    elif not (-1 <= low < high < 1):
        raise ValueError(f"chebyshev needs -1 <= low < high < 1, got {given} ({low:.6g}, {high:.6g})")
    return low, high


def _end(value):
    """One end of an interval: a float, or a float64 tensor (1, B, 1) of one value per instance."""
    if torch.is_tensor(value) and value.numel() > 1:
        return value.detach().to(torch.float64).view(1, -1, 1)
    return float(value)


METHODS: dict[str, type[Method]] = {  # name -> class, each with its Capabilities (pdmm.protocol)
    "pdmm": PDMM,
    "qa-pdmm": QAPDMM,
    "admm": ADMM,
    "gossip": Gossip,
    "chebyshev": Chebyshev,
    "dgd": DGD,
    "extra": EXTRA,
    "nids": NIDS,
    "gradient-tracking": GradientTracking,
}
