"""pdmm.solve: run a method on a Problem, record its convergence, stop at tolerance or divergence."""

import copy
import ctypes
import inspect
import math
import numbers
import os
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from .decentralised import Decentralised, NetworkMixing
from .edge_index import locality_order
from .methods import METHODS, QAPDMM, NodeForm, check_mixing_options
from .mixing import check_mixing
from .network import Channel, Network, privacy_gaps, private_point
from .problem import _node_data

DIVERGENCE_GROWTH = 1e6
FROZEN_EPS = 4  # a state whose every tensor changes by <= FROZEN_EPS * eps * its RMS in a step is frozen (stalled)
DUAL_SLACK = 100  # the multipliers' test is implied by x's for rho <= DUAL_SLACK (_Bookkeeping.state_test)
RHO_FAR = 1e4  # rho * degree / L beyond [1 / RHO_FAR, RHO_FAR]: named when a run does not converge (rho_advice)
STATUSES = ("converged", "max_iter", "stalled", "diverged", "interrupted")
DEFAULT_TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
CHECK_EVERY = 10  # iterations between stopping tests: each test reads a few numbers back from the device
CHECK_EVERY_NODES = 50  # the same in the node form, where the test's edge residual costs 0.5-3 steps
HISTORY = ("residual", "objective", "error", "messages", "bits", "privacy_x", "privacy_messages")
COUNTS = ("messages", "bits")  # cumulative, float64 whatever the run's dtype
LARGE_GRAPH_EDGES = 2**16  # directed edges from which solve renumbers nodes (reorder=None) and sums the edge state
# out (form=None) by default; smaller graphs stay in cache whatever the order and keep today's edge form bit for bit
MMAP_LIMIT = 32 * 2**20  # bytes; glibc maps every allocation above this afresh by default (its mmap threshold cap)
_tuned = False  # whether solve has applied tune_allocator() in this process


@dataclass
class Result:
    """x: (n, d), or (B, n, d) for batched problems, rows in G.nodes order (labels in `nodes`);
    history: the recorded rows (solve's `history=` and `record_every=`), "iteration" (rows,) the
    iteration of each row and per entry an array (rows,) or (rows, B): "residual", "objective",
    "messages" and "bits" (cumulative messages delivered and bits sent), with a reference "error",
    with network privacy "privacy_x" and "privacy_messages"; iterations: how many were run (the
    state in x); reference: the x* the error was measured against; network: the simulated network
    (None: ideal); status: how the run ended, one of STATUSES: "converged" (the stopping test or
    target passed; `converged` is True exactly then), "max_iter", "stalled" (the state stopped
    changing short of the tolerance: more iterations would not help), "diverged" (the Result of a
    DivergenceError) or "interrupted" (Ctrl-C); see solve's "Stopping test"."""

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
    status: str | None = None  # None: from converged ("converged" or "max_iter"), for Results built by hand

    def __post_init__(self):
        if self.status is None:
            self.status = "converged" if self.converged else "max_iter"
        if self.status not in STATUSES or (self.status == "converged") != bool(self.converged):
            raise ValueError(
                f"status must be one of {STATUSES}, 'converged' exactly when converged is True; got "
                f"status={self.status!r}, converged={self.converged!r}"
            )

    @property
    def stalled(self) -> bool:
        """Whether the run stopped because its state no longer changed, short of the tolerance."""
        return self.status == "stalled"

    def __repr__(self):
        last = {k: float(np.max(v[-1])) for k, v in self.history.items() if k != "iteration" and len(v)}
        summary = "".join(f", {k}={v:.3g}" for k, v in last.items())
        return f"Result({self.method}, iterations={self.iterations}, status={self.status}{summary})"


class ConvergenceWarning(UserWarning):
    """pdmm.solve stopped at max_iter, or stalled, without meeting its stopping test (tol > 0); like
    scikit-learn's ConvergenceWarning. Silence it with warnings.filterwarnings("ignore",
    category=pdmm.ConvergenceWarning); a run with tol=0 runs all its iterations and never warns."""


class DivergenceError(RuntimeError):
    """The iterates became non-finite or the residual grew by DIVERGENCE_GROWTH; `.result` holds the run so far."""

    def __init__(self, message, result):
        super().__init__(message)
        self.result = result


def tune_allocator():
    """Make glibc keep freed memory for reuse instead of returning it to the OS.

    Large graphs allocate edge tensors of many MB every iteration; by default glibc maps each one
    above 32 MB fresh and pays a page fault per 4 kB (2-4x slower iterations at 10^6 edges, d = 16,
    BENCHMARKS.md). Sets M_MMAP_MAX = 0 and M_TRIM_THRESHOLD = 2 GB for this process: its freed
    memory then stays with it until it exits. Returns False where there is no glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))


def solve(
    problem,
    method="pdmm",
    rho=None,
    max_iter=1000,
    tol=None,
    reference=None,
    device="cpu",
    dtype=torch.float64,
    seed=0,
    x0=None,
    progress=False,
    compile=False,
    network=None,
    target=None,
    history=None,
    record_every=None,
    check_every=None,
    backend="local",
    partition=None,
    reorder=None,
    form=None,
    **method_params,
):
    """Solve `problem` with "pdmm" (theta=1, or 1/2 for averaged), "qa-pdmm" (eta) or "admm", a consensus
    problem with "dgd" (mixing, alpha, step), "extra" (PG-EXTRA for lasso), "nids" or "gradient-tracking"
    (mixing, alpha; docs/decentralised.md), or an averaging problem (pdmm.averaging) with "gossip" or
    "chebyshev" (mixing, interval; docs/averaging.md).

    rho: the penalty parameter of pdmm, qa-pdmm and admm, None meaning 1.0; the methods on a mixing
    matrix have none and refuse it, as they refuse backend="distributed" (one process); gossip and
    chebyshev also refuse network (docs/decentralised.md section 9) and x0, as they start from
    x^0 = a (docs/averaging.md section 6); dgd, extra, nids and gradient-tracking take a network,
    but not its privacy nor wake="one" (docs/decentralised.md sections 7 and 9).

    Stops, converged, when the residual RMS and the RMS change of x both fall to tol * S, S = max(s, RMS of x),
    s = min(1, the problem's scale) (problem_scale; tol in [0, 1), default 1e-10 in float64, 1e-5 in float32)
    and, for the methods with rho, rho times the RMS change of x (the multipliers' fixed-point residual)
    falls to tol * max(DUAL_SLACK * S, RMS of the multiplier state), which a huge rho pinning x near x^0
    cannot pass (implied by the first test for rho <= DUAL_SLACK); for the methods with a step size (eta,
    alpha), 1 / step times the change of x falls to DUAL_SLACK * tol * L * S; over a network the test
    measures two ideal steps from the state reached, every state tensor included (taken only once the
    residual passes, so they cost nothing before the end of a run). On slowly converging runs
    the error left is then up to about 10 tol.
    A run whose whole state stops changing short of that (a floating-point fixed point) ends
    "stalled"; result.status says "converged", "max_iter", "stalled", "diverged" or "interrupted".
    With tol > 0, a run that ends at max_iter or stalled warns (ConvergenceWarning, naming a rho far from
    the curvature, rho_advice); tol=0 runs all max_iter iterations silently. A network over which no run
    reaches the solution (Network.stuck), a rho, theta, eta or alpha beyond what dtype resolves
    (check_rho_resolved, check_steps_resolved) and data beyond what its norms resolve (problem_scale) are
    refused (docs/guide/solve.md, "The stopping test"). The test runs every `check_every` iterations (default 10;
    50 in the node form, `form` below, where the residual the test computes over the edges costs
    0.5-3 node steps; 1 with `target`) and at max_iter, so a run stops at a multiple of
    check_every: up to check_every - 1 iterations after the first iteration that meets the test;
    the state returned is that of the iteration it stopped at. Between tests nothing is read back from the device.
    dgd, extra, nids and gradient-tracking over a network that loses messages one way or quantises settle off
    the solution where this test would pass: they are never stopped by it (docs/decentralised.md section 9).
    reference: None, "cvxpy" (solve centrally with pdmm.reference) or an array x* to report
    the relative error ||x - x*||_F / ||x*||_F per recorded iteration. x0: None (zeros), "random"
    (standard normal from `seed`) or an array shaped like x; multipliers always start at 0.
    history: the names to record, from "residual" (RMS of A_ij x_i + A_ji x_j - b_ij over the
    edges), "objective" (sum_i f_i(x_i)), "error" (needs a reference), "messages" and "bits"
    (cumulative counts, free on the ideal network) and, with network privacy, "privacy_x" and
    "privacy_messages"; None (default) records all that apply but the objective, () only the
    iteration numbers. What a recorded row costs, on large graphs: the residual a fifth to a third
    of an edge-form PDMM step or 0.5-3 node-form steps (a gather of x over the edges; free where
    the stopping test runs, which computes it anyway), the objective 5-20 %, the error and the
    privacy measures a pass over the nodes or edges each, the counts nothing. record_every: record
    every k-th iteration (k, 2k, ...) and the iteration a run stops at by convergence, divergence
    or max_iter; history["iteration"] says which. None (default) records where the stopping test
    runs, every check_every-th iteration and the last: the default history is thinned (iterations
    10, 20, ..., or 50, 100, ... in the node form, and the last; every iteration with `target`)
    and costs next to nothing. record_every=1 records every iteration. A row holds exactly what a
    record_every=1 run records there, and x does not depend on what is recorded.
    compile=True runs the step through torch.compile: 10-30 s to compile, then faster
    iterations on large graphs (see BENCHMARKS.md).
    network: a pdmm.Network (lost messages, sleeping nodes, changing edges, quantisation,
    privacy; pdmm.network) or None for the ideal network. history["messages"] and ["bits"]
    count what was delivered and sent (one message per directed edge and iteration on the ideal
    network, two for gradient-tracking and none in NIDS's first, local, iteration; 64 bits per
    float64 number); with network privacy, "privacy_x" and
    "privacy_messages" are the relative distances of x_i and of what the messages carry from
    argmin f_i (pdmm.network.privacy_gaps).
    target: also stop (converged) once every instance's reference error is <= target (needs reference).
    Divergence (non-finite iterates or recorded objective, or a residual grown DIVERGENCE_GROWTH-fold
    from iteration 1's) is tested with the stopping test and raises DivergenceError; the residual is
    computed at iteration 1, at recorded and at tested iterations only.
    Ctrl-C (KeyboardInterrupt) during the iterations returns the result of the iterations
    completed so far, with result.interrupted = True, instead of raising.
    On the CPU, a run whose edge state takes >= 32 MB calls tune_allocator() once (unless the
    environment sets `MALLOC_MMAP_MAX_` or `MALLOC_TRIM_THRESHOLD_` itself).
    backend: "local" (this process) or "distributed" (partitioned over a torch.distributed process
    group, every rank calling solve alike; pdmm.distributed); partition: distributed only, None
    (METIS, else contiguous blocks) or the rank of each node.
    reorder (local backend): how the run numbers the nodes internally, for memory locality. None
    (default): graphs with at least LARGE_GRAPH_EDGES directed edges are renumbered by reverse
    Cuthill-McKee when that brings neighbours closer (pdmm.edge_index.locality_order), smaller ones
    are run as given; True: the same at any size; False: as given; or a permutation `order` of
    the node indices (run node k = node order[k]). Results are in the graph's own order either
    way; a renumbered run adds the same numbers in another order, so it agrees with an unrenumbered
    one to rounding error, not bit for bit (where the stopping test is borderline it may stop a
    check interval earlier or later), and a network draws its random events for the renumbered
    edges and nodes (another realisation of the same process, reproducible from its seed).
    form (local backend): "edges" runs the method on its edge state (one z per directed edge,
    docs/theory/pdmm.md section 4); "nodes" sums that state out into two numbers per node
    (pdmm.methods.NodeForm, docs/theory/pdmm.md section 10: the same iterates, one sparse adjacency product per step), which
    needs pdmm or qa-pdmm, consensus constraints and no network; None (default) takes "nodes"
    where it applies on graphs with at least LARGE_GRAPH_EDGES directed edges and "edges" otherwise.
    Like renumbering, the node form agrees with the edge form to rounding error, not bit for bit.
    """
    if backend not in ("local", "distributed"):
        raise ValueError(f"backend must be 'local' or 'distributed', got {backend!r}")
    if partition is not None and backend != "distributed":
        raise ValueError("partition= needs backend='distributed'")
    if form not in (None, "edges", "nodes"):
        raise ValueError(f"form must be None, 'edges' or 'nodes', got {form!r}")
    if form is not None and backend != "local":
        raise ValueError("form= applies to backend='local'; the distributed engine runs the edge form")
    if reorder is not None and backend != "local":
        raise ValueError("reorder= applies to backend='local'; the distributed engine numbers nodes by its partition")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    rho = _resolved_rho(method, rho, network, x0, backend, compile)
    _check_count("max_iter", max_iter)
    if dtype not in DEFAULT_TOL:
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    curvature = local_curvature(problem)
    check_rho_resolved(rho, problem, dtype, curvature)
    tol = DEFAULT_TOL[dtype] if tol is None else tol
    if not (_is_real(tol) and 0 <= tol < 1):
        raise ValueError(f"tol must be a number in [0, 1) (it is relative: 1 would pass at x = 0), got {tol!r}")
    if target is not None and not (_is_real(target) and 0 < target < math.inf and reference is not None):
        raise ValueError(
            f"target must be a finite number > 0 and needs a reference, got target={target!r}, "
            f"reference={'None' if reference is None else 'given'}"
        )
    _check_count("record_every", record_every, optional=True)
    _check_count("check_every", check_every, optional=True)
    _check_seed(seed)
    _check_device(device)
    if network is not None and not isinstance(network, Network):
        raise TypeError(f"network must be a pdmm.Network or None, got {type(network).__name__}")
    stuck = None if network is None else network.stuck(problem.compiled)
    if stuck is not None:
        raise ValueError(f"network: {stuck}; no method can make progress over it")
    scale = problem_scale(problem, dtype, curvature)
    if network is not None and network.privacy is not None and method == "admm":
        raise ValueError("network privacy perturbs the z of pdmm and qa-pdmm; it is not implemented for admm")
    names = _history_names(history, reference, network)
    node_form = backend == "local" and _node_form(form, method, problem, network)
    if check_every is None:
        check_every = 1 if target is not None else CHECK_EVERY_NODES if node_form else CHECK_EVERY
    record_every = check_every if record_every is None else record_every
    try:
        inspect.signature(METHODS[method]).bind(None, None, None, rho, **method_params)
        if "channel" in method_params:
            raise TypeError("simulate a network with network=pdmm.Network(...), not channel=")
    except TypeError as err:
        raise TypeError(f"bad parameter for method {method!r}: {err}") from None
    if backend == "distributed":  # consensus only: the edge state is E x B x d on all ranks together
        from . import distributed

        _tune_for(problem.compiled.num_edges * problem.batch * problem.dim * torch.finfo(dtype).bits // 8, device)
        return _warned(
            distributed.solve(
                problem,
                method,
                rho,
                max_iter,
                tol,
                reference,
                device,
                dtype,
                seed,
                x0,
                network,
                target,
                names,
                record_every,
                check_every,
                compile,
                method_params,
                partition,
                progress=progress,
                scale=scale,
            ),
            tol,
            problem,
            rho,
        )
    order = _node_order(problem, reorder)
    ran, run_network = problem, network  # the problem and network as run: renumbered when order is given
    if order is not None:
        ran, edge_of = problem.relabelled(order)
        run_network = None if network is None else network.relabelled(order, edge_of)
        order = torch.from_numpy(order).to(device)
    graph, local, edges = ran.compile(device, dtype)
    width = edges.state_shape(problem.batch, problem.dim)[2]
    _tune_for(graph.num_edges * problem.batch * max(width, problem.dim) * torch.finfo(dtype).bits // 8, device)
    channel = (
        None
        if network is None
        else Channel(run_network, graph, problem.batch, width, dtype, vectors=METHODS[method].vectors_sent)
    )
    algorithm = METHODS[method](
        graph,
        local,
        edges,
        None if rho is None else float(rho),
        channel=channel,
        **_renumbered_params(method_params, order, problem),
    )
    if getattr(algorithm, "biased", False):  # a limit off the solution: the residual test cannot certify it
        tol = -math.inf
    check_steps_resolved(algorithm, problem, dtype, curvature)
    stiffness = _stiffness(algorithm, curvature)
    # over a network a step may change nothing by chance (every node asleep): the test measures ideal steps
    ideal = None if channel is None or tol < 0 else _ideal(algorithm).step
    if node_form:
        algorithm = NodeForm(algorithm)
    x_star = _renumbered(_reference(problem, reference, device, dtype), order)
    state = algorithm.init(_renumbered(_initial_x(problem, x0, seed, device, dtype), order))
    private = None if network is None or network.privacy is None else private_point(local, state["x"])
    step = torch.compile(algorithm.step) if compile else algorithm.step
    sent = graph.num_edges * METHODS[method].vectors_sent  # messages per round on the ideal network
    per_round = sent, sent * width * torch.finfo(dtype).bits
    book = _Bookkeeping(
        names,
        local,
        edges,
        channel,
        x_star,
        private,
        rho,
        per_round,
        record_every,
        min(max_iter // record_every + 1, 4096),
        METHODS[method].silent_rounds,
        scale=None if scale is None else scale.to(device, dtype),
        stiffness=stiffness,
        ideal=ideal,
    )
    params = dict(method_params) if rho is None else {"rho": rho, **method_params}
    run = dict(problem=problem, method=method, params=params, x_star=x_star, network=network, order=order)

    so_far = _Progress((state, 0, 0))
    start = time.perf_counter()

    def finish(status):
        state, done, rows = so_far.now
        return _result(state, done, book, rows, status, start, **run)

    with torch.no_grad(), tqdm(total=max_iter, desc=method, disable=not progress, leave=False) as bar:
        try:
            status = _iterate(
                step,
                so_far,
                book,
                max_iter,
                record_every,
                check_every,
                tol,
                target,
                method,
                rho,
                finish,
                before=None if channel is None else channel.draw,
                bar=bar if progress else None,
            )
        except KeyboardInterrupt:
            status = "interrupted"
    return _warned(finish(status), tol, problem, rho)


@dataclass
class _Progress:
    """A run so far: `now` = (state after `done` iterations, done, history rows recorded), replaced in one
    assignment, so a Ctrl-C at any point leaves the three in step."""

    now: tuple


def _iterate(
    step, progress, book, max_iter, record_every, check_every, tol, target, method, rho, finish, before=None, bar=None
):
    """Up to max_iter steps from progress.now, recording every record_every-th iteration (book.record) and testing
    every check_every-th and the last (book.check, one read from the device). Returns "converged" once the stopping
    test passes, "stalled" once the state stops changing short of it (book.check), else "max_iter".
    The residual is computed at iteration 1 (the divergence baseline), at recorded and at tested iterations only,
    once each (`seen`). Divergence raises DivergenceError with finish("diverged"), the Result so far. before():
    called before each step (a network's draws); bar: a tqdm bar, updated at the tests."""
    first, shown, posted = None, 0, -20
    for k in range(1, max_iter + 1):
        if before is not None:
            before()
        state, _, rows = progress.now
        new = step(state)
        x, seen = new["x"], {}  # seen: what iteration k has computed for its row and its test, each once
        recorded = k % record_every == 0
        if recorded:
            book.record(rows, k, x, seen)
        if first is None:  # iteration 1's residual: what the divergence test measures growth from
            first = book.residual(x, seen)
        if k % check_every and k < max_iter:
            progress.now = new, k, rows + recorded
            continue
        stop, stalled, finite, grown, largest = book.check(new, state, seen, first, rows + recorded, tol, target)
        if (stop or stalled or not finite or grown or k == max_iter) and not recorded:
            book.record(rows, k, x, seen)
            recorded = True
        progress.now = new, k, rows + recorded
        if not finite or grown:
            message = (
                f"{method} diverged at iteration {k}: "
                + (
                    "the iterates or the objective are no longer finite"
                    if not finite
                    else f"the residual grew from {first.max():.3g} to {largest:.3g}"
                )
                + (f" (rho={rho})" if rho else "")
            )
            raise DivergenceError(message, finish("diverged"))
        if bar is not None:
            bar.update(k - shown)
            shown = k
            if k - posted >= 20 or stop or stalled or k == max_iter:
                bar.set_postfix(residual=f"{largest:.2e}")
                posted = k
        if stop or stalled:
            return "converged" if stop else "stalled"
        if book.interrupted:  # a Ctrl-C that book.check has agreed on (the distributed ranks)
            return "interrupted"
    return "max_iter"


class _Bookkeeping:
    """What solve records and tests besides the step: history rows in tensors allocated ahead on
    the run's device (their capacity doubles when full), and the stopping and divergence tests."""

    def __init__(
        self,
        names,
        local,
        edges,
        channel,
        x_star,
        private,
        rho,
        per_round,
        every,
        capacity,
        silent=0,
        *,
        scale=None,
        stiffness=None,
        ideal=None,
    ):
        self.names, self.local, self.edges, self.channel, self.rho = names, local, edges, channel, rho
        # scale (B,): the problem's scale (problem_scale); the test's floor min(1, scale), 1 where it is 0 or unknown
        self.floor = None if scale is None else torch.where(scale > 0, torch.clamp(scale, max=1.0), 1.0)
        self.baseline = scale  # the least residual the divergence test measures growth from
        self.stiffness = stiffness  # (1 / step, L), each (B,), of a method with a step size (_stiffness), or None
        self.ideal = ideal  # over a network: the method's step on the ideal network, which the test measures
        self.x_star, self.private, self.per_round, self.every = x_star, private, per_round, every
        self.silent = silent  # the method's first rounds that send nothing (ideal-network counts)
        like = edges.graph.sign
        self.x_star_norm = None if x_star is None else torch.clamp(_norm(x_star), min=torch.finfo(like.dtype).tiny)
        self.stored = [name for name in names if not (name in COUNTS and channel is None)]  # ideal counts: arithmetic
        batch = local.shape[1]
        self.capacity = capacity
        self.columns = {
            name: torch.empty(
                (capacity, batch), device=like.device, dtype=torch.float64 if name in COUNTS else like.dtype
            )
            for name in self.stored
        }
        self.last = None  # (row, iteration) of a final row off the record_every grid: only the last row can be
        self.checked = 0  # rows already seen by the divergence test
        self.interrupted = False  # set by a check that learns of a Ctrl-C (distributed: every rank's, all-reduced)

    def residual(self, x, seen):
        """RMS over the edges of the constraint residual A_ij x_i + A_ji x_j - b_ij: (B,), kept in `seen`
        (what this iteration has computed) so that its row and its test share one computation."""
        if "residual" not in seen:
            seen["residual"] = _rms(self.edges.residual(x))
        return seen["residual"]

    def error(self, x, seen):
        """||x - x*||_F / ||x*||_F per instance: (B,), kept in `seen` like the residual."""
        if "error" not in seen:
            seen["error"] = _norm(x - self.x_star) / self.x_star_norm
        return seen["error"]

    def record(self, r, k, x, seen):
        """Write row r (iteration k) into the columns, reusing what the iteration has computed (seen); the row
        counts once solve commits it."""
        row = {}
        for name in self.stored:
            if name == "residual":
                row[name] = self.residual(x, seen)
            elif name == "objective":
                row[name] = self.local.value(x)
            elif name == "error":
                row[name] = self.error(x, seen)
            elif name in COUNTS:
                row[name] = getattr(self.channel, name)
            elif "privacy_x" not in row:
                row["privacy_x"], row["privacy_messages"] = privacy_gaps(
                    x, self.channel.sent, self.private, self.edges, self.rho
                )
        if r == self.capacity:
            self.columns = {name: torch.cat([c, torch.empty_like(c)]) for name, c in self.columns.items()}
            self.capacity *= 2
        for name in self.stored:
            self.columns[name][r] = row[name]
        self.last = None if k % self.every == 0 else (r, k)

    def sizes(self, x, x_old):
        """(RMS of x, RMS of x - x_old) per instance, (B,) each, and whether every entry of x is finite."""
        return _rms(x), _rms(x - x_old), torch.isfinite(x).all()

    def state_sizes(self, t, t_old):
        """(RMS of t, RMS of t - t_old) per instance, (B,) each, for a state tensor (N, B, m) other than x."""
        return _rms(t), _rms(t - t_old)

    def state_test(self, new, old, tol, scale, change):
        """(passes, frozen), 0-dim bool tensors, from the method's state besides x (z, u, x_half, ...;
        docs/guide/solve.md, "The stopping test"). passes: the fixed-point residual of the multipliers, rho * (RMS change of x), what one step
        moves them by, is <= tol * max(DUAL_SLACK * scale, their RMS), so a large rho (x pinned while the
        multipliers still travel) cannot pass with x stuck near x^0; with rho <= DUAL_SLACK this follows from the
        test on x, and methods without rho pass. Over a network (self.ideal: new is two ideal steps from old) every
        state tensor's own change must also be <= tol * max(DUAL_SLACK * scale, its RMS): a message lost for good
        leaves its z where it was, a fixed point of the lossy step whose x is not the solution, which an ideal step
        moves in z (two steps, as pdmm with theta = 1 flips the part of z that x never sees, such as network
        privacy's perturbation, at every step). frozen: every state tensor changed by at most FROZEN_EPS * eps * its RMS in the step
        (rounding only): the step no longer moves the state."""
        eps = FROZEN_EPS * torch.finfo(scale.dtype).eps
        frozen = torch.ones((), dtype=torch.bool, device=scale.device)
        settled = torch.ones((), dtype=torch.bool, device=scale.device)
        largest = torch.zeros_like(scale)
        for key, t in new.items():
            before = old.get(key)
            if (
                key == "x"
                or not (torch.is_tensor(t) and t.dim() == 3 and t.is_floating_point())
                or not (torch.is_tensor(before) and before.shape == t.shape)
            ):
                continue
            size, moved = self.state_sizes(t, before)
            frozen = frozen & (moved <= eps * size).all()
            largest = torch.maximum(largest, size)
            if self.ideal is not None:
                settled = settled & (moved <= tol * torch.maximum(DUAL_SLACK * scale, size)).all()
        if self.rho is None:
            return settled, frozen
        passes = (self.rho * change <= tol * torch.maximum(DUAL_SLACK * scale, largest)).all()
        return passes & settled, frozen

    def scale(self, size):
        """The stopping test's scale per instance, max(floor, RMS of x); floor = min(1, the problem's scale), or 1."""
        return torch.clamp(size, min=1.0) if self.floor is None else torch.maximum(size, self.floor)

    def check(self, new, old, seen, first, rows, tol, target):
        """(stop, stalled, finite, grown, largest residual) after the step from state `old` to `new`: the
        stopping test, the stall test and the divergence test, in one read from the device; rows: those
        recorded up to this iteration's.

        stop: the residual and the change of x are <= tol * max(floor, RMS of x), floor = min(1, the problem's
        scale), the method's multipliers pass state_test and a method with a step size its step test (or the
        target error is reached); over a network (self.ideal) the changes are two ideal steps' from `new`;
        stalled: not stop, yet x and the whole state are frozen (a floating-point fixed point short of tol, or a
        step that changes nothing), tested with tol > 0 for pdmm, qa-pdmm and admm on the ideal network only
        (docs/guide/solve.md, "The stopping test")."""
        x = new["x"]
        residual = self.residual(x, seen)
        size, change, finite = self.sizes(x, old["x"])
        # over a network a random step may change nothing (all asleep): two ideal steps from here must not (two:
        # pdmm's theta = 1 flips z's privacy part). Taken only where the residual test already passes (one more
        # read from the device), so a run pays for them near its end, not at every test
        if self.ideal is not None and _read((residual <= tol * self.scale(size)).all())[0]:
            old, new = new, self.ideal(self.ideal(new))
            size, change, ideal_finite = self.sizes(new["x"], old["x"])
            finite = finite & ideal_finite
        scale = self.scale(size)
        passes, frozen = self.state_test(new, old, tol, scale, change)
        if self.stiffness is not None:  # a tiny step moves x little however far it is: 1/step * change is the
            inverse_step, curvature = self.stiffness  # fixed-point residual in gradient units, against L's
            passes = passes & (inverse_step * change <= tol * DUAL_SLACK * curvature * scale).all()
        stop = (residual <= tol * scale).all() & (change <= tol * scale).all() & passes
        if target is not None:
            stop |= (self.error(x, seen) <= target).all()
        frozen = frozen & (change <= FROZEN_EPS * torch.finfo(x.dtype).eps * size).all()
        # tol=0: every iteration; a network: random steps; the methods on a mixing matrix: some settle off the
        # solution by design (constant-step dgd) and run to max_iter as before
        watched = 0 < tol < math.inf and self.channel is None and self.rho is not None
        stalled = ~stop & frozen & watched
        finite = finite & torch.isfinite(residual).all()
        if "objective" in self.columns:  # every objective recorded since the last test
            finite &= torch.isfinite(self.columns["objective"][self.checked : rows]).all()
        floor = torch.clamp(first, min=math.sqrt(torch.finfo(x.dtype).eps) * scale)
        if self.baseline is not None:  # a first residual of 0 (nothing moved yet) is no baseline for growth
            floor = torch.maximum(floor, self.baseline)
        grown = (residual > DIVERGENCE_GROWTH * floor).any()
        stop, stalled, finite, grown, largest = _read(stop, stalled, finite, grown, residual.max())
        self.checked = rows
        return bool(stop), bool(stalled), bool(finite), bool(grown), largest

    def arrays(self, rows, batched):
        """The history as numpy arrays: "iteration" (rows,) and each name (rows, B), or (rows,) unbatched."""
        iterations = np.arange(1, rows + 1, dtype=np.int64) * self.every
        if self.last is not None and self.last[0] == rows - 1:
            iterations[-1] = self.last[1]
        history = {"iteration": iterations}
        for name in self.names:
            if name in self.columns:
                values = self.columns[name][:rows].cpu().numpy()
            else:  # the ideal network: every directed edge delivers the same messages in every sending round
                rounds = np.maximum(iterations - self.silent, 0)
                values = np.repeat(
                    (rounds * self.per_round[COUNTS.index(name)]).astype(np.float64)[:, None], self.local.shape[1], 1
                )
            history[name] = values if batched else values[:, 0]
        return history


def _read(*values):
    """The values (0-dim tensors) as Python floats, in one read from the device."""
    return torch.stack([v.to(torch.float64) for v in values]).tolist()


def _tune_for(nbytes, device):
    """tune_allocator() once, for a CPU run whose edge state takes nbytes >= MMAP_LIMIT, unless the
    environment already chose glibc's settings."""
    global _tuned
    if _tuned or nbytes < MMAP_LIMIT or torch.device(device).type != "cpu":
        return
    if not any(name in os.environ for name in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")):
        tune_allocator()
    _tuned = True


def _check_count(name, value, optional=False):
    """ValueError unless value is an integer >= 1 (or None, where optional)."""
    if optional and value is None:
        return
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be {'None or ' if optional else ''}an integer >= 1, got {value!r}")


def _history_names(history, reference, network):
    """The history entries to record, in HISTORY order; ValueError for unknown or inapplicable names."""
    private = network is not None and network.privacy is not None
    if history is None:  # all that apply but the objective, an extra pass over the nodes per row
        return [
            name
            for name in HISTORY
            if name != "objective"
            and (name != "error" or reference is not None)
            and (not name.startswith("privacy") or private)
        ]
    names = [history] if isinstance(history, str) else history
    try:
        names = set(names)
    except TypeError:
        raise ValueError(f"history must be None or a collection of names from {HISTORY}, got {history!r}") from None
    unknown = sorted(map(str, names - set(HISTORY)))
    if unknown:
        raise ValueError(f"unknown history entries {unknown}; choose from {', '.join(HISTORY)}")
    if "error" in names and reference is None:
        raise ValueError("history 'error' needs a reference (reference='cvxpy' or an array x*)")
    if not private and names & {"privacy_x", "privacy_messages"}:
        raise ValueError("history 'privacy_x' and 'privacy_messages' need network=pdmm.Network(privacy=...)")
    return [name for name in HISTORY if name in names]


def _resolved_rho(method, rho, network, x0, backend, compile):
    """rho as the run uses it: 1.0 for None, else checked, for the methods with a penalty parameter; None for
    the methods on a mixing matrix, which refuse rho and the other options they do not take."""
    if not METHODS[method].uses_rho:
        check_mixing_options(method, rho, network, x0, backend, compile)
        return None
    rho = 1.0 if rho is None else rho
    if not (_is_real(rho) and math.isfinite(rho) and rho > 0):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    return rho


def check_rho_resolved(rho: float | None, problem, dtype: torch.dtype, curvature=None) -> None:
    """ValueError where rho is beyond what dtype resolves for a consensus problem, either way: rho * eps * d_i
    exceeds every local curvature L_i (smoothness of f_i's smooth part), so that every node update x_i = argmin
    f_i(x) + ... + rho d_i / 2 ||x||^2 rounds f_i away and no iteration can move x towards the solution; or
    rho * d_i is below eps * L_i at every node, so that the penalty rounds away against every f_i and the
    multipliers, which grow by rho times the residual per step, would need more than 1 / eps steps to move
    any x_i (docs/guide/solve.md, "The stopping test"). curvature: local_curvature(problem) where already computed. Problems
    without a curvature bound (or with edge matrices) are left to the stopping test."""
    if rho is None or not problem.is_consensus:
        return
    curvature = local_curvature(problem) if curvature is None else curvature
    if curvature is None:
        return
    eps, dtype_name = torch.finfo(dtype).eps, str(dtype).removeprefix("torch.")
    largest, smallest = float(curvature.max()), float(curvature.min())
    degree = problem.compiled.degree
    penalty = rho * int(degree.min()) * eps
    if penalty > largest:
        raise ValueError(
            f"rho={rho:g} is beyond what {dtype_name} resolves for this problem: rho * eps * degree = "
            f"{penalty:.3g} exceeds the largest local curvature L = {largest:.3g}, so every node "
            f"update rounds f_i away; use rho <= {largest / (int(degree.min()) * eps):.3g}"
        )
    coupling = rho * int(degree.max())
    if smallest > 0 and coupling < eps * smallest:
        raise ValueError(
            f"rho={rho:g} is below what {dtype_name} resolves for this problem: rho * degree = "
            f"{coupling:.3g} is below eps * L = {eps * smallest:.3g} at every node, so the penalty "
            "rounds away in every node update and the multipliers would need more than 1/eps "
            f"iterations to move x; use rho near the local curvature L = {smallest:.3g}"
        )


def local_curvature(problem) -> torch.Tensor | None:
    """L_i per node and instance, (n, B): the smoothness of f_i's smooth part (LocalFunction.composite); None where
    the local functions have none."""
    try:
        return problem.local.composite()[0].smoothness()
    except (ValueError, NotImplementedError):
        return None


def problem_scale(problem, dtype: torch.dtype, curvature=None) -> torch.Tensor | None:
    """(B,) float64 on the CPU: per instance, the RMS over the nodes of ||grad s_i(0)|| / L_i, s_i the smooth part
    of f_i (a lower bound on ||argmin s_i||), the size of the problem's solution unless every f_i is minimised
    near 0 (with edge matrices at least RMS ||b_ij|| / max ||A_ij||, the size the constraints ask of x); None
    where the local functions do not say (no gradient or curvature). It sets the stopping test's
    floor, min(1, scale) in place of 1, so that data of size 1e-8 is not "converged" at x = 0
    (docs/guide/solve.md, "The stopping test"). ValueError where it is beyond what dtype's norms resolve (their squares under- or overflow:
    below sqrt(tiny) / eps or above sqrt(max) / 10^4). curvature: local_curvature(problem) where computed."""
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
        unit = ratio / torch.where(largest > 0, largest, 1.0).view(1, -1, 1)
        scale = (largest * torch.sqrt((unit * unit).sum(-1).mean(0))).cpu()
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


def _stiffness(algorithm, curvature):
    """(1 / step, L), each (B,) on the run's device, for a method whose x moves by a step size: qa-pdmm
    (1 / step = max_i eta_i) and dgd, extra, nids and gradient-tracking (1 / alpha); L = max_i L_i of the smooth
    part (curvature: local_curvature, (n, B), or None). With a tiny step x moves little however far it is from
    the solution, so the test asks 1 / step times the change of x to be small against L (_Bookkeeping.check;
    implied by the change test for eta = L or alpha = "auto"). None for the other methods."""
    if isinstance(algorithm, QAPDMM):
        inverse = algorithm.eta.amax(0)
    elif isinstance(algorithm, Decentralised):
        inverse = 1 / algorithm.alpha.reshape(-1)
    else:
        return None
    if curvature is None:
        return None
    return inverse, curvature.amax(0).to(inverse.device, inverse.dtype)


def check_steps_resolved(algorithm, problem, dtype: torch.dtype, curvature=None) -> None:
    """ValueError where a method's step is beyond what dtype resolves, so that no iteration can move its state:
    pdmm's and qa-pdmm's theta below eps ((1 - theta) z + theta y rounds to z), qa-pdmm's eta above (L + rho
    degree) / eps and the decentralised methods' alpha below eps / L (every gradient step rounds away against x;
    L = max_i L_i, docs/guide/solve.md, "The stopping test"). algorithm: the method built for the run (pdmm.METHODS[method](...));
    curvature: local_curvature(problem) where computed."""
    eps, dtype_name = torch.finfo(dtype).eps, str(dtype).removeprefix("torch.")
    theta = getattr(algorithm, "theta", None)
    if isinstance(theta, float) and theta < eps:
        raise ValueError(
            f"theta={theta:g} is below what {dtype_name} resolves: the averaging (1 - theta) z + theta y "
            f"rounds to z, so z never moves; use theta in [{eps:.3g}, 1] (1/2: averaged PDMM)"
        )
    stiffness = _stiffness(algorithm, local_curvature(problem) if curvature is None else curvature)
    if stiffness is None:
        return
    inverse, L = (float(t.max()) for t in stiffness)
    if isinstance(algorithm, QAPDMM):
        coupling = (
            0.0
            if algorithm.rho is None or not problem.is_consensus
            else algorithm.rho * int(problem.compiled.degree.max())
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


def _ideal(algorithm):
    """A copy of `algorithm` (built with a channel) that steps as on the ideal network: the step whose fixed point
    is the solution, which the stopping test measures over a network (a random step may move nothing)."""
    twin = copy.copy(algorithm)
    twin.channel = None
    product = getattr(algorithm, "product", None)
    if isinstance(product, NetworkMixing):
        twin.product = copy.copy(product)
        twin.product.channel = None
    return twin


def _check_seed(seed):
    """ValueError unless seed is an integer torch.manual_seed takes: -2^63 .. 2^64 - 1."""
    if not (isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and -(2**63) <= seed < 2**64):
        raise ValueError(f"seed must be an integer from -2^63 to 2^64 - 1, got {seed!r}")


def _check_device(device):
    """ValueError for a device that is not a torch device, holds no data (meta) or is not on this machine."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda', got {device!r}") from None
    if kind == "meta":
        raise ValueError("device='meta' holds no data; solve on 'cpu' or a GPU ('cuda')")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but CUDA is not available")
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"device={device!r} is not available on this machine: {reason}") from None


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _rms(v):
    """Root mean square over nodes/edges of the per-row vector norm: (N, B, m) -> (B,)."""
    return torch.linalg.vector_norm(v, dim=(0, 2)) / math.sqrt(len(v))


def _norm(v):
    """Frobenius norm per instance: (n, B, d) -> (B,)."""
    return torch.linalg.vector_norm(v, dim=(0, 2))


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


def _node_form(form, method, problem, network):
    """Whether the run sums its edge state out (pdmm.methods.NodeForm); ValueError where form="nodes" cannot."""
    why = (
        "it needs method 'pdmm' or 'qa-pdmm'"
        if method not in ("pdmm", "qa-pdmm")
        else "it needs consensus constraints"
        if not problem.is_consensus
        else "a simulated network acts on each edge's messages"
        if network is not None
        else None
    )
    if form == "nodes" and why:
        raise ValueError(f"form='nodes' is not available here: {why} (use form='edges' or None)")
    return why is None and (form == "nodes" or (form is None and problem.compiled.num_edges >= LARGE_GRAPH_EDGES))


def _node_order(problem, reorder):
    """The run's node order ((n,) int64 numpy, run node k = node order[k]) or None to run the graph as given."""
    if reorder is None or isinstance(reorder, bool):
        if reorder is False or (reorder is None and problem.compiled.num_edges < LARGE_GRAPH_EDGES):
            return None
        return locality_order(problem.compiled)
    order = np.asarray(reorder)
    if (
        order.shape != (problem.n,)
        or order.dtype.kind not in "iu"
        or not np.array_equal(np.sort(order), np.arange(problem.n))
    ):
        raise ValueError(
            f"reorder must be None, True, False or a permutation of the {problem.n} node indices "
            f"0..{problem.n - 1}, got {reorder!r:.80}"
        )
    return order.astype(np.int64)


def _renumbered_params(params, order, problem):
    """The method parameters for the run's node order: a per-node eta (first axis n) reordered with the nodes, a
    mixing matrix (checked in the graph's own order, so that errors name its nodes) permuted to W[order][:, order]."""
    eta, mixing, n = params.get("eta"), params.get("mixing"), problem.n
    if order is not None and mixing is not None and not isinstance(mixing, str):
        index = order.cpu().numpy()
        return {**params, "mixing": check_mixing(mixing, problem.compiled)[index][:, index]}
    if order is None or eta is None or isinstance(eta, str) or np.ndim(eta) == 0 or len(eta) != n:
        return params
    eta = eta.detach().cpu() if torch.is_tensor(eta) else torch.as_tensor(np.asarray(eta, dtype=np.float64))
    return {**params, "eta": eta.index_select(0, order.cpu())}


def _renumbered(x, order):
    """Node rows of x (n, B, d) in the run's order (x[order]); None stays None."""
    return x if x is None or order is None else x.index_select(0, order)


def _warned(result, tol, problem=None, rho=None):
    """result, after a ConvergenceWarning where a run with a stopping test (0 < tol < inf: not tol=0, nor a biased
    method's) ended at max_iter or stalled (docs/guide/solve.md, "The stopping test"); a rho far from the problem's curvature
    is named (rho_advice)."""
    if result.status in ("max_iter", "stalled") and 0 < tol < math.inf:
        far = None if problem is None else rho_advice(rho, problem)
        why, advice = (
            ("its state stopped changing", far or "tol may be below what the dtype resolves")
            if result.stalled
            else ("it reached max_iter", far or "raise max_iter or check rho")
        )
        warnings.warn(
            f"{result.method} did not converge: {why} after {result.iterations} iterations, short of "
            f"tol={tol:g} (residual {_last(result, 'residual')}); {advice}, or pass tol=0 to run a fixed "
            "number of iterations",
            ConvergenceWarning,
            stacklevel=3,
        )
    return result


def rho_advice(rho, problem) -> str | None:
    """Why a run may not have converged when its rho is far from the problem's curvature: rho * (mean degree) /
    (mean L_i) outside [1 / RHO_FAR, RHO_FAR] (PDMM's rate degrades as the ratio goes to 0 or infinity), as text;
    None for a rho near it, a method without rho, or a problem without curvature bound or with edge matrices."""
    if rho is None or not problem.is_consensus:
        return None
    try:
        curvature = float(problem.local.composite()[0].smoothness().mean())
    except (ValueError, NotImplementedError):
        return None
    degree = float(problem.compiled.degree.double().mean())
    ratio = rho * degree / curvature if curvature > 0 else math.inf
    if 1 / RHO_FAR <= ratio <= RHO_FAR:
        return None
    where = "below" if ratio < 1 else "above"
    return (
        f"rho={rho:g} is far {where} the problem's curvature: rho * mean degree / mean L_i = {ratio:.2g}, "
        "where PDMM moves slowly (pdmm.tune picks a rho)"
    )


def _last(result, name):
    """The last recorded value of history entry `name`, worst instance, as text ("not recorded" without one)."""
    values = result.history.get(name)
    return "not recorded" if values is None or not len(values) else f"{float(np.max(values[-1])):.3g}"


def _result(state, done, book, rows, status, start, problem, method, params, x_star, network, order=None):
    """The Result, with node rows back in the graph's own order where the run renumbered them (order)."""
    x = state["x"] if order is None else torch.empty_like(state["x"]).index_copy_(0, order, state["x"])
    if x_star is not None and order is not None:
        x_star = torch.empty_like(x_star).index_copy_(0, order, x_star)
    return Result(
        x=_to_numpy(x, problem.batched),
        iterations=done,
        converged=status == "converged",
        status=status,
        interrupted=status == "interrupted",
        history=book.arrays(rows, problem.batched),
        method=method,
        params=params,
        nodes=list(problem.compiled.nodes),
        seconds=time.perf_counter() - start,
        reference=None if x_star is None else _to_numpy(x_star, problem.batched),
        network=network,
    )
