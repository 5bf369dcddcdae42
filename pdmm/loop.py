"""The iteration loop both engines run (pdmm.solve's local engine and pdmm.distributed): the run's options in
one object, the history it records, the stopping, stall and divergence tests, Ctrl-C, and the Result
(docs/guide/solve.md, "The stopping test"; docs/theory/pdmm.md section 11).

RunOptions is what one run was asked, checked once by pdmm.solve; Bookkeeping records history rows and takes the
tests; iterate steps a method and asks the bookkeeping when to stop; make_result assembles the Result. Nothing here
knows which engine runs it: the distributed engine subclasses Bookkeeping to sum its norms over the ranks.
"""

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .network import Network, privacy_gaps
from .problem import node_data
from .settings import Engine, Recording, Stopping

if TYPE_CHECKING:
    import pandas

DIVERGENCE_GROWTH = 1e6
FROZEN_EPS = 4  # a state whose every tensor changes by <= FROZEN_EPS * eps * its RMS in a step is frozen (stalled)
STATUSES = ("converged", "max_iter", "stalled", "diverged", "interrupted", "callback")
HISTORY = ("residual", "objective", "error", "messages", "bits", "privacy_x", "privacy_messages")
COUNTS = ("messages", "bits")  # cumulative, float64 whatever the run's dtype
PRIVACY = ("privacy_x", "privacy_messages")  # with network privacy (pdmm.network.privacy_gaps)
CAPACITY = 4096  # history rows allocated ahead at most (the columns double when full)


@dataclass
class Result(Mapping[str, Any]):
    """What pdmm.solve returns: the last iterate and the recorded convergence (docs/guide/solve.md, "The stopping
    test" and "The Result").

    It reads as scipy.optimize.OptimizeResult readers expect: `fun`, `nit`, `success`, `status` and `message` by
    those names, and a read-only mapping over its attributes, `result["x"]`, `"fun" in result`, `result.keys()`
    (the fields below, then "nit" and "success"). Unlike scipy's integer code, `status` is a word of STATUSES.

    Attributes
    ----------
    x : numpy.ndarray
        (n, d), or (B, n, d) for batched problems, rows in G.nodes order (labels in `nodes`).
    iterations : int
        How many iterations were run (the state in x).
    converged : bool
        Whether the stopping test or target passed; True exactly when status is "converged".
    history : dict
        The recorded rows (solve's `history=` and `record_every=`): "iteration" (rows,) the iteration of each
        row, "time" (rows,) the seconds from the start of the iterations to that row (the loop's own clock:
        setting up and solving the reference are not counted) and per entry an array (rows,) or (rows, B):
        "residual", "objective", "messages" and "bits" (cumulative messages delivered and bits sent), with a
        reference "error", with network privacy "privacy_x" and "privacy_messages".
    method : str
        The method's name.
    params : dict
        rho (where the method has one) and the method's own parameters.
    nodes : list
        The node labels, in the order of x's rows.
    seconds : float
        The iterations' wall time (setting up and solving the reference are not counted).
    reference : numpy.ndarray or None
        The x* the error was measured against.
    interrupted : bool
        Whether Ctrl-C stopped the run.
    network : pdmm.Network or None
        The simulated network (None: ideal).
    status : str or None
        How the run ended, one of STATUSES: "converged", "max_iter", "stalled" (the state stopped changing
        short of the tolerance: more iterations would not help), "diverged" (the Result of a DivergenceError),
        "interrupted" (Ctrl-C) or "callback" (solve's callback asked to stop); None: from `converged`
        ("converged" or "max_iter"), for Results built by hand.
    message : str
        How the run ended, in words (which test passed, at which iteration); "": a generic sentence for the
        status, for Results built by hand.
    fun : float, numpy.ndarray or None
        The objective sum_i f_i(x_i) at x, as history["objective"] records it (no penalty or constraint term), or
        one per instance (B,) for batched problems; None where the local functions do not implement value(), and
        for Results built by hand. Not finite where the run diverged to a non-finite x.

    Raises
    ------
    ValueError
        For a status not in STATUSES, or one that disagrees with `converged`.
    """

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
    message: str = ""
    fun: float | np.ndarray | None = None

    def __post_init__(self):
        if self.status is None:
            self.status = "converged" if self.converged else "max_iter"
        if self.status not in STATUSES or (self.status == "converged") != bool(self.converged):
            raise ValueError(
                f"status must be one of {STATUSES}, 'converged' exactly when converged is True; got "
                f"status={self.status!r}, converged={self.converged!r}"
            )
        if not self.message:
            self.message = status_message(self.status, self.iterations)

    @property
    def success(self) -> bool:
        """Whether the run converged (status "converged"), as scipy.optimize's OptimizeResult.success."""
        return self.status == "converged"

    @property
    def stalled(self) -> bool:
        """Whether the run stopped because its state no longer changed, short of the tolerance."""
        return self.status == "stalled"

    @property
    def nit(self) -> int:
        """The iterations run, as scipy.optimize's OptimizeResult.nit: `iterations` by its scipy name."""
        return self.iterations

    def __getitem__(self, key: str) -> Any:
        if key not in RESULT_KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(RESULT_KEYS)

    def __len__(self) -> int:
        return len(RESULT_KEYS)

    def history_frame(self) -> "pandas.DataFrame":
        """The history as a pandas DataFrame, one row per recorded row (docs/guide/solve.md, "The Result").

        Returns
        -------
        pandas.DataFrame
            Columns "iteration" and "time", then each recorded entry of `history` ("residual", "objective", ...)
            in its order. A batched Result (x of shape (B, n, d)) has one row per recorded row and instance, in
            that order, and an "instance" column (0 .. B - 1) after "iteration".

        Raises
        ------
        ImportError
            Where pandas (the optional `frames` extra) is not installed, in one line naming the extra.
        """
        try:
            import pandas
        except ImportError:
            raise ImportError('Result.history_frame needs pandas: pip install "pdmm-bridge[frames]"') from None
        history = {name: np.asarray(values) for name, values in self.history.items()}
        if np.ndim(self.x) < 3:
            return pandas.DataFrame(history)
        instances, frame = np.shape(self.x)[0], {}
        for name, values in history.items():  # (rows,): repeated for each instance; (rows, B): row after row
            frame[name] = np.repeat(values, instances) if values.ndim == 1 else values.reshape(-1)
            if name == "iteration":
                frame["instance"] = np.tile(np.arange(instances), len(values))
        return pandas.DataFrame(frame)

    def __repr__(self):
        last = {k: float(np.max(v[-1])) for k, v in self.history.items() if k not in ("iteration", "time") and len(v)}
        summary = "".join(f", {k}={v:.3g}" for k, v in last.items())
        return f"Result({self.method}, iterations={self.iterations}, status={self.status}{summary})"


RESULT_KEYS = (*(f.name for f in fields(Result)), "nit", "success")  # Result's mapping: its fields, scipy's names


def status_message(status: str, iterations: int, tol: float | None = None, target: float | None = None) -> str:
    """How a run ended, in words: the Result's message for `status` after `iterations` iterations (tol and target:
    the run's, named where they say more).

    Parameters
    ----------
    status : str
        One of STATUSES.
    iterations : int
        The iterations run.
    tol : float or None
        The stopping test's tolerance, None where unknown.
    target : float or None
        The run's target error, None without one.

    Returns
    -------
    str
        One sentence.
    """
    at = f"at iteration {iterations}"
    test = "the stopping test" if tol is None else f"the stopping test (tol={tol:g})"
    if target is not None:
        test += f" or the target error {target:g}"
    if status == "max_iter" and tol is not None and not tol > 0:  # tol=0 (every iteration) or -inf (not applied)
        return f"ran all {iterations} iterations (max_iter); no stopping test was applied (tol={tol:g})"
    return {
        "converged": f"converged: {test} passed {at}",
        "max_iter": f"stopped at max_iter ({iterations} iterations) short of {test}",
        "stalled": f"stalled {at}: the state stopped changing short of {test}; more iterations would not help",
        "diverged": f"diverged {at}",
        "interrupted": f"interrupted (Ctrl-C) {at}",
        "callback": f"stopped by the callback {at}",
    }[status]


@dataclass(frozen=True)
class Snapshot:
    """What pdmm.solve's callback sees at a recorded iteration (docs/guide/solve.md, "Watching a run"): a read-only
    view of the run at that row.

    Attributes
    ----------
    iteration : int
        The iteration just run.
    x : numpy.ndarray
        The iterate, (n, d) or (B, n, d), rows in G.nodes order, read-only (a copy: keep it if you need it).
    residual : float or numpy.ndarray
        The residual RMS (pdmm.solve's stopping test), or one per instance (B,) for batched problems.
    time : float
        Seconds since the iterations started, as history["time"].
    """

    iteration: int
    x: np.ndarray
    residual: float | np.ndarray
    time: float


class ConvergenceWarning(UserWarning):
    """pdmm.solve stopped at max_iter, or stalled, without meeting its stopping test (tol > 0); like
    scikit-learn's ConvergenceWarning. Silence it with warnings.filterwarnings("ignore",
    category=pdmm.ConvergenceWarning); a run with tol=0 runs all its iterations and never warns."""


class DivergenceError(RuntimeError):
    """The iterates became non-finite or the residual grew by DIVERGENCE_GROWTH; `.result` holds the run so far.

    Parameters
    ----------
    message : str
        What diverged, at which iteration.
    result : Result
        The run so far, with status "diverged".
    """

    def __init__(self, message: str, result: Result):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class RunOptions:
    """What one run of pdmm.solve was asked, as the engines and the loop use it: checked and resolved once by
    pdmm.plan (pdmm.solve.checked_options: rho, tol, check_every, record_every and the history names filled in),
    then passed whole. The settings come in pdmm.solve's three groups (pdmm.settings; docs/guide/solve.md, "Plan and
    run"); what the method is and where it starts stand beside them.

    Its fields are taken as given. One built by hand skips pdmm.plan's checks across the groups and must give the
    values pdmm.plan resolves: a float tol and an int check_every (Stopping), an int record_every and a tuple of
    history names (Recording); without a scale the stopping test's floor is 1, not min(1, the problem's scale).

    Attributes
    ----------
    method : str
        The method's name, a key of pdmm.METHODS.
    rho : float, torch.Tensor or None
        The penalty parameter, or one per instance, (B,) in the run's dtype (a grid of values run as one batch,
        pdmm.batch_runs); None for the methods on a mixing matrix, which have none.
    stopping : pdmm.Stopping
        max_iter, tol, target, check_every and on_divergence ("raise": pdmm.solve raises DivergenceError when the run
        diverges; "return": it returns the Result so far; the engines raise either way, pdmm.solve decides).
    recording : pdmm.Recording
        history (the names recorded, in HISTORY order), record_every, reference (None, "cvxpy" or an array x*, the
        point the error is measured against), callback (local engine only) and progress.
    engine : pdmm.Engine
        device, dtype, backend, partition (the distributed engine's rank of each node), reorder (the local engine's
        renumbering) and compile.
    x0 : object
        None (zeros), "random" or an array shaped like x.
    seed : int
        The seed of x0="random".
    network : pdmm.Network or None
        The simulated network, None for the ideal one.
    method_params : dict
        The method's own parameters (theta, eta, alpha, mixing, ...).
    node_form : bool
        Whether the run sums the edge state out (pdmm.methods.NodeForm), as resolved from engine.form.
    scale : torch.Tensor or None
        The problem's scale per instance (pdmm.building.problem_scale), the stopping test's floor.
    curvature : torch.Tensor or None
        L_i per node and instance (pdmm.building.local_curvature), where the local functions have it.
    """

    method: str
    rho: float | torch.Tensor | None
    stopping: Stopping
    recording: Recording = field(default_factory=Recording)
    engine: Engine = field(default_factory=Engine)
    x0: Any = None
    seed: int = 0
    network: Network | None = None
    method_params: Mapping[str, Any] = field(default_factory=dict)
    node_form: bool = False
    scale: torch.Tensor | None = field(default=None, repr=False)
    curvature: torch.Tensor | None = field(default=None, repr=False)

    @property
    def capacity(self) -> int:
        """History rows allocated ahead: one per record_every iterations and one more, at most CAPACITY."""
        assert self.recording.record_every is not None  # resolved by pdmm.plan
        return min(self.stopping.max_iter // self.recording.record_every + 1, CAPACITY)

    @property
    def params(self) -> dict:
        """The parameters the Result reports: rho (where the method has one) and the method's own."""
        return dict(self.method_params) if self.rho is None else {"rho": self.rho, **self.method_params}


@dataclass
class Progress:
    """A run so far: `now` = (state after `done` iterations, done, history rows recorded), replaced in one
    assignment, so a Ctrl-C at any point leaves the three in step."""

    now: tuple


def iterate(step, progress, book, options, finish, before=None, bar=None, watch=None):
    """Up to options.stopping.max_iter steps from progress.now, recording every record_every-th iteration
    (book.record) and testing every check_every-th and the last (book.check, one read from the device). Returns
    "converged" once the stopping test passes, "stalled" once the state stops changing short of it (book.check),
    "callback" once watch(iteration, x, residual, time), called at every recorded row (after the divergence test,
    where one runs), returns True short of those, else "max_iter".
    The residual is computed at iteration 1 (the divergence baseline), at recorded and at tested iterations only,
    once each (`seen`). Divergence raises DivergenceError with finish("diverged"), the Result so far. before():
    called before each step (a network's draws); bar: a tqdm bar, updated at the tests."""
    max_iter, record_every = options.stopping.max_iter, options.recording.record_every
    check_every, tol, target = options.stopping.check_every, options.stopping.tol, options.stopping.target
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
            if recorded and watch is not None and watch(k, x, book.residual(x, seen), book.times[rows]):
                return "callback"
            continue
        stop, stalled, finite, grown, largest = book.check(new, state, seen, first, rows + recorded, tol, target)
        if (stop or stalled or not finite or grown or k == max_iter) and not recorded:
            book.record(rows, k, x, seen)
            recorded = True
        progress.now = new, k, rows + recorded
        if not finite or grown:
            message = (
                f"{options.method} diverged at iteration {k}: "
                + (
                    "the iterates or the objective are no longer finite"
                    if not finite
                    else f"the residual grew from {first.max():.3g} to {largest:.3g}"
                )
                + (f" (rho={options.rho})" if options.rho else "")
            )
            raise DivergenceError(message, finish("diverged", message))
        if bar is not None:
            bar.update(k - shown)
            shown = k
            if k - posted >= 20 or stop or stalled or k == max_iter:
                bar.set_postfix(residual=f"{largest:.2e}")
                posted = k
        if stop or stalled:
            if recorded and watch is not None:  # the callback sees the last row too; the run has ended either way
                watch(k, x, book.residual(x, seen), book.times[rows])
            return "converged" if stop else "stalled"
        if recorded and watch is not None and watch(k, x, book.residual(x, seen), book.times[rows]):
            return "callback"
        if book.interrupted:  # a Ctrl-C that book.check has agreed on (the distributed ranks)
            return "interrupted"
    return "max_iter"


class Bookkeeping:
    """What solve records and tests besides the step: history rows in tensors allocated ahead on
    the run's device (their capacity doubles when full), and the stopping and divergence tests."""

    def __init__(
        self,
        options,
        *,
        local,
        edges,
        per_round,
        channel=None,
        x_star=None,
        private=None,
        silent=0,
        certificate=None,
    ):
        """options: the run's RunOptions (history names, rho, record_every, capacity, scale); local, edges: the
        run's local functions and edge operator; per_round: (messages, bits) per sending round on the ideal network;
        channel: the simulated network's channel or None; x_star: the reference point or None; private: the
        network privacy's reference point or None; silent: the method's first rounds that send nothing;
        certificate: the run's optimality certificate (pdmm.certificate), None where the problem has none (the run
        is then never converged by the stopping test)."""
        names, rho, scale = options.recording.history, options.rho, options.scale
        scale = None if scale is None else scale.to(options.engine.device, options.engine.dtype)
        self.names, self.local, self.edges, self.channel, self.rho = names, local, edges, channel, rho
        # scale (B,): the problem's scale (problem_scale); the test's floor min(1, scale), 1 where it is 0 or unknown
        self.floor = None if scale is None else torch.where(scale > 0, torch.clamp(scale, max=1.0), 1.0)
        self.baseline = scale  # the least residual the divergence test measures growth from
        self.certificate = certificate
        self.x_star, self.private, self.per_round = x_star, private, per_round
        self.every = options.recording.record_every
        self.silent = silent  # the method's first rounds that send nothing (ideal-network counts)
        like = edges.graph.sign
        self.x_star_norm = None if x_star is None else torch.clamp(norm(x_star), min=torch.finfo(like.dtype).tiny)
        self.stored = [name for name in names if not (name in COUNTS and channel is None)]  # ideal counts: arithmetic
        batch = local.shape[1]
        self.capacity = capacity = options.capacity
        self.columns = {
            name: torch.empty(
                (capacity, batch), device=like.device, dtype=torch.float64 if name in COUNTS else like.dtype
            )
            for name in self.stored
        }
        self.times = np.empty(capacity)  # the loop's clock at each row (seconds since start_clock)
        self.started = time.perf_counter()
        self.last = None  # (row, iteration) of a final row off the record_every grid: only the last row can be
        self.checked = 0  # rows already seen by the divergence test
        self.interrupted = False  # set by a check that learns of a Ctrl-C (distributed: every rank's, all-reduced)
        self.asking: torch.Tensor | None = None  # distributed: the ranks' Ctrl-C flags summed by sizes(), 0-dim

    def start_clock(self) -> float:
        """Start the clock of history["time"] (the iterations are about to begin); returns its time.perf_counter()."""
        self.started = time.perf_counter()
        return self.started

    def residual(self, x, seen):
        """RMS over the edges of the constraint residual A_ij x_i + A_ji x_j - b_ij: (B,), kept in `seen`
        (what this iteration has computed) so that its row and its test share one computation."""
        if "residual" not in seen:
            seen["rows"] = self.edges.residual(x)  # per row, for the stopping test's feasibility (tests)
            seen["residual"] = rms(seen["rows"])
        return seen["residual"]

    def feasibility(self, x, seen):
        """The stopping test's residual: RMS over the edges with each row relative to its coefficients' size
        (EdgeMatrices.row_size), (B,); the residual itself for consensus, whose rows have size 1."""
        residual = self.residual(x, seen)
        row_size = self.edges.row_size
        return residual if row_size is None else rms(seen["rows"] / row_size)

    def error(self, x, seen):
        """||x - x*||_F / ||x*||_F per instance: (B,), kept in `seen` like the residual."""
        if "error" not in seen:
            seen["error"] = norm(x - self.x_star) / self.x_star_norm
        return seen["error"]

    def objective(self, x):
        """sum_i f_i(x_i) per instance at the iterate x (n, B, d), in the run's node order: (B,); None where the local
        functions do not implement value()."""
        try:
            return self.local.value(x)
        except NotImplementedError:
            return None

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
            elif name not in row:  # the network's counts and privacy measures, all at once
                row.update(self.network_row(x))
        if r == self.capacity:
            self.columns = {name: torch.cat([c, torch.empty_like(c)]) for name, c in self.columns.items()}
            self.times = np.concatenate([self.times, np.empty_like(self.times)])
            self.capacity *= 2
        for name in self.stored:
            self.columns[name][r] = row[name]
        self.times[r] = time.perf_counter() - self.started
        self.last = None if k % self.every == 0 else (r, k)

    def network_row(self, x):
        """The simulated network's entries of a row at x, those the history stores: the cumulative "messages" and
        "bits" (the channel's counts) and the privacy measures "privacy_x" and "privacy_messages" (privacy_gaps),
        each (B,)."""
        row = {name: getattr(self.channel, name) for name in COUNTS if name in self.columns}
        if PRIVACY[0] in self.columns or PRIVACY[1] in self.columns:
            gaps = privacy_gaps(x, self.channel.sent, self.private, self.edges, self.rho)
            row.update(zip(PRIVACY, gaps, strict=True))
        return row

    def sizes(self, x, x_old):
        """(RMS of x, RMS of x - x_old) per instance, (B,) each, and whether every entry of x is finite, per
        instance (B,)."""
        return rms(x), rms(x - x_old), torch.isfinite(x).all(2).all(0)

    def state_sizes(self, t, t_old):
        """(RMS of t, RMS of t - t_old) per instance, (B,) each, for a state tensor (N, B, m) other than x."""
        return rms(t), rms(t - t_old)

    def frozen(self, new, old, scale):
        """Whether every state tensor of the method besides x (z, u, x_half, ...) changed by at most FROZEN_EPS * eps
        * its RMS in the step from `old` to `new` (rounding only): bool per instance (B,), or 0-dim where nothing varies
        by instance (the stall test, docs/guide/solve.md, "The stopping test")."""
        eps = FROZEN_EPS * torch.finfo(scale.dtype).eps
        frozen = torch.ones((), dtype=torch.bool, device=scale.device)
        for key, t in new.items():
            before = old.get(key)
            if (
                key == "x"
                or not (torch.is_tensor(t) and t.dim() == 3 and t.is_floating_point())
                or not (torch.is_tensor(before) and before.shape == t.shape)
            ):
                continue
            size, moved = self.state_sizes(t, before)
            frozen = frozen & (moved <= eps * size)
        return frozen

    def scale(self, size):
        """The stopping test's scale per instance, max(floor, RMS of x); floor = min(1, the problem's scale), or 1."""
        return torch.clamp(size, min=1.0) if self.floor is None else torch.maximum(size, self.floor)

    def tests(self, new, old, seen, first, tol, target):
        """The tests of check() per instance, before they are combined over the instances: (passes, reached, frozen,
        finite, grown, residual), each (B,) (finite and frozen may be 0-dim where nothing varies by instance).

        passes: with tol > 0, the residual (each row relative to its coefficients' size, EdgeMatrices.row_size) is
        <= tol * max(floor, RMS of x), floor = min(1, the problem's scale), and
        the optimality certificate holds at `new` (pdmm.certificate: measured at the iterate, not estimated from how
        much it moved); never with tol <= 0 (tol=0 runs every iteration, -inf applies no test), nor without a
        certificate. reached: the error is <= target (None without a target). frozen: x and the whole state changed
        by rounding only. finite: x and the residual are finite. grown: the residual grew DIVERGENCE_GROWTH-fold from
        `first`, iteration 1's (docs/guide/solve.md, "The stopping test"). Instances are independent, so a batch of
        independent runs (pdmm.tuning) combines these over each run's own instances."""
        x = new["x"]
        residual = self.residual(x, seen)
        size, change, finite = self.sizes(x, old["x"])
        scale = self.scale(size)
        if tol > 0 and self.certificate is not None:
            passes = (self.feasibility(x, seen) <= tol * scale) & self.certificate.holds(new, tol, scale)
        else:
            passes = torch.zeros_like(scale, dtype=torch.bool)
        reached = None if target is None else self.error(x, seen) <= target
        frozen = self.frozen(new, old, scale) & (change <= FROZEN_EPS * torch.finfo(x.dtype).eps * size)
        finite = finite & torch.isfinite(residual)
        floor = torch.clamp(first, min=math.sqrt(torch.finfo(x.dtype).eps) * scale)
        if self.baseline is not None:  # a first residual of 0 (nothing moved yet) is no baseline for growth
            floor = torch.maximum(floor, self.baseline)
        grown = residual > DIVERGENCE_GROWTH * floor
        return passes, reached, frozen, finite, grown, residual

    def check(self, new, old, seen, first, rows, tol, target):
        """(stop, stalled, finite, grown, largest residual) after the step from state `old` to `new`: the
        stopping test, the stall test and the divergence test of every instance (tests), combined over the
        instances in one read from the device (with the ranks' Ctrl-C flags where sizes() summed them: `asking`,
        then `interrupted`); rows: those recorded up to this iteration's.

        stop: every instance passes (or every instance reached the target); stalled: not stop, yet x and the
        whole state are frozen (a floating-point fixed point short of tol, or a step that changes nothing), tested
        with tol > 0 for pdmm, qa-pdmm and admm on the ideal network only; finite: every instance (and every
        objective recorded since the last test) finite; grown: some instance's residual grown (docs/guide/solve.md,
        "The stopping test")."""
        passes, reached, frozen, finite, grown, residual = self.tests(new, old, seen, first, tol, target)
        stop = passes.all()
        if reached is not None:
            stop |= reached.all()
        # tol=0: every iteration; a network: random steps; the methods on a mixing matrix: some settle off the
        # solution by design (constant-step dgd) and run to max_iter as before
        watched = 0 < tol < math.inf and self.channel is None and self.rho is not None
        stalled = ~stop & frozen.all() & watched
        finite = finite.all()
        if "objective" in self.columns:  # every objective recorded since the last test
            finite &= torch.isfinite(self.columns["objective"][self.checked : rows]).all()
        asking = () if self.asking is None else (self.asking,)  # read with the rest: no second read per test
        stop, stalled, finite, grown, largest, *asked = read(
            stop, stalled, finite, grown.any(), residual.max(), *asking
        )
        self.interrupted = self.interrupted or any(flag > 0 for flag in asked)
        self.checked = rows
        return bool(stop), bool(stalled), bool(finite), bool(grown), largest

    def arrays(self, rows, batched):
        """The history as numpy arrays: "iteration" and "time" (rows,) and each name (rows, B), or (rows,)
        unbatched."""
        iterations = np.arange(1, rows + 1, dtype=np.int64) * self.every
        if self.last is not None and self.last[0] == rows - 1:
            iterations[-1] = self.last[1]
        history = {"iteration": iterations, "time": self.times[:rows].copy()}
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


def read(*values):
    """The values (0-dim tensors) as Python floats, in one read from the device."""
    return torch.stack([v.to(torch.float64) for v in values]).tolist()


def rms(v):
    """Root mean square over nodes/edges of the per-row vector norm: (N, B, m) -> (B,)."""
    return torch.linalg.vector_norm(v, dim=(0, 2)) / math.sqrt(len(v))


def norm(v):
    """Frobenius norm per instance: (n, B, d) -> (B,)."""
    return torch.linalg.vector_norm(v, dim=(0, 2))


def initial_x(problem, options):
    """x^0, (n, B, d) on the run's device: zeros for x0=None, standard normal from the seed for "random", else the
    array given (one instance or B); ValueError for anything else."""
    x0, seed, device, dtype = options.x0, options.seed, options.engine.device, options.engine.dtype
    shape = (problem.n, problem.batch, problem.dim)
    if x0 is None:
        return torch.zeros(shape, dtype=dtype, device=device)
    if isinstance(x0, str):
        if x0 != "random":
            raise ValueError(f"x0 must be None, 'random' or an array, got {x0!r}")
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(device, dtype)
    return expand_instances(problem, node_data("x0", x0, problem.n, (problem.dim,))).to(device, dtype)


def reference_point(problem, options):
    """x*, (n, B, d) on the run's device, from options.recording.reference: None, "cvxpy" (pdmm.reference solves
    the problem centrally) or an array; ValueError for anything else."""
    reference, device, dtype = options.recording.reference, options.engine.device, options.engine.dtype
    if reference is None:
        return None
    if isinstance(reference, str):
        if reference != "cvxpy":
            raise ValueError(f"reference must be None, 'cvxpy' or an array, got {reference!r}")
        from .reference import reference as centralised

        reference = centralised(problem)
    return expand_instances(problem, node_data("reference", reference, problem.n, (problem.dim,))).to(device, dtype)


def expand_instances(problem, x):
    """Node data x, (n, 1 or B, d), as (n, B, d), one copy per instance; ValueError for another count."""
    if x.shape[1] not in (1, problem.batch):
        raise ValueError(f"expected {problem.batch} instances, got {x.shape[1]}")
    return x.expand(problem.n, problem.batch, problem.dim).contiguous()


def to_numpy(x, batched):
    """(n, B, d) tensor -> (B, n, d) array, or (n, d) for an unbatched problem."""
    x = x.detach().cpu().numpy().transpose(1, 0, 2)
    return x if batched else x[0]


def make_result(state, done, book, rows, status, start, problem, options, x_star, order=None, message="", nodes=None):
    """The Result of a run that ran `done` iterations to `state` and recorded `rows` rows in `book`, started at
    time.perf_counter() `start`, with node rows back in the graph's own order where the run renumbered them
    (order); message: how it ended, "" for status_message's sentence with the run's tol and target; nodes: the
    Result's node names, None for the problem graph's labels (a rank's part gives its nodes' global ids). The
    objective at x (Result.fun) is computed after the clock stops: it is no part of `seconds`."""
    seconds = time.perf_counter() - start
    fun = book.objective(state["x"])
    x = state["x"] if order is None else torch.empty_like(state["x"]).index_copy_(0, order, state["x"])
    if x_star is not None and order is not None:
        x_star = torch.empty_like(x_star).index_copy_(0, order, x_star)
    return Result(
        x=to_numpy(x, problem.batched),
        iterations=done,
        converged=status == "converged",
        status=status,
        interrupted=status == "interrupted",
        history=book.arrays(rows, problem.batched),
        method=options.method,
        params=options.params,
        nodes=list(problem.compiled.nodes) if nodes is None else nodes,
        seconds=seconds,
        reference=None if x_star is None else to_numpy(x_star, problem.batched),
        network=options.network,
        message=message or status_message(status, done, options.stopping.tol, options.stopping.target),
        fun=None if fun is None else per_instance(fun, problem.batched),
    )


def per_instance(values, batched):
    """A value per instance, (B,) tensor -> (B,) array, or a float for an unbatched problem."""
    values = values.detach().cpu().numpy()
    return values if batched else float(values[0])
