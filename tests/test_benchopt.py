"""The benchopt benchmark in benchmarks/benchopt, run offline by `benchopt run` on a copy: every solver on both
losses gives a curve that starts at x = 0 and approaches the centralised solution, and PDMM's curve is what
pdmm.solve gives at the same iterations."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from extras import needs_extra

import pdmm

needs_extra("benchopt")  # it brings pandas too
import pandas as pd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # 20 s of benchopt runs, kept out of CI's 30 minutes; python -m pytest -m slow
SOLVERS = ["pdmm", "qa-pdmm", "admm", "dgd", "extra", "nids", "gradient-tracking"]


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
    bench = tmp_path_factory.mktemp("bench") / "benchopt"
    shutil.copytree(ROOT / "benchmarks" / "benchopt", bench)
    command = [
        sys.executable,
        "-m",
        "benchopt",
        "run",
        str(bench),
        "-d",
        "synthetic",
        "-o",
        "decentralised[graph=ring]",
    ]
    done = subprocess.run(
        [*command, "-n", "6", "-r", "1", "--no-plot", "--no-display", "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=bench,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (result,) = (bench / "outputs").glob("*.parquet")
    return pd.read_parquet(result)


def test_every_solver_runs_on_both_losses(curves):
    runs = curves.groupby(["p_obj_loss", "solver_name"])
    assert {loss for loss, _ in runs.groups} == {"least_squares", "logistic"}
    methods = {name.split("[")[0] for _, name in runs.groups}
    assert methods == set(SOLVERS)
    for (loss, name), run in runs:
        run = run.sort_values("stop_val")
        assert run["stop_val"].iloc[0] == 0 and run["objective_error"].iloc[0] == pytest.approx(1.0), (loss, name)
        assert np.isfinite(run["objective_value"]).all(), (loss, name)
        assert run["objective_error"].iloc[-1] < 0.99, (loss, name)  # moving towards x* (a few iterations only)


def test_pdmms_curve_is_pdmm_solve_at_the_same_iterations(curves):
    run = curves[(curves["p_obj_loss"] == "least_squares") & (curves["solver_name"].str.startswith("pdmm["))]
    run = run[run["p_solver_theta"] == 1.0].sort_values("stop_val")
    rng = np.random.default_rng(0)  # datasets/synthetic.py's data at its defaults
    X = rng.normal(size=(200, 5))
    y = X @ rng.normal(size=5) + 0.5 * rng.normal(size=200)
    sys.path.insert(0, str(ROOT / "benchmarks" / "benchopt"))
    try:
        from benchmark_utils import consensus_metrics, distributed_problem
    finally:
        sys.path.pop(0)
    problem, x_star = distributed_problem(X, y, "least_squares", "ring", 20, 1e-2)
    for k, error in zip(run["stop_val"], run["objective_error"], strict=True):
        if k:
            x = pdmm.solve(problem, method="pdmm", rho=1.0, max_iter=int(k), tol=0).x
            assert consensus_metrics(problem, x_star, x)["error"] == pytest.approx(error, rel=1e-10), k
