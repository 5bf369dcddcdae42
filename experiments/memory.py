"""The memory a training config needs, estimated from its sizes before anything is built (docs/guide/training.md,
"Memory").

    parameters   n_layer * 12 d_model^2 (attention 4 d^2, MLP 8 d^2) + (VOCAB + tokens) * d_model, float32,
                 four copies: weights, gradients and AdamW's two moments
    activations  per layer and example, tokens * (68 d_model + 10 n_head tokens) bytes (the residual stream,
                 q, k, v, the MLP's 4 d hidden units and their inputs kept for backward, and the n_head
                 tokens x tokens attention scores and weights), times n_layer and the batch

The estimate errs high (it is meant to stop a `--set model.n_layer=1000000` before it allocates, not to
budget a run). `check_memory` refuses a config above the memory this machine has available (or the GPU's
free memory for a cuda device); `train.memory_check = false` skips the check for the brave.
"""

import math
import os

import torch

from .common import UsageError

VOCAB = 256  # embedding rows: at most the char_lm alphabet or modular's p + a few
PARAMETER_COPIES = 4  # weights, gradients, AdamW exp_avg and exp_avg_sq
FLOAT_BYTES = 4
FULL_BATCH = 10_000  # examples a full batch (train.batch_size = 0) is taken to hold where the task does not say


def tokens_per_example(config) -> int:
    """Tokens one example feeds the model: char_lm's block_size, graph_consensus's n_max nodes, digits'
    patches and class token, modular's two operands, the operator and the answer slot."""
    options, name = config.task.options, config.task.name
    if name == "graph_consensus":
        return int(options.get("n_max", 32))
    if name == "digits":
        return (8 // int(options.get("patch_size", 2) or 1)) ** 2 + 1
    if name == "modular":
        return 4
    return config.train.block_size


def examples_per_batch(config) -> int:
    """train.batch_size, or for a full batch (0) modular's p^2 pairs, digits' 1797 images, else FULL_BATCH."""
    if config.train.batch_size:
        return config.train.batch_size
    if config.task.name == "modular":
        return int(config.task.options.get("p", 97)) ** 2
    return 1797 if config.task.name == "digits" else FULL_BATCH


def estimate(config) -> dict:
    """{"parameters", "parameter_bytes", "activation_bytes", "total_bytes"} of a training step (module docstring)."""
    model, tokens = config.model, tokens_per_example(config)
    parameters = model.n_layer * 12 * model.d_model**2 + (VOCAB + tokens) * model.d_model
    parameter_bytes = parameters * FLOAT_BYTES * PARAMETER_COPIES
    per_layer = tokens * (68 * model.d_model + 10 * model.n_head * tokens)
    activation_bytes = model.n_layer * examples_per_batch(config) * per_layer
    return {
        "parameters": parameters,
        "parameter_bytes": parameter_bytes,
        "activation_bytes": activation_bytes,
        "total_bytes": parameter_bytes + activation_bytes,
    }


def available_bytes(device: str) -> int | None:
    """Memory a run on `device` can have: a GPU's free memory, else the machine's available memory (MemAvailable
    of /proc/meminfo, psutil where installed, else free pages from os.sysconf); None where none of them says."""
    kind = torch.device(device).type
    if kind == "cuda" and torch.cuda.is_available():
        return torch.cuda.mem_get_info(torch.device(device))[0]
    if kind != "cpu":
        return None
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(config) -> None:
    """UsageError, with the estimate, where a config needs more memory than its device has available (estimate);
    nothing where train.memory_check is false or the available memory is unknown."""
    if not config.train.memory_check:
        return
    need, have = estimate(config), available_bytes(config.train.device)
    if have is None or need["total_bytes"] <= have:
        return
    raise UsageError(
        f"this config needs about {_gb(need['total_bytes'])} (model.n_layer={config.model.n_layer}, "
        f"model.d_model={config.model.d_model}: {need['parameters']:.3g} parameters, {_gb(need['parameter_bytes'])} "
        f"with gradients and optimizer state; activations {_gb(need['activation_bytes'])} for "
        f"{examples_per_batch(config)} x {tokens_per_example(config)} tokens), more than the {_gb(have)} available on "
        f"{config.train.device}; make the model or train.batch_size smaller, or set train.memory_check=false to try"
    )


def _gb(nbytes: float) -> str:
    """Bytes as GB, 3 significant digits (1e15 bytes: 1e+06 GB)."""
    return f"{nbytes / 1e9:.3g} GB" if math.isfinite(nbytes) else "inf GB"
