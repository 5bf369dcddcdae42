"""Communication graphs: named topologies (networkx generators) and graph files."""

import functools
import inspect
import math
import numbers
import re
from pathlib import Path
from xml.parsers import expat

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


def topology(kind, n, seed=0, **params):
    """A connected networkx graph on nodes 0..n-1 of the named kind (see TOPOLOGIES).

    Parameters beyond n and seed: grid/torus `rows`; erdos_renyi `p` (default 2 ln n / n);
    random_geometric `radius` (default sqrt(2 ln n / n)); random_regular `degree` (4);
    small_world `k` (4), `p` (0.1); barabasi_albert `m` (2). Random kinds are resampled
    until connected. For graphs too large for networkx, pdmm.Graph samples random_geometric,
    random_regular, grid and erdos_renyi directly as arrays (pdmm/graph.py).
    """
    if kind not in TOPOLOGIES:
        raise ValueError(f"unknown topology {kind!r}; choose one of {sorted(TOPOLOGIES)}")
    if not (isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 2):
        raise ValueError(f"a topology needs an integer n >= 2 nodes, got n={n!r}")
    accepted = list(inspect.signature(TOPOLOGIES[kind]).parameters)[2:]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise TypeError(f"bad parameters {unknown} for topology {kind!r}; it accepts {accepted or 'none'}")
    try:
        G = TOPOLOGIES[kind](n, seed=seed, **params)
    except (nx.NetworkXException, TypeError) as err:  # e.g. "n * d must be even", m >= n
        raise ValueError(f"topology {kind!r} with n={n} and {params}: {err}") from None
    return nx.convert_node_labels_to_integers(G, label_attribute="label")


def load_graph(path, arrays=False):
    """Read an undirected graph from a GraphML file (.graphml) or an edge list (any other suffix): a networkx
    graph, or with arrays=True a pdmm.Graph (the same nodes in the same order; self loops dropped with a
    warning), which large edge lists need (no Python object per edge).

    An edge list is read as networkx.read_edgelist reads it: text after "#" is a comment, a line with fewer
    than two fields is skipped, fields after the first two are ignored, never evaluated; nodes are numbered
    in order of first appearance, and labels that are all integers ("7", not "07") become ints. It is parsed
    by read_edge_list at C speed in memory proportional to the edges (docs/guide/solve.md, "Graphs"). A GraphML file
    that declares a DOCTYPE is refused (_refuse_doctype).
    """
    from .graph import Graph, _from_pairs

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"graph file not found: {path}")
    graphml = path.suffix.lower() == ".graphml"
    _check_memory(path, GRAPHML_MEMORY if graphml else EDGE_LIST_MEMORY)
    try:
        if graphml:
            _refuse_doctype(path)
            G = nx.Graph(nx.read_graphml(path))
        else:
            labels, src, dst = read_edge_list(path)
    except Exception as err:  # networkx and the reader's allocations raise many types for malformed or huge files
        raise ValueError(f"could not read graph file {path}: {_reason(err)}") from None
    if (G.number_of_edges() if graphml else len(src)) == 0:
        raise ValueError(f"graph file {path} holds no edges")
    if graphml:
        return Graph.from_networkx(G) if arrays else G
    if arrays:
        return _from_pairs(len(labels), src, dst, labels, warn=True)
    G = nx.Graph()
    G.add_nodes_from(labels)
    G.add_edges_from(zip(map(labels.__getitem__, src.tolist()), map(labels.__getitem__, dst.tolist()), strict=False))
    return G


EDGE_CHUNK = 2**22  # bytes of an edge list parsed at a time: its token lists take about 10x this
LONG_LABEL = 32  # bytes: a chunk with a longer label is numbered through Python objects, not fixed-width arrays
EDGE_LIST_MEMORY = 10  # bytes of memory per byte of an edge list (measured 8.6-9.7 at 23-237 MB)
GRAPHML_MEMORY = 50  # the same for GraphML read by networkx (measured about 40)
_ODD_LINE = re.compile(rb"^[ \t\r\f\v]*\S+[ \t\r\f\v]*$|^[ \t\r\f\v]*\S+[ \t\r\f\v]+\S+[ \t\r\f\v]+\S", re.M)


def read_edge_list(path) -> tuple[list, np.ndarray, np.ndarray]:
    """(labels, src, dst) of the edge list at `path`: node k is labels[k] (order of first appearance, ints where
    every label is the canonical text of an int), and line e's edge is (src[e], dst[e]), int64, self loops and
    repeats kept. Read in chunks of EDGE_CHUNK bytes of whole lines; a chunk whose lines are all ASCII with
    none or two fields (after comments) is split at C speed (bytes.split), any other goes line by line."""
    ends = []
    with open(path, "rb") as file:
        rest = b""
        while True:
            block = file.read(EDGE_CHUNK)
            data = rest + block
            cut = len(data) if not block else data.rfind(b"\n") + 1
            data, rest = data[:cut], data[cut:]
            if data:
                ends.append(_chunk_ends(data))
            if not block:
                break
    ends = [e for e in ends if len(e)]
    if not ends:
        return [], np.empty(0, np.int64), np.empty(0, np.int64)
    if any(e.dtype.kind == "O" for e in ends):  # long labels: fixed-width arrays would take count x longest
        labels, index = _numbered_objects(ends)
        return labels, index[0::2], index[1::2]
    if any(e.dtype.kind == "U" for e in ends):
        ends = [e.astype(str) for e in ends]
    labels, index = _numbered(np.concatenate(ends).ravel())
    return labels, index[0::2], index[1::2]


def _chunk_ends(data: bytes) -> np.ndarray:
    """(lines, 2) array of the first two fields of every line of `data` with at least two (bytes 'S' at C speed,
    str 'U' line by line where some line is not ASCII or has one or more than two fields)."""
    if b"#" in data:
        data = re.sub(rb"#[^\n]*", b"", data)
    if data.isascii() and not _ODD_LINE.search(data):
        tokens = data.split()
        long = bool(tokens) and max(map(len, tokens)) > LONG_LABEL
        return np.array(tokens, dtype=object if long else bytes).reshape(-1, 2)
    pairs = [fields[:2] for fields in (line.split() for line in data.decode("utf-8").splitlines()) if len(fields) >= 2]
    long = any(len(a) > LONG_LABEL or len(b) > LONG_LABEL for a, b in pairs)
    return np.array(pairs, dtype=object if long else str).reshape(-1, 2)


def _numbered_objects(chunks: list) -> tuple[list, np.ndarray]:
    """_numbered for chunks of which some hold labels longer than LONG_LABEL (object arrays): every label as str,
    numbered in order of first appearance through a dict, in memory proportional to the labels' text. A label that
    long is not the text of an int64, so the labels stay str."""
    index: dict = {}

    def texts(chunk):
        for label in chunk.ravel().tolist():
            yield label.decode() if isinstance(label, bytes) else label

    total = sum(chunk.size for chunk in chunks)
    codes = np.fromiter(
        (index.setdefault(label, len(index)) for chunk in chunks for label in texts(chunk)), dtype=np.int64, count=total
    )
    return list(index), codes


def _numbered(flat: np.ndarray) -> tuple[list, np.ndarray]:
    """(labels in order of first appearance, the index of every entry of flat): ints where every label is the
    canonical text of an int (as load_graph has always made them), else str."""
    keys = flat
    try:
        numbers_ = flat.astype(np.int64)
        if np.array_equal(numbers_.astype(flat.dtype), flat):
            keys = numbers_
    except (ValueError, OverflowError):
        pass
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    labels = unique[order].tolist()
    if keys.dtype.kind == "S":
        labels = [label.decode() for label in labels]
    return labels, rank[inverse.ravel()]


def _check_memory(path: Path, factor: int) -> None:
    """ValueError, before anything is read, when reading the graph file at `path` would take more memory (about
    `factor` times its size) than this process can have (available_memory)."""
    size, available = path.stat().st_size, available_memory()
    if available is not None and size * factor > available:
        raise ValueError(
            f"could not read graph file {path}: reading its {_bytes(size)} would take about "
            f"{_bytes(size * factor)} of memory, more than the {_bytes(available)} available"
        )


def available_memory() -> int | None:
    """Bytes this process may still allocate: the system's MemAvailable (Linux), less where an address-space limit
    (ulimit -v) leaves less; None where neither is known."""
    import resource

    known = []
    try:
        with open("/proc/meminfo") as file:
            known += [int(line.split()[1]) * 1024 for line in file if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm") as file:
                used = int(file.read().split()[0]) * resource.getpagesize()
        except (OSError, ValueError, IndexError):
            used = 0
        known.append(max(limit - used, 0))
    return min(known) if known else None


def _bytes(count: int) -> str:
    """A byte count for people: 947 MB, 9.5 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"


def _reason(err: BaseException) -> str:
    """What went wrong, never empty: the first line of the message (after "out of memory" for a MemoryError),
    or the error's type where there is none (a bare MemoryError has no message)."""
    text = str(err).strip().splitlines()
    if isinstance(err, MemoryError):
        return "out of memory" + (f": {text[0]}" if text else "")
    return text[0] if text else type(err).__name__


def _refuse_doctype(path):
    """ValueError if the XML file at `path` declares a DOCTYPE, checked by expat before any entity is read.

    GraphML needs none, and a DTD's entities can pull in local files or expand exponentially
    (billion laughs); refusing the declaration keeps parsing linear in the file's size."""

    def refuse(*_):
        raise ValueError("it declares a DOCTYPE (a DTD, entities), which GraphML never needs; remove the declaration")

    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = refuse
    with open(path, "rb") as file:
        parser.ParseFile(file)
