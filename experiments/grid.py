"""The runs a sweep or a compare makes: their seeds, their directory names, and the checks each run's config
passes before the first run starts (so a typo in a grid fails at once, not after hours of training)."""

from urllib.parse import quote

from . import rundir
from .errors import UsageError
from .tasks import TASKS
from .tasks.base import parse_options


def check_names(config):
    """What building the run would reject at once: an unknown task or task option (load_config has checked the
    residual and kernel names)."""
    if config.task.name not in TASKS:
        raise UsageError(f"unknown task {config.task.name!r}; choose one of {', '.join(TASKS)}")
    parse_options(TASKS[config.task.name].Options, config.task.options, config.task.name)


def run_name(assignment, seed):
    """ "residual=belief,seed=0"; characters that cannot be in a directory name are %-escaped.

    The name is one path component inside OUT whatever the grid values (`/` and `\\` are escaped, and
    it always holds an `=`, so it is never `.` or `..`); a name over NAME_MAX bytes is a UsageError."""
    parts = [f"{key.split('.')[-1]}={value}" for key, value in assignment.items()] + [f"seed={seed}"]
    name = quote(",".join(parts), safe="=,+-.@")
    if len(name.encode()) > rundir.NAME_MAX:
        raise UsageError(
            f"the run name {name[:40]}... is {len(name.encode())} bytes, over the {rundir.NAME_MAX} a "
            "directory name may hold; use shorter grid values"
        )
    return name


def parse_seeds(text):
    """Comma-separated distinct seeds >= 0 (--seeds of sweep and compare)."""
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds expects integers separated by commas, got {text!r}") from None
    if not values or len(set(values)) != len(values) or min(values) < 0:
        raise UsageError(f"--seeds expects distinct integers >= 0, got {text!r}")
    return values
