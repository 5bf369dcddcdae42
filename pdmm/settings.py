"""pdmm.solve's settings in three groups, each checking its own fields when made (docs/guide/solve.md, "Plan and
run"): Stopping (when a run ends), Recording (what it records and shows) and Engine (where and how it computes).

pdmm.solve and pdmm.plan take the same settings as keywords and build these groups from them; pdmm.plan also takes
the groups themselves. What the method is and where it starts (method, rho, x0, seed, network, the method's own
parameters) belongs to the run, not to a group: those are checked against the problem and the method's
Capabilities (pdmm.protocol).
"""

import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

DTYPES = (torch.float64, torch.float32)


@dataclass(frozen=True)
class Stopping:
    """When a run ends (docs/guide/solve.md, "The stopping test"). Made, it holds values in range: ValueError
    otherwise, with pdmm.solve's message.

    Attributes
    ----------
    max_iter : int
        Iterations at most, >= 1.
    tol : float or None
        The stopping test's tolerance, in [0, 1); None: 1e-10 in float64, 1e-5 in float32 (resolved by pdmm.plan);
        0 applies no test.
    target : float or None
        A reference error that also stops the run, converged; it needs Recording.reference (checked by pdmm.plan,
        which sees both groups).
    check_every : int or None
        Iterations between stopping tests, >= 1; None: 10, 50 in the node form, 1 with a target (resolved by
        pdmm.plan).
    on_divergence : str
        "raise" DivergenceError or "return" the Result so far, status "diverged".
    """

    max_iter: int = 1000
    tol: float | None = None
    target: float | None = None
    check_every: int | None = None
    on_divergence: str = "raise"

    def __post_init__(self) -> None:
        if self.on_divergence not in ("raise", "return"):
            raise ValueError(f"on_divergence must be 'raise' or 'return', got {self.on_divergence!r}")
        check_count("max_iter", self.max_iter)
        if self.tol is not None and not (is_real(self.tol) and 0 <= self.tol < 1):
            raise ValueError(
                f"tol must be a number in [0, 1) (it is relative: 1 would pass at x = 0), got {self.tol!r}"
            )
        check_count("check_every", self.check_every, optional=True)


@dataclass(frozen=True)
class Recording:
    """What a run records and shows (docs/guide/solve.md, "The Result" and "Watching a run"). Made, it holds values
    in range: ValueError or TypeError otherwise, with pdmm.solve's message. The history names are checked against the
    reference and the network by pdmm.plan, the callback against the backend.

    Attributes
    ----------
    history : iterable of str, str or None
        The entries to record (pdmm.solve's history); None: all that apply but the objective.
    record_every : int or None
        Iterations between recorded rows, >= 1; None: check_every (resolved by pdmm.plan).
    reference : str, array_like or None
        None, "cvxpy" or an array x*, against which the error is measured.
    callback : callable or None
        Called with a pdmm.Snapshot at every recorded row (local backend); a true return stops the run.
    progress : bool
        Whether a tqdm bar shows the run.
    """

    history: Iterable[str] | str | None = None
    record_every: int | None = None
    reference: Any = None
    callback: Callable[..., Any] | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.callback is not None and not callable(self.callback):
            raise TypeError(f"callback must be callable or None, got {type(self.callback).__name__}")
        check_count("record_every", self.record_every, optional=True)


@dataclass(frozen=True)
class Engine:
    """Where and how a run computes; none of it changes what the run converges to (docs/guide/solve.md, "Node order",
    "Node form", "Large graphs"). Made, it holds values in range and settings its backend applies: ValueError
    otherwise, with pdmm.solve's message. What the method allows (compile, the distributed backend) is checked by
    pdmm.plan against its Capabilities; a reorder permutation against the graph.

    Attributes
    ----------
    device : torch.device or str
        Where the run's tensors live, a device on this machine.
    dtype : torch.dtype
        torch.float64 or torch.float32.
    backend : str
        "local" or "distributed".
    partition : array_like or None
        Distributed backend: the rank of each node.
    reorder : bool, array_like or None
        Local backend: how the run numbers the nodes.
    form : str or None
        "edges", "nodes" or None (chosen by size), on either backend.
    compile : bool
        Whether the step runs through torch.compile.
    gather : bool
        Distributed backend: True, every rank returns the whole x in node order; False, each rank its own nodes'
        rows, result.nodes their global ids (docs/guide/distributed.md, "Each rank holds its part").
    """

    device: torch.device | str = "cpu"
    dtype: torch.dtype = torch.float64
    backend: str = "local"
    partition: Any = None
    reorder: Any = None
    form: str | None = None
    compile: bool = False
    gather: bool = True

    def __post_init__(self) -> None:
        if self.backend not in ("local", "distributed"):
            raise ValueError(f"backend must be 'local' or 'distributed', got {self.backend!r}")
        if self.partition is not None and self.backend != "distributed":
            raise ValueError("partition= needs backend='distributed'")
        if self.form not in (None, "edges", "nodes"):
            raise ValueError(f"form must be None, 'edges' or 'nodes', got {self.form!r}")
        if self.reorder is not None and self.backend != "local":
            raise ValueError(
                "reorder= applies to backend='local'; the distributed engine numbers nodes by its partition"
            )
        if not isinstance(self.gather, bool):
            raise ValueError(f"gather must be True or False, got {self.gather!r}")
        if not self.gather and self.backend != "distributed":
            raise ValueError("gather=False applies to backend='distributed'; one process holds the whole x")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {self.dtype}")
        check_device(self.device)


def check_count(name: str, value: Any, optional: bool = False) -> None:
    """ValueError unless value is an integer >= 1 (or None, where optional)."""
    if optional and value is None:
        return
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1):
        raise ValueError(f"{name} must be {'None or ' if optional else ''}an integer >= 1, got {value!r}")


def check_device(device: Any) -> None:
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


def is_real(value: Any) -> bool:
    """Whether value is a real number (bool is not)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
