"""The comparison's table: every seed's mean log10 errors stacked per (row, held-out set), what seeds.csv and
compare.csv hold, and the statistics over seeds (bridge.statistics): cells with 95 % t intervals, paired ratios,
and verdicts and trends, each family Holm-adjusted (docs/guide/bridge.md, "Transformers against the classical
methods, round by round" and "Verdicts and findings")."""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..statistics import holm, one_sample_test, paired_p, powers, ratio_interval, significant, t_interval
from .rows import REFERENCES, Row, row_of
from .seeds import SeedResult
from .setting import Setting

Cell = tuple[float, float, float]  # (value, 95 % low, high)


Comparison = tuple[str, int, str, int, str]  # (first row, its round, second row, its round, held-out set)
MIN_SEEDS = 5  # fewer seeds never decide a verdict (bridge.statistics.significant)


@dataclass(frozen=True, kw_only=True)
class Tested:
    """What every test of a Holm family gives (CompareTable.verdicts, CompareTable.trends): a ratio of geometric
    means over seeds with its 95 % interval, the raw and the Holm-adjusted p, and the word it earns."""

    ratio: float
    low: float
    high: float
    p: float
    p_holm: float
    word: str


@dataclass(frozen=True)
class Verdict(Tested):
    """One paired comparison of a family (CompareTable.verdicts): ratio < 1 means `first` has the smaller error."""

    first: str
    round: int
    second: str
    round_second: int
    set: str


@dataclass(frozen=True)
class Trend(Tested):
    """How a tied model's error moves from round K to round R on one set (CompareTable.trends)."""

    method: str
    set: str


SEED_COLUMNS = ("method", "set", "seed", "round", "log10_error", "numbers_sent")


@dataclass
class CompareTable:
    """Per-seed mean log10 errors of every (method, set), stacked, and the statistics over seeds (bridge.statistics:
    t intervals of geometric means, paired ratios, verdicts; docs/guide/bridge.md, "Transformers against the
    classical methods, round by round").

    Attributes
    ----------
    seeds : list of int
        The seeds, in the order of the rows of each array.
    rounds : int
        R, the horizon of the tables.
    depth : int
        K, the transformers' depth.
    log_errors : dict
        {(method, set): (seeds, horizon) array} of mean log10 errors, NaN at rounds where the method has no value.
    rows : dict
        {method: its Row} (bridge.comparison.rows: kind, numbers sent per edge and round, ...).
    fitted : dict
        {seed: what was fitted} (tuned parameters, schedules, choices, training budgets).
    """

    seeds: list[int]
    rounds: int
    depth: int
    log_errors: dict[tuple[str, str], np.ndarray]
    rows: dict[str, Row]
    fitted: dict[Any, Any]

    @classmethod
    def from_seeds(
        cls, setting: Setting, results: dict[int, SeedResult], sent: dict[str, int | None]
    ) -> "CompareTable":
        """Stack the seeds' results into a table, each row's Row read from its label (row_of).

        Parameters
        ----------
        setting : Setting
            The comparison's setting (its rounds and depth).
        results : dict
            {seed: SeedResult}, every seed with the same rows.
        sent : dict
            {method: numbers sent per edge and round, None for the bounds}.

        Returns
        -------
        CompareTable
            The table of the seeds in `results`' order.
        """
        seeds = list(results)
        keys = list(results[seeds[0]].log_errors)
        return cls(
            seeds,
            setting.rounds,
            setting.depth,
            {k: np.stack([results[s].log_errors[k] for s in seeds]) for k in keys},
            {m: row_of(m, sent.get(m)) for m in dict.fromkeys(m for m, _ in keys)},
            {s: results[s].fitted for s in seeds},
        )

    def seed_rows(self) -> list[dict[str, Any]]:
        """The per-seed values: what compare writes to seeds.csv.

        Returns
        -------
        list of dict
            One dict per (method, set, seed, round) with a value, keys SEED_COLUMNS; log10_error as repr of the
            float, numbers_sent cumulative per edge and empty for the bounds.
        """
        out = []
        for (method, name), values in self.log_errors.items():
            sent = self.sent.get(method)
            for r in self.available(method):
                for seed, value in zip(self.seeds, values[:, r - 1], strict=False):
                    out.append(
                        {
                            "method": method,
                            "set": name,
                            "seed": seed,
                            "round": int(r),
                            "log10_error": repr(float(value)),
                            "numbers_sent": "" if sent is None else sent * int(r),
                        }
                    )
        return out

    @classmethod
    def from_seed_rows(
        cls, rows: Iterable[dict[str, Any]], rounds: int, depth: int, fitted: dict[Any, Any] | None = None
    ) -> "CompareTable":
        """The table of seed_rows() output, e.g. read back from seeds.csv with csv.DictReader.

        Parameters
        ----------
        rows : iterable of dict
            Rows with the keys SEED_COLUMNS (values as text or numbers).
        rounds : int
            R, the horizon of the tables.
        depth : int
            K, the transformers' depth.
        fitted : dict, optional
            {seed: what was fitted}; empty by default.

        Returns
        -------
        CompareTable
            The table, seeds ascending, horizon the largest round in `rows`, each row's Row read from its label
            and numbers sent (row_of).

        Raises
        ------
        ValueError
            For a label that names no row of the comparison (row_of).
        """
        rows = list(rows)
        seeds = sorted({int(row["seed"]) for row in rows})
        horizon = max(int(row["round"]) for row in rows)
        log_errors: dict[tuple[str, str], np.ndarray] = {}
        sent: dict[str, int | None] = {}
        for row in rows:
            key = (row["method"], row["set"])
            if key not in log_errors:
                log_errors[key] = np.full((len(seeds), horizon), np.nan)
            log_errors[key][seeds.index(int(row["seed"])), int(row["round"]) - 1] = float(row["log10_error"])
            sent[row["method"]] = int(row["numbers_sent"]) // int(row["round"]) if row["numbers_sent"] != "" else None
        return cls(seeds, rounds, depth, log_errors, {m: row_of(m, s) for m, s in sent.items()}, fitted or {})

    @property
    def methods(self) -> list[str]:
        """The rows' method labels, in the order they were recorded."""
        return list(dict.fromkeys(m for m, _ in self.log_errors))

    @property
    def sent(self) -> dict[str, int | None]:
        """{method: numbers sent per edge and round}, None for the bounds (unbounded)."""
        return {label: row.sent for label, row in self.rows.items()}

    @property
    def sets(self) -> list[str]:
        """The held-out sets' names, in the order they were recorded."""
        return list(dict.fromkeys(s for _, s in self.log_errors))

    @property
    def horizon(self) -> int:
        """The number of rounds each array holds (R or the largest checkpoint)."""
        return next(iter(self.log_errors.values())).shape[1]

    def available(self, method: str) -> list[int]:
        """The rounds at which a method has a value on every seed.

        Parameters
        ----------
        method : str
            A row label.

        Returns
        -------
        list of int
            The rounds, 1-based and ascending.
        """
        values = self.log_errors[(method, self.sets[0])]
        return [int(r) + 1 for r in np.flatnonzero(~np.isnan(values).any(axis=0))]

    def has(self, method: str, r: int) -> bool:
        """Whether a method has a value after round r on every seed.

        Parameters
        ----------
        method : str
            A row label.
        r : int
            The round, 1-based (outside 1..horizon: False).

        Returns
        -------
        bool
            True where every seed has a value.
        """
        return 1 <= r <= self.horizon and not np.isnan(self.log_errors[(method, self.sets[0])][:, r - 1]).any()

    def cell(self, method: str, name: str, r: int) -> Cell:
        """The geometric-mean error over seeds after round r and its 95 % t interval: 10 ** the t_interval of the
        per-seed mean log10 errors (bridge.statistics).

        Parameters
        ----------
        method : str
            A row label.
        name : str
            A held-out set.
        r : int
            The round, 1-based.

        Returns
        -------
        tuple of float
            (geometric-mean error, 95 % low, high); NaN bounds for one seed or a diverged run (inf).
        """
        value, low, high = powers(*t_interval(self.log_errors[(method, name)][:, r - 1]))
        return value, low, high

    def paired(
        self, method: str, other: str, name: str, r: int, r_other: int | None = None
    ) -> tuple[float, float, float, float]:
        """The paired comparison over seeds of `method` after round r with `other` after round r_other
        (bridge.statistics.ratio_interval and paired_p of the per-seed mean log10 errors).

        Parameters
        ----------
        method, other : str
            The two row labels.
        name : str
            A held-out set.
        r : int
            The round of `method`, 1-based.
        r_other : int, optional
            The round of `other`; r by default.

        Returns
        -------
        tuple of float
            (ratio of geometric means, 95 % low, high, p of the paired t-test); ratio < 1: `method` has the
            smaller error.
        """
        a = self.log_errors[(method, name)][:, r - 1]
        b = self.log_errors[(other, name)][:, (r if r_other is None else r_other) - 1]
        ratio, low, high = ratio_interval(a, b)
        return ratio, low, high, paired_p(a, b)

    def summary_rows(self) -> list[dict[str, Any]]:
        """The summary rows compare writes to compare.csv.

        Returns
        -------
        list of dict
            Per method, set and round with a value: the cell and its interval, the paired ratios to the two best
            classical rows at the same round (where they have a value) and the numbers sent per edge so far.
        """
        out = []
        for method, name in self.log_errors:
            for r in self.available(method):
                error, low, high = self.cell(method, name, r)
                row = {
                    "method": method,
                    "set": name,
                    "round": r,
                    "seeds": len(self.seeds),
                    "error": error,
                    "error_low": low,
                    "error_high": high,
                }
                for ref, column in zip(REFERENCES, ("vs_best_classical", "vs_best_non_diverging"), strict=True):
                    ratio, r_low, r_high, _ = (
                        self.paired(method, ref.label, name, r)
                        if (ref.label, name) in self.log_errors and self.has(ref.label, r)
                        else (math.nan,) * 4
                    )
                    row.update({column: ratio, f"{column}_low": r_low, f"{column}_high": r_high})
                sent = self.sent.get(method)
                row["sent_per_edge"] = None if sent is None else sent * r
                out.append(row)
        return out

    def verdicts(self, comparisons: Sequence[Comparison], alpha: float = 0.05) -> list[Verdict]:
        """The paired comparisons of one family, each p Holm-adjusted over the family (bridge.statistics.holm).

        Parameters
        ----------
        comparisons : sequence of (first, its round, second, its round, set)
            The family: every test one table, or the headline claims, reports.
        alpha : float
            The family-wise level.

        Returns
        -------
        list of Verdict
            In the order of `comparisons`: the ratio of geometric means first / second with its 95 % interval,
            the raw and the adjusted p, and the word: "better" / "worse" only where the adjusted p is below
            `alpha` over at least MIN_SEEDS seeds (bridge.statistics.significant), else "not separable".
        """
        tests = [self.paired(first, second, name, r, r2) for first, r, second, r2, name in comparisons]
        tested = self._holm(tests, alpha, "better", "worse", "not separable")
        return [Verdict(*comparison, **fields) for comparison, fields in zip(comparisons, tested, strict=True)]

    def trends(self, methods: Sequence[str], alpha: float = 0.05) -> list[Trend]:
        """How each tied model's error moves from its training depth K to the last round R, on every set: one
        family, Holm-adjusted.

        Parameters
        ----------
        methods : sequence of str
            Tied models' row labels.
        alpha : float
            The family-wise level.

        Returns
        -------
        list of Trend
            Per method and set: the ratio e_R / e_K of geometric means over seeds with its 95 % interval, the p of
            the one-sample t-test of the per-seed log ratios, its Holm-adjusted p and the word: "keeps falling" /
            "grows" where the adjusted p is below `alpha` over at least MIN_SEEDS seeds, else "stalls".
        """
        pairs = [(method, name) for method in methods for name in self.sets]
        tests = []
        for method, name in pairs:
            values = self.log_errors[(method, name)]
            test = one_sample_test(values[:, self.rounds - 1] - values[:, self.depth - 1])
            tests.append((*powers(test["mean"], test["low"], test["high"]), test["p"]))
        tested = self._holm(tests, alpha, "keeps falling", "grows", "stalls")
        return [Trend(method, name, **fields) for (method, name), fields in zip(pairs, tested, strict=True)]

    def _holm(
        self, tests: Sequence[tuple[float, ...]], alpha: float, below: str, above: str, neither: str
    ) -> list[dict[str, Any]]:
        """The Tested fields of one family of tests (ratio, low, high, p): each p Holm-adjusted over the family
        (bridge.statistics.holm), and the word `below` (ratio < 1) or `above` where the adjusted p is below `alpha`
        over at least MIN_SEEDS seeds (bridge.statistics.significant), else `neither`."""
        adjusted = holm([p for *_, p in tests])
        out = []
        for (ratio, low, high, p), p_holm in zip(tests, adjusted, strict=True):
            decided = significant(float(p_holm), len(self.seeds), alpha, MIN_SEEDS)
            word = (below if ratio < 1 else above) if decided else neither
            out.append({"ratio": ratio, "low": low, "high": high, "p": p, "p_holm": float(p_holm), "word": word})
        return out
