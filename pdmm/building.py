"""One run's method built for either engine (build_method): the method on what this process runs, its steps
checked against the dtype (check_steps_resolved) and its optimality certificate; and what a run ends with where
a network keeps its method off the solution (short_of_tol). The local engine (pdmm.solve) and the partitioned one
(pdmm.distributed) both build here (docs/guide/solve.md, "Plan and run"; docs/guide/distributed.md, "What runs on
the engine").
"""

import math
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
        sum of L_i over every rank's nodes (pdmm.distributed.checked_part); None: options.curvature.

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


def check_rho_extremes(rho: float, dtype: torch.dtype, largest: float, smallest: float, low: int, high: int) -> None:
    """check_rho_resolved's test from the extremes over the nodes: the largest and smallest L_i, the least and
    greatest degree (low, high); for a rank's part, the extremes over every rank's nodes
    (pdmm.distributed.checked_part)."""
    eps, dtype_name = torch.finfo(dtype).eps, str(dtype).removeprefix("torch.")
    penalty = rho * low * eps
    if penalty > largest:
        raise ValueError(
            f"rho={rho:g} is beyond what {dtype_name} resolves for this problem: rho * eps * degree = "
            f"{penalty:.3g} exceeds the largest local curvature L = {largest:.3g}, so every node "
            f"update rounds f_i away; use rho <= {largest / (low * eps):.3g}"
        )
    coupling = rho * high
    if smallest > 0 and coupling < eps * smallest:
        raise ValueError(
            f"rho={rho:g} is below what {dtype_name} resolves for this problem: rho * degree = "
            f"{coupling:.3g} is below eps * L = {eps * smallest:.3g} at every node, so the penalty "
            "rounds away in every node update and the multipliers would need more than 1/eps "
            f"iterations to move x; use rho near the local curvature L = {smallest:.3g}"
        )


def problem_scale(problem, dtype: torch.dtype, curvature=None, over: Any = None) -> torch.Tensor | None:
    """(B,) float64 on the CPU: per instance, the RMS over the nodes of ||grad s_i(0)|| / L_i, s_i the smooth part
    of f_i (a lower bound on ||argmin s_i||), the size of the problem's solution unless every f_i is minimised
    near 0 (with edge matrices at least RMS ||b_ij|| / max ||A_ij||, the size the constraints ask of x); None
    where the local functions do not say (no gradient or curvature). It sets the stopping test's
    floor, min(1, scale) in place of 1, so that data of size 1e-8 is not "converged" at x = 0
    (docs/guide/solve.md, "The stopping test"). ValueError where it is beyond what dtype's norms resolve (their
    squares under- or overflow: below sqrt(tiny) / eps or above sqrt(max) / 10^4). curvature: local_curvature(problem)
    where computed. over: for a rank's part (pdmm.parts.PartProblem), its ranks' reductions (maximum(t), total(t):
    element-wise over the ranks), so that every rank gets the whole problem's scale; None for a whole problem."""
    local = problem.local
    curvature = local_curvature(problem) if curvature is None else curvature
    if curvature is None:
        return None
    try:
        smooth = local.composite()[0]
        zero = torch.zeros(local.shape, dtype=curvature.dtype, device=curvature.device)
        gradient = smooth.gradient(zero)
    except (ValueError, NotImplementedError, TypeError, RuntimeError):
        return None
    with torch.no_grad():
        ratio = gradient.double() / torch.where(curvature > 0, curvature, math.inf).double().unsqueeze(-1)
        largest = ratio.abs().amax(dim=(0, 2))  # norms of the ratio scaled by its largest entry: no overflow
        largest = largest if over is None else over.maximum(largest)
        unit = ratio / torch.where(largest > 0, largest, 1.0).view(1, -1, 1)
        squares = (unit * unit).sum(-1)
        mean = squares.mean(0) if over is None else over.total(squares.sum(0)) / problem.n
        scale = (largest * torch.sqrt(mean)).cpu()
        if not problem.is_consensus:  # A_ij x_i + A_ji x_j = b_ij: x of size about ||b|| / ||A|| whatever f is
            A, b = (t.double() for t in problem.edge_matrices)
            norm = float(torch.linalg.matrix_norm(A, ord=2).max()) if A.numel() else 0.0
            if norm > 0:
                top = float(b.abs().max()) if b.numel() else 0.0
                offset = top * math.sqrt(float(((b / top) ** 2).sum(-1).mean())) / norm if top > 0 else 0.0
                scale = torch.clamp(scale, min=offset)
    info = torch.finfo(dtype)
    low, high = math.sqrt(info.tiny) / info.eps, math.sqrt(info.max) * 1e-4
    bad = (scale > 0) & ~((scale >= low) & (scale <= high))
    if bool(bad.any()):
        value = float(scale[bad][0])
        raise ValueError(
            f"the problem's scale (about {value:.3g}, the size of grad f_i(0) / L_i) is beyond what "
            f"{str(dtype).removeprefix('torch.')} resolves in the stopping test's norms ({low:.2g} to "
            f"{high:.2g}): rescale the data"
        )
    return scale
