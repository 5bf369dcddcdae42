"""Progress over whole jobs: the bar of a sweep (a run a step) and of a compare (a seed's trainings and evaluation
stages a step), above the bar of the training run in progress (docs/guide/runs.md, "Progress").

Like train's bar, each is written to standard error, a terminal or not, and is silent under --no-progress. A
resumed job starts its bar at what had finished, and its rate and time left count only the work done now.
"""

from collections.abc import Callable

from tqdm import tqdm


def job_bar(total: int, done: int, unit: str, enabled: bool, description: str = "") -> tqdm:
    """The bar of a whole job of `total` steps, `done` of them finished before it starts.

    Parameters
    ----------
    total : int
        The job's steps.
    done : int
        Those already finished (a resumed job): the bar starts there, and its rate and estimated time left count
        only the steps run from now on.
    unit : str
        What one step is ("run", "stage").
    enabled : bool
        False for --no-progress: the bar writes nothing.
    description : str
        What it shows first, before its bar ("run 1 of 15").

    Returns
    -------
    tqdm
        Update it by 1 per finished step; close it at the end.
    """
    return tqdm(total=total, initial=done, unit=unit, disable=not enabled, desc=description, dynamic_ncols=True)


def stages(bar: tqdm) -> Callable[[int, str | None], None]:
    """The progress callback of bridge.comparison.compare, whose seeds say each evaluation stage as it begins.

    Parameters
    ----------
    bar : tqdm
        The job's bar (job_bar).

    Returns
    -------
    callable
        tell(seed, stage): the stage begun before, if any, is finished (the bar advances by 1) and "seed S: stage"
        is shown; tell(seed, None): the seed's last stage is finished.
    """
    begun = False

    def tell(seed: int, stage: str | None) -> None:
        nonlocal begun
        if begun:
            bar.update(1)
        begun = stage is not None
        if stage is not None:
            bar.set_description(f"seed {seed}: {stage}")

    return tell
