"""What the benchmark scripts share: the machine they ran on and a synchronised timer."""

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


def timed(fn, k, device):
    """Seconds per call of fn, over k calls, with the device synchronised before both clock reads."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)
    start = time.perf_counter()
    for _ in range(k):
        fn()
    if device.type != "cpu":
        torch.accelerator.synchronize(device)
    return (time.perf_counter() - start) / k
