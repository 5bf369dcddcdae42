"""The runs of `pdmm-bridge solve` on the problem experiments/solve_problem.py builds, each checked before anything
is written: each run's parameters, the checks that plan them, the cvxpy reference, tuning and solving.

Bad input is a UsageError naming the flag or the run (docs/guide/runs.md, "Exit codes"); warnings are printed one
line each, by one process of a --nproc job.
"""

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import pdmm
import pdmm.datasets
import pdmm.distributed
import pdmm.npz
import pdmm.tuning
from pdmm.building import problem_scale

from . import launch, solve_job
from .errors import RunFailure, UsageError
from .solve_names import DTYPES as DTYPE_NAMES
from .solve_options import accepted

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # --dtype: the torch type of each name

Spec = tuple[str, str, dict[str, Any]]  # (label, method, the spec's own parameters)


def reference_of(problem: pdmm.Problem, args: argparse.Namespace) -> np.ndarray | None:
    """The centralised solution x* (pdmm.reference, cvxpy) for --reference cvxpy, its warnings (an inaccurate
    solution) printed one line each.

    Parameters
    ----------
    problem : pdmm.Problem
        The problem to solve.
    args : argparse.Namespace
        The solve command's arguments (reference).

    Returns
    -------
    ndarray or None
        x*, or None for --reference none.

    Raises
    ------
    RunFailure
        When the solver fails, naming --reference none.
    """
    if args.reference != "cvxpy":
        return None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x_star = pdmm.reference(problem)
    except RuntimeError as err:
        raise RunFailure(f"{err}; rerun with --reference none to solve without it") from None
    for warning in caught if launch.speaks() else ():
        line = (str(warning.message).strip().splitlines() or [warning.category.__name__])[0]
        print(f"pdmm-bridge solve: warning: the cvxpy reference: {line}", file=sys.stderr)
    return x_star


def solve_all(
    problem: pdmm.Problem,
    specs: Sequence[Spec],
    params: dict[str, dict[str, Any]],
    x_star: np.ndarray | None,
    args: argparse.Namespace,
    network: pdmm.Network | None,
    plans: dict[str, pdmm.Plan],
) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """Solve the problem with every run in turn: the plan check_methods built for it, given the reference
    (pdmm.Plan.with_reference), or for a run without one (tuned, or of a --nproc job) a plan made here (plan_run);
    docs/guide/solve.md, "Plan and run".

    Every run records every iteration: residual, objective, error (with a reference), messages and bits (and
    the privacy measures under --privacy). The runs after an interrupted one are not started.

    Parameters
    ----------
    problem : pdmm.Problem or pdmm.PartProblem
        The problem, or this process's part of it (--shards).
    specs : sequence of (label, method, params)
        The runs.
    params : dict
        {label: the run's parameters} (method_params, with_tuned_values).
    x_star : ndarray or None
        The reference solution, for the relative error.
    args : argparse.Namespace
        The solve command's arguments (iters, tol, device, dtype, nproc, no_progress).
    network : pdmm.Network or None
        The simulated network, None for the ideal one.
    plans : dict
        {label: pdmm.Plan} of the runs check_methods planned with these settings (each is run once, then dropped).

    Returns
    -------
    results : dict
        {label: pdmm.Result} of the runs that ran.
    failures : dict
        {label: divergence message}.
    interrupted : str or None
        The label of the run Ctrl-C interrupted, None when none was.

    Raises
    ------
    UsageError
        When pdmm refuses a run's input (a ValueError), naming the run.
    """
    results, failures = {}, {}
    for label, method, _ in specs:
        try:
            with warnings.catch_warnings():  # the summary line says "not converged" or "stalled" itself
                warnings.simplefilter("ignore", pdmm.ConvergenceWarning)
                run = plans.pop(label) if label in plans else plan_run(problem, method, params[label], args, network)
                results[label] = (run if x_star is None else run.with_reference(x_star)).run()
        except ValueError as err:  # what check_methods did not foresee: still one line, bad input
            raise UsageError(f"{label}: {err}") from None
        except KeyboardInterrupt:  # before its first iteration
            return results, failures, label
        if results[label].status == "diverged":  # its message says where and how
            failures[label] = results[label].message
        if results[label].interrupted:
            return results, failures, label
    return results, failures, None


def plan_run(
    problem: pdmm.Problem,
    method: str,
    params: dict[str, Any],
    args: argparse.Namespace,
    network: pdmm.Network | None,
) -> pdmm.Plan:
    """One run as solve_all runs it, planned (pdmm.plan, which builds its method on the local backend): every
    iteration recorded (residual, objective, messages, bits, and the privacy measures under --privacy; the error
    comes with the reference, Plan.with_reference), --iters, --tol, --device, --dtype, a divergence returned, the
    partitioned engine for --nproc, and for a part (--shards) that engine returning the part's own rows of x
    (gather=False).

    Parameters
    ----------
    problem : pdmm.Problem or pdmm.PartProblem
        The problem, or this process's part of it (--shards).
    method : str
        The run's method.
    params : dict
        The run's parameters.
    args : argparse.Namespace
        The solve command's arguments (iters, tol, device, dtype, nproc, shards, no_progress).
    network : pdmm.Network or None
        The simulated network.

    Returns
    -------
    pdmm.Plan

    Raises
    ------
    ValueError, TypeError
        As pdmm.plan raises them.
    """
    history = ["residual", "objective", "messages", "bits"]
    if network is not None and network.privacy is not None:
        history += ["privacy_x", "privacy_messages"]
    return pdmm.plan(
        problem,
        method=method,
        max_iter=args.iters,
        tol=args.tol,
        device=args.device,
        dtype=DTYPES[args.dtype],
        progress=not args.no_progress and not solve_job.rank(args),
        network=network,
        history=history,
        record_every=1,
        backend="distributed" if args.nproc > 1 or args.shards is not None else "local",
        on_divergence="return",
        gather=args.shards is None,  # a part's run returns its own rows of x
        **params,
    )


def method_params(args: argparse.Namespace, specs: Sequence[Spec]) -> dict[str, dict[str, Any]]:
    """Each run's parameters: the spec's own values over --rho / --theta / --eta, each for the runs whose method
    takes it (rho: pdmm, qa-pdmm and admm, 1 unless given).

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (rho, theta, eta).
    specs : sequence of (label, method, params)
        The runs.

    Returns
    -------
    dict
        {label: {"rho": ..., "theta": ..., "eta": ..., and the spec's own}}.

    Raises
    ------
    UsageError
        When a flag applies to no run.
    """
    given = {name: getattr(args, name) for name in ("rho", "theta", "eta") if getattr(args, name) is not None}
    defaults = {"rho": 1.0, **given}
    params = {
        label: {**{name: value for name, value in defaults.items() if name in accepted(method)}, **own}
        for label, method, own in specs
    }
    unused = [name for name in given if not any(name in p for p in params.values())]
    if unused:
        raise UsageError(f"--{unused[0]} does not apply to {', '.join(label for label, _, _ in specs)}")
    return params


def to_tune(args: argparse.Namespace, specs: Sequence[Spec]) -> list[str]:
    """The labels of the runs --tune tunes: those whose method has a rho or alpha (pdmm.tuning.TUNED) and whose
    spec does not set it (docs/decentralised.md section 8).

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (tune, reference, nproc, rho).
    specs : sequence of (label, method, params)
        The runs.

    Returns
    -------
    list of str
        The labels, none without --tune.

    Raises
    ------
    UsageError
        Where --tune cannot run (no reference, --nproc, --rho) or has nothing to tune.
    """
    if args.tune is None:
        return []
    if args.reference == "none":
        raise UsageError("--tune measures the error against the cvxpy solution; drop --reference none")
    if args.nproc > 1:
        raise UsageError("--tune runs in this process; drop --nproc")
    if args.rho is not None:
        raise UsageError("--tune chooses rho; to fix a run's rho, give it in its spec (pdmm:rho=2)")
    labels = [
        label for label, method, own in specs if method in pdmm.tuning.TUNED and pdmm.tuning.TUNED[method] not in own
    ]
    if not labels:
        raise UsageError(
            "--tune has nothing to tune: every run sets its own rho or alpha, or has neither (gossip, chebyshev)"
        )
    return labels


def tune_run(
    problem: pdmm.Problem,
    label: str,
    method: str,
    params: dict[str, Any],
    x_star: np.ndarray | None,
    args: argparse.Namespace,
    network: pdmm.Network | None,
) -> Any:
    """pdmm.tune for one run, with the run's other parameters fixed (its default rho left out).

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.
    label : str
        The run's label.
    method : str
        Its method.
    params : dict
        Its parameters.
    x_star : ndarray or None
        The reference solution.
    args : argparse.Namespace
        The solve command's arguments (tune, iters, device, dtype, no_progress).
    network : pdmm.Network or None
        The simulated network.

    Returns
    -------
    pdmm.tuning.Tuning
        Every value tried and the one chosen.

    Raises
    ------
    UsageError
        When every value of the grid diverges, naming the run.
    """
    fixed = {key: value for key, value in params.items() if key != "rho"}
    try:
        return pdmm.tune(
            problem,
            method,
            reference=x_star,
            target=args.tune,
            max_iter=args.iters,
            device=args.device,
            dtype=DTYPES[args.dtype],
            network=network,
            progress=not args.no_progress,
            **fixed,
        )
    except ValueError as err:
        raise UsageError(f"--tune, {label}: {err}") from None


def with_tuned_values(
    specs: Sequence[Spec], params: dict[str, dict[str, Any]], tunings: dict[str, Any]
) -> tuple[list[Spec], dict[str, dict[str, Any]], dict[str, Any]]:
    """The runs with each tuned run's value set and its label extended by it ("extra" -> "extra:alpha=0.0397").

    Parameters
    ----------
    specs : sequence of (label, method, params)
        The runs.
    params : dict
        {label: the run's parameters}.
    tunings : dict
        {label: pdmm.tuning.Tuning} of the tuned runs.

    Returns
    -------
    specs, params, tunings
        The same, under the new labels.

    Raises
    ------
    UsageError
        When a tuned label is another run's.
    """
    labels, params = {label: label for label, _, _ in specs}, dict(params)
    for label, tuning in tunings.items():
        labels[label] = f"{label}:{tuning.parameter}={tuning.value:.3g}"
        params[label] = {**params[label], tuning.parameter: tuning.value}
    if len(set(labels.values())) != len(labels):
        raise UsageError(f"the tuned labels {', '.join(labels.values())} repeat a spec; drop the repeated spec")
    specs = [(labels[label], method, own) for label, method, own in specs]
    return specs, {labels[label]: p for label, p in params.items()}, {labels[label]: t for label, t in tunings.items()}


def check_methods(
    problem: pdmm.Problem,
    specs: Sequence[Spec],
    params: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    network: pdmm.Network | None,
) -> dict[str, pdmm.Plan]:
    """Check each run once with pdmm.plan (which builds its method), so that whatever pdmm.solve would refuse is an
    error before anything is written (docs/guide/solve.md, "Plan and run"). In one process each run is planned as
    it runs (plan_run) and its plan returned, for solve_all to run: the method is built once per run, and the runs'
    built methods are held together until they run. With --nproc, each method is built whole here, in the graph's
    own order and the edge form (the partitioned engine builds each rank's part when it runs), and what that engine
    does not implement is refused; no plan is returned.

    Parameters
    ----------
    problem : pdmm.Problem
        The problem.
    specs : sequence of (label, method, params)
        The runs.
    params : dict
        {label: the run's parameters}.
    args : argparse.Namespace
        The solve command's arguments (iters, tol, device, dtype, problem, data, nproc, no_progress).
    network : pdmm.Network or None
        The simulated network.

    Returns
    -------
    dict
        {label: pdmm.Plan} in one process, empty with --nproc.

    Raises
    ------
    UsageError
        Naming the run whose parameters are refused, data beyond the dtype, or --nproc above the nodes.
    """
    dtype = DTYPES[args.dtype]
    try:
        problem_scale(problem, dtype)
    except ValueError as err:
        raise UsageError(f"{args.problem} from {args.data or 'synthetic data'}: {err}") from None
    plans = {}
    for label, method, _ in specs:
        capabilities = pdmm.METHODS[method].capabilities
        if network is not None and network.privacy is not None and capabilities.rho and not capabilities.privacy:
            raise UsageError(
                f"{label}: --privacy perturbs the z of pdmm and qa-pdmm; it is not implemented for {method}"
            )
        try:
            if args.nproc == 1:
                plans[label] = plan_run(problem, method, params[label], args, network)
                continue
            pdmm.plan(
                problem,
                method=method,
                device=args.device,
                dtype=dtype,
                network=network,
                reorder=False,
                form="edges",
                **params[label],
            )
            pdmm.distributed.check_supported(method, args.device, False)
        except (ValueError, TypeError) as err:
            raise UsageError(f"{label}: {err}") from None
    if args.nproc > problem.n:
        raise UsageError(f"--nproc {args.nproc} is more than the graph's {problem.n} nodes")
    return plans


def plan_parts(
    part: Any,
    specs: Sequence[Spec],
    params: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    network: pdmm.Network | None,
) -> dict[str, pdmm.Plan]:
    """Each run on this process's part (--shards) planned once (plan_run, the partitioned engine), so that what
    pdmm.plan refuses is an error before anything is written; what needs every part (the problem's scale, the
    rho it resolves) is checked by the engine as it starts, on every process alike (docs/guide/distributed.md,
    "Each rank holds its part").

    Parameters
    ----------
    part : pdmm.PartProblem
        This process's part.
    specs : sequence of (label, method, params)
        The runs.
    params : dict
        {label: the run's parameters}.
    args : argparse.Namespace
        The solve command's arguments.
    network : pdmm.Network or None
        The simulated network.

    Returns
    -------
    dict
        {label: pdmm.Plan}, for solve_all.

    Raises
    ------
    UsageError
        Naming the run whose parameters are refused.
    """
    plans = {}
    for label, method, _ in specs:
        try:
            plans[label] = plan_run(part, method, params[label], args, network)
        except (ValueError, TypeError) as err:
            raise UsageError(f"{label}: {err}") from None
    return plans
