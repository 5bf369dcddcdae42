"""One torch.distributed job of P processes on this machine, started by `solve --nproc P` (in place of torchrun).

The launcher starts P copies of `python -m experiments ARGS`, each in a process group of its own, with
torch's env:// variables (MASTER_ADDR 127.0.0.1, a free MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE; OMP_NUM_THREADS 1 unless set), and waits for them:

    Ctrl-C     SIGINT to the launcher is passed once to every process; the processes stop together at
               their next stopping test (pdmm.distributed) and process 0 writes what ran. A process
               starts with SIGINT blocked (the launcher's mask, inherited) and unblocks it once the command
               runs (listen()), so none dies half-imported and none loses a Ctrl-C that came while it
               started: that one is raised there, "interrupted outside the iterations". It is blocked
               again while the rendezvous connects (rendezvous()), and ignored once the command has ended
               (done()), so that no process ends by SIGINT after it has said what happened.
    SIGTERM, SIGHUP  passed to every process (which ends at once, as one process would); the launcher
               then removes its report directory and ends by the same signal, without a line.
    failures   a process that fails, or is interrupted outside the iterations, writes its one line to the
               launcher's report directory (REPORTS) instead of printing it, and the launcher prints one
               line for the job: bad input (exit 2) first, then a Ctrl-C (130), a process killed by a
               signal (1), a stopped process the launcher had to kill (1), then the first runtime failure
               (1; it caused the failures of the others). A
               process that ends by itself without a report (process 0 after writing what ran, the others
               after the last collective) fails nothing, and when process 0 ends so, it has spoken.
    stuck      once a process has failed or been killed, or process 0 has ended, the processes still
               running have GRACE seconds to end before they are killed; QUICK seconds after a Ctrl-C
               outside the iterations (nothing is written then) or SIGTERM, so that nothing waits for a
               rendezvous or collective timeout.
    dead parent  every process dies with its parent (die_with_parent: prctl PR_SET_PDEATHSIG on Linux,
               else a thread that watches os.getppid()), so `kill -9` of the launcher, or of torchrun
               when the command is started by hand, ends the job at once rather than at the collective
               timeout (pdmm.distributed.DEFAULT_TIMEOUT).
    memory     check() refuses more processes than the machine's available memory holds (PROCESS_BYTES
               each, before the problem), before anything is started or written.

Started by hand under torchrun (no report directory) a process prints its failure itself: bad input and
Ctrl-C by local process 0 only (every process finds the same), a runtime failure by each process that has
one; torchrun then adds its own report and exits 1. A task of a Slurm job step (srun) takes torch's variables
from Slurm's (slurm_environment) and is otherwise a process torchrun started (docs/guide/distributed.md).

Why subprocess.Popen and not torch.distributed.elastic.multiprocessing.start_processes (torchrun's engine, torch
2.13), checked against the guarantees above:
    - start_processes calls PContext.start(), which installs in the main thread its own handler for SIGINT,
      SIGTERM, SIGHUP and SIGQUIT (unless TORCHELASTIC_SIGNALS_TO_HANDLE says otherwise), one that raises
      SignalException, and never puts the previous ones back: the launcher's Ctrl-C (SIGINT passed once to
      every process, then the job's outcome) and SIGTERM (passed on, then the launcher ends by it) would be
      replaced by an exception in the launcher.
    - PContext.wait() closes the job as soon as one process exits non-zero: SIGTERM to every other process at
      once, SIGKILL 30 s later. A process that ends 130 after writing what an interrupted run did, or 2 for bad
      input, would have the others killed by SIGTERM before they end or write their report, so the one line
      would become "killed by signal SIGTERM", and the GRACE / QUICK policy (`_wait`) could not be kept.
      Keeping it means never calling wait(), and reading each rank's exit from its private
      `subprocess_handlers[rank].proc`: Popen with extra steps.
What it would bring is here already: env:// variables, one process group per process (start_processes starts a
session per process), and log redirection, which the command does not want (each process writes to the
terminal; failures go through REPORTS). So the processes are started with Popen below.
"""

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from . import memory
from .errors import RunFailure, UsageError

REPORTS = "PDMM_BRIDGE_REPORTS"  # the directory where a process of the job writes its failure
PARENT = "PDMM_BRIDGE_PARENT"  # the launcher's process id
GRACE = 10.0  # seconds the other processes have to end after one fails, before they are killed
QUICK = 2.0  # the same after a Ctrl-C outside the iterations, or SIGTERM: nothing is written then
PR_SET_PDEATHSIG = 1  # linux/prctl.h
ENDING = (signal.SIGTERM, signal.SIGHUP) if hasattr(signal, "SIGHUP") else (signal.SIGTERM,)
PROCESS_BYTES = 600 * 2**20  # memory one process of a job needs before its problem: Python, torch, cvxpy (~0.4 GB)
_armed = []  # die_with_parent has run in this process
TORCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SLURM_PORT = 20000  # MASTER_PORT of a Slurm job step: SLURM_PORT + its job id modulo SLURM_PORT, unless set
_NUMBER = r"[0-9]+"
_RANGES = rf"\[{_NUMBER}(?:-{_NUMBER})?(?:,{_NUMBER}(?:-{_NUMBER})?)*\]"
_HOST = rf"(?:[^\[\],\s]+|{_RANGES})+"  # one item of a Slurm host list: "gpu[01-04,07]", "cpu3", "r[1-2]-n[1-8]"
_COUNTS = r"([0-9]+)(?:\(x([0-9]+)\))?"  # one item of SLURM_TASKS_PER_NODE: "2" or "2(x3)" (3 nodes of 2)


def check(nproc, available=None):
    """UsageError where nproc processes would need more than the `available` bytes (default: what this machine has
    available; unknown: no check) before their problem is even built."""
    if nproc <= 1:
        return
    available = memory.available_bytes("cpu") if available is None else available
    need = nproc * PROCESS_BYTES
    if available is not None and need > available:
        raise UsageError(
            f"--nproc {nproc} needs about {need / 2**30:.1f} GB ({PROCESS_BYTES / 2**30:.2g} GB a "
            f"process before its problem), more than the {available / 2**30:.1f} GB available; use at "
            f"most {max(1, available // PROCESS_BYTES)} processes"
        )


class _Job:
    """The processes of one job and what the launcher has done to them."""

    def __init__(self):
        self.processes, self.interrupted, self.ending = [], False, None
        self.killed = {}  # rank: its state when the launcher killed it ("T": stopped), of those it killed

    def send(self, signum):
        """signum to every process still running."""
        for process in self.processes:
            if process.poll() is None:
                try:
                    process.send_signal(signum)
                except ProcessLookupError:
                    pass

    def kill(self):
        """SIGKILL to every process still running, remembered as the launcher's with the state it was in."""
        for rank, process in enumerate(self.processes):
            if process.poll() is None:
                self.killed.setdefault(rank, _state(process.pid))
        self.send(signal.SIGKILL)

    def interrupt(self, signum, frame):
        self.interrupted = True
        self.send(signal.SIGINT)

    def end(self, signum, frame):
        self.ending = signum
        self.send(signal.SIGTERM)


def launch(argv, nproc):
    """Run `python -m experiments *argv` as nproc processes of one job; the job's exit status, after one line for
    a failure (bad input: 2, runtime: 1) or a Ctrl-C (130). SIGTERM or SIGHUP to the launcher ends the job and
    then the launcher by that signal."""
    job = _Job()
    with tempfile.TemporaryDirectory(prefix="pdmm-bridge-job-") as reports:
        environment = _environment(nproc, reports)
        handled = (signal.SIGINT, *ENDING)
        # blocked while the processes start: they inherit the mask (listen() unblocks it), and a signal that comes
        # now waits for the handlers below instead of being lost
        masked = hasattr(signal, "pthread_sigmask")
        if masked:
            signal.pthread_sigmask(signal.SIG_BLOCK, handled)
        previous = {signum: signal.getsignal(signum) for signum in handled}
        try:
            try:
                for rank in range(nproc):
                    job.processes.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "experiments", *argv],
                            process_group=0,
                            env={**environment, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                        )
                    )
            except OSError as err:  # no memory or process slots left: the started ones are killed below
                raise RunFailure(f"could not start process {len(job.processes)} of {nproc}: {err}") from None
            finally:
                signal.signal(signal.SIGINT, job.interrupt)
                for signum in ENDING:
                    signal.signal(signum, job.end)
                if masked:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)
            codes = _wait(job, Path(reports))
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            job.kill()
        status = None if job.ending else _outcome(codes, _reports(Path(reports)), job, argv)
    if job.ending:  # as one process ends by it: no line, the shell's status of that signal
        signal.signal(job.ending, signal.SIG_DFL)
        os.kill(os.getpid(), job.ending)
        return 128 + job.ending
    return status


def _environment(nproc, reports):
    """The variables every process of the job shares: torch's env:// rendezvous on a free local port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        REPORTS: reports,
        PARENT: str(os.getpid()),
    }


def _wait(job, reports):
    """Every process's exit status. The processes still running GRACE seconds after one failed (wrote a report or
    was killed by a signal) or after process 0 ended are killed; QUICK seconds after one was interrupted outside
    the iterations (no process writes results then) or after SIGTERM or SIGHUP reached the launcher."""
    processes, deadline = job.processes, None
    while [process.poll() for process in processes].count(None):  # every one polled: any() would stop at the first
        if deadline is None:
            reported = _reports(reports)
            failed = [
                rank
                for rank, process in enumerate(processes)
                if process.returncode is not None and (process.returncode < 0 or rank in reported)
            ]
            if job.ending or any(reported[rank][0] == 130 for rank in failed if rank in reported):
                deadline = time.monotonic() + QUICK
            elif failed or processes[0].returncode is not None:
                deadline = time.monotonic() + GRACE
        if deadline is not None and time.monotonic() > deadline:
            job.kill()
        time.sleep(0.05)
    return [process.returncode for process in processes]


def _reports(directory):
    """The failures the processes wrote: {rank: (code, time, message)}; a report that cannot be read is skipped."""
    found = {}
    for path in directory.glob("rank-*.json"):
        try:
            report = json.loads(path.read_text())
            found[int(report["rank"])] = (int(report["code"]), float(report["time"]), str(report["message"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def _outcome(codes, reports, job, argv):
    """The job's exit status; prints one line for the job where process 0 did not say what happened."""
    if codes[0] >= 0 and 0 not in reports and 0 not in job.killed:  # process 0 ended by itself and has spoken
        return codes[0]
    first = sorted(reports.values(), key=lambda report: report[1])
    bad_input = [report for report in first if report[0] == 2]
    interrupted = [report for report in first if report[0] == 130]
    killed = [(rank, code) for rank, code in enumerate(codes) if code < 0 and rank not in job.killed]
    stopped = sorted(rank for rank, state in job.killed.items() if state in ("T", "t"))
    if bad_input:
        code, _, message = bad_input[0]
    elif interrupted or job.interrupted:
        code = 130
        message = (
            interrupted[0][2]
            if interrupted
            else "pdmm-bridge solve: interrupted (Ctrl-C) outside the iterations; no results written"
        )
    elif killed:
        rank, signum = killed[0]
        code, message = (
            1,
            (f"pdmm-bridge solve: error: process {rank} of {len(codes)} was killed by signal {_name(-signum)}"),
        )
    elif stopped:  # the others' collectives timed out waiting for it
        code, message = (
            1,
            (
                f"pdmm-bridge solve: error: process {stopped[0]} of {len(codes)} was stopped (SIGSTOP or "
                "a debugger) and did not answer within the collective timeout; the launcher killed it"
            ),
        )
    elif first:
        code, _, message = first[0]
    else:
        code, message = (
            1,
            (
                f"pdmm-bridge solve: error: the job's processes ended with {codes}; processes "
                f"{sorted(job.killed)} did not end {GRACE:g} s after the others"
            ),
        )
    # process 0's progress bar may end mid-line where it was killed
    bar = codes[0] < 0 and not any(a.startswith("--no-p") for a in argv)
    print(("\n" if bar else "") + message, file=sys.stderr)
    return code


def _state(pid):
    """A process's state letter from /proc ("T": stopped, "t": traced), or None where it cannot be read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def report(code, message):
    """The one line of a process's failure (code 2: bad input, 1: runtime, 130: Ctrl-C outside the iterations) where
    the job prints it once; True where it is taken care of, False for one process (the caller prints it).

    In a process of a launched job: written for the launcher. Under torchrun: printed here, bad input and Ctrl-C
    by local process 0 only (every process finds the same), runtime failures by every process that has one."""
    directory = os.environ.get(REPORTS)
    rank = os.environ.get("RANK")
    if rank is None or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if directory is not None:
        entry = json.dumps({"code": code, "time": time.time(), "rank": int(rank), "message": message})
        try:
            Path(directory, f"rank-{rank}.json").write_text(entry)
            return True
        except OSError:
            pass  # the launcher is gone or its directory unwritable: said here instead
    if code == 1 or os.environ.get("LOCAL_RANK", rank) == "0":
        print(message, file=sys.stderr)
    return True


def speaks():
    """Whether this process prints the command's notices (warnings while reading its input): one process, or
    process 0 under torchrun; not a process of a launched job, whose launcher printed them while checking."""
    return REPORTS not in os.environ and os.environ.get("RANK", "0") == "0"


def listen():
    """In a process of a launched job, which starts with SIGINT blocked: Ctrl-C raises KeyboardInterrupt again,
    here for one that came while the process was starting. The process also dies with the launcher from now on."""
    if REPORTS not in os.environ:
        return
    die_with_parent()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, *ENDING})


@contextlib.contextmanager
def rendezvous():
    """In a process of a launched job: SIGINT blocked while torch.distributed's rendezvous connects (a signal there
    interrupts its connect() and makes torch print a C++ stack), and a Ctrl-C that came meanwhile raised at the end.
    A rendezvous that waits for a process that has ended is ended by the launcher (GRACE)."""
    block = REPORTS in os.environ and hasattr(signal, "pthread_sigmask")
    if block:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if block:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def done():
    """In a process of a launched job whose command has ended (and said what happened): a Ctrl-C no longer
    interrupts it (its exit, torch.distributed's teardown), so that none ends by SIGINT after it has spoken."""
    if REPORTS in os.environ:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def die_with_parent():
    """End this process when its parent (the launcher, or torchrun) dies: PR_SET_PDEATHSIG = SIGKILL through
    prctl on Linux, else a daemon thread that polls os.getppid() every half second. Once per process."""
    if _armed:
        return
    _armed.append(True)
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


def slurm_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """torch's env:// variables for one task of a Slurm job step (`srun`), from Slurm's own (docs/guide/
    distributed.md, "Slurm").

    RANK = SLURM_PROCID, WORLD_SIZE = SLURM_STEP_NUM_TASKS (srun's; else SLURM_NTASKS), LOCAL_RANK =
    SLURM_LOCALID, LOCAL_WORLD_SIZE = this node's count in SLURM_STEP_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE
    or SLURM_TASKS_PER_NODE ("2(x3),1":
    three nodes of 2 tasks, then one of 1; this node is SLURM_NODEID), MASTER_ADDR = the first host of
    SLURM_STEP_NODELIST / SLURM_JOB_NODELIST / SLURM_NODELIST ("gpu[01-04,07],cpu3" -> "gpu01", where task 0 runs
    under srun's block distribution), MASTER_PORT = 20000 + SLURM_JOB_ID % 20000. Every one of the six already in
    `environ` is kept as it is (and its Slurm source not read, but for RANK and WORLD_SIZE, which are always
    read). A pure function: `environ` is only read.

    Parameters
    ----------
    environ : Mapping[str, str]
        The process's environment (os.environ).

    Returns
    -------
    dict
        The six variables of TORCH_VARIABLES.

    Raises
    ------
    UsageError
        Naming the Slurm variable that is missing or cannot be read, and its value.
    """
    given = {name: environ[name] for name in TORCH_VARIABLES if name in environ}
    size = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in environ else "SLURM_NTASKS"
    rank, tasks = _count(environ, "SLURM_PROCID"), _count(environ, size, least=1)
    if rank >= tasks:
        raise UsageError(f"SLURM_PROCID={rank} is not below {size}={tasks}")
    mapped = {"RANK": str(rank), "WORLD_SIZE": str(tasks)}
    if "LOCAL_RANK" not in given:
        mapped["LOCAL_RANK"] = str(_count(environ, "SLURM_LOCALID"))
    if "LOCAL_WORLD_SIZE" not in given:
        mapped["LOCAL_WORLD_SIZE"] = str(_tasks_here(environ))
    if "MASTER_ADDR" not in given:
        mapped["MASTER_ADDR"] = _first_host(environ)
    if "MASTER_PORT" not in given:
        mapped["MASTER_PORT"] = str(SLURM_PORT + _count(environ, "SLURM_JOB_ID") % SLURM_PORT)
    return {**mapped, **given}


def slurm_task(environ: Mapping[str, str]) -> bool:
    """Whether this process is one task of a Slurm job step of several that no launcher has given torch's
    variables: SLURM_STEP_NUM_TASKS (set by srun only, not in a batch script) not "1", RANK not set. `--nproc` in a
    batch script or a one-task step, and torchrun under srun, are not."""
    return environ.get("SLURM_STEP_NUM_TASKS", "1") != "1" and "RANK" not in environ


def _variable(environ, name):
    """The value of Slurm variable `name`; UsageError where it is not set."""
    if name not in environ:
        raise UsageError(f"{name} is not set; run the command as a task of `srun` (docs/guide/distributed.md)")
    return environ[name]


def _count(environ, name, least=0):
    """Slurm variable `name` as an int >= least; UsageError naming it and its value otherwise."""
    value = _variable(environ, name)
    if not re.fullmatch(_NUMBER, value.strip()) or int(value) < least:
        raise UsageError(f"{name}={value!r} is not a whole number >= {least}")
    return int(value)


def _tasks_here(environ):
    """This node's number of tasks: its entry of the step's tasks per node, else SLURM_NTASKS_PER_NODE, else its
    entry of the job's tasks per node."""
    if "SLURM_NTASKS_PER_NODE" in environ and "SLURM_STEP_TASKS_PER_NODE" not in environ:
        return _count(environ, "SLURM_NTASKS_PER_NODE", least=1)
    name = next((n for n in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if n in environ), None)
    if name is None:
        raise UsageError("neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set; set LOCAL_WORLD_SIZE")
    value = environ[name]
    items = value.split(",")
    parsed = [re.fullmatch(_COUNTS, item.strip()) for item in items]
    if not all(parsed) or any(int(m[1]) < 1 or m[2] is not None and int(m[2]) < 1 for m in parsed if m):
        raise UsageError(f"{name}={value!r} is not a list of task counts such as '2(x3),1'")
    counts = [int(m[1]) for m in parsed if m for _ in range(int(m[2] or 1))]
    node = _count(environ, "SLURM_NODEID") if "SLURM_NODEID" in environ else 0
    if node >= len(counts):
        raise UsageError(f"SLURM_NODEID={node} has no entry in {name}={value!r}")
    return counts[node]


def _first_host(environ):
    """The first host of the step's (or job's) node list: "gpu[01-04,07],cpu3" -> "gpu01"."""
    names = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    name = next((n for n in names if n in environ), None)
    if name is None:
        raise UsageError("SLURM_JOB_NODELIST is not set; set MASTER_ADDR to the host of task 0")
    value = environ[name]
    if not re.fullmatch(rf"{_HOST}(?:,{_HOST})*", value):
        raise UsageError(f"{name}={value!r} is not a Slurm host list such as 'gpu[01-04,07],cpu3'")
    first = re.match(_HOST, value)
    assert first is not None  # the whole value matched
    return re.sub(r"\[([0-9]+)[^\]]*\]", r"\1", first[0])
