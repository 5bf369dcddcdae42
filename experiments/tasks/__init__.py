"""The task registry: name -> Task class. Other packages add theirs with `register`."""

from ..common import UsageError
from ..memory import check_memory
from .base import Task
from .char_lm import CharLM
from .digits import Digits
from .graph_consensus import GraphConsensus
from .modular import Modular

TASKS = {}


def register(cls):
    """Add a Task subclass under cls.name (usable as a class decorator)."""
    TASKS[cls.name] = cls
    return cls


def build_task(config):
    """The task named by config.task.name, set up from the config, after check_memory has estimated what the
    config needs (experiments/memory.py): a task may sample its held-out data here already."""
    if config.task.name not in TASKS:
        raise UsageError(f"unknown task {config.task.name!r}; choose one of {', '.join(TASKS)}")
    check_memory(config)
    return TASKS[config.task.name](config)


for _task in (CharLM, Modular, Digits, GraphConsensus):
    register(_task)

__all__ = ["TASKS", "Task", "build_task", "register"]
