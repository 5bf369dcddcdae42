"""What the benchmark scripts share: the machine they ran on and a synchronised timer."""

import os
import platform
import time

import torch


def cpu_model():
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def memory_gib():
    """The machine's memory in GiB (from /proc/meminfo), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        return None
    return kib / 2**20


def describe():
    """One line naming the machine: CPU model, cores and memory, and the GPU where torch sees one."""
    memory = memory_gib()
    parts = [cpu_model(), f"{os.cpu_count()} cores"] + ([f"{memory:.0f} GiB"] if memory else [])
    if torch.cuda.is_available():
        parts.append(torch.cuda.get_device_name())
    return ", ".join(parts)


def synchronize(device):
    """Wait for the work queued on `device` (a torch.device or its name); nothing to wait for on the CPU."""
    device = torch.device(device)
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def timed(fn, k, device):
    """Seconds per call of fn, over k calls, with the device synchronised before both clock reads."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(k):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / k
