"""Graph files: GraphML and edge lists read into networkx graphs or, for large ones, pdmm.Graph arrays
(pdmm.load_graph), with the memory they would take checked before anything is read."""

import os
import re
import warnings
from pathlib import Path
from xml.parsers import expat

import networkx as nx
import numpy as np

from .array_graph import Graph, from_pairs


def load_graph(path: str | os.PathLike, arrays: bool = False) -> nx.Graph | Graph:
    """Read an undirected graph from a GraphML file (.graphml) or an edge list (any other suffix).

    An edge list is read as networkx.read_edgelist reads it: text after "#" is a comment, a line with fewer
    than two fields is skipped, fields after the first two are ignored, never evaluated; nodes are numbered
    in order of first appearance, and labels that are all integers ("7", not "07") become ints. It is parsed
    by read_edge_list at C speed in memory proportional to the edges (docs/guide/solve.md, "Graphs"). GraphML is
    read as networkx.read_graphml reads it; with arrays=True a file of one plain graph is read in one expat pass
    instead (graphml_edges). A GraphML file that declares a DOCTYPE is refused (_refuse_doctype).

    Parameters
    ----------
    path : str or os.PathLike
        The graph file.
    arrays : bool
        Whether to return a pdmm.Graph (the same nodes in the same order; self loops dropped with a warning),
        which large edge lists need (no Python object per edge), instead of a networkx graph.

    Returns
    -------
    networkx.Graph or pdmm.Graph
        The graph.

    Raises
    ------
    FileNotFoundError
        Where there is no such file.
    ValueError
        Where the file cannot be read (malformed, a DOCTYPE, no edges) or would take more memory than is
        available.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"graph file not found: {path}")
    graphml = path.suffix.lower() == ".graphml"
    _check_memory(path, GRAPHML_MEMORY if graphml else EDGE_LIST_MEMORY)
    read: tuple[list, np.ndarray, np.ndarray] | None = None  # labels, src, dst; None: networkx's graph G
    try:
        if not graphml:
            read = read_edge_list(path)
        else:  # a pdmm.Graph of a plain GraphML file: one expat pass; anything else, and networkx graphs: networkx
            read = graphml_edges(path) if arrays else None
            if read is None:
                _refuse_doctype(path)
                G = nx.Graph(nx.read_graphml(path))
    except Exception as err:  # networkx and the reader's allocations raise many types for malformed or huge files
        raise ValueError(f"could not read graph file {path}: {_reason(err)}") from None
    if (G.number_of_edges() if read is None else len(read[1])) == 0:
        raise ValueError(f"graph file {path} holds no edges")
    if read is None:
        return Graph.from_networkx(G) if arrays else G
    labels, src, dst = read
    if arrays:
        return from_pairs(len(labels), src, dst, labels, warn=True)
    G = nx.Graph()
    G.add_nodes_from(labels)
    G.add_edges_from(zip(map(labels.__getitem__, src.tolist()), map(labels.__getitem__, dst.tolist()), strict=False))
    return G


GRAPHML = "http://graphml.graphdrawing.org/xmlns"  # the namespace networkx reads GraphML elements from
EDGE_CHUNK = 2**22  # bytes of an edge list parsed at a time: its token lists take about 10x this
LONG_LABEL = 32  # bytes: a chunk with a longer label is numbered through Python objects, not fixed-width arrays
EDGE_LIST_MEMORY = 10  # bytes of memory per byte of an edge list (measured 8.6-9.7 at 23-237 MB)
GRAPHML_MEMORY = 50  # the same for GraphML read by networkx (measured about 40)
_SPACE = np.zeros(256, dtype=bool)
_SPACE[list(b" \t\n\r\v\f")] = True
_ODD_LINE = re.compile(rb"^[ \t\r\f\v]*\S+[ \t\r\f\v]*$|^[ \t\r\f\v]*\S+[ \t\r\f\v]+\S+[ \t\r\f\v]+\S", re.M)


def graphml_edges(path) -> tuple[list, np.ndarray, np.ndarray] | None:
    """(labels, src, dst) of a GraphML file with one graph of nodes and edges, read by expat in one pass (its
    attributes and other elements ignored, a DOCTYPE refused as _refuse_doctype refuses it): the same nodes, in the
    same order, and edges as networkx.read_graphml then Graph.from_networkx give (node ids in document order, then
    undeclared edge ends in edge order), about ten times faster. None for anything networkx reads differently or
    refuses (nested or several graphs, hyperedges, ports, a node without an id, an edge without its ends): the
    caller reads it with networkx."""
    nodes: dict[str, int] = {}
    ends: list[str] = []
    seen = {"graphs": 0, "plain": True}

    def start(name, attributes):
        space, _, tag = name.rpartition(" ")
        if space != GRAPHML:
            return
        if tag == "node" and "id" in attributes:
            nodes.setdefault(attributes["id"], len(nodes))
        elif tag == "edge" and "source" in attributes and "target" in attributes:
            ends.extend((attributes["source"], attributes["target"]))
        elif tag == "graph":
            seen["graphs"] += 1
        elif tag in ("node", "edge", "hyperedge", "port", "endpoint"):
            seen["plain"] = False

    def refuse(*_):
        raise ValueError("it declares a DOCTYPE (a DTD, entities), which GraphML never needs; remove the declaration")

    parser = expat.ParserCreate(namespace_separator=" ")
    parser.StartElementHandler = start
    parser.StartDoctypeDeclHandler = refuse
    with open(path, "rb") as file:
        parser.ParseFile(file)
    if seen["graphs"] != 1 or not seen["plain"]:
        return None
    for label in ends:  # an edge's undeclared ends become nodes, source before target, as networkx adds them
        nodes.setdefault(label, len(nodes))
    index = np.fromiter(map(nodes.__getitem__, ends), dtype=np.int64, count=len(ends))
    return list(nodes), index[0::2], index[1::2]


def read_edge_list(path) -> tuple[list, np.ndarray, np.ndarray]:
    """(labels, src, dst) of the edge list at `path`: node k is labels[k] (order of first appearance, ints where
    every label is the canonical text of an int), and line e's edge is (src[e], dst[e]), int64, self loops and
    repeats kept. A file whose labels are all canonical ints is parsed by numpy.loadtxt and numbered through a
    table (integer_edge_list); any other is read in chunks of EDGE_CHUNK bytes of whole lines, a chunk whose lines
    are all ASCII with none or two fields (after comments) split at C speed (bytes.split), any other line by
    line."""
    integers = integer_edge_list(path)
    return general_edge_list(path) if integers is None else integers


def general_edge_list(path) -> tuple[list, np.ndarray, np.ndarray]:
    """read_edge_list's answer for any edge list, read in chunks of EDGE_CHUNK bytes of whole lines (_chunk_ends)
    and numbered by sorting (_numbered), or through a dict where some label is longer than LONG_LABEL."""
    ends = [e for e in map(_chunk_ends, _line_chunks(path)) if len(e)]
    if not ends:
        return [], np.empty(0, np.int64), np.empty(0, np.int64)
    if any(e.dtype.kind == "O" for e in ends):  # long labels: fixed-width arrays would take count x longest
        labels, index = _numbered_objects(ends)
        return labels, index[0::2], index[1::2]
    if any(e.dtype.kind == "U" for e in ends):
        ends = [e.astype(str) for e in ends]
    labels, index = _numbered(np.concatenate(ends).ravel())
    return labels, index[0::2], index[1::2]


def integer_edge_list(path) -> tuple[list, np.ndarray, np.ndarray] | None:
    """read_edge_list's answer for an ASCII edge list whose first two fields are canonical ints on every line with
    fields (None for any other file: the general reader decides, and names what is wrong). The file is scanned for
    tokens that are not canonical ints ("+7", "07", "-0", _canonical_ints) and lone carriage returns, parsed by
    numpy.loadtxt (C speed, the (E, 2) int64 array and little more) and numbered in order of first appearance:
    through a table over the labels' range where it is at most twice the entries (np.minimum.at of each entry's
    position), else by sorting (_numbered)."""
    for data in _line_chunks(path):
        if not data.isascii() or data.count(b"\r") != data.count(b"\r\n") or not _canonical_ints(data):
            return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # loadtxt's "input contained no data": no edges, said later
        try:
            pairs = np.loadtxt(path, dtype=np.int64, comments="#", usecols=(0, 1), ndmin=2, encoding="ascii")
        except (ValueError, OverflowError):  # a line with one field, a label that is no int64: the general reader
            return None
    flat = pairs.reshape(-1)
    if not len(flat):
        return [], np.empty(0, np.int64), np.empty(0, np.int64)
    low = int(flat.min())
    span = int(flat.max()) - low + 1
    if span > 2 * len(flat):
        labels, index = _numbered(flat)
        return labels, index[0::2], index[1::2]
    flat -= low
    first = np.full(span, len(flat), dtype=np.int64)  # each label's first position in the file
    np.minimum.at(first, flat, np.arange(len(flat), dtype=np.int64))
    present = np.flatnonzero(first < len(flat))
    order = present[np.argsort(first[present], kind="stable")]  # labels - low, in order of first appearance
    del first
    rank = np.empty(span, dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    np.take(rank, flat, out=flat)
    return (order + low).tolist(), flat[0::2], flat[1::2]


def _line_chunks(path):
    """The file at `path` as chunks of about EDGE_CHUNK bytes, each cut after a newline (the last holds the rest);
    no chunk is empty."""
    with open(path, "rb") as file:
        rest = b""
        while True:
            block = file.read(EDGE_CHUNK)
            data = rest + block
            cut = len(data) if not block else data.rfind(b"\n") + 1
            data, rest = data[:cut], data[cut:]
            if data:
                yield data
            if not block:
                return


def _canonical_ints(data: bytes) -> bool:
    """False where some token of `data` (whitespace-separated, comments included) could be an int written other
    than canonically: a "+" anywhere, or a token that starts "0" or "-0" followed by a digit or "-0" alone;
    vectorised over the bytes (no regular expression, which takes about 1 s per 20 MB)."""
    if b"+" in data:
        return False
    text = np.frombuffer(data + b" ", dtype=np.uint8)  # a final space: every token is followed by something
    starts = np.empty(len(text), dtype=bool)  # the byte before each one is whitespace (or there is none)
    starts[0] = True
    starts[1:] = _SPACE[text[:-1]]
    digit_after = np.zeros(len(text), dtype=bool)
    digit_after[:-1] = (text[1:] >= 48) & (text[1:] <= 57)
    zero, minus = text == 48, text == 45
    leading_zero = starts & zero & digit_after  # "07"
    zero_after = np.zeros(len(text), dtype=bool)
    zero_after[:-1] = zero[1:]
    return not (leading_zero.any() or (starts & minus & zero_after).any())  # "-0", "-07"


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
