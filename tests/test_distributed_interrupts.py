"""solve --nproc 2 as a terminal and a careless user treat it (issue 29, item 7 and the distributed part of item 6):
Ctrl-C keeps what ran, kill -9 of the launcher ends its processes, a failure inside the processes is one line."""
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

import pdmm
import pdmm.distributed

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
LONG = [sys.executable, "-m", "experiments", "solve", "--nodes", "60", "--iters", "1000000", "--tol", "0",
        "--nproc", "2"]  # with process 0's progress bar, to see the iterations begin
DEAD_WITHIN = 5.0  # seconds from kill -9 of the launcher to the end of its processes


class _Started:
    """A launcher whose process 0's progress bar (stderr) has shown `iterations`; stderr() is all it wrote, read
    by a thread (so that the pipe never fills) until the launcher ends."""

    def __init__(self, launcher, iterations=200):
        self.launcher, self.seen = launcher, []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 60
        while not self._done(iterations) and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.1)
        assert self._done(iterations), self.stderr()

    def _read(self):
        self.seen.extend(iter(lambda: os.read(self.launcher.stderr.fileno(), 4096), b""))

    def _done(self, iterations):
        done = re.findall(rb"(\d+)/1000000", b"".join(self.seen))
        return bool(done) and int(done[-1]) >= iterations

    def stderr(self):
        if self.launcher.poll() is not None:
            self.reader.join(10)
        return b"".join(self.seen).decode()


@contextlib.contextmanager
def _launched(out):
    """A long `solve --nproc 2` in a session of its own (as a terminal runs a job), started until its iterations
    show; killed (kill -9, so its processes die with it) if still running at the end."""
    launcher = subprocess.Popen([*LONG, "--out", str(out)], env=ENV, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=False)
    try:
        yield _Started(launcher)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        launcher.wait()


def _children(pid):
    """The process ids of pid's children (Linux /proc)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid):
    """Whether pid is a running process (not gone, not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _interrupted_worker(rank, port, out):
    """A long distributed solve in which only rank 1 gets a SIGINT, a second in; each rank writes what it
    returned."""
    torch.set_num_threads(1)
    pdmm.distributed.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=60)
    G = pdmm.Graph.random_geometric(40, seed=0)
    problem = pdmm.averaging(G, np.random.default_rng(0).normal(size=(40, 2)))
    if rank == 1:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    result = pdmm.solve(problem, max_iter=10**7, tol=0, backend="distributed")
    Path(out, f"{rank}.json").write_text(json.dumps(dict(iterations=result.iterations, status=result.status,
                                                         interrupted=result.interrupted, x=result.x.tolist())))
    torch.distributed.destroy_process_group()


def test_a_sigint_to_one_rank_stops_every_rank_at_the_same_iteration(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_interrupted_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    zero, one = (json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1))
    assert zero["interrupted"] and zero["status"] == "interrupted" and zero["iterations"] > 0
    assert zero == one  # the same iteration, the same x, on both ranks


def test_ctrl_c_of_two_processes_keeps_the_iterations_that_ran(tmp_path):
    """SIGINT to the launcher's process group, as a terminal sends it: exit 130, history.csv holds the iterations,
    config.json says interrupted, and nothing is said outside the iterations."""
    out = tmp_path / "run"
    with _launched(out) as started:
        os.killpg(started.launcher.pid, signal.SIGINT)
        assert started.launcher.wait(timeout=60) == 130, started.stderr()
        stdout, stderr = started.launcher.stdout.read().decode(), started.stderr()
    config = json.loads((out / "config.json").read_text())
    run = config["methods"]["pdmm"]
    assert config["interrupted"] and run["interrupted"] and run["status"] == "interrupted"
    rows = (out / "history.csv").read_text().splitlines()[1:]
    assert len(rows) == run["iterations"] >= 200
    assert "interrupted after" in stdout and "what ran is in" in stderr
    assert "Traceback" not in stderr and "outside the iterations" not in stderr


def test_kill_9_of_the_launcher_ends_its_processes(tmp_path):
    with _launched(tmp_path / "run") as started:
        workers = _children(started.launcher.pid)
        assert len(workers) == 2
        started.launcher.kill()
        started.launcher.wait()
        deadline = time.monotonic() + DEAD_WITHIN
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = [w for w in workers if _alive(w)]
        for pid in alive:
            os.kill(pid, signal.SIGKILL)
        assert not alive, f"processes alive {DEAD_WITHIN} s after kill -9 of the launcher"


def test_bad_input_found_inside_the_processes_is_one_line(tmp_path):
    """Arguments that only the processes check (launch.launch bypasses the command's own checks): one line for
    the job, exit 2, no traceback."""
    argv = ["solve", "--nodes", "20", "--drop", "0.1", "--no-progress", "--out", str(tmp_path / "run")]
    code = f"from experiments.launch import launch; raise SystemExit(launch({argv!r}, 2))"
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["pdmm-bridge solve: error: pdmm: backend='distributed' does not implement "
                                        "network= (only the ideal network)"]


def test_a_process_killed_mid_run_is_one_line(tmp_path):
    """kill -9 of one process: the other's failed collective is a runtime failure, one line, exit 1."""
    with _launched(tmp_path / "run") as started:
        os.kill(_children(started.launcher.pid)[1], signal.SIGKILL)
        assert started.launcher.wait(timeout=60) == 1, started.stderr()
        stderr = started.stderr().rsplit("\r", 1)[-1].lstrip()  # after the progress bar
    assert len(stderr.splitlines()) == 1 and re.match(r"pdmm-bridge solve: error: process [01] of 2: ", stderr), stderr
