"""pdmm.solve: run a method on a Problem, record its convergence, stop at tolerance or divergence."""
import inspect
import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from .methods import METHODS
from .network import Channel, Network, private_point, privacy_gaps
from .problem import _node_data

DIVERGENCE_GROWTH = 1e6
DEFAULT_TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@dataclass
class Result:
    """x: (n, d), or (B, n, d) for batched problems, rows in G.nodes order (labels in `nodes`);
    history: per-iteration arrays "residual", "objective", "messages" and "bits" (cumulative
    messages delivered and bits sent), with a reference "error", with network privacy
    "privacy_x" and "privacy_messages" (shape (iterations,) or (iterations, B)); reference: the
    x* the error was measured against; network: the simulated network (None: ideal)."""
    x: np.ndarray
    iterations: int
    converged: bool
    history: dict
    method: str
    params: dict
    nodes: list
    seconds: float
    reference: np.ndarray | None = field(default=None, repr=False)
    interrupted: bool = False
    network: Network | None = None

    def __repr__(self):
        last = {k: float(np.max(v[-1])) for k, v in self.history.items()} if self.iterations else {}
        summary = ", ".join(f"{k}={v:.3g}" for k, v in last.items())
        return f"Result({self.method}, iterations={self.iterations}, converged={self.converged}, {summary})"


class DivergenceError(RuntimeError):
    """The iterates became non-finite or the residual grew by DIVERGENCE_GROWTH; `.result` holds the run so far."""

    def __init__(self, message, result):
        super().__init__(message)
        self.result = result


def solve(problem, method="pdmm", rho=1.0, max_iter=1000, tol=None, reference=None, device="cpu",
          dtype=torch.float64, seed=0, x0=None, progress=False, compile=False, network=None, target=None,
          **method_params):
    """Solve `problem` with "pdmm" (theta=1, or 1/2 for averaged), "qa-pdmm" (eta) or "admm".

    Stops when the residual RMS and the RMS change of x both fall to tol * max(1, RMS of x)
    (tol defaults to 1e-10 in float64, 1e-5 in float32); on slowly converging runs the error
    left is then up to about 10 tol.
    reference: None, "cvxpy" (solve centrally with pdmm.reference) or an array x* to report
    the relative error ||x - x*||_F / ||x*||_F per iteration. x0: None (zeros), "random"
    (standard normal from `seed`) or an array shaped like x; multipliers always start at 0.
    compile=True runs the step through torch.compile: 10-30 s to compile, then faster
    iterations on large graphs (see BENCHMARKS.md).
    network: a pdmm.Network (lost messages, sleeping nodes, changing edges, quantisation,
    privacy; pdmm.network) or None for the ideal network. history["messages"] and ["bits"]
    count what was delivered and sent (one message per directed edge and iteration on the ideal
    network, 64 bits per float64 number); with network privacy, "privacy_x" and
    "privacy_messages" are the relative distances of x_i and of what the messages carry from
    argmin f_i (pdmm.network.privacy_gaps).
    target: also stop (converged) once every instance's reference error is <= target (needs reference).
    Ctrl-C (KeyboardInterrupt) during the iterations returns the result of the iterations
    completed so far, with result.interrupted = True, instead of raising.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    if not (_is_real(rho) and math.isfinite(rho) and rho > 0):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    if not (isinstance(max_iter, numbers.Integral) and not isinstance(max_iter, bool) and max_iter >= 1):
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if dtype not in DEFAULT_TOL:
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    tol = DEFAULT_TOL[dtype] if tol is None else tol
    if not (_is_real(tol) and tol >= 0):
        raise ValueError(f"tol must be a number >= 0, got {tol!r}")
    if target is not None and not (_is_real(target) and target > 0 and reference is not None):
        raise ValueError(f"target must be a number > 0 and needs a reference, got target={target!r}, "
                         f"reference={'None' if reference is None else 'given'}")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but CUDA is not available")
    if network is not None and not isinstance(network, Network):
        raise TypeError(f"network must be a pdmm.Network or None, got {type(network).__name__}")
    if network is not None and network.privacy is not None and method == "admm":
        raise ValueError("network privacy perturbs the z of pdmm and qa-pdmm; it is not implemented for admm")
    try:
        inspect.signature(METHODS[method]).bind(None, None, None, rho, **method_params)
        if "channel" in method_params:
            raise TypeError("simulate a network with network=pdmm.Network(...), not channel=")
    except TypeError as err:
        raise TypeError(f"bad parameter for method {method!r}: {err}") from None
    graph, local, edges = problem.compile(device, dtype)
    width = edges.state_shape(problem.batch, problem.dim)[2]
    channel = None if network is None else Channel(network, graph, problem.batch, width, dtype)
    algorithm = METHODS[method](graph, local, edges, float(rho), channel=channel, **method_params)
    x_star = _reference(problem, reference, device, dtype)
    state = algorithm.init(_initial_x(problem, x0, seed, device, dtype))
    private = None if network is None or network.privacy is None else private_point(local, state["x"])
    step = torch.compile(algorithm.step) if compile else algorithm.step
    per_iteration = graph.num_edges, graph.num_edges * width * torch.finfo(dtype).bits  # the ideal network

    rows, start, converged, interrupted = [], time.perf_counter(), False, False
    with torch.no_grad(), tqdm(total=max_iter, desc=method, disable=not progress, leave=False) as bar:
        try:
            for k in range(max_iter):
                if channel is not None:
                    channel.draw()
                new = step(state)
                x = new["x"]
                scale = torch.clamp(_rms(x), min=1.0)
                row = {"residual": _rms(edges.residual(x)), "objective": local.value(x)}
                if channel is None:
                    row["messages"], row["bits"] = (x.new_full((problem.batch,), (k + 1) * c, dtype=torch.float64)
                                                    for c in per_iteration)
                else:
                    row["messages"], row["bits"] = channel.messages.clone(), channel.bits.clone()
                if private is not None:
                    row["privacy_x"], row["privacy_messages"] = privacy_gaps(x, channel.sent, private, edges, rho)
                if x_star is not None:
                    row["error"] = _norm(x - x_star) / torch.clamp(_norm(x_star), min=torch.finfo(dtype).tiny)
                x_old, state = state["x"], new
                rows.append(row)  # state and rows move together: an interrupt keeps them in step
                problem_found = _divergence(method, rho, k, x, rows, scale)
                if problem_found:
                    raise DivergenceError(problem_found, _result(problem, method, rho, method_params, state, rows,
                                                                 False, start, x_star, network))
                bar.update()
                if k % 20 == 0:
                    bar.set_postfix(residual=f"{row['residual'].max():.2e}")
                if bool((row["residual"] <= tol * scale).all() & (_rms(x - x_old) <= tol * scale).all()) \
                        or (target is not None and bool((row["error"] <= target).all())):
                    converged = True
                    break
        except KeyboardInterrupt:
            interrupted = True
    result = _result(problem, method, rho, method_params, state, rows, converged, start, x_star, network)
    result.interrupted = interrupted
    return result


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _divergence(method, rho, k, x, rows, scale):
    """A message if the iterates or objective are non-finite or the residual grew DIVERGENCE_GROWTH-fold."""
    residual, objective = rows[-1]["residual"], rows[-1]["objective"]
    if not bool(torch.isfinite(x).all() & torch.isfinite(residual).all() & torch.isfinite(objective).all()):
        return f"{method} diverged at iteration {k + 1}: the iterates or the objective are no longer finite"
    floor = torch.clamp(rows[0]["residual"], min=math.sqrt(torch.finfo(x.dtype).eps) * scale)
    if bool((residual > DIVERGENCE_GROWTH * floor).any()):
        return (f"{method} diverged at iteration {k + 1}: the residual grew from {rows[0]['residual'].max():.3g} "
                f"to {residual.max():.3g} (rho={rho})")
    return None


def _rms(v):
    """Root mean square over nodes/edges of the per-row vector norm: (N, B, m) -> (B,)."""
    return torch.sqrt((v * v).sum(-1).mean(0))


def _norm(v):
    """Frobenius norm per instance: (n, B, d) -> (B,)."""
    return torch.sqrt((v * v).sum((0, 2)))


def _initial_x(problem, x0, seed, device, dtype):
    shape = (problem.n, problem.batch, problem.dim)
    if x0 is None:
        return torch.zeros(shape, dtype=dtype, device=device)
    if isinstance(x0, str):
        if x0 != "random":
            raise ValueError(f"x0 must be None, 'random' or an array, got {x0!r}")
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(device, dtype)
    return _batched(problem, _node_data("x0", x0, problem.n, (problem.dim,))).to(device, dtype)


def _reference(problem, reference, device, dtype):
    if reference is None:
        return None
    if isinstance(reference, str):
        if reference != "cvxpy":
            raise ValueError(f"reference must be None, 'cvxpy' or an array, got {reference!r}")
        from .reference import reference as centralised
        reference = centralised(problem)
    return _batched(problem, _node_data("reference", reference, problem.n, (problem.dim,))).to(device, dtype)


def _batched(problem, x):
    if x.shape[1] not in (1, problem.batch):
        raise ValueError(f"expected {problem.batch} instances, got {x.shape[1]}")
    return x.expand(problem.n, problem.batch, problem.dim).contiguous()


def _to_numpy(x, batched):
    """(n, B, d) tensor -> (B, n, d) array, or (n, d) for an unbatched problem."""
    x = x.detach().cpu().numpy().transpose(1, 0, 2)
    return x if batched else x[0]


def _result(problem, method, rho, method_params, state, rows, converged, start, x_star, network):
    history = {}
    for key in rows[0] if rows else ():
        values = torch.stack([row[key] for row in rows]).detach().cpu().numpy()
        history[key] = values if problem.batched else values[:, 0]
    return Result(
        x=_to_numpy(state["x"], problem.batched), iterations=len(rows), converged=converged, history=history,
        method=method, params={"rho": rho, **method_params}, nodes=list(problem.compiled.nodes),
        seconds=time.perf_counter() - start,
        reference=None if x_star is None else _to_numpy(x_star, problem.batched), network=network)
