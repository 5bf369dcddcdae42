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


def stages(bar: tqdm, prefix: str) -> tuple[Callable[[str], None], Callable[[], None]]:
    """The progress callback of a job that says each stage as it begins (bridge.comparison.evaluate_seed), and
    the call that ends the last stage.

    Parameters
    ----------
    bar : tqdm
        The job's bar (job_bar).
    prefix : str
        Put before each stage's name in the bar's description ("seed 0").

    Returns
    -------
    begin : callable
        begin(name): the stage before, if any, is finished (the bar advances by 1) and `name` is shown.
    end : callable
        end(): the last stage begun is finished.
    """
    begun = []

    def begin(name: str) -> None:
        if begun:
            bar.update(1)
        begun[:] = [name]
        bar.set_description(f"{prefix}: {name}")

    def end() -> None:
        if begun:
            bar.update(1)
        begun.clear()

    return begin, end
