"""Unrolled PDMM: K iterations of pdmm's own PDMM / QA-PDMM step as K layers of a torch module.

Layer k runs pdmm.methods.PDMM(rho_k, theta_k).step: aggregate (edge to node: the sums over a node's
edges), fuse (the local x-update) and exchange (each edge receives what its reverse edge sent), on the
problem's compiled graph
(docs/theory/pdmm.md sections 4, 13; docs/theory/qa_pdmm.md section 5). With constant rho and theta the stacked
iterates are those of pdmm.solve; with
learnable=True each layer has its own rho_k = exp(r_k) > 0 and theta_k = sigmoid(t_k) in (0, 1),
trained by back-propagation through the iterations (learned PDMM). Between layers with
different rho the z state is shifted so that the multipliers lambda carry over unchanged.
network= (a pdmm.Network) runs the layers over a simulated network, one draw of its events per
layer, reproducible from its seed.
"""

import math
import numbers
from typing import Any

import numpy.typing as npt
import torch
import torch.nn as nn
from torch import Tensor

import pdmm
from pdmm.methods import PDMM, QAPDMM
from pdmm.network import Channel, Network

METHODS = {"pdmm": PDMM, "qa-pdmm": QAPDMM}
LEARNABLE_THETA_MAX = 0.99  # sigmoid never reaches 1: a learnable theta of 1 starts here


class UnrolledPDMM(nn.Module):
    """forward(problem, x0=None) -> iterates x^1..x^K, (K, n, d), or (K, B, n, d) for batched problems.

    Parameters
    ----------
    layers : int
        K, the number of iterations (layers), >= 1.
    method : str
        "pdmm" or "qa-pdmm".
    rho : float
        The penalty every layer starts from, finite and > 0.
    theta : float
        The averaging weight in (0, 1] (1: plain PDMM); a learnable one starts at min(theta, 0.99).
    learnable : bool
        Give each layer its own trainable rho_k = exp(r_k) and theta_k = sigmoid(t_k).
    eta : str or float
        QA-PDMM's eta (pdmm.methods.QAPDMM); unused by "pdmm".
    network : pdmm.Network or None
        Run the layers over a simulated network, one draw of its events per layer.

    Raises
    ------
    ValueError
        Naming the argument out of range or the unknown method.
    TypeError
        When network is not a pdmm.Network.
    """

    layers: int
    method: str
    eta: str | float
    learnable: bool
    network: pdmm.Network | None
    log_rho: Tensor  # a parameter when learnable, else a buffer
    theta_fixed: Tensor  # a buffer, when not learnable
    theta_logit: nn.Parameter  # when learnable

    def __init__(
        self,
        layers: int = 10,
        method: str = "pdmm",
        rho: float = 1.0,
        theta: float = 1.0,
        learnable: bool = False,
        eta: str | float = "L",
        network: pdmm.Network | None = None,
    ):
        super().__init__()
        if not (isinstance(layers, numbers.Integral) and not isinstance(layers, bool) and layers >= 1):
            raise ValueError(f"layers must be a positive integer, got {layers!r}")
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        if not (isinstance(rho, numbers.Real) and math.isfinite(rho) and rho > 0):
            raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
        if not (isinstance(theta, numbers.Real) and 0 < theta <= 1):
            raise ValueError(f"theta must be in (0, 1], got {theta!r}")
        if network is not None and not isinstance(network, Network):
            raise TypeError(f"network must be a pdmm.Network or None, got {type(network).__name__}")
        self.layers, self.method, self.eta, self.learnable, self.network = layers, method, eta, learnable, network
        log_rho = torch.full((layers,), math.log(rho), dtype=torch.float64)
        if learnable:
            t = min(theta, LEARNABLE_THETA_MAX)
            self.log_rho = nn.Parameter(log_rho)
            self.theta_logit = nn.Parameter(torch.full((layers,), math.log(t / (1 - t)), dtype=torch.float64))
        else:
            self.register_buffer("log_rho", log_rho)
            self.register_buffer("theta_fixed", torch.full((layers,), float(theta), dtype=torch.float64))

    def rho(self) -> Tensor:
        """(K,) penalty of each layer, rho_k = exp(r_k).

        Returns
        -------
        torch.Tensor
            (K,) float64.
        """
        return self.log_rho.exp()

    def theta(self) -> Tensor:
        """(K,) averaging weight of each layer, theta_k = sigmoid(t_k) when learnable.

        Returns
        -------
        torch.Tensor
            (K,) float64.
        """
        return torch.sigmoid(self.theta_logit) if self.learnable else self.theta_fixed

    def forward(self, problem: pdmm.Problem, x0: npt.ArrayLike | Tensor | None = None) -> Tensor:
        """Run K iterations of the method on `problem` from x0, in this module's dtype and device
        (docs/theory/pdmm.md section 13).

        Parameters
        ----------
        problem : pdmm.Problem
            The problem (e.g. pdmm.averaging(G, a)); batched problems keep their batch axis.
        x0 : array_like or torch.Tensor or None
            The start, shaped like the iterates, (n, d) or (B, n, d); None means 0.

        Returns
        -------
        torch.Tensor
            The iterates x^1..x^K, (K, n, d), or (K, B, n, d) for batched problems.
        """
        dtype, device = self.log_rho.dtype, self.log_rho.device
        graph, local, edges = problem.compile(device, dtype)
        shape = (problem.n, problem.batch, problem.dim)
        if x0 is None:
            x = torch.zeros(shape, dtype=dtype, device=device)
        else:
            x0 = torch.as_tensor(x0, dtype=dtype, device=device)
            x = (x0.permute(1, 0, 2) if problem.batched else x0.unsqueeze(1)).reshape(shape)
        rho, theta = self.rho(), self.theta()
        params = {"eta": self.eta} if self.method == "qa-pdmm" else {}
        channel = (
            None
            if self.network is None
            else Channel(self.network, graph, problem.batch, edges.state_shape(problem.batch, problem.dim)[2], dtype)
        )
        state, iterates = None, []
        for k in range(self.layers):
            layer = METHODS[self.method](
                graph, local, edges, rho[k], theta[k] if self.learnable else float(theta[k]), channel=channel, **params
            )
            state = layer.init(x) if state is None else rescaled(state, graph, edges, rho[k] - rho[k - 1])
            if channel is not None:
                channel.draw()
            state = layer.step(state)
            iterates.append(state["x"])
        x = torch.stack(iterates)  # (K, n, B, d)
        return x.permute(0, 2, 1, 3) if problem.batched else x[:, :, 0]


def rescaled(state: dict[str, Any], graph: Any, edges: Any, delta: Tensor) -> dict[str, Any]:
    """The state for a penalty changed by delta, with the same multipliers lambda.

    z_{i|j} = lambda + rho (A_ji x_j - b_ij / 2) (the relation PDMM.init sets up), so a new rho
    adds delta (A_ji x_j - b_ij / 2): PDMM.init's term for the current x with rho = delta.
    Without it a changed rho would jolt every multiplier by delta x_j.
    """
    if not delta.requires_grad and float(delta) == 0:  # constant rho: exactly pdmm.solve's state
        return state
    x = state["x"]
    zero = torch.zeros(edges.state_shape(x.shape[1], x.shape[2]), dtype=x.dtype, device=x.device)
    return {**state, "z": state["z"] + graph.exchange(edges.messages(zero, x, delta)) / 2}
