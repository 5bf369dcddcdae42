"""One seed's result (SeedResult) and its JSON form, what a cache of bridge.comparison.compare keeps per seed
(`pdmm-bridge compare`: OUT/seeds/seed=S.json), with the checks a file read back must pass: a hand-edited one is a
ValueError saying what is wrong, never a wrong table (docs/guide/bridge.md, "Transformers against the classical
methods, round by round")."""

import math
import sys
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from .rows import row_of

CURVE_COLUMNS = ("method", "seed", "step", "val_loss", "val_error")  # a learning-curve row


@dataclass
class SeedResult:
    """One seed's rows (docs/guide/bridge.md, "Transformers against the classical methods, round by round").

    Attributes
    ----------
    log_errors : dict
        {(method, set): (horizon,) array of mean log10 errors, nan at rounds a method is not shown}.
    fitted : dict
        What was tuned, fitted, chosen and trained on the way (check_fitted gives its shapes).
    curves : list of dict
        The learning curves of the transformer rows trained for the seed: rows with CURVE_COLUMNS.
    """

    log_errors: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    fitted: dict[str, Any] = field(default_factory=dict)
    curves: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self, key: Any) -> dict[str, Any]:
        """The result as JSON data, what from_json reads back.

        Parameters
        ----------
        key : object
            JSON data: what the result was computed under, compared by from_json.

        Returns
        -------
        dict
            {"key", "fitted", "curves", "log_errors": {"method<TAB>set": [number or None for nan]}}.
        """
        return {
            "key": key,
            "fitted": self.fitted,
            "curves": self.curves,
            "log_errors": {"\t".join(k): [None if math.isnan(x) else x for x in v] for k, v in self.log_errors.items()},
        }

    @classmethod
    def from_json(cls, saved: Any, key: Any, horizon: int | None = None) -> "SeedResult | None":
        """A result from to_json's data, when it was computed under `key`.

        Parameters
        ----------
        saved : object
            JSON data, checked (check_seed_json) before anything is read.
        key : object
            What the result must have been computed under.
        horizon : int or None
            The rounds every row must hold; None leaves it unchecked.

        Returns
        -------
        SeedResult or None
            None when `saved` was computed under another key.

        Raises
        ------
        ValueError
            Saying what is wrong with `saved`, or that its rows do not hold `horizon` numbers.
        """
        check_seed_json(saved)
        if saved["key"] != key:
            return None
        if horizon is not None and any(len(values) != horizon for values in saved["log_errors"].values()):
            raise ValueError(f"log_errors rows must hold {horizon} numbers, one per round")
        errors = {}
        for name, values in saved["log_errors"].items():
            method, held_out = name.split("\t")  # check_seed_json: exactly one tab
            errors[(method, held_out)] = np.array(values, dtype=float)
        return cls(errors, saved["fitted"], saved["curves"])


def _number(value: Any) -> bool:
    """An int or float, not a bool, that a float can hold (a 400-digit integer is not a number here)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (isinstance(value, float) or abs(value) <= sys.float_info.max)
    )


def _integer(value: Any) -> bool:
    """An int >= 0, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_seed_json(saved: Any) -> None:
    """ValueError unless `saved` has the shape SeedResult.to_json writes: key, fitted (check_fitted), curves (a list
    of learning-curve rows: CURVE_COLUMNS, method a string, seed and step integers, numbers) and log_errors
    (non-empty, {"method<TAB>set": [number or null]}, each method a row of the comparison: rows.row_of).

    Parameters
    ----------
    saved : object
        JSON data.

    Raises
    ------
    ValueError
        Saying what is wrong.
    """
    if not isinstance(saved, dict) or not all(key in saved for key in ("key", "fitted", "curves", "log_errors")):
        raise ValueError("expected an object with key, fitted, curves and log_errors")
    if not isinstance(saved["fitted"], dict) or not isinstance(saved["log_errors"], dict) or not saved["log_errors"]:
        raise ValueError("fitted and log_errors must be objects, log_errors not empty")
    check_fitted(saved["fitted"], "fitted")
    if not (
        isinstance(saved["curves"], list)
        and all(
            isinstance(row, dict)
            and set(CURVE_COLUMNS) <= set(row)
            and isinstance(row["method"], str)
            and all(isinstance(row[k], int) and not isinstance(row[k], bool) for k in ("seed", "step"))
            and all(row[k] is None or _number(row[k]) for k in ("val_loss", "val_error"))
            for row in saved["curves"]
        )
    ):
        raise ValueError(f"curves must be a list of objects with {', '.join(CURVE_COLUMNS)}")
    for name, values in saved["log_errors"].items():
        if len(name.split("\t")) != 2:
            raise ValueError(f"log_errors key {name!r} is not 'method<TAB>set'")
        row_of(name.split("\t")[0], None)  # a row of the comparison, or a ValueError naming it
        if not (isinstance(values, list) and all(v is None or _number(v) for v in values)):
            raise ValueError(f"log_errors {name!r} must be a list of numbers (or null)")


def check_fitted(fitted: Any, where: str) -> None:
    """ValueError naming `where` unless one seed's `fitted` has the shapes the report reads: training budgets
    {row: {steps, best_step, wall_seconds (number), stopped_by (text)}}, tuning effort {row: {instances,
    evaluations, levels (integers), stopped by (text), seconds (number)}}, fits ("NAME: fit": an object, or a
    list of them, with steps, best step and stopped by) and per-round values ("NAME per round": {round: a
    number or a [low, high] pair; a row name for the best rows' choices}).

    Parameters
    ----------
    fitted : object
        JSON data: SeedResult.fitted as it reads back.
    where : str
        Put before what is wrong in the error.

    Raises
    ------
    ValueError
        "`where`: what is wrong".
    """

    def wrong(what: str) -> NoReturn:
        raise ValueError(f"{where}: {what}")

    if not isinstance(fitted, dict):
        wrong("expected an object")
    training = fitted.get("training", {})
    if not (
        isinstance(training, dict)
        and all(
            isinstance(info, dict)
            and all(key in info for key in ("steps", "best_step"))
            and isinstance(info.get("wall_seconds"), (int, float))
            and isinstance(info.get("stopped_by"), str)
            for info in training.values()
        )
    ):
        wrong("training must map rows to {steps, best_step, wall_seconds, stopped_by}")
    effort = fitted.get("tuning effort", {})
    if not (
        isinstance(effort, dict)
        and all(
            isinstance(info, dict)
            and all(_integer(info.get(key)) for key in ("instances", "evaluations", "levels"))
            and isinstance(info.get("stopped by"), str)
            and isinstance(info.get("seconds"), (int, float))
            for info in effort.values()
        )
    ):
        wrong("tuning effort must map rows to {instances, evaluations, levels (integers), stopped by, seconds}")
    for key, value in fitted.items():
        if key.endswith(": fit"):
            fits = value if isinstance(value, list) else [value]
            if not all(
                isinstance(fit, dict)
                and all(k in fit for k in ("steps", "best step"))
                and isinstance(fit.get("stopped by"), str)
                for fit in fits
            ):
                wrong(f"{key!r} must be an object (or a list of them) with steps, best step and stopped by")
        if key.endswith(" per round") and not (
            isinstance(value, dict)
            and all(
                isinstance(v, str)
                if key.startswith("best")
                else isinstance(v, (int, float))
                or isinstance(v, list)
                and len(v) == 2
                and all(isinstance(x, (int, float)) for x in v)
                for v in value.values()
            )
        ):
            wrong(f"{key!r} must map rounds to {'row names' if key.startswith('best') else 'numbers or [low, high]'}")
