"""Shards: a consensus problem cut into parts that each rank loads alone (docs/guide/distributed.md, "Shards:
pdmm-bridge partition").

A shard directory, format "pdmm-shards/1", holds

    manifest.json      {"format", "n", "edges" (directed), "parts", "problem" (a kind of pdmm.synthetic),
                        "ridge", "lam", "reg", "batch", "dim", "batched", "partition" (metis, blocks or given),
                        "cut" (directed cut edges), "spectra" {mixing kind: [lambda_min, lambda_2]} (the whole
                        graph's, pdmm.mixing.mixing_spectra), "files" {part file: sha256}, "pdmm_bridge"}
    part-RRRRR.npz     rank R's int64 ids (ID_KEYS, the global ids of the whole pdmm.Problem's compiled graph, as
                        pdmm.halo.part_ids numbers them) and its nodes' rows of the data arrays
                        (pdmm.synthetic.DATA_KEYS of the kind, each named with the prefix DATA_PREFIX)

`write` makes one part at a time from a whole problem and an owner per node, and the manifest last (a directory
without one is not a shard directory); `part_arrays` reads and checks one part, with nothing of the others, so
that a rank's memory is that of its part; `load` is the same as a pdmm.parts.PartProblem. Every refusal is a
ShardError, one line naming the file and what is wrong with it.
"""

import contextlib
import hashlib
import io
import json
import math
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .distributed import blocks, partition
from .edge_index import CompiledGraph
from .local import LocalFunction
from .mixing import checked_spectra, mixing_spectra
from .network import undirected_ids
from .npz import NpzError, read_npz
from .problem import Problem
from .synthetic import BATCHED_NDIM, DATA_KEYS, KINDS, make_local, node_rows

FORMAT = "pdmm-shards/1"
MANIFEST = "manifest.json"
MANIFEST_LIMIT = 16 * 2**20  # bytes: a larger manifest is refused before it is read
ID_KEYS = ("nodes", "src", "dst", "edge_id", "rev_id", "peer", "undirected_id")
DATA_PREFIX = "data_"
PARTITIONS = ("metis", "blocks", "given")
MAX_COUNT = 2**62  # nodes and edges a manifest may declare: their ids and products stay within int64

Save = Callable[[str, bytes], None]
"""save(name, data): write the file `name` of a shard directory, all or nothing."""


class ShardError(ValueError):
    """A shard directory, or one of its files, refused; the message is one line naming the file."""


def part_name(rank: int) -> str:
    """The file of rank `rank`'s part: part-00003.npz."""
    return f"part-{rank:05d}.npz"


def file_names(parts: int) -> tuple[str, ...]:
    """The files of a shard directory of `parts` parts: the manifest, then each part's."""
    return (MANIFEST, *(part_name(rank) for rank in range(parts)))


def owners(graph: CompiledGraph, parts: int, method: str) -> tuple[np.ndarray, str]:
    """(owner, the partition made): owner (n,) int64 the rank of each node of `graph` in `parts` nonempty parts,
    by METIS (pdmm.distributed.partition, which falls back to blocks without pymetis) or contiguous blocks; the
    partition made is "blocks" where METIS fell back to them."""
    if method not in ("metis", "blocks"):
        raise ValueError(f"method must be 'metis' or 'blocks', got {method!r}")
    if not (isinstance(parts, int) and 1 <= parts <= graph.n):
        raise ValueError(f"parts must be an integer from 1 to the {graph.n} nodes, got {parts!r}")
    contiguous = blocks(graph.n, parts)
    if method == "blocks":
        return contiguous, "blocks"
    owner = partition(graph, parts)
    return owner, "blocks" if np.array_equal(owner, contiguous) else "metis"


def write(
    problem: Problem,
    owner: Any,
    out: str | Path,
    kind: str,
    data: Mapping[str, Any],
    ridge: float = 0.0,
    lam: float = 0.1,
    reg: float = 0.1,
    method: str = "given",
    save: Save | None = None,
    spectra: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """Write the shards of `problem` (a consensus problem made by pdmm.synthetic.make_problem(kind, G, data, ridge,
    lam, reg)) whose node i rank owner[i] holds, into directory `out`; returns the manifest written.

    One part is built and written at a time (its ids, its nodes' rows of `data`), then manifest.json, so that the
    memory beyond the whole problem is one part's. Each file is written by `save` (the command line's records what
    it writes, docs/guide/runs.md), by default to NAME.tmp in `out`, fsynced and renamed over NAME, never through a
    symbolic link; `out` (created where missing) must not be one. `method` names the partition in the manifest.
    `spectra`: the whole graph's mixing spectra for the manifest, pdmm.mixing.mixing_spectra(problem.compiled) (every
    kind: a sparse eigsh per end above pdmm.mixing.DENSE_LIMIT nodes) where None, as the caller computed them
    otherwise (checked: pdmm.mixing.checked_spectra). ValueError for an owner that is not one rank in 0..P-1 per node
    with every rank holding a node, data without the problem's rows, edge matrices, an unknown kind or method, or
    spectra that are not finite pairs of known kinds.
    """
    if kind not in KINDS or method not in PARTITIONS:
        raise ValueError(f"kind must be one of {list(KINDS)} and method one of {list(PARTITIONS)}")
    if not problem.is_consensus:
        raise ValueError("shards hold consensus problems only; this one has edge matrices")
    owner = _checked_owner(owner, problem.n)
    rows = {key: np.shape(data[key]) for key in DATA_KEYS[kind] if key in data}
    if len(rows) < len(DATA_KEYS[kind]) or any(
        len(s) < 1 or s[int(len(s) == BATCHED_NDIM[key])] != problem.n for key, s in rows.items()
    ):
        raise ValueError(f"data must hold {list(DATA_KEYS[kind])} with the problem's {problem.n} rows, got {rows}")
    spectra = mixing_spectra(problem.compiled) if spectra is None else checked_spectra(spectra)
    header = dict(ridge=ridge, lam=lam, reg=reg, spectra=spectra)
    if save is not None:
        return _write_parts(problem, owner, kind, data, header, method, save)
    with directory_writer(out) as own:
        return _write_parts(problem, owner, kind, data, header, method, own)


def _checked_owner(owner: Any, n: int) -> np.ndarray:
    """owner as (n,) int64, ValueError unless every node has a rank in 0..P-1 and every rank a node."""
    array = np.asarray(owner)
    if array.shape != (n,) or array.dtype.kind not in "iu" or array.min() < 0 or array.max() >= n:
        raise ValueError(f"owner must be (n,) = ({n},) integers in [0, n), got {array.dtype} of shape {array.shape}")
    array = array.astype(np.int64)
    held = np.bincount(array)
    if not held.all():
        raise ValueError(f"owner must give every rank 0..{len(held) - 1} a node; rank {int(np.argmin(held))} has none")
    return array


def _write_parts(
    problem: Problem, owner: np.ndarray, kind: str, data: Mapping[str, Any], header: dict, method: str, save: Save
) -> dict[str, Any]:
    """write's work, through `save`: each part's file, then the manifest (header: ridge, lam, reg and spectra)."""
    graph = problem.compiled
    src, dst, rev = (t.cpu().numpy() for t in (graph.src, graph.dst, graph.rev))
    undirected = undirected_ids(graph).cpu().numpy()
    parts = int(owner.max()) + 1
    tail = owner[src]
    edge_order, edge_bounds = _grouped(tail, parts)  # each rank's edges, in the global order
    node_order, node_bounds = _grouped(owner, parts)  # each rank's nodes, ascending
    files = {}
    for rank in range(parts):
        nodes = node_order[node_bounds[rank] : node_bounds[rank + 1]]
        edges = edge_order[edge_bounds[rank] : edge_bounds[rank + 1]]
        arrays = {
            "nodes": nodes,
            "src": np.searchsorted(nodes, src[edges]),
            "dst": dst[edges],
            "edge_id": edges,
            "rev_id": rev[edges],
            "peer": owner[dst[edges]],
            "undirected_id": undirected[edges],
        }
        arrays |= {DATA_PREFIX + key: value for key, value in node_rows(kind, data, nodes).items()}
        blob = _npz_bytes(arrays)
        files[part_name(rank)] = hashlib.sha256(blob).hexdigest()
        save(part_name(rank), blob)
    manifest = {
        "format": FORMAT,
        "n": graph.n,
        "edges": graph.num_edges,
        "parts": parts,
        "problem": kind,
        **{name: float(header[name]) for name in ("ridge", "lam", "reg")},
        "batch": problem.batch,
        "dim": problem.dim,
        "batched": problem.batched,
        "partition": method,
        "cut": int(np.count_nonzero(tail != owner[dst])),
        "spectra": {name: list(ends) for name, ends in header["spectra"].items()},
        "files": files,
        "pdmm_bridge": _version(),
    }
    save(MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


def _grouped(rank_of: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """(the indices sorted by rank_of[i], stably, so ascending within a rank; where each rank's run begins and
    ends, (parts + 1,))."""
    order = np.argsort(rank_of, kind="stable")
    return order, np.concatenate([[0], np.cumsum(np.bincount(rank_of, minlength=parts))])


def _npz_bytes(arrays: dict[str, Any]) -> bytes:
    """The .npz archive of `arrays` as numpy.savez writes it (uncompressed: a member's size is its data's)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _version() -> str:
    """The installed pdmm-bridge's version, "unknown" where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pdmm-bridge")
    except PackageNotFoundError:
        return "unknown"


@contextlib.contextmanager
def directory_writer(out: str | Path) -> Iterator[Save]:
    """A Save into directory `out` (created with its parents where missing; ShardError where it is a symbolic link
    or not a directory): each file written to NAME.tmp, created afresh, fsynced and renamed over NAME, all relative
    to one descriptor of `out`, with no link followed."""
    out = Path(out)
    if out.is_symlink():
        raise ShardError(f"{out}: a symbolic link; shards are written into real directories only")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise ShardError(f"{out}: cannot write shards there: {err.strerror or err}") from None

    def save(name: str, blob: bytes) -> None:
        temporary = name + ".tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=fd)
        file = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
        with open(file, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)

    try:
        yield save
    finally:
        os.close(fd)


# reading


def part_arrays(directory: str | Path, rank: int, world: int) -> tuple[dict[str, np.ndarray], LocalFunction, dict]:
    """(the int64 arrays ID_KEYS of rank `rank`'s part, its local functions (n_r, B, d), the manifest) of the shard
    directory `directory` written for `world` ranks, every array checked (docs/guide/distributed.md, "Shards:
    pdmm-bridge partition"): the manifest's fields, its size before it is parsed; the part file's sha256 against the
    manifest's, its headers before its data (pdmm.npz, at most the file's own size); each array's dtype, shape and
    range (nodes strictly ascending in [0, n), src in [0, n_r) non-decreasing, dst in [0, n), edges strictly
    ascending by (nodes[src], dst) with no self loop, edge_id ascending and rev_id in [0, E), undirected_id in
    [0, E/2), peer in [0, world) and this rank exactly where dst is its own node); the data's rows, built by
    pdmm.synthetic.make_local into the local functions the whole problem has at those nodes. Reads the manifest and
    this part only. ShardError, one line naming the file, for anything else."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest["parts"] != world:
        raise ShardError(f"{directory / MANIFEST}: written for {manifest['parts']} ranks, not for a world of {world}")
    if not (isinstance(rank, int) and 0 <= rank < world):
        raise ShardError(f"{directory}: rank must be an integer from 0 to {world - 1}, got {rank!r}")
    path = directory / part_name(rank)
    arrays = _read_part(path, manifest["files"][part_name(rank)])
    try:
        ids = _checked_ids(arrays, manifest, rank)
        local, batched = _local(arrays, manifest, len(ids["nodes"]))
    except (ValueError, TypeError) as err:
        raise ShardError(f"{path}: {err}") from None
    return ids, local, manifest


def load(directory: str | Path, rank: int, world: int) -> Any:
    """Rank `rank`'s part of the shard directory `directory` as a pdmm.parts.PartProblem (part_arrays' checks), its
    spectra the manifest's (the whole graph's mixing spectra, so that the mixing methods run on it)."""
    from .parts import PartProblem

    ids, local, manifest = part_arrays(directory, rank, world)
    return PartProblem(
        n=manifest["n"],
        num_edges=manifest["edges"],
        **ids,
        local=local,
        batched=manifest["batched"],
        rank=rank,
        world=world,
        spectra=manifest["spectra"],
    )


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest of shard directory `directory`, every field checked (part_arrays); ShardError naming it."""
    path = Path(directory) / MANIFEST
    text = _read_small(path, MANIFEST_LIMIT)
    try:
        manifest = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ShardError(f"{path}: not a JSON manifest ({err})") from None
    problem = _manifest_problem(manifest)
    if problem is not None:
        raise ShardError(f"{path}: {problem}")
    return manifest


def _regular_file(path: Path, hint: str = "") -> Any:
    """Regular file `path` opened for reading without following a link (ShardError otherwise; `hint` is added to
    the message where it cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise ShardError(f"{path}: cannot read it ({err.strerror or err}){hint}") from None
    file = open(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        file.close()
        raise ShardError(f"{path}: not a regular file")
    return file


def _read_small(path: Path, limit: int) -> bytes:
    """The bytes of regular file `path` (_regular_file), refused (ShardError) when larger than `limit`, before any
    is read."""
    with _regular_file(path, "; is this a shard directory?") as file:
        if os.fstat(file.fileno()).st_size > limit:
            raise ShardError(f"{path}: not a regular file of at most {limit:,} bytes")
        return file.read()


def _count(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _manifest_problem(manifest: Any) -> str | None:
    """What is wrong with a parsed manifest, None when nothing is."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return f"not a {FORMAT} manifest"
    required = {"n", "edges", "parts", "problem", "ridge", "lam", "reg", "batch", "dim", "batched", "partition", "cut"}
    missing = sorted((required | {"spectra", "files"}) - set(manifest))
    if missing:
        return f"missing {missing}"
    n, edges, parts = manifest["n"], manifest["edges"], manifest["parts"]
    if not (_count(n, 1, MAX_COUNT) and _count(edges, 0, MAX_COUNT) and edges % 2 == 0):
        return f"n must be an integer from 1 to 2^62 and edges an even one, got n={n!r}, edges={edges!r}"
    if not 2 * (n - 1) <= edges <= n * (n - 1):
        return f"{edges} directed edges cannot connect {n} nodes (a connected graph has 2 (n - 1) to n (n - 1))"
    if not _count(parts, 1, n):
        return f"parts must be an integer from 1 to n = {n}, got {parts!r}"
    if manifest["problem"] not in KINDS or manifest["partition"] not in PARTITIONS:
        return f"unknown problem {manifest['problem']!r} or partition {manifest['partition']!r}"
    if not all(
        isinstance(manifest[name], (int, float)) and math.isfinite(manifest[name]) and manifest[name] >= 0
        for name in ("ridge", "lam", "reg")
    ):
        return "ridge, lam and reg must be finite numbers >= 0"
    if not (_count(manifest["batch"], 1, MAX_COUNT) and _count(manifest["dim"], 1, MAX_COUNT)):
        return "batch and dim must be integers >= 1"
    if not isinstance(manifest["batched"], bool) or not _count(manifest["cut"], 0, edges):
        return "batched must be true or false and cut a count of directed edges"
    try:
        checked_spectra(manifest["spectra"])
    except ValueError as err:
        return str(err)
    files = manifest["files"]
    expected = {part_name(rank) for rank in range(parts)}
    if not isinstance(files, dict) or set(files) != expected:
        return f"files must name {part_name(0)} .. {part_name(parts - 1)}, one sha256 each"
    if not all(
        isinstance(sha, str) and len(sha) == 64 and set(sha) <= set("0123456789abcdef") for sha in files.values()
    ):
        return "every sha256 must be 64 lowercase hexadecimal digits"
    return None


def _read_part(path: Path, sha256: str) -> dict[str, np.ndarray]:
    """The arrays of part file `path` after its sha256 is the manifest's; its headers are checked before its data
    (pdmm.npz.read_npz, the arrays at most the file's own size: numpy.savez stores them uncompressed)."""
    with _regular_file(path) as file:
        size = os.fstat(file.fileno()).st_size
        hashed = hashlib.sha256()
        for chunk in iter(lambda: file.read(2**20), b""):
            hashed.update(chunk)
    if hashed.hexdigest() != sha256:
        raise ShardError(f"{path}: its sha256 is not the manifest's: the file changed or is damaged")
    try:
        return read_npz(path, limit=size)
    except NpzError as err:
        raise ShardError(str(err)) from None


def _checked_ids(arrays: dict[str, np.ndarray], manifest: dict, rank: int) -> dict[str, np.ndarray]:
    """The id arrays of a part, each checked (part_arrays); ValueError saying which is wrong."""
    kind = manifest["problem"]
    expected = set(ID_KEYS) | {DATA_PREFIX + key for key in DATA_KEYS[kind]}
    if set(arrays) != expected:
        raise ValueError(f"holds arrays {sorted(arrays)}; a {kind} part holds {sorted(expected)}")
    ids = {key: arrays[key] for key in ID_KEYS}
    for key, array in ids.items():
        if array.dtype != np.int64 or array.ndim != 1:
            raise ValueError(f"{key} must be a 1-d int64 array, got {array.dtype} of shape {array.shape}")
    nodes, src, dst = ids["nodes"], ids["src"], ids["dst"]
    if len(nodes) == 0 or len({len(ids[key]) for key in ID_KEYS[1:]}) != 1:
        raise ValueError("a part holds at least one node, and one value per edge in each edge array")
    n, edges = manifest["n"], manifest["edges"]
    bounds = {
        "nodes": n,
        "src": len(nodes),
        "dst": n,
        "edge_id": edges,
        "rev_id": edges,
        "peer": manifest["parts"],
        "undirected_id": edges // 2,
    }
    for key, high in bounds.items():
        if len(ids[key]) and (ids[key].min() < 0 or ids[key].max() >= high):
            raise ValueError(f"{key} holds ids outside [0, {high})")
    if np.any(np.diff(nodes) <= 0) or np.any(np.diff(ids["edge_id"]) <= 0):
        raise ValueError("nodes and edge_id must be strictly ascending")
    tails = nodes[src]
    step = np.diff(src)
    if np.any(step < 0) or np.any((step == 0) & (np.diff(dst) <= 0)) or np.any(tails == dst):
        raise ValueError("the edges must be sorted by (src, dst), each pair once, with no self loop")
    at = np.minimum(np.searchsorted(nodes, dst), len(nodes) - 1)
    inside = nodes[at] == dst
    if not np.array_equal(ids["peer"] == rank, inside):
        raise ValueError(f"peer must be {rank} exactly for the edges into this part's own nodes")
    _check_reverses(ids, tails, inside)
    return ids


def _check_reverses(ids: dict[str, np.ndarray], tails: np.ndarray, inside: np.ndarray) -> None:
    """ValueError unless no edge is its own reverse, the reverses' ids (rev_id) ascend in the global order of the
    reverses (by dst, then src), undirected_id ascends over the edges src < dst and over the others by their
    reverses (compiled.forward's order), and each edge between two own nodes has its reverse in the part under rev_id
    (the edge dst -> src, whose own rev_id is the edge's, with the same undirected_id)."""
    edge_id, rev_id, dst, undirected = ids["edge_id"], ids["rev_id"], ids["dst"], ids["undirected_id"]
    if np.any(edge_id == rev_id):
        raise ValueError("an edge's rev_id is its own edge_id")
    by_reverse = np.lexsort((tails, dst))  # the reverses dst -> src in the global order
    ahead = tails < dst  # the edges of compiled.forward, in its order
    if (
        np.any(np.diff(rev_id[by_reverse]) <= 0)
        or np.any(np.diff(undirected[ahead]) <= 0)
        or np.any(np.diff(undirected[by_reverse[~ahead[by_reverse]]]) <= 0)
    ):
        raise ValueError("rev_id and undirected_id must follow the global order of the reverses and of forward")
    at = np.minimum(np.searchsorted(edge_id, rev_id[inside]), len(edge_id) - 1)
    found = edge_id[at] == rev_id[inside]
    same = (rev_id[at] == edge_id[inside]) & (dst[at] == tails[inside]) & (tails[at] == dst[inside])
    if not np.all(found & same & (ids["undirected_id"][at] == ids["undirected_id"][inside])):
        raise ValueError("rev_id and undirected_id must name each edge's reverse dst -> src, which is in this part")


def _local(arrays: dict[str, np.ndarray], manifest: dict, rows: int) -> tuple[LocalFunction, bool]:
    """The local functions of a part's `rows` nodes from its data arrays (pdmm.synthetic.make_local, as the whole
    problem's), their shape and batch axis the manifest's; ValueError otherwise."""
    kind = manifest["problem"]
    data = {key: arrays[DATA_PREFIX + key] for key in DATA_KEYS[kind]}
    scalars = {name: float(manifest[name]) for name in ("ridge", "lam", "reg")}
    local, batched = make_local(kind, data, rows, manifest["n"], **scalars)
    if tuple(local.shape) != (rows, manifest["batch"], manifest["dim"]) or batched != manifest["batched"]:
        raise ValueError(
            f"its data make local functions of shape {tuple(local.shape)}, batched={batched}; the manifest says "
            f"({rows}, {manifest['batch']}, {manifest['dim']}), batched={manifest['batched']}"
        )
    return local, batched
