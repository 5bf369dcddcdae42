"""pdmm-bridge solve: one problem on one graph, solved by one or several methods, written to --out.

    pdmm-bridge solve --problem averaging --graph random_geometric --nodes 100 --method pdmm --out runs/avg
    pdmm-bridge solve --compare pdmm:theta=1,pdmm:theta=0.5,admm,qa-pdmm:eta=safe --out runs/four

    pdmm-bridge solve --compare pdmm,pdmm:theta=0.5,admm --drop 0.2 --wake 0.8 --bits 12 --dither --out runs/lossy
    pdmm-bridge solve --method pdmm:theta=0.5 --burst 0.05,0.3 --wake one --out runs/bursty
    pdmm-bridge solve --compare pdmm,gossip,chebyshev,chebyshev:mixing=lazy_metropolis:low=0:high=0.99 --out runs/avg
    pdmm-bridge solve --problem least_squares --compare pdmm,dgd,extra:alpha=0.05,nids,gradient-tracking --out runs/dec
    pdmm-bridge solve --problem logistic --data builtin:breast_cancer --compare pdmm,extra,nids --tune --out runs/bc

A method spec is METHOD[:KEY=VALUE...] with KEY rho (pdmm, qa-pdmm, admm) or one of the method's
parameters (theta, eta; mixing for gossip, chebyshev, dgd, extra, nids and gradient-tracking, a
kind of pdmm.mixing_matrix; low and high, given together, for chebyshev's eigenvalue interval;
alpha, "auto" or a number > 0, for dgd, extra, nids and gradient-tracking; step, constant or
diminishing, for dgd); each spec is one run, labelled by the spec as written, and --rho / --theta
/ --eta are the values of the runs that take them and do not set their own. gossip and chebyshev
solve --problem averaging only, on the ideal network; dgd, extra, nids and gradient-tracking
take the simulated network's flags below, all but --privacy and --wake one (docs/decentralised.md
section 9).

--data builtin:breast_cancer (with --problem logistic) is scikit-learn's bundled breast-cancer data,
standardised, with an intercept, its 569 rows split over the graph's nodes by --seed, and --reg the
l2 weight of the whole problem (pdmm.datasets.breast_cancer). --tune [TARGET] chooses the rho or
alpha of every run whose spec does not set it by pdmm.tune's rule (the grid value that reaches
relative error TARGET, default 1e-6, in the fewest iterations within --iters; docs/decentralised.md
section 8); such a run is labelled with the value, e.g. extra:alpha=0.0397, and tuning.csv holds
every value tried.

--out (refused when it exists and is not empty, unless --force) receives config.json (resolved
arguments, version, graph size, per-run summary and tuning), history.csv (method label, iteration,
residual, objective, error), result.npz (x_<label>, and x_star with a reference) and
convergence.png. --drop, --burst, --wake, --edge-up, --bits (with --dither, --limit) and --privacy
run every method over the same simulated network (pdmm.Network, seeded by --seed; per-edge loss
and per-node wake probabilities are Python-only: pdmm.Network(drop=..., wake=...)); history.csv
then also holds the cumulative messages delivered and bits sent (and, with --privacy, the
privacy measures), and `pdmm-bridge plot --x bits` draws against them. For batched runs
(--batch B) history.csv and the plot hold the mean over the B instances, while config.json and
the printed summary give the worst instance (the one convergence waits for). Ctrl-C stops the
current run after its last whole iteration, writes what ran (marked "interrupted" in
config.json and the plot's title) and exits with status 130.

--nproc P solves with P processes on this machine (gloo; NCCL with --device cuda): the partitioned engine of
`pdmm.solve(..., backend="distributed")`, which runs every method, on consensus problems (quadratic, least-squares,
lasso and logistic local functions), over the ideal or the simulated network (--privacy included), in the edge or
the node form. The command checks its arguments and claims --out, then starts P copies of the same command as one
job (experiments/launch.py, torchrun's env:// variables); every process builds the same graph and data from --seed,
and process 0 writes the outputs. Ctrl-C stops every process at the same iteration and process 0 writes what ran,
as one process does; a failure prints one line for the job (exit 2 for bad input, 1 for a runtime failure); the
processes die with the launcher (kill -9 of it ends them at once). Started by torchrun (one machine or several,
c10d rendezvous) or as the tasks of a Slurm job step (`srun`, Slurm's variables taken for torch's), each process is
one of such a job without --nproc (docs/guide/distributed.md, "Launching a solve job").

--shards DIR solves the problem `pdmm-bridge partition` cut into DIR, each process of the job loading only its part
(pdmm.shards.load: the manifest and its own part file, each checked; a refused file is one line for the job, exit
2), so that no process holds the whole graph, data or x. The job has the manifest's parts as processes (--nproc P,
torchrun or srun; one part runs in this process without --nproc); the manifest fixes the graph, the data and the
problem, so --graph, --nodes, --graph-param, --data, --dim, --samples, --batch, --problem, --ridge, --lam and --reg
are refused beside it, as are --reference cvxpy and --tune (no process holds the whole problem: it runs without a
reference). Each part's x is written to OUT/x/part-RRRRR.npz (nodes: the part's global node ids; x_<label>: each
run's rows of them), through process 0, one part at a time; result.npz is not written, while config.json (with the
manifest and its sha256s), history.csv (sums over the parts), convergence.png and the summary are as without it
(docs/guide/solve_cli.md, "Solving shards").

    pdmm-bridge partition torus --nodes 10000 --problem least_squares --parts 4 --out shards/ls
    pdmm-bridge solve --shards shards/ls --nproc 4 --compare pdmm,extra --out runs/ls4
"""

import argparse
import os
import sys

from .errors import UsageError
from .solve_options import add_arguments


def add_parser(subparsers):
    p = subparsers.add_parser(
        "solve",
        help="solve one problem with one or several methods",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    return p


def run(args):
    import torch  # torch and pdmm: imported only to run (solve --help answers at once)

    from . import launch, solve_job

    try:
        launch.listen()  # in a process of a --nproc job: where a Ctrl-C that came while it started is raised
        return _run(args)
    except KeyboardInterrupt:
        line = "pdmm-bridge solve: interrupted (Ctrl-C) outside the iterations; no results written"
        if not launch.report(130, line):  # of a --nproc job, the launcher prints it once
            print(line, file=sys.stderr)
        return 130
    except Exception as err:  # in a process of a --nproc job: one line for the launcher to print
        code = 2 if isinstance(err, UsageError) else 1
        if not launch.report(code, solve_job.failure_line(err)):
            raise
        return code
    finally:
        launch.done()  # a --nproc process has said what happened: Ctrl-C no longer interrupts it
        if torch.distributed.is_initialized():  # a --nproc process
            torch.distributed.destroy_process_group()


def _run(args):
    from . import launch, solve_files, solve_job, solve_outputs, solve_problem, solve_runs, solve_shards

    if launch.slurm_task(os.environ):  # a task of srun: torch's env:// variables from Slurm's, before any rendezvous
        os.environ.update(launch.slurm_environment(os.environ))
    if "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a process torchrun or srun started
        args.nproc = int(os.environ["WORLD_SIZE"])
    if args.shards is not None:
        return solve_shards.solve(args)
    specs = args.compare or [args.method]
    params = solve_runs.method_params(args, specs)
    to_tune = solve_runs.to_tune(args, specs)
    network = solve_problem.network_of(args)
    G = solve_problem.graph_of(args)
    problem = solve_problem.problem_of(args, G)
    plans = solve_runs.check_methods(problem, specs, params, args, network)  # each run's method built once, here
    rank = solve_job.rank(args)
    if args.nproc > 1 and rank is None:  # checked and claimed here, solved by the torchrun processes
        return solve_job.launch_job(args)
    x_star = solve_runs.reference_of(problem, args)
    out = solve_job.claim(args, rank)
    try:
        tunings = {
            label: solve_runs.tune_run(problem, label, method, params[label], x_star, args, network)
            for label, method, _ in specs
            if label in to_tune
        }
    except KeyboardInterrupt:
        print("pdmm-bridge solve: interrupted (Ctrl-C) while tuning; no results written", file=sys.stderr)
        return 130
    plans = {label: plan for label, plan in plans.items() if label not in tunings}  # tuned: planned again
    specs, params, tunings = solve_runs.with_tuned_values(specs, params, tunings)
    results, failures, interrupted = solve_runs.solve_all(problem, specs, params, x_star, args, network, plans)
    if rank:  # process 0 writes and reports
        return 130 if interrupted else 1 if failures else 0
    config = solve_outputs.config_text(
        args, specs, params, solve_outputs.graph_size(G), results, failures, tunings, interrupted
    )
    ran = (specs, results, failures, tunings, interrupted)
    npz = solve_outputs.npz_bytes(results, x_star)
    return solve_files.write_outputs(args, out, config, ran, network, problem.n, problem, npz)
