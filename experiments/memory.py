"""The memory a training config needs, estimated from its sizes before anything is built (docs/guide/training.md,
"Memory and limits").

    parameters   float32, four copies (weights, gradients, AdamW's two moments):
                 transformer   n_layer (d (2 w_k + 4 w_v) + 8 d^2) + (vocab + tokens) d, w_k = w_v = d_model
                               unless model.send_width = w sets w_k = w // 2, w_v = w - w_k (attention's
                               projections, W^o and W^s, and the MLP)
                 convex        max(gates, 1) p tokens d (Z) + gates (tokens + d) (the gates) + (p + 2) d
                 convex_blocks the same, plus n_layer - 1 blocks of max(gates, 1) tokens^2 d^2 + gates (tokens + d)
    activations  per layer and example: transformer tokens (4 (12 d + 2 w_k + 3 w_v) + 10 n_head tokens) bytes (the
                 residual stream, q, k, v, the MLP's 4 d hidden units and their inputs kept for backward, and the
                 n_head tokens x tokens attention scores and weights); convex 8 max(gates, 1) tokens d bytes (the
                 gated features and their copy kept for backward), times n_layer and the batch
    task data    what the task allocates itself (Task.data_parts): modular's table of p^2 pairs, graph_consensus's
                 held-out graphs, char_lm's corpus and sample

The estimate errs high (it is meant to stop a `--set model.n_layer=1000000` before it allocates, not to
budget a run). `check_memory` refuses a config above the memory this machine has available (or the GPU's
free memory for a cuda device), naming each part and the field that sets it; `train.memory_check =
false` skips the check for the brave.
"""

import math
import os

import torch

from .errors import UsageError

VOCAB = 256  # embedding rows of a char_lm alphabet (modular's are p + 2)
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


def widths(attention) -> tuple[int, int]:
    """(w_k, w_v): the widths of a layer's keys and values (attention.AttentionConfig's send_width rule)."""
    if not attention.send_width:
        return attention.d_model, attention.d_model
    return attention.send_width // 2, attention.send_width - attention.send_width // 2


def parameter_count(config) -> int:
    """Parameters and buffers of the model the config builds (module docstring), an upper bound."""
    model, tokens = config.model, tokens_per_example(config)
    d, gated = model.attention.d_model, max(model.gates, 1)
    p = int(config.task.options.get("p", 97)) if config.task.name == "modular" else VOCAB
    gates = model.gates * (tokens + d)
    if model.kind == "convex":
        return gated * p * tokens * d + gates + (p + 2) * d
    if model.kind == "convex_blocks":
        blocks = (model.n_layer - 1) * (gated * tokens**2 * d**2 + gates)
        return blocks + gated * p * tokens * d + gates + (p + 2) * d
    w_k, w_v = widths(model.attention)
    vocab = max(VOCAB, p + 2)
    return model.n_layer * (d * (2 * w_k + 4 * w_v) + 8 * d**2) + (vocab + tokens) * d


def activation_bytes(config) -> int:
    """Bytes a training step keeps for backward (module docstring)."""
    model, tokens = config.model, tokens_per_example(config)
    if model.kind == "transformer":
        w_k, w_v = widths(model.attention)
        per_layer = tokens * (
            4 * (12 * model.attention.d_model + 2 * w_k + 3 * w_v) + 10 * model.attention.n_head * tokens
        )
    else:
        per_layer = 8 * max(model.gates, 1) * tokens * model.attention.d_model
    return model.n_layer * examples_per_batch(config) * per_layer


def estimate(config, data_parts: dict | None = None) -> dict:
    """{"parameters", "parameter_bytes", "activation_bytes", "data_bytes", "total_bytes", "parts"} of a training
    step (module docstring). data_parts: {what the task allocates, naming its field: bytes} (Task.data_parts);
    parts: every part, {label naming the fields that set it: bytes}."""
    model = config.model
    parameters = parameter_count(config)
    parameter_bytes = parameters * FLOAT_BYTES * PARAMETER_COPIES
    activations = activation_bytes(config)
    sizes = f"model.n_layer={model.n_layer}, model.d_model={model.attention.d_model}"
    sizes += f", model.send_width={model.attention.send_width}" if model.attention.send_width else ""
    sizes += f", model.gates={model.gates}" if model.kind != "transformer" else ""
    parts = {
        f"{sizes}: {parameters:.3g} parameters, with gradients and optimizer state": parameter_bytes,
        f"activations of {model.n_layer} layers for {examples_per_batch(config)} x {tokens_per_example(config)} "
        f"tokens (train.batch_size={config.train.batch_size})": activations,
        **(data_parts or {}),
    }
    data_bytes = sum((data_parts or {}).values())
    return {
        "parameters": parameters,
        "parameter_bytes": parameter_bytes,
        "activation_bytes": activations,
        "data_bytes": data_bytes,
        "total_bytes": parameter_bytes + activations + data_bytes,
        "parts": parts,
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


def check_memory(config, data_parts: dict | None = None) -> None:
    """UsageError, with the estimate's parts (the model's first, the others largest first), where a config needs
    more memory than its device has available; nothing where train.memory_check is false or the available memory
    is unknown.
    data_parts: what the task allocates itself (Task.data_parts)."""
    if not config.train.memory_check:
        return
    need, have = estimate(config, data_parts), available_bytes(config.train.device)
    if have is None or need["total_bytes"] <= have:
        return
    model, *others = need["parts"].items()  # the model's sizes first, then the rest largest first
    parts = [model, *sorted(((label, size) for label, size in others if size), key=lambda part: -part[1])]
    listed = "; ".join(f"{label}: {_gb(size)}" for label, size in parts)
    raise UsageError(
        f"this config needs about {_gb(need['total_bytes'])} ({listed}), more than the {_gb(have)} available on "
        f"{config.train.device}; make the largest of these smaller, or set train.memory_check=false to try"
    )


def _gb(nbytes: float) -> str:
    """Bytes as GB, 3 significant digits (1e15 bytes: 1e+06 GB), or as MB or kB below a GB or a MB."""
    if not math.isfinite(nbytes):
        return "inf GB"
    scale, unit = next(
        (scale, unit) for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")) if nbytes >= scale or unit == "kB"
    )
    return f"{nbytes / scale:.3g} {unit}"
