"""pdmm-bridge partition: a problem cut once into shards that each rank of a distributed solve loads alone.

    pdmm-bridge partition torus --nodes 10000 --problem least_squares --parts 4 --out shards/ls
    pdmm-bridge partition graph.edges --problem lasso --data data.npz --parts 8 --method blocks --out shards/big

GRAPH is a topology (sized by --nodes, --graph-param and --seed) or a .graphml / edge-list file, read as `solve
--graph` reads it; the data are --data FILE.npz or synthetic, as solve draws them from --seed (--dim, --samples,
--batch). The graph is split into --parts parts by METIS (pymetis; contiguous blocks of node indices where it is not
installed) or, with --method blocks, into blocks. --out (refused when it exists and is not empty, unless --force,
which removes only what pdmm-bridge wrote there) receives part-00000.npz ... (rank r's nodes, the directed edges out
of them with their global ids, its nodes' rows of the data) and, last, manifest.json (sizes, the problem, the whole
graph's mixing spectra for dgd, extra, nids, gradient-tracking and chebyshev on the parts, each part's sha256):
format "pdmm-shards/1", pdmm.shards (docs/guide/distributed.md, "Shards: pdmm-bridge partition"). One line is
printed: the parts, nodes and edges per part (min..max), the directed edges cut, the seconds taken (and how many of
them the spectra took: eigsh on the whole graph, once).
"""

import argparse
import time

from . import rundir
from .errors import UsageError
from .options import positive
from .solve_options import BUILTIN, add_data_arguments, add_topology_arguments, seed_value


def add_parser(subparsers):
    p = subparsers.add_parser(
        "partition",
        help="cut a problem into shards, one per rank",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("graph", metavar="GRAPH", help="a topology or a .graphml / edge-list file")
    add_topology_arguments(p)
    p.add_argument("--seed", type=seed_value, default=0, help="seed for the graph and the synthetic data")
    add_data_arguments(p)
    p.add_argument("--parts", type=positive(int), required=True, help="number of parts (ranks)")
    p.add_argument(
        "--method",
        choices=("metis", "blocks"),
        default="metis",
        help="METIS (pymetis; blocks where it is not installed) or contiguous blocks of node indices",
    )
    p.add_argument("--out", required=True, help="output directory (refused when not empty, unless --force)")
    p.add_argument("--force", action="store_true", help="replace what pdmm-bridge wrote in a non-empty --out")
    return p


def run(args: argparse.Namespace) -> int:
    import numpy as np  # numpy, torch and pdmm: imported only to run (partition --help answers at once)

    import pdmm.mixing
    import pdmm.shards

    from .solve_problem import data_of, graph_of, problem_from

    started = time.perf_counter()
    if args.data is not None and args.data.startswith(BUILTIN):
        raise UsageError(f"--data {args.data}: partition takes a FILE.npz or synthetic data, not a built-in data set")
    G = graph_of(args)
    data = data_of(args, G)
    problem = problem_from(args, G, data)
    if args.parts > problem.n:
        raise UsageError(f"--parts {args.parts}: more parts than the graph's {problem.n} nodes")
    owner, method = pdmm.shards.owners(problem.compiled, args.parts, args.method)
    out = rundir.claim(args.out, "partition", args.force, writes=pdmm.shards.file_names(args.parts), clear=True)
    spectra_started = time.perf_counter()
    spectra = pdmm.mixing.mixing_spectra(problem.compiled)
    spectra_seconds = time.perf_counter() - spectra_started
    manifest = pdmm.shards.write(
        problem,
        owner,
        out,
        args.problem,
        data,
        ridge=args.ridge,
        lam=args.lam,
        reg=args.reg,
        method=method,
        save=lambda name, blob: rundir.write_file(out / name, blob),
        spectra=spectra,
    )
    nodes = np.bincount(owner, minlength=args.parts)
    edges = np.bincount(owner[problem.compiled.src.numpy()], minlength=args.parts)
    print(
        f"{out}: {args.parts} parts ({method}), nodes per part {nodes.min()}..{nodes.max()}, directed edges per "
        f"part {edges.min()}..{edges.max()}, {manifest['cut']} of {manifest['edges']} cut, "
        f"{time.perf_counter() - started:.2f} s ({spectra_seconds:.2f} s of it the mixing spectra)"
    )
    return 0
