"""pdmm-bridge probe: per-layer consensus discrepancy of a trained run, next to PDMM's residual.

    pdmm-bridge probe runs/shakespeare

Loads the run's checkpoint and runs --batches batches of the task's data through it with every
attention layer's probes on; bridge.probe computes per layer ||V - gamma MH|| / ||V|| (AttentionX's
Phi, gamma of the run, 1 if unset), ||Delta W^o|| / ||MH W^o|| (belief's Delta after the output
projection, as in the belief paper's Fig. 4), ||Delta|| / ||MH|| before it (<= 1 by construction),
the cosines of Delta W^o, MH W^o and the update with the token X. The figure shows the ratios and
the cosines against layer beside PDMM's constraint residual against iteration (averaging on a
64-node random geometric graph, normalised by its first value). Writes probe.json and probe.png
into the run directory (or --out).
"""

import argparse
import json
from pathlib import Path

from . import rundir
from .errors import package_version
from .rundir import check_new_file


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "probe",
        help="per-layer discrepancy of a trained run vs PDMM's residual",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with config.toml and ckpt.pt")
    parser.add_argument("--batches", type=int, default=4, help="batches to average over")
    parser.add_argument("--out", help="directory for probe.json and probe.png (default RUN_DIR)")
    parser.add_argument("--force", action="store_true", help="replace an existing probe.json / probe.png")
    return parser


def run(args):
    from bridge.probe import pdmm_residual  # torch, matplotlib: imported only to run (probe --help answers at once)

    from .plots import plot_probe
    from .probing import probe_layers
    from .train import sigint_flag

    run_dir = Path(args.run_dir)
    config, totals = probe_layers(run_dir, args.batches)
    with sigint_flag() as interrupt:  # pdmm.solve would return part of the residual curve on a Ctrl-C
        residual = pdmm_residual(len(totals))
    if interrupt["set"]:
        raise KeyboardInterrupt
    out = Path(args.out) if args.out else run_dir
    for name in ("probe.json", "probe.png"):
        check_new_file(out / name, args.force)
    rundir.make_dir(out)
    record = {
        "version": package_version(),
        "run": str(run_dir),
        "residual": config.model.attention.residual,
        "layers": totals,
        "pdmm_residual_normalised": residual,
    }
    rundir.write_file(out / "probe.json", json.dumps(record, indent=2) + "\n")
    plot_probe(totals, residual, config.model.attention.residual, out / "probe.png")
    for index, total in enumerate(totals, start=1):
        print(f"layer {index}: " + ", ".join(f"{k} {v:.3f}" for k, v in total.items()))
    print(out / "probe.png")
    return 0
