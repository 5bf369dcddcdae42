"""Named communication topologies: connected networkx graphs from networkx's generators (pdmm.topology);
graph files are read by pdmm/graph_files.py, graphs held as arrays live in pdmm/array_graph.py."""

import functools
import inspect
import math
import numbers
from typing import Any

import networkx as nx
import numpy as np

MAX_RESAMPLES = 100


def _grid_shape(n, rows):
    """rows x cols = n; by default the most square factorisation of n."""
    if rows is None:
        rows = max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
    if not (isinstance(rows, numbers.Integral) and rows >= 1):
        raise ValueError(f"rows must be a positive integer, got {rows!r}")
    if n % rows:
        raise ValueError(f"grid/torus needs rows to divide n, got n={n}, rows={rows}")
    return rows, n // rows


def _grid(n, rows=None):
    return nx.grid_2d_graph(*_grid_shape(n, rows))


def _torus(n, rows=None):
    rows, cols = _grid_shape(n, rows)
    if min(rows, cols) < 3:
        raise ValueError(f"torus needs at least 3 rows and 3 columns, got {rows} x {cols} for n={n}")
    return nx.grid_2d_graph(rows, cols, periodic=True)


def _sampled(make):
    """Wrap a random generator so it is resampled (new seeds from `seed`) until connected."""

    @functools.wraps(make)  # keeps make's signature: the accepted parameters
    def sample(n, seed, **params):
        rng = np.random.default_rng(seed)
        for _ in range(MAX_RESAMPLES):
            G = make(n, seed=int(rng.integers(2**31)), **params)
            if nx.is_connected(G):
                return G
        raise ValueError(f"no connected sample in {MAX_RESAMPLES} tries with {params}; make the graph denser")

    return sample


def _erdos_renyi(n, seed, p=None):
    if p is not None and not 0 < p <= 1:
        raise ValueError(f"erdos_renyi needs 0 < p <= 1, got p={p}")
    return nx.erdos_renyi_graph(n, 2 * math.log(n) / n if p is None else p, seed=seed)


def _random_geometric(n, seed, radius=None):
    if radius is not None and not radius > 0:
        raise ValueError(f"random_geometric needs radius > 0, got radius={radius}")
    return nx.random_geometric_graph(n, math.sqrt(2 * math.log(n) / n) if radius is None else radius, seed=seed)


def _random_regular(n, seed, degree=4):
    return nx.random_regular_graph(degree, n, seed=seed)


TOPOLOGIES = {
    "ring": lambda n, seed: nx.cycle_graph(n),
    "path": lambda n, seed: nx.path_graph(n),
    "star": lambda n, seed: nx.star_graph(n - 1),
    "complete": lambda n, seed: nx.complete_graph(n),
    "grid": lambda n, seed, rows=None: _grid(n, rows),
    "torus": lambda n, seed, rows=None: _torus(n, rows),
    "erdos_renyi": _sampled(_erdos_renyi),
    "random_geometric": _sampled(_random_geometric),
    "random_regular": _sampled(_random_regular),
    "small_world": lambda n, seed, k=4, p=0.1: nx.connected_watts_strogatz_graph(n, k, p, seed=seed),
    "barabasi_albert": lambda n, seed, m=2: nx.barabasi_albert_graph(n, m, seed=seed),
}


INTEGER_PARAMETERS = ("rows", "degree", "k", "m")  # the topologies' parameters that count (nodes, neighbours, edges)


def _check_parameters(kind: str, params: dict[str, Any]) -> None:
    """ValueError naming the first parameter that is not a number of its kind: an integer for INTEGER_PARAMETERS,
    a finite real number for the others (erdos_renyi's and small_world's p, random_geometric's radius)."""
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"topology {kind!r}: {name} must be a number, got {value!r}")
        if name in INTEGER_PARAMETERS and not isinstance(value, numbers.Integral):
            raise ValueError(f"topology {kind!r}: {name} must be an integer, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"topology {kind!r}: {name} must be finite, got {value!r}")


def topology(kind: str, n: int, seed: int = 0, **params: Any) -> nx.Graph:
    """A connected networkx graph on nodes 0..n-1 of the named kind (see TOPOLOGIES).

    Random kinds are resampled until connected. For graphs too large for networkx, pdmm.Graph samples
    random_geometric, random_regular, grid and erdos_renyi directly as arrays (pdmm/array_graph.py).

    Parameters
    ----------
    kind : str
        A key of TOPOLOGIES: ring, path, star, complete, grid, torus, erdos_renyi, random_geometric,
        random_regular, small_world or barabasi_albert.
    n : int
        The number of nodes, >= 2.
    seed : int
        The seed of the random kinds.
    **params
        The kind's own parameters: grid/torus `rows`; erdos_renyi `p` (default 2 ln n / n);
        random_geometric `radius` (default sqrt(2 ln n / n)); random_regular `degree` (4);
        small_world `k` (4), `p` (0.1); barabasi_albert `m` (2).

    Returns
    -------
    networkx.Graph
        The graph, nodes numbered 0..n-1 (the generator's labels in the node attribute "label").

    Raises
    ------
    ValueError
        For an unknown kind, a bad n, a parameter that is not a number of its kind (an integer for rows,
        degree, k and m; finite for all), or parameters networkx refuses.
    TypeError
        For parameters the kind does not take.
    """
    if kind not in TOPOLOGIES:
        raise ValueError(f"unknown topology {kind!r}; choose one of {sorted(TOPOLOGIES)}")
    if not (isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 2):
        raise ValueError(f"a topology needs an integer n >= 2 nodes, got n={n!r}")
    accepted = list(inspect.signature(TOPOLOGIES[kind]).parameters)[2:]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise TypeError(f"bad parameters {unknown} for topology {kind!r}; it accepts {accepted or 'none'}")
    _check_parameters(kind, params)
    try:
        G = TOPOLOGIES[kind](n, seed=seed, **params)
    except (nx.NetworkXException, TypeError) as err:  # e.g. "n * d must be even", m >= n
        raise ValueError(f"topology {kind!r} with n={n} and {params}: {err}") from None
    return nx.convert_node_labels_to_integers(G, label_attribute="label")
