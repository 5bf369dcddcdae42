"""pdmm.solve: run a method on a Problem, record its convergence, stop at tolerance or divergence."""

import ctypes
import inspect
import math
import numbers
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .building import BIASED, biased, build_method, check_rho_extremes, local_curvature, problem_scale, short_of_tol
from .edge_index import locality_order
from .loop import (
    HISTORY,
    Bookkeeping,
    ConvergenceWarning,
    DivergenceError,
    Progress,
    Result,
    RunOptions,
    Snapshot,
    initial_x,
    iterate,
    make_result,
    reference_point,
    to_numpy,
)
from .methods import METHODS, NodeForm, check_mixing_options
from .mixing import check_mixing
from .network import Channel, Network, private_point
from .parts import PartProblem
from .problem import Problem
from .protocol import Capabilities
from .settings import Engine, Recording, Stopping, is_real

RHO_FAR = 1e4  # rho * degree / L beyond [1 / RHO_FAR, RHO_FAR]: named when a run does not converge (rho_advice)
DEFAULT_TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
CHECK_EVERY = 10  # iterations between stopping tests: each test reads a few numbers back from the device
CHECK_EVERY_NODES = 50  # the same in the node form, where the test's edge residual costs 0.5-3 steps
LARGE_GRAPH_EDGES = 2**16  # directed edges from which solve renumbers nodes (reorder=None) and sums the edge state
# out (form=None) by default; smaller graphs stay in cache whatever the order and keep today's edge form bit for bit
MMAP_LIMIT = 32 * 2**20  # bytes; glibc maps every allocation above this afresh by default (its mmap threshold cap)
_memory_kept = False  # whether solve has applied keep_freed_memory() in this process


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse instead of returning it to the OS.

    Large graphs allocate edge tensors of many MB every iteration; by default glibc maps each one
    above 32 MB fresh and pays a page fault per 4 kB (2-4x slower iterations at 10^6 edges, d = 16,
    BENCHMARKS.md). Sets M_MMAP_MAX = 0 and M_TRIM_THRESHOLD = 2 GB for this process: its freed
    memory then stays with it until it exits.

    Returns
    -------
    bool
        Whether both settings took; False where there is no glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))


def solve(
    problem: "Problem | PartProblem",
    method: str = "pdmm",
    rho: float | None = None,
    max_iter: int = 1000,
    tol: float | None = None,
    reference: Any = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    x0: Any = None,
    progress: bool = False,
    compile: bool = False,
    network: Network | None = None,
    target: float | None = None,
    history: Iterable[str] | str | None = None,
    record_every: int | None = None,
    check_every: int | None = None,
    backend: str = "local",
    partition: Any = None,
    reorder: Any = None,
    form: str | None = None,
    callback: Callable[[Snapshot], Any] | None = None,
    on_divergence: str = "raise",
    gather: bool = True,
    **method_params: Any,
) -> Result:
    """Run `method` on `problem` until the stopping test passes, max_iter, a stall or a divergence, and return the
    last iterate with its recorded convergence (docs/guide/solve.md).

    The methods: "pdmm" (theta=1, or 1/2 for averaged), "qa-pdmm" (eta) and "admm" on any problem; "dgd",
    "extra" (PG-EXTRA for lasso), "nids" and "gradient-tracking" on a mixing matrix, for consensus problems
    (docs/decentralised.md); "gossip" and "chebyshev" for averaging problems (pdmm.averaging, docs/averaging.md).

    Parameters
    ----------
    problem : pdmm.Problem or pdmm.PartProblem
        The problem, or this rank's part of it (backend="distributed"; docs/guide/distributed.md, "Each rank
        holds its part").
    method : str
        A key of pdmm.METHODS.
    rho : float or None
        The penalty parameter of pdmm, qa-pdmm and admm, a finite number > 0; None: 1.0 for them, and the only
        value the methods on a mixing matrix take.
    **method_params
        The method's own parameters: theta (pdmm), eta (qa-pdmm), mixing, alpha, step (dgd, extra, nids,
        gradient-tracking), interval (chebyshev).
    max_iter : int
        Iterations at most, >= 1.
    tol : float or None
        The stopping test's tolerance, in [0, 1); None: 1e-10 in float64, 1e-5 in float32; 0 applies no test and
        runs all max_iter iterations (Notes).
    target : float or None
        Also stop, converged, once every instance's reference error is <= target (needs `reference`).
    reference : str, array_like or None
        None, "cvxpy" (pdmm.reference solves the problem centrally) or an array x*, against which history["error"]
        measures ||x - x*||_F / ||x*||_F.
    x0 : str, array_like or None
        None (zeros), "random" (standard normal from `seed`) or an array shaped like x; multipliers start at 0.
    seed : int
        The seed of x0="random", -2^63 .. 2^64 - 1.
    network : pdmm.Network or None
        A simulated network (lost messages, sleeping nodes, changing edges, quantisation, privacy), or None for the
        ideal one. One over which no run reaches the solution (Network.stuck) is refused.
    history : iterable of str, str or None
        The entries to record: "residual" (RMS of A_ij x_i + A_ji x_j - b_ij over the edges), "objective"
        (sum_i f_i(x_i)), "error" (needs `reference`), "messages" and "bits" (cumulative counts delivered and
        sent, docs/decentralised.md section 7) and, with network privacy, "privacy_x" and "privacy_messages"
        (pdmm.network.privacy_gaps). None: all that apply but the objective; (): the iteration numbers only.
    record_every : int or None
        Record every k-th iteration and the one the run stops at (history["iteration"] says which); None: where
        the stopping test runs, every check_every-th iteration. What is recorded never changes x.
    check_every : int or None
        Iterations between stopping tests; None: 10, 50 in the node form, 1 with `target`.
    callback : callable or None
        Local backend: called as callback(pdmm.Snapshot) at every recorded row; a true return stops the run, with
        status "callback" (docs/guide/solve.md, "Watching a run").
    on_divergence : str
        What a run that diverges does: "raise" DivergenceError (its `.result` holds the run so far) or "return"
        that Result, with status "diverged".

    Returns
    -------
    Result
        The last iterate x, how the run ended (status, message), the recorded history, the objective at x (fun);
        it also reads as scipy.optimize.OptimizeResult readers expect (docs/guide/solve.md, "The Result").

    Other Parameters
    ----------------
    device : torch.device or str
        Where the run takes place ("cpu", "cuda", ...).
    dtype : torch.dtype
        torch.float64 or torch.float32.
    progress : bool
        Whether to show a tqdm bar.
    compile : bool
        Whether to run the step through torch.compile: 10-30 s to compile, then faster iterations on large graphs
        (BENCHMARKS.md).
    backend : str
        "local" (this process) or "distributed" (partitioned over a torch.distributed process group, every rank
        calling solve alike; pdmm.distributed).
    partition : array_like or None
        Distributed backend: the rank of each node; None: METIS, else contiguous blocks.
    gather : bool
        Distributed backend: True (default), every rank returns the whole x in the graph's node order; False,
        each rank returns its own nodes' rows, result.nodes holding their global ids (docs/guide/distributed.md,
        "Each rank holds its part"). With a pdmm.parts.PartProblem in place of the problem, each rank passes
        only its part.
    reorder : bool, array_like or None
        Local backend: how the run numbers the nodes, for memory locality (docs/guide/solve.md, "Node order").
        None: reverse Cuthill-McKee from LARGE_GRAPH_EDGES directed edges, where it brings neighbours closer;
        True: at any size; False: as given; or a permutation of the node indices. Results are in the graph's own
        order either way.
    form : str or None
        "edges" (the method's edge state) or "nodes" (summed out, two numbers per node: pdmm and qa-pdmm on
        consensus constraints without a network; docs/guide/solve.md, "Node form"), on either backend; None: "nodes"
        where it applies from LARGE_GRAPH_EDGES directed edges (the whole graph's), else "edges".

    Raises
    ------
    ValueError
        For any argument out of its range, each message naming the argument and the value: an unknown method,
        backend, form or on_divergence, options the method or backend does not take, a rho, theta, eta or alpha
        beyond what dtype resolves (check_rho_resolved, check_steps_resolved), data beyond what its norms resolve
        (problem_scale), a stuck network, or history names that do not apply.
    TypeError
        For a network that is not a pdmm.Network, a callback that is not callable, or a parameter the method does
        not take.
    RuntimeError
        For backend="distributed" without an initialised process group; pdmm.collectives.CollectiveError, a
        RuntimeError, when another rank ends or does not answer.
    DivergenceError
        When the run diverges and on_divergence is "raise"; its `.result` holds the run so far.

    Warns
    -----
    ConvergenceWarning
        With tol > 0, for a run that ends at max_iter or stalled, naming a rho far from the problem's curvature
        (rho_advice).

    Notes
    -----
    The stopping test (docs/guide/solve.md, "The stopping test"; docs/theory/pdmm.md section 11) passes where, in
    every instance, the residual is small against the size of x and an optimality certificate measured at the
    iterate holds (pdmm.certificate); it runs every check_every iterations and at max_iter, the run's only reads
    from the device. A run whose whole state stops changing short of it ends "stalled". dgd, extra, nids and
    gradient-tracking over a network that loses messages one way or quantises are never stopped by it
    (docs/decentralised.md section 9).

    Divergence, tested with it: non-finite iterates or recorded objective, or a residual grown
    DIVERGENCE_GROWTH-fold from iteration 1's. Ctrl-C during the iterations returns the Result so far, status
    "interrupted".

    The methods on a mixing matrix refuse rho; gossip and chebyshev also refuse network
    and x0 (they start from x^0 = a, docs/averaging.md section 6); dgd, extra, nids and gradient-tracking take a
    network, but not its privacy nor wake="one" (docs/decentralised.md sections 7 and 9).

    ``solve(problem, **kw)`` is ``pdmm.plan(problem, **kw).run()``: every argument is checked there, once, before any
    iteration (docs/guide/solve.md, "Plan and run").

    On the CPU, a run whose edge state takes >= 32 MB calls keep_freed_memory() once (docs/guide/solve.md, "Large
    graphs"). The loop, its bookkeeping and the Result live in pdmm/loop.py, shared by both backends
    (docs/guide/solve.md, "Where the code lives").

    Examples
    --------
    >>> import numpy as np
    >>> import pdmm
    >>> G = pdmm.topology("ring", n=8)
    >>> problem = pdmm.averaging(G, np.arange(8.0))  # f_i(x) = 1/2 (x - i)^2, solved by x_i = 3.5
    >>> result = pdmm.solve(problem, tol=1e-8, history=("residual", "objective"))
    >>> result.status, result.success
    ('converged', True)
    >>> result.message  # doctest: +ELLIPSIS
    'converged: the stopping test (tol=1e-08) passed at iteration ...'
    >>> bool(np.allclose(result.x, 3.5)), round(result.fun, 6)  # fun: sum_i f_i(x_i) at x
    (True, 21.0)
    >>> result["nit"] == result.iterations, sorted(result.history)  # scipy's name; the recorded rows
    (True, ['iteration', 'objective', 'residual', 'time'])

    A run that diverges returns its Result with on_divergence="return" instead of raising:

    >>> wrong = pdmm.solve(problem, method="chebyshev", interval=(-0.2, 0.95), on_divergence="return")
    >>> wrong.status, wrong.success
    ('diverged', False)
    """
    return plan(
        problem,
        method=method,
        rho=rho,
        max_iter=max_iter,
        tol=tol,
        reference=reference,
        device=device,
        dtype=dtype,
        seed=seed,
        x0=x0,
        progress=progress,
        compile=compile,
        network=network,
        target=target,
        history=history,
        record_every=record_every,
        check_every=check_every,
        backend=backend,
        partition=partition,
        reorder=reorder,
        form=form,
        callback=callback,
        on_divergence=on_divergence,
        gather=gather,
        **method_params,
    ).run()


def plan(
    problem: "Problem | PartProblem",
    method: str = "pdmm",
    rho: float | None = None,
    max_iter: int = 1000,
    tol: float | None = None,
    reference: Any = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    x0: Any = None,
    progress: bool = False,
    compile: bool = False,
    network: Network | None = None,
    target: float | None = None,
    history: Iterable[str] | str | None = None,
    record_every: int | None = None,
    check_every: int | None = None,
    backend: str = "local",
    partition: Any = None,
    reorder: Any = None,
    form: str | None = None,
    callback: Callable[[Snapshot], Any] | None = None,
    on_divergence: str = "raise",
    gather: bool = True,
    *,
    stopping: Stopping | None = None,
    recording: Recording | None = None,
    engine: Engine | None = None,
    **method_params: Any,
) -> "Plan":
    """Check a run of `method` on `problem` once, before any iteration, and return it ready to run:
    ``pdmm.solve(problem, **kw)`` is ``plan(problem, **kw).run()`` (docs/guide/solve.md, "Plan and run").

    Every argument is pdmm.solve's, with its meaning and default; the settings may also come in their groups,
    pdmm.Stopping, pdmm.Recording and pdmm.Engine. plan refuses each bad input with the ValueError or
    TypeError pdmm.solve gives for it: the settings' ranges, rho (refused by the methods without one, else a finite
    number > 0 that dtype resolves), the method's Capabilities (pdmm.protocol) against the problem, the network, x0,
    the backend and compile, the method's own parameters, dtype and device. On the local backend it also builds the
    method on the problem (renumbered, in the node form, over the network's channel as the settings say), so that
    its parameters are checked where the run would check them; the distributed engine builds its part on each rank
    when the plan runs (pdmm.distributed).

    Parameters
    ----------
    problem : pdmm.Problem or pdmm.PartProblem
        The problem, or this rank's part of it (backend="distributed"; docs/guide/distributed.md, "Each rank
        holds its part").
    method : str
        A key of pdmm.METHODS.
    rho, max_iter, tol, reference, device, dtype, seed, x0, progress, compile, network, target
        As pdmm.solve takes them.
    history, record_every, check_every, backend, partition, reorder, form, callback, on_divergence, gather
        As pdmm.solve takes them.
    **method_params
        As pdmm.solve takes them.
    stopping, recording, engine : pdmm.Stopping, pdmm.Recording, pdmm.Engine or None
        The same settings in their groups (pdmm.settings), each checked when made; None: the group of the keywords.
        A group comes instead of its keywords: one of them away from its default beside it is a ValueError.

    Returns
    -------
    Plan
        The checked run: its resolved RunOptions (the groups with their defaults filled in), the method's
        Capabilities; Plan.run() runs it and returns pdmm.solve's Result.

    Raises
    ------
    ValueError, TypeError
        As pdmm.solve raises them for its arguments (pdmm.solve's Raises), before any iteration; a ValueError for a
        group given with one of its keywords away from its default, a TypeError for a group of the wrong kind.
    RuntimeError
        Not here: backend="distributed" needs its process group when the plan runs.

    Examples
    --------
    >>> import numpy as np
    >>> import pdmm
    >>> problem = pdmm.averaging(pdmm.topology("ring", n=8), np.arange(8.0))
    >>> run = pdmm.plan(problem, method="pdmm", rho=2.0, tol=1e-8)
    >>> run.options.rho, run.options.stopping.check_every, run.capabilities.vectors_sent
    (2.0, 10, 1)
    >>> run.run().status
    'converged'
    """
    options = checked_options(
        problem,
        method=method,
        rho=rho,
        x0=x0,
        seed=seed,
        network=network,
        method_params=method_params,
        stopping=_grouped(
            Stopping,
            stopping,
            max_iter=max_iter,
            tol=tol,
            target=target,
            check_every=check_every,
            on_divergence=on_divergence,
        ),
        recording=_grouped(
            Recording,
            recording,
            history=history,
            record_every=record_every,
            reference=reference,
            callback=callback,
            progress=progress,
        ),
        engine=_grouped(
            Engine,
            engine,
            device=device,
            dtype=dtype,
            backend=backend,
            partition=partition,
            reorder=reorder,
            form=form,
            compile=compile,
            gather=gather,
        ),
    )
    local = options.engine.backend == "local" and not isinstance(problem, PartProblem)
    ready = [_prepare(problem, options)] if local and isinstance(problem, Problem) else []
    return Plan(problem, options, METHODS[method].capabilities, ready)


@dataclass(frozen=True)
class Plan:
    """A run of pdmm.solve, checked by pdmm.plan and ready to run (docs/guide/solve.md, "Plan and run").

    Attributes
    ----------
    problem : pdmm.Problem or pdmm.PartProblem
        The problem, or this rank's part of it (backend="distributed"; docs/guide/distributed.md, "Each rank
        holds its part").
    options : RunOptions
        The settings in their groups, checked and resolved (rho, tol, check_every, record_every and the history
        names filled in; the problem's curvature and scale computed), as the engines, pdmm.batch_runs and
        pdmm.distributed take them.
    capabilities : pdmm.protocol.Capabilities
        What the method takes and does.
    ready : list of Prepared
        The local run plan built (_prepare), which the first run() takes; empty for the distributed backend and
        once taken. A plan made by with_reference shares this list with the plan it was made from.
    """

    problem: "Problem | PartProblem"
    options: RunOptions
    capabilities: Capabilities
    ready: "list[Prepared]" = field(default_factory=list, repr=False, compare=False)  # the local run built by plan

    def run(self) -> Result:
        """Run the plan: the Result pdmm.solve returns for the same arguments, bit for bit. The first run of a local
        plan starts from the method plan built; each later one builds it afresh, so it repeats the first (the same
        x0 and network draws).

        Returns
        -------
        Result
            As pdmm.solve's.

        Raises
        ------
        DivergenceError
            When the run diverges and on_divergence is "raise".
        RuntimeError
            For backend="distributed" without an initialised process group, or when another rank fails.
        """
        problem, options = self.problem, self.options
        try:
            if options.engine.backend == "distributed":  # the edge state: about E x B x d over the ranks
                from . import distributed

                bits = torch.finfo(options.engine.dtype).bits
                whole = None if isinstance(problem, PartProblem) else problem  # rho_advice reads the whole graph
                edges = len(problem.src) if isinstance(problem, PartProblem) else problem.compiled.num_edges
                _keep_freed(edges * problem.batch * problem.dim * bits // 8, options.engine.device)
                result = distributed.run(problem, options)
                return _warned(result, options.stopping.tol, whole, options.rho, BIASED if biased(options) else None)
            assert isinstance(problem, Problem)  # pdmm.plan refuses a PartProblem on the local backend
            return _run_local(problem, self._taken() if self.ready else _prepare(problem, options))
        except DivergenceError as err:
            if options.stopping.on_divergence == "raise":
                raise
            return err.result

    def with_reference(self, reference: Any) -> "Plan":
        """The same run, measuring history["error"] against `reference`, without building its method again: for a
        reference known only after the run was checked (the solve command checks its runs, then solves cvxpy's x*;
        docs/guide/solve.md, "Plan and run").

        The new plan records the history of this one and "error"; its run() returns what pdmm.plan with the same
        arguments and `reference` (history with "error") returns, bit for bit. This plan is left as it was: the two
        share the method this plan built, which the first of them to run takes (the new one with its bookkeeping
        made afresh for the reference), and the other, if run, builds its own.

        Parameters
        ----------
        reference : str or array_like
            "cvxpy" or an array x*, as pdmm.solve's `reference`.

        Returns
        -------
        Plan
            The plan with the reference.

        Raises
        ------
        ValueError
            For a reference that is not "cvxpy" nor shaped like x (local backend; the distributed one checks it
            when the plan runs).
        """
        names = {*(self.options.recording.history or ()), "error"}  # resolved by pdmm.plan: a tuple of names
        recording = replace(
            self.options.recording, reference=reference, history=tuple(name for name in HISTORY if name in names)
        )
        options = replace(self.options, recording=recording)
        if self.ready and not (isinstance(reference, str) and reference == "cvxpy"):
            reference_point(self.problem, options)  # refuse a bad array now, as pdmm.plan does; cvxpy's x* when run
        return replace(self, options=options)  # the same `ready` list: one built method, taken by the first run

    def _taken(self) -> "Prepared":
        """The built method, taken from `ready` (shared with the plans with_reference made from this one), with
        bookkeeping for this plan's reference where it was built for another plan's options."""
        run = self.ready.pop()
        return run if run.options is self.options else self._referenced(run, self.options)

    def _referenced(self, run: "Prepared", options: RunOptions) -> "Prepared":
        """The prepared run with options' reference point (in the run's node order) and bookkeeping made for it."""
        x_star = _renumbered(reference_point(self.problem, options), run.order)
        old = run.book
        book = Bookkeeping(
            options,
            local=old.local,
            edges=old.edges,
            per_round=old.per_round,
            channel=old.channel,
            x_star=x_star,
            private=old.private,
            silent=old.silent,
            certificate=old.certificate,
        )
        return replace(run, options=options, book=book, x_star=x_star)


def checked_options(
    problem: "Problem | PartProblem",
    *,
    method: str,
    rho: Any,
    x0: Any,
    seed: Any,
    network: Any,
    method_params: dict[str, Any],
    stopping: Stopping,
    recording: Recording,
    engine: Engine,
) -> RunOptions:
    """pdmm.plan's checks of a run's settings, before any work, resolved into one RunOptions (rho, tol,
    check_every, record_every and the history names filled in; the problem's curvature and scale computed). Each
    group has checked its own fields when made (pdmm.settings); here are the checks that need the method, the
    problem or two groups at once. The method itself is built and checked by _prepare (docs/guide/solve.md, "Plan
    and run")."""
    if recording.callback is not None and engine.backend != "local":
        raise ValueError("callback= applies to backend='local'; the distributed engine's ranks each hold a part of x")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    part = isinstance(problem, PartProblem)  # its whole-graph checks are made over the ranks when it runs
    if part and engine.backend != "distributed":
        raise ValueError("a PartProblem holds one rank's part: it runs on backend='distributed'")
    capabilities = METHODS[method].capabilities
    dtype, target, reference = engine.dtype, stopping.target, recording.reference
    curvature = local_curvature(problem)
    rho = checked_rho(method, rho, problem, dtype, curvature, network=network, x0=x0, compile=engine.compile)
    if target is not None and not (is_real(target) and 0 < target < math.inf and reference is not None):
        raise ValueError(
            f"target must be a finite number > 0 and needs a reference, got target={target!r}, "
            f"reference={'None' if reference is None else 'given'}"
        )
    _check_seed(seed)
    if network is not None and not isinstance(network, Network):
        raise TypeError(f"network must be a pdmm.Network or None, got {type(network).__name__}")
    stuck = None if network is None else network.stuck(None if isinstance(problem, PartProblem) else problem.compiled)
    if stuck is not None:
        raise ValueError(f"network: {stuck}; no method can make progress over it")
    scale = None if part else problem_scale(problem, dtype, curvature)  # a part's: pdmm.distributed.checked_part
    if network is not None and network.privacy is not None and capabilities.rho and not capabilities.privacy:
        raise ValueError(f"network privacy perturbs the z of pdmm and qa-pdmm; it is not implemented for {method}")
    names = _history_names(recording.history, reference, network)
    node_form = _node_form(engine.form, method, problem, network)
    check_every = stopping.check_every
    if check_every is None:
        check_every = 1 if target is not None else CHECK_EVERY_NODES if node_form else CHECK_EVERY
    try:
        inspect.signature(METHODS[method]).bind(None, None, None, rho, **method_params)
        if "channel" in method_params:
            raise TypeError("simulate a network with network=pdmm.Network(...), not channel=")
    except TypeError as err:
        raise TypeError(f"bad parameter for method {method!r}: {err}") from None
    tol = DEFAULT_TOL[dtype] if stopping.tol is None else stopping.tol
    record_every = check_every if recording.record_every is None else recording.record_every
    return RunOptions(
        method=method,
        rho=rho,
        stopping=replace(stopping, tol=tol, check_every=check_every),
        recording=replace(recording, history=tuple(names), record_every=record_every),
        engine=engine,
        x0=x0,
        seed=seed,
        network=network,
        method_params=dict(method_params),
        node_form=node_form,
        scale=scale,
        curvature=curvature,
    )


def _grouped(group: type, given: Any, **keywords: Any) -> Any:
    """The settings group `given`, or, for None, the group made of its keywords (checked when made). ValueError where
    both come: a keyword not at its default next to its group (pdmm.plan; docs/guide/solve.md, "Plan and run")."""
    if given is None:
        return group(**keywords)
    if not isinstance(given, group):
        raise TypeError(f"{group.__name__.lower()} must be a pdmm.{group.__name__} or None, got {type(given).__name__}")
    defaults = {f.name: f.default for f in fields(group)}
    both = [name for name, value in keywords.items() if not _is_default(value, defaults[name])]
    if both:
        raise ValueError(f"give {both[0]}= or {group.__name__.lower()}=, not both")
    return given


def _is_default(value: Any, default: Any) -> bool:
    """Whether a keyword holds its default: the same object, or an equal int or str (an array is never one)."""
    return value is default or (type(value) is type(default) and isinstance(value, (int, str)) and value == default)


def _run_local(problem: Problem, run: "Prepared") -> Result:
    """The local engine: the method built on this process (_prepare) run by pdmm.loop.iterate; the Result, after a
    ConvergenceWarning where one is due."""
    options, book, callback, stopping = run.options, run.book, run.options.recording.callback, run.options.stopping
    so_far = Progress((run.state, 0, 0))
    start = book.start_clock()

    def finish(status, message=""):
        state, done, rows = so_far.now
        return make_result(
            state, done, book, rows, status, start, problem, options, run.x_star, run.order, message=message
        )

    with (
        torch.no_grad(),
        tqdm(total=stopping.max_iter, desc=options.method, disable=not options.recording.progress, leave=False) as bar,
    ):
        try:
            status = iterate(
                run.step,
                so_far,
                book,
                options,
                finish,
                before=None if run.channel is None else run.channel.draw,
                bar=bar if options.recording.progress else None,
                watch=None if callback is None else _watcher(callback, run.order, problem.batched),
            )
        except KeyboardInterrupt:
            status = "interrupted"
    result = finish(status, short_of_tol(status, so_far.now[1], options))
    return _warned(result, stopping.tol, problem, options.rho, BIASED if run.biased else None)


def _watcher(callback, order, batched):
    """pdmm.loop.iterate's watch for solve's callback: the row as a read-only pdmm.Snapshot, x back in the graph's
    own node order (order: the run's renumbering, None for none); True where the callback asks to stop."""

    def watch(iteration, x, residual, elapsed):
        if order is not None:
            x = torch.empty_like(x).index_copy_(0, order, x)
        x = to_numpy(x, batched).copy()
        x.flags.writeable = False
        values = residual.cpu().numpy()
        values.flags.writeable = False
        snapshot = Snapshot(iteration, x, values if batched else float(values[0]), float(elapsed))
        return bool(callback(snapshot))

    return watch


@dataclass
class Prepared:
    """A local run ready to iterate (_prepare): its options, the step, the state x^0 and the method's, the
    bookkeeping, the reference point (in the run's node order), the run's node order (None: the graph's own), the
    simulated network's channel and whether that network biases the method's limit (pdmm.decentralised.
    network_biases)."""

    options: RunOptions
    step: Any
    state: dict
    book: Bookkeeping
    x_star: torch.Tensor | None
    order: torch.Tensor | None
    channel: Channel | None
    biased: bool = False


def _prepare(problem: Problem, options: RunOptions) -> Prepared:
    """The local engine up to its first step: the method built on this process (renumbered, in the node form or over
    a simulated network as options say), its initial state and the bookkeeping of its history and tests.

    options.rho and options.method_params' alpha may hold one value per instance, a tensor (B,) in the run's dtype and
    on its device (pdmm.tuning runs a grid of values as one batch this way): the method gets them as (1, B, 1), the
    stopping test as (B,) (docs/decentralised.md section 8).

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.
    options : RunOptions
        What pdmm.solve checked and resolved.

    Returns
    -------
    Prepared
        The run, ready for pdmm.loop.iterate.

    Raises
    ------
    ValueError
        For a step beyond what the dtype resolves (check_steps_resolved).
    """
    method, network = options.method, options.network
    device, dtype = options.engine.device, options.engine.dtype
    capabilities = METHODS[method].capabilities
    assert options.stopping.tol is not None  # resolved by pdmm.plan
    order = _node_order(problem, options.engine.reorder)
    ran, run_network = problem, network  # the problem and network as run: renumbered when order is given
    if order is not None:
        ran, edge_of = problem.relabelled(order)
        run_network = None if network is None else network.relabelled(order, edge_of)
        order = torch.from_numpy(order).to(device)
    graph, local, edges = ran.compile(device, dtype)
    width = edges.state_shape(problem.batch, problem.dim)[2]
    _keep_freed(graph.num_edges * problem.batch * max(width, problem.dim) * torch.finfo(dtype).bits // 8, device)
    channel = (
        None
        if network is None
        else Channel(run_network, graph, problem.batch, width, dtype, vectors=capabilities.vectors_sent)
    )
    algorithm, certificate = build_method(
        problem, graph, local, edges, options, _renumbered_params(options.method_params, order, problem), channel
    )
    if options.node_form:
        algorithm = NodeForm(algorithm)
    x_star = _renumbered(reference_point(problem, options), order)
    state = algorithm.init(_renumbered(initial_x(problem, options), order))
    private = None if network is None or network.privacy is None else private_point(local, state["x"])
    sent = graph.num_edges * capabilities.vectors_sent  # messages per round on the ideal network
    book = Bookkeeping(
        options,
        local=local,
        edges=edges,
        per_round=(sent, sent * width * torch.finfo(dtype).bits),
        channel=channel,
        x_star=x_star,
        private=private,
        silent=capabilities.silent_rounds,
        certificate=certificate,
    )
    step = torch.compile(algorithm.step) if options.engine.compile else algorithm.step
    return Prepared(options, step, state, book, x_star, order, channel, biased(options))


def _keep_freed(nbytes, device):
    """keep_freed_memory() once, for a CPU run whose edge state takes nbytes >= MMAP_LIMIT, unless the
    environment already chose glibc's settings."""
    global _memory_kept
    if _memory_kept or nbytes < MMAP_LIMIT or torch.device(device).type != "cpu":
        return
    if not any(name in os.environ for name in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")):
        keep_freed_memory()
    _memory_kept = True


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


def checked_rho(
    method: str,
    rho: Any,
    problem: "Problem | PartProblem",
    dtype: torch.dtype,
    curvature: torch.Tensor | None = None,
    *,
    network: Network | None = None,
    x0: Any = None,
    compile: bool = False,
) -> float | None:
    """rho as the run uses it, after every check of it (the one place pdmm.plan checks rho; docs/guide/solve.md,
    "Plan and run"): for a method with a penalty parameter (Capabilities.rho) 1.0 for None, else a finite number
    > 0 that dtype resolves on this problem (check_rho_resolved); None for the methods on a mixing matrix, which
    refuse rho and the other options they do not take (pdmm.methods.check_mixing_options).

    Parameters
    ----------
    method : str
        A key of pdmm.METHODS.
    rho : object
        What the caller passed.
    problem : pdmm.Problem
        The problem.
    dtype : torch.dtype
        The run's dtype, float64 or float32.
    curvature : torch.Tensor or None
        local_curvature(problem), where already computed.
    network, x0, compile
        The run's, as pdmm.solve takes them: what a method on a mixing matrix may refuse with rho.

    Returns
    -------
    float or None

    Raises
    ------
    ValueError
        Naming rho and its value, or the option the method does not take.
    """
    if not METHODS[method].capabilities.rho:
        check_mixing_options(method, rho, network, x0, compile)
        return None
    rho = 1.0 if rho is None else rho
    if not (is_real(rho) and math.isfinite(rho) and rho > 0):
        raise ValueError(f"rho must be a finite number > 0, got {rho!r}")
    check_rho_resolved(rho, problem, dtype, curvature)
    return rho


def check_rho_resolved(rho: float | None, problem, dtype: torch.dtype, curvature=None) -> None:
    """ValueError where rho is beyond what dtype resolves for a consensus problem, either way: rho * eps * d_i
    exceeds every local curvature L_i (smoothness of f_i's smooth part), so that every node update x_i = argmin
    f_i(x) + ... + rho d_i / 2 ||x||^2 rounds f_i away and no iteration can move x towards the solution; or
    rho * d_i is below eps * L_i at every node, so that the penalty rounds away against every f_i and the
    multipliers, which grow by rho times the residual per step, would need more than 1 / eps steps to move
    any x_i (docs/guide/solve.md, "The stopping test"). curvature: local_curvature(problem) where already computed.
    Problems without a curvature bound (or with edge matrices) are left to the stopping test."""
    if rho is None or not problem.is_consensus or isinstance(problem, PartProblem):  # a part's: checked_part
        return
    curvature = local_curvature(problem) if curvature is None else curvature
    if curvature is None:
        return
    degree = problem.compiled.degree
    check_rho_extremes(rho, dtype, float(curvature.max()), float(curvature.min()), int(degree.min()), int(degree.max()))


def _check_seed(seed):
    """ValueError unless seed is an integer torch.manual_seed takes: -2^63 .. 2^64 - 1."""
    if not (isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and -(2**63) <= seed < 2**64):
        raise ValueError(f"seed must be an integer from -2^63 to 2^64 - 1, got {seed!r}")


def _node_form(form, method, problem, network):
    """Whether the run sums its edge state out (pdmm.methods.NodeForm); ValueError where form="nodes" cannot."""
    why = (
        "it needs method 'pdmm' or 'qa-pdmm'"
        if not METHODS[method].capabilities.node_form
        else "it needs consensus constraints"
        if not problem.is_consensus
        else "a simulated network acts on each edge's messages"
        if network is not None
        else None
    )
    if form == "nodes" and why:
        raise ValueError(f"form='nodes' is not available here: {why} (use form='edges' or None)")
    whole_edges = problem.num_edges if isinstance(problem, PartProblem) else problem.compiled.num_edges  # every rank's
    return why is None and (form == "nodes" or (form is None and whole_edges >= LARGE_GRAPH_EDGES))


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


def _warned(result, tol, problem=None, rho=None, biased=None):
    """result, after a ConvergenceWarning where a run with a stopping test (0 < tol < inf: not tol=0) ended at
    max_iter or stalled (docs/guide/solve.md, "The stopping test"); a rho far from the problem's curvature is named
    (rho_advice), or `biased`: why the network keeps the method off the solution."""
    if result.status in ("max_iter", "stalled") and 0 < tol < math.inf:
        far = biased or (None if problem is None else rho_advice(rho, problem))
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
