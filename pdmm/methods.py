"""Update rules: PDMM (MATH.md 2), QA-PDMM (MATH.md 3) and edge-based consensus ADMM.

Each method is one step over the whole graph at once, written as the three named phases
    gather   u_i  <- what node i collects from its edges          (edge -> node)
    fuse     x_i  <- a local update from u_i                      (node)
    exchange z_e  <- the messages sent back along each edge       (node -> edge -> reverse edge)
The edge operator (pdmm.constraints) supplies the constraint-specific terms, so the same
rules run with consensus or general edge matrices; all edge traffic passes through
`exchange`, the single place where message drops, quantisation or a process boundary belong.
A `pdmm.network.Channel` (keyword `channel`; the caller draws each iteration's events before
the step) simulates them there: sleeping nodes keep x, an edge that receives nothing keeps its
state. Without one the step is the ideal network's, unchanged.
State tensors: x (n, B, d), edge state (E, B, m).
"""
import warnings

import torch

from .constraints import Consensus
from .local.base import add, spd_solver


def _check_theta(theta):
    """theta as a float, or kept as a tensor (e.g. a learned one, bridge.UnrolledPDMM) after the range check."""
    if not bool(0 < theta <= 1):
        raise ValueError(f"theta must be in (0, 1] (1 = PDMM, 1/2 = averaged PDMM), got {float(theta)}")
    return theta if torch.is_tensor(theta) else float(theta)


class PDMM:
    """z-form PDMM with averaging theta on z (MATH.md section 2):

        x_i^{k+1}     = argmin_x f_i(x) + u_i^T x + 1/2 x^T C_i x,  u_i = sum_j A_ij^T (z_{i|j} - c b_ij / 2)
        z_{j|i}^{k+1} = (1 - theta) z_{j|i}^k + theta (z_{i|j}^k + 2c (A_ij x_i^{k+1} - b_ij / 2))
    """

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
        new = self.local_step(state, self.edges.gather(z, self.rho))
        return {**new, "z": self.update_edges(z, self.edges.messages(z, new["x"], self.rho))}

    def local_step(self, state, u):
        """The node updates from u (the gathered edge terms): {"x": x^{k+1}}."""
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
    """QA-PDMM (MATH.md section 3, non-recursive form): f_i replaced by its quadratic model, so
    only gradients are needed. With B_i = eta_i I + C_i and g_i^k = -u_i^k:

        x_i^{k+1/2} = B_i^{-1} [eta_i x_i^{k-1/2} + g_i^k - grad f_i(x_i^{k-1/2})]
        x_i^{k+1}   = B_i^{-1} [eta_i x_i^{k+1/2} + g_i^k - grad f_i(x_i^{k+1/2})]

    then the multiplier (z) update of PDMM. eta: "L" (default, eta_i = L_i, the descent-lemma
    majoriser: fast), "safe" (eta_i = L_i^2 / (2 m_i), the paper's sufficient condition: slow),
    a number, or one value per node.
    """

    def __init__(self, graph, local, edges, rho, theta=1.0, eta="L", *, channel=None):
        if not local.smooth:
            raise ValueError(f"qa-pdmm needs smooth local functions; {type(local).__name__} is not smooth "
                             "(use method='pdmm')")
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
            raise ValueError(f"eta must be a number or one value per node ({shape[0]}), got shape {tuple(eta.shape)}")

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
    node i gathers) and v_i = sum_{e at i} w_{rev e} (what its neighbours hold for it), one step of
    z-form PDMM (MATH.md 2), w_e <- (1 - theta) w_e + theta (-2 rho x_{dst e} - w_{rev e}), sums to

        x^{k+1} = the method's node update from u^k
        u^{k+1} = (1 - theta) u^k + theta (-2 rho sum_{j in N_i} x_j^{k+1} - v^k)
        v^{k+1} = (1 - theta) v^k + theta (-2 rho d_i x_i^{k+1} - u^k)

    so a step is one sparse product with the adjacency matrix and node-sized work, where the edge
    form reads and writes the E-row edge state three times. The state carries -v ("minus_v"), so
    that each of the two updates is one fused operation (addmm, addcmul) at theta = 1. Equal in
    exact arithmetic; in floating point the sums are formed in another order (tests/test_node_form.py).
    """

    def __init__(self, algorithm):
        self.algorithm = algorithm
        graph = algorithm.graph
        self.theta, self.rho = algorithm.theta, algorithm.rho
        self.twice_rho_degree = (2 * self.rho * graph.degree.to(graph.sign.dtype)).view(-1, 1, 1)
        crow = torch.cat([graph.degree.new_zeros(1), torch.cumsum(graph.degree, 0)])
        with warnings.catch_warnings():  # "sparse CSR support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            self.adjacency = torch.sparse_csr_tensor(crow, graph.dst, torch.ones_like(graph.sign), (graph.n, graph.n),
                                                     check_invariants=False)

    def init(self, x0):
        state = self.algorithm.init(x0)
        graph, w = self.algorithm.graph, state.pop("z")
        return {**state, "u": graph.aggregate(w), "minus_v": -graph.aggregate(graph.exchange(w))}

    def step(self, state):
        u, minus_v = state["u"], state["minus_v"]
        new = self.algorithm.local_step(state, u)
        x = new["x"]
        rows = lambda t: t.reshape(len(t), -1)  # noqa: E731  (n, B, d) -> (n, B d) for the sparse product
        u_next = torch.addmm(rows(minus_v), self.adjacency, rows(x), alpha=-2 * self.rho).view(x.shape)
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

    def __init__(self, graph, local, edges, rho, *, channel=None):
        if edges.inequality is not None:
            raise ValueError("admm does not take inequality constraints (A_ij x_i + A_ji x_j <= b_ij); "
                             "use method='pdmm' or 'qa-pdmm'")
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
        return {"x": self.channel.keep_asleep(x, state["x"]), "w": keep(s - u, state["w"]), "u": keep(u, state["u"]),
                "r": r}


METHODS = {"pdmm": PDMM, "qa-pdmm": QAPDMM, "admm": ADMM}
