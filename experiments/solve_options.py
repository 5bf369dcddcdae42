"""The options of `pdmm-bridge solve`: the argument types of its flags and method specs, and its argument groups.

A method spec is METHOD[:KEY=VALUE...] (docs/guide/solve.md); each type below refuses bad text while argparse
parses, before any work, with a message that names the bad value and the accepted ones. It imports neither pdmm
nor torch (the accepted names are experiments/solve_names.py's), so `solve --help` and an argument error answer at
once (docs/guide/runs.md, "The command line").
"""

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from . import solve_names as names
from .options import key_value, positive

DEFAULT_DIM, DEFAULT_SAMPLES = 3, 10
DEFAULT_REG = 0.1
BUILTIN = "builtin:"


def _value(key: str, text: str) -> Any:
    """A method parameter from its text: rho a number > 0, theta a number, eta "L", "safe" or a number > 0,
    mixing a kind of pdmm.mixing_matrix, low and high numbers (their range is the method's to check), alpha
    "auto" or a number > 0, step "constant" or "diminishing"."""
    parse = {
        "rho": positive(float),
        "theta": float,
        "eta": _eta,
        "mixing": _mixing,
        "low": float,
        "high": float,
        "alpha": _alpha,
        "step": _step,
    }[key]
    try:
        return parse(text)
    except (ValueError, argparse.ArgumentTypeError) as err:
        raise argparse.ArgumentTypeError(f"{key}: {err}") from None


def _spec(text: str) -> tuple[str, str, dict[str, Any]]:
    """ "pdmm:theta=0.5:rho=2" -> ("pdmm:theta=0.5:rho=2", "pdmm", {"theta": 0.5, "rho": 2.0}).

    The label is the spec as written (a plain method name labels itself); the keys are rho where the
    method has one and the parameters of the method's constructor (theta, eta, mixing, alpha, step), with
    chebyshev's interval written as low and high: "chebyshev:low=-0.5:high=0.9" -> {"interval": (-0.5, 0.9)}.
    """
    method, *assignments = [part.strip() for part in text.strip().split(":")]
    if method not in names.METHODS:
        raise argparse.ArgumentTypeError(
            f"unknown method {method!r} in {text!r}; choose from {', '.join(names.METHODS)}"
        )
    keys = accepted(method)
    params = {}
    for assignment in assignments:
        key, sep, value = (part.strip() for part in assignment.partition("="))
        if not (sep and key in keys and value) or key in params:
            raise argparse.ArgumentTypeError(
                f"bad parameter {assignment!r} in {text!r}: {method} takes "
                f"{', '.join(f'{name}=VALUE' for name in keys)}, each once"
            )
        params[key] = _value(key, value)
    label = ":".join([method, *(f"{key}={_text(value)}" for key, value in params.items())])
    if ("low" in params) != ("high" in params):
        raise argparse.ArgumentTypeError(f"{text!r}: give low and high together (the interval [low, high])")
    if "low" in params:
        params["interval"] = (params.pop("low"), params.pop("high"))
    return label, method, params


def accepted(method: str) -> list[str]:
    """The KEYs of a spec of `method`: rho where it has one, its constructor's parameters, the interval as low and
    high (a spec cannot hold a pair: commas separate the specs); docs/guide/solve_cli.md.

    Parameters
    ----------
    method : str
        A name in pdmm.METHODS.

    Returns
    -------
    list of str
        The keys a spec of the method may set, e.g. ["rho", "theta"] for pdmm.
    """
    return list(names.METHODS[method])


def _text(value: Any) -> str:
    """A parameter as a spec writes it: a word as is, a number by %g."""
    return value if isinstance(value, str) else f"{value:g}"


def _specs(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    """--compare pdmm:theta=1,pdmm:theta=0.5,admm -> a list of _spec results with distinct labels."""
    specs = [_spec(part) for part in text.split(",") if part.strip()]
    labels = [label for label, _, _ in specs]
    if not specs or len(set(labels)) != len(labels):
        raise argparse.ArgumentTypeError(f"expected distinct method specs separated by commas, got {text!r}")
    return specs


def _positive_or(*words: str) -> Callable[[str], str | float]:
    """A parser of one of `words` as written, or a number > 0."""
    named = ", ".join(f"'{word}'" for word in words)

    def parse(text: str) -> str | float:
        if text in words:
            return text
        try:
            return positive(float)(text)
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(f"must be {named} or a number > 0, got {text!r}") from None

    return parse


_eta, _alpha = _positive_or("L", "safe"), _positive_or("auto")


def _step(text: str) -> str:
    """dgd's step rule: a name in pdmm.decentralised.STEPS."""
    if text not in names.STEPS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(names.STEPS)}, got {text!r}")
    return text


def _mixing(text: str) -> str:
    """A mixing matrix kind: a name in pdmm.mixing.KINDS."""
    if text not in names.MIXINGS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(names.MIXINGS)}, got {text!r}")
    return text


def _tolerance(text: str) -> float:
    """--tol: a number in [0, 1) (0 runs every --iters iteration; it is relative, and 1 would pass at x = 0),
    refused while parsing, before any work."""
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a number >= 0 and below 1 (it is relative), got {text}")
    return value


def seed_value(text: str) -> int:
    """--seed: an integer in [0, 2^63): every generator seeded from it (numpy, torch, pdmm.Network) takes it."""
    value = int(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 2^63 - 1, got {text}")
    return value


def _solve_device(text: str) -> str:
    """--device: a torch device this machine has (common.device) that holds data: not 'meta'. The default, cpu,
    is every machine's and is returned without loading torch (so an argument error answers at once)."""
    if text == "cpu":
        return text
    import torch

    from .common import device

    text = device(text)
    if torch.device(text).type == "meta":
        raise argparse.ArgumentTypeError("'meta' holds no data; solve on cpu or a GPU (cuda)")
    return text


def _wake(text: str) -> str | float:
    """--wake: a number, or "one" (one node awake per iteration); the range is pdmm.Network's to check."""
    if text.strip() == "one":
        return "one"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a probability or 'one', got {text!r}") from None


def _pair(text: str) -> tuple[float, float]:
    """--burst "0.05,0.3" -> (0.05, 0.3); the ranges are pdmm.Network's to check."""
    try:
        p_gb, p_bg = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected P_GB,P_BG, two probabilities separated by a comma, got {text!r}"
        ) from None
    return p_gb, p_bg


def add_topology_arguments(p: Any) -> None:
    """--nodes and --graph-param, the size and parameters of a named topology (solve and partition)."""
    p.add_argument("--nodes", type=int, default=100, help="number of nodes of a named topology")
    p.add_argument(
        "--graph-param",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topology parameter, e.g. radius=0.3 (repeatable)",
    )


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """Add the "problem and data" group of `pdmm-bridge solve` (--problem, --dim, --samples, --batch, --ridge,
    --lam, --reg, --data) to a parser: solve's and partition's, which read them with
    experiments/solve_problem.py's data_of and problem_from.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The command's parser.
    """
    data = p.add_argument_group("problem and data")
    data.add_argument("--problem", default="averaging", choices=names.PROBLEMS, help="the local functions f_i")
    data.add_argument(
        "--dim", type=positive(int), help=f"variable size d of synthetic data ({DEFAULT_DIM} when not given)"
    )
    data.add_argument(
        "--samples",
        type=positive(int),
        help=f"rows of H or X per node of synthetic data ({DEFAULT_SAMPLES} when not given)",
    )
    data.add_argument(
        "--batch", type=positive(int), help="solve this many independent instances at once (synthetic data)"
    )
    data.add_argument("--ridge", type=float, default=0.0, help="least_squares ridge weight")
    data.add_argument("--lam", type=float, default=0.1, help="lasso l1 weight")
    data.add_argument(
        "--reg",
        type=float,
        help=f"logistic ridge weight of each f_i (default {DEFAULT_REG}); with "
        "--data builtin:NAME the l2 weight of the whole problem, split evenly over the nodes (default "
        f"{names.BREAST_CANCER_L2:g} for breast_cancer)",
    )
    data.add_argument(
        "--data",
        metavar="FILE.npz",
        help="read the data arrays from this file instead of sampling "
        f"(headers checked first: at most {names.NPZ_LIMIT // 2**20} MiB of arrays, compressed at most "
        f"{names.NPZ_RATIO}:1, no objects), or "
        f"builtin:NAME for a data set shipped with a library ({', '.join(names.DATASETS)})",
    )


def given(argv: Sequence[str], dests: Sequence[str]) -> list[str]:
    """The flags among `dests` (argparse destinations of `pdmm-bridge solve`) that the command line `argv` (solve's
    arguments, after the command's name) gives, whatever their value (a default typed out counts), named as
    "--graph-param" for graph_param: argv is parsed again into a namespace holding None for them, which their
    defaults do not replace and a value given does.

    Parameters
    ----------
    argv : sequence of str
        The solve command's arguments, which parse (argparse has checked them).
    dests : sequence of str
        Destinations, e.g. ("nodes", "graph_param").

    Returns
    -------
    list of str
        The flags given, in the order of `dests`.
    """
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    parsed, _ = parser.parse_known_args(list(argv), namespace=argparse.Namespace(**dict.fromkeys(dests)))
    return ["--" + dest.replace("_", "-") for dest in dests if getattr(parsed, dest) is not None]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the argument groups of `pdmm-bridge solve` to its parser: problem and data, graph, solver, simulated
    network, output.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The solve command's parser.
    """
    add_data_arguments(p)
    graph = p.add_argument_group("graph")
    graph.add_argument(
        "--graph",
        default="random_geometric",
        help=f"a topology ({', '.join(names.TOPOLOGIES)}) or a .graphml / edge-list file",
    )
    add_topology_arguments(graph)
    graph.add_argument(
        "--shards",
        metavar="DIR",
        help="solve the problem `pdmm-bridge partition` cut into DIR, each process loading only its part "
        "(--nproc the manifest's parts; its manifest fixes the graph, the data and the problem; x written as "
        "OUT/x/part-RRRRR.npz)",
    )
    solver = p.add_argument_group("solver")
    which = solver.add_mutually_exclusive_group()
    which.add_argument(
        "--method",
        type=_spec,
        default="pdmm",
        metavar="SPEC",
        help=f"one method ({', '.join(names.METHODS)}), optionally with parameters, e.g. "
        "pdmm:theta=0.5 or chebyshev:mixing=lazy_metropolis",
    )
    which.add_argument(
        "--compare",
        type=_specs,
        metavar="SPEC,SPEC,...",
        help="several runs in one output, each METHOD[:KEY=VALUE...] with KEY rho, theta, eta, mixing, "
        "low, high, alpha, step, e.g. pdmm:theta=1,pdmm:theta=0.5,admm,qa-pdmm:eta=safe,gossip,"
        "chebyshev:low=-0.5:high=0.95,extra:alpha=0.05,dgd:step=diminishing",
    )
    solver.add_argument(
        "--rho",
        type=positive(float),
        help="penalty parameter of the pdmm, qa-pdmm and admm runs without their own rho (default 1)",
    )
    solver.add_argument(
        "--theta",
        type=float,
        help="averaging of the pdmm / qa-pdmm runs without their own theta (1 = PDMM, 0.5 = averaged)",
    )
    solver.add_argument(
        "--eta", type=_eta, help="qa-pdmm proximal weight (L, safe or a number) of the runs without their own eta"
    )
    solver.add_argument("--iters", type=positive(int), default=1000, help="maximum iterations (of each tuning run too)")
    solver.add_argument(
        "--tune",
        type=positive(float),
        nargs="?",
        const=names.TUNE_TARGET,
        metavar="TARGET",
        help="choose each run's rho or alpha, unless its spec sets it, on pdmm.tune's grid: the value "
        f"that reaches relative error TARGET (default {names.TUNE_TARGET:g}) in the fewest iterations",
    )
    solver.add_argument(
        "--tol",
        type=_tolerance,
        default=1e-10,
        help="stop, converged, when the residual falls below tol * max(s, RMS of x), s = min(1, the data's "
        "scale), and the optimality residual (the gradient of the sum at the average; the KKT residual with edge "
        'matrices) below tol times its own scale (docs/guide/solve.md, "The stopping test"); a number in [0, 1), '
        "0 runs all --iters",
    )
    solver.add_argument(
        "--reference",
        choices=("cvxpy", "none"),
        default="cvxpy",
        help="centralised solution for the relative error (none with --shards: no process holds the whole problem)",
    )
    solver.add_argument("--device", type=_solve_device, default="cpu", help="torch device, e.g. cpu or cuda")
    solver.add_argument("--dtype", choices=names.DTYPES, default="float64", help="floating-point type of the iterates")
    solver.add_argument(
        "--seed", type=seed_value, default=0, help="seed for the graph, the synthetic data and the network"
    )
    solver.add_argument(
        "--nproc",
        type=positive(int),
        default=1,
        help="processes: more than 1 runs the partitioned engine as one job of this many processes "
        "(consensus problems; with --shards, the manifest's parts)",
    )
    network = p.add_argument_group("simulated network (pdmm.Network; every run sees the same draws)")
    network.add_argument(
        "--drop",
        type=float,
        default=0.0,
        metavar="P",
        help="probability that a message is lost (in the good state with --burst; per-edge probabilities: Python only)",
    )
    network.add_argument(
        "--burst",
        type=_pair,
        metavar="P_GB,P_BG",
        help="bursty loss: each directed link is a "
        "Gilbert-Elliott chain, good -> bad with probability P_GB and bad -> good with P_BG per "
        "iteration, losing every message while bad (mean burst 1/P_BG iterations)",
    )
    network.add_argument(
        "--wake",
        type=_wake,
        default=1.0,
        metavar="Q",
        help="probability that a node is awake "
        "in an iteration (a sleeping node neither updates nor sends), or 'one': exactly one "
        "node, chosen uniformly, per iteration (per-node probabilities: Python only)",
    )
    network.add_argument(
        "--edge-up",
        type=float,
        default=1.0,
        metavar="R",
        help="probability that an edge is up in an iteration (both directions)",
    )
    network.add_argument("--bits", type=int, metavar="B", help="quantise every number sent to B bits")
    network.add_argument(
        "--dither",
        nargs="?",
        const="subtractive",
        choices=("subtractive", "stochastic"),
        help="with --bits: subtractive dither (the default when given) or stochastic rounding",
    )
    network.add_argument(
        "--limit",
        type=float,
        help="with --bits: the quantiser's range [-LIMIT, LIMIT] (default: adapted to each sender's messages)",
    )
    network.add_argument(
        "--privacy",
        type=float,
        metavar="SCALE",
        help="subspace perturbation: initial z with "
        "standard deviation SCALE (pdmm, qa-pdmm), and the privacy measures in history.csv",
    )
    output = p.add_argument_group("output")
    output.add_argument(
        "--out", default="runs/solve", help="output directory (refused when it exists and is not empty, unless --force)"
    )
    output.add_argument("--force", action="store_true", help="write into an existing non-empty --out")
    output.add_argument("--no-progress", action="store_true", help="no progress bar")
