"""What every method of pdmm.METHODS is and declares: the Method protocol and its Capabilities record
(docs/guide/solve.md, "Plan and run").

A method is a class built as ``METHOD(graph, local, edges, rho, **parameters, channel=...)`` on the run's compiled
graph, local functions and edge operator, with init(x0) -> state and step(state) -> state over state dicts of
tensors (pdmm.methods). What pdmm.plan checks against the problem, the network and the other settings, and what the
engines count, is read from the class's `capabilities`, never probed from its attributes.
"""

from dataclasses import dataclass
from typing import Any, Protocol

import torch

STEP = "alpha"  # the step-size parameter of the methods that take one


@dataclass(frozen=True)
class Capabilities:
    """What one method class takes and does, as pdmm.plan checks it and the engines count it
    (docs/guide/solve.md, "Plan and run"; tests/test_plan.py checks each record against its method's behaviour).

    Attributes
    ----------
    family : str
        The name errors give the methods that share these limits ("pdmm", "gossip/chebyshev", ...).
    rho : bool
        Whether it has the penalty parameter rho (pdmm.solve's rho=None then means 1.0); the others refuse rho.
    parameters : tuple of str
        Its own keyword parameters (theta, eta, mixing, alpha, step, interval), those of its constructor.
    x0 : bool
        Whether it starts from a given x0 (gossip and chebyshev start from x^0 = a).
    network : bool
        Whether it runs over a simulated pdmm.Network.
    privacy : bool
        Whether it takes the network's privacy (a perturbation of PDMM's z).
    wake_one : bool
        Whether it takes wake="one" (one node awake per round).
    biased_under_loss : bool
        Whether a network that loses messages one way or quantises moves its limit off the solution
        (pdmm.decentralised.network_biases, docs/decentralised.md section 9).
    vectors_sent : int
        Messages, each of the edge state's width, per directed edge and round on the ideal network.
    silent_rounds : int
        The first rounds, which send nothing.
    multipliers : bool
        Whether it has multipliers(state), the per-edge messages whose projection is the constraint's multiplier
        (pdmm.certificate takes the KKT residual with them).
    edge_matrices : bool
        Whether it solves constraints A_ij x_i + A_ji x_j = b_ij beyond consensus.
    inequalities : bool
        Whether it solves inequality constraints A_ij x_i + A_ji x_j <= b_ij.
    averaging_only : bool
        Whether it solves averaging problems only (pdmm.averaging: consensus and f_i = 1/2 ||x - a_i||^2).
    node_form : bool
        Whether it has the node form (pdmm.methods.NodeForm: the edge state summed out).
    distributed : bool
        Whether backend="distributed" runs it.
    compile : bool
        Whether its step runs through torch.compile.
    """

    family: str
    rho: bool = False
    parameters: tuple[str, ...] = ()
    x0: bool = True
    network: bool = False
    privacy: bool = False
    wake_one: bool = False
    biased_under_loss: bool = False
    vectors_sent: int = 1
    silent_rounds: int = 0
    multipliers: bool = False
    edge_matrices: bool = False
    inequalities: bool = False
    averaging_only: bool = False
    node_form: bool = False
    distributed: bool = True
    compile: bool = True

    @property
    def step(self) -> bool:
        """Whether it takes a step size alpha ("auto" or numbers > 0)."""
        return STEP in self.parameters

    @property
    def theta(self) -> bool:
        """Whether it takes theta, the averaging of PDMM's z (1 = PDMM, 1/2 = averaged PDMM)."""
        return "theta" in self.parameters

    @property
    def eta(self) -> bool:
        """Whether it takes eta, QA-PDMM's proximal weight."""
        return "eta" in self.parameters


class Method(Protocol):
    """A method of pdmm.METHODS: built on one run's compiled graph, local functions and edge operator, with rho
    (None for the methods without one), its own parameters and the run's channel (a simulated network, or None);
    init(x0) gives the state x^0 and the method's own, step(state) the next one, "x" (n, B, d) always among them
    (docs/guide/solve.md, "Plan and run").

    Parameters
    ----------
    *args
        graph (pdmm.CompiledGraph), local (pdmm.LocalFunction), edges (the edge operator, pdmm.constraints), rho
        (a number, one per instance as a tensor (1, B, 1), or None), then the method's own parameters.
    **params
        The method's own parameters (Capabilities.parameters) by name, and channel: a pdmm.network.Channel or None.
    """

    capabilities: Capabilities  # a class attribute of every method

    def __init__(self, *args: Any, **params: Any) -> None: ...

    def init(self, x0: torch.Tensor) -> dict[str, Any]:
        """The state at iteration 0 from x^0 (n, B, d): "x" and the method's own tensors.

        Parameters
        ----------
        x0 : torch.Tensor
            The starting point, (n, B, d) (ignored by the methods whose Capabilities.x0 is False).

        Returns
        -------
        dict
            The state, "x" among its entries.
        """
        ...

    def step(self, state: dict[str, Any]) -> dict[str, Any]:
        """One iteration over the whole graph at once: the next state from this one.

        Parameters
        ----------
        state : dict
            The state init or the last step returned.

        Returns
        -------
        dict
            The next state, with the same entries.
        """
        ...
