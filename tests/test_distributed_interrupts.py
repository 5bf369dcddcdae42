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
from experiments import launch
from experiments.errors import UsageError

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
LONG = [
    sys.executable,
    "-m",
    "experiments",
    "solve",
    "--nodes",
    "60",
    "--iters",
    "1000000",
    "--tol",
    "0",
    "--nproc",
    "2",
]  # with process 0's progress bar, to see the iterations begin
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
    launcher = subprocess.Popen(
        [*LONG, "--out", str(out)],
        env=ENV,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=False,
    )
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
    Path(out, f"{rank}.json").write_text(
        json.dumps(
            dict(
                iterations=result.iterations, status=result.status, interrupted=result.interrupted, x=result.x.tolist()
            )
        )
    )
    torch.distributed.destroy_process_group()


def _two_ranks(worker, out):
    """Run worker(rank, port, out) on two spawned ranks; their {rank}.json reports, (rank 0's, rank 1's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, str(out)), nprocs=2, join=True)
    return tuple(json.loads((out / f"{rank}.json").read_text()) for rank in (0, 1))


def test_a_sigint_to_one_rank_stops_every_rank_at_the_same_iteration(tmp_path):
    zero, one = _two_ranks(_interrupted_worker, tmp_path)
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
    out = str(tmp_path / "run")
    argv = ["solve", "--nodes", "20", "--method", "admm", "--privacy", "1.0", "--no-progress", "--out", out]
    code = f"from experiments.launch import launch; raise SystemExit(launch({argv!r}, 2))"
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "pdmm-bridge solve: error: admm: --privacy perturbs the z of pdmm and qa-pdmm; it is not implemented for admm"
    ]


def test_a_process_killed_mid_run_is_one_line(tmp_path):
    """kill -9 of one process: one line, exit 1, naming the killed process (the cause), not the other's failed
    collective (its consequence)."""
    with _launched(tmp_path / "run") as started:
        os.kill(_children(started.launcher.pid)[1], signal.SIGKILL)
        assert started.launcher.wait(timeout=60) == 1, started.stderr()
        stderr = started.stderr().rsplit("\r", 1)[-1].lstrip()  # after the progress bar
    assert stderr.splitlines() == ["pdmm-bridge solve: error: process 1 of 2 was killed by signal SIGKILL"], stderr


def _listening(port):
    """Whether a socket on this machine listens on TCP `port` (/proc/net/tcp and tcp6: state 0A)."""
    rows = [
        line.split()
        for table in ("tcp", "tcp6")
        if Path(f"/proc/net/{table}").exists()
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]
    ]
    return any(row[3] == "0A" and int(row[1].rsplit(":", 1)[1], 16) == port for row in rows)


def _environ(pid):
    return dict(entry.split("=", 1) for entry in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in entry)


def test_ctrl_c_while_the_processes_start_is_not_lost(tmp_path):
    """Ctrl-C as soon as the processes exist (still importing, SIGINT blocked): the job ends with one line and 130
    once they can take it, instead of running all its iterations."""
    out = tmp_path / "run"
    launcher = subprocess.Popen(
        [*LONG, "--no-progress", "--out", str(out)],
        env=ENV,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(_children(launcher.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(launcher.pid, signal.SIGINT)
        stdout, stderr = launcher.communicate(timeout=90)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 130, stderr
    assert (
        stderr.splitlines() == ["pdmm-bridge solve: interrupted (Ctrl-C) outside the iterations; no results written"]
        and stdout == ""
    ), stderr
    assert not (out / "config.json").exists()


SLOW_START = """import os, time
if os.environ.get("RANK") == "1" and os.environ.get("PDMM_BRIDGE_PARENT"):
    time.sleep(float(os.environ["SLOW_START"]))  # a slow process 1: process 0 waits in the rendezvous for it
"""


def test_ctrl_c_during_the_rendezvous_ends_the_job_at_once(tmp_path):
    """Ctrl-C while process 0 waits in torch's rendezvous for a process still starting: one line, 130, soon after
    that process takes it (QUICK), not at the rendezvous timeout, and no C++ stack from an interrupted connect."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_START)
    env = {**ENV, "SLOW_START": "6", "PYTHONPATH": os.pathsep.join(filter(None, [str(site), ENV.get("PYTHONPATH")]))}
    launcher = subprocess.Popen(
        [*LONG, "--no-progress", "--reference", "none", "--out", str(tmp_path / "run")],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(_children(launcher.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        port = int(_environ(_children(launcher.pid)[0])["MASTER_PORT"])
        while not _listening(port) and time.monotonic() < deadline:  # process 0 in the rendezvous
            time.sleep(0.05)
        assert _listening(port)
        os.killpg(launcher.pid, signal.SIGINT)
        sent = time.monotonic()
        stdout, stderr = launcher.communicate(timeout=90)
        took = time.monotonic() - sent
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 130, stderr
    assert stderr.splitlines() == [
        "pdmm-bridge solve: interrupted (Ctrl-C) outside the iterations; no results written"
    ], stderr
    assert took < 60, took  # process 1's start (6 s asleep, then its imports) and QUICK; the rendezvous waits 120 s


def test_sigterm_to_the_launcher_ends_the_job_and_its_files(tmp_path):
    """SIGTERM ends the launcher by SIGTERM, as it ends one process, after ending its processes and removing its
    report directory."""
    with _launched(tmp_path / "run") as started:
        workers = _children(started.launcher.pid)
        reports = Path(_environ(workers[0])["PDMM_BRIDGE_REPORTS"])
        assert reports.is_dir()
        started.launcher.send_signal(signal.SIGTERM)
        assert started.launcher.wait(timeout=30) == -signal.SIGTERM, started.stderr()
    assert not any(_alive(w) for w in workers) and not reports.exists()
    assert "Traceback" not in started.stderr()


def test_graph_warnings_are_printed_once(tmp_path):
    """A graph file with self loops under --nproc 2: its warning once (by the launcher), not once per process."""
    edges = tmp_path / "loops.edges"
    edges.write_text("".join(f"{i} {i + 1}\n" for i in range(11)) + "3 3\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments",
            "solve",
            "--graph",
            str(edges),
            "--iters",
            "5",
            "--reference",
            "none",
            "--no-progress",
            "--nproc",
            "2",
            "--out",
            str(tmp_path / "run"),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if "self-loop" in line] == [
        "pdmm-bridge solve: warning: the graph has 1 self-loop(s) (i, i); they are ignored, as a constraint couples "
        "two distinct nodes"
    ], done.stderr


def test_bad_input_under_torchrun_is_one_line(tmp_path):
    """Started by hand under torchrun, bad input that every process finds is printed by local process 0 alone (no
    traceback; torchrun adds its own report)."""
    edges = tmp_path / "two.edges"
    edges.write_text("0 1\n2 3\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "experiments",
            "solve",
            "--graph",
            str(edges),
            "--no-progress",
            "--out",
            str(tmp_path / "run"),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("pdmm-bridge")]
    assert ours == [
        f"pdmm-bridge solve: error: the graph in {edges} is disconnected: it has 2 connected "
        "components; PDMM needs a connected graph"
    ], done.stderr
    assert "exitcode  : 2" in done.stderr  # torchrun's report: both processes ended with bad input's status


def test_under_torchrun_a_process_prints_its_own_runtime_failure(monkeypatch, capsys):
    """launch.report under torchrun (RANK and WORLD_SIZE, no report directory): bad input and Ctrl-C by local
    process 0 only, a runtime failure by every process; one process (no RANK) leaves it to the caller."""
    monkeypatch.delenv(launch.REPORTS, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("LOCAL_RANK", rank)
        assert launch.report(2, f"bad {rank}") and launch.report(130, f"ctrl-c {rank}")
        assert launch.report(1, f"runtime {rank}")
    assert capsys.readouterr().err.splitlines() == ["bad 0", "ctrl-c 0", "runtime 0", "runtime 1"]
    monkeypatch.delenv("RANK")
    assert not launch.report(1, "one process")


def test_too_many_processes_for_the_memory_are_refused():
    gb = 2**30
    launch.check(2, available=8 * gb)
    with pytest.raises(
        UsageError,
        match=r"--nproc 1000 needs about .* GB .* more than the 8.0 GB available; use at "
        r"most \d+ processes",
    ):
        launch.check(1000, available=8 * gb)


def test_the_launcher_ends_a_process_stuck_after_another_failed(tmp_path, monkeypatch):
    """Process 1 fails (its report written), process 0 hangs: the launcher kills process 0 GRACE seconds later and
    prints process 1's line; every process is polled, not only the first one still running."""
    monkeypatch.setattr(launch, "GRACE", 0.5)
    reports = tmp_path / "reports"
    reports.mkdir()
    entry = json.dumps({"code": 1, "time": 1.0, "rank": 1, "message": "pdmm-bridge solve: error: process 1 failed"})
    job = launch._Job()
    job.processes = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]),
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import pathlib, sys; pathlib.Path({str(reports / 'rank-1.json')!r})"
                f".write_text({entry!r}); sys.exit(1)",
            ]
        ),
    ]
    started = time.monotonic()
    try:
        codes = launch._wait(job, reports)
    finally:
        job.kill()
    assert time.monotonic() - started < 30 and codes == [-signal.SIGKILL, 1] and set(job.killed) == {0}


def test_a_stopped_process_is_named_as_the_cause(tmp_path, monkeypatch, capsys):
    """Process 0 stopped (kill -STOP): process 1's collective times out and it reports that; the launcher kills the
    stopped process and names it, the cause, rather than the timeout."""
    monkeypatch.setattr(launch, "GRACE", 0.5)
    reports = tmp_path / "reports"
    reports.mkdir()
    entry = json.dumps({"code": 1, "time": 1.0, "rank": 1, "message": "process 1 of 2: CollectiveError: timed out"})
    job = launch._Job()
    job.processes = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])]
    os.kill(job.processes[0].pid, signal.SIGSTOP)
    job.processes.append(
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import pathlib, sys; pathlib.Path("
                f"{str(reports / 'rank-1.json')!r}).write_text({entry!r}); sys.exit(1)",
            ]
        )
    )
    try:
        codes = launch._wait(job, reports)
    finally:
        job.kill()
    assert launch._outcome(codes, launch._reports(reports), job, ["--no-progress"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "pdmm-bridge solve: error: process 0 of 2 was stopped (SIGSTOP or a debugger) and did not answer within the "
        "collective timeout; the launcher killed it"
    ]


def test_process_0_ending_by_itself_has_spoken(capsys):
    """Process 0 ended with a status of its own and no report (it wrote what ran and said so): the job's status is
    its status, with no line from the launcher, whatever the others did."""
    job = launch._Job()
    assert launch._outcome([130, 130], {}, job, []) == 130
    assert launch._outcome([0, -9], {}, job, []) == 0
    assert capsys.readouterr().err == ""
    job.interrupted = True  # a Ctrl-C before the iterations: process 0 reported it, the other was waiting for it
    report = (130, 2.0, "pdmm-bridge solve: interrupted (Ctrl-C) outside the iterations; no results written")
    assert launch._outcome([130, 1], {0: report, 1: (1, 1.0, "collective failed")}, job, []) == 130
    assert capsys.readouterr().err.splitlines() == [report[2]]


def _early_interrupt_worker(rank, port, out):
    """A distributed solve whose rank 1 gets a SIGINT inside pdmm.solve before the iterations (while it builds its
    part of the graph): every rank stops at the first stopping test, together."""
    torch.set_num_threads(1)
    pdmm.distributed.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=60)
    G = pdmm.Graph.random_geometric(40, seed=0)
    problem = pdmm.averaging(G, np.random.default_rng(0).normal(size=(40, 2)))
    if rank == 1:
        building = pdmm.distributed.local_part

        def interrupted_while_building(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)
            return building(*args, **kwargs)

        pdmm.distributed.local_part = interrupted_while_building
    result = pdmm.solve(problem, max_iter=10**6, tol=0, backend="distributed", check_every=10)
    Path(out, f"{rank}.json").write_text(json.dumps(dict(iterations=result.iterations, status=result.status)))
    torch.distributed.destroy_process_group()


def test_a_sigint_before_the_iterations_stops_every_rank_at_the_first_test(tmp_path):
    zero, one = _two_ranks(_early_interrupt_worker, tmp_path)
    assert zero == one == {"iterations": 10, "status": "interrupted"}


def test_a_ctrl_c_before_the_first_iteration_is_written_as_interrupted(tmp_path, monkeypatch, capsys):
    """A Ctrl-C inside pdmm.solve before any iteration (one process here; a process of a --nproc job between two
    runs alike): config.json says interrupted, with no runs."""
    from experiments.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pdmm, "solve", interrupted)
    monkeypatch.setattr(pdmm.Plan, "run", interrupted)  # the command runs the plans its checks built
    out = tmp_path / "run"
    assert main(["solve", "--nodes", "10", "--reference", "none", "--no-progress", "--out", str(out)]) == 130
    config = json.loads((out / "config.json").read_text())
    assert config["interrupted"] is True and config["methods"] == {}
    assert "interrupted (Ctrl-C) in pdmm" in capsys.readouterr().err
