"""What every task gives the training loop: a model, training batches, a loss and an evaluation."""

import dataclasses
from typing import Any

import torch

from ..config import checked
from ..errors import UsageError


class Task:
    """A training task. Subclasses set `name`, `Options` (a dataclass of the [task] keys they accept)
    and `metrics` (what `evaluate` returns), and implement the four methods below."""

    name = ""
    Options = None
    metrics = ("val_loss",)
    tokens_per_example = None  # tokens per example for tokens/s, where that means something

    def __init__(self, config):
        self.config = config
        self.options = self.check(config)

    @classmethod
    def check(cls, config) -> Any:
        """The task's Options from config.task.options, every value's type and range checked against the config,
        without reading or building any data (tasks.check_config runs it before the memory estimate; UsageError
        naming the key; docs/guide/training.md, "Limits"). Subclasses add their ranges."""
        return parse_options(cls.Options, config.task.options, cls.name)

    @classmethod
    def data_parts(cls, config, options: Any) -> dict[str, int]:
        """{what the task allocates besides the model and its activations, naming the key that sets it: bytes},
        an upper bound from the checked `options` (memory.check_memory adds them to its estimate)."""
        return {}

    def build_model(self):
        """The model, its parameters initialised from the global torch RNG."""
        raise NotImplementedError

    def train_batch(self, generator):
        """One training batch (a tuple of CPU tensors) drawn with `generator`."""
        raise NotImplementedError

    def loss(self, model, batch):
        """(mean loss, logits of the predicted positions) for a batch already on the device."""
        raise NotImplementedError

    def evaluate(self, model, generator, device):
        """{metric: value} for every name in `metrics`."""
        raise NotImplementedError


def parse_options(cls, values, task):
    """cls(**values) with each value type-checked; unknown keys name the accepted ones."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(values) - set(fields)
    if unknown:
        accepted = ", ".join(["name", "data", *fields])
        raise UsageError(
            f"unknown key(s) {', '.join(f'task.{k}' for k in sorted(unknown))} for task {task}; "
            f"[task] accepts {accepted}"
        )
    return cls(**{key: checked(f"task.{key}", value, fields[key].type) for key, value in values.items()})


def sample_rows(n, batch_size, generator):
    """batch_size distinct indices into n rows (all n, in order, when batch_size is 0 or >= n)."""
    if batch_size == 0 or batch_size >= n:
        return torch.arange(n)
    return torch.randperm(n, generator=generator)[:batch_size]


@torch.no_grad()
def classification_metrics(task, model, splits, device, batch_size=4096):
    """{f"{split}_loss", f"{split}_acc"} over whole splits {split: (inputs, targets)}."""
    out = {}
    for split, (inputs, targets) in splits.items():
        total_loss, correct = 0.0, 0
        for start in range(0, len(targets), batch_size):
            batch = tuple(t[start : start + batch_size].to(device) for t in (inputs, targets))
            loss, logits = task.loss(model, batch)
            total_loss += loss.item() * len(batch[1])
            correct += (logits.argmax(-1) == batch[1]).sum().item()
        out[f"{split}_loss"], out[f"{split}_acc"] = total_loss / len(targets), correct / len(targets)
    return out
