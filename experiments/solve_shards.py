"""`pdmm-bridge solve --shards DIR`: a problem `pdmm-bridge partition` cut into DIR, each process of the job loading
only its part (pdmm.shards.load), x written as one file per part (docs/guide/solve_cli.md, "Solving shards").

What the manifest fixes (the graph, the data, the problem) and what needs the whole problem (a cvxpy reference,
--tune) is refused beside --shards, in one line; so is a job of another size than the manifest's parts. Each
process's x rows reach OUT/x/part-RRRRR.npz through process 0, which holds --out (experiments/rundir.py), one part
at a time: no process holds the whole x, and the job needs no file system shared for --out.
"""

import argparse
import io
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import pdmm.shards

from . import rundir, solve_files, solve_job, solve_outputs, solve_problem, solve_runs
from .errors import UsageError
from .solve_options import given

FIXED = ("graph", "nodes", "graph_param", "data", "dim", "samples", "batch", "problem", "ridge", "lam", "reg")
WHOLE = ("tune", "reference")  # they need the whole problem, which no process holds
X = "x"  # the folder of --out holding each part's x
_PART = re.compile(r"part-[0-9]{5}\.npz")


def solve(args: argparse.Namespace) -> int:
    """`pdmm-bridge solve --shards DIR` in this process: the arguments and the manifest checked, then, in the command's
    own process of a --nproc job, the job started; in a process of the job (or alone, for one part), its part loaded
    and solved by every run, x written per part, and by process 0 the other outputs and the summary.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments, --nproc the job's size where torchrun or srun started this process.

    Returns
    -------
    int
        The exit status: the job's, or 130 when interrupted, 1 when a run diverged, else 0.
    """
    check_arguments(args)
    manifest = manifest_of(args)
    specs = args.compare or [args.method]
    params = solve_runs.method_params(args, specs)
    network = solve_problem.network_of(args)
    rank = solve_job.rank(args)
    if rank is None:  # --nproc P > 1: checked and claimed here, solved by the job's P processes
        return solve_job.launch_job(args)
    part = load(args, rank, args.nproc)
    plans = solve_runs.plan_parts(part, specs, params, args, network)
    out = solve_job.claim(args, rank)
    results, failures, interrupted = solve_runs.solve_all(part, specs, params, None, args, network, plans)
    write_x(out, x_bytes(part.nodes, results), rank, args.nproc)
    if rank:  # process 0 writes and reports
        return 130 if interrupted else 1 if failures else 0
    config = solve_outputs.config_text(
        args, specs, params, graph_size(manifest), results, failures, {}, interrupted, shards=record(args, manifest)
    )
    ran = (specs, results, failures, {}, interrupted)
    return solve_files.write_outputs(args, out, config, ran, network, manifest["n"])


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse, in one line, what does not go with --shards: the flags its manifest fixes (FIXED: the graph, the data
    and their sizes, the problem), --tune and --reference cvxpy, given on the command line whatever their value;
    then set --reference none.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (argv, shards, reference).

    Raises
    ------
    UsageError
        Naming the first such flag.
    """
    fixed = given(args.argv[1:], FIXED)
    if fixed:
        raise UsageError(
            f"{fixed[0]} does not go with --shards: {args.shards}/manifest.json fixes the graph, the data and the "
            "problem; drop it"
        )
    whole = given(args.argv[1:], WHOLE)
    if "--tune" in whole or ("--reference" in whole and args.reference == "cvxpy"):
        flag = "--tune" if "--tune" in whole else "--reference cvxpy"
        raise UsageError(f"{flag} needs the whole problem, which no process holds with --shards; drop it")
    args.reference = "none"


def manifest_of(args: argparse.Namespace) -> dict[str, Any]:
    """The manifest of --shards (pdmm.shards.read_manifest, every field checked), with the arguments it fixes set
    from it (problem, ridge, lam, reg, batch, dim; the graph's and the data's flags None), and --nproc checked
    against its parts.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments, --nproc the job's size where torchrun or srun started this process.

    Returns
    -------
    dict
        The manifest.

    Raises
    ------
    UsageError
        For a manifest refused (one line naming the file), or --nproc (the job's size) other than its parts.
    """
    try:
        manifest = pdmm.shards.read_manifest(args.shards)
    except pdmm.shards.ShardError as err:
        raise UsageError(str(err)) from None
    parts = manifest["parts"]
    if args.nproc != parts:
        job = f"this job has {args.nproc} processes" if "RANK" in os.environ else f"--nproc is {args.nproc}"
        raise UsageError(
            f"--shards {args.shards} holds {parts} parts, one per process, but {job}: run it with --nproc {parts} "
            f"(or as a torchrun or srun job of {parts} processes)"
        )
    for name in ("problem", "ridge", "lam", "reg", "batch", "dim"):
        setattr(args, name, manifest[name])
    args.graph = args.nodes = args.data = args.samples = None
    args.graph_param = []
    return manifest


def load(args: argparse.Namespace, rank: int, world: int) -> Any:
    """This process's part of --shards (pdmm.shards.load: the manifest and its own part file only, each checked),
    every process of the job told of any refusal (one all_gather of the refusals), so that each ends with the same
    line rather than wait for a process that failed.

    Parameters
    ----------
    args : argparse.Namespace
        The solve command's arguments (shards).
    rank, world : int
        This process's rank and the job's size; every process of the job calls it.

    Returns
    -------
    pdmm.PartProblem

    Raises
    ------
    UsageError
        In every process: the first refusal in rank order, one line naming the file (a changed or damaged part).
    """
    part, refusal = None, None
    try:
        part = pdmm.shards.load(args.shards, rank, world)
    except pdmm.shards.ShardError as err:
        refusal = str(err)
    refusals: list[str | None] = [None] * world
    dist.all_gather_object(refusals, refusal)
    first = next((line for line in refusals if line is not None), None)
    if first is not None:
        raise UsageError(first)
    return part


def file_names(parts: int) -> tuple[str, ...]:
    """The files of --out holding x: x/part-00000.npz .. for `parts` parts."""
    return tuple(f"{X}/{pdmm.shards.part_name(rank)}" for rank in range(parts))


def remove_stale(out: Path, parts: int) -> None:
    """Remove from --out, claimed by this process, what an earlier run left that this one would not replace: a
    result.npz, and x/part-RRRRR.npz of a rank beyond `parts`; each only where pdmm-bridge wrote it (rundir.remove
    refuses another file in one line).

    Parameters
    ----------
    out : Path
        The output directory, claimed (rundir.claim).
    parts : int
        This run's parts.
    """
    rundir.remove(out / "result.npz")
    folder = out / X
    if not folder.is_dir() or folder.is_symlink():
        return
    keep = {pdmm.shards.part_name(rank) for rank in range(parts)}
    for name in sorted(os.listdir(folder)):
        if _PART.fullmatch(name) and name not in keep:
            rundir.remove(folder / name)


def x_bytes(nodes: np.ndarray, results: dict[str, Any]) -> bytes:
    """OUT/x/part-RRRRR.npz of one part: `nodes`, the part's global node ids, and x_<label>, each run's x rows of
    those nodes (as pdmm.solve(part, gather=False) returns them), as numpy.savez writes them.

    Parameters
    ----------
    nodes : numpy.ndarray
        (n_r,) int64 global ids.
    results : dict
        {label: pdmm.Result} of the runs that ran, on this part.

    Returns
    -------
    bytes
    """
    buffer = io.BytesIO()
    np.savez(buffer, nodes=nodes, **{f"x_{label}": result.x for label, result in results.items()})
    return buffer.getvalue()


def write_x(out: Path, blob: bytes, rank: int, world: int) -> None:
    """Every part's x file, written by process 0 (rundir.write_file: recorded in --out's marker, never half a file):
    its own `blob`, then each other process's as that one sends it (torch.distributed point-to-point on the CPU), in
    rank order, so that process 0 holds one other part's bytes at a time. Every process of the job calls it.

    Parameters
    ----------
    out : Path
        The output directory, held by process 0.
    blob : bytes
        This process's part file (x_bytes).
    rank, world : int
        This process's rank and the job's size.
    """
    if rank:
        data = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        dist.send(torch.tensor([len(blob)], dtype=torch.int64), dst=0)
        dist.send(data, dst=0)
        return
    folder = rundir.make_dir(out / X)
    rundir.write_file(folder / pdmm.shards.part_name(0), blob)
    for sender in range(1, world):
        size = torch.empty(1, dtype=torch.int64)
        dist.recv(size, src=sender)
        data = torch.empty(int(size), dtype=torch.uint8)
        dist.recv(data, src=sender)
        rundir.write_file(folder / pdmm.shards.part_name(sender), data.numpy().tobytes())


def graph_size(manifest: dict[str, Any]) -> dict[str, int]:
    """config.json's "graph" of a shard directory: its nodes and undirected edges (the manifest counts directed)."""
    return {"n": manifest["n"], "edges": manifest["edges"] // 2}


def record(args: argparse.Namespace, manifest: dict[str, Any]) -> dict[str, Any]:
    """config.json's "shards": the directory and its manifest's fields, each part file's sha256 among them."""
    return {"dir": str(args.shards), **manifest}
