"""One run's method built for either engine (build_method): the method on what this process runs, its steps
checked against the dtype (check_steps_resolved) and its optimality certificate; and what a run ends with where
a network keeps its method off the solution (short_of_tol). The local engine (pdmm.solve) and the partitioned one
(pdmm.distributed) both build here (docs/guide/solve.md, "Plan and run"; docs/guide/distributed.md, "What runs on
the engine").
"""

from collections.abc import Callable
from typing import Any

import torch

from .certificate import Certificate, node_sum, optimality_certificate
from .decentralised import network_biases
from .edge_index import CompiledGraph
from .halo import largest
from .local import LocalFunction
from .loop import RunOptions, status_message
from .methods import METHODS
from .network import Channel
from .parts import PartProblem
from .problem import Problem

BIASED = (  # why a run over a network that biases its method (pdmm.decentralised.network_biases) ends short of tol
    "over this network (messages lost one way, bursts of loss or quantisation) the method settles off the solution, "
    "where the stopping test cannot pass (docs/decentralised.md section 9)"
)


def biased(options: RunOptions) -> bool:
    """Whether the run's network keeps its method off the solution (pdmm.decentralised.network_biases)."""
    network = options.network
    return METHODS[options.method].capabilities.biased_under_loss and network is not None and network_biases(network)


def short_of_tol(status: str, iterations: int, options: RunOptions) -> str:
    """The Result's message for a run whose network biases its method (biased) and that ended at max_iter or
    stalled: the status and why (BIASED); "" otherwise. Both engines (docs/guide/network.md)."""
    if not (biased(options) and status in ("max_iter", "stalled")):
        return ""
    stopping = options.stopping
    return f"{status_message(status, iterations, stopping.tol, stopping.target)}; {BIASED}"


def build_method(
    problem: "Problem | PartProblem",
    graph: CompiledGraph,
    local: LocalFunction,
    edges: Any,
    options: RunOptions,
    params: dict[str, Any],
    channel: Channel | None = None,
    *,
    count: int | None = None,
    summed: Callable[[torch.Tensor], torch.Tensor] = node_sum,
    certified: torch.Tensor | None = None,
) -> tuple[Any, Certificate | None]:
    """The run's method built on what this process runs, its steps checked against the dtype, and the run's
    optimality certificate (None with tol=0, or where the problem has none): one construction for both engines
    (docs/guide/solve.md, "Plan and run"; docs/guide/distributed.md, "What runs on the engine").

    Parameters
    ----------
    problem : pdmm.Problem
        The whole problem (the dtype checks read its degrees and curvature).
    graph, local, edges
        The compiled graph, local functions and edge operator of this process: the whole problem's (the local
        engine, renumbered) or a rank's part (pdmm.halo.PartGraph, its nodes' rows).
    options : RunOptions
        What pdmm.plan checked and resolved; rho as a number, or one per instance (B,) given as (1, B, 1).
    params : dict
        The method's own parameters as this process runs them (renumbered, or a rank's rows).
    channel : pdmm.network.Channel or None
        The simulated network's channel.
    count, summed
        The problem's number of nodes and the sum over its nodes of a node tensor of this process
        (pdmm.certificate.optimality_certificate), where this process holds a part.
    certified
        The curvature the consensus certificate sums, where options.curvature holds only a rank's rows: (1, B), the
        sum of L_i over every rank's nodes (pdmm.parts.checked_part); None: options.curvature.

    Returns
    -------
    (method, Certificate or None)

    Raises
    ------
    ValueError
        For a parameter the method refuses, or a step beyond what the dtype resolves (check_steps_resolved).
    """
    rho, capabilities = options.rho, METHODS[options.method].capabilities
    algorithm: Any = METHODS[options.method](  # its capabilities say which of the attributes read below it has
        graph,
        local,
        edges,
        None if rho is None else rho.view(1, -1, 1) if torch.is_tensor(rho) else float(rho),
        channel=channel,
        **params,
    )
    check_steps_resolved(algorithm, problem, options.engine.dtype, options.curvature)
    certificate = (  # tol <= 0 applies no stopping test: nothing to certify
        optimality_certificate(
            local,
            edges,
            options.curvature if certified is None else certified,
            options.scale,
            multipliers=algorithm.multipliers if capabilities.multipliers else None,
            count=count,
            summed=summed,
        )
        if options.stopping.tol is not None and options.stopping.tol > 0
        else None
    )
    return algorithm, certificate


def local_curvature(problem) -> torch.Tensor | None:
    """L_i per node and instance, (n, B): the smoothness of f_i's smooth part (LocalFunction.composite); None where
    the local functions have none."""
    try:
        return problem.local.composite()[0].smoothness()
    except (ValueError, NotImplementedError):
        return None


def _stiffness(algorithm, curvature):
    """(1 / step, L), each (B,) on the run's device, for a method whose x moves by a step size: qa-pdmm
    (1 / step = max_i eta_i) and dgd, extra, nids and gradient-tracking (1 / alpha); L = max_i L_i of the smooth
    part (curvature: local_curvature, (n, B), or None), what check_steps_resolved compares against the dtype's eps.
    None for the other methods."""
    if algorithm.capabilities.eta:
        inverse = largest(algorithm.eta.amax(0), algorithm.graph)  # every rank's nodes on a part
    elif algorithm.capabilities.step:
        inverse = 1 / algorithm.alpha.reshape(-1)
    else:
        return None
    if curvature is None:
        return None
    graph = getattr(algorithm, "graph", None)  # a part's: the max over every rank's nodes
    top = curvature.amax(0) if graph is None else largest(curvature.amax(0), graph)
    return inverse, top.to(inverse.device, inverse.dtype)


def _greatest_degree(graph: CompiledGraph) -> int:
    """The greatest degree of the whole graph, over every rank's nodes where graph is a part."""
    return int(largest(graph.degree.amax().reshape(1), graph))


def check_steps_resolved(algorithm, problem, dtype: torch.dtype, curvature=None) -> None:
    """ValueError where a method's step is beyond what dtype resolves, so that no iteration can move its state:
    pdmm's and qa-pdmm's theta below eps ((1 - theta) z + theta y rounds to z), qa-pdmm's eta above (L + rho
    degree) / eps and the decentralised methods' alpha below eps / L (every gradient step rounds away against x;
    L = max_i L_i, docs/guide/solve.md, "The stopping test"). algorithm: the method built for the run
    (pdmm.METHODS[method](...)); curvature: local_curvature(problem) where computed."""
    eps, dtype_name = torch.finfo(dtype).eps, str(dtype).removeprefix("torch.")
    theta = algorithm.theta if algorithm.capabilities.theta else None
    if isinstance(theta, float) and theta < eps:
        raise ValueError(
            f"theta={theta:g} is below what {dtype_name} resolves: the averaging (1 - theta) z + theta y "
            f"rounds to z, so z never moves; use theta in [{eps:.3g}, 1] (1/2: averaged PDMM)"
        )
    stiffness = _stiffness(algorithm, local_curvature(problem) if curvature is None else curvature)
    if stiffness is None:
        return
    inverse, L = (float(t.max()) for t in stiffness)
    if algorithm.capabilities.eta:
        coupling = (  # the smallest of a per-instance rho: the test of the value that fails first
            0.0
            if algorithm.rho is None or not problem.is_consensus
            else float(torch.as_tensor(algorithm.rho).min()) * _greatest_degree(algorithm.graph)
        )
        if inverse * eps > L + coupling:
            raise ValueError(
                f"eta={inverse:g} is beyond what {dtype_name} resolves for this problem: eta * eps = "
                f"{inverse * eps:.3g} exceeds L + rho * degree = {L + coupling:.3g}, so every "
                f"gradient step rounds away against x; use eta near L = {L:.3g} (eta='L')"
            )
    elif L > 0 and inverse * eps > L:
        raise ValueError(
            f"alpha={1 / inverse:g} is below what {dtype_name} resolves for this problem: alpha * L = "
            f"{L / inverse:.3g} is below eps, so every gradient step rounds away against x; use "
            "alpha='auto'"
        )
