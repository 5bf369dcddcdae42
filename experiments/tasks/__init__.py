"""The task registry: name -> Task class. Other packages add theirs with `register`."""

from ..errors import UsageError
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


def task_class(config) -> type[Task]:
    """The Task class config.task.name names; UsageError naming the registered ones for another name."""
    if config.task.name not in TASKS:
        raise UsageError(f"unknown task {config.task.name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[config.task.name]


def check_config(config) -> None:
    """Everything about `config` that can be checked before anything is built or read: its task's options
    (Task.check: types and ranges) and the memory the model, a training step and the task's own data need
    (memory.check_memory with Task.data_parts); UsageError naming the key (docs/guide/training.md, "Limits")."""
    cls = task_class(config)
    check_memory(config, cls.data_parts(config, cls.check(config)))


def build_task(config):
    """The task named by config.task.name, set up from the config, after check_config has checked its options
    and estimated what it needs (experiments/memory.py): a task may sample its held-out data here already."""
    check_config(config)
    return task_class(config)(config)


for _task in (CharLM, Modular, Digits, GraphConsensus):
    register(_task)

__all__ = ["TASKS", "Task", "build_task", "check_config", "register", "task_class"]
