"""One torch.distributed job of P processes on this machine, started by `solve --nproc P` (in place of torchrun).

The launcher starts P copies of `python -m experiments ARGS`, each in a process group of its own, with
torch's env:// variables (MASTER_ADDR 127.0.0.1, a free MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE) and waits for them:

    Ctrl-C     SIGINT to the launcher is passed once to every process; the processes stop together at
               their next stopping test (pdmm.distributed) and process 0 writes what ran. A process
               ignores SIGINT until the command runs (listen()), so none dies half-imported.
    failures   a process that fails writes its one-line error to the launcher's report directory
               (REPORTS) instead of printing it; the launcher prints one line for the job, bad input
               (exit 2) before runtime failures (exit 1, a process's failure before the failures it
               caused in the others), and ends the processes still running GRACE seconds after a failure.
    dead parent  every process dies with its parent (die_with_parent: prctl PR_SET_PDEATHSIG on Linux,
               else a thread that watches os.getppid()), so `kill -9` of the launcher, or of torchrun
               when the command is started by hand, ends the job at once rather than at the collective
               timeout (pdmm.distributed.DEFAULT_TIMEOUT).
"""
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPORTS = "PDMM_BRIDGE_REPORTS"  # the directory where a process of the job writes its failure
PARENT = "PDMM_BRIDGE_PARENT"  # the launcher's process id
GRACE = 10.0  # seconds the other processes have to end after one fails, before they are killed
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def launch(argv, nproc):
    """Run `python -m experiments *argv` as nproc processes of one job; the job's exit status, after one line for
    a failure (bad input: 2, runtime: 1) or a Ctrl-C (130)."""
    with tempfile.TemporaryDirectory(prefix="pdmm-bridge-job-") as reports:
        environment = _environment(nproc, reports)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited: ignored until the command runs
        processes = [subprocess.Popen([sys.executable, "-m", "experiments", *argv], process_group=0,
                                      env={**environment, "RANK": str(r), "LOCAL_RANK": str(r)})
                     for r in range(nproc)]
        signal.signal(signal.SIGINT, lambda signum, frame: _send(processes, signal.SIGINT))
        try:
            codes = _wait(processes)
        finally:
            signal.signal(signal.SIGINT, previous)
            _send(processes, signal.SIGKILL)
        return _outcome(codes, _reports(Path(reports)))


def _environment(nproc, reports):
    """The variables every process of the job shares: torch's env:// rendezvous on a free local port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            REPORTS: reports, PARENT: str(os.getpid())}


def _send(processes, signum):
    """signum to every process still running."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signum)


def _wait(processes):
    """Every process's exit status, killing those still running GRACE seconds after one failed (neither 0 nor
    130, the status of a Ctrl-C)."""
    deadline = None
    while any(process.poll() is None for process in processes):
        if deadline is None and any(process.returncode not in (None, 0, 130) for process in processes):
            deadline = time.monotonic() + GRACE
        if deadline is not None and time.monotonic() > deadline:
            _send(processes, signal.SIGKILL)
        time.sleep(0.05)
    return [process.returncode for process in processes]


def _reports(directory):
    """The failures the processes wrote: [(code, time, rank, message)]."""
    found = []
    for path in directory.glob("rank-*.json"):
        report = json.loads(path.read_text())
        found.append((report["code"], report["time"], report["rank"], report["message"]))
    return found


def _outcome(codes, reports):
    """The job's exit status; prints one line where no process 0 said what happened."""
    if reports and 130 not in codes:
        code, _, _, message = min(reports, key=lambda r: (r[0] != 2, r[1]))
        print(message, file=sys.stderr)
        return code
    if 130 in codes:
        if codes[0] != 130:
            print("pdmm-bridge solve: interrupted (Ctrl-C) outside the iterations; no results written",
                  file=sys.stderr)
        return 130
    killed = [(rank, code) for rank, code in enumerate(codes) if code < 0]
    if killed:
        rank, code = killed[0]
        print(f"pdmm-bridge solve: error: process {rank} of {len(codes)} was killed by signal "
              f"{signal.Signals(-code).name}", file=sys.stderr)
        return 1
    return codes[0] or max(codes)


def report(code, message):
    """In a process of a launched job: write its one-line failure for the launcher and return True; elsewhere
    (one process, or under torchrun) return False and let the caller print it."""
    directory = os.environ.get(REPORTS)
    if directory is None:
        return False
    rank = int(os.environ["RANK"])
    entry = json.dumps({"code": code, "time": time.time(), "rank": rank, "message": message})
    Path(directory, f"rank-{rank}.json").write_text(entry)
    return True


def listen():
    """In a process of a launched job, which starts with SIGINT ignored: Ctrl-C raises KeyboardInterrupt again."""
    if REPORTS in os.environ:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def die_with_parent():
    """End this process when its parent (the launcher, or torchrun) dies: PR_SET_PDEATHSIG = SIGKILL through
    prctl on Linux, else a daemon thread that polls os.getppid() every half second."""
    parent = int(os.environ.get(PARENT, os.getppid()))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = sys.platform.startswith("linux") and libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if not armed:
        threading.Thread(target=_watch, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def _watch(parent):
    """Poll os.getppid() until it is no longer `parent`, then end the process."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)
