"""The problem `pdmm-bridge solve` builds from its command-line choices, checked before anything is written: the
graph, the data and the simulated network (the runs on it: experiments/solve_runs.py).

Bad input is a UsageError naming the flag (docs/guide/runs.md, "Exit codes"); warnings are printed one line each,
by one process of a --nproc job.
"""

import argparse
import inspect
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pdmm
import pdmm.datasets
import pdmm.npz
from pdmm.synthetic import make_data, make_problem

from . import launch
from .common import build_graph
from .errors import UsageError
from .solve_options import BUILTIN, DEFAULT_DIM, DEFAULT_REG, DEFAULT_SAMPLES


def network_of(args: argparse.Namespace) -> pdmm.Network | None:
    """The simulated network of the network flags (pdmm.Network, seeded by --seed; docs/guide/network.md).

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (drop, wake, edge_up, bits, privacy, dither, limit, burst, seed).

    Returns
    -------
    pdmm.Network or None
        None when every flag is at its default (the ideal network).

    Raises
    ------
    UsageError
        When pdmm.Network refuses a value, or no method can progress over the network, naming the flag.
    """
    given = dict(
        drop=args.drop,
        wake=args.wake,
        edge_up=args.edge_up,
        bits=args.bits,
        privacy=args.privacy,
        dither=args.dither or False,
        limit=args.limit,
        burst=args.burst,
    )
    if given == dict(drop=0.0, wake=1.0, edge_up=1.0, bits=None, privacy=None, dither=False, limit=None, burst=None):
        return None
    try:
        network = pdmm.Network(**given, seed=args.seed)
    except ValueError as err:
        flag = str(err).split()[0].replace("_", "-")
        raise UsageError(f"--{flag}: {err}") from None
    stuck = network.stuck()
    if stuck is not None:
        flag = stuck.split("=")[0].replace("_", "-")
        raise UsageError(f"--{flag}: {stuck}; no method can make progress over this network")
    return network


def graph_of(args: argparse.Namespace) -> Any:
    """The graph of --graph: a named topology (common.build_graph), or a graph file read as a pdmm.Graph (arrays,
    no Python object per edge: pdmm.load_graph(arrays=True)), its warnings (self loops) printed one line each.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (graph, nodes, seed, graph_param).

    Returns
    -------
    networkx.Graph or pdmm.Graph

    Raises
    ------
    UsageError
        When the graph cannot be built or read, or a graph file is disconnected.
    """
    if args.graph in pdmm.TOPOLOGIES or not Path(args.graph).is_file() or args.graph_param:
        return build_graph(args.graph, args.nodes, args.seed, dict(args.graph_param))  # its errors for the rest
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            G = pdmm.load_graph(args.graph, arrays=True)
    except ValueError as err:
        raise UsageError(str(err)) from None
    for warning in caught if launch.speaks() else ():
        print(f"pdmm-bridge {getattr(args, 'command', 'solve')}: warning: {warning.message}", file=sys.stderr)
    if G.components > 1:
        raise UsageError(
            f"the graph in {args.graph} is disconnected: it has {G.components} connected components; "
            "PDMM needs a connected graph"
        )
    return G


def problem_of(args: argparse.Namespace, G: Any) -> pdmm.Problem:
    """The problem of --problem on G with the data of --data, or synthetic data (pdmm.synthetic); resolves
    args.reg, and for synthetic data args.dim and args.samples, for config.json.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (problem, data, dim, samples, batch, ridge, lam, reg, seed).
    G : networkx.Graph or pdmm.Graph
        The graph.

    Returns
    -------
    pdmm.Problem

    Raises
    ------
    UsageError
        When the data is missing, unreadable or does not fit the problem.
    """
    if args.data is not None and args.data.startswith(BUILTIN):
        return builtin_problem(args, G)
    return problem_from(args, G, data_of(args, G))


def data_of(args: argparse.Namespace, G: Any) -> dict[str, Any]:
    """The data arrays of --data FILE.npz, or synthetic ones for --problem on G (pdmm.synthetic.make_data, sized by
    --dim, --samples and --batch); resolves args.reg, and for synthetic data args.dim and args.samples, for
    config.json.

    Parameters
    ----------
    args : argparse.Namespace
        The command's arguments (problem, data, dim, samples, batch, reg, seed).
    G : networkx.Graph or pdmm.Graph
        The graph.

    Returns
    -------
    dict
        {name: array}, the arrays pdmm.synthetic.make_problem takes.

    Raises
    ------
    UsageError
        When the data file is missing or unreadable, or the synthetic data would not fit in memory.
    """
    args.reg = DEFAULT_REG if args.reg is None else args.reg  # resolved for config.json
    if args.data is None:
        args.dim, args.samples = args.dim or DEFAULT_DIM, args.samples or DEFAULT_SAMPLES  # resolved for config.json
        try:  # its size checked against the memory available before anything is drawn
            return make_data(args.problem, G.number_of_nodes(), args.dim, args.samples, args.batch, args.seed)
        except ValueError as err:
            raise UsageError(str(err)) from None
    refuse_sizes(args)
    if not Path(args.data).is_file():
        raise UsageError(f"data file not found: {args.data}")
    if not zipfile.is_zipfile(args.data):
        raise UsageError(f"{args.data} is not an .npz archive (write one with numpy.savez)")
    try:  # every header checked before any data is read (pdmm.npz: size, compression ratio, no objects)
        return pdmm.npz.read_npz(args.data)
    except pdmm.npz.NpzError as err:
        raise UsageError(f"could not read data file {err}") from None


def problem_from(args: argparse.Namespace, G: Any, data: dict[str, Any]) -> pdmm.Problem:
    """The problem of --problem on G with `data` (data_of's) and the weights --ridge, --lam, --reg, its warnings
    printed one line each.

    Parameters
    ----------
    args : argparse.Namespace
        The command's arguments (problem, data, ridge, lam, reg).
    G : networkx.Graph or pdmm.Graph
        The graph.
    data : dict
        The data arrays.

    Returns
    -------
    pdmm.Problem

    Raises
    ------
    UsageError
        When the data does not fit the problem.
    """
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            problem = make_problem(args.problem, G, data, ridge=args.ridge, lam=args.lam, reg=args.reg)
    except (ValueError, TypeError) as err:
        source = args.data or "synthetic data"
        raise UsageError(f"{args.problem} from {source}: {err}") from None
    for warning in caught if launch.speaks() else ():  # e.g. self-loops in a graph file, which PDMM ignores
        print(f"pdmm-bridge {getattr(args, 'command', 'solve')}: warning: {warning.message}", file=sys.stderr)
    return problem


def refuse_sizes(args: argparse.Namespace) -> None:
    """Refuse --dim, --samples and --batch, which size synthetic data, beside --data.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (dim, samples, batch).

    Raises
    ------
    UsageError
        Naming the flags given.
    """
    given = [f"--{name}" for name in ("dim", "samples", "batch") if getattr(args, name) is not None]
    if given:
        raise UsageError(f"{', '.join(given)} size synthetic data; with --data the data set's shapes decide")


def builtin_problem(args: argparse.Namespace, G: Any) -> pdmm.Problem:
    """The problem of --data builtin:NAME (pdmm.datasets.DATASETS) on G, its rows split by --seed and --reg its
    whole weight (the data set's default when not given, resolved in args.reg).

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (data, problem, reg, seed).
    G : networkx.Graph or pdmm.Graph
        The graph.

    Returns
    -------
    pdmm.Problem

    Raises
    ------
    UsageError
        For an unknown data set, another problem kind, sizes of synthetic data, or a data set whose library (an
        optional extra) is not installed.
    """
    name = args.data[len(BUILTIN) :]
    if name not in pdmm.datasets.DATASETS:
        raise UsageError(
            f"unknown data set {args.data!r}; choose from "
            f"{', '.join(BUILTIN + known for known in pdmm.datasets.DATASETS)}"
        )
    kind, build = pdmm.datasets.DATASETS[name]
    if args.problem != kind:
        raise UsageError(f"{args.data} is a {kind} data set; pass --problem {kind}")
    refuse_sizes(args)
    if args.reg is None:  # resolved for config.json
        args.reg = inspect.signature(build).parameters["l2"].default
    try:
        return build(G, l2=args.reg, seed=args.seed)
    except (ValueError, ImportError) as err:  # ImportError: the data set's library is not installed
        raise UsageError(f"{args.data}: {err}") from None
